#!/bin/bash
# One GPU call: gemmbench calibrate, then gemmbench kernels on the
# workloads whose plans depend on the cost model, with the built-in model
# and with the calibrated one, interleaved. Output under $OUT.
set -u
OUT=${OUT:-out}
bin=${GEMMD_BIN:-.gpubin-all}
mkdir -p "$OUT"
"$bin/gemmbench" calibrate --reps 20 | tee "$OUT/calibrate.txt"
spec=$(sed -n 's/^cost: //p' "$OUT/calibrate.txt")
[ -n "$spec" ] || { echo "no cost spec"; exit 1; }
for round in 1 2; do
        for wl in ${CAL_WORKLOADS:-cutlassdoc varied moe varied-tf32 varied-f32 seed002}; do
                for v in builtin calibrated; do
                        args=()
                        [ "$v" = calibrated ] && args=(--cost "$spec")
                        echo "## round $round, $wl, $v model" >>"$OUT/kernels.txt"
                        timeout 200 "$bin/gemmbench" kernels --workload "$wl" --mode all --reps 20 "${args[@]}" \
                                >>"$OUT/kernels.txt" 2>&1
                done
        done
done
grep -E "^##|^(cutlassdoc|varied|moe|seed002)" "$OUT/kernels.txt" | awk '{print $1, $2, $3, $5}' | head -150
