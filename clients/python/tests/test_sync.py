"""`sync=ReplicaSync(replicas, timeout)`, the module's `SYNC`: against a real
master with a replica (the `replica` fixture) or without one, sync and
asyncio, with redis-py and valkey-py.

Redis 7.0's replicas acknowledge once a second, so a synced request takes up
to a second there (a few ms elsewhere): the tests make few, give timeouts
that are never waited out when a replica is there, and assert no duration.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis
import valkey
from conftest import Server, wait_until
from test_asyncio import run

from redis_lock_client import Election, Locks, LostReason, NotReplicated, ReplicaSync
from redis_lock_client import asyncio as aio

TTL = 30.0
# One replica, with room for Redis 7.0's acknowledgements once a second.
SYNCED = ReplicaSync(1, 5.0)
# Wanted where no replica is, or more replicas than there are: NOSYNC.
UNMET = ReplicaSync(1, 0.2)
TOO_MANY = ReplicaSync(2, 0.2)


def replica_client(replica: Server) -> Any:
    return redis.Redis(port=replica.port, socket_timeout=5)


def test_a_synced_grant_extension_and_guarded_write_are_on_the_replica_when_answered(
    server: Server, replica: Server
) -> None:
    # valkey-py here, redis-py in the watchdog's test and asyncio's: each
    # synced path once (Redis 7.0 takes up to a second a request).
    client: Any = valkey.Valkey(port=server.port, socket_timeout=5)
    locks = Locks(client)
    follower = replica_client(replica)
    on_replica = Locks(follower)
    lease = locks.acquire("billing", TTL, sync=SYNCED)
    assert lease is not None
    # Read at once, no waiting: the reply came once the replica held it.
    held = on_replica.info("billing")
    assert held is not None and held["fence"] == lease.fence

    lease.extend(600.0)  # with the lease's own sync
    extended = on_replica.info("billing")
    assert extended is not None and extended["ttl"] > TTL * 1000

    assert lease.guard("INCRBY", "billing:total", 7, sync=SYNCED) == 7
    assert follower.get("billing:total") == b"7"

    # A waiter granted from the queue (then its confirming extend), synced.
    granted: list[Any] = []
    waiter = threading.Thread(
        target=lambda: granted.append(locks.acquire("billing", TTL, wait=10, sync=SYNCED))
    )
    waiter.start()
    wait_until(lambda: (locks.info("billing") or {}).get("waiters") == 1)
    assert lease.release() is True
    waiter.join(20)
    (next_lease,) = granted
    assert next_lease is not None and next_lease.fence > lease.fence
    held = on_replica.info("billing")
    assert held is not None and held["fence"] == next_lease.fence
    assert next_lease.release() is True

    with pytest.raises(NotReplicated) as raised:
        locks.acquire("other", TTL, sync=TOO_MANY)
    error = raised.value
    assert error.wanted == 2 and error.acked in (0, 1) and error.undone  # 7.0's replica may be late
    assert locks.info("other") is None
    follower.close()
    client.close()


def test_without_enough_replicas_nothing_is_held_and_the_error_says_what_stands(
    client: Any, admin: Any
) -> None:
    locks = Locks(client)
    with pytest.raises(NotReplicated) as raised:
        locks.acquire("billing", TTL, sync=UNMET)
    error = raised.value
    assert (error.acked, error.wanted, error.undone) == (0, 1, True)
    assert str(error) == "NOSYNC 0 of 1 replicas acknowledged; the grant was undone"
    with pytest.raises(NotReplicated), locks.lock("billing", TTL, sync=UNMET):
        pytest.fail("not acquired")
    with pytest.raises(NotReplicated), locks.semaphore("renders", 2).permit(TTL, sync=UNMET):
        pytest.fail("not acquired")
    with pytest.raises(NotReplicated):  # granted from the queue (WAIT), then undone
        Election(locks, "leader", TTL, sync=UNMET).campaign(timeout=1)
    assert admin.dbsize() == 0  # undone by the server
    assert "cmdstat_lock.release" not in admin.info("commandstats")  # nothing given back
    assert "cmdstat_sem.release" not in admin.info("commandstats")

    lease = locks.acquire("billing", TTL)
    assert lease is not None
    deadline = lease.valid_until
    with pytest.raises(NotReplicated) as raised:
        lease.extend(600.0, sync=UNMET)
    assert not raised.value.undone and str(raised.value).endswith("the extension stands")
    assert admin.pttl("billing") > TTL * 1000  # it stands on the master,
    assert lease.valid_until == deadline and lease.held  # but is not counted, and not a loss
    with pytest.raises(NotReplicated) as raised:
        lease.guard("SET", "billing:total", 1, sync=TOO_MANY)
    assert str(raised.value).endswith("the guarded command ran")
    assert lease.token not in str(raised.value)
    assert admin.get("billing:total") == b"1"
    assert lease.release() is True
    assert locks.info("billing") is None


def test_sync_arguments_are_checked_before_sending(client: Any, admin: Any) -> None:
    for replicas, timeout in ((-1, 1.0), (1001, 1.0), (1, 0), (1, 0.0001), (1, 400 * 86400.0)):
        with pytest.raises(ValueError):
            ReplicaSync(replicas, timeout)
    wrong_types: list[tuple[Any, Any]] = [("1", 1.0), (True, 1.0), (1, "1"), (1, None)]
    for replicas, timeout in wrong_types:
        with pytest.raises(TypeError):
            ReplicaSync(replicas, timeout)
    locks = Locks(client)
    with pytest.raises(TypeError):
        locks.acquire("billing", TTL, sync=(1, 1.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shorter than the ttl"):
        locks.acquire("billing", 1.0, sync=ReplicaSync(1, 0.9))  # 0.9 s: the ttl less the margin
    assert admin.dbsize() == 0
    lease = locks.acquire("billing", 1.0, sync=ReplicaSync(0, 0.9))  # 0 replicas: no SYNC
    assert lease is not None
    with pytest.raises(ValueError, match="shorter than the ttl"):
        lease.extend(1.0, sync=ReplicaSync(1, 5.0))
    assert lease.release() is True


def test_the_watchdog_extends_with_sync_and_loses_the_lease_when_the_replica_goes(
    server: Server, replica: Server, admin: Any
) -> None:
    locks = Locks(redis.Redis(port=server.port, socket_timeout=5))
    synced = locks.acquire("synced", 3.0, sync=ReplicaSync(1, 1.5))
    plain = locks.acquire("plain", 3.0)
    assert synced is not None and plain is not None
    # An extend with SYNC, acknowledged.
    wait_until(lambda: (locks.info("synced") or {}).get("extends", 0) >= 1, timeout=10)
    assert synced.held and not synced.lost.is_set()

    replica.stop()  # its extends are now answered NOSYNC: not counted
    assert synced.lost.wait(10)
    assert synced.lost_reason is LostReason.NOT_REPLICATED
    assert synced.lost_message is not None and "NOSYNC" in synced.lost_message
    assert locks.info("synced") is not None  # the master still holds it: the extensions stand
    assert plain.held  # a lease without sync is not concerned
    assert synced.release() is True
    assert plain.release() is True


def test_asyncio_sync_grant_watchdog_guard_and_permits(server: Server, replica: Server) -> None:
    follower = replica_client(replica)

    async def test(locks: aio.Locks, client: Any) -> None:
        lease = await locks.acquire("billing", 3.0, sync=ReplicaSync(1, 1.5))
        assert lease is not None
        held = Locks(follower).info("billing")
        assert held is not None and held["fence"] == lease.fence
        # The watchdog's extends, with SYNC, through a connection of its own.
        while ((await locks.info("billing")) or {}).get("extends", 0) < 1:
            await asyncio.sleep(0.05)
        assert lease.held
        with pytest.raises(NotReplicated) as guarded:
            await lease.guard("SET", "billing:total", 1, sync=TOO_MANY)
        assert not guarded.value.undone and await client.get("billing:total") == b"1"
        with pytest.raises(NotReplicated) as permits:
            await locks.semaphore("renders", 2).acquire(3.0, sync=TOO_MANY)
        assert permits.value.undone and permits.value.wanted == 2
        assert await client.execute_command("SEM.INFO", "renders") is None
        assert await lease.release() is True

    run(redis, server, test)
    follower.close()
