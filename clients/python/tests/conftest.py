"""A fresh server with the module for each test, and clients of both libraries.

LOCK_MODULE       the module (default: target/debug/libredis_lock.so at the repo root)
LOCK_TEST_SERVER  the server binary (default: redis-server; make test-python
                  also runs the suite on Valkey 8.1's valkey-server)
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
MODULE = os.environ.get("LOCK_MODULE", str(REPO / "target/debug/libredis_lock.so"))
SERVER = os.environ.get("LOCK_TEST_SERVER", "redis-server")


def wait_until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {condition}")
        time.sleep(0.01)


class Server:
    """A server on a free loopback port; killed (resumed first if paused) at the end."""

    def __init__(self, directory: Path) -> None:
        for _attempt in range(5):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
            self.process = subprocess.Popen(
                [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", str(directory), "--logfile", "server.log",
                 "--loadmodule", MODULE],
            )  # fmt: skip
            if self._answers():
                return
            self.stop()
        log = (directory / "server.log").read_text(errors="replace")
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

    def stop(self) -> None:
        self.resume()
        self.process.kill()
        self.process.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    started = Server(tmp_path)
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
