"""Locks and leases over an asyncio client (redis.asyncio.Redis, valkey.asyncio.Valkey).

The same API as the package's top level, with coroutines and an
`asyncio.Event` for `lost`. Each `Locks` has one watchdog task for all its
holds (`_Watchdog`), started with the first hold and ended with the last:
it sets `lost` at each deadline less the margin, and every ttl/3 keeps each
session's lease alive and extends the holds kept on their own, in one
pipeline through the client's own connection pool, in a task of its own
bounded in time, so that a renewal stuck on a paused server does not delay
`lost`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Literal

from . import _common as common
from . import _keeper, _version
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

__all__ = [
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


class _Watchdog:
    """The task that keeps every session and lease of one `Locks` (see the
    module's doc), and grants the sessions' leases.

    A batch with synced leases blocks its connection until the replicas
    acknowledge: it goes through a connection of the watchdog's own (retries
    off, no read timeout: the batch is bounded in time), not the client's
    pool, whose read timeout may be shorter than the sync's."""

    def __init__(self, locks: Locks) -> None:
        self.locks = locks
        self._renewing = _keeper.Renewing()
        self._task: asyncio.Task[None] | None = None
        self._batch: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._synced: _Dedicated | None = None
        # One LOCK.LEASE GRANT at a time, in the event loop it was made for.
        self._granting: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def add(self, lease: Lease) -> None:
        loss = self._renewing.add(lease)
        self._start()
        if loss is not None:
            lease._mark_lost(loss)

    def remove(self, lease: Lease) -> None:
        self._renewing.remove(lease)
        self._notify()

    def orphan(self, lease: Lease, release: tuple[object, ...]) -> None:
        """A release of `lease` got no answer: its session sends it again
        with each round until one is answered (`Session.orphan`)."""
        session = lease._attached
        if session is None or lease._released:
            return  # its own lease: no longer extended, it ends at its ttl
        session.orphan(lease, release, common.now())
        self._renewing.sessions.add(session)
        self._start()

    async def session(self, ttl_ms: int) -> Session | None:
        """The session a hold of `ttl_ms` attaches to, its lease granted now
        if none is usable; None when the server has no `LOCK.LEASE` (in
        `keepalive="auto"`). See `redis_lock_client.Locks`."""
        session = self._renewing.usable_session(ttl_ms, common.now())
        if session is not None or self.locks._lease_support is False:
            return session
        loop = asyncio.get_running_loop()
        if self._granting is None or self._granting[0] is not loop:
            self._granting = (loop, asyncio.Lock())
        async with self._granting[1]:
            session = self._renewing.usable_session(ttl_ms, common.now())
            if session is not None:
                return session
            sent = common.now()
            try:
                lease_id = await self.locks.client.execute_command("LOCK.LEASE", "GRANT", ttl_ms)
            except self.locks.family.response_error as error:
                refusal = common.lock_error(error)
                if self.locks._without_leases(refusal):
                    return None
                raise refusal from error
            self.locks._lease_support = True
            session = Session(lease_id, ttl_ms, sent, self.locks.safety_margin)
            self._renewing.current[ttl_ms] = session
            return session

    def acquiring(self, session: Session, change: int) -> None:
        """An acquire under `session` starts (+1; the lease is kept alive
        meanwhile) or ends (-1)."""
        losses = self._renewing.acquiring(session, change)
        if change > 0:
            self._start()
        self._mark(losses)

    def lease_gone(self, session: Session) -> None:
        """An acquire was answered NOLEASE: the lease is gone on the server."""
        session.gone()
        self._notify()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="redis-lock-watchdog")
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    @staticmethod
    def _mark(losses: list[tuple[common.LeaseFacts, common.Loss]]) -> None:
        for lease, loss in losses:
            lease._mark_lost(loss)

    async def _run(self) -> None:
        wake_event = self._wake
        assert wake_event is not None
        try:
            while True:
                wake_event.clear()
                now = common.now()
                for lease in self._renewing.past_deadline(now):
                    lease._lost_by_clock()
                self._mark(self._renewing.expired(now))
                if self._renewing.idle(now):
                    return
                if self._batch is None:
                    rounds = self._renewing.due_rounds(now)
                    due = self._renewing.due(now)
                    if rounds or due:
                        batch = _keeper.Batch(rounds, due, now)
                        self._batch = asyncio.create_task(self._renew(batch))
                wake = self._renewing.next_wake(now, extending=self._batch is None)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake_event.wait(), max(wake - now, 0.0))
        finally:
            if self._batch is not None:
                self._batch.cancel()
            if self._synced is not None:
                synced, self._synced = self._synced, None
                with contextlib.suppress(Exception):
                    await synced.close()

    async def _renew(self, batch: _keeper.Batch) -> None:
        """Sends `batch` in one pipeline, for at most its patience (the
        longest interval of what it renews, or its sync timeout); settles
        each reply (a failure: a retry before the deadline)."""
        batch.sent = common.now()
        synced = any(lease._sync is not None for lease, _ in batch.leases)
        try:
            client = self.locks.client
            if synced:
                if self._synced is None:
                    self._synced = _Dedicated(self.locks, None)
                client = self._synced.client
            pipeline = client.pipeline(transaction=False)
            for command in batch.commands():
                pipeline.execute_command(*command)
            answers = await asyncio.wait_for(pipeline.execute(raise_on_error=False), batch.patience)
            batch.replies = [self._reply(answer) for answer in answers]
        except Exception as error:  # a timeout too: redis-py then drops that connection
            batch.replies = []
            batch.fail(error)
            if synced and self._synced is not None:  # a reply may still come: not on it
                dropped, self._synced = self._synced, None
                with contextlib.suppress(Exception):
                    await dropped.close()
        finally:
            self._batch = None
            self._notify()
        self._mark(batch.settle(common.now()))

    def _reply(self, answer: object) -> object:
        if isinstance(answer, self.locks.family.response_error):
            return common.lock_error(answer)
        return answer


