"""gemmd.Client: NumPy (and PyTorch CUDA) GEMM and SYR2K through libgemmd."""

import bisect
import collections
import concurrent.futures
import contextlib
import ctypes
import json as _json
import os
import select
import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _lib
from ._lib import (BF16, F16, F32, F64, GEMM, LOWER, OP_N, OP_T, OPF_ALLOW_TF32, OPF_ROW_MAJOR,
                   PRIO_HIGH, PRIO_LOW, PRIO_NORMAL, SYR2K, UPPER)


class GemmdError(Exception):
    """An error from the daemon or from libgemmd.

    .code is the library's code: a negative errno or one of the gemmd.E*
    constants (gemmd.h's GEMMD_E*). .strerror is gemmd_strerror(code).
    .message is the daemon's own reason (gemmd_last_error), "" when it gave
    none. str() has all three: "what: the daemon's reason (strerror, code)".
    """

    code: int
    strerror: str
    message: str
    context: Optional[str]

    def __init__(self, code: int, context: Optional[str] = None, message: str = "") -> None:
        self.code = int(code)
        self.strerror = _lib.strerror(self.code)
        self.context = context
        self.message = message or ""
        text = "%s (%s, %d)" % (self.message, self.strerror, self.code) if self.message \
            else "%s (%d)" % (self.strerror, self.code)
        super().__init__("%s: %s" % (context, text) if context else text)


OpInfo = collections.namedtuple("OpInfo", "queue_us run_us group_id group_size kernel")
OpInfo.__doc__ = """Where and how an op ran: microseconds from admission to its group's
launch and from launch to done, the group's id and size, and the kernel config.
All zero (and the kernel empty) for an op answered by its completion word, the
short way libgemmd takes for a success; GEMMD_WORDS=0 has every op answered in
full."""


class Future(concurrent.futures.Future):
    """The result of an *_async call: a concurrent.futures.Future whose
    result() is the output array. .info holds an OpInfo once the op is done.
    An op cannot be recalled once submitted, so cancel() returns False."""

    info: Optional["OpInfo"] = None

    def cancel(self) -> bool:
        return False


# ---- dtypes -----------------------------------------------------------

_DTYPE_NAMES = {
    "f32": F32, "float32": F32, "float": F32,
    "f16": F16, "float16": F16, "half": F16,
    "bf16": BF16, "bfloat16": BF16,
    "f64": F64, "float64": F64, "double": F64,
}
_WIRE_NP = {F32: np.dtype(np.float32), F16: np.dtype(np.float16), BF16: np.dtype(np.uint16),
            F64: np.dtype(np.float64)}
_GDT_NAME = {F32: "f32", F16: "f16", BF16: "bf16", F64: "f64"}


def _is_bf16(dt):
    return dt.name == "bfloat16" and dt.itemsize == 2  # ml_dtypes, jax


def _parse_dtype(dtype):
    """gemmd dtype of a dtype argument: 'f32', 'f16', 'bf16', 'f64' (and
    long names), or a NumPy dtype/type."""
    if isinstance(dtype, str) and dtype.lower() in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype.lower()]
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is not None:
        if dt == np.float32:
            return F32
        if dt == np.float16:
            return F16
        if _is_bf16(dt):
            return BF16
        if dt == np.float64:
            return F64
    raise ValueError("dtype must be f32, f16, bf16 or f64, not %r" % (dtype,))


def _resolve_dtype(dtype, arrays, f64_ok):
    """(gemmd dtype computed in, NumPy dtype of the result) for the inputs
    `arrays` (a and b; C is converted to whatever they settle on). A float64
    input is computed in f64 where the daemon runs it (f64_ok), else in f32
    as before f64 existed."""
    dts = [x.dtype for x in arrays]
    if all(_is_bf16(d) for d in dts):
        natural, result = BF16, dts[0]
    elif f64_ok and any(d == np.float64 for d in dts):
        natural, result = F64, np.dtype(np.float64)
    else:
        common = np.result_type(*[d for d in dts if not _is_bf16(d)])
        if common == np.float16 and not any(_is_bf16(d) for d in dts):
            natural, result = F16, np.dtype(np.float16)
        else:
            # float32, and everything NumPy would promote further (float64
            # on a daemon without f64, integers), is computed in f32 and
            # returned as float32.
            natural, result = F32, np.dtype(np.float32)
    return (natural if dtype is None else _parse_dtype(dtype)), result


def _f32_to_bf16(x):
    """bf16 bit patterns (uint16) of x, rounded to nearest even, as the
    daemon's own conversion does; keeps x's memory layout."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    r = r.astype(np.uint16)
    if nan.any():
        r[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return r


def _bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _to_wire(x, gdt):
    """x as an array of the bytes the daemon reads for dtype gdt (no copy
    when x already is)."""
    if gdt == BF16:
        return x if _is_bf16(x.dtype) else _f32_to_bf16(x)
    if _is_bf16(x.dtype):
        x = _bf16_to_f32(x.view(np.uint16))
    return np.asarray(x, dtype=_WIRE_NP[gdt])


def _from_wire(w, gdt, result_dt):
    """Converts the daemon's output w (gdt bytes) to result_dt."""
    if gdt == BF16:
        if _is_bf16(result_dt):
            return w.view(result_dt)
        return _bf16_to_f32(w.view(np.uint16)).astype(result_dt, copy=False)
    if _is_bf16(result_dt):
        return _f32_to_bf16(w).view(result_dt)
    return w.astype(result_dt, copy=False)


def _wire_dtype_ok(arr, gdt):
    """Whether arr's bytes are already gdt's (so the daemon can write it)."""
    if gdt == BF16:
        return _is_bf16(arr.dtype)
    return arr.dtype == _WIRE_NP[gdt]


# ---- matrices -----------------------------------------------------------

