"""ctypes declarations of libgemmd (include/gemmd.h), and how it is found.

Only the C library speaks the wire protocol; this module mirrors the public
header's structs and prototypes and nothing else.
"""

import ctypes
import ctypes.util
import os
import threading

# Error codes (gemmd.h). Appended only, never renumbered.
EPROTO = -1001
EVERSION = -1002
ETOOBIG = -1003
EINVAL = -1004
EBOUNDS = -1005
EOVERFLOW = -1006
ENOBUF = -1007
EBUSY = -1008
ELIMIT = -1009
EUNSUPPORTED = -1010
EDEVICE = -1011
ESHUTDOWN = -1012
ECANCELED = -1013
EDISCONNECT = -1014
EPERM = -1015
ENOTICKET = -1016
ERESOURCE = -1017

GEMM, SYR2K = 0, 1
F32, F16, BF16, F64 = 0, 1, 2, 3
OP_N, OP_T = 0, 1
LOWER, UPPER = 0, 1
OPF_ROW_MAJOR = 0x1
OPF_ALLOW_TF32 = 0x2
PRIO_LOW, PRIO_NORMAL, PRIO_HIGH = 0, 1, 2


class Operand(ctypes.Structure):
    _fields_ = [
        ("buffer", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("bytes", ctypes.c_uint64),
    ]


class Op(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("trans_a", ctypes.c_int),
        ("trans_b", ctypes.c_int),
        ("uplo", ctypes.c_int),
        ("flags", ctypes.c_uint32),
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("lda", ctypes.c_int64),
        ("ldb", ctypes.c_int64),
        ("ldc", ctypes.c_int64),
        ("alpha", ctypes.c_double),
        ("beta", ctypes.c_double),
        ("a", Operand),
        ("b", Operand),
        ("c", Operand),
    ]


class Result(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int),
        ("queue_us", ctypes.c_uint64),
        ("run_us", ctypes.c_uint64),
        ("group_id", ctypes.c_uint64),
        ("group_size", ctypes.c_uint32),
        ("kernel", ctypes.c_char * 32),
        ("admit_ns", ctypes.c_uint64),
        ("reply_ns", ctypes.c_uint64),
    ]


class Info(ctypes.Structure):
    _fields_ = [
        ("protocol_version", ctypes.c_uint32),
        ("server_version", ctypes.c_char * 32),
        ("backend", ctypes.c_char * 16),
        ("ndevices", ctypes.c_uint32),
        ("session_id", ctypes.c_uint64),
        ("max_frame_bytes", ctypes.c_uint64),
        ("max_ops_per_submit", ctypes.c_uint32),
        ("max_inline_bytes", ctypes.c_uint64),
        ("max_inflight_ops", ctypes.c_uint32),
        ("max_buffers", ctypes.c_uint32),
        ("max_buffer_bytes", ctypes.c_uint64),
        ("max_queue_ops", ctypes.c_uint32),
    ]


class Device(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_uint32),
        ("name", ctypes.c_char * 64),
        ("backend", ctypes.c_char * 16),
        ("units", ctypes.c_uint32),
        ("memory_bytes", ctypes.c_uint64),
        ("dtypes", ctypes.c_uint32),
    ]


# The sizes gemmd.h first gave these structs on LP64 targets. Fields may be
# appended to them (never inserted), so every struct handed to the library
# comes from new(): zeroed, with room behind it for fields this module does
# not know. The library may write them (Info, Device, Result), and reads 0,
# "the default", from any it expects in an Op.
# Op: 208 bytes since alpha and beta became doubles (libgemmd.so.1).
assert ctypes.sizeof(Operand) == 40 and ctypes.sizeof(Op) == 208
# Result: 72 bytes first; 88 since admit_ns and reply_ns were appended.
assert ctypes.sizeof(Result) == 88 and ctypes.sizeof(Info) == 112
# Device: 96 bytes first; 104 since dtypes was appended.
assert ctypes.sizeof(Device) == 104

_SLACK = 1024


def new(struct, **fields):
    """A zeroed `struct` followed by _SLACK zeroed bytes, with `fields` set."""
    room = (ctypes.c_char * (ctypes.sizeof(struct) + _SLACK))()
    obj = struct.from_buffer(room)  # keeps `room` alive
    for k, v in fields.items():
        setattr(obj, k, v)
    return obj

_P = ctypes.c_void_p
_PROTOTYPES = {
    "gemmd_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "gemmd_disconnect": (None, [_P]),
    "gemmd_get_info": (ctypes.c_int, [_P, ctypes.POINTER(Info)]),
    "gemmd_get_device": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(Device)]),
    "gemmd_buffer_alloc": (ctypes.c_int, [_P, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64),
                                          ctypes.POINTER(_P)]),
    "gemmd_buffer_free": (ctypes.c_int, [_P, ctypes.c_uint64]),
    "gemmd_register_device": (ctypes.c_int, [_P, _P, ctypes.c_uint64,
                                             ctypes.POINTER(ctypes.c_uint64)]),
    "gemmd_unregister": (ctypes.c_int, [_P, ctypes.c_uint64]),
    "gemmd_submit": (ctypes.c_int, [_P, ctypes.POINTER(Op), ctypes.c_size_t, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_uint64)]),
    "gemmd_wait": (ctypes.c_int, [_P, ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(Result),
                                  ctypes.c_size_t]),
    "gemmd_fd": (ctypes.c_int, [_P]),
    "gemmd_poll": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_uint64)]),
    "gemmd_stats": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(_P)]),
    "gemmd_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "gemmd_last_error": (ctypes.c_char_p, [_P]),
}

_lib = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("GEMMD_LIBRARY")
    if env:
        yield env
        return
    # A repository checkout (python/gemmd/ beside include/gemmd.h):
    # build/libgemmd.so. An installed package is not in one.
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
    if os.path.exists(os.path.join(root, "include", "gemmd.h")):
        yield os.path.normpath(os.path.join(root, "build", "libgemmd.so"))
    found = ctypes.util.find_library("gemmd")
    if found:
        yield found
    # The soname, through the dynamic loader's own search (LD_LIBRARY_PATH,
    # ld.so.cache), which find_library does not always consult.
    yield "libgemmd.so.1"


def load():
    """Returns libgemmd as a ctypes.CDLL, loading it on first use.

    The search order is $GEMMD_LIBRARY (and nothing else when it is set),
    build/libgemmd.so of the checkout this package sits in (none once it is
    installed with pip), then the system's libgemmd (ctypes.util.find_library,
    then libgemmd.so.1 through the loader's path). Raises OSError when none
    loads.
    """
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(path + " (missing)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            for name, (res, args) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = res
                fn.argtypes = args
            _lib = lib
            return lib
        raise OSError("libgemmd not found; set GEMMD_LIBRARY or build it with `make`. Tried: "
                      + ("; ".join(tried) if tried else "nothing"))


def strerror(code: int) -> str:
    """The library's description of a code (a negative errno or GEMMD_E*)."""
    return load().gemmd_strerror(int(code)).decode("utf-8", "replace")
