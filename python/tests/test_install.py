"""The package installs with pip from the repository, offline, into a fresh
virtual environment (python3 -m venv; skipped where the venv module or its
pip is missing), and the installed copy runs a gemm against a real daemon.
`pip wheel` builds a wheel whose RECORD matches its files."""

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile


from daemon_util import BIN, ROOT, DaemonTestCase

import gemmd

PYDIR = os.path.join(ROOT, "python")


def _venv(where):
    """Creates a venv seeing the system's packages (NumPy) and returns its
    python, or skips when this interpreter cannot make one with pip."""
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", where],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    py = os.path.join(where, "bin", "python")
    if r.returncode or not os.path.exists(py):
        raise unittest.SkipTest("python3 -m venv failed (python3-venv missing?): "
                                + r.stdout.decode(errors="replace")[-300:])
    if subprocess.run([py, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        raise unittest.SkipTest("the venv has no pip (python3-venv missing?)")
    return py


def _pip(py, *args):
    r = subprocess.run([py, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=dict(os.environ, PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull))
    return r.returncode, r.stdout.decode(errors="replace")


SCRIPT = r"""
import sys, numpy as np, gemmd
assert gemmd.__file__.startswith(sys.prefix), gemmd.__file__
print("version", gemmd.__version__)
print("library", gemmd._lib.load()._name)
with gemmd.Client(sys.argv[1]) as c:
    a = np.full((3, 4), 1.0, np.float32)
    print("gemm", c.gemm(a, a.T, np.full((3, 3), 100.0, np.float32))[0, 0])
"""


class TestInstall(DaemonTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gemmd-venv-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def run_installed(self, py, env):
        r = subprocess.run([py, "-c", SCRIPT, self.daemon.sock], cwd=self.tmp,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=dict(os.environ, PYTHONPATH="", **env))
        out = r.stdout.decode(errors="replace")
        self.assertEqual(r.returncode, 0, out)
        return out

    def test_pip_install_into_a_fresh_venv(self):
        py = _venv(os.path.join(self.tmp, "venv"))
        rc, out = _pip(py, "install", PYDIR)
        self.assertEqual(rc, 0, out)
        # $GEMMD_LIBRARY, as the installed package is in no checkout.
        out = self.run_installed(py, {"GEMMD_LIBRARY": os.path.join(BIN, "libgemmd.so")})
        self.assertIn("version %s" % gemmd.__version__, out)
        self.assertIn("gemm 104.0", out)  # beta is 1 with c given
        # Else the system's, by its soname through the loader's path.
        lib = os.path.join(self.tmp, "lib")
        os.mkdir(lib)
        os.symlink(os.path.join(BIN, "libgemmd.so"), os.path.join(lib, "libgemmd.so.1"))
        out = self.run_installed(py, {"GEMMD_LIBRARY": "", "LD_LIBRARY_PATH": lib})
        self.assertIn("library libgemmd.so.1", out)
        self.assertIn("gemm 104.0", out)
        rc, out = _pip(py, "uninstall", "-y", "gemmd")
        self.assertEqual(rc, 0, out)

    def test_pip_wheel(self):
        py = _venv(os.path.join(self.tmp, "venv"))
        rc, out = _pip(py, "wheel", "--no-deps", "-w", self.tmp, PYDIR)
        self.assertEqual(rc, 0, out)
        whl = os.path.join(self.tmp, "gemmd-%s-py3-none-any.whl" % gemmd.__version__)
        with zipfile.ZipFile(whl) as z:
            names = set(z.namelist())
            di = "gemmd-%s.dist-info/" % gemmd.__version__
            for need in ("gemmd/__init__.py", "gemmd/py.typed", di + "METADATA", di + "WHEEL"):
                self.assertIn(need, names)
            rows = list(csv.reader(io.StringIO(z.read(di + "RECORD").decode())))
            self.assertEqual({r[0] for r in rows}, names)
            for name, digest, size in rows:
                if name == di + "RECORD":
                    continue
                data = z.read(name)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                self.assertEqual(digest, "sha256=" + want.decode(), name)
                self.assertEqual(int(size), len(data), name)
            self.assertIn("Requires-Dist: numpy", z.read(di + "METADATA").decode())


if __name__ == "__main__":
    unittest.main()