class Locks:
    """Fenced locks on one server, through an asyncio `client`
    (redis.asyncio.Redis or valkey.asyncio.Valkey). See `redis_lock_client.Locks`.
    One watchdog task keeps all the sessions and leases of a `Locks`,
    through the client's connection pool; `keepalive` as there."""

    def __init__(
        self,
        client: Any,
        *,
        safety_margin: float | None = None,
        keepalive: common.Keepalive = "auto",
    ) -> None:
        self.client = client
        self.family = common.family_of(client)
        if not self.family.asyncio:
            raise TypeError("a synchronous client: use redis_lock_client.Locks")
        common.dedicated_pool_kwargs(client, self.family, None)
        self.safety_margin = common.check_margin(safety_margin)
        self.keepalive = common.check_keepalive(keepalive)
        # Whether the server has LOCK.LEASE: None until the first grant tells.
        self._lease_support: bool | None = None if self.keepalive != "extend" else False
        self._watchdog = _Watchdog(self)
        self._giving_back: set[asyncio.Task[None]] = set()
        # Whether the server's module passed the version check (asked once),
        # and the lock that makes concurrent first commands ask once (made
        # in the loop that runs them).
        self._module_checked = False
        self._module_checking: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    async def _check_module(self) -> None:
        """See `redis_lock_client.Locks._check_module`."""
        if self._module_checked:
            return
        loop = asyncio.get_running_loop()
        if self._module_checking is None or self._module_checking[0] is not loop:
            self._module_checking = (loop, asyncio.Lock())
        async with self._module_checking[1]:
            if self._module_checked:
                return
            dedicated = _Dedicated(self, _version.MODULE_CHECK_TIMEOUT)
            try:
                reply = await dedicated.client.execute_command("MODULE", "LIST")
            except self.family.response_error:
                reply = None
            finally:
                await dedicated.close()
            _version.check(reply)
            self._module_checked = True

    def _without_leases(self, refusal: LockError) -> bool:
        """See `redis_lock_client.Locks`."""
        if self.keepalive == "auto" and common.no_lease_command(refusal):
            self._lease_support = False
            return True
        return False

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
        sync: ReplicaSync | None = None,
    ) -> Lease | None:
        """The lease on `key` for `ttl` seconds, or None when another holds it
        (or the `wait` ran out); with `shared`, a read lease beside other
        readers; with `sync`, answered once that many replicas hold the grant
        (`NotReplicated`: undone, nothing held). As
        `redis_lock_client.Locks.acquire`: cancelled (or `asyncio.timeout()`)
        after the server may have granted the lock, it releases the token,
        shielded from a second cancellation."""
        request = common.Acquire.of(key, ttl, wait, session, owner, shared=shared, sync=sync)
        return await self._acquire(request, watchdog)

    async def _acquire(self, request: common.Acquire, watchdog: bool) -> Lease | None:
        common.check_sync_fits(request.sync, request.ttl_ms, self.safety_margin)
        await self._check_module()
        if not request.attaches(watchdog) or self._lease_support is False:
            return await self._acquire_under(request, watchdog, None)
        started = common.now()
        for attempt in (1, 2):
            session = await self._watchdog.session(request.ttl_ms)
            try:
                return await self._acquire_under(request, watchdog, session)
            except common.LeaseGone as gone:
                if attempt == 2:
                    raise gone.error from None
                retry = request.waited(common.now() - started)  # NOLEASE: a new lease, once
                if retry is None:
                    return None  # the wait ran out
                request = retry
        raise AssertionError("unreachable")

    async def _acquire_under(
        self, request: common.Acquire, watchdog: bool, session: Session | None
    ) -> Lease | None:
        """One acquire, attached to `session` when there is one (`LEASE`)."""
        dedicated = None
        if request.needs_own_connection:
            dedicated = _Dedicated(self, request.read_timeout(self.client))
        args = request.args + ([] if session is None else session.lease_args())
        sent = common.now()
        undone = False  # NOSYNC, NOLEASE: nothing granted, nothing to give back
        if session is not None:
            self._watchdog.acquiring(session, +1)
        try:
            try:
                reply = await self._call(
                    self.client if dedicated is None else dedicated.client, *args
                )
            except NotReplicated:
                undone = True
                raise
            except ServerError as error:
                if session is None or error.code != "NOLEASE":
                    raise
                undone = True
                self._watchdog.lease_gone(session)
                raise common.LeaseGone(error) from error
            fence = common.fence_of(reply)
            if dedicated is not None and (fence is None or not request.session):
                await dedicated.close()
                dedicated = None
            if fence is None:
                return None
            clock = common.LeaseClock(sent, request.ttl_ms, self.safety_margin)
            lease = Lease(self, request, fence, clock, watchdog, session)
            lease._connection = dedicated
            if request.wait_ms is not None and session is None:
                await lease._confirm_after_wait()  # an attached hold lives as its session's lease
            lease._start()
            return lease
        except BaseException:
            # The reply may be lost after a grant, or the grant was not handed
            # over (the task was cancelled, the confirming extend failed):
            # give back what this token may hold, even if cancelled again.
            await self._give_back(request, dedicated, release=not undone)
            raise
        finally:
            if session is not None:
                self._watchdog.acquiring(session, -1)

    async def _give_back(
        self, request: common.Acquire, dedicated: _Dedicated | None, *, release: bool
    ) -> None:
        async def give_back() -> None:
            if dedicated is not None:
                with contextlib.suppress(Exception):
                    await dedicated.close()
            if not release:
                return
            with contextlib.suppress(Exception):  # else it ends at its ttl
                await self.client.execute_command(
                    request.commands.release, *request.target, request.token
                )

        task = asyncio.create_task(give_back())
        self._giving_back.add(task)  # a reference until it ends
        task.add_done_callback(self._giving_back.discard)
        await asyncio.shield(task)

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
        sync: ReplicaSync | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Lease]:
        """`acquire` as an async context manager: yields the lease, releases it on
        exit. Raises `NotAcquired`, `NotReplicated` (a `sync` grant undone),
        and `Lost` on exit if the lease was lost (its cause the release's
        error when the server went away)."""
        request = common.Acquire.of(key, ttl, wait, session, owner, shared=shared, sync=sync)
        return _holding(
            lambda: self._acquire(request, watchdog), common.not_acquired_message(key, wait)
        )

    async def acquire_many(
        self,
        keys: Iterable[common.Key],
        ttl: float,
        *,
        wait: float | None = None,
        session: bool = False,
        watchdog: bool = True,
        owner: str | bytes | None = None,
        shared: bool = False,
        sync: ReplicaSync | None = None,
    ) -> Lease | None:
        """One lease on every key of `keys` for `ttl` seconds, taken in one step
        (`LOCK.MACQUIRE`), or None when any of them is held (nothing is taken).

        All or nothing: every key is granted to one token, with one fence and
        one deadline. With `wait`, the request queues fairly on every key and
        holds none while it waits, so requests for overlapping sets, in any
        order, cannot deadlock; None when the wait runs out. The lease's
        `keys` are the set, its `key` the first; the watchdog extends them
        together as one hold: in the `Locks`' session (`LEASE`, each key a
        hold of its lease, counted per key), or with one `LOCK.MEXTEND` (1 only
        when the token still holds every key, else nothing changes and the
        lease is lost); `release()` releases them together (`LOCK.MRELEASE`;
        True when every key was released), and `guard()` checks the first
        key. `sync` applies to the whole set (undone on every key when the
        replicas fall short: `NotReplicated`). In a Redis Cluster all
        keys must share a slot: one hash tag (`{order:42}:stock`,
        `{order:42}:payment`). One key is a plain `acquire`.
        """
        request = common.Acquire.many(keys, ttl, wait, session, owner, shared=shared, sync=sync)
        return await self._acquire(request, watchdog)

    def lock_many(
        self,
        keys: Iterable[common.Key],
        ttl: float,
        *,
        wait: float | None = None,
        session: bool = False,
        watchdog: bool = True,
        owner: str | bytes | None = None,
        shared: bool = False,
        sync: ReplicaSync | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Lease]:
        """`acquire_many` as an async context manager: yields the lease on every key,
        releases them all on exit; `NotAcquired` when any key is held (or the
        wait ran out), `Lost` on exit when the lease was lost meanwhile."""
        request = common.Acquire.many(keys, ttl, wait, session, owner, shared=shared, sync=sync)
        message = common.not_acquired_many_message(request.keys or (request.key,), wait)
        return _holding(lambda: self._acquire(request, watchdog), message)

    def semaphore(self, key: common.Key, limit: int) -> Semaphore:
        """The semaphore `key` with `limit` permits: `Semaphore(self, key, limit)`."""
        return Semaphore(self, key, limit)

    async def info(self, key: common.Key) -> dict[str, int] | None:
        """`LOCK.INFO`: None when free, else its numbers: fence, ttl, deadline,
        granted, extends, waiters, holders (and `lease` for an attached hold)."""
        return common.info_of(await self._call(self.client, "LOCK.INFO", common.check_key(key)))

    async def revoke(self, key: common.Key, reason: str | bytes | None = None) -> int:
        """`LOCK.REVOKE key [REASON reason]`: the number of holds taken back.
        See `redis_lock_client.Locks.revoke` (the user needs `@dangerous`)."""
        args: list[object] = ["LOCK.REVOKE", common.check_key(key)]
        checked = common.check_reason(reason)
        if checked is not None:
            args += ["REASON", checked]
        return int(await self._call(self.client, *args))

    async def _call(self, client: Any, *args: object) -> Any:
        await self._check_module()
        try:
            return await client.execute_command(*args)
        except self.family.response_error as error:
            raise common.lock_error(error) from error

    async def _call_synced(self, sync: ReplicaSync | None, *args: object) -> Any:
        """`args` (which carry `sync`'s `SYNC`, if any): with a sync, on a
        connection of its own, retries off, that reads for longer than the
        sync waits; see `redis_lock_client.Locks`."""
        if sync is None:
            return await self._call(self.client, *args)
        dedicated = _Dedicated(self, common.sync_read_timeout(sync))
        try:
            return await self._call(dedicated.client, *args)
        finally:
            await dedicated.close()


