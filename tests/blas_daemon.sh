# Sourced (POSIX sh) by the scripts that run programs through gemmd's
# libblas.so.3 (tests/test_blas_*.sh, scripts/blas-gpu.sh): a scratch
# directory, a gemmd of their own on a socket in it, its op counts, and a
# clean stop. The caller sets NAME (its name in FAIL lines) before sourcing;
# afterwards root, bin, ma, tmp and sock are set and fail() reports with
# the daemon's log.

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${GEMMD_BIN:-$root/build}
ma=$(cc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gemmd-$NAME-XXXXXX") || exit 1
sock=$tmp/gemmd.sock
pid=
blas_cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
        rm -rf "$tmp"
}
trap blas_cleanup EXIT
fail() {
        echo "FAIL: $NAME: $*"
        [ -e "$tmp/gemmd.log" ] && { echo "--- gemmd log"; cat "$tmp/gemmd.log"; }
        exit 1
}

# Starts gemmd on $sock with backend $1 (default cpu, one compute thread)
# and waits until it answers.
blas_daemon_start() {
        if [ "${1:-cpu}" = cpu ]; then
                "$bin/gemmd" --socket "$sock" --backend cpu --threads 1 2>"$tmp/gemmd.log" &
        else
                "$bin/gemmd" --socket "$sock" --backend "$1" 2>"$tmp/gemmd.log" &
        fi
        pid=$!
        _i=0
        until "$bin/gemmctl" --socket "$sock" status >/dev/null 2>&1; do
                _i=$((_i + 1))
                [ $_i -lt 100 ] || fail "gemmd did not come up"
                sleep 0.1
        done
}

# The daemon's ops so far and its refusals as unsupported: "OPS REFUSED".
blas_counts() {
        "$bin/gemmctl" --socket "$sock" stats --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(sum(d["ops"] for d in j["devices"]), j["rejections"].get("unsupported", 0))'
}

# The daemon's ops so far.
blas_ops() {
        set -- $(blas_counts)
        echo "$1"
}

# Stops the daemon; it must exit cleanly.
blas_daemon_stop() {
        kill -TERM "$pid"
        wait "$pid"
        _rc=$?
        pid=
        [ $_rc -eq 0 ] || fail "gemmd exited with status $_rc"
}
