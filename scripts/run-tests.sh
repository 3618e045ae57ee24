#!/bin/sh
# Runs test binaries and prints one summary line: "N passed, N failed".
# Each binary is a Criterion suite or a script; --gpu marks GPU suites, which
# exit 0 with a skip notice where no GPU exists.
set -u

gpu=0
if [ "${1:-}" = "--gpu" ]; then
        gpu=1
        shift
fi
passed=0
failed=0
failures=""
for t in "$@"; do
        echo "== $t"
        if "$t" ${CRITERION_ARGS:-}; then
                passed=$((passed + 1))
        else
                failed=$((failed + 1))
                failures="$failures $t"
        fi
done
[ -n "$failures" ] && echo "failed suites:$failures"
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
