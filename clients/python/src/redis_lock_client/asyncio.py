"""Locks and leases over an asyncio client (redis.asyncio.Redis, valkey.asyncio.Valkey).

The same API as the package's top level, with coroutines and an
`asyncio.Event` for `lost`. A lease has one task: it extends every ttl/3 on a
connection of its own, each extend bounded by the time left before the
deadline less the margin, and sets `lost` when that comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from . import _common as common
from ._common import Leader
from ._errors import LimitReached, LockError, Lost, LostReason, NotAcquired, ServerError

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
    "Semaphore",
    "ServerError",
]


class _Dedicated:
    """A client over a pool of one connection of its own, retries off."""

    def __init__(self, locks: Locks, read_timeout: float | None) -> None:
        kwargs = common.dedicated_pool_kwargs(locks.client, locks.family, read_timeout)
        self.pool = locks.family.module.ConnectionPool(**kwargs)
        self.client = locks.family.module.Redis(connection_pool=self.pool)

    async def close(self) -> None:
        """Closes the connection: a waiter leaves the server's queue with it."""
        await self.pool.disconnect()


class Locks:
    """Fenced locks on one server, through an asyncio `client`
    (redis.asyncio.Redis or valkey.asyncio.Valkey). See `redis_lock_client.Locks`."""

    def __init__(self, client: Any, *, safety_margin: float | None = None) -> None:
        self.client = client
        self.family = common.family_of(client)
        if not self.family.asyncio:
            raise TypeError("a synchronous client: use redis_lock_client.Locks")
        common.dedicated_pool_kwargs(client, self.family, None)
        self.safety_margin = common.check_margin(safety_margin)

    async def acquire(
        self,
        key: common.Key,
        ttl: float,
        *,
        wait: float | None = None,
        session: bool = False,
        watchdog: bool = True,
        owner: str | bytes | None = None,
        shared: bool = False,
    ) -> Lease | None:
        """The lease on `key` for `ttl` seconds, or None when another holds it
        (or the `wait` ran out); with `shared`, a read lease beside other
        readers. As `redis_lock_client.Locks.acquire`."""
        request = common.Acquire.of(key, ttl, wait, session, owner, shared=shared)
        return await self._acquire(request, watchdog)

    async def _acquire(self, request: common.Acquire, watchdog: bool) -> Lease | None:
        dedicated = None
        if request.needs_own_connection:
            dedicated = _Dedicated(self, request.read_timeout(self.client))
        sent = common.now()
        try:
            reply = await self._call(
                self.client if dedicated is None else dedicated.client, *request.args
            )
        except BaseException:
            # The reply may be lost after a grant (or the task was cancelled):
            # give back what this token may hold.
            if dedicated is not None:
                await dedicated.close()
            await self._release_quietly(request)
            raise
        fence = common.fence_of(reply)
        if dedicated is not None and (fence is None or not request.session):
            await dedicated.close()
            dedicated = None
        if fence is None:
            return None
        clock = common.LeaseClock(sent, request.ttl_ms, self.safety_margin)
        lease = Lease(self, request, fence, clock)
        lease._session = dedicated
        if request.wait_ms is not None:
            await lease._confirm_after_wait()
        lease._start(watchdog)
        return lease

    def lock(
        self,
        key: common.Key,
        ttl: float,
        *,
        wait: float | None = None,
        session: bool = False,
        watchdog: bool = True,
        owner: str | bytes | None = None,
        shared: bool = False,
    ) -> contextlib.AbstractAsyncContextManager[Lease]:
        """`acquire` as an async context manager: yields the lease, releases it on
        exit. Raises `NotAcquired`, and `Lost` on exit if the lease was lost."""
        request = common.Acquire.of(key, ttl, wait, session, owner, shared=shared)
        return _holding(
            lambda: self._acquire(request, watchdog), common.not_acquired_message(key, wait)
        )

    def semaphore(self, key: common.Key, limit: int) -> Semaphore:
        """The semaphore `key` with `limit` permits: `Semaphore(self, key, limit)`."""
        return Semaphore(self, key, limit)

    async def info(self, key: common.Key) -> dict[str, int] | None:
        """`LOCK.INFO`: None when free, else its numbers: fence, ttl, deadline,
        granted, extends, waiters, holders."""
        return common.info_of(await self._call(self.client, "LOCK.INFO", common.check_key(key)))

    async def _call(self, client: Any, *args: object) -> Any:
        try:
            return await client.execute_command(*args)
        except self.family.response_error as error:
            raise common.lock_error(error) from error

    async def _release_quietly(self, request: common.Acquire) -> None:
        with contextlib.suppress(Exception):
            await self.client.execute_command(request.commands.release, request.key, request.token)


