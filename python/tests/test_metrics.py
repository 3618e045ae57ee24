"""The Prometheus endpoint (--metrics-listen), scraped with real HTTP
clients: urllib over TCP, and a Unix-socket client (plus curl where it is
installed), after running a few ops."""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import numpy as np

from daemon_util import GEMMD, Daemon, DaemonTestCase, free_tcp_port, rand

import gemmd

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"(,|$)')


def parse(text):
    """Checks the text exposition format line by line and returns
    ({(name, frozenset(labels)): value}, {family: type})."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, fam, typ = line.split(" ")
            assert typ in ("counter", "gauge", "histogram", "summary", "untyped"), line
            assert fam not in types, "two TYPE lines for " + fam
            types[fam] = typ
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        name, labels, value = m.groups()
        pairs = []
        if labels:
            pos = 0
            while pos < len(labels):
                lm = LABEL.match(labels, pos)
                assert lm, "bad labels in %r" % line
                pairs.append((lm.group(1), lm.group(2)))
                pos = lm.end()
        fam = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert fam in types, "sample before its TYPE: %r" % line
        key = (name, frozenset(pairs))
        assert key not in samples, "duplicate sample: %r" % line
        samples[key] = float(value)
    return samples, types


def get(samples, metric, **labels):
    return samples.get((metric, frozenset(labels.items())), 0.0)


def http_unix(path, request):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(request)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode(), body.decode()


class TestMetricsTcp(DaemonTestCase):
    port = free_tcp_port()
    daemon_args = ("--metrics-listen", "tcp:127.0.0.1:%d" % port, "--max-buffers", "4")

    def url(self, path="/metrics"):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def scrape(self):
        with urllib.request.urlopen(self.url(), timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
            return parse(r.read().decode())

    def test_counters_move(self):
        uid = str(os.getuid())
        before, types = self.scrape()
        self.assertEqual(types["gemmd_ops_total"], "counter")
        self.assertEqual(types["gemmd_queue_time_seconds"], "histogram")
        self.assertEqual(types["gemmd_device_ops_word_total"], "counter")
        time.sleep(0.3)  # idle: no work for the device, so not in its loaded time
        rng = np.random.default_rng(11)
        flops = 0
        with gemmd.Client(self.daemon.sock) as c:
            for m, n, k in ((16, 8, 4), (30, 20, 10), (64, 64, 64)):
                c.gemm(rand(rng, (m, k)), rand(rng, (k, n)))
                flops += 2 * m * n * k
            for n, k in ((12, 5), (40, 8)):
                a = rand(rng, (n, k), np.float16)
                c.syr2k(a, a)
                flops += 2 * n * n * k
            x = rng.uniform(-1, 1, (9, 7))  # float64: an f64 op
            c.gemm(x, x.T)
            flops += 2 * 9 * 9 * 7
            keep = [c.empty((256, 256)) for _ in range(4)]
            with self.assertRaises(gemmd.GemmdError):
                c.empty((8,))  # past --max-buffers: an error reply
            during, _ = self.scrape()
            self.assertGreaterEqual(get(during, "gemmd_sessions"), 1)
            self.assertGreaterEqual(get(during, "gemmd_registered_bytes", kind="shm"), 4 * 256 * 256 * 4)
            self.assertEqual(get(during, "gemmd_registered_buffers", kind="shm"), 4)
            del keep
        # Groups are counted by the worker just after their ops are answered.
        deadline = time.monotonic() + 5
        while True:
            after, _ = self.scrape()
            d = lambda name, **kw: get(after, name, **kw) - get(before, name, **kw)  # noqa: E731
            if d("gemmd_group_size_ops_sum") == 6 and d("gemmd_group_size_ops_count") >= 1 \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(d("gemmd_ops_total", op="gemm", dtype="f32", status="ok", uid=uid), 3)
        self.assertEqual(d("gemmd_ops_total", op="syr2k", dtype="f16", status="ok", uid=uid), 2)
        self.assertEqual(d("gemmd_ops_total", op="gemm", dtype="f64", status="ok", uid=uid), 1)
        self.assertEqual(d("gemmd_requests_total", uid=uid, status="ok"), 6)
        self.assertEqual(d("gemmd_requests_admitted_total"), 6)
        self.assertEqual(d("gemmd_error_replies_total", uid=uid, code="limit"), 1)
        self.assertEqual(d("gemmd_rejections_total", code="limit"), 1)
        self.assertEqual(d("gemmd_device_ops_total", device="0"), 6)
        self.assertEqual(d("gemmd_device_flops_total", device="0"), flops)
        self.assertEqual(get(after, "gemmd_queue_ops"), 0)
        self.assertEqual(get(after, "gemmd_registered_buffers", kind="shm"), 0)
        self.assertEqual(d("gemmd_sessions_opened_total"), 1)
        self.assertGreater(d("gemmd_device_busy_seconds_total", device="0"), 0)
        # Loaded: the time with ops queued or groups in flight, which holds
        # every busy moment and none of the idle 0.3 s above.
        self.assertEqual(types["gemmd_device_loaded_seconds_total"], "counter")
        loaded = d("gemmd_device_loaded_seconds_total", device="0")
        self.assertGreaterEqual(loaded + 1e-6, d("gemmd_device_busy_seconds_total", device="0"))
        self.assertLess(loaded, get(after, "gemmd_uptime_seconds") - get(before, "gemmd_uptime_seconds") - 0.25)
        # One call at a time never finds every group slot in flight.
        self.assertEqual(types["gemmd_device_capped_seconds_total"], "counter")
        self.assertEqual(d("gemmd_device_capped_seconds_total", device="0"), 0)
        # The worker thread's time at work while the device had work (on
        # the CPU backend the loop launches onto an idle device itself,
        # --loop-launch): part of the loaded time.
        self.assertEqual(types["gemmd_device_worker_seconds_total"], "counter")
        # No client's device memory on the CPU backend: no worker task.
        for name in ("gemmd_device_tasks_total", "gemmd_device_task_seconds_total",
                     "gemmd_device_tasks_held_total"):
            self.assertEqual(types[name], "counter")
            self.assertEqual(d(name, device="0"), 0)
        self.assertLessEqual(get(after, "gemmd_device_worker_seconds_total", device="0"),
                             get(after, "gemmd_device_loaded_seconds_total", device="0") + 1e-6)
        # The CPU backend does not measure device time: no group is timed.
        self.assertEqual(types["gemmd_device_timed_groups_total"], "counter")
        self.assertEqual(get(after, "gemmd_device_timed_groups_total", device="0"), 0)
        self.assertEqual(get(after, "gemmd_device_seconds_total", device="0"), 0)
        # The loop read and admitted those requests: it was busy, for less
        # than the time that passed.
        self.assertEqual(types["gemmd_loop_busy_seconds_total"], "counter")
        # (One event loop on the CPU backend: loop "0".)
        self.assertGreater(d("gemmd_loop_busy_seconds_total", loop="0"), 0)
        self.assertLess(d("gemmd_loop_busy_seconds_total", loop="0"),
                        get(after, "gemmd_uptime_seconds") - get(before, "gemmd_uptime_seconds"))
        # The host's CPU by thread role: the loop read the requests, the
        # compute threads ran them, and whoever launched a group paid for
        # it: the loop that read it, onto an idle device (--loop-launch),
        # else the worker.
        self.assertEqual(types["gemmd_cpu_seconds_total"], "counter")
        for role in ("loop", "compute"):
            self.assertGreater(d("gemmd_cpu_seconds_total", role=role), 0, role)
        groups = d("gemmd_group_size_ops_count")
        by_loop = d("gemmd_device_loop_groups_total", device="0")
        self.assertTrue(0 <= by_loop <= groups, (by_loop, groups))
        if by_loop < groups:
            self.assertGreater(d("gemmd_cpu_seconds_total", role="worker"), 0)
        self.assertEqual(get(after, "gemmd_cpu_seconds_total", role="device-process"), 0)
        busy = get(after, "gemmd_device_busy_ratio", device="0")
        self.assertTrue(0 < busy <= 1, busy)
        self.assertGreater(get(after, "gemmd_device_flops_per_second", device="0"), 0)
        info = [dict(k[1]) for k, v in after.items() if k[0] == "gemmd_device_info" and v == 1]
        self.assertEqual([(i["device"], i["backend"]) for i in info], [("0", "cpu")])
        # Histograms: cumulative buckets, +Inf equal to the count.
        self.assertEqual(d("gemmd_queue_time_seconds_count"), 6)
        self.assertEqual(d("gemmd_group_size_ops_sum"), 6)
        self.assertGreaterEqual(d("gemmd_run_time_seconds_count"), 1)
        self.assertGreater(d("gemmd_run_time_seconds_sum"), 0)
        for h in ("gemmd_group_size_ops", "gemmd_queue_time_seconds", "gemmd_run_time_seconds"):
            buckets = sorted((float(dict(k[1])["le"]), v) for k, v in after.items()
                             if k[0] == h + "_bucket")
            self.assertEqual(buckets[-1][0], float("inf"))
            self.assertEqual(buckets[-1][1], get(after, h + "_count"))
            counts = [v for _, v in buckets]
            self.assertEqual(counts, sorted(counts), h + " buckets are not cumulative")

    def test_http(self):
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(self.url("/"), timeout=10)
        self.assertEqual(cm.exception.code, 404)
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(urllib.request.Request(self.url(), data=b"x"), timeout=10)
        self.assertEqual(cm.exception.code, 405)
        req = urllib.request.Request(self.url("/metrics?x=1"), method="HEAD")
        with urllib.request.urlopen(req, timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertEqual(r.read(), b"")
            self.assertGreater(int(r.headers["Content-Length"]), 0)

    def raw(self, data):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        try:
            s.sendall(data)
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return out.decode("latin-1")
                out += chunk
        finally:
            s.close()

    def test_bounded(self):
        self.assertTrue(self.raw(b"nonsense\r\n\r\n").startswith("HTTP/1.1 400"))
        big = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"
        self.assertTrue(self.raw(big).startswith("HTTP/1.1 431"))
        # Idle and half-sent connections do not hold the endpoint up.
        idle = [socket.create_connection(("127.0.0.1", self.port), timeout=10) for _ in range(5)]
        idle[0].sendall(b"GET /met")
        self.assertTrue(self.raw(b"GET /metrics HTTP/1.0\n\n").startswith("HTTP/1.1 200"))
        self.scrape()
        for s in idle:
            s.close()


def ipv6_loopback():
    """Whether this host can listen on ::1."""
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return False
    try:
        s.bind(("::1", 0))
        return True
    except OSError:
        return False
    finally:
        s.close()


class TestMetricsTcpAnyAddress(DaemonTestCase):
    """tcp::PORT listens on every address: IPv4 and, where the host has it,
    IPv6 on the same port."""
    port = free_tcp_port()
    daemon_args = ("--metrics-listen", "tcp::%d" % port)

    def fetch(self, host):
        with urllib.request.urlopen("http://%s:%d/metrics" % (host, self.port), timeout=10) as r:
            self.assertEqual(r.status, 200)
            samples, _ = parse(r.read().decode())
        info = [v for (name, _), v in samples.items() if name == "gemmd_build_info"]
        self.assertEqual(info, [1.0])

    def test_ipv4(self):
        self.fetch("127.0.0.1")

    @unittest.skipUnless(ipv6_loopback(), "no IPv6 on this host")
    def test_ipv6(self):
        self.fetch("[::1]")


class TestMetricsTcpHostName(DaemonTestCase):
    """tcp:localhost:PORT: a host name is resolved, and metrics are served on
    an address it names."""
    port = free_tcp_port()
    daemon_args = ("--metrics-listen", "tcp:localhost:%d" % port)

    def test_scrape(self):
        with urllib.request.urlopen("http://localhost:%d/metrics" % self.port, timeout=10) as r:
            self.assertEqual(r.status, 200)
            samples, types = parse(r.read().decode())
        self.assertEqual(types["gemmd_sessions"], "gauge")
        self.assertIn(("gemmd_uptime_seconds", frozenset()), samples)


class TestMetricsUnix(DaemonTestCase):
    daemon_args = ("--metrics-listen", "unix:{dir}/metrics.sock")

    def path(self):
        return os.path.join(self.daemon.dir, "metrics.sock")

    def test_scrape(self):
        with gemmd.Client(self.daemon.sock) as c:
            c.gemm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
        uid = str(os.getuid())
        # The reply can reach the client before its loop counts the request:
        # the count is read until it appears.
        deadline = time.monotonic() + 10
        while True:
            head, body = http_unix(self.path(), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertTrue(head.startswith("HTTP/1.1 200 OK"), head)
            samples, _ = parse(body)
            ops = get(samples, "gemmd_ops_total", op="gemm", dtype="f32", status="ok", uid=uid)
            if ops or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(ops, 1)
        self.assertEqual(os.stat(self.path()).st_mode & 0o777, 0o660)

    @unittest.skipUnless(shutil.which("curl"), "curl is not installed")
    def test_curl(self):
        r = subprocess.run(["curl", "-sS", "--max-time", "10", "--unix-socket", self.path(),
                            "http://localhost/metrics"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        samples, types = parse(r.stdout)
        self.assertEqual(types["gemmd_requests_total"], "counter")
        self.assertGreaterEqual(get(samples, "gemmd_metrics_scrapes_total"), 1)
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time",
                            "10", "--unix-socket", self.path(), "http://localhost/other"],
                           capture_output=True, text=True)
        self.assertEqual(r.stdout, "404")


class TestMetricsLifetime(unittest.TestCase):
    def test_drain_closes_connections(self):
        d = Daemon(["--metrics-listen", "unix:{dir}/m.sock"])
        try:
            path = os.path.join(d.dir, "m.sock")
            idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            idle.connect(path)
            idle.sendall(b"GET /metr")
            t0 = time.monotonic()
            rc = d.stop()
            self.assertEqual(rc, 0, d.text())
            self.assertLess(time.monotonic() - t0, 5, "an idle connection held the drain up")
            self.assertNotIn("handles left open", d.text())
            self.assertFalse(os.path.exists(path), "the metrics socket file was left behind")
            try:  # closed: end of stream, or a reset if the bytes were not read yet
                self.assertEqual(idle.recv(100), b"")
            except ConnectionResetError:
                pass
            idle.close()
        finally:
            d.cleanup()

    def run_gemmd(self, addr):
        with tempfile.TemporaryDirectory(prefix="gemmd-py-") as d:
            return subprocess.run([GEMMD, "--socket", os.path.join(d, "s"), "--backend", "cpu",
                                   "--metrics-listen", addr], capture_output=True, text=True,
                                  timeout=30)

    def test_bad_address(self):
        r = self.run_gemmd("http:1234")
        self.assertEqual(r.returncode, 2)
        self.assertIn("http:1234", r.stderr)
        for addr in ("tcp:127.0.0.1", "tcp:no-such-host.invalid:9466", "tcp:127.0.0.1:99999",
                     "tcp:[::1:9466", "tcp:[]:9466", "tcp::", "unix:"):
            r = self.run_gemmd(addr)
            self.assertEqual(r.returncode, 1, addr)
            self.assertIn("--metrics-listen " + addr, r.stderr)

    def test_port_in_use(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        try:
            r = self.run_gemmd("tcp:127.0.0.1:%d" % s.getsockname()[1])
            self.assertEqual(r.returncode, 1)
            self.assertIn("Address already in use", r.stderr)
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
