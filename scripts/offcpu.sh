#!/bin/bash
# Where a running gemmd's threads leave the CPU: records every context switch
# of process PID for SECONDS (default 0.4) with its user stack (perf, DWARF
# unwinding), then counts the switches by thread, kind (futex: a lock or a
# condition variable; epoll or poll: waiting for work; preempt: taken off a
# runnable thread) and the first frames of the caller, most first. Run it
# while the daemon is under load; a lock that the threads hand work through
# shows as futex waits under pthread_mutex_lock and its caller.
#   scripts/offcpu.sh PID [SECONDS]    (PERF: the perf binary, default perf)
set -eu
pid=$1
secs=${2:-0.4}
perf=${PERF:-perf}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$perf" record -q -e cs -c 1 --call-graph dwarf,8192 -p "$pid" -o "$tmp/cs.data" -- sleep "$secs" >/dev/null 2>&1
"$perf" script -i "$tmp/cs.data" -F comm,tid,event,ip,sym 2>/dev/null >"$tmp/cs.txt"
python3 - "$tmp/cs.txt" <<'PY'
import collections, sys

# A switch's kind, from its kernel frames.
KINDS = (("futex", "futex"), ("epoll", "epoll"), ("do_poll", "poll"), ("do_sys_poll", "poll"),
         ("nanosleep", "sleep"), ("irqentry_exit", "preempt"), ("exit_to_user_mode", "preempt"),
         ("sched_yield", "yield"))

def kind(kframes):
    text = " ".join(kframes)
    for word, name in KINDS:
        if word in text:
            return name
    return "other"

count, total = collections.Counter(), collections.Counter()
comm, kf, uf = None, [], []

def flush():
    if comm is not None:
        k = kind(kf)
        # The C library's inner frames say less than who called it.
        frames = [f for f in uf if f != "[unknown]" and not f.startswith(("_", "lll_"))][:4]
        count[(comm, k, " < ".join(frames))] += 1
        total[(comm, k)] += 1

for line in open(sys.argv[1], errors="replace"):
    if not line.strip():
        flush()
        comm, kf, uf = None, [], []
    elif not line[0].isspace():
        comm, kf, uf = line.split()[0], [], []
    else:
        parts = line.split(None, 1)
        if len(parts) == 2:
            sym = parts[1].strip().split(" (")[0].split("+")[0]
            (kf if parts[0].startswith("ffffffff") else uf).append(sym)
flush()
print("| switches | thread | kind |")
print("|---|---|---|")
for (c, k), n in sorted(total.items(), key=lambda x: (x[0][0], -x[1])):
    print("| %d | %s | %s |" % (n, c, k))
print()
print("| switches | thread | kind | where |")
print("|---|---|---|---|")
for (c, k, where), n in count.most_common(40):
    print("| %d | %s | %s | %s |" % (n, c, k, where))
PY
