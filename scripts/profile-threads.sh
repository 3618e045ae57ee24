#!/bin/bash
# Runs on a GPU machine and builds nothing: samples the daemon's threads
# with perf while gemmbench clients load it, a daemon per point, and
# summarizes each thread role's samples (scripts/perf-threads.py): which
# functions hold each thread, themselves and with what they call.
#
#   PROF=.gpubin-prof POINTS="8:8:1024 8:1:1024" [GPUS=2] [SECS=6] [PERF_AT=3] \
#       [GEMMD_ARGS="..."] scripts/profile-threads.sh
#
# PROF: the folder scripts/profile-bundle.sh made. POINTS: CLIENTS:WINDOW:MAXDIM
# per GPU; GPUS spreads the clients over that many GPUs (client i on GPU
# i % GPUS). perf records for 2 s from PERF_AT seconds into the clients'
# SECS (after their set-up: 32 clients take about 3 s to open their memory).
# Output under $OUT/profile: for each point, gemmbench's JSON, gemmctl
# stats, the summary (TAG.threads.txt) and the samples (TAG.script.gz,
# perf script with call chains) for another look.
set -u
OUT=${OUT:-profile-out}
P=$(cd "${PROF:-.gpubin-prof}" && pwd)
# shellcheck source=scripts/service-lib.sh
. "$(cd "$(dirname "$0")" && pwd)/service-lib.sh" profile
trap service_cleanup EXIT
POINTS=${POINTS:-"8:8:1024"}
GPUS=${GPUS:-1}
SECS=${SECS:-6}
PERF="env LD_LIBRARY_PATH=$P/perf/lib $P/perf/perf"
dir=$OUT/profile
mkdir -p "$dir"
$PERF record -o "$tmp/probe.data" -- true >/dev/null 2>&1 ||
        { echo "profile-threads: perf cannot record here (perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid))" >&2; exit 1; }
for p in $POINTS; do
        IFS=: read -r c w d <<<"$p"
        tag=c${c}w${w}d${d}g$GPUS
        # shellcheck disable=SC2086
        start_daemon "$P/gemmd" "$dir/$tag.log" ${GEMMD_ARGS:-} || { echo "$tag: gemmd did not start" >&2; continue; }
        devs=()
        [ "$GPUS" -gt 1 ] && devs=(--devices "$GPUS")
        "$P/gemmbench" clients --mode gemmd --socket "$tmp/gemmd.sock" --memory ipc --clients $((c * GPUS)) \
                "${devs[@]}" --window "$w" --max-dim "$d" --seconds "$SECS" --warmup 0.5 --json \
                >"$dir/$tag.json" 2>>"$dir/$tag.log" &
        bp=$!
        sleep "${PERF_AT:-$((SECS / 2))}"
        $PERF record -F 1999 -g -p "$dpid" -o "$tmp/$tag.data" -- sleep 2 >/dev/null 2>&1
        wait $bp
        "$P/gemmctl" --socket "$tmp/gemmd.sock" stats >"$dir/$tag.stats" 2>&1
        stop_daemon
        $PERF script -i "$tmp/$tag.data" -F comm,tid,ip,sym 2>/dev/null | gzip -1 >"$dir/$tag.script.gz"
        python3 "$P/perf-threads.py" "$dir/$tag.script.gz" >"$dir/$tag.threads.txt"
        echo "== $tag: $(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d.get("tflops"), "TF/s, p50", d.get("lat_p50_us"), "us")' "$dir/$tag.json")"
        head -12 "$dir/$tag.threads.txt"
done
