"""gemmd.Client against a real CPU-backend daemon, checked against NumPy
float64 references."""

import concurrent.futures
import gc
import itertools
import os
import threading
import unittest
import unittest.mock

import numpy as np

from daemon_util import DaemonTestCase, rand, tolerance

import gemmd

DT = {"f32": np.float32, "f16": np.float16}


class Check:
    def assertClose(self, got, ref, dtype, k, what=""):
        got = np.asarray(got, dtype=np.float64)
        self.assertEqual(got.shape, ref.shape, what)
        self.assertTrue(np.all(np.isfinite(got)), "%s: non-finite values" % what)
        scale = max(np.abs(ref).max(), 1e-30)
        err = np.abs(got - ref).max() / scale
        self.assertLessEqual(err, tolerance(dtype, k), "%s: relative error %g" % (what, err))


def gemm_ref(a, b, c, alpha, beta, ta, tb):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    r = alpha * ((a.T if ta else a) @ (b.T if tb else b))
    if c is not None:
        r = r + beta * np.asarray(c, dtype=np.float64)
    return r


def syr2k_ref(a, b, c, alpha, beta, trans, lower):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if trans:
        a, b = a.T, b.T
    full = alpha * (a @ b.T + b @ a.T)
    n = full.shape[0]
    cc = np.zeros((n, n)) if c is None else np.asarray(c, dtype=np.float64)
    if c is not None:
        full = full + beta * cc
    tri = np.tril if lower else np.triu
    other = np.triu(cc, 1) if lower else np.tril(cc, -1)
    return tri(full) + other


def ld_gemm_ref(a, b, c, alpha, beta, ta, tb):
    """gemm_ref in long double: a reference for f64."""
    a, b = a.astype(np.longdouble), b.astype(np.longdouble)
    r = np.longdouble(alpha) * ((a.T if ta else a) @ (b.T if tb else b))
    if c is not None:
        r = r + np.longdouble(beta) * np.asarray(c, dtype=np.longdouble)
    return r