@contextlib.asynccontextmanager
async def _holding(
    acquire: Callable[[], Awaitable[Lease | None]], not_acquired: str
) -> AsyncIterator[Lease]:
    """The lease `acquire` gives, held for a block: released on exit; `NotAcquired`
    (with that message) without one, `Lost` on exit when it was lost meanwhile."""
    lease = await acquire()
    if lease is None:
        raise NotAcquired(not_acquired)
    try:
        yield lease
    except BaseException:
        with contextlib.suppress(Exception):
            await lease.release()  # the block's own exception matters more
        raise
    released = lease.released or await lease.release()  # the block may have released it
    if lease.lost.is_set() or not released:
        raise Lost(lease.lost_reason or LostReason.REFUSED, common.LOST_IN_BLOCK)


class Lease(common.LeaseFacts):
    """A held lock, or a semaphore's permits: `key`, `token`, `fence`,
    `valid_until`, `shared`, `count`; `lost` (an asyncio.Event) is set when it
    is gone or about to be (see `lost_reason`)."""

    def __init__(
        self, locks: Locks, request: common.Acquire, fence: int, clock: common.LeaseClock
    ) -> None:
        super().__init__(request, fence, clock)
        self.lost = asyncio.Event()
        self._locks = locks
        self._session: _Dedicated | None = None
        self._task: asyncio.Task[None] | None = None

    async def extend(self, ttl: float | None = None) -> None:
        """Sets the lease to end `ttl` seconds from now (default: the current ttl).
        Raises `Lost` or `LimitReached`, as `redis_lock_client.Lease.extend`."""
        ttl_ms = self._clock.ttl_ms if ttl is None else common.ttl_to_ms(ttl)
        sent = common.now()
        reply = await self._locks._call(
            self._locks.client, self._commands.extend, self.key, self.token, ttl_ms
        )
        if reply != 1:
            self._mark_lost(LostReason.REFUSED, common.REFUSED_MESSAGE)
            raise Lost(LostReason.REFUSED, common.REFUSED_MESSAGE)
        self._clock.extended(sent, ttl_ms)

    async def release(self) -> bool:
        """Stops the watchdog and releases: True if released, False if it was
        already gone (expired, deleted, taken or released before)."""
        if self._released:
            return False
        self._released = self._stopped = True
        await self._stop_task()
        try:
            reply = await self._locks._call(
                self._locks.client, self._commands.release, self.key, self.token
            )
        finally:
            if self._session is not None:
                await self._session.close()
        return bool(reply == 1)

    async def guard(self, *command: object) -> Any:
        """Runs `command` only while this lease holds the lock (`LOCK.GUARD`), and
        returns its reply. Raises `Lost` (and sets `lost`) when it does not hold;
        as `redis_lock_client.Lease.guard`."""
        guard = common.check_command(self._commands, command)
        try:
            return await self._locks._call(
                self._locks.client, guard, self.key, self.token, *command
            )
        except Lost as lost:
            self._mark_lost(LostReason.REFUSED, str(lost))
            raise

    async def _confirm_after_wait(self) -> None:
        """After a wait, the grant's moment is unknown: extend once, from a known send."""
        try:
            await self.extend()
        except LimitReached:
            self._clock.limit_reached = True
        except Lost:
            pass  # `lost` is set: the caller sees it

    def _start(self, watchdog: bool) -> None:
        if not self._stopped:
            self._task = asyncio.create_task(self._watch(watchdog))

    async def _stop_task(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _mark_lost(self, reason: LostReason, message: str) -> None:
        if not self._record_loss(reason, message):
            return
        self.lost.set()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def _watch(self, watchdog: bool) -> None:
        clock = self._clock
        connection = _Dedicated(self._locks, read_timeout=clock.interval) if watchdog else None
        try:
            while not self._stopped:
                now = common.now()
                if now >= clock.lost_at:
                    self._mark_lost(clock.expiry_reason(), clock.expiry_message())
                    return
                extending = connection is not None and not clock.limit_reached
                due = clock.next_extend_at if extending else math.inf
                if now < due:
                    await asyncio.sleep(min(due, clock.lost_at) - now)
                    continue
                assert connection is not None
                ttl_ms = clock.ttl_ms
                try:
                    reply = await asyncio.wait_for(
                        self._locks._call(
                            connection.client, self._commands.extend, self.key, self.token, ttl_ms
                        ),
                        timeout=max(clock.lost_at - now, 0),
                    )
                except LimitReached:
                    clock.limit_reached = True  # the lease ends at its deadline
                    continue
                except Exception:
                    await connection.close()  # a timed-out read leaves the connection unusable
                    clock.failed(common.now())  # try again until the deadline
                    continue
                if reply != 1:
                    self._mark_lost(LostReason.REFUSED, common.REFUSED_MESSAGE)
                    return
                clock.extended(now, ttl_ms)
        finally:
            if connection is not None:
                await connection.close()


class Election(common.ElectionFacts):
    """Leader election on the lock `key`, over an asyncio client. See
    `redis_lock_client.Election`; `observe()` is an async iterator."""

    def __init__(
        self,
        locks: Locks,
        key: common.Key,
        ttl: float,
        *,
        owner: str | bytes | None = None,
        observe_timeout: float = common.OBSERVE_TIMEOUT_S,
    ) -> None:
        super().__init__(key, ttl, owner, observe_timeout)
        self.locks = locks

    async def campaign(self, *, timeout: float | None = None, watchdog: bool = True) -> Lease:
        """Waits in the queue until this candidate leads, and returns its lease.
        Raises `NotAcquired` when `timeout` runs out; cancelling the task takes
        the candidate out of the queue."""
        lease = await self.locks._acquire(self._campaign_request(timeout), watchdog)
        if lease is None:
            raise NotAcquired(common.not_acquired_message(self.key, timeout))
        return lease

    async def leader(self) -> Leader | None:
        """The leader now (`LOCK.INFO`), or None when nobody leads."""
        reply = await self.locks._call(self.locks.client, "LOCK.INFO", self.key)
        return common.leader_of(reply)

    async def observe(self) -> AsyncGenerator[Leader | None, None]:
        """The leader now, then each change of leader (`LOCK.OBSERVE`), on a
        connection of its own that is closed with the iterator."""
        connection = _Dedicated(self.locks, self._observe_read_timeout)
        try:
            reply = await self.locks._call(connection.client, "LOCK.INFO", self.key)
            leader = common.leader_of(reply)
            yield leader
            while True:
                reply = await self.locks._call(connection.client, *self._observe_args(leader))
                changed = common.leader_of(reply)
                if common.fence_seen(changed) != common.fence_seen(leader):
                    leader = changed
                    yield leader
        finally:
            await connection.close()


class Semaphore(common.SemaphoreFacts):
    """A counting semaphore on `key` with `limit` permits, over an asyncio
    client. See `redis_lock_client.Semaphore`; `permit()` is an async context
    manager."""

    def __init__(self, locks: Locks, key: common.Key, limit: int) -> None:
        super().__init__(key, limit)
        self.locks = locks

    async def acquire(
        self,
        ttl: float,
        *,
        count: int = 1,
        wait: float | None = None,
        session: bool = False,
        watchdog: bool = True,
        owner: str | bytes | None = None,
    ) -> Lease | None:
        """`count` permits for `ttl` seconds, or None when fewer are free (or
        the `wait` ran out)."""
        request = self._request(ttl, count, wait, session, owner)
        return await self.locks._acquire(request, watchdog)

    def permit(
        self,
        ttl: float,
        *,
        count: int = 1,
        wait: float | None = None,
        session: bool = False,
        watchdog: bool = True,
        owner: str | bytes | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Lease]:
        """`acquire` as an async context manager: yields the permits' lease,
        releases them on exit. Raises `NotAcquired`, and `Lost` on exit if they
        were lost."""
        request = self._request(ttl, count, wait, session, owner)
        return _holding(
            lambda: self.locks._acquire(request, watchdog), self._not_acquired(request, wait)
        )

    async def info(self) -> dict[str, int] | None:
        """`SEM.INFO`: None when nobody holds or waits, else its numbers."""
        reply = await self.locks._call(self.locks.client, "SEM.INFO", self.key)
        return common.info_of(reply, "SEM.INFO")
