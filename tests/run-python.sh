#!/bin/sh
# Runs the Python client's suites (python/tests, unittest) against the real
# build/gemmd and build/libgemmd.so, and exits non-zero if any test fails.
# Its last line has the form of Criterion's summary, which
# scripts/run-tests.sh adds up, and each skipped test prints a [SKIP] line.
# Debian's interpreter is used on purpose: it is the one with python3-numpy.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=${GEMMD_PYTHON:-/usr/bin/python3}

if ! "$PY" -c 'import numpy' 2>/dev/null; then
        echo "run-python: $PY has no numpy (scripts/deps.sh installs python3-numpy)" >&2
        exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$PY" -m unittest discover -s python/tests -v >"$log" 2>&1
rc=$?
cat "$log"
ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$log" | tail -n 1)
skipped=$(grep -c " \.\.\. skipped " "$log")
bad=$(grep -c "^\(FAIL\|ERROR\): " "$log")
grep " \.\.\. skipped " "$log" | sed 's/^\([^ ]*\) .*skipped \(.*\)$/[SKIP] \1: \2/'
if [ -z "$ran" ]; then
        echo "run-python: the suites did not run" >&2
        exit 1
fi
echo "[====] Synthesis: Tested: $ran | Passing: $((ran - skipped - bad)) | Failing: $bad | Crashing: 0"
if [ $rc -ne 0 ] && [ "$bad" -eq 0 ]; then
        exit $rc
fi
[ $rc -eq 0 ]
