#!/bin/bash
# The resident kernel (gemmd --resident yes) against a launch per group,
# point by point, each on a daemon of its own: gemmbench clients (bf16,
# max-dim 1024, CUDA IPC operands, 2 s), the daemon's per-group figures
# (gemmctl stats) and, when it stops, the resident kernel's own breakdown
# (post seen to handed over, handed over to done) from its log.
# Binaries from $GEMMD_BIN (default .gpubin-all, scripts/gpu-bundle.sh).
bin=${GEMMD_BIN:-.gpubin-all}
export LD_LIBRARY_PATH=$PWD/$bin/lib
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pt in 1:1 8:1 8:8; do
  c=${pt%%:*}; w=${pt##*:}
  for v in launch resident; do
    args=(); [ $v = resident ] && args=(--resident yes)
    $bin/gemmd --socket $tmp/s --backend cuda "${args[@]}" >$tmp/log 2>&1 &
    dp=$!
    for i in $(seq 100); do [ -S $tmp/s ] && break; sleep 0.1; done
    sleep 0.5
    timeout 30 $bin/gemmbench clients --clients $c --window $w --max-dim 1024 --seconds 2 --warmup 0.5 --mode gemmd --socket $tmp/s --memory ipc --json > $tmp/out 2>>$tmp/err
    echo "$c x $w $v: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print({k:d[k] for k in d if k in ("tflops","lat_p50_us","lat_mean_us","errors","daemon_run_us_mean","daemon_queue_us_mean","group_size_mean")})' $tmp/out 2>&1)"
    $bin/gemmctl --socket $tmp/s stats 2>/dev/null | grep -E "per group|resident" 
    kill -TERM $dp; wait $dp
    grep -E "resident kernel|error|warn" $tmp/log | head -5
    rm -f $tmp/s
  done
done
