#!/usr/bin/env python3
"""torch_grouped.py - times torch._grouped_mm, PyTorch's grouped GEMM (for bf16
on an sm_90 GPU, CUTLASS's sm90 grouped kernel: TMA + wgmma), on problem lists
in the `gemmctl plan` format, as a peer for `gemmbench kernels`.

    python3 bench/torch_grouped.py [--reps N] [--warmup N] [--pad-m] [--json] FILE...

FILE holds one problem per line, `gemm M N K [dtype]` or `syr2k N K [dtype]
[lower|upper]`, `#` comments, dtype f32|tf32|f16|bf16 (default bf16);
`gemmbench list NAME` writes a built-in workload that way. A list runs when
every problem is a bf16 GEMM and
  - all share m, n and k (seed002): 3D x 3D, mat_a (G, m, k), mat_b (G, k, n),
    no offs;
  - all share n and k, m varies (moe): 2D x 3D, mat_a (sum m, k), mat_b
    (G, k, n), offs the cumulative m (int32, on the GPU, offs[-1] = sum m),
    each m a multiple of 16 so that every offset is one; --pad-m runs
    torch on each m rounded up to a multiple of 16 instead (the rows a
    caller of torch._grouped_mm must add: layout 2dx3d+pad), while TF/s
    still counts the list's own flops.
Any other list is skipped with a line saying why.

Layout as in BENCHMARKS.md: A is stored m x k and B n x k, both contiguous
along K. torch._grouped_mm(mat_a, mat_b, offs=..., out_dtype=torch.bfloat16)
multiplies (.., m, k) by (.., k, n), so mat_b is the transposed view of B
stored (G, n, k): strides (n*k, 1, k), "column-major" in its last two
dimensions, as PyTorch's MoE code and tests pass it (mat_a row-major, mat_b
transposed; data 16-byte aligned, k a multiple of 8 so the strides are 16-byte
multiples). The output is bf16, m x n row-major, f32 accumulation inside.
Inputs are uniform in [-1, 1).

Each call is timed with CUDA events, after --warmup calls; the median of
--reps is reported, rotating over several copies of the operands when one copy
fits in L2 twice (as gemmbench does). TF/s = 2 * sum(m*n*k) / time. The output
is checked once, problem by problem, against torch.matmul in float32 (TF32
off): max_err is the largest over the problems of max |out - ref| / max |ref|.
The peer, timed the same way: torch.bmm for equal shapes (cuBLAS strided
batched), else a loop of torch.matmul, one per problem, into slices of one
output.

Prints one line per FILE (one JSON object per line with --json). Exit status:
0, also where torch._grouped_mm is missing, no GPU is visible, or it refuses a
list (it is a peer, not a test: the line says so); 1 when a FILE cannot be read
or parsed; 2 for bad usage.
"""
import argparse
import json
import os
import sys

DTYPES = ("f32", "tf32", "f16", "bf16")


def parse_list(path):
    """Reads a problem list; returns [(kind, dtype, m, n, k)] or raises
    ValueError with "path:line: why"."""
    probs = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            tok = line.split("#", 1)[0].split()
            if not tok:
                continue
            where = "%s:%d: " % (path, lineno)
            if tok[0] not in ("gemm", "syr2k"):
                raise ValueError(where + "unknown op %r (gemm or syr2k)" % tok[0])
            nsizes = 3 if tok[0] == "gemm" else 2
            if len(tok) < 1 + nsizes:
                raise ValueError(where + "%s needs %s" % (tok[0], "M N K" if nsizes == 3 else "N K"))
            try:
                sizes = [int(t) for t in tok[1:1 + nsizes]]
            except ValueError:
                raise ValueError(where + "bad size in %r" % " ".join(tok[1:1 + nsizes]))
            if min(sizes) < 1:
                raise ValueError(where + "sizes must be positive")
            dtype = "bf16"
            seen_dtype = seen_uplo = False
            for t in tok[1 + nsizes:]:
                if t in DTYPES and not seen_dtype:
                    dtype, seen_dtype = t, True
                elif tok[0] == "syr2k" and t in ("lower", "upper") and not seen_uplo:
                    seen_uplo = True
                else:
                    raise ValueError(where + "unexpected %r" % t)
            if tok[0] == "gemm":
                probs.append(("gemm", dtype, sizes[0], sizes[1], sizes[2]))
            else:
                probs.append(("syr2k", dtype, sizes[0], sizes[0], sizes[1]))
    if not probs:
        raise ValueError("%s: no problems" % path)
    return probs


