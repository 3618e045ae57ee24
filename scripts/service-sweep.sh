#!/bin/bash
# Runs on a GPU machine and builds nothing: gemmd as a service against the
# peers, in one go. For every point (number of client processes, requests in
# flight per client, largest m/n/k) it runs `gemmbench clients` in each mode:
#
#   gemmd      libgemmd clients, operands in their own device memory (CUDA
#              IPC), served by one gemmd this script starts for the sweep
#   cublas     each process calls cuBLAS itself (the GPU time-slices them)
#   mps        the same processes under a private MPS control daemon
#
# then, time permitting, gemmd with shared-memory operands (gemmd-shm) at a
# few points. MPS has served at most 48 clients per GPU since Volta: the
# first MPS point with more clients is run, and if it fails, it and the
# other such points are recorded as unsupported (the others not run). A point
# that fails is recorded and the sweep goes on; once the time budget is spent
# the remaining points are recorded as skipped.
#
# Output under $OUT (default ./service-out): service.jsonl (one JSON object
# per point: gemmbench's, plus label, status, exit and wall_s, and for gemmd
# points what the host's CPUs paid: cpu_ops, the ops the daemon ran for the
# point, and cpu_us_per_op, its CPU microseconds per op by thread role and in
# all, from `gemmctl stats` before and after), service.txt
# (tables), service.png (TF/s and p99 latency against clients, one line per
# mode, one panel per window and max-dim), service.log (stderr of the runs).
# Binaries come from $GEMMD_BIN (flat: gemmbench, gemmd, gemmctl), else build/.
#
# SWEEP_GPUS=G spreads every point over G GPUs (from device 0): each
# point's CLIENTS are per GPU, so G x CLIENTS processes run, client i on GPU
# i % G (gemmbench clients --devices), one gemmd serving them all and MPS
# serving all G; the JSON's "clients" is then the total.
#
# Knobs (environment): SWEEP_CLIENTS, SWEEP_WINDOWS, SWEEP_DIMS, SWEEP_MODES,
# SWEEP_SECONDS (per point, default 2), SWEEP_WARMUP (default 0.25),
# SWEEP_BUDGET_S (default 500: points not started by then are skipped; the
# whole default sweep takes about 520 s on the H100, a 64-client point about
# 25 s of it, so it fits one 600 s call),
# GEMMD_BACKEND (default cuda), GEMMD_ARGS (extra gemmd flags).
set -u
set -o pipefail

OUT=${OUT:-service-out}
mkdir -p "$OUT"
bin=${GEMMD_BIN:-build}
gb=$bin/gemmbench
gd=$bin/gemmd
gc=$bin/gemmctl
here=$(cd "$(dirname "$0")" && pwd)
plot=$here/../bench/plot_service.py
CLIENTS=${SWEEP_CLIENTS:-1 2 4 8 16 32 64}
WINDOWS=${SWEEP_WINDOWS:-1 8}
DIMS=${SWEEP_DIMS:-256 1024}
MODES=${SWEEP_MODES:-gemmd cublas mps}
SECS=${SWEEP_SECONDS:-2}
WARM=${SWEEP_WARMUP:-0.25}
BUDGET=${SWEEP_BUDGET_S:-500}
GPUS=${SWEEP_GPUS:-1}
MPS_MAX=48
jsonl=$OUT/service.jsonl
log=$OUT/service.log
: >"$jsonl"
: >"$log"

for x in "$gb" "$gd" "$gc"; do
        [ -x "$x" ] || { echo "service-sweep: $x not found" >&2; exit 1; }
