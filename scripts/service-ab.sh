#!/bin/bash
# Runs on a GPU machine and builds nothing: compares gemmd settings on a few
# service points, interleaved, with MPS measured in the same call. For each
# round, each variant gets a daemon of its own; every point runs
# `gemmbench clients --socket` against it, and around each point the daemon's
# threads' CPU time is read from /proc (thread names: gemmd = event loop 0,
# gemmd-loopN = the others, gemmd-workN, gemmd-doneN), so a table shows
# which thread is saturated.
#
# Variants (AB_VARIANTS, ';'-separated): NAME|GEMMD ARGS|CLIENT ENV[|GEMMD[|GEMMBENCH]],
# the last two an other daemon binary (default $GEMMD_BIN/gemmd) and an other
# client program (default $GEMMD_BIN/gemmbench, which links libgemmd), e.g.
#   "spin|--spin-us=50|GEMMD_SPIN_US=50;nospin|--spin-us=0|GEMMD_SPIN_US=0"
# Points (AB_POINTS): CLIENTS:WINDOW:MAXDIM[:MEMORY[:K]] ..., MEMORY ipc (the
# default) or shm, K every GEMM's k (gemmbench clients --k; default: drawn as
# m and n are), default "1:1:1024 8:1:1024 8:8:1024 64:8:1024". AB_ROUNDS (default 2), AB_SECONDS (default 2),
# AB_MPS=1 (default) also runs --mode mps once per round at each point of at
# most 48 clients. AB_GPUS=G spreads each point over G GPUs: CLIENTS per
# GPU, client i on GPU i % G. AB_BETA=X gives every GEMM of every run (MPS's
# too) beta X (gemmbench clients --beta: C read; default 0). AB_CHURN=N keeps N
# more client processes coming and going beside every run's clients
# (gemmbench clients --churn; MPS's too), each with its own setup.
#
# Output under $OUT: ab.jsonl (one object per run: variant, round, point,
# gemmbench's JSON, per-thread CPU %), ab.txt (a table per point),
# ab-stats.txt (gemmctl stats after each variant's round), ab.log.
# Binaries from $GEMMD_BIN (flat), else build/. GEMMD_BACKEND: the daemons' --backend
# (default cuda).
set -u
set -o pipefail

OUT=${OUT:-ab-out}
mkdir -p "$OUT"
bin=${GEMMD_BIN:-build}
VARIANTS=${AB_VARIANTS:-"spin|--spin-us=50|GEMMD_SPIN_US=50;nospin|--spin-us=0|GEMMD_SPIN_US=0"}
POINTS=${AB_POINTS:-"1:1:1024 8:1:1024 8:8:1024 64:8:1024"}
ROUNDS=${AB_ROUNDS:-2}
SECS=${AB_SECONDS:-2}
MPS=${AB_MPS:-1}
GPUS=${AB_GPUS:-1}
jsonl=$OUT/ab.jsonl
log=$OUT/ab.log
: >"$jsonl"
: >"$log"
: >"$OUT/ab-stats.txt"
# shellcheck source=scripts/service-lib.sh
. "$(cd "$(dirname "$0")" && pwd)/service-lib.sh" service-ab
trap service_cleanup EXIT
trap 'exit 130' INT TERM

# "name ticks" per thread of process $1 (utime + stime, clock ticks).
thread_ticks() {
        for t in /proc/"$1"/task/*; do
                [ -r "$t/stat" ] || continue
                # The name is in parentheses and may hold spaces.
                sed -E 's/^[0-9]+ \((.*)\) [A-Z] (([^ ]+ ){10})([0-9]+) ([0-9]+).*/\1 \4 \5/' "$t/stat" |
                        awk '{print $1, $2 + $3}'
        done
}

# Per-thread CPU % between two thread_ticks outputs over $3 seconds, as a
# JSON object; threads of one name are summed.
cpu_json() {
        python3 - "$1" "$2" "$3" <<'EOF'
import json, os, sys
hz = os.sysconf("SC_CLK_TCK")
def read(p):
    d = {}
    for line in open(p):
        n, t = line.rsplit(None, 1)
        d.setdefault(n, []).append(int(t))
    return {k: sum(v) for k, v in d.items()}
a, b, secs = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
print(json.dumps({k: round(100.0 * (b[k] - a.get(k, 0)) / hz / secs, 1) for k in sorted(b)}))
EOF
}

