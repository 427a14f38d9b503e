"""Fenced locks for the redis-lock module (LOCK.* commands), over redis-py or valkey-py.

    import redis
    from redis_lock_client import Locks, NotAcquired

    locks = Locks(redis.Redis())
    with locks.lock("billing", ttl=10, wait=30) as lease:
        write(lease.fence)            # stop when lease.lost is set

The same API over redis.asyncio / valkey.asyncio: `redis_lock_client.asyncio`.
"""

from ._errors import LimitReached, LockError, Lost, LostReason, NotAcquired, ServerError
from ._sync import Lease, Locks

__all__ = [
    "Lease",
    "LimitReached",
    "LockError",
    "Locks",
    "Lost",
    "LostReason",
    "NotAcquired",
    "ServerError",
]
