"""Leader election (Election, sync and asyncio) against a real server, with
redis-py and valkey-py: candidates queue, the next one leads when the leader
resigns or its lease runs out, observers see each change with a larger fence
and the right owner, and a lease that no longer leads resigns without harm."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from types import ModuleType
from typing import Any

import pytest
from conftest import Server, wait_until

from redis_lock_client import Election, Leader, Lease, Locks, Lost, LostReason, NotAcquired
from redis_lock_client import asyncio as aio

KEY = "scheduler:leader"


def queued_owners(admin: Any) -> list[str]:
    """The owner labels of the candidates waiting in the server's queue."""
    owners = []
    for waiter in admin.execute_command("LOCK.QUEUE", KEY):
        if not isinstance(waiter, dict):  # RESP2: a flat name/value array
            waiter = dict(zip(waiter[::2], waiter[1::2], strict=True))
        owners.append(waiter[b"owner"].decode())
    return owners


class Follower:
    """`observe()` iterated in a thread: each leader it yields, in order."""

    def __init__(self, election: Election) -> None:
        self.changes: queue.Queue[Leader | None] = queue.Queue()
        self._leaders = election.observe()
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        # Ends with a connection error when the test's server stops.
        with contextlib.suppress(Exception):
            for leader in self._leaders:
                self.changes.put(leader)

    def next(self) -> Leader | None:
        return self.changes.get(timeout=10)

    def next_leader(self) -> tuple[int, str | None]:
        leader = self.next()
        assert leader is not None and leader.ttl is not None and leader.ttl > 0
        return leader.fence, leader.owner


def campaign_in_thread(election: Election) -> queue.Queue[Lease]:
    """Starts `election.campaign()` in a thread; its lease comes in the queue."""
    leases: queue.Queue[Lease] = queue.Queue()
    threading.Thread(target=lambda: leases.put(election.campaign()), daemon=True).start()
    return leases


def test_the_next_candidate_leads_when_the_leader_resigns(client: Any, admin: Any) -> None:
    locks = Locks(client)
    a = Election(locks, KEY, 5.0, owner="host-a")
    b = Election(locks, KEY, 5.0, owner="host-b")
    follower = Follower(Election(locks, KEY, 5.0))
    assert follower.next() is None  # nobody leads yet

    lease_a = a.campaign()
    assert follower.next_leader() == (lease_a.fence, "host-a")
    now = a.leader()
    assert now is not None and (now.fence, now.owner) == (lease_a.fence, "host-a")

    waiting_b = campaign_in_thread(b)
    wait_until(lambda: queued_owners(admin) == ["host-b"])
    assert lease_a.release() is True  # resign: the lock goes to b
    lease_b = waiting_b.get(timeout=10)
    assert lease_b.fence > lease_a.fence
    assert follower.next_leader() == (lease_b.fence, "host-b")

    assert lease_b.release() is True
    assert follower.next() is None
    assert a.leader() is None


def test_the_next_candidate_leads_when_a_paused_leaders_lease_runs_out(
    client: Any, admin: Any
) -> None:
    locks = Locks(client)
    # No watchdog: as a leader that was paused past its lease.
    paused = Election(locks, KEY, 0.6, owner="paused").campaign(watchdog=False)
    follower = Follower(Election(locks, KEY, 5.0))
    assert follower.next_leader() == (paused.fence, "paused")
    lease_b = Election(locks, KEY, 5.0, owner="host-b").campaign(timeout=5)
    assert lease_b.fence > paused.fence
    assert follower.next_leader() == (lease_b.fence, "host-b")
    assert paused.lost.is_set() and paused.lost_reason is LostReason.EXPIRED
    # It learns it on its next extend; resigning then is harmless.
    with pytest.raises(Lost):
        paused.extend()
    assert paused.release() is False
    leader = Election(locks, KEY, 5.0).leader()
    assert leader is not None and (leader.fence, leader.owner) == (lease_b.fence, "host-b")
    assert lease_b.release() is True


def test_a_candidate_that_stops_waiting_leaves_the_queue(client: Any, admin: Any) -> None:
    locks = Locks(client)
    lease_a = Election(locks, KEY, 5.0, owner="host-a").campaign()
    started = time.monotonic()
    with pytest.raises(NotAcquired):
        Election(locks, KEY, 5.0, owner="host-b").campaign(timeout=0.3)
    assert 0.25 < time.monotonic() - started < 3
    assert queued_owners(admin) == []
    assert lease_a.release() is True
    assert locks.info(KEY) is None
    for bad in ("", "x" * 129, "é" * 65):
        with pytest.raises(ValueError):
            Election(locks, KEY, 5.0, owner=bad)
    with pytest.raises(TypeError):
        Election(locks, KEY, 5.0, owner=7)  # type: ignore[arg-type]


def test_acquire_with_an_owner_label(client: Any, admin: Any) -> None:
    locks = Locks(client)
    with locks.lock(KEY, 5.0, owner="pod-7") as lease:
        info = locks.info(KEY)  # the label is not a number: left out, no error
        assert info is not None and info["fence"] == lease.fence and "owner" not in info
        leader = Election(locks, KEY, 5.0).leader()
        assert leader is not None and (leader.fence, leader.owner) == (lease.fence, "pod-7")
    assert admin.execute_command("LOCK.INFO", KEY) is None


def test_asyncio_election(lib: ModuleType, server: Server) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            locks = aio.Locks(client)
            a = aio.Election(locks, KEY, 5.0, owner="host-a")
            b = aio.Election(locks, KEY, 5.0, owner="host-b")
            leaders = aio.Election(locks, KEY, 5.0).observe()
            assert await anext(leaders) is None
            lease_a = await a.campaign()
            seen = await asyncio.wait_for(anext(leaders), 10)
            assert seen is not None and (seen.fence, seen.owner) == (lease_a.fence, "host-a")

            waiting_b = asyncio.create_task(b.campaign())
            while not (await locks.info(KEY) or {}).get("waiters"):
                await asyncio.sleep(0.01)
            assert await lease_a.release() is True
            lease_b = await asyncio.wait_for(waiting_b, 10)
            assert lease_b.fence > lease_a.fence
            seen = await asyncio.wait_for(anext(leaders), 10)
            assert seen is not None and (seen.fence, seen.owner) == (lease_b.fence, "host-b")
            assert await lease_a.release() is False  # no longer the leader: harmless

            # A cancelled campaign leaves the queue.
            waiting_a = asyncio.create_task(a.campaign())
            while not (await locks.info(KEY) or {}).get("waiters"):
                await asyncio.sleep(0.01)
            waiting_a.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting_a
            assert (await locks.info(KEY) or {}).get("waiters") == 0

            assert await lease_b.release() is True
            assert await asyncio.wait_for(anext(leaders), 10) is None
            await leaders.aclose()
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())
