"""Fenced locks for the redis-lock module (LOCK.* commands), over redis-py or valkey-py.

    import redis
    from redis_lock_client import Locks, NotAcquired

    locks = Locks(redis.Redis())
    with locks.lock("billing", ttl=10, wait=30) as lease:
        write(lease.fence)            # stop when lease.lost is set

Read/write locks and semaphores: `locks.lock("catalog", 10, shared=True)` is a
read lease beside other readers; `locks.semaphore("renders", 4).permit(10)`
holds one of 4 permits (`SEM.*`), with the same watchdog and `lost`.

Replicas: `sync=ReplicaSync(1, 2.0)` on an acquire answers only once one
replica holds the grant (`SYNC`), and undoes it otherwise (`NotReplicated`).

Leader election (docs/leader-election.md): `Election(locks, "leader", ttl=10,
owner="host-a")`, whose `campaign()` returns the leader's lease and whose
`observe()` yields each change of leader.

The same API over redis.asyncio / valkey.asyncio: `redis_lock_client.asyncio`.
"""

from ._common import Leader, ReplicaSync
from ._errors import (
    LimitReached,
    LockError,
    Lost,
    LostReason,
    NotAcquired,
    NotReplicated,
    ServerError,
)
from ._sync import Election, Lease, Locks, Semaphore

__all__ = [
    "Election",
    "Leader",
    "Lease",
    "LimitReached",
    "LockError",
    "Locks",
    "Lost",
    "LostReason",
    "NotAcquired",
    "NotReplicated",
    "ReplicaSync",
    "Semaphore",
    "ServerError",
]
