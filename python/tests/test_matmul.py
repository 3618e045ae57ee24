"""gemmd.matmul against numpy.matmul, the c/beta rule shared with gemmctl
and gemmd.h, empty operands, the daemon's reason in GemmdError, and the
package's version, against a real CPU-backend daemon."""

import os
import re
import shutil
import subprocess
import unittest

import numpy as np

from daemon_util import ROOT, DaemonTestCase, rand, tolerance

import gemmd

SHAPES = [
    ((7,), (7,)),                 # 1-D @ 1-D: a scalar
    ((7,), (7, 3)),               # 1-D a: a row, left out of the result
    ((4, 7), (7,)),               # 1-D b: a column
    ((4, 7), (7, 3)),
    ((5, 4, 7), (7, 3)),          # a stack times one matrix
    ((7,), (5, 7, 3)),            # a 1-D a against a stack
    ((5, 4, 7), (5, 7, 3)),
    ((3, 1, 4, 7), (2, 7, 3)),    # stacks broadcast to (3, 2)
    ((1, 4, 7), (6, 7, 2)),
]
EMPTY = [
    ((0, 8), (8, 3)),             # m == 0
    ((4, 8), (8, 0)),             # n == 0
    ((4, 0), (0, 3)),             # k == 0: zeros
    ((0,), (0,)),                 # k == 0 of two vectors: 0.0
    ((0, 4, 8), (8, 3)),          # an empty stack
    ((2, 4, 0), (2, 0, 3)),
]


class TestMatmul(DaemonTestCase):
    daemon_args = ("--max-ops-per-submit", "4")

    def setUp(self):
        self.rng = np.random.default_rng(7)
        self.c = self.client()

    def check(self, got, ref, dtype, k, what):
        self.assertEqual(np.shape(got), ref.shape, what)
        got = np.asarray(got, dtype=np.float64)
        err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30) if ref.size else 0.0
        self.assertLessEqual(err, tolerance(dtype, k), "%s: relative error %g" % (what, err))

    def test_numpy_shapes(self):
        for threshold in (1 << 30, 0):  # inline, then through a scratch buffer
            c = self.client(inline_threshold=threshold)
            for sa, sb in SHAPES:
                a, b = rand(self.rng, sa), rand(self.rng, sb)
                what = "%s @ %s, inline_threshold %d" % (sa, sb, threshold)
                got = c.matmul(a, b)
                ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
                self.assertEqual(got.dtype, np.float32, what)
                self.assertEqual(type(got), type(np.matmul(a, b)), what)  # 1-D @ 1-D: a scalar
                self.check(got, ref, "f32", sa[-1], what)

    def test_many_products_in_chunks(self):
        """30 products on a daemon taking 4 ops a submit: 8 submits, each
        product in its place."""
        a, b = rand(self.rng, (5, 6, 3, 9)), rand(self.rng, (6, 9, 2))
        fut = self.c.matmul_async(a, b)
        got = fut.result(30)
        self.check(got, np.matmul(a.astype(np.float64), b.astype(np.float64)), "f32", 9,
                   "chunked")
        self.assertIsNotNone(fut.info)

    def test_shared_operands_and_out(self):
        a = self.c.empty((3, 4, 5))
        a[...] = rand(self.rng, (3, 4, 5))
        b = rand(self.rng, (5, 6))
        out = np.full((3, 4, 6), np.nan)
        self.assertIs(self.c.matmul(a, b, out), out)
        self.check(out, np.matmul(a.astype(np.float64), b), "f32", 5, "shared a, float64 out")

    def test_empty(self):
        for sa, sb in EMPTY:
            a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
            got = self.c.matmul(a, b)
            ref = np.matmul(a, b)
            what = "%s @ %s" % (sa, sb)
            self.assertEqual(np.shape(got), ref.shape, what)
            self.assertEqual(type(got), type(ref), what)
            np.testing.assert_array_equal(got, ref, what)
        self.assertEqual(self.c.gemm(np.ones((0, 8)), np.ones((8, 3))).shape, (0, 3))
        np.testing.assert_array_equal(self.c.gemm(np.ones((2, 0)), np.ones((0, 3))),
                                      np.zeros((2, 3)))
        got = self.c.syr2k(np.ones((3, 0)), np.ones((3, 0)), np.full((3, 3), 2.0), beta=0.5)
        np.testing.assert_array_equal(got, np.tril(np.full((3, 3), 1.0)) +
                                      np.triu(np.full((3, 3), 2.0), 1))

    def test_f16_and_bf16(self):
        a, b = rand(self.rng, (2, 8, 16)), rand(self.rng, (16, 4))
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        h = self.c.matmul(a.astype(np.float16), b.astype(np.float16))
        self.assertEqual(h.dtype, np.float16)
        self.check(h, ref, "f16", 16, "f16")
        got = self.c.matmul(a, b, dtype="bf16")
        self.assertEqual(got.dtype, np.float32)
        self.check(got, ref, "bf16", 16, "computed in bf16")

    def test_bad_shapes(self):
        with self.assertRaises(ValueError):
            self.c.matmul(np.ones((4, 5)), np.ones((4, 5)))
        with self.assertRaises(ValueError):
            self.c.matmul(np.ones((2, 4, 5)), np.ones((3, 5, 4)))
        with self.assertRaises(ValueError):
            self.c.matmul(np.float32(2), np.ones((2, 2)))

    def test_module_level_matmul(self):
        old = os.environ.get("GEMMD_SOCKET")
        os.environ["GEMMD_SOCKET"] = self.daemon.sock
        try:
            a, b = rand(self.rng, (3, 4)), rand(self.rng, (4,))
            self.check(gemmd.matmul(a, b), a.astype(np.float64) @ b, "f32", 4, "gemmd.matmul")
            self.assertIs(gemmd.default_client(), gemmd.default_client())
        finally:
            gemmd.default_client().close()
            if old is None:
                del os.environ["GEMMD_SOCKET"]
            else:
                os.environ["GEMMD_SOCKET"] = old

    @unittest.skipUnless(__import__("importlib").util.find_spec("torch"), "needs PyTorch")
    def test_torch_cpu_tensors(self):
        import torch
        a, b = torch.rand((2, 3, 5)), torch.rand((5, 4))
        got = self.c.matmul(a, b)
        self.assertIsInstance(got, torch.Tensor)
        self.check(got.numpy(), torch.matmul(a.double(), b.double()).numpy(), "f32", 5, "torch")
        got = self.c.matmul(a.bfloat16(), b.bfloat16())
        self.assertEqual(got.dtype, torch.bfloat16)


