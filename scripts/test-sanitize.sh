#!/bin/sh
# Runs the daemon's suites against a gemmd built with a sanitizer and fails
# on any report it writes, or on any failed test.
#
#   scripts/test-sanitize.sh asan|tsan BINDIR SUITE...
#
# BINDIR holds the sanitized gemmd, gemmd-fi, gemmctl and soak (`make
# test-asan` and `make test-tsan` build them); the suites are the ordinary
# build's, whose daemons and soak come from BINDIR. Each suite runs twice:
# as the daemon starts by default, and with 3 event loops and a device
# process (`make test`'s second pass: $E2E_SECOND_PASS, which the Makefile
# sets). Reports go to BINDIR/reports/.
set -u

kind=$1
bin=$(cd "$2" && pwd)
shift 2
second=${E2E_SECOND_PASS:?"not set: run this by make test-asan or make test-tsan"}
reports=$bin/reports
rm -rf "$reports"
mkdir -p "$reports"

case $kind in
asan)
        # A small quarantine, and freed memory given back at once, keep the
        # daemon's memory within the bounds the suites hold it to; LSan looks
        # for leaks at each daemon's exit.
        export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:quarantine_size_mb=16:allocator_release_to_os_interval_ms=0"
        export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
        ;;
tsan)
        export TSAN_OPTIONS="log_path=$reports/tsan"
        ;;
*)
        echo "usage: $0 asan|tsan BINDIR SUITE..." >&2
        exit 2
        ;;
esac

export GEMMD_BIN="$bin"
st=0
echo "== $kind: the daemon as it starts by default"
scripts/run-tests.sh "$@" || st=1
echo "== $kind: $second"
env $second scripts/run-tests.sh "$@" || st=1

n=$(find "$reports" -type f | wc -l)
if [ "$n" -ne 0 ]; then
        for f in "$reports"/*; do
                echo "---- $f"
                head -n 60 "$f"
        done
        echo "$kind: $n report(s) in $reports"
        exit 1
fi
echo "$kind: no reports"
exit $st
