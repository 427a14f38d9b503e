"""Locks and leases over a synchronous client (redis.Redis, valkey.Valkey).

A lease has two daemon threads: the watchdog, which extends it every ttl/3 on
a connection of its own, and the deadline watcher, which sets `lost` when the
deadline less the margin comes without a successful extend. They are apart so
that an extend stuck on a paused server cannot delay `lost`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from . import _common as common
from ._common import Leader
from ._errors import LimitReached, Lost, LostReason, NotAcquired


class _Dedicated:
    """A client over a pool of one connection of its own, retries off."""

    def __init__(self, locks: Locks, read_timeout: float | None) -> None:
        kwargs = common.dedicated_pool_kwargs(locks.client, locks.family, read_timeout)
        self.pool = locks.family.module.ConnectionPool(**kwargs)
        self.client = locks.family.module.Redis(connection_pool=self.pool)

    def close(self) -> None:
        """Closes the connection: a waiter leaves the server's queue with it."""
        self.pool.disconnect()


class Locks:
    """Fenced locks on one server, through `client` (redis.Redis or valkey.Valkey).

    `safety_margin` is the fraction of the ttl by which `Lease.lost` is set
    before the client's deadline (default 0.1).
    """

    def __init__(self, client: Any, *, safety_margin: float | None = None) -> None:
        self.client = client
        self.family = common.family_of(client)
        if self.family.asyncio:
            raise TypeError("an asyncio client: use redis_lock_client.asyncio.Locks")
        common.dedicated_pool_kwargs(client, self.family, None)
        self.safety_margin = common.check_margin(safety_margin)

    def acquire(
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
        """The lease on `key` for `ttl` seconds, or None when another holds it.

        With `wait` (seconds), waits in the server's queue on a connection of
        its own, and returns None when the wait runs out. With `session`, the
        server also releases the lock when that connection closes (the lease
        keeps it open). With `watchdog` (default), a thread extends the lease
        every ttl/3 until `release()`. `owner` is a public label (1 to 128
        bytes) that `LOCK.INFO`, `LOCK.QUEUE` and `LOCK.OBSERVE` show.

        With `shared`, a read lease (`LOCK.ACQUIRE … SHARED`): granted beside
        other readers, each with its own token, lease and fence; refused while
        a writer holds the key or anyone waits for it. Its `guard()` runs
        read-only commands only.
        """
        request = common.Acquire.of(key, ttl, wait, session, owner, shared=shared)
        return self._acquire(request, watchdog)

    def _acquire(self, request: common.Acquire, watchdog: bool) -> Lease | None:
        dedicated = None
        if request.needs_own_connection:
            dedicated = _Dedicated(self, request.read_timeout(self.client))
        sent = common.now()
        try:
            reply = self._call(
                self.client if dedicated is None else dedicated.client, *request.args
            )
        except BaseException:
            # The reply may be lost after a grant: give back what this token may hold.
            if dedicated is not None:
                dedicated.close()
            self._release_quietly(request)
            raise
        fence = common.fence_of(reply)
        if dedicated is not None and (fence is None or not request.session):
            dedicated.close()
            dedicated = None
        if fence is None:
            return None
        clock = common.LeaseClock(sent, request.ttl_ms, self.safety_margin)
        lease = Lease(self, request, fence, clock)
        lease._session = dedicated
        if request.wait_ms is not None:
            lease._confirm_after_wait()
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
    ) -> contextlib.AbstractContextManager[Lease]:
        """`acquire` as a context manager: yields the lease, releases it on exit.

        Raises `NotAcquired` when the lock is held (or the wait ran out), and
        `Lost` on exit when the lease was lost before the block ended.
        """
        request = common.Acquire.of(key, ttl, wait, session, owner, shared=shared)
        return _holding(
            lambda: self._acquire(request, watchdog), common.not_acquired_message(key, wait)
        )

    def semaphore(self, key: common.Key, limit: int) -> Semaphore:
        """The semaphore `key` with `limit` permits: `Semaphore(self, key, limit)`."""
        return Semaphore(self, key, limit)

    def info(self, key: common.Key) -> dict[str, int] | None:
        """`LOCK.INFO`: None when free, else its numbers: fence, ttl, deadline,
        granted, extends, waiters, holders."""
        return common.info_of(self._call(self.client, "LOCK.INFO", common.check_key(key)))

    def _call(self, client: Any, *args: object) -> Any:
        try:
            return client.execute_command(*args)
        except self.family.response_error as error:
            raise common.lock_error(error) from error

    def _release_quietly(self, request: common.Acquire) -> None:
        with contextlib.suppress(Exception):  # else it ends at its ttl
            self.client.execute_command(request.commands.release, request.key, request.token)


