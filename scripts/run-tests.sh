#!/bin/sh
# Runs test suites and ends with one summary line, "tests: N passed, N failed"
# (Criterion's own per-suite synthesis lines are added up; a suite that is
# not a Criterion binary counts as one test).
# --gpu marks GPU suites, which skip cleanly where no GPU exists.
set -u

if [ "${1:-}" = "--gpu" ]; then
        shift
fi
passed=0
failed=0
skipped=0
failures=""
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "$@"; do
        echo "== $t"
        "$t" ${CRITERION_ARGS:-} >"$log" 2>&1
        rc=$?
        cat "$log"
        syn=$(grep -a 'Synthesis: Tested:' "$log" | tail -n 1)
        if [ -n "$syn" ]; then
                # [====] Synthesis: Tested: 12 | Passing: 12 | Failing: 0 | Crashing: 0
                p=$(echo "$syn" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
                f=$(echo "$syn" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
                c=$(echo "$syn" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
                passed=$((passed + ${p:-0}))
                failed=$((failed + ${f:-0}))
                [ "${f:-0}" -eq 0 ] && [ "${c:-0}" -ne 0 ] && failed=$((failed + c))
                s=$(grep -a -c '\[SKIP\]' "$log")
                skipped=$((skipped + s))
        elif [ $rc -eq 0 ]; then
                passed=$((passed + 1))
        fi
        if [ $rc -ne 0 ]; then
                failures="$failures $t"
                [ -z "$syn" ] && failed=$((failed + 1))
        fi
done
[ -n "$failures" ] && echo "failed suites:$failures"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ -z "$failures" ]
