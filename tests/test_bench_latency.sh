#!/bin/sh
# Smoke test of gemmbench-latency: one and two clients, inline and shared
# memory operands, against a CPU-backend gemmd the benchmark starts and
# stops; every result is checked by the benchmark, and each run must print
# one JSON object with sane numbers and exit 0.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${GEMMD_BIN:-$root/build}
gl=$bin/gemmbench-latency
[ -x "$gl" ] && [ -x "$bin/gemmd" ] || { echo "FAIL: bench_latency: $gl or $bin/gemmd not built"; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "bench_latency: python3 missing"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gemmbench-lat-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

for run in "1 inline" "2 shm"; do
        set -- $run
        "$gl" --clients "$1" --memory "$2" --requests 300 --warmup 20 --json \
                --daemon-arg --threads --daemon-arg 1 >"$tmp/out.json" 2>"$tmp/err" ||
                { cat "$tmp/out.json" "$tmp/err"; echo "FAIL: bench_latency: $run exited non-zero"; exit 1; }
        python3 - "$tmp/out.json" "$1" <<'PY' || { echo "FAIL: bench_latency: $run: $(cat "$tmp/out.json")"; exit 1; }
import json, sys
j = json.loads(open(sys.argv[1]).read())
n = int(sys.argv[2])
print("  %d client(s), %s: p50 %.1f us, p99 %.1f us" % (n, j["memory"], j["p50_us"], j["p99_us"]))
ok = (j["requests"] == 300 * n and j["errors"] == 0 and j["clients_failed"] == 0 and
      j["daemon_exit"] == 0 and 0 < j["min_us"] <= j["p50_us"] <= j["p99_us"] <= j["max_us"] and
      j["group_size_mean"] >= 1 and
      # the daemon's stamps split the round trip: both hops measured, each
      # shorter than the slowest round trip
      0 < j["submit_to_admit_us_mean"] < j["max_us"] and
      0 < j["reply_to_client_us_mean"] < j["max_us"])
sys.exit(0 if ok else 1)
PY
done
echo "bench_latency: ok"
