#!/bin/sh
# The reference BLAS testers of Debian's libblas-test (xblat3s, xblat3d,
# xscblat3, xdcblat3) run against build/blas/libblas.so.3 with
# GEMMD_BLAS_THRESHOLD=0, so every GEMM and SYR2K that computes anything
# goes to a CPU-backend gemmd this script starts. Each tester must report
# PASSED for the error exits and the computations of all six routines (both
# layouts for CBLAS), print no failure, and the daemon must have run exactly
# the calls that reach it: GEMM and SYR2K calls with m, n, k > 0 and
# alpha != 0, counted from the tester's input file, and refused none.
# On a GPU machine (scripts/blas-gpu.sh): GEMMD_BLAS_BACKEND=cuda, and
# BLAS_TESTERS a folder with the testers, their inputs and the reference
# libblas.so.3 where Debian's libblas-test is not installed.
set -u

NAME=blas_reference
. "$(dirname "$0")/blas_daemon.sh"
ref=${BLAS_TESTERS:-/usr/lib/$ma/blas}
backend=${GEMMD_BLAS_BACKEND:-cpu}
for f in "$bin/gemmd" "$bin/gemmctl" "$bin/blas/libblas.so.3" "$ref/xblat3s" "$ref/xdcblat3"; do
        [ -e "$f" ] || fail "$f missing (scripts/deps.sh installs libblas-test)"
done
blas_daemon_start "$backend"

# The calls of one tester that reach gemmd, from its input file: every
# combination of sizes (N values > 0), transposes or uplo/trans, alpha != 0
# and beta; times two layouts for CBLAS.
expected() {
        /usr/bin/python3 - "$1" "$2" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
layouts = 2 if sys.argv[2] == "cblas" else 1
i = next(k for k, l in enumerate(lines) if "VALUES OF N" in l and "NUMBER" not in l)
ns = [int(x) for x in lines[i].split()[:int(lines[i - 1].split()[0])]]
alphas = [float(x) for x in lines[i + 2].split()[:int(lines[i + 1].split()[0])]]
betas = [float(x) for x in lines[i + 4].split()[:int(lines[i + 3].split()[0])]]
nz = sum(1 for n in ns if n > 0)
na = sum(1 for a in alphas if a != 0)
gemm = nz ** 3 * 9 * na * len(betas)          # transa x transb in N, T, C
syr2k = nz ** 2 * 2 * 3 * na * len(betas)     # uplo x trans
print((gemm + syr2k) * layouts)
PY
}

export LD_LIBRARY_PATH="$bin/blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GEMMD_SOCKET="$sock" GEMMD_BLAS_THRESHOLD=0 \
        GEMMD_BLAS_FALLBACK="$ref/libblas.so.3"
cd "$tmp" || exit 1
for t in s:xblat3s:blat3.in:fortran d:xblat3d:blat3.in:fortran s:xscblat3:in3:cblas \
         d:xdcblat3:in3:cblas; do
        IFS=: read -r p prog input kind <<EOF2
$t
EOF2
        in=$ref/$p$input
        set -- $(blas_counts)
        ops0=$1 ref0=$2
        timeout 600 "$ref/$prog" <"$in" >"$prog.log" 2>&1 || fail "$prog exited non-zero: $(tail -5 "$prog.log")"
        out=$prog.log
        [ "$kind" = fortran ] && out=${p}blat3.out
        want=$(expected "$in" "$kind")
        # the daemon's count may trail its replies: wait up to 5 s for it
        i=0
        while :; do
                set -- $(blas_counts)
                ops=$(($1 - ops0)) refused=$(($2 - ref0))
                [ "$ops" -ge "$want" ] || [ $i -ge 50 ] && break
                i=$((i + 1))
                sleep 0.1
        done
        layouts=1
        [ "$kind" = cblas ] && layouts=2
        passed=$(grep -c "PASSED THE" "$out")
        if grep -E -i "fail|suspect|WAS CALLED|ERROR" "$out" | grep -v "ERROR-EXITS" | grep -q .; then
                fail "$prog: $(grep -E -i 'fail|suspect|WAS CALLED|ERROR' "$out" | grep -v ERROR-EXITS | head -5)"
        fi
        [ "$(grep -c "PASSED THE TESTS OF ERROR-EXITS" "$out")" -eq 6 ] || fail "$prog: not all error exits passed: $(cat "$out")"
        [ "$passed" -eq $((6 + 6 * layouts)) ] || fail "$prog: $passed PASSED lines, want $((6 + 6 * layouts)): $(cat "$out")"
        [ "$refused" -eq 0 ] || fail "$prog: gemmd refused $refused ops as unsupported"
        [ "$ops" -eq "$want" ] || fail "$prog: gemmd ran $ops ops, the tester makes $want such calls"
        echo "  $prog: all PASSED; gemmd ran $ops ops, the tester's $want GEMM/SYR2K calls"
done
blas_daemon_stop
echo "blas_reference: ok ($backend backend)"
