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
from ._lib import BF16, F16, F32, GEMM, LOWER, OP_N, OP_T, OPF_ALLOW_TF32, OPF_ROW_MAJOR, SYR2K, UPPER

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
        for f in (self.range, self.ipc, self.ctx_get, self.ctx_set, self.retain, self.dev_get):
            f.restype = ctypes.c_int

    def use_device(self, ordinal):
        """Makes the device's primary context current on this thread (the one
        PyTorch uses), as a thread of a Future may have none."""
        ctx = ctypes.c_void_p()
        if self.ctx_get(ctypes.byref(ctx)) == 0 and ctx.value:
            return
        dev = ctypes.c_int()
        if self.dev_get(ctypes.byref(dev), ordinal) == 0 and \
                self.retain(ctypes.byref(ctx), dev.value) == 0:
            self.ctx_set(ctx)

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
        self.tdt = {F32: torch.float32, F16: torch.float16, BF16: torch.bfloat16}

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
        if x.dim() != 2 or x.numel() == 0:
            raise ValueError("%s must be a non-empty 2-D tensor, not of shape %s"
                             % (name, tuple(x.shape)))
        return x

    def _dtypes(self, dtype, a, b):
        torch = self.torch
        from ._client import _parse_dtype
        common = torch.promote_types(a.dtype, b.dtype)
        natural = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}.get(common)
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
        a, ta_s, lda, spa = self._mat(a.to(self.tdt[gdt]))
        b, _, ldb, spb = self._mat(b.to(self.tdt[gdt]), want_t=ta_s)
        op = _lib.new(_lib.Op, kind=SYR2K, dtype=gdt, m=n, n=n, k=k, lda=lda, ldb=ldb,
                     alpha=float(alpha), beta=float(beta))
        op.trans_a = op.trans_b = OP_T if bool(trans) != ta_s else OP_N
        op.uplo = LOWER if lower else UPPER
        op.flags = OPF_ROW_MAJOR
        return self._run(op, a, spa, b, spb, c, out, (n, n), gdt, res, True,
                         "syr2k n=%d k=%d on %s" % (n, k, dev), prio, background)

    def _run(self, op, a, spa, b, spb, c, out, shape, gdt, res, syr2k, what, prio, background):
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


def _overlaps(x, y):
    """Whether two tensors' storage byte ranges may overlap."""
    xs, ys = x.untyped_storage(), y.untyped_storage()
    x0, y0 = xs.data_ptr(), ys.data_ptr()
    return x0 < y0 + ys.nbytes() and y0 < x0 + xs.nbytes()
