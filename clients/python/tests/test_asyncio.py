"""The asyncio API (redis_lock_client.asyncio) against a real server, with
redis.asyncio and valkey.asyncio. Each test runs its own event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import pytest
from conftest import Server, renewals
from test_locks import waiting_clients

from redis_lock_client import Locks as SyncLocks
from redis_lock_client.asyncio import Lease, Locks, Lost, LostReason, NotAcquired, ServerError


def run(
    lib: ModuleType,
    server: Server,
    test: Callable[[Locks, Any], Awaitable[None]],
    safety_margin: float | None = None,
    keepalive: str = "auto",
    **options: Any,
) -> None:
    """Runs `test(locks, client)` on a new loop with an asyncio client of `lib`."""

    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5, **options)
        try:
            locks = Locks(client, safety_margin=safety_margin, keepalive=keepalive)  # type: ignore[arg-type]
            await test(locks, client)
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())


def test_acquire_extend_release(lib: ModuleType, server: Server) -> None:
    async def test(locks: Locks, client: Any) -> None:
        lease = await locks.acquire("billing", 5.0)
        assert lease is not None and lease.fence > 0
        assert await locks.acquire("billing", 5.0) is None
        await lease.extend(20.0)
        assert 19000 < await client.pttl("billing") <= 20000
        assert await lease.release() is True
        assert await lease.release() is False
        assert await locks.info("billing") is None

        async with locks.lock("billing", 5.0) as held:
            assert held.fence > lease.fence
            with pytest.raises(NotAcquired):
                async with locks.lock("billing", 5.0, wait=0.1):
                    pass
        assert held.released and await locks.info("billing") is None

    run(lib, server, test, keepalive="extend")  # an attached hold's extend moves nothing


async def queue_behind_a_holder(locks: Locks) -> tuple[Lease, asyncio.Task[Lease | None]]:
    """A holder of "billing", and a task that waits for it (already queued)."""
    holder = await locks.acquire("billing", 5.0)
    assert holder is not None
    waiter = asyncio.create_task(locks.acquire("billing", 5.0, wait=5))
    while ((await locks.info("billing")) or {}).get("waiters") != 1:
        await asyncio.sleep(0.01)
    return holder, waiter


def test_wait_hands_off_between_tasks(lib: ModuleType, server: Server) -> None:
    async def test(locks: Locks, client: Any) -> None:
        holder, waiter = await queue_behind_a_holder(locks)
        await holder.extend()  # not blocked behind the wait
        assert await holder.release() is True
        granted = await waiter
        assert granted is not None and granted.fence > holder.fence
        assert await granted.release() is True

    run(lib, server, test)


def test_a_cancelled_wait_leaves_the_queue(lib: ModuleType, server: Server) -> None:
    async def test(locks: Locks, client: Any) -> None:
        holder, waiter = await queue_behind_a_holder(locks)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        info = await locks.info("billing")
        assert info is not None and info["waiters"] == 0
        assert await holder.release() is True
        assert await locks.info("billing") is None

    run(lib, server, test)


def test_a_waiter_killed_by_an_operator_is_never_granted(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    async def test(locks: Locks, client: Any) -> None:
        holder = await locks.acquire("billing", 5.0)
        assert holder is not None
        waiter = asyncio.create_task(locks.acquire("billing", 5.0, wait=10))
        while not waiting_clients(admin):
            await asyncio.sleep(0.01)
        for client_id in waiting_clients(admin):
            admin.execute_command("CLIENT", "KILL", "ID", client_id)
        with pytest.raises(lib.ConnectionError):
            await asyncio.wait_for(waiter, 2)
        assert not waiting_clients(admin)
        assert await holder.release() is True
        await asyncio.sleep(0.1)
        assert await locks.info("billing") is None

    run(lib, server, test)


def test_watchdog_keeps_the_lease_for_five_ttls(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    """In a session (the default); test_locks.py runs the sync API both ways."""

    async def test(locks: Locks, client: Any) -> None:
        async with locks.lock("billing", 0.5) as lease:
            await asyncio.sleep(2.5)  # 5 ttls
            assert not lease.lost.is_set(), (lease.lost_reason, lease.lost_message)
            info = await locks.info("billing")
            assert info is not None and info["fence"] == lease.fence
            assert renewals(admin, info, "session") >= 6

    run(lib, server, test)


def test_lost_when_the_key_is_deleted(lib: ModuleType, server: Server) -> None:
    async def test(locks: Locks, client: Any) -> None:
        with pytest.raises(Lost):
            async with locks.lock("billing", 0.6) as lease:
                await client.delete("billing")
                await asyncio.wait_for(lease.lost.wait(), 1.0)
                assert lease.lost_reason is LostReason.REFUSED

    run(lib, server, test)


def test_lost_before_the_deadline_when_the_server_is_paused(
    lib: ModuleType, server: Server
) -> None:
    async def test(locks: Locks, client: Any) -> None:
        lease = await locks.acquire("billing", 0.9)
        assert lease is not None
        await asyncio.sleep(0.35)  # one extend done
        server.pause()
        try:
            await asyncio.wait_for(lease.lost.wait(), 2.0)
            assert time.monotonic() < lease.valid_until
            assert lease.lost_reason is LostReason.EXPIRED
            await asyncio.sleep(lease.valid_until - time.monotonic() + 0.1)
        finally:
            server.resume()
        assert await lease.release() is False

    run(lib, server, test, safety_margin=0.25)  # room for a slow wake-up on a busy machine


def test_guard(lib: ModuleType, server: Server) -> None:
    async def test(locks: Locks, client: Any) -> None:
        lease = await locks.acquire("billing", 5.0)
        assert lease is not None
        assert await lease.guard("SET", "total", "42") in ("OK", True)
        with pytest.raises(ServerError) as wrong_type:
            await lease.guard("LPUSH", "total", "x")
        assert wrong_type.value.code == "WRONGTYPE"
        await client.delete("billing")
        with pytest.raises(Lost):
            await lease.guard("SET", "total", "43")
        assert lease.lost.is_set() and await client.get("total") == "42"

    run(lib, server, test, decode_responses=True)


def test_bad_arguments(lib: ModuleType, server: Server, client: Any) -> None:
    with pytest.raises(TypeError):
        SyncLocks(lib.asyncio.Redis(port=server.port))
    with pytest.raises(TypeError):
        Locks(client)

    async def test(locks: Locks, client: Any) -> None:
        with pytest.raises(ValueError):
            await locks.acquire("billing", 0)
        with pytest.raises(TypeError):
            await locks.acquire("billing", "1")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await locks.acquire("billing", 1, wait=-1)
        await client.config_set("lock.max-ttl-ms", 1000)
        with pytest.raises(ServerError):
            await locks.acquire("billing", 5)

    run(lib, server, test)
