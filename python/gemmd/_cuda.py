"""PyTorch CUDA tensors as operands, through CUDA IPC (gemmd_register_device).

Each CUDA allocation that an operand lies in is registered once, whole, and
the registration is cached under the allocation's base, size and IPC handle:
PyTorch's caching allocator keeps allocations alive, so later tensors in the
same allocation cost no round trip, and memory freed and allocated again
(a different IPC handle) is registered anew. Operands are then passed as
buffer + offset. The CUDA driver (libcuda) is reached with ctypes; nothing
here runs without PyTorch and a GPU.
"""

import collections
import ctypes

import numpy as np

from . import _lib
from ._lib import BF16, F16, F32, F64, GEMM, LOWER, OP_N, OP_T, OPF_ALLOW_TF32, OPF_ROW_MAJOR, SYR2K, UPPER

_MAX_CACHED = 256  # registrations kept per client; the oldest is dropped first


class _Driver:
    """The few CUDA driver calls needed, with plain ctypes types."""

    def __init__(self):
        lib = None
        for name in ("libcuda.so.1", "libcuda.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise OSError("libcuda not found")
        self.range = lib.cuMemGetAddressRange_v2
        self.range.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                               ctypes.c_uint64]
        self.ipc = lib.cuIpcGetMemHandle
        self.ipc.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        self.ctx_get = lib.cuCtxGetCurrent
        self.ctx_get.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self.ctx_set = lib.cuCtxSetCurrent
        self.ctx_set.argtypes = [ctypes.c_void_p]
        self.retain = lib.cuDevicePrimaryCtxRetain
        self.retain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        self.dev_get = lib.cuDeviceGet
        self.dev_get.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        self.ctx_dev = lib.cuCtxGetDevice
        self.ctx_dev.argtypes = [ctypes.POINTER(ctypes.c_int)]
        for f in (self.range, self.ipc, self.ctx_get, self.ctx_set, self.retain, self.dev_get,
                  self.ctx_dev):
            f.restype = ctypes.c_int
        self.primary = {}  # ordinal -> its primary context, retained once

    def use_device(self, ordinal):
        """Makes the device's primary context (the one PyTorch uses) current
        on this thread unless a context of that device already is: the
        driver calls below look the pointer up in the current context, and
        the thread may have none, or another device's (cuda:0's while the
        tensor is on cuda:1)."""
        ctx, dev = ctypes.c_void_p(), ctypes.c_int()
        if self.ctx_get(ctypes.byref(ctx)) == 0 and ctx.value and \
                self.ctx_dev(ctypes.byref(dev)) == 0 and dev.value == ordinal:
            return
        prim = self.primary.get(ordinal)
        if prim is None:
            prim = ctypes.c_void_p()
            if self.dev_get(ctypes.byref(dev), ordinal) or \
                    self.retain(ctypes.byref(prim), dev.value):
                raise OSError("cannot use CUDA device %d's primary context" % ordinal)
            self.primary[ordinal] = prim
        self.ctx_set(prim)

    def allocation(self, ptr):
        """(base, size, 64-byte IPC handle) of the allocation holding ptr."""
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        rc = self.range(ctypes.byref(base), ctypes.byref(size), ptr)
        if rc:
            raise OSError("cuMemGetAddressRange failed (CUDA error %d)" % rc)
        handle = ctypes.create_string_buffer(64)
        rc = self.ipc(handle, base.value)
        if rc:
            raise OSError("cuIpcGetMemHandle failed (CUDA error %d): this memory cannot be "
                          "shared with gemmd (PyTorch's default allocator's memory can)" % rc)
        return base.value, size.value, handle.raw


def _strided_layout(t):
    """As _client._layout, for a tensor's strides in elements."""
    r, c = t.shape
    s0, s1 = t.stride()
    row = (c == 1 or s1 == 1) and (r == 1 or s0 >= c)
    col = (r == 1 or s0 == 1) and (c == 1 or s1 >= r)
    if row:
        return False, (s0 if r > 1 else c)
    if col:
        return True, (s1 if c > 1 else r)
    return None


