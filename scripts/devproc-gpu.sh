#!/bin/bash
# One GPU call: the GPU end-to-end tests, then the service A/B of
# --device-process yes against no with MPS.
set -u
OUT=${OUT:-out}
bin=${GEMMD_BIN:-.gpubin-all}
export LD_LIBRARY_PATH="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
t0=$(date +%s)
timeout 200 stdbuf -oL "$bin/test_gpu_e2e" --verbose > "$OUT/test_gpu_e2e.log" 2>&1
echo "test_gpu_e2e rc $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
grep -E "PASS|FAIL|Synthesis|device fault" "$OUT/test_gpu_e2e.log" | tee -a "$OUT/summary.txt"
t1=$(date +%s)
AB_VARIANTS="${AB_VARIANTS:-proc|--device-process=yes|;inproc|--device-process=no|}" \
AB_POINTS="${AB_POINTS:-1:1:1024 8:1:1024 8:8:1024 64:8:1024}" AB_ROUNDS=2 AB_SECONDS=2 \
OUT="$OUT/ab" GEMMD_BIN="$bin" timeout 330 bash scripts/service-ab.sh > "$OUT/ab-run.log" 2>&1
echo "service-ab rc $? after $(( $(date +%s) - t1 )) s" | tee -a "$OUT/summary.txt"
grep -E "^##|^\| (proc|inproc|mps)" "$OUT/ab/ab.txt" | cut -d'|' -f2-8
