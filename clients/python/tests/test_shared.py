"""Read leases (`shared=True`) and semaphores (`Semaphore`, SEM.*) against a real
server, sync and asyncio, with redis-py and valkey-py."""

from __future__ import annotations

import asyncio
import threading
import time
from types import ModuleType
from typing import Any

import pytest
from conftest import Server, renewals, wait_until

from redis_lock_client import Locks, Lost, LostReason, NotAcquired, Semaphore, ServerError
from redis_lock_client import asyncio as aio


def test_readers_hold_a_key_together_and_a_writer_is_excluded(client: Any, admin: Any) -> None:
    locks = Locks(client)
    first = locks.acquire("catalog", 5.0, shared=True)
    second = locks.acquire("catalog", 5.0, shared=True)
    assert first is not None and second is not None
    assert first.shared and second.shared and first.count is None
    assert second.fence > first.fence and second.token != first.token
    info = locks.info("catalog")
    assert info is not None and info["holders"] == 2 and info["fence"] == second.fence
    fields = admin.execute_command("LOCK.INFO", "catalog")
    if isinstance(fields, list):  # RESP2: a flat name/value array
        fields = dict(zip(fields[::2], fields[1::2], strict=True))
    assert fields[b"mode"] == b"shared"

    assert locks.acquire("catalog", 5.0) is None
    with pytest.raises(NotAcquired), locks.lock("catalog", 5.0):
        pass
    with locks.lock("catalog", 5.0, shared=True) as third:
        assert third.shared and third.fence > second.fence
    assert first.release() is True
    assert locks.acquire("catalog", 5.0) is None  # one reader is left
    assert second.release() is True
    with locks.lock("catalog", 5.0) as writer:
        assert not writer.shared
        assert locks.acquire("catalog", 5.0, shared=True) is None
        with pytest.raises(NotAcquired), locks.lock("catalog", 5.0, shared=True):
            pass
    assert locks.info("catalog") is None


def test_waiting_readers_are_handed_the_key_together(client: Any) -> None:
    locks = Locks(client)
    writer = locks.acquire("catalog", 5.0)
    assert writer is not None
    granted: list[int] = []

    def read() -> None:
        with locks.lock("catalog", 5.0, shared=True, wait=10) as reader:
            granted.append(reader.fence)
            wait_until(lambda: len(granted) == 2)  # both hold it at once

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    wait_until(lambda: (locks.info("catalog") or {}).get("waiters") == 2)
    assert writer.release() is True
    for reader in readers:
        reader.join(10)
    assert len(granted) == 2 and min(granted) > writer.fence
    assert locks.info("catalog") is None


def test_watchdog_keeps_a_reader_and_a_permit_for_four_ttls(
    client: Any, admin: Any, keepalive: str
) -> None:
    locks = Locks(client, keepalive=keepalive)  # type: ignore[arg-type]
    renders = locks.semaphore("renders", 2)
    with locks.lock("catalog", 0.5, shared=True) as reader, renders.permit(0.5) as permit:
        time.sleep(2.0)
        assert not reader.lost.is_set() and not permit.lost.is_set()
        info = locks.info("catalog")
        assert info is not None and info["fence"] == reader.fence
        assert renewals(admin, info, keepalive) >= 4
        sem = renders.info()
        assert sem is not None and sem["used"] == 1 and sem["fence"] == permit.fence
        assert permit.count == 1 and not permit.shared
    assert locks.info("catalog") is None and renders.info() is None


def test_lost_when_the_key_is_deleted(client: Any, admin: Any) -> None:
    locks = Locks(client)
    with pytest.raises(Lost) as reader_lost, locks.lock("catalog", 0.6, shared=True) as reader:
        admin.delete("catalog")
        assert reader.lost.wait(1.0) and reader.lost_reason is LostReason.REFUSED
    assert reader_lost.value.reason is LostReason.REFUSED
    renders = Semaphore(locks, "renders", 3)
    with pytest.raises(Lost), renders.permit(0.6, count=2) as permit:
        admin.delete("renders")
        assert permit.lost.wait(1.0) and permit.lost_reason is LostReason.REFUSED
    assert permit.release() is False