def _layout(x, prefer_t=False):
    """How a 2-D array lies in memory: (False, ld) when x[i, j] is at element
    i * ld + j, (True, ld) when it is at j * ld + i (x.T is row-major), or
    None when neither (negative or non-unit inner strides). A single row or
    column fits both; prefer_t picks."""
    r, c = x.shape
    isz = x.itemsize
    s0, s1 = x.strides
    row = (c == 1 or s1 == isz) and (r == 1 or (s0 > 0 and s0 % isz == 0 and s0 // isz >= c))
    col = (r == 1 or s0 == isz) and (c == 1 or (s1 > 0 and s1 % isz == 0 and s1 // isz >= r))
    if row and not (col and prefer_t):
        return False, (s0 // isz if r > 1 else c)
    if col:
        return True, (s1 // isz if c > 1 else r)
    return None


class _Mat:
    """A 2-D operand as the daemon will read it: the array, whether it is
    stored transposed, its leading dimension and the bytes it spans."""

    __slots__ = ("arr", "t", "ld", "span", "ptr")

    def __init__(self, arr, want_t=None):
        lay = _layout(arr, bool(want_t))
        if lay is None or (want_t is not None and lay[0] != want_t):
            arr = np.asfortranarray(arr) if want_t else np.ascontiguousarray(arr)
            lay = _layout(arr, bool(want_t))
        self.arr = arr
        self.t, self.ld = lay
        rows, cols = (arr.shape[1], arr.shape[0]) if self.t else arr.shape
        self.span = ((rows - 1) * self.ld + cols) * arr.itemsize
        self.ptr = arr.__array_interface__["data"][0]

    def dense(self):
        """Whether the span holds nothing but the matrix's elements."""
        return self.span == self.arr.nbytes

    def packed(self):
        """A dense copy, stored the same way round."""
        arr = np.array(self.arr, order="F" if self.t else "C", copy=True)
        return _Mat(arr, want_t=self.t)


def _real(x, name):
    """x, when its values are real numbers gemmd can take (floats, integers,
    bfloat16). Anything else raises TypeError: NumPy would cast a complex
    array to real with only a warning, dropping the imaginary part, and
    booleans, strings or objects are not numbers to multiply."""
    dt = x.dtype
    if _is_bf16(dt) or dt.kind in "fiu":
        return x
    if dt.kind == "c":
        raise TypeError("%s is complex (%s): gemmd multiplies real matrices only; pass its .real "
                        "to drop the imaginary part" % (name, dt))
    raise TypeError("%s has dtype %s: gemmd takes real numbers (float32, float16, bfloat16 or "
                    "float64; integers are computed in f32)" % (name, dt))


def _as2d(x, name):
    x = _real(np.asarray(x), name)
    if x.ndim != 2:
        raise ValueError("%s must be 2-D, not of shape %s" % (name, x.shape))
    return x


def _beta(c, beta):
    """beta by the rule gemmctl, Python and gemmd.h share: when C is given and
    beta is not, beta is 1; when C is not given, C is zero and beta must be 0
    or left out."""
    if c is None:
        if beta is not None and float(beta) != 0.0:
            raise ValueError("beta=%g without c: C is zero, so beta must be 0 or left out"
                             % float(beta))
        return 0.0
    return 1.0 if beta is None else float(beta)


def _done(value):
    """A Future that already holds value (an op with nothing to compute)."""
    fut = Future()
    fut.set_result(value)
    return fut


def _local_result(c, beta, shape, res_dt, syr2k, lower, out):
    """The result of an op whose product is empty (k == 0) or that has no
    elements: beta * c (on syr2k's triangle, the other taken from c), or
    zeros; in `out` when given. Nothing to ask the daemon."""
    r = np.zeros(shape, np.float64)
    if c is not None:
        cc = np.broadcast_to(np.asarray(c, dtype=np.float64), shape)
        r = beta * cc
        if syr2k:
            tri, other = (np.tril, np.triu) if lower else (np.triu, np.tril)
            r = tri(r) + other(cc, 1 if lower else -1)
    if out is not None:
        np.copyto(out, r, casting="unsafe")
        return out
    return r.astype(np.float32).astype(res_dt) if _is_bf16(res_dt) else r.astype(res_dt)


def _matmul_shapes(a_shape, b_shape):
    """NumPy's matmul shapes: (batch, m, k, n, the result's shape) of
    operands of these shapes, a 1-D a taken as 1 x k and a 1-D b as k x 1
    (that dimension left out of the result). Raises ValueError as NumPy
    does."""
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise ValueError("matmul: operands must have at least one dimension, not be scalars")
    ash = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    bsh = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    m, k = ash[-2:]
    k2, n = bsh[-2:]
    if k != k2:
        raise ValueError("matmul: a is %s and b is %s: the inner dimensions %d and %d differ"
                         % (tuple(a_shape), tuple(b_shape), k, k2))
    try:
        batch = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
    except ValueError:
        raise ValueError("matmul: the stacks of a %s and b %s do not broadcast"
                         % (tuple(a_shape), tuple(b_shape))) from None
    final = batch + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())
    return batch, m, k, n, final


def _stack_index(stack_shape, batch):
    """For each 2-D product of the broadcast batch (in C order), the index of
    the operand's matrix in its own stack of shape stack_shape."""
    count = int(np.prod(stack_shape, dtype=np.int64))
    ids = np.arange(count, dtype=np.int64).reshape(stack_shape)
    return np.broadcast_to(ids, batch).reshape(-1)


def _align(n, a=64):
    return (n + a - 1) // a * a


def _prio(priority):
    if isinstance(priority, str):
        names = {"low": PRIO_LOW, "normal": PRIO_NORMAL, "high": PRIO_HIGH}
        if priority.lower() not in names:
            raise ValueError("priority must be low, normal or high")
        return names[priority.lower()]
    if priority not in (PRIO_LOW, PRIO_NORMAL, PRIO_HIGH):
        raise ValueError("priority must be 0, 1 or 2")
    return int(priority)


# ---- shared memory ------------------------------------------------------

class _Mapping:
    """The bytes of one daemon-shared buffer, as an object NumPy arrays can
    be based on; collected when no array uses them any more."""

    def __init__(self, ptr, nbytes):
        self.__array_interface__ = {"data": (ptr, False), "shape": (nbytes,), "typestr": "|u1",
                                    "version": 3}


class _Buf:
    """A buffer from gemmd_buffer_alloc."""

    __slots__ = ("id", "ptr", "nbytes", "arr")

    def __init__(self, bid, ptr, nbytes):
        self.id, self.ptr, self.nbytes = bid, ptr, nbytes
        self.arr = np.asarray(_Mapping(ptr, nbytes))

    def view(self, offset, dtype, shape):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.arr[offset:offset + n].view(dtype).reshape(shape)


class _Pending:
    """An op in flight: its future, how to build its result, and what must
    stay alive (and be given back) until it is done."""

    __slots__ = ("fut", "finish", "keep", "scratch", "what", "why0")

    def __init__(self, fut, finish, keep, scratch, what, why0):
        self.fut, self.finish, self.keep, self.scratch, self.what = fut, finish, keep, scratch, what
        self.why0 = why0  # gemmd_last_error when it was submitted


_MiB = 1 << 20

# What the public methods take: anything np.asarray accepts, or a PyTorch
# tensor; dtype names ('f32', 'f16', 'bf16') or NumPy dtypes; priorities by
# name or as gemmd.PRIO_*.
ArrayLike = Any
DType = Union[None, str, np.dtype, type]
Priority = Union[str, int]


class Client:
    """A connection to gemmd.

    Client(socket=None) connects to `socket`, or $GEMMD_SOCKET, or the
    daemon's default (/run/gemmd/gemmd.sock). Use it as a context manager or
    call close(). A Client may be shared by threads.

    Operands are NumPy arrays (anything np.asarray accepts) or PyTorch CUDA
    tensors. Arrays from client.empty()/zeros() live in memory the daemon
    maps, and are passed by reference; other arrays are sent inside the
    request when the op is small (inline_threshold bytes, default 256 KiB),
    else copied once into a shared scratch buffer.
    """

    def __init__(self, socket: Optional[Union[str, bytes, "os.PathLike[str]"]] = None, *,
                 inline_threshold: int = 256 * 1024, scratch_cache_bytes: int = 256 * _MiB) -> None:
        self._lib = _lib.load()
        h = ctypes.c_void_p()
        path = os.fsencode(socket) if socket is not None else None
        rc = self._lib.gemmd_connect(path, ctypes.byref(h))
        if rc:
            raise GemmdError(rc, "cannot connect to gemmd at %s" % (
                os.fsdecode(socket) if socket is not None else
                os.environ.get("GEMMD_SOCKET") or "the default socket"))
        self._h = h
        self._lock = threading.RLock()
        self._closed = False
        self._disconnected = False
        self._pending: Dict[int, _Pending] = {}
        self._driver: Optional[threading.Thread] = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._fd = self._lib.gemmd_fd(h)
        self._ranges: List[tuple] = []  # sorted (start, end, buffer id) of empty() buffers
        self._live = 0          # empty() buffers whose arrays are alive
        self._dead: List[tuple] = []    # their ids once collected, freed at the next call
        self._pool: Dict[int, List[_Buf]] = {}  # size class -> free scratch _Bufs
        self._pool_bytes = 0
        self._scratch_cache = scratch_cache_bytes
        self._cuda = None
        info = _lib.new(_lib.Info)
        self._lib.gemmd_get_info(h, ctypes.byref(info))
        self._info = {f: getattr(info, f) for f, _ in info._fields_}
        for f in ("server_version", "backend"):
            self._info[f] = self._info[f].decode()
        self._devices = []
        for i in range(info.ndevices):
            d = _lib.new(_lib.Device)
            if self._lib.gemmd_get_device(h, i, ctypes.byref(d)) == 0:
                self._devices.append({"index": d.index, "name": d.name.decode(),
                                      "backend": d.backend.decode(), "units": d.units,
                                      "memory_bytes": d.memory_bytes,
                                      "dtypes": [nm for t, nm in sorted(_GDT_NAME.items())
                                                 if d.dtypes >> t & 1]})
        # Whether float64 inputs compute in f64 (some device runs it).
        self._f64 = any("f64" in d["dtypes"] for d in self._devices)
        self.inline_threshold = min(inline_threshold, info.max_inline_bytes)

    # ---- lifetime ----

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self):
        try:
            self.close(wait=False)
        except Exception:
            pass

    def close(self, wait: bool = True) -> None:
        """Waits for the ops in flight (wait=True; else their futures fail),
        then disconnects. Arrays from empty() stay valid: the connection is
        closed when the last of them is collected. Idempotent."""
        if getattr(self, "_h", None) is None or self._closed:
            return
        if wait:
            while True:
                with self._lock:
                    futs = [p.fut for p in self._pending.values()]
                if not futs:
                    break
                for f in futs:
                    self._await(f, None)
        with self._lock:
            if self._dead and not self._disconnected:
                self._reap()
            self._closed = True
            err = GemmdError(_lib.ECANCELED, "the client was closed")
            for rec in self._pending.values():
                self._settle(rec, exc=err)
            self._pending.clear()
            self._poke()
            driver = self._driver
        # The completion thread sees nothing pending and ends; it must be
        # gone before the descriptors it polls are closed.
        if driver is not None and driver is not threading.current_thread():
            driver.join(10)
        with self._lock:
            for bufs in self._pool.values():
                for b in bufs:
                    self._lib.gemmd_buffer_free(self._h, b.id)
            self._pool.clear()
            self._pool_bytes = 0
            self._maybe_disconnect()

    def _maybe_disconnect(self):
        """Disconnects a closed client once no empty() array is alive."""
        if self._closed and self._live == 0 and not self._disconnected:
            self._disconnected = True
            self._lib.gemmd_disconnect(self._h)
            os.close(self._wake_r)
            os.close(self._wake_w)

    @property
    def closed(self) -> bool:
        return self._closed

    def _why(self):
        """The daemon's words for its last error on this connection, or ""."""
        if self._disconnected:
            return ""
        p = self._lib.gemmd_last_error(self._h)
        return p.decode("utf-8", "replace") if p else ""

    def _error(self, rc, what, before=None):
        """A GemmdError for code rc, with the daemon's reason unless it is
        still `before`, the text from before an asynchronous request (the
        library clears it only for synchronous calls)."""
        why = self._why()
        return GemmdError(rc, what, "" if why == before else why)

    def _check_open(self):
        if self._closed:
            raise GemmdError(_lib.EDISCONNECT, "the client is closed")

    # ---- information ----

    @property
    def info(self) -> Dict[str, Any]:
        """The daemon's handshake answer: versions, backend, limits (a dict)."""
        return dict(self._info)

    @property
    def devices(self) -> List[Dict[str, Any]]:
        """The daemon's devices (a list of dicts)."""
        return [dict(d) for d in self._devices]

    def stats(self, json: bool = False) -> Union[str, Dict[str, Any]]:
        """The daemon's statistics: text, or a dict with json=True."""
        p = ctypes.c_void_p()
        with self._locked():
            self._check_open()
            rc = self._lib.gemmd_stats(self._h, 1 if json else 0, ctypes.byref(p))
        if rc:
            raise self._error(rc, "stats")
        try:
            text = ctypes.string_at(p).decode("utf-8", "replace")
        finally:
            _libc_free(p)
        return _json.loads(text) if json else text

    # ---- shared memory ----

    def empty(self, shape: Union[int, Sequence[int]], dtype: Any = np.float32) -> np.ndarray:
        """A new array in memory shared with the daemon (zero-filled), so
        that ops read and write it in place. Each call registers one buffer
        (the daemon allows info['max_buffers'] per session); the buffer is
        released when the array and every view of it are collected."""
        dt = np.dtype(dtype)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else \
            tuple(int(s) for s in shape)
        nbytes = max(1, int(np.prod(shape)) * dt.itemsize)
        with self._locked():
            self._check_open()
            bid, ptr = self._alloc(nbytes)
            holder = _Mapping(ptr, nbytes)
            bisect.insort(self._ranges, (ptr, ptr + nbytes, bid))
            self._live += 1
        weakref.finalize(holder, self._mapping_dead, bid, ptr)
        arr = np.asarray(holder)[:int(np.prod(shape)) * dt.itemsize]
        return arr.view(dt).reshape(shape)

    def zeros(self, shape: Union[int, Sequence[int]], dtype: Any = np.float32) -> np.ndarray:
        """As empty(); new shared memory is zero-filled."""
        return self.empty(shape, dtype)

    def asarray(self, x: ArrayLike, dtype: Any = None) -> np.ndarray:
        """A copy of x in shared memory (x itself if it already is)."""
        x = np.asarray(x, dtype=dtype)
        if self._shared_of(x.__array_interface__["data"][0], max(1, x.nbytes)):
            return x
        y = self.empty(x.shape, x.dtype)
        y[...] = x
        return y

    def _mapping_dead(self, bid, ptr):
        # Runs from the garbage collector, in any thread: only record it.
        self._dead.append((bid, ptr))
        if self._closed:
            with self._lock:
                self._reap()
                self._maybe_disconnect()

    def _reap(self):
        """Frees the buffers of collected empty() arrays. Lock held."""
        while self._dead:
            bid, ptr = self._dead.pop()
            i = bisect.bisect_left(self._ranges, (ptr,))
            while i < len(self._ranges) and self._ranges[i][2] != bid:
                i += 1
            if i < len(self._ranges):
                del self._ranges[i]
            self._live -= 1
            if not self._disconnected:
                self._lib.gemmd_buffer_free(self._h, bid)

    def _alloc(self, nbytes):
        """(buffer id, address) of a new shared buffer. Lock held."""
        what = "cannot allocate %d bytes of shared memory" % nbytes
        limit = self._info["max_buffer_bytes"]
        if limit and nbytes > limit:  # libgemmd refuses it without asking the daemon
            raise GemmdError(_lib.ELIMIT, what,
                             "the daemon's buffers hold at most %d bytes" % limit)
        bid = ctypes.c_uint64()
        ptr = ctypes.c_void_p()
        rc = self._lib.gemmd_buffer_alloc(self._h, nbytes, ctypes.byref(bid), ctypes.byref(ptr))
        if rc:
            raise self._error(rc, what)
        return bid.value, ptr.value

    def _shared_of(self, ptr, span):
        """(buffer id, offset) when [ptr, ptr + span) lies in an empty()
        buffer, else None."""
        i = bisect.bisect_right(self._ranges, (ptr, float("inf"), 0)) - 1
        if i >= 0:
            start, end, bid = self._ranges[i]
            if start <= ptr and ptr + span <= end:
                return bid, ptr - start
        return None

    def _scratch_get(self, nbytes):
        cls = max(_MiB, 1 << (nbytes - 1).bit_length())
        free = self._pool.get(cls)
        if free:
            self._pool_bytes -= cls
            return free.pop()
        return _Buf(*self._alloc(cls), cls)

    def _scratch_put(self, buf):
        if self._closed or self._pool_bytes + buf.nbytes > self._scratch_cache:
            if not self._disconnected:
                self._lib.gemmd_buffer_free(self._h, buf.id)
            return
        self._pool.setdefault(buf.nbytes, []).append(buf)
        self._pool_bytes += buf.nbytes

    # ---- completions ----

    @contextlib.contextmanager
    def _locked(self):
        """The client's lock, with collected buffers freed first. Replies
        that a library call read on the way (completions included) are
        announced to whoever waits in select()."""
        with self._lock:
            if self._dead and not self._disconnected:
                self._reap()
            yield
            if self._pending:
                self._poke()

    def _poke(self):
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass

    def _collect(self):
        """Takes every finished ticket from the library. Lock held. Returns
        [(record, status, Result, the daemon's reason or "")]."""
        done = []
        t = ctypes.c_uint64()
        while True:
            rc = self._lib.gemmd_poll(self._h, ctypes.byref(t))
            if rc == 1:
                res = _lib.new(_lib.Result)
                st = self._lib.gemmd_wait(self._h, t.value, 0, ctypes.byref(res), 1)
                rec = self._pending.pop(t.value, None)
                if rec is not None:
                    why = self._why() if st else ""
                    done.append((rec, st, res, "" if why == rec.why0 else why))
                continue
            if rc < 0:  # the connection is gone: nothing more will complete
                for rec in self._pending.values():
                    done.append((rec, rc, None, ""))
                self._pending.clear()
            return done

    def _settle(self, rec, status=0, res=None, exc=None, why=""):
        """Completes rec's future (outside the lock unless closing)."""
        fut = rec.fut
        try:
            if exc is None and status:
                exc = GemmdError(status, rec.what, why)
            if exc is None:
                value = rec.finish()
                if res is not None:
                    fut.info = OpInfo(res.queue_us, res.run_us, res.group_id, res.group_size,
                                      res.kernel.decode("utf-8", "replace"))
        except BaseException as e:  # the result could not be built
            exc = e
        finally:
            if rec.scratch is not None:
                with self._lock:
                    self._scratch_put(rec.scratch)
            rec.keep = None
        if not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

    def _pump(self, timeout):
        """Finishes whatever completed; waits up to timeout (None: until
        something happens) when nothing did."""
        with self._lock:
            if self._disconnected:
                return
            done = self._collect()
        for rec, st, res, why in done:
            self._settle(rec, st, res, why=why)
        if done:
            return
        try:
            r, _, _ = select.select([self._fd, self._wake_r], [], [], timeout)
        except (OSError, ValueError):  # closed under us
            return
        if self._wake_r in r:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except (BlockingIOError, OSError):
                pass

    def _drive(self):
        """The completion thread of *_async: runs while ops are in flight."""
        while True:
            with self._lock:
                if not self._pending or self._disconnected:
                    self._driver = None
                    return
            self._pump(0.25)

    def _await(self, fut, timeout):
        """fut.result(timeout), collecting completions in this thread too
        (so a synchronous call needs no other thread, and a done-callback
        on the completion thread can itself wait)."""
        deadline = None if timeout is None else _now() + timeout
        while not fut.done():
            left = None if deadline is None else deadline - _now()
            if left is not None and left <= 0:
                break
            self._pump(0.25 if left is None else min(0.25, left))
        return fut.result(0 if deadline is not None else None)

    def _submit(self, op, finish, keep, scratch, what, priority, background, nops=1):
        """Submits op (or the nops Ops of an array starting there) as one
        request; returns its Future. Lock held."""
        fut = Future()
        ticket = ctypes.c_uint64()
        why0 = self._why()
        rc = self._lib.gemmd_submit(self._h, ctypes.cast(ctypes.byref(op), ctypes.POINTER(_lib.Op)),
                                    nops, priority, ctypes.byref(ticket))
        if rc:
            raise self._error(rc, what, why0)  # the caller gives the scratch buffer back
        self._pending[ticket.value] = _Pending(fut, finish, keep, scratch, what, why0)
        if background and self._driver is None:
            self._driver = threading.Thread(target=self._drive, name="gemmd-completions",
                                            daemon=True)
            self._driver.start()
        return fut

    # ---- operations ----

    def gemm(self, a: ArrayLike, b: ArrayLike, c: Optional[ArrayLike] = None, alpha: float = 1.0,
             beta: Optional[float] = None, trans_a: bool = False, trans_b: bool = False,
             out: Optional[Any] = None, *, dtype: DType = None, allow_tf32: bool = False,
             priority: Priority = "normal") -> Any:
        """alpha * op(a) @ op(b) + beta * c, with op(x) = x.T where trans_x.

        Row-major (NumPy) meaning: op(a) is m x k, op(b) k x n, c is m x n
        (or broadcasts to it). beta: 1 when c is given and beta is not; without
        c, C is zero and beta must be 0 or left out (gemmctl and gemmd.h say
        the same). The result is a new array, or `out` (m x n), which may be
        c itself. An empty m or n gives an empty result and k == 0 gives
        beta * c (or zeros), without asking the daemon. dtype computes in
        'f32', 'f16', 'bf16' or 'f64' (inputs are rounded to it and the result
        has the inputs' type; default: the inputs' type, with integers, and
        float64 on a daemon whose devices do not run f64, computed in f32);
        allow_tf32 lets a GPU use TF32 for f32;
        priority is 'low', 'normal' or 'high'. Raises GemmdError."""
        return self._await(self._gemm(a, b, c, alpha, beta, trans_a, trans_b, out, False, dtype,
                                      allow_tf32, priority), None)

    def gemm_async(self, a: ArrayLike, b: ArrayLike, c: Optional[ArrayLike] = None,
                   alpha: float = 1.0, beta: Optional[float] = None, trans_a: bool = False,
                   trans_b: bool = False, out: Optional[Any] = None, *, dtype: DType = None,
                   allow_tf32: bool = False, priority: Priority = "normal") -> Future:
        """As gemm(), returning at once with a Future. The operands must not
        change, nor `out` be read, until it is done."""
        return self._gemm(a, b, c, alpha, beta, trans_a, trans_b, out, True, dtype, allow_tf32,
                          priority)

    def syr2k(self, a: ArrayLike, b: ArrayLike, c: Optional[ArrayLike] = None,
              alpha: float = 1.0, beta: Optional[float] = None, trans: bool = False,
              lower: bool = True, out: Optional[Any] = None, *, dtype: DType = None,
              priority: Priority = "normal") -> Any:
        """alpha * (op(a) @ op(b).T + op(b) @ op(a).T) + beta * c on one
        triangle (the lower one unless lower=False), the other triangle
        taken from c (zero when c is None). op(x) is x (n x k) or, with
        trans, x.T (x is k x n). c, beta and the keywords as for gemm()."""
        return self._await(self._syr2k(a, b, c, alpha, beta, trans, lower, out, False, dtype,
                                       priority), None)

    def syr2k_async(self, a: ArrayLike, b: ArrayLike, c: Optional[ArrayLike] = None,
                    alpha: float = 1.0, beta: Optional[float] = None, trans: bool = False,
                    lower: bool = True, out: Optional[Any] = None, *, dtype: DType = None,
                    priority: Priority = "normal") -> Future:
        """As syr2k(), returning at once with a Future."""
        return self._syr2k(a, b, c, alpha, beta, trans, lower, out, True, dtype, priority)

    def matmul(self, a: ArrayLike, b: ArrayLike, out: Optional[Any] = None, *,
               dtype: DType = None, allow_tf32: bool = False,
               priority: Priority = "normal") -> Any:
        """a @ b with NumPy's matmul rules: a 1-D a is a row (1 x k) and a 1-D
        b a column (k x 1), that dimension left out of the result; stacks
        (leading dimensions) broadcast. Each 2-D product is one op, all of
        them in one submit (several when there are more than the daemon's
        max_ops_per_submit). Empty m, n or stacks give an empty result and
        k == 0 zeros, without asking the daemon. NumPy arrays give a NumPy
        array; PyTorch tensors a tensor on their device (CUDA tensors go to
        the daemon by CUDA IPC, CPU tensors as arrays). Keywords as for
        gemm()."""
        return self._await(self._matmul(a, b, out, False, dtype, allow_tf32, priority), None)

    def matmul_async(self, a: ArrayLike, b: ArrayLike, out: Optional[Any] = None, *,
                     dtype: DType = None, allow_tf32: bool = False,
                     priority: Priority = "normal") -> Future:
        """As matmul(), returning at once with a Future."""
        return self._matmul(a, b, out, True, dtype, allow_tf32, priority)

    def _gemm(self, a, b, c, alpha, beta, trans_a, trans_b, out, background, dtype, allow_tf32,
              priority):
        beta = _beta(c, beta)
        if _cuda_tensor(a, b, c, out):
            return self._cuda_ops().gemm(a, b, c, alpha, beta, trans_a, trans_b, out, background,
                                         dtype, allow_tf32, _prio(priority))
        a, b = _as2d(a, "a"), _as2d(b, "b")
        m, k = a.shape[::-1] if trans_a else a.shape
        k2, n = b.shape[::-1] if trans_b else b.shape
        if k != k2:
            raise ValueError("gemm: op(a) is %dx%d but op(b) is %dx%d" % (m, k, k2, n))
        c, out = self._check_c_out(c, out, (m, n))
        gdt, res_dt = _resolve_dtype(dtype, [a, b], self._f64)
        if allow_tf32 and gdt != F32:
            raise ValueError("allow_tf32 applies to f32, not %s" % _GDT_NAME[gdt])
        prio = _prio(priority)
        if m == 0 or n == 0 or k == 0:
            return _done(_local_result(c, beta, (m, n), res_dt, False, True, out))
        ma, mb = _Mat(_to_wire(a, gdt)), _Mat(_to_wire(b, gdt))
        op = _lib.new(_lib.Op, kind=GEMM, dtype=gdt, m=m, n=n, k=k, lda=ma.ld, ldb=mb.ld,
                     alpha=float(alpha), beta=beta)
        op.trans_a = OP_T if bool(trans_a) != ma.t else OP_N
        op.trans_b = OP_T if bool(trans_b) != mb.t else OP_N
        op.flags = OPF_ROW_MAJOR | (OPF_ALLOW_TF32 if allow_tf32 else 0)
        what = "gemm %dx%dx%d %s" % (m, n, k, _GDT_NAME[gdt])
        return self._run(op, ma, mb, c, out, (m, n), gdt, res_dt, False, what, prio, background)

    def _syr2k(self, a, b, c, alpha, beta, trans, lower, out, background, dtype, priority):
        beta = _beta(c, beta)
        if _cuda_tensor(a, b, c, out):
            return self._cuda_ops().syr2k(a, b, c, alpha, beta, trans, lower, out, background,
                                          dtype, _prio(priority))
        a, b = _as2d(a, "a"), _as2d(b, "b")
        if a.shape != b.shape:
            raise ValueError("syr2k: a is %s but b is %s" % (a.shape, b.shape))
        n, k = a.shape[::-1] if trans else a.shape
        c, out = self._check_c_out(c, out, (n, n))
        gdt, res_dt = _resolve_dtype(dtype, [a, b], self._f64)
        prio = _prio(priority)
        if n == 0 or k == 0:
            return _done(_local_result(c, beta, (n, n), res_dt, True, lower, out))
        ma = _Mat(_to_wire(a, gdt))
        mb = _Mat(_to_wire(b, gdt), want_t=ma.t)  # A and B share one op
        op = _lib.new(_lib.Op, kind=SYR2K, dtype=gdt, m=n, n=n, k=k, lda=ma.ld, ldb=mb.ld,
                     alpha=float(alpha), beta=beta)
        op.trans_a = op.trans_b = OP_T if bool(trans) != ma.t else OP_N
        op.uplo = LOWER if lower else UPPER
        op.flags = OPF_ROW_MAJOR
        what = "syr2k n=%d k=%d %s" % (n, k, _GDT_NAME[gdt])
        return self._run(op, ma, mb, c, out, (n, n), gdt, res_dt, True, what, prio, background)

    def _matmul(self, a, b, out, background, dtype, allow_tf32, priority):
        prio = _prio(priority)
        if _cuda_tensor(a, b, out):
            return self._cuda_ops().matmul(a, b, out, background, dtype, allow_tf32, prio)
        if _torch_tensor(a, b):
            return self._matmul_torch_cpu(a, b, out, background, dtype, allow_tf32, prio)
        a, b = _real(np.asarray(a), "a"), _real(np.asarray(b), "b")
        batch, m, k, n, final = _matmul_shapes(a.shape, b.shape)
        gdt, res_dt = _resolve_dtype(dtype, [a, b], self._f64)
        if allow_tf32 and gdt != F32:
            raise ValueError("allow_tf32 applies to f32, not %s" % _GDT_NAME[gdt])
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError("out must be a NumPy array")
            if out.shape != final:
                raise ValueError("out has shape %s, the result %s" % (out.shape, final))
            if not out.flags.writeable:
                raise ValueError("out is read-only")
        nops = int(np.prod(batch, dtype=np.int64))
        if nops == 0 or m == 0 or n == 0 or k == 0:
            res = _local_result(None, 0.0, final, res_dt, False, True, out)
            return _done(res if out is not None or final else res[()])
        # Each operand as a C-ordered stack of matrices; a 1-D one is a row or
        # a column, already laid out as one.
        A = np.ascontiguousarray(_to_wire(a, gdt)).reshape(-1, m, k)
        B = np.ascontiguousarray(_to_wire(b, gdt)).reshape(-1, k, n)
        ia = _stack_index(a.shape[:-2], batch) if a.ndim > 2 else np.zeros(nops, np.int64)
        ib = _stack_index(b.shape[:-2], batch) if b.ndim > 2 else np.zeros(nops, np.int64)
        W = np.empty((nops, m, n), _WIRE_NP[gdt])
        flags = OPF_ROW_MAJOR | (OPF_ALLOW_TF32 if allow_tf32 else 0)
        what = "matmul %s @ %s %s" % (a.shape, b.shape, _GDT_NAME[gdt])
        per = max(1, int(self._info["max_ops_per_submit"]) or nops)
        futs = []
        for lo in range(0, nops, per):
            futs.append(self._matmul_chunk(A, B, W, ia[lo:lo + per], ib[lo:lo + per], lo, gdt,
                                           flags, what, prio, background))

        def finish():
            res = _from_wire(W, gdt, res_dt).reshape(final)
            if out is not None:
                np.copyto(out, res, casting="unsafe")
                return out
            return res if final else res[()]  # 1-D @ 1-D: a scalar, as NumPy's
        return self._gather(futs, finish, background)

    def _matmul_chunk(self, A, B, W, ia, ib, first, gdt, flags, what, prio, background):
        """Submits the products W[first + i] = A[ia[i]] @ B[ib[i]] as one
        request: operands in a shared array by reference, else inline when
        small, else copied into a scratch buffer. Returns its Future."""
        cnt = len(ia)
        _, m, k = A.shape
        n = B.shape[2]
        esz = A.itemsize
        sa, sb, sc = m * k * esz, k * n * esz, m * n * esz
        ops = (_lib.Op * cnt)()
        for i, op in enumerate(ops):
            op.kind, op.dtype, op.flags = GEMM, gdt, flags
            op.m, op.n, op.k, op.lda, op.ldb, op.ldc = m, n, k, k, n, n
            op.alpha, op.beta = 1.0, 0.0
        with self._locked():
            self._check_open()
            shared = [self._shared_of(X.ctypes.data, X.nbytes) for X in (A, B)]
            local = cnt * ((0 if shared[0] else sa) + (0 if shared[1] else sb) + 2 * sc)
            inline = local <= self.inline_threshold
            scratch, places, off = None, [{}, {}], 0
            if not inline:
                ua, ub = (np.unique(ia) if not shared[0] else ()), \
                    (np.unique(ib) if not shared[1] else ())
                scratch = self._scratch_get(len(ua) * _align(sa) + len(ub) * _align(sb) +
                                            cnt * _align(sc))
                for X, idx, size, place in ((A, ua, sa, places[0]), (B, ub, sb, places[1])):
                    for j in idx:
                        np.copyto(scratch.view(off, X.dtype, X.shape[1:]), X[j])
                        place[int(j)] = off
                        off += _align(size)
            try:
                for i, op in enumerate(ops):
                    for X, j, size, shr, place, operand in (
                            (A, ia[i], sa, shared[0], places[0], op.a),
                            (B, ib[i], sb, shared[1], places[1], op.b)):
                        if shr:
                            operand.buffer, operand.offset = shr[0], shr[1] + int(j) * size
                        elif inline:
                            operand.data, operand.bytes = X.ctypes.data + int(j) * size, size
                        else:
                            operand.buffer, operand.offset = scratch.id, place[int(j)]
                    if inline:
                        op.c.out, op.c.bytes = W.ctypes.data + (first + i) * sc, sc
                    else:
                        op.c.buffer, op.c.offset = scratch.id, off + i * _align(sc)

                def finish():
                    if scratch is not None:
                        for i in range(cnt):
                            W[first + i] = scratch.view(off + i * _align(sc), W.dtype, (m, n))
                    return None
                return self._submit(ops[0], finish, [A, B, W, ops], scratch, what, prio,
                                    background, nops=cnt)
            except BaseException:
                if scratch is not None:
                    self._scratch_put(scratch)
                raise

    def _gather(self, futs, finish, background):
        """One Future for the requests of one call: finish() once all of them
        are done, else the first one's error. Its .info is the first's."""
        if not background:
            for f in futs:
                self._await(f, None)
            res = _done(finish())
            res.info = futs[0].info
            return res
        whole = Future()
        left = [len(futs)]
        lock = threading.Lock()

        def one_done(f):
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if whole.done():
                return
            if f.exception() is not None:
                try:
                    whole.set_exception(f.exception())
                except concurrent.futures.InvalidStateError:
                    pass
            elif last:
                try:
                    whole.info = futs[0].info
                    whole.set_result(finish())
                except concurrent.futures.InvalidStateError:
                    pass
                except BaseException as e:
                    whole.set_exception(e)
        for f in futs:
            f.add_done_callback(one_done)
        return whole

    def _matmul_torch_cpu(self, a, b, out, background, dtype, allow_tf32, prio):
        """matmul of PyTorch tensors in host memory, through NumPy; the result
        is a tensor of the type torch.matmul would give."""
        import torch
        ta = a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))
        tb = b if isinstance(b, torch.Tensor) else torch.as_tensor(np.asarray(b))
        rt = torch.promote_types(ta.dtype, tb.dtype)
        if rt == torch.float64 and not self._f64:
            rt = torch.float32
        if dtype is None:
            dtype = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64"}.get(rt, "f32")
        na, nb = (t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()
                  for t in (ta, tb))
        if rt not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            rt = torch.float32
        fut = self._matmul(na, nb, None, background, dtype, allow_tf32, prio)
        wide = np.float64 if rt == torch.float64 else np.float32

        def convert(res):
            t = torch.from_numpy(np.ascontiguousarray(res, dtype=wide)).to(rt)
            if out is not None:
                out.copy_(t)
                return out
            return t
        if not background:
            return _done(convert(fut.result()))
        conv = Future()

        def done(f):
            try:
                conv.info = f.info
                conv.set_result(convert(f.result()))
            except BaseException as e:
                conv.set_exception(e)
        fut.add_done_callback(done)
        return conv

    @staticmethod
    def _check_c_out(c, out, shape):
        if c is not None:
            c = _real(np.asarray(c), "c")
            try:
                np.broadcast_shapes(c.shape, shape)
            except ValueError:
                raise ValueError("c of shape %s does not broadcast to %s" % (c.shape, shape))
            if np.broadcast_shapes(c.shape, shape) != shape:
                raise ValueError("c of shape %s does not broadcast to %s" % (c.shape, shape))
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError("out must be a NumPy array")
            if out.shape != shape:
                raise ValueError("out has shape %s, the result %s" % (out.shape, shape))
            if not out.flags.writeable:
                raise ValueError("out is read-only")
        return c, out

    def _run(self, op, ma, mb, c, out, shape, gdt, res_dt, syr2k, what, priority, background):
        """Places A, B and C (shared, inline or scratch), submits, and
        arranges the result. Returns the Future."""
        m, n = shape
        cbytes = m * n * _WIRE_NP[gdt].itemsize
        with self._locked():
            self._check_open()
            sa = self._shared_of(ma.ptr, ma.span)
            sb = self._shared_of(mb.ptr, mb.span)
            direct = self._direct_out(out, gdt, ma, mb)
            local = (0 if sa else ma.arr.nbytes) + (0 if sb else mb.arr.nbytes) + \
                (0 if direct else 2 * cbytes)
            inline = local <= self.inline_threshold
            keep = [ma.arr, mb.arr, out]
            scratch = None
            if not inline:
                scratch = self._scratch_get((0 if sa else _align(ma.arr.nbytes)) +
                                            (0 if sb else _align(mb.arr.nbytes)) +
                                            (0 if direct else cbytes))
            try:
                off = 0
                for mat, shared, operand, ld in ((ma, sa, op.a, "lda"), (mb, sb, op.b, "ldb")):
                    if shared:
                        operand.buffer, operand.offset = shared
                        setattr(op, ld, mat.ld)
                    elif inline:
                        if not mat.dense():  # send the elements, not the gaps
                            mat = mat.packed()
                            keep.append(mat.arr)
                        operand.data, operand.bytes = mat.ptr, mat.span
                        setattr(op, ld, mat.ld)
                    else:
                        src = mat.arr.T if mat.t else mat.arr  # as stored, row-major
                        np.copyto(scratch.view(off, src.dtype, src.shape), src)
                        operand.buffer, operand.offset = scratch.id, off
                        setattr(op, ld, src.shape[1])
                        off += _align(src.nbytes)
                finish = self._place_c(op, c, out, direct, inline, scratch, off, shape, gdt,
                                       res_dt, syr2k, keep)
                return self._submit(op, finish, keep, scratch, what, priority, background)
            except BaseException:
                if scratch is not None:
                    self._scratch_put(scratch)
                raise

    def _direct_out(self, out, gdt, ma, mb):
        """(buffer, offset) of `out` when the daemon can write the result
        there itself: shared, of the computed type, row-major, apart from
        the inputs. Else None."""
        if out is None or not _wire_dtype_ok(out, gdt):
            return None
        lay = _layout(out)
        if lay is None or lay[0]:
            return None
        if np.may_share_memory(out, ma.arr) or np.may_share_memory(out, mb.arr):
            return None
        mo = _Mat(out)
        return self._shared_of(mo.ptr, mo.span)

    def _place_c(self, op, c, out, direct, inline, scratch, off, shape, gdt, res_dt, syr2k, keep):
        """Fills op.c (and op.ldc) and returns the function that makes the
        result once the op is done."""
        m, n = shape
        wnp = _WIRE_NP[gdt]
        cw = None
        if c is None:
            op.beta = 0.0
        elif not (direct and c is out):
            cw = np.ascontiguousarray(np.broadcast_to(_to_wire(c, gdt), shape))
            keep.append(cw)
        if direct:
            op.c.buffer, op.c.offset = direct
            op.ldc = _layout(out)[1]
            if cw is not None:
                np.copyto(out, cw.view(out.dtype))
            elif c is None and syr2k:
                out[...] = 0  # the triangle not computed is zero
            return lambda: out
        op.ldc = n
        if inline:
            if out is not None and _wire_dtype_ok(out, gdt) and out.flags.c_contiguous:
                dest = out  # the library writes the result there
            else:
                dest = np.empty(shape, wnp)
                keep.append(dest)
            if cw is not None:
                op.c.data = cw.ctypes.data
            op.c.out = dest.ctypes.data
            op.c.bytes = m * n * wnp.itemsize
            wire = dest
        else:
            wire = scratch.view(off, wnp, shape)
            if cw is not None:
                np.copyto(wire, cw.view(wnp))
            elif syr2k:
                wire[...] = 0  # scratch is reused: the other triangle must be zero
            op.c.buffer, op.c.offset = scratch.id, off

        def finish():
            if wire is out:
                return out
            res = _from_wire(wire.view(wnp), gdt, res_dt)
            if out is not None:
                np.copyto(out, res, casting="unsafe")
                return out
            if scratch is not None and np.may_share_memory(res, wire):
                res = res.copy()  # the scratch buffer goes back to the pool
            return res
        return finish

    # ---- CUDA tensors ----

    def _cuda_ops(self):
        if self._cuda is None:
            from . import _cuda
            self._cuda = _cuda.CudaOps(self)
        return self._cuda


def _torch_tensor(*xs):
    return any(x is not None and type(x).__module__.split(".")[0] == "torch" for x in xs)


def _cuda_tensor(*xs):
    for x in xs:
        if x is not None and type(x).__module__.split(".")[0] == "torch" \
                and getattr(x, "is_cuda", False):
            return True
    return False


def _now():
    import time
    return time.monotonic()


_libc = None


def _libc_free(p):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
        _libc.free.argtypes = [ctypes.c_void_p]
        _libc.free.restype = None
    _libc.free(p)


# ---- the default client ---------------------------------------------------

_default = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The client the module-level functions use: connected on first use to
    $GEMMD_SOCKET (else the daemon's default socket), and again if it was
    closed; closed when the interpreter exits."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            import atexit
            _default = Client()
            atexit.register(_default.close)
        return _default


def matmul(a: ArrayLike, b: ArrayLike, out: Optional[Any] = None, *, dtype: DType = None,
           allow_tf32: bool = False, priority: Priority = "normal") -> Any:
    """a @ b with NumPy's matmul rules, on the default client (see
    Client.matmul)."""
    return default_client().matmul(a, b, out, dtype=dtype, allow_tf32=allow_tf32,
                                   priority=priority)
