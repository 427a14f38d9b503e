"""Fenced locks for the redis-lock module (LOCK.* commands), over redis-py or valkey-py.

    import redis
    from redis_lock_client import Locks, NotAcquired

    locks = Locks(redis.Redis())
    with locks.lock("billing", ttl=10, wait=30) as lease:
        write(lease.fence)            # stop when lease.lost is set

Every hold taken through a `Locks` attaches to one server lease per ttl (a
`Session`, `LOCK.LEASE`), kept alive by one keepalive every ttl/3 whatever
the number of holds; `Locks(client, keepalive="extend")` extends each hold on
its own instead (servers without `LOCK.LEASE` get that by themselves). A
hold taken away by an operator (`locks.revoke(key, reason)`) is lost with
`LostReason.REVOKED` and `lease.revoked_reason`.

Read/write locks and semaphores: `locks.lock("catalog", 10, shared=True)` is a
read lease beside other readers; `locks.semaphore("renders", 4).permit(10)`
holds one of 4 permits (`SEM.*`), with the same watchdog and `lost`.

Replicas: `sync=ReplicaSync(1, 2.0)` on an acquire answers only once one
replica holds the grant (`SYNC`), and undoes it otherwise (`NotReplicated`).

Leader election (docs/leader-election.md): `Election(locks, "leader", ttl=10,
owner="host-a")`, whose `campaign()` returns the leader's lease and whose
`observe()` yields each change of leader.

The same API over redis.asyncio / valkey.asyncio: `redis_lock_client.asyncio`.

Versions: a client x.y.* needs the module x.y.0 or newer. Each `Locks` asks
`MODULE LIST` once, before its first command (within `MODULE_CHECK_TIMEOUT`),
and raises `ModuleVersionError` when the server's `lock` module is older or
not loaded; a user whose ACL refuses `MODULE LIST` is not checked.
"""

from ._common import Leader, ReplicaSync
from ._errors import (
    LimitReached,
    LockError,
    Lost,
    LostReason,
    ModuleVersionError,
    NotAcquired,
    NotReplicated,
    ServerError,
)
from ._session import Session
from ._sync import Election, Lease, Locks, Semaphore
from ._version import MODULE_CHECK_TIMEOUT, REQUIRED_MODULE_VERSION, __version__

__all__ = [
    "MODULE_CHECK_TIMEOUT",
    "REQUIRED_MODULE_VERSION",
    "Election",
    "Leader",
    "Lease",
    "LimitReached",
    "LockError",
    "Locks",
    "Lost",
    "LostReason",
    "ModuleVersionError",
    "NotAcquired",
    "NotReplicated",
    "ReplicaSync",
    "Semaphore",
    "ServerError",
    "Session",
    "__version__",
]
