#!/bin/bash
# Runs on a GPU machine and builds nothing: the GPU tests, then gemmbench,
# from binaries built elsewhere. Logs and tables go under $OUT (default
# ./gpu-out). Binaries are taken from $GEMMD_BIN (flat: test_gpu_kernels,
# gemmbench), else from build/. Extra arguments go to gemmbench.
# GEMMD_TIMEOUT=SECONDS bounds each program (a hung kernel then costs that
# much, not the whole lease); output is line-buffered so a killed program's
# progress still shows.
#
#   scripts/gpu.sh [gemmbench options]     e.g. --workload varied --reps 20
set -u
set -o pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
bin=${GEMMD_BIN:-build}
find_bin() {
        for p in "$bin/$1" "$bin/tests/$1"; do
                [ -x "$p" ] && { echo "$p"; return 0; }
        done
        echo "gpu.sh: $1 not found under $bin" >&2
        return 1
}
rc=0
lim=()
[ -n "${GEMMD_TIMEOUT:-}" ] && lim=(timeout "$GEMMD_TIMEOUT")
command -v stdbuf >/dev/null 2>&1 && lim+=(stdbuf -oL)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
        --format=csv 2>&1 | tee "$OUT/gpu.txt"
if command -v cuobjdump >/dev/null 2>&1 && gb=$(find_bin gemmbench); then
        echo "SASS tensor-core instructions in gemmbench: HMMA $(cuobjdump -sass "$gb" | grep -c HMMA)," \
             "HGMMA $(cuobjdump -sass "$gb" | grep -c HGMMA)" | tee -a "$OUT/gpu.txt"
fi
for t in test_gpu_kernels; do
        if p=$(find_bin $t); then
                "${lim[@]}" "$p" 2>&1 | tee "$OUT/$t.log" || rc=1
        else
                rc=1
        fi
done
if p=$(find_bin gemmbench); then
        "${lim[@]}" "$p" kernels "$@" 2>&1 | tee "$OUT/gemmbench.txt" || rc=1
else
        rc=1
fi
exit $rc
