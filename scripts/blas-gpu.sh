#!/bin/bash
# Runs on a GPU machine and builds nothing: the gemmd BLAS (libblas.so.3)
# on the CUDA backend.
#
#   1. the reference BLAS testers (tests/test_blas_reference.sh): every GEMM
#      and SYR2K call they make goes to a CUDA-backend gemmd;
#   2. gemmbench-blas, a program that only calls dgemm_/dsyr2k_ (a large
#      GEMM, a blocked SYR2K sequence as a tridiagonal reduction makes),
#      unchanged, with the CPU BLAS, with the gemmd BLAS, and the same calls
#      through cuBLAS in its own process, with the PCIe copies alone;
#   3. blasbench: from which size gemmd beats the CPU BLAS, the value for
#      GEMMD_BLAS_THRESHOLD.
#
# GEMMD_BIN: flat binaries (gemmd, gemmctl, gemmbench-blas, blasbench, and
# blas/libblas.so.3); BLAS_TESTERS: Debian's libblas-test testers, their
# inputs and the reference libblas.so.3 (/usr/lib/<multiarch>/blas where
# installed); CPU_BLAS: a folder with the CPU BLAS to compare with and fall
# back to (its libblas.so.3 and the libraries it needs, e.g. Debian's
# OpenBLAS). Output under $OUT (default ./blas-out).
#
#   GEMM_SIZES=1024,4096,8192 SYR2K_N=8192 scripts/blas-gpu.sh
set -u
set -o pipefail
OUT=${OUT:-blas-out}
mkdir -p "$OUT"
GEMMD_BIN=$(cd "${GEMMD_BIN:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
NAME=blas-gpu
# shellcheck source=tests/blas_daemon.sh
. "$here/../tests/blas_daemon.sh"
cpu=$(cd "${CPU_BLAS:?CPU_BLAS: a folder with a CPU libblas.so.3}" && pwd)
GEMM_SIZES=${GEMM_SIZES:-1024,4096,8192}
SYR2K_N=${SYR2K_N:-8192}
rc=0

nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
nproc | sed 's/^/host CPUs: /' | tee -a "$OUT/gpu.txt"

echo "== reference BLAS testers, CUDA backend" | tee "$OUT/testers.txt"
GEMMD_BIN=$bin GEMMD_BLAS_BACKEND=cuda LD_LIBRARY_PATH=$cpu \
        sh "$here/../tests/test_blas_reference.sh" 2>&1 | tee -a "$OUT/testers.txt" || rc=1

blas_daemon_start cuda

run_prog() { # label, extra gemmbench-blas options, then environment assignments
        local label=$1 extra=$2
        shift 2
        echo "== gemmbench-blas: $label" | tee -a "$OUT/blas-prog.txt"
        # shellcheck disable=SC2086
        env "$@" "$bin/gemmbench-blas" --gemm "$GEMM_SIZES" --syr2k "$SYR2K_N" --nb 256 --reps 3 \
                $extra 2>&1 | tee -a "$OUT/blas-prog.txt" || rc=1
}
: >"$OUT/blas-prog.txt"
run_prog "CPU BLAS ($cpu)" "" LD_LIBRARY_PATH="$cpu"
# The ops gemmd ran: the gemmd BLAS falls back silently, so its figures
# count only if these grew by the calls it made.
ops0=$(blas_ops)
run_prog "gemmd BLAS, and cuBLAS in the same process" --cublas LD_LIBRARY_PATH="$bin/blas:$cpu" \
        GEMMD_SOCKET="$sock" GEMMD_BLAS_FALLBACK="$cpu/libblas.so.3"
echo "gemmd ran $(($(blas_ops) - ops0)) ops for it" | tee -a "$OUT/blas-prog.txt"
echo "== blasbench: gemmd against the CPU BLAS" | tee "$OUT/blasbench.txt"
LD_LIBRARY_PATH="$bin/blas:$cpu" GEMMD_SOCKET="$sock" GEMMD_BLAS_FALLBACK="$cpu/libblas.so.3" \
        "$bin/blasbench" ${BLASBENCH_ARGS:-} 2>&1 | tee -a "$OUT/blasbench.txt" || rc=1
"$bin/gemmctl" --socket "$sock" stats >"$OUT/stats.txt" 2>&1
cp "$tmp/gemmd.log" "$OUT/gemmd.log"
exit $rc
