"""What users meet first on the command line: --help on stdout with exit 0
for every binary, an unknown flag answered in one line and a hint with exit
2, byte sizes with K/M/G/T suffixes (flags and the config file), and
gemmd's log lines (a timestamp and the level in words, or the "<N>" prefix
when stderr is the journal)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from daemon_util import BIN, GEMMD, DaemonTestCase

import gemmd

# Each binary built without CUDA, and the commands of gemmbench (built only
# with it), with the arguments that ask for their help.
HELPS = [
    ("gemmd", []),
    ("gemmctl", []),
    ("gemmctl", ["plan"]),
    ("gemmctl", ["stats"]),
    ("gemmbench-latency", []),
    ("demo_client", []),
    ("soak", []),
    ("gemmbench", []),
    ("gemmbench", ["kernels"]),
    ("gemmbench", ["list"]),
    ("gemmbench", ["calibrate"]),
    ("gemmbench", ["clients"]),
]
ALWAYS_BUILT = ("gemmd", "gemmctl", "gemmbench-latency", "demo_client", "soak")


def run(prog, args, **kw):
    return subprocess.run([os.path.join(BIN, prog)] + args, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30, **kw)


class TestHelpAndUsageErrors(unittest.TestCase):
    def programs(self):
        """The (prog, args) of HELPS whose binary is built; fails if one
        that every build has is missing."""
        for prog, args in HELPS:
            if os.access(os.path.join(BIN, prog), os.X_OK):
                yield prog, args
            else:
                self.assertNotIn(prog, ALWAYS_BUILT, "build/%s is not built" % prog)

    def test_help_exits_0_on_stdout(self):
        for prog, args in self.programs():
            with self.subTest(prog=prog, args=args):
                r = run(prog, args + ["--help"])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("usage:", r.stdout)
                self.assertEqual(r.stderr, "")

    def assertUsageError(self, r, what, hint):
        """Exit 2, nothing on stdout, and on stderr one line naming what is
        wrong plus at most one more naming the help."""
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.splitlines()
        self.assertIn(what, lines[0])
        self.assertLessEqual(len(lines), 2, r.stderr)
        self.assertIn(hint, lines[-1])

    def test_unknown_flag_is_one_line(self):
        for prog, args in self.programs():
            with self.subTest(prog=prog, args=args):
                r = run(prog, args + ["--no-such-flag"])
                self.assertUsageError(r, "--no-such-flag", "--help")

    def test_gemmd_usage_errors(self):
        for args, what in ((["--bogus"], "unknown option '--bogus'"),
                           (["-x"], "unknown option '-x'"),
                           (["--threads"], "option '--threads' needs a value"),
                           (["--threads", "many"], "invalid value for --threads: many"),
                           (["stray"], "unexpected argument: stray")):
            with self.subTest(args=args):
                r = run("gemmd", args)
                self.assertUsageError(r, what, "Try 'gemmd --help'.")


class TestPlan(unittest.TestCase):
    """gemmctl plan shows what the daemon would launch: auto keeps a wave of
    short tiles whole on only the CTAs its tiles need, and cuts a lone
    long-K GEMM to fill the CTAs (the fill split, its sums added apart)."""

    def plan(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write(text)
            f.flush()
            r = run("gemmctl", ["plan", "--mode", "auto", "--json", f.name])
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)[0]

    def test_auto_fills_a_lone_long_k_gemm(self):
        p = self.plan("gemm 128 128 16384 bf16\n")
        self.assertEqual((p["chosen"], p["ctas"], p["entries"], p["split"], p["reduce_apart"]),
                         ("split", 32, 32, 1, True))

    def test_auto_keeps_short_k_whole_on_its_tiles(self):
        p = self.plan("gemm 544 544 544 bf16\n")
        self.assertEqual((p["chosen"], p["ctas"], p["entries"], p["split"], p["reduce_apart"]),
                         ("sorted", 25, 25, 0, False))


class TestByteSizes(unittest.TestCase):
    def test_bad_sizes_are_refused(self):
        for flag, value in (("--max-buffer-bytes", "64Q"), ("--max-buffer-bytes", "1.5G"),
                            ("--max-buffer-bytes", "G"), ("--max-buffer-bytes", "-1K"),
                            ("--max-buffer-bytes", "64GB"), ("--max-buffer-bytes", "64 G"),
                            ("--max-buffer-bytes", "1024T"),  # past its limit of 2^48
                            ("--max-inline-bytes", "2G"), ("--max-frame-bytes", "3k")):
            with self.subTest(flag=flag, value=value):
                r = run("gemmd", [flag, value])
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("invalid value for %s: %s" % (flag, value), r.stderr)

    def test_bad_size_in_the_config_file(self):
        with tempfile.TemporaryDirectory(prefix="gemmd-py-") as d:
            conf = os.path.join(d, "gemmd.conf")
            with open(conf, "w") as f:
                f.write("# limits\nmax-buffer-bytes = 4X\n")
            r = run("gemmd", ["--config", conf, "--socket", os.path.join(d, "s")])
        self.assertEqual(r.returncode, 2)
        self.assertIn("invalid value for --max-buffer-bytes: 4X", r.stderr)
        self.assertIn("line 2", r.stderr)


class TestByteSuffixes(DaemonTestCase):
    """Suffixes in the config file and on the command line, as the daemon
    reports and enforces them."""

    @classmethod
    def setUpClass(cls):
        cls.conf_dir = tempfile.mkdtemp(prefix="gemmd-py-")
        conf = os.path.join(cls.conf_dir, "gemmd.conf")
        with open(conf, "w") as f:
            f.write("max-buffer-bytes = 4k\nmax-inline-bytes = 512KiB\n")
        cls.daemon_args = ("--config", conf, "--max-frame-bytes", "2M",
                           "--max-user-buffer-bytes", "1T", "--max-output-bytes", "64m")
        try:
            super().setUpClass()
        except BaseException:
            shutil.rmtree(cls.conf_dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.conf_dir, ignore_errors=True)

    def test_limits(self):
        info = self.client().info
        self.assertEqual(info["max_buffer_bytes"], 4 << 10)
        self.assertEqual(info["max_inline_bytes"], 512 << 10)
        self.assertEqual(info["max_frame_bytes"], 2 << 20)

    def test_buffer_limit_is_enforced(self):
        c = self.client()
        a = c.empty((1024,))  # 4 KiB of f32: just fits
        self.assertEqual(a.nbytes, 4096)
        with self.assertRaises(gemmd.GemmdError):
            c.empty((1025,))


LINE_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} gemmd: (error|warning|info|debug): ")
LINE_JOURNAL = re.compile(r"^<([0-7])>gemmd: ")


class TestLogFormat(unittest.TestCase):
    """gemmd with a metrics address it cannot use logs an info line (its
    device) and an error, and exits 1: enough lines to read the format."""

    def run_gemmd(self, journal_stream=None):
        env = dict(os.environ)
        env.pop("JOURNAL_STREAM", None)
        r, w = os.pipe()
        try:
            if journal_stream == "stderr":
                st = os.fstat(w)
                journal_stream = "%d:%d" % (st.st_dev, st.st_ino)
            if journal_stream is not None:
                env["JOURNAL_STREAM"] = journal_stream
            with tempfile.TemporaryDirectory(prefix="gemmd-py-") as d:
                p = subprocess.Popen([GEMMD, "--socket", os.path.join(d, "s"), "--backend", "cpu",
                                      "--metrics-listen", "tcp:127.0.0.1:99999"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=w, env=env)
                os.close(w)
                w = -1
                with os.fdopen(r, "r") as f:
                    r = -1
                    text = f.read()
                self.assertEqual(p.wait(30), 1, text)
        finally:
            for fd in (r, w):
                if fd >= 0:
                    os.close(fd)
        lines = text.splitlines()
        self.assertTrue(any("--metrics-listen" in l for l in lines), text)
        return lines

    def assertTimestamped(self, lines):
        for line in lines:
            self.assertRegex(line, LINE_TIME)
        levels = {LINE_TIME.match(l).group(1) for l in lines}
        self.assertEqual(levels, {"info", "error"})

    def test_pipe_has_timestamps(self):
        self.assertTimestamped(self.run_gemmd())

    def test_journal_has_level_prefix(self):
        lines = self.run_gemmd("stderr")
        for line in lines:
            self.assertRegex(line, LINE_JOURNAL)
        self.assertEqual({LINE_JOURNAL.match(l).group(1) for l in lines}, {"6", "3"})

    def test_journal_stream_of_another_file(self):
        # A service's stderr redirected elsewhere keeps the variable, not
        # the journal.
        st = os.stat("/dev/null")
        self.assertTimestamped(self.run_gemmd("%d:%d" % (st.st_dev, st.st_ino)))
        self.assertTimestamped(self.run_gemmd("not-a-stream"))


if __name__ == "__main__":
    unittest.main()