def classify(probs, pad_m=False):
    """Returns ("3d3d" or "2d3d", None), or (None, why the list is skipped)."""
    kinds = sorted(set(p[0] for p in probs))
    if kinds != ["gemm"]:
        return None, "has SYR2Ks (torch has no grouped SYR2K)"
    dtypes = sorted(set(p[1] for p in probs))
    if dtypes != ["bf16"]:
        return None, "dtype %s, not bf16 alone (torch._grouped_mm's CUTLASS kernel is bf16)" % ",".join(dtypes)
    if len(set((p[3], p[4]) for p in probs)) != 1:
        return None, "n and k differ between problems (torch._grouped_mm needs equal n and k)"
    if len(set(p[2] for p in probs)) == 1:
        return "3d3d", None
    odd = [p[2] for p in probs if p[2] % 16]
    if odd and not pad_m:
        return None, "m = %d is not a multiple of 16 (offs must be)" % odd[0]
    return "2d3d", None


class Case:
    """One copy of a list's operands on the GPU, and the calls to time."""

    def __init__(self, torch, layout, ms, n, k, gen):
        self.torch = torch
        self.layout = layout
        g = len(ms)
        dev = "cuda"
        bf16 = torch.bfloat16
        mtot = sum(ms)
        if layout == "3d3d":
            self.a = torch.empty(g, ms[0], k, device=dev, dtype=bf16).uniform_(-1, 1, generator=gen)
        else:
            self.a = torch.empty(mtot, k, device=dev, dtype=bf16).uniform_(-1, 1, generator=gen)
        # B stored (G, n, k), contiguous along K; mat_b is its transposed view.
        self.w = torch.empty(g, n, k, device=dev, dtype=bf16).uniform_(-1, 1, generator=gen)
        self.b = self.w.transpose(-2, -1)
        self.offs = None
        self.bounds = []
        if layout == "2d3d":
            ends, s = [], 0
            for m in ms:
                self.bounds.append((s, s + m))
                s += m
                ends.append(s)
            self.offs = torch.tensor(ends, device=dev, dtype=torch.int32)
            self.peer_out = torch.empty(mtot, n, device=dev, dtype=bf16)
            self.peer_args = [(self.a[s:e], self.b[i], self.peer_out[s:e])
                              for i, (s, e) in enumerate(self.bounds)]
        else:
            self.peer_out = torch.empty(g, ms[0], n, device=dev, dtype=bf16)

    def grouped(self):
        return self.torch._grouped_mm(self.a, self.b, offs=self.offs, out_dtype=self.torch.bfloat16)

    def peer(self):
        if self.layout == "3d3d":
            self.torch.bmm(self.a, self.b, out=self.peer_out)
        else:
            for a, b, out in self.peer_args:
                self.torch.matmul(a, b, out=out)

    def max_err(self, out):
        """Largest over the problems of max |out - ref| / max |ref|, ref in f32."""
        torch = self.torch
        worst = 0.0
        for i in range(self.w.shape[0]):
            if self.layout == "3d3d":
                a, o = self.a[i], out[i]
            else:
                s, e = self.bounds[i]
                a, o = self.a[s:e], out[s:e]
            ref = torch.matmul(a.float(), self.w[i].float().t())
            d = (o.float() - ref).abs().max().item()
            r = ref.abs().max().item()
            rel = d / r if r > 0 else d
            if not rel <= worst:  # NaN wins
                worst = rel
        return worst


