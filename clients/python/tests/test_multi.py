"""Several locks taken in one step (`acquire_many`, `lock_many`: LOCK.MACQUIRE,
issue 28), sync and asyncio, with redis-py and valkey-py, against a real
server: one token, one fence and one deadline for the whole set, all or
nothing; kept alive in the session (each key a hold of its lease) or by the
watchdog (LOCK.MEXTEND), lost when any key is, released together
(LOCK.MRELEASE)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import ModuleType
from typing import Any

import pytest
from conftest import Server, wait_until

from redis_lock_client import Locks, Lost, LostReason, NotAcquired, NotReplicated, ReplicaSync
from redis_lock_client import asyncio as aio

KEYS = ["{order}:stock", "{order}:payment", "{order}:mail"]


def calls(admin: Any, command: str) -> int:
    """A command's calls in `INFO commandstats` (0 when never called)."""
    stats = admin.info("commandstats").get(f"cmdstat_{command}")
    return 0 if stats is None else int(stats["calls"])


@pytest.mark.parametrize("keepalive", ["auto", "extend"])
def test_a_set_has_one_fence_and_is_all_or_nothing(client: Any, admin: Any, keepalive: str) -> None:
    locks = Locks(client, keepalive=keepalive)  # type: ignore[arg-type]
    lease = locks.acquire_many(KEYS, 5.0)
    assert lease is not None
    assert lease.keys == tuple(KEYS) and lease.key == KEYS[0]
    assert (lease.session is None) == (keepalive == "extend"), "a set attaches as one hold"
    for key in KEYS:
        info = locks.info(key)
        assert info is not None and info["fence"] == lease.fence, key
        if keepalive == "extend":  # an attached key's TTL runs ahead of its lease
            assert 4000 < admin.pttl(key) <= 5000
    # Any key held: nothing is taken.
    assert locks.acquire_many(["{order}:mail", "{order}:spare"], 5.0) is None
    assert locks.info("{order}:spare") is None
    lease.extend(20.0)  # an attached set's extend only asks: its lease is the session's
    if keepalive == "extend":
        for key in KEYS:
            assert 19000 < admin.pttl(key) <= 20000, key
    assert lease.release() is True
    assert all(locks.info(key) is None for key in KEYS)
    assert lease.release() is False
    assert calls(admin, "lock.mrelease") == 1, "the second release sends nothing"


def test_lock_many_context_manager(client: Any, admin: Any) -> None:
    locks = Locks(client)
    with locks.lock_many(KEYS, 5.0) as lease:
        assert admin.exists(*KEYS) == 3
        with pytest.raises(NotAcquired, match="one of"), locks.lock_many(KEYS[1:], 5.0):
            pass
    assert lease.released and admin.exists(*KEYS) == 0
    with pytest.raises(KeyError), locks.lock_many(KEYS, 5.0):
        raise KeyError("the work failed")
    assert admin.exists(*KEYS) == 0


def test_the_watchdog_keeps_every_key_with_mextend(client: Any, admin: Any) -> None:
    locks = Locks(client, keepalive="extend")
    lease = locks.acquire_many(KEYS, 0.6)
    assert lease is not None
    time.sleep(2.0)
    assert lease.held and not lease.lost.is_set()
    assert calls(admin, "lock.mextend") >= 3
    assert admin.exists(*KEYS) == 3
    assert lease.release() is True


@pytest.mark.parametrize("keepalive", ["session", "extend"])
def test_losing_one_key_loses_the_set(client: Any, admin: Any, keepalive: str) -> None:
    locks = Locks(client, keepalive=keepalive)  # type: ignore[arg-type]
    lease = locks.acquire_many(KEYS, 0.9)
    assert lease is not None
    admin.delete(KEYS[1])
    assert lease.lost.wait(5.0)
    assert lease.lost_reason == LostReason.REFUSED
    with pytest.raises(Lost):
        lease.extend()
    # The rest are the token's still: the release gives them back, and says
    # not every key was there.
    assert lease.release() is False
    assert admin.exists(*KEYS) == 0


