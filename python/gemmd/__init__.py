"""gemmd: GEMM and SYR2K as a service, from Python.

A thin ctypes layer over libgemmd (the C client library), so the wire
protocol lives in one place:

    import numpy as np, gemmd

    with gemmd.Client() as c:                 # $GEMMD_SOCKET, else the default
        x = c.gemm(a, b, trans_b=True)        # a @ b.T
        f = c.syr2k_async(a, b, alpha=0.5)    # a Future
        y = f.result()
        z = c.gemm(a, b, c0)                  # a @ b + c0 (beta is 1 when c is given)

    p = gemmd.matmul(stack, b)                # NumPy's matmul rules, one submit

The library is found through $GEMMD_LIBRARY, then build/libgemmd.so of the
checkout this package lies in, then the system's libgemmd.
"""

from ._version import __version__

from ._client import Client, Future, GemmdError, OpInfo, default_client, matmul
from ._lib import (EBOUNDS, EBUSY, ECANCELED, EDEVICE, EDISCONNECT, EINVAL, ELIMIT, ENOBUF,
                   ENOTICKET, EOVERFLOW, ERESOURCE, EPERM, EPROTO, ESHUTDOWN, ETOOBIG, EUNSUPPORTED,
                   EVERSION, PRIO_HIGH, PRIO_LOW, PRIO_NORMAL, strerror)

__all__ = [
    "__version__",
    "Client", "Future", "GemmdError", "OpInfo", "strerror", "matmul", "default_client",
    "PRIO_LOW", "PRIO_NORMAL", "PRIO_HIGH",
    "EPROTO", "EVERSION", "ETOOBIG", "EINVAL", "EBOUNDS", "EOVERFLOW", "ENOBUF", "EBUSY",
    "ELIMIT", "EUNSUPPORTED", "EDEVICE", "ESHUTDOWN", "ECANCELED", "EDISCONNECT", "EPERM",
    "ENOTICKET", "ERESOURCE",
]
