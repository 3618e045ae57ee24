#!/bin/sh
# The gemmd BLAS made the system's libblas.so.3 the way an administrator
# does it (`make install-blas-alternative`, Debian's alternatives), here
# with a private alternatives database and link so that the machine's own
# BLAS is left alone: registered beside the reference BLAS it must win in
# auto mode; NumPy, loading libblas.so.3 through that link only, must do its
# matrix products on a CPU-backend gemmd and its other BLAS calls on the
# fallback it finds by itself (the reference BLAS, never the gemmd library
# the link now names); removing it must give the reference back. Then the
# one-program way: LD_PRELOAD.
set -u

NAME=blas_install
. "$(dirname "$0")/blas_daemon.sh"
py=/usr/bin/python3
ref=/usr/lib/$ma/blas/libblas.so.3
command -v update-alternatives >/dev/null || fail "no update-alternatives"
[ -e "$ref" ] || fail "$ref missing (scripts/deps.sh installs libblas3)"

mkdir -p "$tmp/alt" "$tmp/admin" "$tmp/lib" "$tmp/gemmd"
ua="update-alternatives --altdir $tmp/alt --admindir $tmp/admin"
name=libblas.so.3-$ma
link=$tmp/lib/libblas.so.3
ours=$tmp/gemmd/libblas.so.3
install -m 0755 "$bin/blas/libblas.so.3" "$ours"
# The system before: the reference BLAS, as Debian's libblas3 registers it.
$ua --install "$link" "$name" "$ref" 10 >/dev/null || fail "registering the reference BLAS"
mk() {
        make -s -C "$root" "$1" MULTIARCH="$ma" UPDATE_ALTERNATIVES="$ua" BLAS_ALT_LINK="$link" \
                BLAS_INSTALL_PATH="$ours" >"$tmp/make.log" 2>&1 || fail "make $1: $(cat "$tmp/make.log")"
}
mk install-blas-alternative
[ "$(readlink -f "$link")" = "$ours" ] || fail "the link names $(readlink -f "$link"), not $ours"
$ua --query "$name" | grep -q "^Status: auto" || fail "not in auto mode: $($ua --query "$name")"

blas_daemon_start
# A product of each dtype and a dot product (not a GEMM: the fallback's),
# each against a long double reference; prints the BLAS the process loaded.
check_numpy() {
        "$py" - <<'PY'
import numpy as np
rng = np.random.default_rng(7)
for dt, tol in ((np.float64, 1e-12), (np.float32, 1e-4)):
    a = rng.standard_normal((300, 200)).astype(dt)
    b = rng.standard_normal((200, 150)).astype(dt)
    want = a.astype(np.longdouble) @ b.astype(np.longdouble)
    err = float(np.max(np.abs((a @ b) - want)) / np.max(np.abs(want)))
    assert err < tol, (dt, err)
x = rng.standard_normal(1000)
assert abs(x.dot(x) - float(np.sum(x.astype(np.longdouble) ** 2))) < 1e-9
for line in open("/proc/self/maps"):
    if "libblas.so.3" in line:
        print(line.split()[-1])
PY
}
export GEMMD_SOCKET="$sock" GEMMD_BLAS_THRESHOLD=0
unset GEMMD_BLAS_FALLBACK
ops0=$(blas_ops)
maps=$(LD_LIBRARY_PATH="$tmp/lib" check_numpy) || fail "NumPy through the alternative"
n=$(($(blas_ops) - ops0))
[ "$n" -ge 2 ] || fail "NumPy's products did not reach gemmd ($n ops)"
echo "$maps" | grep -qx "$ours" || fail "NumPy did not load the gemmd BLAS: $maps"
echo "$maps" | grep -qx "$(readlink -f "$ref")" || fail "the fallback is not the reference BLAS: $maps"
echo "  through the alternative: NumPy's products on gemmd ($n ops), its dot product on $(readlink -f "$ref")"

mk uninstall-blas-alternative
[ "$(readlink -f "$link")" = "$(readlink -f "$ref")" ] || fail "after removal the link names $(readlink -f "$link")"
ops0=$(blas_ops)
LD_LIBRARY_PATH="$tmp/lib" check_numpy >/dev/null || fail "NumPy on the reference BLAS after removal"
[ "$(blas_ops)" -eq "$ops0" ] || fail "gemmd still served NumPy after the alternative was removed"
echo "  removed: the reference BLAS again, gemmd not called"

ops0=$(blas_ops)
maps=$(LD_PRELOAD="$bin/blas/libblas.so.3" check_numpy) || fail "NumPy with LD_PRELOAD"
[ "$(($(blas_ops) - ops0))" -ge 2 ] || fail "LD_PRELOAD: NumPy's products did not reach gemmd"
echo "  LD_PRELOAD: NumPy's products on gemmd"
blas_daemon_stop
echo "blas_install: ok"
