#!/usr/bin/env python3
"""Instructions per LOCK.RELEASE by the length of the queue on its key.

For each queue length, a redis-server under callgrind loads the module; one
connection takes the key and `length` others wait for it (`LOCK.ACQUIRE …
WAIT`, each on a connection of its own). Then, `releases` times: a control
connection releases the key, the queue's head reads its grant, and the
previous holder queues again at the tail with a new token, so the queue
keeps its length (as lock-bench's section 4.2 does). The figure is the
inclusive instruction count of the module's RELEASE body divided by the
RELEASEs: the work a hand-off does inside the command, which callgrind counts
the same whatever else the machine is doing. A constant figure means the
RELEASE is O(1) in the queue's length; lock-bench's timings add the cache
misses of waking clients the server has not touched for a while.

    python3 bench/release_queue_profile.py [lengths ...] [--releases N]

Defaults: lengths 2 100 2000 10000, 500 RELEASEs each. Needs valgrind,
redis-server (or LOCK_TEST_SERVER) and a release build of the module
(LOCK_MODULE, default target/release/libredis_lock.so). Prints a Markdown
table.
"""

import argparse
import collections
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = "redis_lock::commands::release::run"


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(300)
        self.buf = b""

    def send(self, *args):
        self.sock.sendall(encode(*args))

    def _line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("server closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                data = self.sock.recv(65536)
                if not data:
                    raise EOFError("server closed the connection")
                self.buf += data
            value, self.buf = self.buf[:n], self.buf[n + 2 :]
            return value
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        return line

    def call(self, *args):
        self.send(*args)
        return self.reply()


def wait_ready(port, proc):
    for _ in range(240):
        if proc.poll() is not None:
            raise RuntimeError("the server exited at start")
        try:
            if Conn(port).call("PING") == b"+PONG":
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError("the server did not answer PING")


def waiting(conn, key):
    """How many clients wait for `key` (`LOCK.INFO`'s `waiters`, RESP2)."""
    info = conn.call("LOCK.INFO", key)
    return dict(zip(info[::2], info[1::2]))[b"waiters"]


def await_waiting(control, key, count):
    """Until `count` clients wait for `key`; fails after 120 s (a waiter
    refused, say), rather than hang."""
    deadline = time.monotonic() + 120
    while waiting(control, key) != count:
        if time.monotonic() > deadline:
            raise RuntimeError("%s: %d waiters expected, %d seen" % (key, count, waiting(control, key)))
        time.sleep(0.001)


def drive(port, length, releases):
    key = "queue:%d" % length
    control = Conn(port)
    conns = [Conn(port) for _ in range(length + 1)]
    tokens = ["w0.0"] + ["w%d.0" % i for i in range(1, length + 1)]
    grant = conns[0].call("LOCK.ACQUIRE", key, 3_600_000, "TOKEN", tokens[0])
    assert isinstance(grant, list), grant
    # One at a time, so the queue's order is the connections' order.
    for i in range(1, length + 1):
        conns[i].send("LOCK.ACQUIRE", key, 3_600_000, "TOKEN", tokens[i], "WAIT", 3_600_000)
        await_waiting(control, key, i)
    queue = collections.deque(range(1, length + 1))
    holder = 0
    for round_ in range(1, releases + 1):
        assert control.call("LOCK.RELEASE", key, tokens[holder]) == 1
        head = queue.popleft()
        assert isinstance(conns[head].reply(), list)
        # The previous holder queues again at the tail (an ACQUIRE of its
        # own, not counted), before the next RELEASE.
        tokens[holder] = "w%d.%d" % (holder, round_)
        conns[holder].send("LOCK.ACQUIRE", key, 3_600_000, "TOKEN", tokens[holder], "WAIT", 3_600_000)
        await_waiting(control, key, length)
        queue.append(holder)
        holder = head


def profile(server, module, length, releases, port, workdir):
    out = os.path.join(workdir, "callgrind.%d.out" % length)
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, server,
         "--port", str(port), "--save", "", "--appendonly", "no",
         "--maxclients", str(length + 64), "--loadmodule", module],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        drive(port, length, releases)
        Conn(port).send("SHUTDOWN", "NOSAVE")
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", out],
                               capture_output=True, text=True, check=True).stdout
    for line in annotated.splitlines():
        if BODY + " " in line:
            return int(re.match(r"\s*([\d,]+)", line).group(1).replace(",", "")) / releases
    raise RuntimeError("no %s in the profile" % BODY)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lengths", nargs="*", type=int, default=[2, 100, 2000, 10000])
    parser.add_argument("--releases", type=int, default=500)
    parser.add_argument("--port", type=int, default=7390)
    args = parser.parse_args()
    server = os.environ.get("LOCK_TEST_SERVER", "redis-server")
    module = os.environ.get("LOCK_MODULE", os.path.join(ROOT, "target/release/libredis_lock.so"))
    # A connection per waiter, in this process and in the server.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(args.lengths) + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit("%d waiters need %d open files; the hard limit is %d" % (max(args.lengths), need, hard))
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    print("| Waiters on the key | RELEASEs | Instructions per RELEASE |")
    print("| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as workdir:
        for length in args.lengths:
            per = profile(server, module, length, args.releases, args.port, workdir)
            print("| {:,} | {:,} | {:,.0f} |".format(length, args.releases, per), flush=True)


if __name__ == "__main__":
    sys.exit(main())