class CudaOps:
    """gemm and syr2k of one Client on CUDA tensors."""

    def __init__(self, client):
        import torch
        self.torch = torch
        self.client = client
        self.drv = _Driver()
        self.cache = collections.OrderedDict()  # (device, base, size, handle) -> buffer id
        self.tdt = {F32: torch.float32, F16: torch.float16, BF16: torch.bfloat16,
                    F64: torch.float64}

    # ---- registration ----

    def _buffer(self, t, span):
        """(buffer id, offset) of tensor t's first element. Lock held."""
        cl = self.client
        ptr = t.data_ptr()
        self.drv.use_device(t.device.index)
        base, size, handle = self.drv.allocation(ptr)
        if ptr + span > base + size:
            raise ValueError("an operand reaches past its CUDA allocation")
        key = (t.device.index, base, size, handle)
        bid = self.cache.get(key)
        if bid is None:
            out = ctypes.c_uint64()
            rc = cl._lib.gemmd_register_device(cl._h, ctypes.c_void_p(base), size,
                                               ctypes.byref(out))
            if rc:
                raise cl._error(rc, "cannot register CUDA memory with gemmd")
            bid = out.value
            self.cache[key] = bid
            while len(self.cache) > _MAX_CACHED:
                _, old = self.cache.popitem(last=False)
                cl._lib.gemmd_unregister(cl._h, old)  # in-flight ops keep the daemon's mapping
        else:
            self.cache.move_to_end(key)
        return bid, ptr - base

    # ---- operands ----

    def _device(self, xs):
        dev = None
        for x in xs:
            if x is not None and isinstance(x, self.torch.Tensor) and x.is_cuda:
                if dev is not None and x.device != dev:
                    raise ValueError("CUDA operands on %s and %s" % (dev, x.device))
                dev = x.device
        return dev

    def _tensor(self, x, dev, name):
        torch = self.torch
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(np.asarray(x))
        x = x.to(dev)
        if x.dim() != 2:
            raise ValueError("%s must be a 2-D tensor, not of shape %s" % (name, tuple(x.shape)))
        return x

    def _dtypes(self, dtype, a, b):
        torch = self.torch
        from ._client import _parse_dtype
        common = torch.promote_types(a.dtype, b.dtype)
        kinds = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}
        if self.client._f64:  # float64 computes in f64 where the daemon runs it
            kinds[torch.float64] = F64
        natural = kinds.get(common)
        res = common if natural is not None else torch.float32
        gdt = natural if natural is not None else F32
        if dtype is not None:
            gdt = _parse_dtype(dtype)
        return gdt, res

    def _mat(self, t, want_t=None):
        lay = _strided_layout(t)
        if lay is None or (want_t is not None and lay[0] != want_t):
            t = (t.t().contiguous().t() if want_t else t.contiguous())
            lay = _strided_layout(t)
            if want_t is not None and lay[0] != want_t:
                lay = (want_t, t.shape[0] if want_t else t.shape[1])
        tr, ld = lay
        rows, cols = (t.shape[1], t.shape[0]) if tr else t.shape
        span = ((rows - 1) * ld + cols) * t.element_size()
        return t, tr, ld, span

    # ---- operations ----

    def gemm(self, a, b, c, alpha, beta, trans_a, trans_b, out, background, dtype, allow_tf32,
             prio):
        dev = self._device((a, b, c, out))
        a, b = self._tensor(a, dev, "a"), self._tensor(b, dev, "b")
        m, k = (a.shape[1], a.shape[0]) if trans_a else tuple(a.shape)
        k2, n = (b.shape[1], b.shape[0]) if trans_b else tuple(b.shape)
        if k != k2:
            raise ValueError("gemm: op(a) is %dx%d but op(b) is %dx%d" % (m, k, k2, n))
        gdt, res = self._dtypes(dtype, a, b)
        if allow_tf32 and gdt != F32:
            raise ValueError("allow_tf32 applies to f32")
        if m == 0 or n == 0 or k == 0:
            return self._local(c, beta, (m, n), res, dev, out, None)
        a, ta_s, lda, spa = self._mat(a.to(self.tdt[gdt]))
        b, tb_s, ldb, spb = self._mat(b.to(self.tdt[gdt]))
        op = _lib.new(_lib.Op, kind=GEMM, dtype=gdt, m=m, n=n, k=k, lda=lda, ldb=ldb,
                     alpha=float(alpha), beta=float(beta))
        op.trans_a = OP_T if bool(trans_a) != ta_s else OP_N
        op.trans_b = OP_T if bool(trans_b) != tb_s else OP_N
        op.flags = OPF_ROW_MAJOR | (OPF_ALLOW_TF32 if allow_tf32 else 0)
        return self._run(op, a, spa, b, spb, c, out, (m, n), gdt, res, False,
                         "gemm %dx%dx%d on %s" % (m, n, k, dev), prio, background)

    def syr2k(self, a, b, c, alpha, beta, trans, lower, out, background, dtype, prio):
        dev = self._device((a, b, c, out))
        a, b = self._tensor(a, dev, "a"), self._tensor(b, dev, "b")
        if a.shape != b.shape:
            raise ValueError("syr2k: a is %s but b is %s" % (tuple(a.shape), tuple(b.shape)))
        n, k = (a.shape[1], a.shape[0]) if trans else tuple(a.shape)
        gdt, res = self._dtypes(dtype, a, b)
        if n == 0 or k == 0:
            return self._local(c, beta, (n, n), res, dev, out, lower)
        a, ta_s, lda, spa = self._mat(a.to(self.tdt[gdt]))
        b, _, ldb, spb = self._mat(b.to(self.tdt[gdt]), want_t=ta_s)
        op = _lib.new(_lib.Op, kind=SYR2K, dtype=gdt, m=n, n=n, k=k, lda=lda, ldb=ldb,
                     alpha=float(alpha), beta=float(beta))
        op.trans_a = op.trans_b = OP_T if bool(trans) != ta_s else OP_N
        op.uplo = LOWER if lower else UPPER
        op.flags = OPF_ROW_MAJOR
        return self._run(op, a, spa, b, spb, c, out, (n, n), gdt, res, True,
                         "syr2k n=%d k=%d on %s" % (n, k, dev), prio, background)

    def _local(self, c, beta, shape, res, dev, out, lower):
        """beta * c (syr2k: on the triangle, the other one c's), or zeros:
        the result when there is nothing to multiply."""
        from ._client import _done
        torch = self.torch
        wide = torch.float64 if res == torch.float64 else torch.float32
        r = torch.zeros(shape, dtype=wide, device=dev)
        if c is not None:
            cc = (c if isinstance(c, torch.Tensor) else torch.as_tensor(np.asarray(c)))
            cc = cc.to(dev, wide).broadcast_to(shape)
            r = beta * cc
            if lower is not None:
                r = (torch.tril(r) + torch.triu(cc, 1)) if lower else \
                    (torch.triu(r) + torch.tril(cc, -1))
        if out is not None:
            out.copy_(r)
            return _done(out)
        return _done(r.to(res))

    def _run(self, op, a, spa, b, spb, c, out, shape, gdt, res, syr2k, what, prio, background):
        with self.torch.cuda.device(a.device):
            return self._run_here(op, a, spa, b, spb, c, out, shape, gdt, res, syr2k, what, prio,
                                  background)

    def _run_here(self, op, a, spa, b, spb, c, out, shape, gdt, res, syr2k, what, prio,
                  background):
        """_run with a's device current (torch's and the driver's)."""
        torch = self.torch
        cl = self.client
        dev = a.device
        wdt = self.tdt[gdt]
        if out is not None:
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
                raise ValueError("out must be a tensor of shape %s" % (shape,))
        lay = _strided_layout(out) if out is not None else None
        direct = (out is not None and out.device == dev and out.dtype == wdt and lay is not None
                  and not lay[0] and not _overlaps(out, a) and not _overlaps(out, b))
        dest = out if direct else torch.empty(shape, dtype=wdt, device=dev)
        if c is None:
            op.beta = 0.0
            if syr2k:
                dest.zero_()  # the triangle not computed is zero
        elif not (direct and c is out):
            cc = c if isinstance(c, torch.Tensor) else torch.as_tensor(np.asarray(c))
            dest.copy_(cc.to(dev).broadcast_to(shape))
        op.ldc = lay[1] if direct else shape[1]
        # The daemon works on another stream of another process: what this
        # process queued on its stream (the inputs, the copy of C) must be
        # done first.
        torch.cuda.current_stream(dev).synchronize()
        with cl._locked():
            cl._check_open()
            op.a.buffer, op.a.offset = self._buffer(a, spa)
            op.b.buffer, op.b.offset = self._buffer(b, spb)
            ldc = op.ldc
            op.c.buffer, op.c.offset = self._buffer(dest, ((shape[0] - 1) * ldc + shape[1])
                                                    * dest.element_size())

            def finish():
                if dest is out:
                    return out
                if out is not None:
                    out.copy_(dest)
                    return out
                return dest if dest.dtype == res else dest.to(res)
            return cl._submit(op, finish, (a, b, c, dest, out), None, what, prio, background)


    def matmul(self, a, b, out, background, dtype, allow_tf32, prio):
        """NumPy's matmul rules on tensors of one CUDA device: each 2-D
        product of the broadcast stacks is one op, in as few submits as the
        daemon's max_ops_per_submit allows."""
        from ._client import _done, _matmul_shapes, _stack_index
        torch = self.torch
        dev = self._device((a, b, out))
        a = a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))
        b = b if isinstance(b, torch.Tensor) else torch.as_tensor(np.asarray(b))
        a, b = a.to(dev), b.to(dev)
        batch, m, k, n, final = _matmul_shapes(tuple(a.shape), tuple(b.shape))
        gdt, res = self._dtypes(dtype, a, b)
        if allow_tf32 and gdt != F32:
            raise ValueError("allow_tf32 applies to f32")
        if out is not None and (not isinstance(out, torch.Tensor) or tuple(out.shape) != final):
            raise ValueError("out must be a tensor of shape %s" % (final,))
        nops = int(np.prod(batch, dtype=np.int64))
        if nops == 0 or m == 0 or n == 0 or k == 0:
            r = torch.zeros(final, dtype=res, device=dev)
            return _done(out.copy_(r) if out is not None else r)
        with torch.cuda.device(dev):
            wdt = self.tdt[gdt]
            A = a.to(wdt).contiguous()
            B = b.to(wdt).contiguous()
            ia = _stack_index(tuple(a.shape[:-2]), batch) if a.dim() > 2 else np.zeros(nops, int)
            ib = _stack_index(tuple(b.shape[:-2]), batch) if b.dim() > 2 else np.zeros(nops, int)
            dest = torch.empty((nops, m, n), dtype=wdt, device=dev)
            esz = dest.element_size()
            sa, sb, sc = m * k * esz, k * n * esz, m * n * esz
            flags = OPF_ROW_MAJOR | (OPF_ALLOW_TF32 if allow_tf32 else 0)
            torch.cuda.current_stream(dev).synchronize()  # A and B are written
            cl = self.client
            per = max(1, int(cl.info["max_ops_per_submit"]) or nops)
            what = "matmul %s @ %s on %s" % (tuple(a.shape), tuple(b.shape), dev)
            futs = []
            with cl._locked():
                cl._check_open()
                ba, oa = self._buffer(A, A.numel() * esz)
                bb, ob = self._buffer(B, B.numel() * esz)
                bc, oc = self._buffer(dest, dest.numel() * esz)
                for lo in range(0, nops, per):
                    cnt = min(per, nops - lo)
                    ops = (_lib.Op * cnt)()
                    for i, op in enumerate(ops):
                        op.kind, op.dtype, op.flags = GEMM, gdt, flags
                        op.m, op.n, op.k, op.lda, op.ldb, op.ldc = m, n, k, k, n, n
                        op.alpha, op.beta = 1.0, 0.0
                        op.a.buffer, op.a.offset = ba, oa + int(ia[lo + i]) * sa
                        op.b.buffer, op.b.offset = bb, ob + int(ib[lo + i]) * sb
                        op.c.buffer, op.c.offset = bc, oc + (lo + i) * sc
                    futs.append(cl._submit(ops[0], lambda: None, (A, B, dest, ops), None, what,
                                           prio, background, nops=cnt))

        def finish():
            r = dest.reshape(final)
            if out is not None:
                out.copy_(r)
                return out
            return r if r.dtype == res else r.to(res)
        return cl._gather(futs, finish, background)


def _overlaps(x, y):
    """Whether two tensors' storage byte ranges may overlap."""
    xs, ys = x.untyped_storage(), y.untyped_storage()
    x0, y0 = xs.data_ptr(), ys.data_ptr()
    return x0 < y0 + ys.nbytes() and y0 < x0 + xs.nbytes()