class TestCAndBeta(DaemonTestCase):
    """When C is given and beta is not, beta is 1; when C is not given, C is
    zero and beta must be 0 or left out (as gemmctl gemm A B -c C)."""

    def test_rule(self):
        c = self.client()
        a, b = np.full((2, 3), 1.0, np.float32), np.full((3, 2), 2.0, np.float32)
        cc = np.full((2, 2), 100.0, np.float32)
        np.testing.assert_array_equal(c.gemm(a, b, cc), np.full((2, 2), 106.0))
        np.testing.assert_array_equal(c.gemm(a, b, cc, beta=0.5), np.full((2, 2), 56.0))
        np.testing.assert_array_equal(c.gemm(a, b, cc, beta=0), np.full((2, 2), 6.0))
        np.testing.assert_array_equal(c.gemm(a, b), np.full((2, 2), 6.0))
        np.testing.assert_array_equal(c.gemm(a, b, beta=0), np.full((2, 2), 6.0))
        with self.assertRaises(ValueError) as cm:
            c.gemm(a, b, beta=1.0)
        self.assertIn("beta must be 0 or left out", str(cm.exception))
        s = c.syr2k(a, a, np.full((2, 2), 10.0, np.float32))
        np.testing.assert_array_equal(s, [[16.0, 10.0], [16.0, 16.0]])
        with self.assertRaises(ValueError):
            c.syr2k(a, a, beta=2.0)


class TestDaemonReasons(DaemonTestCase):
    daemon_args = ("--max-buffer-bytes", "4096", "--max-buffers", "2")

    def test_reason_in_the_message(self):
        c = self.client()
        for _ in range(2):  # the second time too: never an older call's reason
            with self.assertRaises(gemmd.GemmdError) as cm:
                c.empty((100, 100))
            e = cm.exception
            self.assertEqual(e.code, gemmd.ELIMIT)
            self.assertIn("at most 4096", e.message)
            self.assertIn("at most 4096", str(e))
            self.assertIn("limit exceeded", str(e))
        keep = [c.empty((4,)), c.empty((4,))]
        with self.assertRaises(gemmd.GemmdError) as cm:
            c.empty((4,))
        self.assertEqual(cm.exception.code, gemmd.ELIMIT)
        self.assertIn("buffers per session", cm.exception.message)  # the daemon's words
        del keep


class TestTyping(unittest.TestCase):
    def test_public_api_is_annotated(self):
        import typing
        for fn in (gemmd.Client.gemm, gemmd.Client.syr2k, gemmd.Client.matmul, gemmd.matmul,
                   gemmd.Client.gemm_async, gemmd.Client.empty, gemmd.Client.__init__):
            hints = typing.get_type_hints(fn)
            self.assertIn("return", hints, fn.__qualname__)
            for name in ("dtype", "priority"):
                if name in fn.__code__.co_varnames[:fn.__code__.co_argcount +
                                                   fn.__code__.co_kwonlyargcount]:
                    self.assertIn(name, hints, fn.__qualname__)
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(gemmd.__file__), "py.typed")))

    @unittest.skipUnless(shutil.which("mypy"), "needs mypy")
    def test_mypy(self):
        r = subprocess.run(["mypy", "--ignore-missing-imports", "--cache-dir", os.devnull,
                            "-p", "gemmd"], cwd=os.path.join(ROOT, "python"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace"))


class TestVersion(unittest.TestCase):
    def test_version_is_the_makefiles(self):
        with open(os.path.join(ROOT, "Makefile")) as f:
            make = re.search(r"^VERSION := (\S+)$", f.read(), re.M).group(1)
        self.assertEqual(gemmd.__version__, make)
        with open(os.path.join(ROOT, "python", "pyproject.toml")) as f:
            self.assertIn('dynamic = ["version"]', f.read())


if __name__ == "__main__":
    unittest.main()