@contextlib.asynccontextmanager
async def _holding(
    acquire: Callable[[], Awaitable[Lease | None]], not_acquired: str
) -> AsyncIterator[Lease]:
    """The lease `acquire` gives, held for a block: released on exit; `NotAcquired`
    (with that message) without one, `Lost` on exit when it was lost meanwhile,
    its cause the release's error when that failed too."""
    lease = await acquire()
    if lease is None:
        raise NotAcquired(not_acquired)
    try:
        yield lease
    except BaseException:
        with contextlib.suppress(Exception):
            await lease.release()  # the block's own exception matters more
        raise
    try:
        released = lease.released or await lease.release()  # the block may have released it
    except Exception as error:
        if lease.lost.is_set():  # the server went away, and the lease with it
            raise Lost(lease.lost_reason or LostReason.EXPIRED, common.LOST_IN_BLOCK) from error
        raise
    if lease.lost.is_set() or not released:
        raise Lost(lease.lost_reason or LostReason.REFUSED, common.LOST_IN_BLOCK)


class _LostEvent(asyncio.Event):
    """`Lease.lost`: an asyncio.Event that also asks the lease's clock, so it is
    set the moment the deadline less the margin has passed."""

    def __init__(self, lease: Lease) -> None:
        super().__init__()
        self._lease = lease

    def is_set(self) -> bool:
        return super().is_set() or self._lease._lost_by_clock()

    async def wait(self) -> Literal[True]:
        if self.is_set():
            return True
        return await super().wait()


