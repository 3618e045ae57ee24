#!/usr/bin/env python3
"""Summarizes `perf script -F comm,tid,ip,sym` output with call chains (plain
or gzipped) by thread role: for each, its share of all samples, then the
functions that held it (self) and those on its stacks (inclusive), as shares
of that role's samples. The loops gemmd-loop1.. are summed as gemmd-loopN
(loop 0 runs on the main thread, gemmd).

    perf-threads.py SCRIPT[.gz] [ROLE,ROLE...] [TOP]
"""
import collections
import gzip
import re
import sys


def stacks(path):
    """(thread name, [function, its caller, ...]) for each sample."""
    opener = gzip.open if path.endswith(".gz") else open
    comm, stack = None, []
    with opener(path, "rt", errors="replace") as f:
        for line in f:
            if not line.strip():
                if comm is not None and stack:
                    yield comm, stack
                comm, stack = None, []
            elif not line[0].isspace():
                name = line.split()[0]
                comm = re.sub(r"\d+$", "N", name) if name.startswith("gemmd-loop") else name
                stack = []
            else:
                parts = line.split(None, 1)
                sym = parts[1].strip() if len(parts) > 1 else "?"
                stack.append("?" if sym == "[unknown]" else sym)
    if comm is not None and stack:
        yield comm, stack


def main():
    path = sys.argv[1]
    roles = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else None
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    samples = collections.Counter()
    own = collections.defaultdict(collections.Counter)
    held = collections.defaultdict(collections.Counter)
    for comm, stack in stacks(path):
        samples[comm] += 1
        own[comm][stack[0]] += 1
        for fn in set(stack):
            held[comm][fn] += 1
    total = sum(samples.values()) or 1
    for comm, n in samples.most_common():
        if roles and comm not in roles:
            continue
        print(f"== {comm}: {n} samples, {100 * n / total:.1f}% of all")
        print("  self: " + ", ".join(f"{s} {100 * v / n:.1f}" for s, v in own[comm].most_common(top // 2) if s != "?"))
        print("  with callees: " + ", ".join(f"{s} {100 * v / n:.1f}" for s, v in held[comm].most_common(top) if s != "?"))


if __name__ == "__main__":
    main()
