#!/bin/sh
# What `make demo` runs once everything is built: starts gemmd on a
# temporary socket, runs four demo clients at once against it, shows the
# daemon's statistics, multiplies two .npy files with gemmctl, and stops the
# daemon with SIGTERM, expecting exit status 0.
set -u

BUILD=$(cd "${BUILD:-build}" 2>/dev/null && pwd) || {
        echo "demo: no build directory: run make first" >&2
        exit 1
}
GEMMD=$BUILD/gemmd
GEMMCTL=$BUILD/gemmctl
CLIENT=$BUILD/demo_client
PYTHON=/usr/bin/python3
NCLIENTS=4

for b in "$GEMMD" "$GEMMCTL" "$CLIENT"; do
        if [ ! -x "$b" ]; then
                echo "demo: $b is missing: run make first" >&2
                exit 1
        fi
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/gemmd-demo.XXXXXX") || exit 1
sock=$dir/gemmd.sock
log=$dir/gemmd.log
gemmd_pid=

cleanup() {
        if [ -n "$gemmd_pid" ] && kill -0 "$gemmd_pid" 2>/dev/null; then
                kill -KILL "$gemmd_pid" 2>/dev/null
                wait "$gemmd_pid" 2>/dev/null
        fi
        rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
        echo "demo: FAILED: $*" >&2
        echo "---- gemmd log ----" >&2
        cat "$log" >&2
        echo "---- end of gemmd log ----" >&2
        exit 1
}

section() {
        printf '\n== %s\n' "$*"
}

section "starting gemmd on $sock (--backend auto: CUDA if a GPU is usable, else CPU)"
"$GEMMD" --socket "$sock" --backend auto 2>"$log" &
gemmd_pid=$!
tries=0
until "$GEMMCTL" --socket "$sock" status >/dev/null 2>&1; do
        kill -0 "$gemmd_pid" 2>/dev/null || fail "gemmd exited at start"
        tries=$((tries + 1))
        [ "$tries" -le 200 ] || fail "gemmd not ready after 10 s"
        sleep 0.05
done
"$GEMMCTL" --socket "$sock" status || fail "gemmctl status"

section "$NCLIENTS demo clients at once (GEMM and SYR2K in f32, f16, bf16; row- and column-major)"
pids=
i=1
while [ "$i" -le "$NCLIENTS" ]; do
        "$CLIENT" "$sock" "$i" >"$dir/client$i.out" 2>&1 &
        pids="$pids $!"
        i=$((i + 1))
done
failed=0
i=1
for p in $pids; do
        if ! wait "$p"; then
                failed=$((failed + 1))
        fi
        cat "$dir/client$i.out"
        i=$((i + 1))
done
[ "$failed" -eq 0 ] || fail "$failed of $NCLIENTS demo clients reported wrong results"
echo "all $NCLIENTS clients: every result matches the double-precision reference"

section "gemmctl stats"
"$GEMMCTL" --socket "$sock" stats || fail "gemmctl stats"

section "gemmctl gemm on .npy files"
if [ -x "$PYTHON" ] && "$PYTHON" -c 'import numpy' 2>/dev/null; then
        "$PYTHON" - "$dir" <<'EOF' || fail "could not write the .npy files"
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(1)
np.save(d + "/a.npy", rng.standard_normal((5, 7), dtype=np.float32))
np.save(d + "/b.npy", rng.standard_normal((7, 3), dtype=np.float32))
np.save(d + "/c.npy", rng.standard_normal((5, 3), dtype=np.float32))
EOF
        echo "\$ gemmctl gemm --alpha 2 --beta 0.5 a.npy b.npy -c c.npy -o out.npy"
        (cd "$dir" && "$GEMMCTL" --socket "$sock" gemm --alpha 2 --beta 0.5 a.npy b.npy \
                -c c.npy -o out.npy) || fail "gemmctl gemm"
        "$PYTHON" - "$dir" <<'EOF' || fail "gemmctl gemm gave a wrong result"
import sys
import numpy as np
d = sys.argv[1]
a, b, c = (np.load(d + "/" + n + ".npy") for n in "abc")
out = np.load(d + "/out.npy")
ref = 2 * a.astype(np.float64) @ b + 0.5 * c
err = np.abs(out - ref).max() / np.abs(ref).max()
np.set_printoptions(precision=4, suppress=True)
print("out.npy =")
print(out)
print("max relative error against NumPy in float64: %.1e" % err)
sys.exit(0 if out.shape == ref.shape and out.dtype == np.float32 and err < 1e-5 else 1)
EOF
else
        echo "(skipped: $PYTHON with NumPy is not available to write .npy files)"
fi

section "stopping gemmd with SIGTERM"
kill -TERM "$gemmd_pid"
wait "$gemmd_pid"
rc=$?
gemmd_pid=
[ "$rc" -eq 0 ] || fail "gemmd exited with status $rc"
echo "gemmd exited with status 0; its log:"
sed 's/^/  /' "$log"
