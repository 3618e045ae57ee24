"""gemmd: GEMM and SYR2K as a service, from Python.

A thin ctypes layer over libgemmd (the C client library), so the wire
protocol lives in one place:

    import numpy as np, gemmd

    with gemmd.Client() as c:                 # $GEMMD_SOCKET, else the default
        x = c.gemm(a, b, trans_b=True)        # a @ b.T
        f = c.syr2k_async(a, b, alpha=0.5)    # a Future
        y = f.result()

The library is found through $GEMMD_LIBRARY, then build/libgemmd.so of the
checkout this package lies in, then the system's libgemmd.
"""

from ._version import __version__

from ._client import Client, Future, GemmdError, OpInfo
from ._lib import (EBOUNDS, EBUSY, ECANCELED, EDEVICE, EDISCONNECT, EINVAL, ELIMIT, ENOBUF,
                   ENOTICKET, EOVERFLOW, ERESOURCE, EPERM, EPROTO, ESHUTDOWN, ETOOBIG, EUNSUPPORTED,
                   EVERSION, PRIO_HIGH, PRIO_LOW, PRIO_NORMAL, strerror)

__all__ = [
    "__version__",
    "Client", "Future", "GemmdError", "OpInfo", "strerror",
    "PRIO_LOW", "PRIO_NORMAL", "PRIO_HIGH",
    "EPROTO", "EVERSION", "ETOOBIG", "EINVAL", "EBOUNDS", "EOVERFLOW", "ENOBUF", "EBUSY",
    "ELIMIT", "EUNSUPPORTED", "EDEVICE", "ESHUTDOWN", "ECANCELED", "EDISCONNECT", "EPERM",
    "ENOTICKET", "ERESOURCE",
]