class TestF64(DaemonTestCase):
    """float64 arrays compute in f64, with alpha and beta as given."""

    def setUp(self):
        self.rng = np.random.default_rng(64)
        self.c = self.client()

    def close(self, got, ref, k, what):
        """The relative error of got against the long double ref, asserted
        within f64's bound and returned."""
        self.assertEqual(got.dtype, np.float64, what)
        ref = np.asarray(ref, dtype=np.longdouble)
        err = float(np.abs(got.astype(np.longdouble) - ref).max() / np.abs(ref).max())
        self.assertLessEqual(err, tolerance("f64", k), "%s: relative error %g" % (what, err))
        return err

    def test_device_says_it_runs_f64(self):
        self.assertIn("f64", self.c._devices[0]["dtypes"])

    def test_gemm_shapes_transposes_and_double_scalars(self):
        for (m, n, k), ta, tb in itertools.product([(1, 1, 1), (33, 17, 65), (70, 9, 600)],
                                                   [False, True], [False, True]):
            a = self.rng.uniform(-1, 1, (k, m) if ta else (m, k))
            b = self.rng.uniform(-1, 1, (n, k) if tb else (k, n))
            c = self.rng.uniform(-1, 1, (m, n))
            what = "gemm %dx%dx%d ta=%d tb=%d" % (m, n, k, ta, tb)
            got = self.c.gemm(a, b, c, alpha=1 / 3, beta=0.1, trans_a=ta, trans_b=tb)
            self.close(got, ld_gemm_ref(a, b, c, 1 / 3, 0.1, ta, tb), k, what)
            # Judged with the scalars rounded to float, it is far off: the
            # daemon used the doubles.
            off = ld_gemm_ref(a, b, c, float(np.float32(1 / 3)), float(np.float32(0.1)), ta, tb)
            err = np.abs(got.astype(np.longdouble) - off).max() / np.abs(off).max()
            self.assertGreater(float(err), tolerance("f64", k), what)

    def test_syr2k_both_triangles(self):
        n, k = 37, 300
        a, b = self.rng.uniform(-1, 1, (n, k)), self.rng.uniform(-1, 1, (n, k))
        c = self.rng.uniform(-1, 1, (n, n))
        for lower in (True, False):
            got = self.c.syr2k(a, b, c, alpha=-0.7, beta=1 / 3, lower=lower)
            al, bl = a.astype(np.longdouble), b.astype(np.longdouble)
            full = np.longdouble(-0.7) * (al @ bl.T + bl @ al.T) + np.longdouble(1 / 3) * c
            tri, other = (np.tril, np.triu(c, 1)) if lower else (np.triu, np.tril(c, -1))
            self.close(got, tri(full) + other, 2 * k, "syr2k lower=%s" % lower)

    def test_matmul_stack_and_explicit_dtype(self):
        a, b = self.rng.uniform(-1, 1, (3, 20, 50)), self.rng.uniform(-1, 1, (50, 11))
        got = self.c.matmul(a, b)
        self.close(got, np.matmul(a.astype(np.longdouble), b.astype(np.longdouble)), 50, "matmul")
        # float32 inputs computed in f64 on request: a float32 result of
        # the f64 sums, within one float rounding.
        a32, b32 = a[0].astype(np.float32), b.astype(np.float32)
        got = self.c.gemm(a32, b32, dtype="f64")
        self.assertEqual(got.dtype, np.float32)
        ref = a32.astype(np.float64) @ b32.astype(np.float64)
        self.assertLessEqual(np.abs(got - ref).max() / np.abs(ref).max(), 2.0 ** -23)

    @unittest.skipUnless(__import__("importlib").util.find_spec("torch"), "needs PyTorch")
    def test_torch_float64_tensors(self):
        import torch
        a, b = torch.rand((2, 9, 40), dtype=torch.float64), torch.rand((40, 6), dtype=torch.float64)
        got = self.c.matmul(a, b)
        self.assertEqual(got.dtype, torch.float64)
        self.close(got.numpy(), np.matmul(a.numpy().astype(np.longdouble),
                                          b.numpy().astype(np.longdouble)), 40, "torch float64")


