#!/usr/bin/env python3
"""socket_fuzz.py - mutated frames against a running gemmd, over its socket.

The libFuzzer targets (tests/fuzz/) drive the decoder and validation in
one process; this drives the whole daemon: sessions that say Hello (most
of the time) and then send frames of the committed corpus
(tests/fuzz/corpus/frame) with bytes flipped, cut, repeated and spliced,
written in random pieces, now and then with memfds attached, cut off
mid-frame, or reset. Meanwhile gemmctl must keep getting the daemon's
stats, and at the end the daemon must still answer and exit 0 on SIGTERM.

    tests/fuzz/socket_fuzz.py [--seconds S] [--workers N] [--bin DIR] [--seed X]

DIR holds gemmd and gemmctl ($GEMMD_BIN, else build/); a sanitized build
(make test-asan builds build/asan) also reports what it finds on stderr,
which is printed if the daemon fails. Exits 0 when the daemon held.
"""
import argparse
import glob
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Envelope{request_id: 1, hello: {protocol_version: 1}}, with its length.
HELLO = bytes([6, 0, 0, 0, 0x08, 0x01, 0x52, 0x02, 0x08, 0x01])
INTERESTING = (0, 1, 0x7F, 0x80, 0xFF)


def mutate(data, corpus, r):
    """A few random edits of one corpus entry."""
    b = bytearray(data)
    for _ in range(r.randint(1, 8)):
        if not b:
            b = bytearray(r.choice(corpus))
            continue
        i = r.randrange(len(b))
        op = r.randrange(7)
        if op == 0:
            b[i] ^= 1 << r.randrange(8)
        elif op == 1:
            b[i] = r.choice(INTERESTING)
        elif op == 2:
            del b[i:i + r.randint(1, 16)]
        elif op == 3:
            b[i:i] = bytes(r.randrange(256) for _ in range(r.randint(1, 16)))
        elif op == 4:
            b += r.choice(corpus)
        elif op == 5:
            b[i:i] = b"\xff\xff\xff\xff\x0f"  # a varint grown to its longest
        elif len(b) >= 4:
            b[0:4] = struct.pack("<I", len(b) - 4)  # the first length made to fit
    return bytes(b)


def memfds(r):
    """One to four memfds of odd sizes, to ride along with a frame."""
    fds = []
    for _ in range(r.randint(1, 4)):
        fd = os.memfd_create("fuzz", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, r.choice((0, 1, 4096, 65536, 1 << 20)))
        fds.append(fd)
    return fds


def session(path, corpus, r):
    """One session: connect, send, maybe read a little, close or reset."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(0.2)
    try:
        s.connect(path)
    except OSError:
        s.close()
        return False
    data = mutate(r.choice(corpus), corpus, r) if r.random() < 0.9 else r.choice(corpus)
    if r.random() < 0.8:
        data = HELLO + data
    try:
        if r.random() < 0.2:
            fds = memfds(r)
            cut = r.randrange(len(data) + 1)
            try:
                socket.send_fds(s, [data[:cut] or b"\0"], fds)
            finally:
                for fd in fds:
                    os.close(fd)
            data = data[cut:]
        pos = 0
        while pos < len(data):
            n = r.randint(1, len(data) - pos)
            s.sendall(data[pos:pos + n])
            pos += n
        if r.random() < 0.7:
            end = time.monotonic() + 0.05
            while time.monotonic() < end and s.recv(65536):
                pass
    except OSError:
        pass  # the daemon closed the session: what it should do with most of these
    if r.random() < 0.3:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return True


def worker(path, corpus, seed, seconds):
    r = random.Random(seed)
    sessions = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if session(path, corpus, r):
            sessions += 1
        else:
            time.sleep(0.05)  # refused at a limit: the daemon sheds, the fuzzer waits
    return sessions


def stats(gemmctl, path):
    """The daemon's stats through gemmctl, or None if it did not answer."""
    env = dict(os.environ, GEMMD_SOCKET=path)
    try:
        p = subprocess.run([gemmctl, "stats", "--json"], env=env, capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return None
    return p.stdout if p.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--bin", default=os.environ.get("GEMMD_BIN") or os.path.join(ROOT, "build"))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    corpus = [open(f, "rb").read() for f in sorted(glob.glob(os.path.join(ROOT, "tests/fuzz/corpus/frame/*")))]
    corpus = [c for c in corpus if c]
    if not corpus:
        sys.exit("socket_fuzz: no corpus in tests/fuzz/corpus/frame")
    gemmd, gemmctl = os.path.join(a.bin, "gemmd"), os.path.join(a.bin, "gemmctl")
    tmp = tempfile.mkdtemp(prefix="gemmd-fuzz-")
    path, log = os.path.join(tmp, "gemmd.sock"), os.path.join(tmp, "gemmd.log")
    with open(log, "wb") as lf:
        daemon = subprocess.Popen([gemmd, "--socket", path, "--loops", "3"], stdout=lf, stderr=lf)
    ok = False
    try:
        for _ in range(200):
            if os.path.exists(path) and stats(gemmctl, path):
                break
            time.sleep(0.05)
        else:
            sys.exit("socket_fuzz: gemmd did not start (log in %s)" % log)
        print("socket_fuzz: %d workers for %.0f s, seed %d, %d corpus frames" %
              (a.workers, a.seconds, a.seed, len(corpus)))
        pids = []
        for w in range(a.workers):
            pid = os.fork()
            if pid == 0:
                n = worker(path, corpus, a.seed * 1000 + w, a.seconds)
                os._exit(0 if n else 1)
            pids.append(pid)
        answered = missed = 0
        live, failed = set(pids), 0
        while live:
            for p in list(live):
                done, st = os.waitpid(p, os.WNOHANG)
                if done:
                    live.discard(p)
                    failed += os.waitstatus_to_exitcode(st) != 0  # a worker that got no session in
            if live:
                if stats(gemmctl, path):
                    answered += 1
                else:
                    missed += 1
                time.sleep(1)
        final = stats(gemmctl, path)
        daemon.send_signal(signal.SIGTERM)
        rc = daemon.wait(timeout=30)
        total = json.loads(final)["sessions_total"] if final else "?"
        print("socket_fuzz: %s sessions in all; stats answered %d times while fuzzed, missed %d; "
              "%d of %d workers got no session in; gemmd exited %d" % (total, answered, missed, failed, len(pids), rc))
        ok = final is not None and missed == 0 and failed == 0 and rc == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if not ok:
            with open(log, errors="replace") as lf:
                sys.stdout.write(lf.read()[-20000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print("socket_fuzz: %s" % ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
