#!/bin/bash
# The resident kernel (gemmd --resident yes) against a launch per group
# (--resident no), point by point, each on a daemon of its own: gemmbench
# clients (bf16, max-dim 1024, CUDA IPC operands, 2 s), the daemon's per-group and
# per-op figures (gemmctl stats: plan and launch, the op's wait for a group, the
# time every group slot was in flight, the worker thread's time at work) and, when it stops, the host's steps per
# launched or posted group and the resident kernel's own breakdown (post seen
# to handed over, handed over to done) from its log.
# Binaries from $GEMMD_BIN (default .gpubin-all, scripts/gpu-bundle.sh);
# POINTS (default "1:1 8:1 8:8"): CLIENTS:WINDOW ...; MAXDIM (default 1024):
# gemmbench clients --max-dim; RES_ARGS: more daemon arguments for the
# resident runs (e.g. --max-groups-inflight 8); GEMMD: another daemon binary
# (e.g. a GEMMD_RTRACE build, whose log breaks "handed over to done" down);
# VARIANTS (default "launch resident"): which of the two to run.
set -u
bin=${GEMMD_BIN:-.gpubin-all}
[ -d "$bin/lib" ] && export LD_LIBRARY_PATH="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck source=scripts/service-lib.sh
. "$(dirname "$0")/service-lib.sh" gemmd-resident
trap service_cleanup EXIT
for pt in ${POINTS:-1:1 8:1 8:8}; do
        c=${pt%%:*} w=${pt##*:}
        for v in ${VARIANTS:-launch resident}; do
                args=(--resident no)
                # shellcheck disable=SC2206
                [ "$v" = resident ] && args=(--resident yes ${RES_ARGS:-})
                log=$tmp/$v-$c-$w.log
                start_daemon "${GEMMD:-$bin/gemmd}" "$log" "${args[@]}" || { echo "$c x $w $v: gemmd did not start"; continue; }
                timeout 30 "$bin/gemmbench" clients --clients "$c" --window "$w" --max-dim "${MAXDIM:-1024}" --seconds 2 \
                        --warmup 0.5 --mode gemmd --socket "$tmp/gemmd.sock" --memory ipc --json >"$tmp/out" 2>>"$log"
                echo "$c x $w $v: $(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
keys = ("tflops", "lat_p50_us", "lat_mean_us", "errors", "daemon_run_us_mean", "daemon_queue_us_mean",
        "group_size_mean")
print({k: d[k] for k in keys if k in d})' "$tmp/out" 2>&1)"
                "$bin/gemmctl" --socket "$tmp/gemmd.sock" stats 2>/dev/null |
                        grep -E "per group|per op|every group slot|worker thread|resident"
                stop_daemon
                grep -E "resident kernel|resident path|launch path|error|warn" "$log" | head -8
        done
done
