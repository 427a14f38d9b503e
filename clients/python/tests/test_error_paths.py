"""The error paths a production user depends on (issue 29), sync and asyncio,
with redis-py and valkey-py against a real server:

- a grant whose confirming extend fails (the connection drops, the task is
  cancelled, `asyncio.timeout()` fires) is released before the error is raised;
- `with locks.lock(...)` raises `Lost` (its cause chained) when the server went
  away under the block;
- `release()` that failed on the network can be called again, and sends again;
- an extend answered `WRONGTYPE` (the key was overwritten) loses the lease at once;
- `held` and `remaining()` follow the clock through a process pause, and a
  forked child sees the parent's lease as not its own.

Faults in the client are injected by a subclass of the library's client whose
`execute_command` fails or stalls on `LOCK.EXTEND`; the server is real. The
confirming extend after a wait is the per-lock mode's (`keepalive="extend"`):
a hold attached to a session needs none (test_sessions.py).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest
from conftest import Server, no_retry, wait_until

from redis_lock_client import Election, Locks, Lost, LostReason
from redis_lock_client import asyncio as aio

INJECTED = "the connection dropped (injected by the test)"


def failing_extends(lib: ModuleType, port: int) -> Any:
    """A sync client whose `LOCK.EXTEND` fails as a dropped connection would."""

    class ExtendFails(lib.Redis):  # type: ignore[misc, name-defined]
        def execute_command(self, *args: Any, **options: Any) -> Any:
            if args and args[0] == "LOCK.EXTEND":
                raise lib.ConnectionError(INJECTED)
            return super().execute_command(*args, **options)

    return ExtendFails(port=port, socket_timeout=5)


def stalling_extends(lib: ModuleType, port: int) -> tuple[Any, asyncio.Event]:
    """An asyncio client whose `LOCK.EXTEND` never returns, and the event set
    when one is stuck there (the task is then past the grant)."""
    stalled = asyncio.Event()

    class ExtendStalls(lib.asyncio.Redis):  # type: ignore[misc, name-defined]
        async def execute_command(self, *args: Any, **options: Any) -> Any:
            if args and args[0] == "LOCK.EXTEND":
                stalled.set()
                await asyncio.sleep(3600)
            return await super().execute_command(*args, **options)

    return ExtendStalls(port=port, socket_timeout=5), stalled


def short_holder(locks: Locks) -> None:
    """Holds "billing" for 0.3 s with no watchdog: the server then hands it to
    whoever waits."""
    assert locks.acquire("billing", 0.3, watchdog=False) is not None


# 1. A waited grant never leaks.


def test_a_waited_grant_is_released_when_the_confirming_extend_fails(
    lib: ModuleType, server: Server, client: Any
) -> None:
    locks = Locks(client)
    short_holder(locks)
    with pytest.raises(lib.ConnectionError, match="injected"):
        Locks(failing_extends(lib, server.port), keepalive="extend").acquire(
            "billing", 30.0, wait=10
        )
    assert locks.info("billing") is None  # given back, not held for 30 s

    short_holder(locks)
    with pytest.raises(lib.ConnectionError, match="injected"):
        extends = Locks(failing_extends(lib, server.port), keepalive="extend")
        Election(extends, "billing", 30.0).campaign()
    assert locks.info("billing") is None


def test_a_waited_grant_is_released_when_the_task_is_cancelled(
    lib: ModuleType, server: Server, client: Any
) -> None:
    locks = Locks(client)

    async def cancelled(acquire: Any, stalled: asyncio.Event) -> None:
        short_holder(locks)
        task = asyncio.create_task(acquire)
        await asyncio.wait_for(stalled.wait(), 10)  # granted, confirming
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert locks.info("billing") is None  # given back, not held for 30 s

    async def main() -> None:
        stalling, stalled = stalling_extends(lib, server.port)
        try:
            extends = aio.Locks(stalling, keepalive="extend")
            await cancelled(extends.acquire("billing", 30.0, wait=10), stalled)
            stalled.clear()
            election = aio.Election(extends, "billing", 30.0)
            await cancelled(election.campaign(), stalled)
        finally:
            await stalling.connection_pool.disconnect()

    asyncio.run(main())


if sys.version_info >= (3, 11):  # asyncio.timeout()

    def test_a_waited_grant_is_released_when_asyncio_timeout_fires(
        lib: ModuleType, server: Server, client: Any
    ) -> None:
        locks = Locks(client)

        async def main() -> None:
            stalling, stalled = stalling_extends(lib, server.port)
            short_holder(locks)
            try:
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(None) as timeout:

                        async def expire_once_confirming() -> None:
                            await stalled.wait()  # granted, confirming
                            timeout.reschedule(asyncio.get_running_loop().time())

                        expiring = asyncio.create_task(expire_once_confirming())
                        extends = aio.Locks(stalling, keepalive="extend")
                        await extends.acquire("billing", 30.0, wait=10)
                await expiring
                assert locks.info("billing") is None
            finally:
                await stalling.connection_pool.disconnect()

        asyncio.run(main())


# 2. `except Lost` catches a lease lost because the server went away.


def test_lock_raises_lost_when_the_server_went_away(lib: ModuleType, server: Server) -> None:
    client = lib.Redis(port=server.port, socket_timeout=5, retry=no_retry(lib))
    with pytest.raises(Lost) as raised, Locks(client).lock("billing", 1.0) as lease:
        server.stop()
        assert lease.lost.wait(10)
    assert raised.value.reason is LostReason.EXPIRED
    assert isinstance(raised.value.__cause__, lib.ConnectionError)


def test_asyncio_lock_raises_lost_when_the_server_went_away(
    lib: ModuleType, server: Server
) -> None:
    async def main() -> None:
        retry = no_retry(lib, asyncio=True)
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5, retry=retry)
        try:
            with pytest.raises(Lost) as raised:
                async with aio.Locks(client).lock("billing", 1.0) as lease:
                    server.stop()
                    await asyncio.wait_for(lease.lost.wait(), 10)
            assert raised.value.reason is LostReason.EXPIRED
            assert isinstance(raised.value.__cause__, lib.ConnectionError)
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())


# 3. A release that failed on the network can be retried.


def test_release_can_be_retried_after_a_network_failure(lib: ModuleType, server: Server) -> None:
    client = lib.Redis(port=server.port, socket_timeout=5, retry=no_retry(lib))
    locks = Locks(client)
    lease = locks.acquire("billing", 30.0, watchdog=False)
    assert lease is not None
    server.shut_down()  # saves the lock, then exits
    with pytest.raises(lib.ConnectionError):
        lease.release()
    server.start()
    assert locks.info("billing") is not None  # still held after the restart
    assert lease.release() is True  # sent again
    assert locks.info("billing") is None
    assert lease.release() is False  # now it is gone


def test_asyncio_release_can_be_retried_after_a_network_failure(
    lib: ModuleType, server: Server
) -> None:
    async def main() -> None:
        retry = no_retry(lib, asyncio=True)
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5, retry=retry)
        try:
            locks = aio.Locks(client)
            lease = await locks.acquire("billing", 30.0, watchdog=False)
            assert lease is not None
            server.shut_down()
            with pytest.raises(lib.ConnectionError):
                await lease.release()
            server.start()
            assert await lease.release() is True
            assert await locks.info("billing") is None
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())


# 4. WRONGTYPE on an extend: the key was overwritten, the lease is lost at once.


def test_an_overwritten_key_loses_the_lease_at_once(client: Any, admin: Any) -> None:
    locks = Locks(client)
    watched = locks.acquire("billing", 3.0)
    assert watched is not None
    admin.set("billing", "another program's value")
    assert watched.lost.wait(10)
    assert watched.lost_reason is LostReason.REFUSED  # not EXPIRED at 0.9 x ttl
    assert watched.lost_message is not None and "WRONGTYPE" in watched.lost_message

    manual = locks.acquire("manual", 30.0, watchdog=False)
    assert manual is not None
    admin.set("manual", "another program's value")
    with pytest.raises(Lost) as raised:
        manual.extend()
    assert raised.value.reason is LostReason.REFUSED and "WRONGTYPE" in str(raised.value)
    assert manual.lost.is_set() and manual.lost_reason is LostReason.REFUSED


def test_asyncio_overwritten_key_loses_the_lease_at_once(lib: ModuleType, server: Server) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            lease = await aio.Locks(client).acquire("billing", 3.0)
            assert lease is not None
            await client.set("billing", "another program's value")
            await asyncio.wait_for(lease.lost.wait(), 10)
            assert lease.lost_reason is LostReason.REFUSED
            assert lease.lost_message is not None and "WRONGTYPE" in lease.lost_message
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())


# 5. `held` and `remaining()` by the clock: a pause, a fork.

PAUSED = """
import importlib, sys
from redis_lock_client import Locks
lib = importlib.import_module(sys.argv[1])
lease = Locks(lib.Redis(port=int(sys.argv[2]))).acquire("billing", 0.6)
print(lease.held, lease.remaining() > 0, lease.lost.is_set(), flush=True)
sys.stdin.readline()  # the test stops this process here until the lease expired
print(lease.held, lease.remaining(), lease.lost.is_set(), lease.lost_reason.name, flush=True)
"""


def test_held_and_lost_are_right_the_moment_a_paused_process_resumes(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSED, lib.__name__, str(server.port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().split() == ["True", "True", "False"]
        child.send_signal(signal.SIGSTOP)  # its watchdog stops with it
        wait_until(lambda: admin.exists("billing") == 0, timeout=10)  # the server let it expire
        child.stdin.write("go on\n")
        child.stdin.flush()
        child.send_signal(signal.SIGCONT)
        out, err = child.communicate(timeout=10)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert out.split() == ["False", "0.0", "True", "EXPIRED"]


FORKED = """
import importlib, os, sys
from redis_lock_client import Locks, LostReason
lib = importlib.import_module(sys.argv[1])
locks = Locks(lib.Redis(port=int(sys.argv[2])))
lease = locks.acquire("billing", 30.0)
pid = os.fork()
if pid == 0:
    seen = [lease.held, lease.remaining(), lease.lost.is_set(), lease.lost_reason.name]
    seen.append(lease.release())  # not the child's to release: nothing is sent
    own = locks.acquire("child", 5.0)  # the child's own lease, with its own watchdog
    seen.append(own is not None and own.held and own.release())
    print(*seen, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print(lease.held, locks.info("billing") is not None, lease.release(), flush=True)
"""


def test_a_forked_child_sees_the_lease_as_not_its_own(lib: ModuleType, server: Server) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FORKED, lib.__name__, str(server.port)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    child, parent = out.splitlines()
    assert child.split() == ["False", "0.0", "True", "FORKED", "False", "True"]
    assert parent.split() == ["True", "True", "True"]  # the parent still held it