def test_a_set_in_a_session_is_a_hold_per_key_on_the_server(client: Any, admin: Any) -> None:
    locks = Locks(client, keepalive="session")
    lease = locks.acquire_many(KEYS, 0.9)
    single = locks.acquire("{order}:alone", 0.9)
    assert lease is not None and single is not None
    session = lease.session
    assert session is not None and session is single.session
    assert session.holds == 2, "the set is one hold of the session"
    for key in KEYS:
        info = locks.info(key)
        assert info is not None and "lease" in info, key
    time.sleep(2.0)
    assert lease.held and single.held, "the keepalives kept both"
    assert calls(admin, "lock.mextend") == 0
    admin.delete(KEYS[0])  # the server now counts 3 holds, the client 4
    assert lease.lost.wait(5.0) and lease.lost_reason == LostReason.REFUSED
    assert not single.lost.is_set()
    assert lease.release() is False and single.release() is True


def test_a_synced_set_without_replicas_is_undone_on_every_key(client: Any, admin: Any) -> None:
    locks = Locks(client)
    with pytest.raises(NotReplicated):
        locks.acquire_many(KEYS, 5.0, sync=ReplicaSync(1, 0.1))
    assert admin.exists(*KEYS) == 0


def test_a_waiting_set_is_granted_when_the_last_key_is_free(client: Any, admin: Any) -> None:
    locks = Locks(client)
    holder = locks.acquire(KEYS[2], 5.0)
    assert holder is not None
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(locks.acquire_many(KEYS, 5.0, wait=10)))
    waiter.start()
    wait_until(lambda: (locks.info(KEYS[2]) or {}).get("waiters") == 1)
    assert not got, "waits while one key is held"
    assert admin.exists(KEYS[0], KEYS[1]) == 0, "holds none while it waits"
    assert holder.release() is True
    waiter.join(10)
    lease = got[0]
    assert lease is not None and lease.fence > holder.fence
    assert locks.acquire_many(["{order}:stock", "{order}:spare"], 5.0, wait=0.1) is None
    assert admin.exists("{order}:spare") == 0
    assert lease.release() is True


def test_bad_key_sets(client: Any) -> None:
    locks = Locks(client)
    with pytest.raises(ValueError):
        locks.acquire_many([], 5.0)
    with pytest.raises(TypeError):
        locks.acquire_many("{order}:stock", 5.0)  # one key is not a set
    with pytest.raises(TypeError):
        locks.acquire_many([b"ok", 3], 5.0)  # type: ignore[list-item]
    # One key is a plain lock.
    one = locks.acquire_many(["{order}:one"], 5.0)
    assert one is not None and one.keys == ("{order}:one",)
    assert one.release() is True
    # Binary keys: a NUL, \r\n and a high byte.
    binary = [b"{b}\x00\r\n\xff", b"{b}\x01"]
    lease = locks.acquire_many(binary, 5.0)
    assert lease is not None and lease.keys == tuple(binary)
    assert lease.guard("GET", "{b}:data") is None, "guarded by the first key"
    assert lease.release() is True


def test_asyncio_sets(lib: ModuleType, server: Server) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            locks = aio.Locks(client)
            lease = await locks.acquire_many(KEYS, 0.6)
            assert lease is not None and lease.keys == tuple(KEYS)
            assert await locks.acquire_many(KEYS[1:], 5.0) is None
            await asyncio.sleep(1.5)
            assert lease.held, "the watchdog's MEXTEND kept it"
            for key in KEYS:
                info = await locks.info(key)
                assert info is not None and info["fence"] == lease.fence
            waiting = asyncio.ensure_future(locks.acquire_many(KEYS, 5.0, wait=10))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            assert await lease.release() is True
            second = await waiting
            assert second is not None and second.fence > lease.fence
            await client.delete(KEYS[0])
            await asyncio.wait_for(second.lost.wait(), 5)
            assert second.lost_reason == LostReason.REFUSED
            assert await second.release() is False
            async with locks.lock_many(KEYS, 5.0) as held:
                assert await client.exists(*KEYS) == 3
                with pytest.raises(aio.NotAcquired):
                    async with locks.lock_many(KEYS, 5.0):
                        pass
            assert held.released and await client.exists(*KEYS) == 0
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())