@contextlib.contextmanager
def _holding(acquire: Callable[[], Lease | None], not_acquired: str) -> Iterator[Lease]:
    """The lease `acquire` gives, held for a block: released on exit; `NotAcquired`
    (with that message) without one, `Lost` on exit when it was lost meanwhile."""
    lease = acquire()
    if lease is None:
        raise NotAcquired(not_acquired)
    try:
        yield lease
    except BaseException:
        with contextlib.suppress(Exception):
            lease.release()  # the block's own exception matters more
        raise
    released = lease.released or lease.release()  # the block may have released it
    if lease.lost.is_set() or not released:
        raise Lost(lease.lost_reason or LostReason.REFUSED, common.LOST_IN_BLOCK)


class Lease(common.LeaseFacts):
    """A held lock, or a semaphore's permits: `key`, `token`, `fence`,
    `valid_until`, `shared` (a read lease), `count` (permits; None for a lock);
    `lost` is set when it is gone or about to be (see `lost_reason`)."""

    def __init__(
        self, locks: Locks, request: common.Acquire, fence: int, clock: common.LeaseClock
    ) -> None:
        super().__init__(request, fence, clock)
        self.lost = threading.Event()
        self._locks = locks
        self._session: _Dedicated | None = None
        self._cond = threading.Condition(threading.RLock())

    def extend(self, ttl: float | None = None) -> None:
        """Sets the lease to end `ttl` seconds from now (default: the current ttl).

        Raises `Lost` when the token no longer holds the lock, and
        `LimitReached` when the server's hold policy refuses (the lease then
        still holds until its current deadline).
        """
        ttl_ms = self._clock.ttl_ms if ttl is None else common.ttl_to_ms(ttl)
        sent = common.now()
        reply = self._locks._call(
            self._locks.client, self._commands.extend, self.key, self.token, ttl_ms
        )
        if reply != 1:
            self._mark_lost(LostReason.REFUSED, common.REFUSED_MESSAGE)
            raise Lost(LostReason.REFUSED, common.REFUSED_MESSAGE)
        with self._cond:
            self._clock.extended(sent, ttl_ms)
            self._cond.notify_all()

    def release(self) -> bool:
        """Stops the watchdog and releases: True if released, False if it was
        already gone (expired, deleted, taken or released before)."""
        with self._cond:
            already = self._released
            self._released = self._stopped = True
            self._cond.notify_all()
        if already:
            return False
        try:
            reply = self._locks._call(
                self._locks.client, self._commands.release, self.key, self.token
            )
        finally:
            if self._session is not None:
                self._session.close()
        return bool(reply == 1)

    def guard(self, *command: object) -> Any:
        """Runs `command` only while this lease holds the lock (`LOCK.GUARD`), and
        returns its reply. Raises `Lost` (and sets `lost`) when it does not hold.
        A read lease runs read-only commands only (others: `ServerError`); a
        semaphore's permits guard nothing (`TypeError`)."""
        guard = common.check_command(self._commands, command)
        try:
            return self._locks._call(self._locks.client, guard, self.key, self.token, *command)
        except Lost as lost:
            self._mark_lost(LostReason.REFUSED, str(lost))
            raise

    def _confirm_after_wait(self) -> None:
        """After a wait, the grant's moment is unknown: extend once, from a known send."""
        try:
            self.extend()
        except LimitReached:
            self._clock.limit_reached = True
        except Lost:
            pass  # `lost` is set: the caller sees it

    def _start(self, watchdog: bool) -> None:
        threading.Thread(target=self._watch_deadline, name="lease-deadline", daemon=True).start()
        if watchdog and not self.lost.is_set():
            threading.Thread(target=self._keep_alive, name="lease-watchdog", daemon=True).start()

    def _mark_lost(self, reason: LostReason, message: str) -> None:
        with self._cond:
            if self._record_loss(reason, message):
                self.lost.set()
                self._cond.notify_all()

    def _watch_deadline(self) -> None:
        with self._cond:
            while not self._stopped:
                remaining = self._clock.lost_at - common.now()
                if remaining <= 0:
                    self._mark_lost(self._clock.expiry_reason(), self._clock.expiry_message())
                    return
                self._cond.wait(remaining)

    def _keep_alive(self) -> None:
        connection = _Dedicated(self._locks, read_timeout=self._clock.interval)
        try:
            while True:
                with self._cond:
                    while not self._stopped and common.now() < self._clock.next_extend_at:
                        self._cond.wait(self._clock.next_extend_at - common.now())
                    if self._stopped:
                        return
                    ttl_ms = self._clock.ttl_ms
                sent = common.now()
                try:
                    reply = self._locks._call(
                        connection.client, self._commands.extend, self.key, self.token, ttl_ms
                    )
                except LimitReached:
                    with self._cond:
                        self._clock.limit_reached = True  # the deadline watcher ends it
                    return
                except Exception:
                    with self._cond:
                        self._clock.failed(common.now())  # try again until the deadline
                    continue
                if reply != 1:
                    self._mark_lost(LostReason.REFUSED, common.REFUSED_MESSAGE)
                    return
                with self._cond:
                    self._clock.extended(sent, ttl_ms)
                    self._cond.notify_all()
        finally:
            connection.close()


