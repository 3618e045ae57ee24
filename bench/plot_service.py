#!/usr/bin/env python3
"""Tables and a figure from the JSON lines of scripts/service-sweep.sh.

    plot_service.py service.jsonl [--table FILE] [--png FILE]

Each line is one `gemmbench clients --json` point, with the sweep's own
fields: label (gemmd, gemmd-shm, cublas, mps), status (ok, failed,
unsupported, skipped). The tables (every point, then gemmd against the best
peer at each point) go to --table, or stdout. The figure has one column of
panels per (window, max-dim) that has at least two client counts: aggregate
TF/s above, p99 latency below, against the number of clients, one line per
label; points with errors are drawn as crosses and left out of the lines.
The tables are written before matplotlib is imported, so they survive its
absence.
"""
import argparse
import json
import math
import sys

ORDER = ["gemmd", "gemmd-shm", "cublas", "mps"]
PEERS = ["cublas", "mps"]


def load(path):
    points = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                p = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"plot_service: {path}:{n}: {e}", file=sys.stderr)
                continue
            p.setdefault("label", p.get("mode", "?"))
            p.setdefault("status", "ok" if p.get("errors") == 0 else "failed")
            points.append(p)
    return points


def num(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def fmt(v, spec):
    v = num(v)
    return format(v, spec) if v is not None else "-"


def dev_delta(p):
    """Growth of the device's memory.used over its value before the clients."""
    d, b = num(p.get("gpu_mem_device_mib")), num(p.get("gpu_mem_device_base_mib"))
    return d - b if d is not None and b is not None else None


def label_key(label):
    return (ORDER.index(label) if label in ORDER else len(ORDER), label)


def good(p):
    return p.get("status") == "ok" and num(p.get("tflops")) is not None


def tables(points):
    out = []
    out.append("## every point: TF/s and requests/s of the measured window; latency submit to completion; "
               "GPU MiB = clients + server processes (nvidia-smi), dev+MiB = growth of the device's memory.used")
    out.append(f"{'label':<10}{'clients':>8}{'window':>7}{'maxdim':>7}  {'status':<12}{'TF/s':>9}"
               f"{'req/s':>10}{'p50 us':>10}{'p99 us':>10}{'GPU MiB':>9}{'dev+MiB':>9}{'errors':>7}  note")
    key = lambda p: (p.get("window", 0), p.get("max_dim", 0), p.get("clients", 0), label_key(p["label"]))
    for p in sorted(points, key=key):
        note = p.get("first_error") or ""
        if p.get("clients_ok") is not None and p.get("clients_ok") != p.get("clients"):
            note = f"{p.get('clients_ok')} clients ran; " + note
        out.append(f"{p['label']:<10}{p.get('clients', 0):>8}{p.get('window', 0):>7}{p.get('max_dim', 0):>7}  "
                   f"{p.get('status', ''):<12}{fmt(p.get('tflops'), '.2f'):>9}{fmt(p.get('req_per_s'), '.0f'):>10}"
                   f"{fmt(p.get('lat_p50_us'), '.0f'):>10}{fmt(p.get('lat_p99_us'), '.0f'):>10}"
                   f"{fmt(p.get('gpu_mem_mib'), '.0f'):>9}{fmt(dev_delta(p), '.0f'):>9}"
                   f"{fmt(p.get('errors'), 'd'):>7}  {note[:70]}")

    out.append("")
    out.append("## gemmd against the peers: TF/s, x = gemmd / best peer that ran clean; p99 us; GPU MiB")
    out.append(f"{'window':>6}{'maxdim':>7}{'clients':>8} | {'gemmd':>8}{'cublas':>8}{'mps':>8}{'x':>7} |"
               f" {'gemmd':>8}{'cublas':>8}{'mps':>8} | {'gemmd':>7}{'cublas':>7}{'mps':>7}")
    by = {}
    for p in points:
        by.setdefault((p.get("window"), p.get("max_dim"), p.get("clients")), {})[p["label"]] = p
    for k in sorted(by, key=lambda k: tuple(x or 0 for x in k)):
        row = by[k]
        g = row.get("gemmd")
        if not g:
            continue

        def val(label, field, spec):
            p = row.get(label)
            if not p:
                return "-"
            s = fmt(p.get(field), spec)
            return s if good(p) else (s + "!" if s != "-" else p.get("status", "-")[:6])

        peers = [row[l]["tflops"] for l in PEERS if l in row and good(row[l])]
        ratio = "-"
        if good(g) and peers and max(peers) > 0:
            ratio = f"{g['tflops'] / max(peers):.2f}"
        out.append(f"{k[0]:>6}{k[1]:>7}{k[2]:>8} | {val('gemmd', 'tflops', '.2f'):>8}"
                   f"{val('cublas', 'tflops', '.2f'):>8}{val('mps', 'tflops', '.2f'):>8}{ratio:>7} |"
                   f" {val('gemmd', 'lat_p99_us', '.0f'):>8}{val('cublas', 'lat_p99_us', '.0f'):>8}"
                   f"{val('mps', 'lat_p99_us', '.0f'):>8} | {val('gemmd', 'gpu_mem_mib', '.0f'):>7}"
                   f"{val('cublas', 'gpu_mem_mib', '.0f'):>7}{val('mps', 'gpu_mem_mib', '.0f'):>7}")
    out.append("(a value with ! comes from a point with errors; failed/unsupported/skipped: not run clean)")
    return "\n".join(out) + "\n"


def figure(points, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.lines
    import matplotlib.ticker

    panels = {}
    for p in points:
        panels.setdefault((p.get("window"), p.get("max_dim")), set()).add(p.get("clients"))
    keys = sorted(k for k, cl in panels.items() if len(cl) >= 2 and None not in k)
    if not keys:
        print("plot_service: no panel has two client counts; no figure", file=sys.stderr)
        return
    labels = sorted({p["label"] for p in points}, key=label_key)
    colors = {l: f"C{i}" for i, l in enumerate(labels)}
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 7.5), squeeze=False)
    for col, (w, d) in enumerate(keys):
        for row, (field, name) in enumerate([("tflops", "aggregate TF/s"), ("lat_p99_us", "p99 latency (us)")]):
            ax = axes[row][col]
            for label in labels:
                pts = sorted((p for p in points if p["label"] == label and p.get("window") == w
                              and p.get("max_dim") == d), key=lambda p: p.get("clients", 0))
                ok = [(p["clients"], p[field]) for p in pts if good(p) and num(p.get(field)) and p[field] > 0]
                bad = [(p["clients"], p[field]) for p in pts
                       if not good(p) and num(p.get(field)) and p[field] > 0]
                if ok:
                    ax.plot(*zip(*ok), marker="o", color=colors[label], label=label)
                if bad:
                    ax.plot(*zip(*bad), linestyle="none", marker="x", markersize=9, color=colors[label])
            ax.set_xscale("log", base=2)
            counts = sorted(panels[(w, d)])
            ax.set_xticks(counts)
            ax.set_xticklabels([str(c) for c in counts])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel("client processes")
            if col == 0:
                ax.set_ylabel(name)
            if row == 0:
                ax.set_title(f"window {w}, m, n, k in 64..{d}")
    # Every label, not only those the first panel has (gemmd-shm runs at
    # window 8 alone).
    handles = [matplotlib.lines.Line2D([], [], marker="o", color=colors[l], label=l) for l in labels]
    axes[0][0].legend(handles=handles, loc="best", fontsize="small")
    names = {"cublas": "cuBLAS per process", "mps": "MPS"}
    peers = " vs ".join(names[l] for l in labels if l in names)
    fig.suptitle(f"bf16 GEMM service: gemmd{' vs ' + peers if peers else ''} (x: errors or unsupported)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl")
    ap.add_argument("--table", help="write the tables here (default: stdout)")
    ap.add_argument("--png", help="draw the figure here")
    a = ap.parse_args()
    points = load(a.jsonl)
    text = tables(points)
    if a.table:
        with open(a.table, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if a.png:
        figure(points, a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