class TestGemm(DaemonTestCase, Check):
    def setUp(self):
        self.rng = np.random.default_rng(1234)
        self.c = self.client()

    def test_shapes_and_transposes(self):
        for (m, n, k), ta, tb in itertools.product(
                [(1, 1, 1), (7, 5, 3), (33, 17, 65), (64, 64, 64), (1, 40, 9), (40, 1, 9)],
                [False, True], [False, True]):
            a = rand(self.rng, (k, m) if ta else (m, k))
            b = rand(self.rng, (n, k) if tb else (k, n))
            got = self.c.gemm(a, b, trans_a=ta, trans_b=tb)
            self.assertEqual(got.dtype, np.float32)
            self.assertClose(got, gemm_ref(a, b, None, 1, 0, ta, tb), "f32", k,
                             "gemm %dx%dx%d ta=%d tb=%d" % (m, n, k, ta, tb))

    def test_alpha_beta_and_c(self):
        a, b = rand(self.rng, (20, 30)), rand(self.rng, (30, 10))
        c = rand(self.rng, (20, 10))
        got = self.c.gemm(a, b, c, alpha=-1.5, beta=0.25)
        self.assertClose(got, gemm_ref(a, b, c, -1.5, 0.25, 0, 0), "f32", 30)
        # c is not changed, and broadcasting works (a row of biases).
        c_before = c.copy()
        self.c.gemm(a, b, c, beta=1.0)
        np.testing.assert_array_equal(c, c_before)
        bias = rand(self.rng, (10,))
        got = self.c.gemm(a, b, bias, beta=1.0)
        self.assertClose(got, gemm_ref(a, b, np.broadcast_to(bias, (20, 10)), 1, 1, 0, 0), "f32", 30)

    def test_layouts(self):
        big = rand(self.rng, (80, 90))
        cases = {
            "fortran": np.asfortranarray(big[:40, :50]),
            "strided rows": big[::2, :50],
            "column slice": big[:40, 10:60],
            "negative strides": big[40:0:-1, 50:0:-1],
            "every other column": big[:40, ::2][:, :45],
        }
        b = rand(self.rng, (50, 30))
        for name, a in cases.items():
            bb = b[:a.shape[1]]
            got = self.c.gemm(a, bb)
            self.assertClose(got, gemm_ref(a, bb, None, 1, 0, 0, 0), "f32", a.shape[1], name)
            got = self.c.gemm(bb.T, a, trans_b=True)
            self.assertClose(got, gemm_ref(bb.T, a, None, 1, 0, 0, 1), "f32", a.shape[1],
                             name + " as B")

    def test_inline_and_scratch_paths(self):
        a, b = rand(self.rng, (300, 200)), rand(self.rng, (200, 100))
        c = rand(self.rng, (300, 100))
        ref = gemm_ref(a, b, c, 2, -1, 0, 0)
        for threshold in (0, 1 << 30):
            cl = self.client(inline_threshold=threshold)
            got = cl.gemm(a, b, c, alpha=2, beta=-1)
            self.assertClose(got, ref, "f32", 200, "inline_threshold=%d" % threshold)
            if threshold == 0:
                self.assertGreater(cl._pool_bytes, 0, "the scratch buffer was not used")
            # The scratch buffer is reused and its old contents never leak.
            got = cl.syr2k(a[:100], b.T)
            self.assertClose(got, syr2k_ref(a[:100], b.T, None, 1, 0, 0, 1), "f32", 200,
                             "syr2k after gemm, threshold %d" % threshold)

    def test_out(self):
        a, b = rand(self.rng, (30, 40)), rand(self.rng, (40, 20))
        c = rand(self.rng, (30, 20))
        out = np.full((30, 20), np.nan, np.float32)
        r = self.c.gemm(a, b, c, beta=0.5, out=out)
        self.assertIs(r, out)
        self.assertClose(out, gemm_ref(a, b, c, 1, 0.5, 0, 0), "f32", 40)
        # In place: out is c.
        c2 = c.copy()
        r = self.c.gemm(a, b, c2, beta=-2.0, out=c2)
        self.assertIs(r, c2)
        self.assertClose(c2, gemm_ref(a, b, c, 1, -2.0, 0, 0), "f32", 40)
        # A non-contiguous out of another dtype.
        out64 = np.full((20, 30), np.nan).T
        self.c.gemm(a, b, out=out64)
        self.assertClose(out64, gemm_ref(a, b, None, 1, 0, 0, 0), "f32", 40)

    def test_dtypes(self):
        a, b = rand(self.rng, (24, 48)), rand(self.rng, (48, 16))
        ref = gemm_ref(a, b, None, 1, 0, 0, 0)
        h = self.c.gemm(a.astype(np.float16), b.astype(np.float16))
        self.assertEqual(h.dtype, np.float16)
        self.assertClose(h, gemm_ref(a.astype(np.float16), b.astype(np.float16), None, 1, 0, 0, 0),
                         "f16", 48)
        for dtype in ("bf16", "f16", "f32"):
            got = self.c.gemm(a, b, dtype=dtype)
            self.assertEqual(got.dtype, np.float32, dtype)
            self.assertClose(got, ref, dtype, 48, "dtype=" + dtype)
        # float64 computes in f64 on this daemon (its CPU device runs it).
        got = self.c.gemm(a.astype(np.float64), b.astype(np.float64))
        self.assertEqual(got.dtype, np.float64)
        self.assertClose(got, ref, "f64", 48, "float64 inputs")
        with self.assertRaises(ValueError):
            self.c.gemm(a, b, dtype="int8")
        with self.assertRaises(ValueError):
            self.c.gemm(a, b, dtype="f16", allow_tf32=True)
        got = self.c.gemm(np.rint(a * 4).astype(np.int32), np.rint(b * 4).astype(np.int16))
        self.assertEqual(got.dtype, np.float32)
        self.assertClose(got, gemm_ref(np.rint(a * 4), np.rint(b * 4), None, 1, 0, 0, 0), "f32",
                         48, "integer inputs")

    def test_complex_and_other_non_real_inputs_are_refused(self):
        """NumPy casts complex to real with only a ComplexWarning: the
        imaginary part would be dropped without an error."""
        a, b = rand(self.rng, (8, 6)), rand(self.rng, (6, 4))
        z = a + 1j * a
        for args, kw, name in [((z, b), {}, "a is complex"),
                               ((a, b.astype(np.complex64)), {}, "b is complex"),
                               ((a, b, z[:, :4].copy()), {"beta": 1.0}, "c is complex"),
                               ((z, b), {"dtype": "f32"}, "a is complex"),
                               ((a > 0, b), {}, "a has dtype bool"),
                               ((a.astype(object), b), {}, "a has dtype object")]:
            with self.assertRaises(TypeError) as cm:
                self.c.gemm(*args, **kw)
            self.assertIn(name, str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            self.c.syr2k(z[:, :6], a[:, :6])
        self.assertIn("a is complex", str(cm.exception))

    def test_bad_arguments(self):
        a = rand(self.rng, (4, 5))
        with self.assertRaises(ValueError):
            self.c.gemm(a, a)  # inner sizes 5 and 4
        with self.assertRaises(ValueError):
            self.c.gemm(a, a.T, rand(self.rng, (3, 4)))
        with self.assertRaises(ValueError):
            self.c.gemm(a[0], a.T)
        with self.assertRaises(ValueError):
            self.c.gemm(a, a.T, out=np.empty((5, 5), np.float32))
        with self.assertRaises(ValueError):
            self.c.gemm(a, a.T, priority="urgent")


class TestSyr2k(DaemonTestCase, Check):
    def setUp(self):
        self.rng = np.random.default_rng(99)
        self.c = self.client()

    def test_triangles_and_trans(self):
        for (n, k), trans, lower, with_c in itertools.product(
                [(1, 1), (9, 4), (40, 33), (64, 16)], [False, True], [True, False], [False, True]):
            shape = (k, n) if trans else (n, k)
            a, b = rand(self.rng, shape), rand(self.rng, shape)
            c = rand(self.rng, (n, n)) if with_c else None
            got = self.c.syr2k(a, b, c, alpha=0.75, beta=1.5 if with_c else None, trans=trans,
                               lower=lower)
            what = "syr2k n=%d k=%d trans=%d lower=%d c=%d" % (n, k, trans, lower, with_c)
            ref = syr2k_ref(a, b, c, 0.75, 1.5, trans, lower)
            self.assertClose(got, ref, "f32", k, what)
            # The triangle not computed is c's (or zero), exactly.
            other = np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)
            np.testing.assert_array_equal(got[other], ref[other], what)

    def test_mixed_layouts_and_f16(self):
        a = rand(self.rng, (30, 12))
        b = np.asfortranarray(rand(self.rng, (30, 12)))
        got = self.c.syr2k(a, b)
        self.assertClose(got, syr2k_ref(a, b, None, 1, 0, 0, 1), "f32", 12)
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        got = self.c.syr2k(a16, b16, lower=False)
        self.assertEqual(got.dtype, np.float16)
        self.assertClose(got, syr2k_ref(a16, b16, None, 1, 0, 0, 0), "f16", 12)
        got = self.c.syr2k(a, b, dtype="bf16")
        self.assertClose(got, syr2k_ref(a, b, None, 1, 0, 0, 1), "bf16", 12)

    def test_shape_mismatch(self):
        with self.assertRaises(ValueError):
            self.c.syr2k(rand(self.rng, (4, 3)), rand(self.rng, (3, 4)))