done
# shellcheck source=scripts/service-lib.sh
. "$here/service-lib.sh" service-sweep
trap service_cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
t0=$(now)
elapsed() { awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
over_budget() { awk -v e="$(elapsed)" -v b="$BUDGET" 'BEGIN { exit !(e > b) }'; }

# A line for a point that was not run (or gave no JSON).
synth() { # label mode memory clients window dim status reason
        printf '{"label":"%s","mode":"%s","memory":"%s","clients":%s,"window":%s,"max_dim":%s,"status":"%s","requests":0,"errors":null,"tflops":null,"lat_p50_us":null,"lat_p99_us":null,"first_error":"%s"}\n' \
                "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" >>"$jsonl"
}

# The daemon's JSON stats, or nothing.
stats() { "$gc" --socket "$tmp/gemmd.sock" stats --json 2>/dev/null; }

# cpu_fields BEFORE AFTER: ,"cpu_ops":N,"cpu_us_per_op":{ROLE:US,...,"total":US}
# over the ops run between two stats, or nothing.
cpu_fields() {
        python3 - "$1" "$2" <<'PY'
import json, sys
try:
    a, b = (json.loads(s)["cpu"] for s in sys.argv[1:3])
except (ValueError, KeyError):
    sys.exit(0)
ops = b["ops"] - a["ops"]
if ops > 0:
    per = {r: round((b["roles"][r]["s"] - a["roles"][r]["s"]) * 1e6 / ops, 2) + 0.0 for r in b["roles"]}
    per["total"] = round((b["total_s"] - a["total_s"]) * 1e6 / ops, 2)
    print(',"cpu_ops":%d,"cpu_us_per_op":%s' % (ops, json.dumps(per, separators=(",", ":"))))
PY
}

# point LABEL CLIENTS WINDOW DIM: runs one point and appends its line.
point() {
        local label=$1 n=$2 w=$3 d=$4 mode memory args rc start wall out before=""
        case $label in
        gemmd) mode=gemmd memory=ipc ;;
        gemmd-shm) mode=gemmd memory=shm ;;
        *) mode=$label memory=device ;;
        esac
        last_rc=1
        if over_budget; then
                synth "$label" "$mode" "$memory" "$((n * GPUS))" "$w" "$d" skipped "time budget of ${BUDGET} s spent"
                return
        fi
        args=(clients --clients $((n * GPUS)) --devices "$GPUS" --window "$w" --max-dim "$d"
              --seconds "$SECS" --warmup "$WARM" --mode "$mode" --setup-timeout 30 --json)
        if [ "$mode" = gemmd ]; then
                if [ -z "$dpid" ] || ! kill -0 "$dpid" 2>/dev/null; then
                        echo "service-sweep: (re)starting gemmd" | tee -a "$log"
                        dpid=""
                        # shellcheck disable=SC2086
                        start_daemon "$gd" "$OUT/gemmd.log" ${GEMMD_ARGS:-} || echo "service-sweep: gemmd did not start" | tee -a "$log"
                fi
                args+=(--socket "$tmp/gemmd.sock" --memory "$memory")
                before=$(stats)
        fi
        start=$(now)
        echo "== $label clients=$n window=$w max-dim=$d" >>"$log"
        out=$(timeout -k 10 $((${SECS%.*} + 90)) "$gb" "${args[@]}" 2>>"$log")
        rc=$?
        last_rc=$rc
        wall=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
        out=$(printf '%s\n' "$out" | grep '^{' | tail -n 1)
        [ -n "$before" ] && [ -n "$out" ] && out="${out%\}}$(cpu_fields "$before" "$(stats)")}"
        if [ -z "$out" ]; then
                synth "$label" "$mode" "$memory" "$((n * GPUS))" "$w" "$d" failed "no report (exit $rc)"
        else
                local st=ok
                [ $rc -ne 0 ] && st=failed
                [ $rc -ne 0 ] && [ "$mode" = mps ] && [ "$n" -gt $MPS_MAX ] && st=unsupported
                printf '%s\n' "$out" | sed "s/^{/{\"label\":\"$label\",\"status\":\"$st\",\"exit\":$rc,\"wall_s\":$wall,/" >>"$jsonl"
        fi
        printf '%-9s n=%-3s w=%s d=%-4s exit=%-3s %6s s  %s\n' "$label" "$n" "$w" "$d" "$rc" "$wall" \
                "$(printf '%s' "$out" | grep -o '"\(tflops\|lat_p50_us\|lat_p99_us\|errors\|first_error\)":\("[^"]*"\|[^,}]*\)' |
                   tr '\n' ' ')" | tee -a "$log"
}

{
        echo "# service sweep, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
        echo "# clients (per GPU, $GPUS GPU(s)): $CLIENTS; windows: $WINDOWS; max-dim: $DIMS; modes: $MODES; $SECS s per point after $WARM s warm-up"
} | tee "$OUT/service.txt"

# shellcheck disable=SC2086
start_daemon "$gd" "$OUT/gemmd.log" ${GEMMD_ARGS:-} || echo "service-sweep: gemmd did not start (see gemmd.log)" | tee -a "$log"

# The lone request: one client, one request in flight, 64^3.
for m in $MODES; do
        point "$m" 1 1 64
done
mps_many=""  # how the first MPS point over MPS_MAX clients went: ok, failed
for n in $CLIENTS; do
        for w in $WINDOWS; do
                for d in $DIMS; do
                        for m in $MODES; do
                                if [ "$m" = mps ] && [ "$n" -gt $MPS_MAX ]; then
                                        if [ "$mps_many" = failed ]; then
                                                synth mps mps device "$((n * GPUS))" "$w" "$d" unsupported \
                                                        "MPS serves at most $MPS_MAX clients per GPU (not run)"
                                                continue
                                        fi
                                        point "$m" "$n" "$w" "$d"
                                        [ -z "$mps_many" ] && { [ $last_rc -eq 0 ] && mps_many=ok || mps_many=failed; }
                                        continue
                                fi
                                point "$m" "$n" "$w" "$d"
                        done
                done
        done
done
# Shared-memory operands at a few points, if time is left.
case " $MODES " in
*" gemmd-shm "*) ;;
*)
        for n in 1 8 64; do
                for d in $DIMS; do
                        point gemmd-shm "$n" 8 "$d"
                done
        done
        ;;
esac
stop_daemon
echo "# sweep took $(elapsed) s" | tee -a "$OUT/service.txt"

# The tables go to service.txt and, last, to stdout; then the figure.
python3 "$plot" "$jsonl" --table "$tmp/table.txt" --png "$OUT/service.png" 2>>"$log" ||
        echo "service-sweep: plot_service.py failed (see service.log)" | tee -a "$OUT/service.txt"
if [ -f "$tmp/table.txt" ]; then
        cat "$tmp/table.txt" >>"$OUT/service.txt"
        cat "$tmp/table.txt"
fi
