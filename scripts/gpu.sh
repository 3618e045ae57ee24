#!/bin/bash
# Runs on a GPU machine and builds nothing: the kernel tests, the daemon's
# GPU end-to-end tests, a short service run of the real daemon (its stats,
# with the idle gap between groups), then gemmbench kernels (as timed by
# default, then --queued: device time alone, then --interleaved: every row
# of a set and its peer in turn), from binaries
# built elsewhere (scripts/gpu-bundle.sh), and, where python3 has PyTorch
# with CUDA, bench/torch_grouped.py (torch._grouped_mm) on the moe and
# seed002 problem lists as a peer. Logs and tables go under $OUT
# (default ./gpu-out). Binaries are taken from $GEMMD_BIN (flat, with the
# shared libraries the tests need in $GEMMD_BIN/lib), else from build/.
# Extra arguments go to gemmbench. The many-clients sweep is
# scripts/service-sweep.sh.
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
[ -d "$bin/lib" ] && export LD_LIBRARY_PATH="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
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
if p=$(find_bin test_gpu_e2e); then
        "${lim[@]}" "$p" --verbose 2>&1 | tee "$OUT/test_gpu_e2e.log" || rc=1
else
        rc=1
fi
# The real daemon on the GPU: 8 client processes at once, then its stats.
if d=$(find_bin gemmd) && c=$(find_bin demo_client) && g=$(find_bin gemmctl); then
        sock=$(mktemp -u /tmp/gemmd-gpu.XXXXXX.sock)
        "$d" --socket "$sock" --backend cuda 2>"$OUT/daemon.log" &
        dpid=$!
        for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
        {
                pids=""
                for i in 1 2 3 4 5 6 7 8; do
                        "$c" "$sock" "$i" >"/tmp/demo-$i.txt" 2>&1 &
                        pids="$pids $!"
                done
                fails=0
                for p2 in $pids; do wait "$p2" || fails=$((fails + 1)); done
                echo "demo clients failed: $fails of 8"
                tail -n 3 /tmp/demo-1.txt
                "$g" --socket "$sock" stats
        } 2>&1 | tee "$OUT/daemon.txt"
        grep -q "demo clients failed: 0 of" "$OUT/daemon.txt" || rc=1
        kill -TERM "$dpid"
        wait "$dpid" || { echo "gemmd exited with $?" | tee -a "$OUT/daemon.txt"; rc=1; }
fi
if p=$(find_bin gemmbench); then
        "${lim[@]}" "$p" kernels "$@" 2>&1 | tee "$OUT/gemmbench.txt" || rc=1
        # The same table on device time alone (each run queued behind a
        # spin kernel): what the host's queueing adds differs between gemmd
        # and cuBLAS, most for the small workloads.
        "${lim[@]}" "$p" kernels --queued "$@" 2>&1 | tee "$OUT/gemmbench-queued.txt" || rc=1
        # And with every row of a set and its fastest peer timed in turn,
        # rep by rep: the table that compares modes (and the daemon's
        # choice) under the same clocks, which rows timed one after another
        # do not meet on a GPU at its power limit.
        "${lim[@]}" "$p" kernels --interleaved "$@" 2>&1 | tee "$OUT/gemmbench-interleaved.txt" || rc=1
else
        rc=1
fi
# torch._grouped_mm on the same problems: a peer, not a test, so a failure
# here is printed (and kept in torch_grouped.txt) but leaves rc alone.
tg="$(dirname "$0")/../bench/torch_grouped.py"
if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
        echo "gpu.sh: python3 has no PyTorch with CUDA here: torch_grouped.py not run" | tee "$OUT/torch_grouped.txt"
elif ! p=$(find_bin gemmbench) || [ ! -f "$tg" ]; then
        echo "gpu.sh: gemmbench or $tg missing: torch_grouped.py not run" | tee "$OUT/torch_grouped.txt"
else
        lists=$(mktemp -d "${TMPDIR:-/tmp}/gemmd-lists.XXXXXX")
        if "$p" list moe >"$lists/moe.txt" && "$p" list seed002 >"$lists/seed002.txt"; then
                "${lim[@]}" python3 -u "$tg" "$lists/moe.txt" "$lists/seed002.txt" 2>&1 |
                        tee "$OUT/torch_grouped.txt" ||
                        echo "gpu.sh: torch_grouped.py FAILED (exit $?), not counted in the exit status" |
                        tee -a "$OUT/torch_grouped.txt"
        else
                echo "gpu.sh: gemmbench list FAILED: torch_grouped.py not run" | tee "$OUT/torch_grouped.txt"
        fi
        rm -rf "$lists"
fi
exit $rc