class TestSharedMemory(DaemonTestCase, Check):
    def setUp(self):
        self.rng = np.random.default_rng(7)
        self.c = self.client(inline_threshold=0)  # anything not shared goes to scratch

    def session_buffers(self):
        st = self.c.stats(json=True)
        mine = [s for s in st["sessions"] if s["id"] == self.c.info["session_id"]]
        return mine[0]["buffers"]

    def test_zero_copy(self):
        m, n, k = 200, 150, 100
        a = self.c.empty((m, k))
        b = self.c.empty((k, n), np.float32)
        out = self.c.empty((m, n))
        self.assertEqual(out.dtype, np.float32)
        self.assertTrue(np.all(out == 0))
        a[...] = rand(self.rng, (m, k))
        b[...] = rand(self.rng, (k, n))
        out[...] = np.nan
        r = self.c.gemm(a, b, out=out)
        self.assertIs(r, out)
        self.assertClose(out, gemm_ref(a, b, None, 1, 0, 0, 0), "f32", k)
        self.assertEqual(self.c._pool_bytes, 0, "a shared operand went through scratch")
        # Views of shared arrays are passed by reference too.
        r = self.c.gemm(a[10:50, :60], b[:60, ::1].T, trans_b=True, out=out[:40, :150].T.T)
        self.assertClose(out[:40], gemm_ref(a[10:50, :60], b[:60].T, None, 1, 0, 0, 1), "f32", 60)
        self.assertEqual(self.c._pool_bytes, 0)
        # SYR2K in place on a shared C.
        c0 = rand(self.rng, (m, m))
        cs = self.c.asarray(c0)
        self.c.syr2k(a, a, cs, beta=1.0, out=cs)
        self.assertClose(cs, syr2k_ref(a, a, c0, 1, 1, 0, 1), "f32", k)
        self.assertEqual(self.c._pool_bytes, 0)

    def test_buffers_are_released(self):
        before = self.session_buffers()
        x = self.c.empty((64, 64))
        y = x[1:]  # a view keeps the buffer
        self.assertEqual(self.session_buffers(), before + 1)
        del x
        gc.collect()
        self.assertEqual(self.session_buffers(), before + 1)
        del y
        gc.collect()
        self.assertEqual(self.session_buffers(), before)

    def test_arrays_outlive_the_client(self):
        c = gemmd.Client(self.daemon.sock)
        x = c.empty((8, 8), np.float16)
        x[...] = 3
        c.close()
        self.assertTrue(c.closed)
        self.assertTrue(np.all(x == 3))
        with self.assertRaises(gemmd.GemmdError):
            c.gemm(x, x)
        del x
        gc.collect()


