#!/bin/sh
# Smoke test of `gemmbench clients` against a CPU-backend gemmd: client
# processes through libgemmd and shared memory, every request accounted
# for, one JSON object out. gemmbench is built only where nvcc exists; where
# it is missing this test prints a SKIP line and passes.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${GEMMD_BIN:-$root/build}
gb=$bin/gemmbench
gd=$bin/gemmd
if [ ! -x "$gb" ] || [ ! -x "$gd" ]; then
        echo "[SKIP] bench_clients: $gb or $gd not built (gemmbench needs nvcc and cuBLAS)"
        exit 0
fi
command -v python3 >/dev/null 2>&1 || { echo "bench_clients: python3 missing"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gemmbench-test-XXXXXX") || exit 1
dpid=""
cleanup() {
        [ -n "$dpid" ] && kill -KILL "$dpid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
        echo "FAIL: bench_clients: $*"
        [ -f "$tmp/gemmd.log" ] && { echo "---- gemmd log ----"; cat "$tmp/gemmd.log"; }
        exit 1
}

# check FILE EXPR: the JSON object in FILE satisfies the Python expression
# EXPR over its fields (j); prints the object's main numbers.
check() {
        python3 - "$1" "$2" <<'PY'
import json, sys
text = open(sys.argv[1]).read().strip()
j = json.loads(text)  # exactly one object: anything else fails here
ok = eval("(" + sys.argv[2] + ")", {}, {"j": j})
print("  %s/%s clients=%s window=%s: requests=%s errors=%s %.0f req/s p50=%s us p99=%s us (%s)" % (
    j["mode"], j["memory"], j["clients"], j["window"], j["requests"], j["errors"],
    j["req_per_s"], j["lat_p50_us"], j["lat_p99_us"], j["first_error"] or "no error"))
sys.exit(0 if ok else 1)
PY
}

"$gd" --socket "$tmp/s" --backend cpu >"$tmp/gemmd.log" 2>&1 &
dpid=$!
i=0
until python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$tmp/s" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 200 ] && fail "gemmd did not come up"
        kill -0 "$dpid" 2>/dev/null || fail "gemmd exited at start"
        sleep 0.05
done

# 1. Two clients, two requests in flight each, on the daemon above.
"$gb" clients --clients 2 --window 2 --max-dim 64 --seconds 1 --mode gemmd --memory shm \
        --json --socket "$tmp/s" >"$tmp/1.json" 2>"$tmp/1.err" || { cat "$tmp/1.err"; fail "run 1 exited $?"; }
check "$tmp/1.json" 'j["requests"] > 0 and j["errors"] == 0 and j["clients_ok"] == 2 and
        j["submitted"] == j["ok"] and j["lat_p50_us"] > 0 and j["daemon"] == "external"' ||
        fail "run 1: $(cat "$tmp/1.json")"

# 2. The lone request (one client, window 1), with a daemon gemmbench starts
#    and stops itself.
"$gb" clients --clients 1 --window 1 --max-dim 64 --seconds 1 --mode gemmd --backend cpu \
        --json >"$tmp/2.json" 2>"$tmp/2.err" || { cat "$tmp/2.err"; fail "run 2 exited $?"; }
check "$tmp/2.json" 'j["requests"] > 0 and j["errors"] == 0 and j["memory"] == "shm" and
        j["daemon"] == "started" and j["daemon_exit"] == 0 and j["group_size_mean"] == 1' ||
        fail "run 2: $(cat "$tmp/2.json")"

# 2b. Every GEMM of one K (--k): checked results, k in the report.
"$gb" clients --clients 1 --window 2 --max-dim 64 --k 1280 --seconds 0.5 --mode gemmd --memory shm \
        --json --socket "$tmp/s" >"$tmp/2b.json" 2>"$tmp/2b.err" || { cat "$tmp/2b.err"; fail "run 2b exited $?"; }
check "$tmp/2b.json" 'j["requests"] > 0 and j["errors"] == 0 and j["k"] == 1280' ||
        fail "run 2b: $(cat "$tmp/2b.json")"
if "$gb" clients --k 100 --json >/dev/null 2>&1; then
        fail "--k 100 (not a multiple of 64) accepted"
fi

# 2c. C read (--beta): C starts random, and each checked problem is run
#     once more and checked against A B + beta C from before that run (a
#     daemon that dropped beta * C would fail it: C's elements are 0.125-1).
for beta in 1 -0.5; do
        "$gb" clients --clients 2 --window 2 --max-dim 128 --beta $beta --seconds 0.5 --mode gemmd \
                --memory shm --json --socket "$tmp/s" >"$tmp/2c.json" 2>"$tmp/2c.err" ||
                { cat "$tmp/2c.err"; fail "run 2c (beta $beta) exited $?"; }
        check "$tmp/2c.json" 'j["requests"] > 0 and j["errors"] == 0 and j["check_errors"] == 0 and
                j["beta"] == '"$beta" || fail "run 2c (beta $beta): $(cat "$tmp/2c.json")"
done
if "$gb" clients --beta 2 --json >/dev/null 2>&1; then
        fail "--beta 2 (outside -1..1) accepted"
fi

# 2d. Processes coming and going beside the clients (--churn): each one
#     counted, none failing, every request of the clients answered.
"$gb" clients --clients 1 --window 1 --max-dim 64 --seconds 1 --churn 2 --mode gemmd --memory shm \
        --json --socket "$tmp/s" >"$tmp/2d.json" 2>"$tmp/2d.err" || { cat "$tmp/2d.err"; fail "run 2d exited $?"; }
check "$tmp/2d.json" 'j["requests"] > 0 and j["errors"] == 0 and j["churn"] == 2 and
        j["churn_clients"] >= 2 and j["churn_failed"] == 0' || fail "run 2d: $(cat "$tmp/2d.json")"

# 2e. A process coming and going that cannot connect (one session a user
#     on this daemon, which the client holds) is a failure: counted, named,
#     and the exit status is non-zero. (The one under way when the client
#     leaves may connect: at most one succeeds.)
"$gd" --socket "$tmp/s1" --backend cpu --max-user-sessions 1 >"$tmp/gemmd1.log" 2>&1 &
d1=$!
i=0
until python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$tmp/s1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 200 ] && { kill -KILL $d1; fail "the second gemmd did not come up"; }
        sleep 0.05
done
if "$gb" clients --clients 1 --window 1 --max-dim 64 --seconds 0.5 --churn 1 --mode gemmd --memory shm \
        --json --socket "$tmp/s1" >"$tmp/2e.json" 2>"$tmp/2e.err"; then
        kill -KILL $d1
        fail "run 2e succeeded with its processes refused"
fi
kill -KILL $d1
wait $d1 2>/dev/null
check "$tmp/2e.json" 'j["requests"] > 0 and j["churn_failed"] >= 1 and j["churn_clients"] <= 1 and
        "limit" in j["first_error"]' || fail "run 2e: $(cat "$tmp/2e.json")"

# 3. A failure is counted and makes the exit status non-zero.
if "$gb" clients --clients 1 --max-dim 64 --seconds 0.2 --json --socket "$tmp/none" \
        >"$tmp/3.json" 2>"$tmp/3.err"; then
        fail "run 3 succeeded without a daemon"
fi
check "$tmp/3.json" 'j["errors"] >= 1 and j["requests"] == 0' || fail "run 3: $(cat "$tmp/3.json")"

kill -TERM "$dpid"
wait "$dpid"
rc=$?
dpid=""
[ $rc -eq 0 ] || fail "gemmd exited with status $rc after SIGTERM"
echo "bench_clients: ok"
