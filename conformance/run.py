#!/usr/bin/env python3
"""One conformance suite for the four client packages of redis-lock.

Runs each scenario (a fault and the exact outcome a holder must see) against
each driver named on the command line, through a TCP fault proxy in this
process, in front of a real redis-server with the module. The protocol the
drivers speak, and what each scenario expects, is conformance/PROTOCOL.md.

    python3 conformance/run.py --drivers go,node --scenarios all
    python3 conformance/run.py --drivers all --scenarios del,stall

Prints a table per driver and writes target/conformance/summary.json; exits 1
when any scenario failed ("not supported" is counted apart, and is no pass).
Python 3.11, standard library only. Every process it starts is killed at the
end, on failure too; traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import queue
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "target" / "conformance"
TTL_MS = 2000
TTL = TTL_MS / 1000.0
SERVER = os.environ.get("LOCK_TEST_SERVER", "/usr/bin/redis-server")

# Every process this run starts, so that atexit (and a signal) can kill
# whatever a failure left behind.
_children: list[subprocess.Popen] = []


def _kill_children() -> None:
    for child in _children:
        if child.poll() is None:
            try:
                child.kill()
                child.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass


atexit.register(_kill_children)


def _on_signal(signum: int, _frame: Any) -> None:
    _kill_children()
    sys.exit(128 + signum)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- A minimal RESP2 client for the harness' own commands -------------------


class ReplyError(Exception):
    """An error reply from the server (its full text, code first)."""


class Admin:
    """One connection straight to the server (never through the proxy)."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def close(self) -> None:
        try:
            self.file.close()
            self.sock.close()
        except OSError:
            pass

    def send(self, *args: Any) -> None:
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))

    def read(self) -> Any:
        line = self.file.readline()
        if not line:
            raise ConnectionError("the server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return ReplyError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)[:-2]
            return data.decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ConnectionError(f"unexpected reply line {line!r}")

    def call(self, *args: Any) -> Any:
        self.send(*args)
        reply = self.read()
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    def info(self, key: str) -> dict[str, Any] | None:
        reply = self.call("LOCK.INFO", key)
        if reply is None:
            return None
        return dict(zip(reply[0::2], reply[1::2]))


class Monitor:
    """MONITOR on the server: finds the lease id a client sends (the id is a
    secret the server never shows, but a client sends it with every acquire
    and keepalive)."""

    LEASE_ID = re.compile(r'"(?:LEASE|KEEPALIVE)" "([0-9a-f]{32})"', re.IGNORECASE)

    def __init__(self, port: int) -> None:
        self.admin = Admin(port, timeout=30)
        self.admin.call("MONITOR")
        self.ids: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                line = self.admin.file.readline()
                if not line:
                    return
                for found in self.LEASE_ID.findall(line.decode(errors="replace")):
                    self.ids.put(found)
        except (OSError, ValueError):
            return

    def lease_id(self, timeout: float) -> str | None:
        try:
            return self.ids.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        try:
            self.admin.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.admin.close()


# --- The server ---------------------------------------------------------------


class Server:
    def __init__(self, module: Path, port: int) -> None:
        self.module = module
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix="redis-lock-conformance-"))
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--logfile",
                "server.log",
                "--loadmodule",
                str(self.module),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _children.append(self.process)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                admin = Admin(self.port, timeout=1)
                try:
                    if admin.call("PING") == "PONG":
                        return
                finally:
                    admin.close()
            except (OSError, ReplyError):
                time.sleep(0.02)
        log = (
            (self.dir / "server.log").read_text(errors="replace")
            if (self.dir / "server.log").exists()
            else ""
        )
        raise RuntimeError(f"redis-server did not start on port {self.port}:\n{log[-2000:]}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def admin(self) -> Admin:
        return Admin(self.port)

    def cleanup(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# --- The fault proxy ------------------------------------------------------------


class Proxy:
    """Forwards 127.0.0.1:port to the server, both ways, one thread per
    direction. cut() resets every connection (RST on both sides); stall()
    keeps them open but forwards nothing (what was read waits, as TCP
    retransmits across a partition); heal() forwards again."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.lock = threading.Lock()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=2)
                server.settimeout(None)
            except OSError:
                self._reset(client)
                continue
            with self.lock:
                self.pairs.append((client, server))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.closed:
                ready, _, _ = select.select([src], [], [], 0.2)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                while not self.flowing.wait(0.1):
                    if src.fileno() < 0 or dst.fileno() < 0 or self.closed:
                        return
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        for sock in (src, dst):
            self._reset(sock)

    @staticmethod
    def _reset(sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass

    def cut(self) -> None:
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for client, server in pairs:
            self._reset(client)
            self._reset(server)

    def stall(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.closed = True
        self.heal()
        try:
            self.listener.close()
        except OSError:
            pass
        self.cut()


# --- Drivers --------------------------------------------------------------------


class NotSupported(Exception):
    pass


class Failed(Exception):
    pass


@dataclass
class DriverSpec:
    name: str
    files: list[str]
    command: Callable[[], list[str]]
    env: Callable[[], dict[str, str]] = dict
    prepare: Callable[[], None] = lambda: None

    def present(self) -> bool:
        return all((ROOT / f).exists() for f in self.files)


def _run(
    args: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 600
) -> None:
    print("+", " ".join(args), flush=True)
    subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, check=True, timeout=timeout)


def _prepare_go() -> None:
    _run(["bash", "clients/go/vendor.sh", "conformance/drivers/go"])
    OUT.mkdir(parents=True, exist_ok=True)
    _run(
        ["go", "build", "-o", str(OUT / "go-driver"), "."],
        cwd=ROOT / "conformance/drivers/go",
        env={"GOFLAGS": "-mod=vendor", "GOPROXY": "off"},
    )


def _prepare_node() -> None:
    modules = ROOT / "target" / "node_modules"
    modules.mkdir(parents=True, exist_ok=True)
    link = modules / "redis-lock-client"
    if not link.is_symlink():
        link.symlink_to(Path("..") / ".." / "clients" / "node")


def _prepare_rust() -> None:
    _run(
        ["cargo", "build", "--locked", "--example", "conformance_driver", "-p", "redis-lock-client"]
    )


def _python() -> str:
    venv = ROOT / "target" / "python-venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


DRIVERS = {
    "go": DriverSpec(
        "go",
        ["conformance/drivers/go/main.go"],
        lambda: [str(OUT / "go-driver")],
        prepare=_prepare_go,
    ),
    "node": DriverSpec(
        "node",
        ["conformance/drivers/node/driver.js"],
        lambda: ["node", str(ROOT / "conformance/drivers/node/driver.js")],
        env=lambda: {"NODE_PATH": f"{ROOT / 'target' / 'node_modules'}:/usr/share/nodejs"},
        prepare=_prepare_node,
    ),
    "python": DriverSpec(
        "python",
        ["conformance/drivers/python/driver.py"],
        lambda: [_python(), str(ROOT / "conformance/drivers/python/driver.py")],
        env=lambda: {"PYTHONPATH": str(ROOT / "clients/python/src")},
    ),
    # The same package's asyncio API (`redis_lock_client.asyncio`), where a
    # waiting acquire can be cancelled (the sync API cannot give one up).
    "python-asyncio": DriverSpec(
        "python-asyncio",
        ["conformance/drivers/python/driver.py"],
        lambda: [_python(), str(ROOT / "conformance/drivers/python/driver.py"), "--asyncio"],
        env=lambda: {"PYTHONPATH": str(ROOT / "clients/python/src")},
    ),
    "rust": DriverSpec(
        "rust",
        ["clients/rust/examples/conformance_driver.rs"],
        lambda: [str(ROOT / "target/debug/examples/conformance_driver")],
        prepare=_prepare_rust,
    ),
}


class Driver:
    """One driver process: commands in, replies and events out (each line
    stamped with the monotonic time it was read)."""

    def __init__(self, spec: DriverSpec, url: str, log: Path) -> None:
        self.log = open(log, "wb")  # noqa: SIM115 - open for the process's life, closed in close()
        self.process = subprocess.Popen(
            spec.command() + [url],
            cwd=ROOT,
            env={**os.environ, **spec.env()},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        _children.append(self.process)
        self.cond = threading.Condition()
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self.counter = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for(lambda ev: ev.get("ev") == "ready", 20, "the driver's ready line")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            at = time.monotonic()
            try:
                event = json.loads(raw)
            except json.JSONDecodeError:
                event = {"ev": "garbage", "line": raw.decode(errors="replace")}
            with self.cond:
                self.lines.append((at, event))
                self.cond.notify_all()
        with self.cond:
            self.lines.append((time.monotonic(), {"ev": "exited"}))
            self.cond.notify_all()

    def find(self, pred: Callable[[dict[str, Any]], bool]) -> tuple[float, dict[str, Any]] | None:
        with self.cond:
            for at, event in self.lines:
                if pred(event):
                    return at, event
        return None

    def wait_for(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> tuple[float, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for at, event in self.lines:
                    if pred(event):
                        return at, event
                    if event.get("ev") == "exited":
                        raise Failed(f"the driver exited while waiting for {what}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Failed(f"no {what} within {timeout:.1f} s")
                self.cond.wait(left)

    def send(self, op: str, **fields: Any) -> str:
        self.counter += 1
        ref = str(self.counter)
        line = json.dumps({"op": op, "re": ref, **fields}) + "\n"
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line.encode())
            self.process.stdin.flush()
        except OSError as err:
            raise Failed(f"the driver's stdin is closed: {err}") from err
        return ref

    def reply(self, ref: str, timeout: float, what: str) -> tuple[float, dict[str, Any]]:
        return self.wait_for(lambda ev: ev.get("re") == ref, timeout, f"reply to {what}")

    def call(self, op: str, timeout: float = 10, **fields: Any) -> dict[str, Any]:
        ref = self.send(op, **fields)
        return self.reply(ref, timeout, op)[1]

    def lost(self, name: str) -> tuple[float, dict[str, Any]] | None:
        return self.find(lambda ev: ev.get("ev") == "lost" and ev.get("name") == name)

    def wait_lost(self, name: str, timeout: float) -> tuple[float, dict[str, Any]]:
        return self.wait_for(
            lambda ev: ev.get("ev") == "lost" and ev.get("name") == name,
            timeout,
            f"lost event for {name}",
        )

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.send("quit")
                self.process.wait(timeout=3)
        except (Failed, subprocess.TimeoutExpired, OSError):
            pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)
        self.log.close()


# --- Scenarios --------------------------------------------------------------------


@dataclass
class Ctx:
    driver: Driver
    server: Server
    proxy: Proxy
    admin: Admin
    notes: list[str] = field(default_factory=list)
    measured: float | None = None  # the ttl fraction the table shows

    def note(self, text: str) -> None:
        self.notes.append(text)

    def reconnect_admin(self) -> None:
        self.admin.close()
        self.admin = self.server.admin()


def acquire(
    ctx: Ctx,
    name: str,
    keys: list[str],
    *,
    mode: str = "session",
    wait_ms: int | None = None,
    sync: list[int] | None = None,
    timeout: float = 10,
) -> dict[str, Any]:
    reply = ctx.driver.call(
        "acquire",
        timeout=timeout,
        name=name,
        keys=keys,
        ttl_ms=TTL_MS,
        mode=mode,
        wait_ms=wait_ms,
        sync=sync,
    )
    if reply.get("kind") == "not_supported":
        raise NotSupported(reply.get("message") or "acquire: not_supported")
    return reply


def hold(ctx: Ctx, name: str, keys: list[str], **kw: Any) -> dict[str, Any]:
    reply = acquire(ctx, name, keys, **kw)
    if reply.get("ev") != "acquired":
        raise Failed(f"acquire {keys}: {reply}")
    return reply


def expect_lost(
    ctx: Ctx,
    name: str,
    since: float,
    within_ttl: float,
    reason: str,
    revoked_reason: str | None = None,
) -> float:
    """Waits for the loss; checks its reason; returns (and records) the ttl
    fraction from `since`."""
    try:
        at, event = ctx.driver.wait_lost(name, (within_ttl + 1.0) * TTL)
    except Failed as err:
        raise Failed(f"{err} (expected {reason} within {within_ttl} ttl)") from None
    fraction = (at - since) / TTL
    ctx.measured = fraction
    if event.get("reason") != reason:
        raise Failed(
            f"lost with reason {event.get('reason')!r}, expected {reason!r} (after {fraction:.2f} ttl)"
        )
    if revoked_reason is not None and event.get("revoked_reason") != revoked_reason:
        raise Failed(f"revoked_reason {event.get('revoked_reason')!r}, expected {revoked_reason!r}")
    if fraction > within_ttl:
        raise Failed(f"lost after {fraction:.2f} ttl, expected within {within_ttl} ttl")
    return fraction


def expect_release(ctx: Ctx, name: str, expected: bool | None, timeout: float = 10) -> Any:
    reply = ctx.driver.call("release", timeout=timeout, name=name)
    if reply.get("ev") != "released":
        if expected is None:
            ctx.note(f"release {name}: error {reply.get('kind')}")
            return reply
        raise Failed(
            f"release {name}: {reply.get('kind')}: {reply.get('message')}, expected {expected}"
        )
    result = reply.get("result")
    if expected is not None and result is not expected:
        raise Failed(f"release {name} returned {result}, expected {expected}")
    ctx.note(f"release {name} -> {str(result).lower()}")
    return result


def expect_free(ctx: Ctx, key: str, within: float = 0.0) -> None:
    deadline = time.monotonic() + within
    while True:
        if ctx.admin.call("EXISTS", key) == 0:
            return
        if time.monotonic() >= deadline:
            raise Failed(f"{key} is still on the server after {within:.1f} s")
        time.sleep(0.05)


def expect_queue_empty(ctx: Ctx, key: str, within: float = 1.0) -> None:
    deadline = time.monotonic() + within
    while True:
        waiters = ctx.admin.call("LOCK.QUEUE", key)
        if not waiters:
            return
        if time.monotonic() >= deadline:
            raise Failed(f"LOCK.QUEUE {key} still has {len(waiters)} waiter(s) after {within} s")
        time.sleep(0.05)


def expect_no_loss(ctx: Ctx, name: str) -> None:
    found = ctx.driver.lost(name)
    if found:
        raise Failed(f"{name} was reported lost: {found[1]}")


def lease_id(ctx: Ctx, monitor: Monitor, key: str) -> str:
    """The lease id the client sent, checked against the key's lease on the
    server (LOCK.INFO's number is LOCK.LEASE INFO's)."""
    number = (ctx.admin.info(key) or {}).get("lease")
    if number is None:
        raise Failed(f"LOCK.INFO {key} shows no lease: the hold is not attached to a session")
    deadline = time.monotonic() + TTL
    while time.monotonic() < deadline:
        candidate = monitor.lease_id(max(0.0, deadline - time.monotonic()))
        if candidate is None:
            break
        info = ctx.admin.call("LOCK.LEASE", "INFO", candidate)
        if info and dict(zip(info[0::2], info[1::2])).get("lease") == number:
            return candidate
    raise Failed(f"no lease id numbered {number} seen on the server (MONITOR)")


def expect_guard_refused(ctx: Ctx, name: str, kind: str) -> None:
    """A guarded command after the loss runs nothing and is an error."""
    reply = ctx.driver.call("guard", name=name, command=["SET", "guarded", "1"])
    if reply.get("ev") != "error" or reply.get("kind") != kind:
        raise Failed(f"guard after the loss: {reply}, expected error {kind}")
    if ctx.admin.call("EXISTS", "guarded") != 0:
        raise Failed("the guarded command ran after the loss")


def expect_quiet(ctx: Ctx, name: str, seconds: float = 0.3) -> None:
    """No loss is reported for a released hold."""
    time.sleep(seconds)
    expect_no_loss(ctx, name)


def s_del(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k"])
    t0 = time.monotonic()
    ctx.admin.call("DEL", "k")
    expect_lost(ctx, "L1", t0, 1.5, "refused")
    expect_guard_refused(ctx, "L1", "lost")
    expect_release(ctx, "L1", False)
    expect_free(ctx, "k")


def s_watchdog_del(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k"], mode="watchdog")
    t0 = time.monotonic()
    ctx.admin.call("DEL", "k")
    expect_lost(ctx, "L1", t0, 1.5, "refused")
    expect_release(ctx, "L1", False)
    expect_free(ctx, "k")


def s_overwrite(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k"])
    t0 = time.monotonic()
    ctx.admin.call("SET", "k", "v")
    expect_lost(ctx, "L1", t0, 1.5, "refused")
    expect_release(ctx, "L1", False)
    if ctx.admin.call("GET", "k") != "v":
        raise Failed("the overwritten key no longer holds the string")


REVOKE_TEXT = "conformance: taken back by the harness 42"


def s_revoke(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k"])
    t0 = time.monotonic()
    if ctx.admin.call("LOCK.REVOKE", "k", "REASON", REVOKE_TEXT) != 1:
        raise Failed("LOCK.REVOKE ended no hold")
    expect_lost(ctx, "L1", t0, 1.5, "revoked", REVOKE_TEXT)
    expect_guard_refused(ctx, "L1", "revoked")
    expect_release(ctx, "L1", False)
    expect_free(ctx, "k")


def _lease_fault(ctx: Ctx, subcommand: str, reason: str, revoked_reason: str | None) -> None:
    monitor = Monitor(ctx.server.port)
    try:
        hold(ctx, "L1", ["k"])
        lease = lease_id(ctx, monitor, "k")
    finally:
        monitor.close()
    t0 = time.monotonic()
    if ctx.admin.call("LOCK.LEASE", subcommand, lease) != 1:
        raise Failed(f"LOCK.LEASE {subcommand} ended no hold")
    expect_lost(ctx, "L1", t0, 1.5, reason, revoked_reason)
    expect_release(ctx, "L1", False)
    expect_free(ctx, "k")


def s_lease_revoke(ctx: Ctx) -> None:
    _lease_fault(ctx, "REVOKE", "revoked", "lease revoked")


def s_lease_end(ctx: Ctx) -> None:
    _lease_fault(ctx, "END", "refused", None)


def s_restart(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k"])
    ctx.admin.close()
    ctx.server.kill()
    ctx.server.start()
    ctx.admin = ctx.server.admin()
    back = time.monotonic()
    expect_lost(ctx, "L1", back, 1.0, "refused")
    expect_release(ctx, "L1", False)
    expect_free(ctx, "k")


def s_killed(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k"])
    ctx.admin.close()
    t0 = time.monotonic()
    ctx.server.kill()
    try:
        expect_lost(ctx, "L1", t0, 1.0, "expired")
    finally:
        ctx.server.start()
        ctx.admin = ctx.server.admin()
    expect_release(ctx, "L1", False)
    expect_free(ctx, "k")


def s_reset(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k"])
    ctx.proxy.cut()
    time.sleep(1.5 * TTL)
    expect_no_loss(ctx, "L1")
    held = ctx.driver.call("held", name="L1")
    if held.get("held") is not True:
        raise Failed(f"held after the reset: {held}")
    if ctx.admin.info("k") is None:
        raise Failed("k is free on the server 1.5 ttl after the reset")
    guarded = ctx.driver.call("guard", name="L1", command=["SET", "guarded", "1"])
    if guarded.get("ev") != "guarded":
        raise Failed(f"guard after the reset: {guarded}")
    expect_release(ctx, "L1", True)
    expect_free(ctx, "k")
    expect_quiet(ctx, "L1")


def s_stall(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k"])
    ctx.proxy.stall()
    t0 = time.monotonic()
    time.sleep(0.05)  # a keepalive already past the proxy lands
    info = ctx.admin.info("k")
    if info is None:
        raise Failed("k is free on the server right after the stall")
    server_left = info["ttl"] / 1000.0  # the server's deadline, from about now
    deadline = time.monotonic() + server_left
    expect_lost(ctx, "L1", t0, 1.0, "expired")
    at, _ = ctx.driver.lost("L1") or (0.0, {})
    ctx.note(f"lost {1000 * (deadline - at):.0f} ms before the server's deadline")
    if at >= deadline:
        raise Failed(
            f"lost {1000 * (at - deadline):.0f} ms after the server's deadline: a stale holder"
        )
    time.sleep(0.25 * TTL)
    ctx.proxy.heal()
    healed = time.monotonic()
    expect_release(ctx, "L1", None)
    left = 1.5 * TTL - (time.monotonic() - healed)
    expect_free(ctx, "k", max(0.0, left))


def s_release_fails_then_back(ctx: Ctx) -> None:
    hold(ctx, "L1", ["k1"])
    hold(ctx, "L2", ["k2"])
    ctx.proxy.stall()
    ref = ctx.driver.send("release", name="L1")
    time.sleep(0.1)
    ctx.proxy.cut()
    ctx.proxy.heal()
    t0 = time.monotonic()
    _, reply = ctx.driver.reply(ref, 10, "release L1")
    if reply.get("ev") == "released":
        ctx.note(f"release k1 during the cut -> {str(reply.get('result')).lower()}")
    else:
        ctx.note(f"release k1 during the cut -> error {reply.get('kind')}")
    deadline = t0 + 1.5 * TTL
    while ctx.admin.call("EXISTS", "k1") != 0:
        if time.monotonic() >= deadline:
            raise Failed("k1 is still held on the server 1.5 ttl after the failed release")
        time.sleep(0.05)
    ctx.measured = (time.monotonic() - t0) / TTL
    expect_no_loss(ctx, "L2")
    if ctx.admin.info("k2") is None:
        raise Failed("k2 is free on the server")
    held = ctx.driver.call("held", name="L2")
    if held.get("held") is not True:
        raise Failed(f"L2 held: {held}")
    expect_release(ctx, "L2", True)
    expect_free(ctx, "k2")
    expect_quiet(ctx, "L2")


def _harness_holds(ctx: Ctx, key: str) -> str:
    token = "harness-token-0123456789"
    reply = ctx.admin.call("LOCK.ACQUIRE", key, 30000, "TOKEN", token)
    if not reply:
        raise Failed(f"the harness could not take {key}")
    return token


def s_cancel_while_queued(ctx: Ctx) -> None:
    token = _harness_holds(ctx, "k")
    ref = ctx.driver.send(
        "acquire", name="L1", keys=["k"], ttl_ms=TTL_MS, mode="session", wait_ms=10000, sync=None
    )
    deadline = time.monotonic() + 5
    while not ctx.admin.call("LOCK.QUEUE", "k"):
        early = ctx.driver.find(lambda ev: ev.get("re") == ref)
        if early:
            if early[1].get("kind") == "not_supported":
                raise NotSupported(early[1].get("message") or "")
            raise Failed(f"the waiting acquire answered before it queued: {early[1]}")
        if time.monotonic() >= deadline:
            raise Failed("the acquire never queued (LOCK.QUEUE k stayed empty)")
        time.sleep(0.02)
    t0 = time.monotonic()
    cancelled = ctx.driver.call("cancel", name="L1")
    if cancelled.get("kind") == "not_supported":
        raise NotSupported(cancelled.get("message") or "cancel: not_supported")
    if cancelled.get("ev") != "cancelled":
        raise Failed(f"cancel: {cancelled}")
    at, reply = ctx.driver.reply(ref, 5, "the cancelled acquire")
    ctx.measured = (at - t0) / TTL
    ctx.note(f"cancelled after {1000 * (at - t0):.0f} ms")
    if reply.get("kind") != "cancelled":
        raise Failed(f"the cancelled acquire answered {reply}")
    if at - t0 > 1.0:
        raise Failed(f"the cancelled acquire answered after {at - t0:.2f} s")
    expect_queue_empty(ctx, "k", 1.0)
    if ctx.admin.call("LOCK.RELEASE", "k", token) != 1:
        raise Failed("the harness no longer held k")
    time.sleep(0.1)
    expect_free(ctx, "k")


def s_wait_timeout(ctx: Ctx) -> None:
    _harness_holds(ctx, "k")
    t0 = time.monotonic()
    reply = acquire(ctx, "L1", ["k"], wait_ms=300)
    spent = time.monotonic() - t0
    ctx.measured = spent / TTL
    if reply.get("ev") != "not_acquired":
        raise Failed(f"acquire with wait 300 ms on a busy key: {reply}")
    if spent < 0.29 or spent > 1.8:
        raise Failed(f"not_acquired after {spent:.2f} s, expected about 0.3 s")
    ctx.note(f"not_acquired after {1000 * spent:.0f} ms")
    expect_queue_empty(ctx, "k", 0.5)


def s_wrong_type(ctx: Ctx) -> None:
    ctx.admin.call("SET", "k", "a string")
    reply = acquire(ctx, "L1", ["k"])
    if reply.get("ev") != "error" or reply.get("kind") != "wrongtype":
        raise Failed(f"acquire of a string key: {reply}")
    if ctx.admin.call("GET", "k") != "a string":
        raise Failed("the string key changed")


def s_sync_refused(ctx: Ctx) -> None:
    reply = acquire(ctx, "L1", ["k"], sync=[1, 100])
    if reply.get("ev") != "error" or reply.get("kind") != "nosync":
        raise Failed(f"acquire with sync [1,100] and no replica: {reply}")
    expect_free(ctx, "k", 0.5)


def s_several_keys(ctx: Ctx) -> None:
    hold(ctx, "L1", ["{m}a", "{m}b"])
    t0 = time.monotonic()
    ctx.admin.call("DEL", "{m}b")
    expect_lost(ctx, "L1", t0, 1.5, "refused")
    expect_release(ctx, "L1", False)
    expect_free(ctx, "{m}a")
    expect_free(ctx, "{m}b")


SCENARIOS: dict[str, Callable[[Ctx], None]] = {
    "del": s_del,
    "overwrite": s_overwrite,
    "revoke": s_revoke,
    "lease_revoke": s_lease_revoke,
    "lease_end": s_lease_end,
    "restart": s_restart,
    "killed": s_killed,
    "reset": s_reset,
    "stall": s_stall,
    "release_fails_then_back": s_release_fails_then_back,
    "cancel_while_queued": s_cancel_while_queued,
    "wait_timeout": s_wait_timeout,
    "wrong_type": s_wrong_type,
    "sync_refused": s_sync_refused,
    "several_keys": s_several_keys,
    "watchdog_del": s_watchdog_del,
}


# --- Running ----------------------------------------------------------------------


def run_one(spec: DriverSpec, scenario: str, module: Path) -> dict[str, Any]:
    server = Server(module, free_port())
    proxy: Proxy | None = None
    driver: Driver | None = None
    ctx: Ctx | None = None
    started = time.monotonic()
    result: dict[str, Any] = {"scenario": scenario}
    try:
        server.start()
        proxy = Proxy(server.port)
        log = OUT / f"{spec.name}-{scenario}.log"
        driver = Driver(spec, f"redis://127.0.0.1:{proxy.port}", log)
        ctx = Ctx(driver, server, proxy, server.admin())
        SCENARIOS[scenario](ctx)
        result["status"] = "pass"
    except NotSupported as err:
        result["status"] = "not supported"
        result["detail"] = str(err)
    except Failed as err:
        result["status"] = "FAIL"
        result["detail"] = str(err)
    except Exception as err:  # noqa: BLE001 - a harness error fails the scenario, not the run
        result["status"] = "FAIL"
        result["detail"] = f"harness error: {type(err).__name__}: {err}"
    finally:
        if ctx is not None:
            result["measured_ttl"] = None if ctx.measured is None else round(ctx.measured, 3)
            result["notes"] = ctx.notes
            ctx.admin.close()
        if driver is not None:
            driver.close()
        if proxy is not None:
            proxy.close()
        server.cleanup()
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def table(driver: str, results: list[dict[str, Any]]) -> str:
    rows = [("scenario", "result", "ttl", "notes")]
    for r in results:
        measured = "" if r.get("measured_ttl") is None else f"{r['measured_ttl']:.2f}"
        notes = "; ".join(r.get("notes", []))
        if r.get("detail"):
            notes = r["detail"] + ("; " + notes if notes else "")
        rows.append((r["scenario"], r["status"], measured, notes))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"== {driver}"]
    for row in rows:
        lines.append(
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3]
        )
    counts = {
        s: sum(1 for r in results if r["status"] == s) for s in ("pass", "FAIL", "not supported")
    }
    lines.append(
        f"{driver}: {counts['pass']} pass, {counts['FAIL']} fail, {counts['not supported']} not supported"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--drivers",
        default="all",
        help="go,node,python,rust or all (every driver whose files exist)",
    )
    parser.add_argument(
        "--scenarios", default="all", help=f"comma-separated, or all: {', '.join(SCENARIOS)}"
    )
    parser.add_argument("--no-build", action="store_true", help="skip building the drivers")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_signal)

    if args.drivers == "all":
        names = [name for name, spec in DRIVERS.items() if spec.present()]
    else:
        names = [n.strip() for n in args.drivers.split(",") if n.strip()]
    for name in names:
        if name not in DRIVERS:
            parser.error(f"unknown driver {name!r} ({', '.join(DRIVERS)})")
        if not DRIVERS[name].present():
            parser.error(f"driver {name!r}: missing {', '.join(DRIVERS[name].files)}")
    scenarios = (
        list(SCENARIOS)
        if args.scenarios == "all"
        else [s.strip() for s in args.scenarios.split(",")]
    )
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            parser.error(f"unknown scenario {scenario!r} ({', '.join(SCENARIOS)})")
    module = Path(os.environ.get("LOCK_MODULE", ROOT / "target/debug/libredis_lock.so")).resolve()
    if not module.exists():
        print(
            f"no module at {module}: cargo build --locked --lib -p redis-lock, or set LOCK_MODULE",
            file=sys.stderr,
        )
        return 2
    OUT.mkdir(parents=True, exist_ok=True)

    summary: dict[str, Any] = {
        "ttl_ms": TTL_MS,
        "server": SERVER,
        "module": str(module),
        "drivers": {},
    }
    failed = False
    for name in names:
        spec = DRIVERS[name]
        if not args.no_build:
            spec.prepare()
        results = []
        started = time.monotonic()
        for scenario in scenarios:
            result = run_one(spec, scenario, module)
            print(
                f"{name} {scenario}: {result['status']}"
                + (
                    f" ({result['measured_ttl']:.2f} ttl)"
                    if result.get("measured_ttl") is not None
                    else ""
                )
                + (f" - {result['detail']}" if result.get("detail") else ""),
                flush=True,
            )
            results.append(result)
        failed |= any(r["status"] == "FAIL" for r in results)
        summary["drivers"][name] = {
            "seconds": round(time.monotonic() - started, 1),
            "pass": sum(r["status"] == "pass" for r in results),
            "fail": sum(r["status"] == "FAIL" for r in results),
            "not_supported": sum(r["status"] == "not supported" for r in results),
            "scenarios": results,
        }
    for name in names:
        print()
        print(table(name, summary["drivers"][name]["scenarios"]))
    (OUT / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nsummary: {OUT / 'summary.json'}; driver logs: {OUT}/<driver>-<scenario>.log")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
