"""A PEP 517 build backend for the gemmd package, with the standard library
alone: no setuptools, so building needs nothing from a package index.

It builds a pure-Python wheel of gemmd/ (py3-none-any; libgemmd is found at
run time, see gemmd/_lib.py) and an sdist of this directory, and supports
editable installs (a .pth file naming this directory). The version is
gemmd/_version.py's, the one place it is written for Python.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

NAME = "gemmd"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(HERE, NAME)
TAG = "py3-none-any"


def _version():
    """__version__ of gemmd/_version.py, read without importing the package
    (importing it would need NumPy, which the build does not)."""
    with open(os.path.join(PKG, "_version.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("gemmd/_version.py has no __version__")
    return m.group(1)


def _metadata():
    """The METADATA (PKG-INFO) text: core metadata 2.1 from what
    pyproject.toml says, with the README as the long description."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + NAME,
        "Version: " + _version(),
        "Summary: GEMM and SYR2K as a service: the Python client of gemmd (ctypes over libgemmd)",
        "Requires-Python: >=3.8",
        "Requires-Dist: numpy",
        "Provides-Extra: bf16",
        'Requires-Dist: ml_dtypes; extra == "bf16"',
        "Provides-Extra: torch",
        'Requires-Dist: torch; extra == "torch"',
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(lines) + "\n\n" + readme


def _package_files():
    """(path in the wheel, path here) of every file of the package, sorted
    so that two builds of the same tree give the same wheel."""
    out = []
    for root, dirs, files in os.walk(PKG):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(root, f)
            out.append((os.path.relpath(full, HERE).replace(os.sep, "/"), full))
    return out


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def _wheel_text():
    return "Wheel-Version: 1.0\nGenerator: gemmd_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _write_wheel(directory, entries):
    """Writes a wheel of entries [(name in the wheel, bytes)] plus the
    dist-info files and a RECORD with every file's hash. Returns its name."""
    di = _dist_info()
    entries = list(entries) + [
        (di + "/METADATA", _metadata().encode("utf-8")),
        (di + "/WHEEL", _wheel_text().encode("utf-8")),
        (di + "/top_level.txt", (NAME + "\n").encode("utf-8")),
    ]
    record = [_record_line(n, d) for n, d in entries] + [di + "/RECORD,,"]
    entries.append((di + "/RECORD", ("\n".join(record) + "\n").encode("utf-8")))
    name = "%s-%s-%s.whl" % (NAME, _version(), TAG)
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries:
            info = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- PEP 517 / PEP 660 hooks ---------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di = os.path.join(metadata_directory, _dist_info())
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(di, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_text())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(n, _read(p)) for n, p in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel holding only a .pth file that puts this directory on sys.path,
    so the installed package is the checkout's, edits included."""
    return _write_wheel(wheel_directory, [(NAME + "_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    """NAME-VERSION.tar.gz: this directory's package, backend and metadata."""
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    files = [(n, p) for n, p in _package_files()]
    for extra in ("pyproject.toml", "README.md", "_backend/gemmd_build.py"):
        files.append((extra, os.path.join(HERE, extra)))
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for n, p in files:
            data = _read(p)
            info = tarfile.TarInfo(base + "/" + n)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            t.addfile(info, io.BytesIO(data))
        pkg_info = _metadata().encode("utf-8")
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size, info.mode, info.mtime = len(pkg_info), 0o644, 0
        t.addfile(info, io.BytesIO(pkg_info))
    return name