class Election(common.ElectionFacts):
    """Leader election on the lock `key`: who holds it leads.

    Candidates wait in the server's queue (`campaign`) and lead with a
    `Lease` of `ttl` seconds that its watchdog extends; `lease.release()`
    resigns and hands the lock to the next candidate. Followers iterate over
    `observe()`. The recipe and its failure cases: docs/leader-election.md.
    """

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

    def campaign(self, *, timeout: float | None = None, watchdog: bool = True) -> Lease:
        """Waits in the queue (`WAIT 0`, or up to `timeout` seconds) on a connection
        of its own, and returns the leader's lease. Raises `NotAcquired` when
        `timeout` runs out first. Closing that connection (an exception, an
        interrupt) takes the candidate out of the queue."""
        lease = self.locks._acquire(self._campaign_request(timeout), watchdog)
        if lease is None:
            raise NotAcquired(common.not_acquired_message(self.key, timeout))
        return lease

    def leader(self) -> Leader | None:
        """The leader now (`LOCK.INFO`), or None when nobody leads."""
        return common.leader_of(self.locks._call(self.locks.client, "LOCK.INFO", self.key))

    def observe(self) -> Iterator[Leader | None]:
        """The leader now (None: nobody), then each change of leader as it
        happens (`LOCK.OBSERVE`), on a connection of its own that is closed
        when the iterator is. A connection error ends the iteration with that
        error: call `observe()` again to carry on."""
        connection = _Dedicated(self.locks, self._observe_read_timeout)
        try:
            leader = common.leader_of(self.locks._call(connection.client, "LOCK.INFO", self.key))
            yield leader
            while True:
                reply = self.locks._call(connection.client, *self._observe_args(leader))
                changed = common.leader_of(reply)
                if common.fence_seen(changed) != common.fence_seen(leader):
                    leader = changed
                    yield leader
        finally:
            connection.close()


class Semaphore(common.SemaphoreFacts):
    """A counting semaphore on `key`: at most `limit` permits out at once
    (`SEM.*`). Every user of a key must give the same limit (the server
    refuses another with `ServerError`).

    A holder takes `count` permits under one token, leased for `ttl` seconds,
    as a `Lease` with the same watchdog (`SEM.EXTEND`), `lost` and
    `release()` (`SEM.RELEASE`, which hands them to the head of the queue).
    The server's queue is fair across counts: a large request at its head is
    not passed by smaller ones.
    """

    def __init__(self, locks: Locks, key: common.Key, limit: int) -> None:
        super().__init__(key, limit)
        self.locks = locks

    def acquire(
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
        the `wait` ran out). The options are those of `Locks.acquire`."""
        request = self._request(ttl, count, wait, session, owner)
        return self.locks._acquire(request, watchdog)

    def permit(
        self,
        ttl: float,
        *,
        count: int = 1,
        wait: float | None = None,
        session: bool = False,
        watchdog: bool = True,
        owner: str | bytes | None = None,
    ) -> contextlib.AbstractContextManager[Lease]:
        """`acquire` as a context manager: yields the permits' lease, releases
        them on exit. Raises `NotAcquired` when they are not free (or the wait
        ran out), and `Lost` on exit when they were lost before the block ended.
        """
        request = self._request(ttl, count, wait, session, owner)
        return _holding(
            lambda: self.locks._acquire(request, watchdog), self._not_acquired(request, wait)
        )

    def info(self) -> dict[str, int] | None:
        """`SEM.INFO`: None when nobody holds or waits, else limit, used,
        holders, waiters, fence, ttl, deadline."""
        reply = self.locks._call(self.locks.client, "SEM.INFO", self.key)
        return common.info_of(reply, "SEM.INFO")