run_point() { # variant round clients window dim memory k env mode [gemmbench]
        local v=$1 r=$2 c=$3 w=$4 d=$5 m=$6 k=$7 env=$8 mode=$9 gb=${10:-$bin/gemmbench} t0 t1 out cpu='{}' sock=() devs=() ks=() bs=() cs=()
        out=$tmp/run.json
        [ "$mode" = gemmd ] && sock=(--socket "$tmp/gemmd.sock" --memory "$m")
        # Only where it spreads: a client program older than --devices still runs one GPU.
        [ "$GPUS" -gt 1 ] && devs=(--devices "$GPUS")
        [ "$k" -gt 0 ] && ks=(--k "$k")
        [ -n "${AB_BETA:-}" ] && bs=(--beta "$AB_BETA")
        [ -n "${AB_CHURN:-}" ] && cs=(--churn "$AB_CHURN")
        [ -n "$dpid" ] && [ "$mode" = gemmd ] && thread_ticks "$dpid" >"$tmp/t0"
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086
        env $env "$gb" clients --mode "$mode" "${sock[@]}" --clients $((c * GPUS)) \
                "${devs[@]}" "${ks[@]}" "${bs[@]}" "${cs[@]}" --window "$w" --max-dim "$d" --seconds "$SECS" --warmup 0.5 --json \
                >"$out" 2>>"$log"
        local rc=$?
        t1=$(date +%s.%N)
        if [ -n "$dpid" ] && [ "$mode" = gemmd ]; then
                thread_ticks "$dpid" >"$tmp/t1"
                cpu=$(cpu_json "$tmp/t0" "$tmp/t1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
        fi
        [ -s "$out" ] || echo '{}' >"$out"
        printf '{"variant":"%s","round":%d,"clients":%d,"window":%d,"max_dim":%d,"memory":"%s","k":%d,"exit":%d,"cpu":%s,"run":%s}\n' \
                "$v" "$r" "$c" "$w" "$d" "$m" "$k" "$rc" "$cpu" "$(tr -d '\n' <"$out")" >>"$jsonl"
}

IFS=';' read -r -a vars <<<"$VARIANTS"
for r in $(seq 1 "$ROUNDS"); do
        for spec in "${vars[@]}"; do
                IFS='|' read -r name args env dbin cbin <<<"$spec"
                # shellcheck disable=SC2086
                start_daemon "${dbin:-$bin/gemmd}" "$log" $args ||
                        echo "service-ab: $name: gemmd did not start" >>"$log"
                for p in $POINTS; do
                        IFS=: read -r c w d m k <<<"$p"
                        run_point "$name" "$r" "$c" "$w" "$d" "${m:-ipc}" "${k:-0}" "$env" gemmd "$cbin"
                done
                { echo "== $name, round $r"; "$bin/gemmctl" --socket "$tmp/gemmd.sock" stats; } \
                        >>"$OUT/ab-stats.txt" 2>&1
                stop_daemon
        done
        if [ "$MPS" = 1 ]; then
                for p in $POINTS; do
                        IFS=: read -r c w d m k <<<"$p"
                        [ "$c" -le 48 ] && run_point mps "$r" "$c" "$w" "$d" "${m:-ipc}" "${k:-0}" "" mps
                done
        fi
done

python3 - "$jsonl" >"$OUT/ab.txt" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["clients"], r["window"], r["max_dim"], r.get("memory", "ipc"), r.get("k", 0))
points = sorted({key(r) for r in rows})
for c, w, d, m, kk in points:
    beta = next((r["run"]["beta"] for r in rows if key(r) == (c, w, d, m, kk) and r["run"].get("beta")), 0)
    print(f"## {c} clients x {w} in flight, max-dim {d}{f', k {kk}' if kk else ''}{f', beta {beta:g}' if beta else ''}, {m} operands")
    print("| variant | round | TF/s | req/s | p50 us | p99 us | max us | errors | processes came and went | submit to admitted us | queue us | run us | ops/group | daemon threads CPU % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if key(r) != (c, w, d, m, kk):
            continue
        g = r["run"]
        cpu = ", ".join(f"{k} {v:g}" for k, v in r["cpu"].items() if v >= 1)
        k = lambda n: "-" if g.get(n) is None else g[n]
        print(f"| {r['variant']} | {r['round']} | {k('tflops')} | {k('req_per_s')} | {k('lat_p50_us')} "
              f"| {k('lat_p99_us')} | {k('lat_max_us')} | {k('errors')} | {k('churn_clients')} | {k('submit_to_admit_us_mean')} | {k('daemon_queue_us_mean')} | {k('daemon_run_us_mean')} "
              f"| {k('group_size_mean')} | {cpu} |")
    print()
EOF
cat "$OUT/ab.txt"
