"""A fresh server with the module for each test, and clients of both libraries.

LOCK_MODULE       the module (default: target/debug/libredis_lock.so at the repo root)
LOCK_TEST_SERVER  the server binary (default: redis-server; make test-python
                  also runs the suite on Valkey 8.1's valkey-server)
LOCK_PACKAGE      "wheel": the package under test must be installed from a
                  wheel file (make test-python installs target/dist's)
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from importlib.metadata import distribution
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
MODULE = str(Path(os.environ.get("LOCK_MODULE", REPO / "target/debug/libredis_lock.so")).resolve())
SERVER = os.environ.get("LOCK_TEST_SERVER", "redis-server")


def pytest_configure(config: pytest.Config) -> None:
    """With LOCK_PACKAGE=wheel, refuses to test anything but a package
    installed from a wheel file (pip's direct_url.json names the file)."""
    if os.environ.get("LOCK_PACKAGE") != "wheel":
        return
    import redis_lock_client

    origin = json.loads(distribution("redis-lock-client").read_text("direct_url.json") or "{}")
    source = REPO / "clients/python/src"
    if not origin.get("url", "").endswith(".whl") or Path(
        redis_lock_client.__file__
    ).resolve().is_relative_to(source):
        raise pytest.UsageError(
            f"LOCK_PACKAGE=wheel, but redis_lock_client comes from {redis_lock_client.__file__} "
            f"(installed from {origin.get('url')}): make dist-python, then pip install the wheel"
        )


def wait_until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {condition}")
        time.sleep(0.01)


class Server:
    """A server on a free loopback port; killed (resumed first if paused) at the end.

    `shut_down()` stops it as an operator would (`SHUTDOWN SAVE`: its locks go
    to the RDB file) and `start()` brings it back on the same port with them."""

    def __init__(self, directory: Path, *, module: bool = True) -> None:
        self.directory = directory
        self.module = module
        for _attempt in range(5):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
            if self._launch():
                return
            self.stop()
        self._fail()

    def _launch(self) -> bool:
        self.process = subprocess.Popen(
            [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--logfile", "server.log",
             *(["--loadmodule", MODULE] if self.module else [])],
        )  # fmt: skip
        return self._answers()

    def _fail(self) -> None:
        log = (self.directory / "server.log").read_text(errors="replace")
        raise RuntimeError(f"{SERVER} with {MODULE} did not start:\n{log}")

    def _answers(self) -> bool:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(64).startswith(b"+PONG"):
                        return True
            except OSError:
                time.sleep(0.02)
        return False

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def shut_down(self) -> None:
        """`SHUTDOWN SAVE`: the server writes its data (locks included) and exits."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            conn.sendall(b"SHUTDOWN SAVE\r\n")
            with contextlib.suppress(OSError):
                conn.recv(64)
        self.process.wait(10)

    def start(self) -> None:
        """Starts it again on the same port, loading what `shut_down()` saved."""
        for _attempt in range(5):
            if self._launch():
                return
            self.stop()
            time.sleep(0.2)
        self._fail()

    def stop(self) -> None:
        self.resume()
        self.process.kill()
        self.process.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    started = Server(tmp_path)
    yield started
    started.stop()


def attach_replica(server: Server, directory: Path) -> Server:
    """A new server in `directory` (with the module too), made a replica of
    `server`, synced and acknowledging: for `sync`. `stop()` takes it away
    (the master sees its link close)."""
    import redis

    master = redis.Redis(port=server.port, socket_timeout=5)
    master.config_set("repl-diskless-sync-delay", 0)  # the full sync starts at once
    directory.mkdir(exist_ok=True)
    started = Server(directory)
    follower = redis.Redis(port=started.port, socket_timeout=5)
    follower.replicaof("127.0.0.1", server.port)

    def online() -> bool:
        link = follower.info("replication").get("master_link_status") == "up"
        return link and master.info("replication").get("slave0", {}).get("state") == "online"

    wait_until(online, timeout=20)
    # Redis 7.0 streams writes to a replica after a diskless sync only once
    # it acknowledged (~1 s): a write acknowledged (`WAIT`, which asks the
    # replica at once) shows the stream flowing, so that the tests' short
    # sync timeouts hold.
    master.set("replica:probe", 1)
    master.delete("replica:probe")
    assert master.wait(1, 20000) == 1
    master.close()
    follower.close()
    return started


@pytest.fixture
def replica(server: Server, tmp_path: Path) -> Iterator[Server]:
    """A replica of `server`: `attach_replica`."""
    started = attach_replica(server, tmp_path / "replica")
    yield started
    started.stop()


@pytest.fixture(params=["redis", "valkey"])
def lib(request: pytest.FixtureRequest) -> ModuleType:
    """The client library: redis-py or valkey-py (same API, own classes)."""
    return importlib.import_module(str(request.param))


@pytest.fixture
def client(lib: ModuleType, server: Server) -> Iterator[Any]:
    made = lib.Redis(port=server.port, socket_timeout=5)
    yield made
    made.close()


@pytest.fixture
def admin(server: Server) -> Iterator[Any]:
    """A plain redis-py client for looking at the server from outside."""
    import redis

    made = redis.Redis(port=server.port, socket_timeout=5)
    yield made
    made.close()


@pytest.fixture(params=["session", "extend"])
def keepalive(request: pytest.FixtureRequest) -> str:
    """How the holds are kept alive: one session lease for all (`LOCK.LEASE`),
    or an extend each (the per-lock mode), for the tests that run in both."""
    return str(request.param)


def renewals(admin: Any, info: dict[str, int], keepalive: str) -> int:
    """How many times a held key was renewed, checking that it was renewed
    the `keepalive` way: its session's keepalives (the server's count: the
    test's only session), or its own extends (`LOCK.INFO`)."""
    if keepalive == "session":
        assert "lease" in info and info["extends"] == 0
        return int(admin.info("lock")["lock_keepalives"])
    assert "lease" not in info
    return info["extends"]


def no_retry(lib: ModuleType, *, asyncio: bool = False) -> Any:
    """A Retry of `lib` (sync or asyncio) that never retries: the tests that take
    the server away need the connection error at once, not a backoff."""
    retry = importlib.import_module(f"{lib.__name__}{'.asyncio' if asyncio else ''}.retry")
    backoff = importlib.import_module(f"{lib.__name__}.backoff")
    return retry.Retry(backoff.NoBackoff(), 0)