class Lease(common.LeaseFacts):
    """A held lock, or a semaphore's permits: `key`, `token`, `fence`,
    `valid_until`, `held`, `remaining()`, `shared`, `count`; `lost` (an
    asyncio.Event) is set when it is gone or about to be (see `lost_reason`)."""

    def __init__(
        self,
        locks: Locks,
        request: common.Acquire,
        fence: int,
        clock: common.LeaseClock,
        extending: bool = True,
        session: Session | None = None,
    ) -> None:
        super().__init__(request, fence, clock, extending, session)
        self._locks = locks
        self._connection: _Dedicated | None = None  # a `session=True` lease's own
        self.lost: asyncio.Event = _LostEvent(self)

    async def extend(self, ttl: float | None = None, *, sync: ReplicaSync | None = None) -> None:
        """Sets the lease to end `ttl` seconds from now (default: the current ttl).
        Raises `Lost`, `LimitReached` or `NotReplicated` (`sync`: by default
        the lease's own), as `redis_lock_client.Lease.extend` (which see for a
        hold attached to a session: it only checks that it still holds)."""
        if self._forked:
            raise common.forked_error()
        ttl_ms = self._clock.ttl_ms if ttl is None else common.ttl_to_ms(ttl)
        if self._attached is not None:
            ttl_ms = self._clock.ttl_ms  # the session's: an attached hold's ttl moves nothing
        synced = self._sync if sync is None else common.sync_of(sync)
        common.check_sync_fits(synced, ttl_ms, self._locks.safety_margin)
        args = [self._commands.extend, *self._target, self.token, ttl_ms, *common.sync_args(synced)]
        sent = common.now()
        try:
            reply = await self._locks._call_synced(synced, *args)
        except NotReplicated:
            self._clock.not_replicated(common.now())
            raise
        except LockError as error:
            lost = common.extend_error(self, error)
            if lost is None:
                raise
            raise lost from error
        if reply != 1:
            self._mark_lost(common.REFUSED)
            raise Lost(LostReason.REFUSED, common.REFUSED_MESSAGE)
        if self._attached is None:
            self._clock.extended(sent, ttl_ms)

    async def release(self) -> bool:
        """Stops the watchdog and releases: True if released, False if it was
        already gone (expired, deleted, taken, overwritten with another type,
        or released before). A release that failed on the network raises and
        can be called again; a session's hold is also released again by the
        watchdog with the session's rounds (as `redis_lock_client.Lease.release`)."""
        if self._forked or self._released:
            return False
        self._stopped = True
        self._locks._watchdog.remove(self)
        command = (self._commands.release, *self._target, self.token)
        try:
            reply = await self._locks._call(self._locks.client, *command)
        except ServerError as error:
            if error.code != "WRONGTYPE":
                raise
            reply = 0  # the key holds another type now: the lease is gone
        except LockError:
            raise
        except (Exception, asyncio.CancelledError):  # no answer: a timeout, a cancel too
            self._locks._watchdog.orphan(self, command)
            raise
        finally:
            if self._connection is not None:
                await self._connection.close()  # the server releases a session lock with it
        self._released = True
        return self._released_all(reply)

    async def guard(self, *command: object, sync: ReplicaSync | None = None) -> Any:
        """Runs `command` only while this lease holds the lock (`LOCK.GUARD`), and
        returns its reply. Raises `Lost` (and sets `lost`) when it does not hold,
        and `NotReplicated` when `sync` was not met (the command ran); as
        `redis_lock_client.Lease.guard`."""
        guard = common.check_command(self._commands, command)
        if self._forked:
            raise common.forked_error()
        synced = common.sync_of(sync)
        args = [guard, self.key, self.token, *common.sync_args(synced), *command]
        try:
            return await self._locks._call_synced(synced, *args)
        except Lost as lost:
            self._mark_lost(common.Loss.of(lost))
            raise

    async def _confirm_after_wait(self) -> None:
        """After a wait, the grant's moment is unknown: extend once, from a known send."""
        try:
            await self.extend()
        except LimitReached:
            self._clock.limit_reached = True
        except Lost:
            pass  # `lost` is set: the caller sees it
        except NotReplicated as error:  # the caller gives the grant back
            raise common.confirm_not_replicated(error) from error

    def _start(self) -> None:
        if not self._stopped:
            self._locks._watchdog.add(self)

    def _mark_lost(self, loss: common.Loss) -> None:
        if self._record_loss(loss):
            self._locks._watchdog.remove(self)
            self.lost.set()


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
        sync: ReplicaSync | None = None,
    ) -> None:
        super().__init__(key, ttl, owner, observe_timeout, sync)
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
        sync: ReplicaSync | None = None,
    ) -> Lease | None:
        """`count` permits for `ttl` seconds, or None when fewer are free (or
        the `wait` ran out)."""
        request = self._request(ttl, count, wait, session, owner, sync)
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
        sync: ReplicaSync | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Lease]:
        """`acquire` as an async context manager: yields the permits' lease,
        releases them on exit. Raises `NotAcquired`, and `Lost` on exit if they
        were lost."""
        request = self._request(ttl, count, wait, session, owner, sync)
        return _holding(
            lambda: self.locks._acquire(request, watchdog), self._not_acquired(request, wait)
        )

    async def info(self) -> dict[str, int] | None:
        """`SEM.INFO`: None when nobody holds or waits, else its numbers."""
        reply = await self.locks._call(self.locks.client, "SEM.INFO", self.key)
        return common.info_of(reply, "SEM.INFO")
