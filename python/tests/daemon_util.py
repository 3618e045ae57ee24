"""What the Python suites share: a real build/gemmd per test class on a
temporary socket, and NumPy float64 references.

DaemonTestCase.setUpClass starts `build/gemmd --socket DIR/gemmd.sock
--backend cpu --threads 2` plus the class's `daemon_args` (where "{dir}"
stands for DIR), and waits up to
10 s until the socket accepts a connection. tearDownClass sends SIGTERM and
fails unless gemmd exits with status 0 within 20 s. Whenever something about
the daemon goes wrong its log is printed.
"""

import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
sys.path.insert(0, os.path.join(ROOT, "python"))
# $GEMMD_BIN names another build directory (`make BUILD=DIR test` sets it).
BIN = os.environ.get("GEMMD_BIN") or os.path.join(ROOT, "build")
GEMMD = os.path.join(BIN, "gemmd")

import gemmd  # noqa: E402  (after the path is set)


def _die_with_parent():
    """In the child: a daemon dies with the test process that started it, so
    a test that crashes or is killed leaves nothing running."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Daemon:
    def __init__(self, args=(), backend="cpu"):
        self.dir = tempfile.mkdtemp(prefix="gemmd-py-")
        self.sock = os.path.join(self.dir, "gemmd.sock")
        self.log_path = os.path.join(self.dir, "gemmd.log")
        self.log = open(self.log_path, "wb")
        # "{dir}" in an argument stands for the daemon's temporary directory.
        args = [a.replace("{dir}", self.dir) for a in args]
        cmd = [GEMMD, "--socket", self.sock, "--backend", backend, "--threads", "2"] + args
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                self.fail("gemmd exited with status %d at start" % self.proc.returncode)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.sock)
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    self.fail("gemmd did not accept connections within 10 s")
                time.sleep(0.02)
            finally:
                s.close()

    def text(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def fail(self, why):
        sys.stderr.write("%s\n---- gemmd log ----\n%s-------------------\n" % (why, self.text()))
        self.cleanup()
        raise RuntimeError(why)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        """SIGTERM; returns gemmd's exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode

    def cleanup(self):
        self.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class DaemonTestCase(unittest.TestCase):
    daemon_args = ()
    backend = "cpu"

    @classmethod
    def setUpClass(cls):
        if not os.access(GEMMD, os.X_OK):
            raise unittest.SkipTest("build/gemmd is not built (run make)")
        cls.daemon = Daemon(cls.daemon_args, cls.backend)

    @classmethod
    def tearDownClass(cls):
        d = cls.daemon
        rc = d.stop()
        log = d.text()
        d.cleanup()
        if rc != 0 or "handles left open" in log:
            sys.stderr.write("---- gemmd log ----\n%s-------------------\n" % log)
            raise AssertionError("gemmd exited with status %r after SIGTERM" % rc)

    def client(self, **kw):
        c = gemmd.Client(self.daemon.sock, **kw)
        self.addCleanup(c.close)
        return c


def _bindable(family, host, port):
    """Whether a listening socket could take host:port now (False also
    where the family is missing)."""
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return family != socket.AF_INET
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_tcp_port():
    """A TCP port that nothing uses right now, on every IPv4 and IPv6
    address. It is drawn below the kernel's ephemeral range, so that the
    tests' own client connections, which take local ports from that range,
    do not land on it before a daemon listens there."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        if _bindable(socket.AF_INET, "0.0.0.0", port) and \
                _bindable(socket.AF_INET6, "::", port):
            return port
    raise RuntimeError("no free TCP port in 20000-32000")


def rand(rng, shape, dtype=np.float32):
    """Random values in [-1, 1), never exactly zero."""
    x = rng.uniform(-1, 1, size=shape)
    x[x == 0] = 0.5
    return x.astype(dtype)


def tolerance(dtype, k):
    """Relative-error bound (against the largest reference magnitude) that
    fits the dtype of the inputs and the output, for a K-long dot product."""
    eps = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7, "f64": 2.0 ** -52}[dtype]
    return 4 * eps * (1 + np.sqrt(k))