class TestAsync(DaemonTestCase, Check):
    daemon_args = ("--batch-window-us", "2000")

    def setUp(self):
        self.rng = np.random.default_rng(5)
        # These tests read each op's OpInfo, which an answer by completion
        # word does not carry.
        with unittest.mock.patch.dict(os.environ, {"GEMMD_WORDS": "0"}):
            self.c = self.client()

    def test_many_in_flight(self):
        probs = []
        for i in range(40):
            m, n, k = self.rng.integers(1, 60, size=3)
            a, b = rand(self.rng, (m, k)), rand(self.rng, (k, n))
            if i % 2:
                probs.append((self.c.gemm_async(a, b, alpha=2.0), gemm_ref(a, b, None, 2, 0, 0, 0), k))
            else:
                probs.append((self.c.syr2k_async(a, b.T if n == m else a), None, k))
                ref = syr2k_ref(a, b.T if n == m else a, None, 1, 0, 0, 1)
                probs[-1] = (probs[-1][0], ref, k)
        for fut in concurrent.futures.as_completed([p[0] for p in probs], timeout=60):
            self.assertIsInstance(fut, concurrent.futures.Future)
        grouped = 0
        for fut, ref, k in probs:
            self.assertClose(fut.result(timeout=0), ref, "f32", k)
            self.assertIsInstance(fut.info, gemmd.OpInfo)
            self.assertTrue(fut.info.kernel)
            grouped += fut.info.group_size > 1
            self.assertFalse(fut.cancel())
        self.assertGreater(grouped, 0, "no two ops were batched into one group")

    def test_result_timeout_and_callbacks(self):
        a, b = rand(self.rng, (400, 400)), rand(self.rng, (400, 400))
        seen = threading.Event()
        fut = self.c.gemm_async(a, b)
        fut.add_done_callback(lambda f: seen.set())
        self.assertClose(fut.result(timeout=60), gemm_ref(a, b, None, 1, 0, 0, 0), "f32", 400)
        self.assertTrue(seen.wait(10))

    def test_callback_may_wait(self):
        a, b = rand(self.rng, (10, 10)), rand(self.rng, (10, 10))
        got = []
        fut = self.c.gemm_async(a, b)
        fut.add_done_callback(lambda f: got.append(self.c.gemm(f.result(), b)))
        fut.result(timeout=30)
        for _ in range(500):
            if got:
                break
            threading.Event().wait(0.01)
        self.assertClose(got[0], gemm_ref(gemm_ref(a, b, None, 1, 0, 0, 0).astype(np.float32), b,
                                          None, 1, 0, 0, 0), "f32", 10)

    def test_threads_share_a_client(self):
        errors = []

        def work(seed):
            rng = np.random.default_rng(seed)
            try:
                for _ in range(10):
                    a, b = rand(rng, (30, 20)), rand(rng, (20, 25))
                    self.assertClose(self.c.gemm(a, b), gemm_ref(a, b, None, 1, 0, 0, 0), "f32", 20)
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])

    def test_close_waits_for_ops_in_flight(self):
        c = gemmd.Client(self.daemon.sock)
        a = rand(self.rng, (300, 300))
        futs = [c.gemm_async(a, a) for _ in range(4)]
        c.close()
        for f in futs:
            self.assertTrue(f.done())
            self.assertClose(f.result(), gemm_ref(a, a, None, 1, 0, 0, 0), "f32", 300)