def time_median(torch, fn, copies, warmup, reps):
    """Median milliseconds of reps calls of fn(copy), each between two CUDA
    events, after warmup calls; copies rotate."""
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    c = 0
    for _ in range(warmup):
        fn(c)
        c = (c + 1) % copies
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        e0.record()
        fn(c)
        e1.record()
        e1.synchronize()
        ms.append(e0.elapsed_time(e1))
        c = (c + 1) % copies
    ms.sort()
    return ms[len(ms) // 2]


def list_name(path):
    base = os.path.basename(path)
    return base[:-4] if base.endswith(".txt") else base


class Report:
    def __init__(self, as_json):
        self.as_json = as_json

    def note(self, text):
        """A line for people: on stdout, or on stderr with --json."""
        print("torch_grouped: " + text, file=sys.stderr if self.as_json else sys.stdout)

    def header(self, text):
        if not self.as_json:
            print("# " + text)
            print("%-12s %8s %9s %10s %8s %6s %10s %8s %7s %9s" % (
                "name", "problems", "layout", "grouped_ms", "TF/s", "peer", "peer_ms", "peer_TF", "x_peer",
                "max_err"))

    def skip(self, name, path, nprob, why):
        if self.as_json:
            print(json.dumps({"name": name, "file": path, "problems": nprob, "skipped": why}))
        else:
            print("%-12s %8s skipped: %s" % (name, nprob if nprob is not None else "-", why))
        sys.stdout.flush()

    def row(self, r):
        if self.as_json:
            print(json.dumps(r))
        else:
            print("%-12s %8d %9s %10.4f %8.1f %6s %10.4f %8.1f %7.2f %9.2e" % (
                r["name"], r["problems"], r["layout"], r["grouped_ms"], r["grouped_tfs"], r["peer"],
                r["peer_ms"], r["peer_tfs"], r["peer_ms"] / r["grouped_ms"], r["max_rel_err"]))
        sys.stdout.flush()


def run_list(torch, rep, path, probs, args, l2, gen):
    name = list_name(path)
    layout, why = classify(probs, args.pad_m)
    if layout is None:
        rep.skip(name, path, len(probs), why)
        return
    flops = 2.0 * sum(p[2] for p in probs) * probs[0][3] * probs[0][4]
    ms = [p[2] for p in probs]
    padded = layout == "2d3d" and any(m % 16 for m in ms)
    if padded:
        ms = [(m + 15) // 16 * 16 for m in ms]
    n, k = probs[0][3], probs[0][4]
    copy_bytes = 2 * (sum(ms) * k + len(ms) * n * k + sum(ms) * n)
    copies = min(16, 3 * l2 // copy_bytes + 1) if copy_bytes * 2 < l2 else 1
    cases = []
    try:
        for _ in range(copies):
            cases.append(Case(torch, layout, ms, n, k, gen))
        try:
            out = cases[0].grouped()
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError:
            raise
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as e:
            msg = str(e).strip().splitlines()
            rep.skip(name, path, len(probs), "torch._grouped_mm refused it: %s" % (msg[0] if msg else type(e).__name__))
            return
        err = cases[0].max_err(out)
        del out
        g_ms = time_median(torch, lambda c: cases[c].grouped(), copies, args.warmup, args.reps)
        p_ms = time_median(torch, lambda c: cases[c].peer(), copies, args.warmup, args.reps)
    except torch.cuda.OutOfMemoryError:
        rep.skip(name, path, len(probs), "out of GPU memory")
        return
    finally:
        cases.clear()
        torch.cuda.empty_cache()
    rep.row({
        "name": name, "file": path, "problems": len(probs),
        "layout": ("2dx3d+pad" if padded else "2dx3d") if layout == "2d3d" else "3dx3d",
        "gflop": round(flops * 1e-9, 3),
        "grouped_ms": round(g_ms, 4), "grouped_tfs": round(flops * 1e-9 / g_ms, 2),
        "max_rel_err": float("%.3g" % err), "peer": "loop" if layout == "2d3d" else "bmm",
        "peer_ms": round(p_ms, 4), "peer_tfs": round(flops * 1e-9 / p_ms, 2),
        "copies": copies, "reps": args.reps, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
    })


def main():
    ap = argparse.ArgumentParser(description="Times torch._grouped_mm on `gemmctl plan` problem lists.")
    ap.add_argument("files", nargs="+", metavar="FILE", help="problem list (`gemmbench list NAME` writes one)")
    ap.add_argument("--reps", type=int, default=20, help="timed runs, the median reported (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random inputs (default 1)")
    ap.add_argument("--pad-m", action="store_true",
                    help="run lists whose m is not a multiple of 16 with each m rounded up to one")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    args = ap.parse_args()
    if args.reps < 1 or args.warmup < 0:
        ap.error("--reps must be at least 1 and --warmup at least 0")

    lists, bad = [], 0
    for path in args.files:
        try:
            lists.append((path, parse_list(path)))
        except (OSError, ValueError) as e:
            print("torch_grouped: %s" % e, file=sys.stderr)
            bad = 1
    rep = Report(args.json)

    def skip_all(why):
        for path, probs in lists:
            rep.skip(list_name(path), path, len(probs), why)
        return bad

    try:
        import torch
    except ImportError as e:
        rep.note("cannot import torch (%s): nothing timed" % e)
        return skip_all("no torch")
    if not torch.cuda.is_available():
        rep.note("torch %s sees no CUDA device: nothing timed" % torch.__version__)
        return skip_all("no CUDA device")
    if not hasattr(torch, "_grouped_mm"):
        rep.note("torch %s has no torch._grouped_mm: nothing timed" % torch.__version__)
        return skip_all("torch %s has no torch._grouped_mm" % torch.__version__)

    # The reference is float32 proper, not TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    prop = torch.cuda.get_device_properties(0)
    l2 = getattr(prop, "L2_cache_size", 50 << 20) or (50 << 20)
    if prop.major not in (9, 10):
        rep.note("sm_%d%d: torch._grouped_mm's CUTLASS kernel is for sm_90 and sm_100; elsewhere it may "
                 "fall back to a loop of matrix products" % (prop.major, prop.minor))
    rep.header("%s (sm_%d%d, %d SMs, L2 %d MB); torch %s, CUDA %s; torch._grouped_mm vs %s; "
               "median of %d runs after %d warm-ups; TF/s = 2mnk / time; x_peer = peer_ms / grouped_ms" % (
                   prop.name, prop.major, prop.minor, prop.multi_processor_count, l2 >> 20, torch.__version__,
                   torch.version.cuda, "torch.bmm (equal shapes) or a torch.matmul loop", args.reps, args.warmup))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    for path, probs in lists:
        run_list(torch, rep, path, probs, args, l2, gen)
    return bad


if __name__ == "__main__":
    sys.exit(main())
