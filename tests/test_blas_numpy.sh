#!/bin/sh
# NumPy (Debian's python3-numpy, which links libblas.so.3) routed to gemmd
# without a code change: LD_LIBRARY_PATH=build/blas and
# GEMMD_BLAS_THRESHOLD=0 against a CPU-backend gemmd this script starts.
# First a float32 `a @ b` must come out right and show up in the daemon's
# op count; then NumPy's own tests of matrix products (the matmul/dot tests
# of numpy/core/tests/test_multiarray.py, without the memory-bound
# test_huge_vectordot, which is no GEMM; and all of numpy/linalg/tests) must
# pass and fail exactly as they do with the reference BLAS.
set -u

NAME=blas_numpy
. "$(dirname "$0")/blas_daemon.sh"
py=/usr/bin/python3
ref=/usr/lib/$ma/blas
"$py" -c 'import numpy, pytest, hypothesis' 2>/dev/null ||
        fail "$py lacks numpy, pytest or hypothesis (scripts/deps.sh installs them)"
np=$("$py" -c 'import numpy, os; print(os.path.dirname(numpy.__file__))')
blas_daemon_start

export GEMMD_SOCKET="$sock" GEMMD_BLAS_FALLBACK="$ref/libblas.so.3"
ops0=$(blas_ops)
LD_LIBRARY_PATH="$bin/blas" GEMMD_BLAS_THRESHOLD=0 "$py" - <<'PY' || fail "a @ b through gemmd"
import numpy as np
rng = np.random.default_rng(1)
a = rng.uniform(-1, 1, (70, 600)).astype(np.float32)
b = rng.uniform(-1, 1, (600, 50)).astype(np.float32)
ref = a.astype(np.float64) @ b.astype(np.float64)
err = np.abs(a @ b - ref).max() / np.abs(a).max() / np.abs(b).max() / 600
assert err < 1e-6, err
print("  float32 a @ b (70x600 @ 600x50) through gemmd: relative error %.2g" % err)
PY
[ "$(blas_ops)" -gt "$ops0" ] || fail "a @ b did not reach gemmd"

# The two pytest runs of one side; the outcome of each test, sorted, in
# $1.out.
run() {
        out=$1
        shift
        env "$@" "$py" -m pytest -p no:cacheprovider -q -rA -o addopts= \
                "$np/core/tests/test_multiarray.py" -k "(matmul or dot or Matmul or Dot) and not huge" \
                >"$out.log" 2>&1
        env "$@" "$py" -m pytest -p no:cacheprovider -q -rA -o addopts= "$np/linalg/tests" \
                >>"$out.log" 2>&1
        grep -E '^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) ' "$out.log" | sed 's/ - .*//' | sort >"$out.out"
}
cd "$tmp" || exit 1
ops0=$(blas_ops)
run ref LD_LIBRARY_PATH="$ref" &
refpid=$!
run gemmd LD_LIBRARY_PATH="$bin/blas" GEMMD_BLAS_THRESHOLD=0
wait $refpid
served=$(($(blas_ops) - ops0))
[ -s ref.out ] || fail "the reference run reported nothing: $(tail -20 ref.log)"
diff ref.out gemmd.out >diff.txt || fail "outcomes differ from the reference BLAS's:
$(cat diff.txt)
$(tail -30 gemmd.log)"
[ "$served" -gt 0 ] || fail "NumPy's tests made no call that reached gemmd"
echo "  NumPy: $(grep -c '^PASSED' gemmd.out) passed, $(grep -c -v '^PASSED' gemmd.out) other, as with the reference BLAS; gemmd ran $served ops"
grep -E '^=* *[0-9]+ passed' gemmd.log | sed 's/^=* */  /; s/ =*$//'

blas_daemon_stop
echo "blas_numpy: ok"