class TestErrors(DaemonTestCase):
    daemon_args = ("--max-buffers", "2")

    def test_daemon_rejection(self):
        c = self.client()
        keep = [c.empty((4,)), c.empty((4,))]
        with self.assertRaises(gemmd.GemmdError) as cm:
            c.empty((4,))
        self.assertEqual(cm.exception.code, gemmd.ELIMIT)
        self.assertEqual(cm.exception.strerror, gemmd.strerror(gemmd.ELIMIT))
        self.assertIn("limit", str(cm.exception))
        del keep

    def test_scratch_past_the_buffer_limit(self):
        c = self.client(inline_threshold=0)
        keep = [c.empty((4,)), c.empty((4,))]
        a = np.ones((8, 8), np.float32)
        with self.assertRaises(gemmd.GemmdError) as cm:
            c.gemm(a, a)
        self.assertEqual(cm.exception.code, gemmd.ELIMIT)
        del keep

    def test_no_daemon(self):
        with self.assertRaises(gemmd.GemmdError) as cm:
            gemmd.Client(os.path.join(self.daemon.dir, "nobody.sock"))
        self.assertLess(cm.exception.code, 0)
        self.assertIn("nobody.sock", str(cm.exception))

    def test_socket_from_environment(self):
        old = os.environ.get("GEMMD_SOCKET")
        os.environ["GEMMD_SOCKET"] = self.daemon.sock
        try:
            with gemmd.Client() as c:
                self.assertEqual(c.info["backend"], "cpu")
                self.assertEqual(c.devices[0]["backend"], "cpu")
                self.assertIn("sessions", c.stats())
        finally:
            if old is None:
                del os.environ["GEMMD_SOCKET"]
            else:
                os.environ["GEMMD_SOCKET"] = old


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@unittest.skipUnless(_torch_cuda(), "needs PyTorch with a CUDA device")
class TestTorchCuda(DaemonTestCase, Check):
    backend = "cuda"

    def test_tensors(self):
        torch = _torch_cuda()
        c = self.client()
        g = torch.Generator(device="cuda").manual_seed(3)
        a = torch.rand((64, 48), device="cuda", generator=g) * 2 - 1
        b = torch.rand((48, 32), device="cuda", generator=g) * 2 - 1
        out = c.gemm(a, b, alpha=2.0)
        self.assertTrue(out.is_cuda)
        ref = 2.0 * a.double().cpu().numpy() @ b.double().cpu().numpy()
        self.assertClose(out.cpu().numpy(), ref, "f32", 48)
        # The same allocation is registered once.
        n = len(c._cuda.cache)
        c.gemm(a, b, out=out)
        self.assertEqual(len(c._cuda.cache), n)
        s = c.syr2k(a[:32, :16].half(), b[:32, :16].half())
        ref = syr2k_ref(a[:32, :16].half().cpu().numpy(), b[:32, :16].half().cpu().numpy(),
                        None, 1, 0, 0, 1)
        self.assertClose(s.cpu().numpy(), ref, "f16", 16)

    def test_float64_tensors(self):
        """CUDA float64 tensors compute in f64 on the GPU, alpha as given."""
        torch = _torch_cuda()
        c = self.client()
        g = torch.Generator(device="cuda").manual_seed(11)
        a = torch.rand((70, 530), device="cuda", generator=g, dtype=torch.float64) * 2 - 1
        b = torch.rand((530, 33), device="cuda", generator=g, dtype=torch.float64) * 2 - 1
        got = c.gemm(a, b, alpha=1.0 / 3.0)
        self.assertTrue(got.is_cuda)
        self.assertEqual(got.dtype, torch.float64)
        ref = (a.cpu().numpy().astype(np.longdouble) @ b.cpu().numpy().astype(np.longdouble)) / 3
        err = np.abs(got.cpu().numpy() - ref).max() / np.abs(ref).max()
        # f64 throughout: far below what f32 arithmetic (or a float alpha) gives.
        self.assertLess(float(err), 1e-13)
        x, y = a[:, :64].contiguous(), a[:, 64:128].contiguous()
        s = c.syr2k(x, y)
        self.assertEqual(s.dtype, torch.float64)
        xl, yl = x.cpu().numpy().astype(np.longdouble), y.cpu().numpy().astype(np.longdouble)
        sref = np.tril(xl @ yl.T + yl @ xl.T)
        serr = np.abs(s.cpu().numpy() - sref).max() / np.abs(sref).max()
        self.assertLess(float(serr), 1e-13)

    def test_matmul(self):
        torch = _torch_cuda()
        c = self.client()
        g = torch.Generator(device="cuda").manual_seed(5)
        a = torch.rand((3, 1, 16, 24), device="cuda", generator=g)
        b = torch.rand((2, 24, 8), device="cuda", generator=g)
        got = c.matmul(a, b)
        self.assertTrue(got.is_cuda)
        ref = np.matmul(a.double().cpu().numpy(), b.double().cpu().numpy())
        self.assertClose(got.cpu().numpy(), ref, "f32", 24)
        self.assertEqual(tuple(c.matmul(a[:, :, :0], b).shape), (3, 2, 0, 8))

    @unittest.skipUnless(_torch_cuda() and _torch_cuda().cuda.device_count() >= 2,
                         "needs two CUDA devices")
    def test_second_device(self):
        """Tensors of cuda:1 while cuda:0 is current: their device is made
        current for the driver calls, which look the pointers up there."""
        torch = _torch_cuda()
        c = self.client()
        torch.cuda.set_device(0)
        torch.zeros(1, device="cuda:0")  # cuda:0's context is current
        a = torch.rand((32, 16), device="cuda:1")
        b = torch.rand((16, 8), device="cuda:1")
        ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
        got = c.gemm(a, b)
        self.assertEqual(got.device, a.device)
        self.assertClose(got.cpu().numpy(), ref, "f32", 16)
        got = c.matmul(a.expand(2, 32, 16), b)
        self.assertEqual(got.device, a.device)
        self.assertClose(got[1].cpu().numpy(), ref, "f32", 16)
        self.assertEqual(torch.cuda.current_device(), 0)


if __name__ == "__main__":
    unittest.main()