def test_a_semaphore_never_has_more_than_limit_permits_out(client: Any) -> None:
    locks = Locks(client)
    renders = locks.semaphore("renders", 3)
    two = renders.acquire(5.0, count=2)
    assert two is not None and two.count == 2
    assert renders.acquire(5.0, count=2) is None
    one = renders.acquire(5.0)
    assert one is not None and one.fence > two.fence
    with pytest.raises(NotAcquired, match="fewer than 1 free"), renders.permit(5.0):
        pass
    info = renders.info()
    assert info is not None and (info["limit"], info["used"], info["holders"]) == (3, 3, 2)
    assert two.release() is True and one.release() is True

    running = most = 0
    count_lock = threading.Lock()

    def work() -> None:
        nonlocal running, most
        with renders.permit(5.0, wait=20):
            with count_lock:
                running += 1
                most = max(most, running)
            time.sleep(0.3)
            with count_lock:
                running -= 1

    workers = [threading.Thread(target=work) for _ in range(7)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert most == 3
    assert renders.info() is None


def test_a_waiting_acquire_is_handed_a_permit_on_release(client: Any) -> None:
    renders = Semaphore(Locks(client), "renders", 2)
    everything = renders.acquire(5.0, count=2)
    assert everything is not None
    assert renders.acquire(5.0, wait=0.2) is None  # the wait ran out
    handed: list[int] = []

    def wait() -> None:
        with renders.permit(5.0, wait=10) as permit:
            handed.append(permit.fence)

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: (renders.info() or {}).get("waiters") == 1)
    assert everything.release() is True
    waiter.join(10)
    assert len(handed) == 1 and handed[0] > everything.fence


def test_a_reader_guards_reads_and_a_permit_guards_nothing(client: Any, admin: Any) -> None:
    locks = Locks(client)
    admin.set("catalog:items", "12")
    with locks.lock("catalog", 5.0, shared=True) as reader:
        assert reader.guard("GET", "catalog:items") == b"12"
        with pytest.raises(ServerError):
            reader.guard("SET", "catalog:items", "13")
        assert not reader.lost.is_set()
    assert admin.get("catalog:items") == b"12"
    with locks.semaphore("renders", 2).permit(5.0) as permit, pytest.raises(TypeError):
        permit.guard("GET", "catalog:items")


def test_bad_semaphore_arguments_and_types(client: Any, admin: Any) -> None:
    locks = Locks(client)
    for limit in (0, -1, 1_000_001):
        with pytest.raises(ValueError):
            locks.semaphore("renders", limit)
    for not_an_int in (2.0, True, "2"):
        with pytest.raises(TypeError):
            locks.semaphore("renders", not_an_int)  # type: ignore[arg-type]
    renders = locks.semaphore("renders", 2)
    for count in (0, 3):
        with pytest.raises(ValueError):
            renders.acquire(1.0, count=count)
    held = renders.acquire(5.0)
    assert held is not None
    with pytest.raises(ServerError, match="limit differs"):
        locks.semaphore("renders", 5).acquire(1.0)
    with pytest.raises(ServerError) as wrong_type:
        locks.acquire("renders", 1.0, shared=True)
    assert wrong_type.value.code == "WRONGTYPE"
    admin.set("text", "x")
    with pytest.raises(ServerError) as wrong_type:
        locks.semaphore("text", 2).acquire(1.0)
    assert wrong_type.value.code == "WRONGTYPE"
    assert held.release() is True


def test_asyncio_readers_writers_and_permits(lib: ModuleType, server: Server) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            locks = aio.Locks(client)
            first = await locks.acquire("catalog", 5.0, shared=True)
            assert first is not None and first.shared
            async with locks.lock("catalog", 5.0, shared=True) as second:
                assert second.fence > first.fence
                assert await locks.acquire("catalog", 5.0) is None
                info = await locks.info("catalog")
                assert info is not None and info["holders"] == 2
            assert await first.release() is True

            renders = locks.semaphore("renders", 2)
            everything = await renders.acquire(0.5, count=2)
            assert everything is not None and everything.count == 2
            with pytest.raises(NotAcquired):
                async with renders.permit(5.0):
                    pass
            waiter = asyncio.create_task(renders.acquire(5.0, wait=10))
            while ((await renders.info()) or {}).get("waiters") != 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.0)  # two ttls: the watchdog keeps the permits
            assert not everything.lost.is_set()
            assert await everything.release() is True
            handed = await waiter
            assert handed is not None and handed.fence > everything.fence
            await client.delete("renders")
            await asyncio.wait_for(handed.lost.wait(), 6.0)
            assert handed.lost_reason is LostReason.REFUSED
            assert await handed.release() is False
            assert isinstance(renders, aio.Semaphore)
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())
