"""Locks and leases over a synchronous client (redis.Redis, valkey.Valkey).

Each `Locks` has one watchdog thread for all its holds (`_Watchdog`), started
with the first hold and ended with the last, and one connection of its own.
Every ttl/3 it keeps each session's lease alive (`LOCK.LEASE KEEPALIVE` and
`INFO`: one round whatever the number of holds attached, `_session.py`) and
extends the holds kept on their own (`LOCK.EXTEND` each), all in one
pipelined batch (`_keeper.Batch`); it sets `lost` at each deadline less the
margin. It never waits on the network past the next deadline (its reads are
bounded, its connect and handshake too), so a renewal stuck on a paused
server does not delay `lost`. `Lease.lost.is_set()`, `held` and
`remaining()` also read the clock themselves, so they are right the moment a
paused process runs again.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import _common as common
from . import _keeper, _version
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
from ._session import Session

# While a batch of extends is in flight, the watchdog looks at its leases'
# deadlines (and at leases added meanwhile) at least this often.
_WATCH_SLICE_S = 0.05
# The longest the watchdog's connect and handshake may take.
_CONNECT_LIMIT_S = 2.0
# Below this, the watchdog does not try to connect (it tries again later).
_SHORTEST_CONNECT_S = 0.005


class _Dedicated:
    """A client over a pool of one connection of its own, retries off."""

    def __init__(self, locks: Locks, read_timeout: float | None) -> None:
        kwargs = common.dedicated_pool_kwargs(locks.client, locks.family, read_timeout)
        self.pool = locks.family.module.ConnectionPool(**kwargs)
        self.client = locks.family.module.Redis(connection_pool=self.pool)

    def close(self) -> None:
        """Closes the connection: a waiter leaves the server's queue with it."""
        self.pool.disconnect()


class _Link:
    """The watchdog's connection to the server: one for all the leases of a
    `Locks`, opened when first needed with every wait bounded (the shortest
    interval of the leases then due, at most _CONNECT_LIMIT_S), and read only
    when a reply is there, so that it never blocks past a deadline."""

    def __init__(self, locks: Locks) -> None:
        self.locks = locks
        self.connection: Any = None

    def send(self, commands: list[tuple[object, ...]], limit: float) -> None:
        """Sends `commands` in one write, opening the connection first if it is
        not open, with `limit` seconds (at most _CONNECT_LIMIT_S) for that."""
        if self.connection is None:
            if limit < _SHORTEST_CONNECT_S:
                raise TimeoutError("no time left to connect before a lease's deadline")
            limit = min(limit, _CONNECT_LIMIT_S)
            kwargs = common.dedicated_pool_kwargs(self.locks.client, self.locks.family, limit)
            connection_class = kwargs.pop("connection_class")
            kwargs.pop("max_connections")
            kwargs["socket_connect_timeout"] = limit
            self.connection = connection_class(**kwargs)
        packed = self.connection.pack_commands(commands)
        self.connection.send_packed_command(packed, check_health=False)

    def replies(self, count: int, until: float) -> list[object]:
        """Up to `count` replies, those that come before `until` (an error reply
        as this package's exception). A connection error is raised."""
        replies: list[object] = []
        while len(replies) < count:
            left = until - common.now()
            if left <= 0 or not self.connection.can_read(timeout=left):
                break
            try:
                replies.append(self.connection.read_response())
            except self.locks.family.response_error as error:
                replies.append(common.lock_error(error))
        return replies

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.disconnect()


class _Watchdog:
    """The thread that keeps every session and lease of one `Locks` (see the
    module's doc), and grants the sessions' leases.

    `lock` guards every lease's and session's clock and state and what is
    kept; the thread holds it only between network calls, never during one.
    """

    def __init__(self, locks: Locks) -> None:
        self.locks = locks
        self.lock = threading.RLock()
        self._wake = threading.Condition(self.lock)
        self._renewing = _keeper.Renewing()
        self._granting = threading.Lock()  # one LOCK.LEASE GRANT at a time
        self._running = False
        self.pid = os.getpid()

    def add(self, lease: Lease) -> None:
        with self.lock:
            loss = self._renewing.add(lease)
            self._start()
        if loss is not None:
            lease._mark_lost(loss)

    def remove(self, lease: Lease) -> None:
        with self.lock:
            self._renewing.remove(lease)
            self._wake.notify_all()

    def orphan(self, lease: Lease, release: tuple[object, ...]) -> None:
        """A release of `lease` got no answer: its session sends it again
        with each round until one is answered (`Session.orphan`)."""
        session = lease._attached
        if session is None:
            return  # its own lease: no longer extended, it ends at its ttl
        with self.lock:
            if lease._released:
                return
            session.orphan(lease, release, common.now())
            self._renewing.sessions.add(session)
            self._start()

    def session(self, ttl_ms: int) -> Session | None:
        """The session a hold of `ttl_ms` attaches to, its lease granted now
        if none is usable; None when the server has no `LOCK.LEASE` (in
        `keepalive="auto"`: the holds are extended on their own)."""
        with self.lock:
            session = self._renewing.usable_session(ttl_ms, common.now())
        if session is not None or self.locks._lease_support is False:
            return session
        with self._granting:
            with self.lock:  # another thread may have granted it meanwhile
                session = self._renewing.usable_session(ttl_ms, common.now())
            if session is not None:
                return session
            sent = common.now()
            try:
                lease_id = self.locks.client.execute_command("LOCK.LEASE", "GRANT", ttl_ms)
            except self.locks.family.response_error as error:
                refusal = common.lock_error(error)
                if self.locks._without_leases(refusal):
                    return None
                raise refusal from error
            self.locks._lease_support = True
            session = Session(lease_id, ttl_ms, sent, self.locks.safety_margin)
            with self.lock:
                self._renewing.current[ttl_ms] = session
            return session

    def acquiring(self, session: Session, change: int) -> None:
        """An acquire under `session` starts (+1; the lease is kept alive
        meanwhile) or ends (-1)."""
        with self.lock:
            losses = self._renewing.acquiring(session, change)
            if change > 0:
                self._start()
        self._mark(losses)

    def lease_gone(self, session: Session) -> None:
        """An acquire was answered NOLEASE: the lease is gone on the server."""
        with self.lock:
            session.gone()
            self._wake.notify_all()

    def _start(self) -> None:
        """Under `lock`: runs the thread if it does not run, and wakes it."""
        if not self._running:
            self._running = True
            threading.Thread(target=self._run, name="redis-lock-watchdog", daemon=True).start()
        self._wake.notify_all()

    def _mark(self, losses: list[tuple[common.LeaseFacts, common.Loss]]) -> None:
        for lease, loss in losses:
            lease._mark_lost(loss)

    def _run(self) -> None:
        link = _Link(self.locks)
        batch: _keeper.Batch | None = None
        try:
            while True:
                with self.lock:
                    now = common.now()
                    for lease in self._renewing.past_deadline(now):
                        lease._lost_by_clock()
                    self._mark(self._renewing.expired(now))
                    if self._renewing.idle(now):
                        self._running = False  # decided under the lock: add() starts another
                        return
                    fresh = None
                    if batch is None:
                        rounds = self._renewing.due_rounds(now)
                        due = self._renewing.due(now)
                        if rounds or due:
                            fresh = _keeper.Batch(rounds, due, now)
                    idle = batch is None and fresh is None
                    wake = self._renewing.next_wake(now, extending=idle)
                    deadline = self._renewing.next_wake(now, extending=False)
                    if idle:
                        self._wake.wait(None if math.isinf(wake) else max(wake - now, 0.0))
                        continue
                if fresh is not None:
                    batch = self._send(link, fresh, deadline)
                if batch is not None:
                    batch = self._read(link, batch, min(wake, common.now() + _WATCH_SLICE_S))
        except BaseException:
            with self.lock:  # a bug or an interpreter shutdown: the next lease starts another
                self._running = False
            raise
        finally:
            link.close()

    def _send(self, link: _Link, batch: _keeper.Batch, deadline: float) -> _keeper.Batch | None:
        """Sends the batch in one write; None when that failed (settled). A
        connection to open must be ready before `deadline` (the next loss):
        a handshake with a paused server does not hold `lost` back."""
        batch.sent = common.now()
        try:
            link.send(batch.commands(), min(batch.shortest_interval, deadline - batch.sent))
        except Exception as error:
            link.close()
            batch.fail(error)
            self._settle(batch)
            return None
        batch.give_up_at = batch.sent + batch.patience
        return batch

    def _read(self, link: _Link, batch: _keeper.Batch, until: float) -> _keeper.Batch | None:
        """Settles the replies that come before `until`; the batch while some
        are still to come, None once it is settled."""
        try:
            batch.replies += link.replies(batch.missing, until)
        except Exception as error:  # the connection failed: no reply will come
            link.close()
            batch.fail(error)
        if batch.missing and common.now() >= batch.give_up_at:
            link.close()  # replies that came later would be read as the next batch's
            batch.fail(TimeoutError("no reply to the watchdog's renewal"))
        self._settle(batch)
        return batch if batch.missing else None

    def _settle(self, batch: _keeper.Batch) -> None:
        with self.lock:
            self._mark(batch.settle(common.now()))


class Locks:
    """Fenced locks on one server, through `client` (redis.Redis or valkey.Valkey).

    `safety_margin` is the fraction of the ttl by which `Lease.lost` is set
    before the client's deadline (default 0.1). One watchdog thread, with one
    connection of its own, keeps all the leases of a `Locks`.

    `keepalive` says how: `"session"`, one server lease (`LOCK.LEASE`) per
    ttl for every hold taken through this `Locks`, kept alive with one
    `KEEPALIVE` every ttl/3 whatever their number (a `Session`); `"extend"`,
    each hold extended on its own (`LOCK.EXTEND` every ttl/3: the per-lock
    mode, for servers without `LOCK.LEASE`); `"auto"` (default), sessions
    when the server has `LOCK.LEASE` (the first grant tells), else extends.
    """

    def __init__(
        self,
        client: Any,
        *,
        safety_margin: float | None = None,
        keepalive: common.Keepalive = "auto",
    ) -> None:
        self.client = client
        self.family = common.family_of(client)
        if self.family.asyncio:
            raise TypeError("an asyncio client: use redis_lock_client.asyncio.Locks")
        common.dedicated_pool_kwargs(client, self.family, None)
        self.safety_margin = common.check_margin(safety_margin)
        self.keepalive = common.check_keepalive(keepalive)
        # Whether the server has LOCK.LEASE: None until the first grant tells.
        self._lease_support: bool | None = None if self.keepalive != "extend" else False
        self._watchdog_of_process = _Watchdog(self)
        # Whether the server's module passed the version check (asked once).
        self._module_checked = False
        self._module_checking = threading.Lock()

    def _check_module(self) -> None:
        """Before the first command: `MODULE LIST`, on a connection of its own
        bounded by `MODULE_CHECK_TIMEOUT` (the caller's client may have no
        timeout), and `ModuleVersionError` when the server's `lock` module is
        older than this package needs or not loaded. An error reply (a user
        whose ACL refuses `MODULE LIST`, a proxy that does not pass it on)
        cannot tell, and lets the commands through. A connection error is
        raised, and the next command checks again."""
        if self._module_checked:
            return
        with self._module_checking:
            if self._module_checked:
                return
            dedicated = _Dedicated(self, _version.MODULE_CHECK_TIMEOUT)
            try:
                reply = dedicated.client.execute_command("MODULE", "LIST")
            except self.family.response_error:
                reply = None
            finally:
                dedicated.close()
            _version.check(reply)
            self._module_checked = True

    def _without_leases(self, refusal: LockError) -> bool:
        """Whether a refused `LOCK.LEASE GRANT` means "no sessions here" (in
        `keepalive="auto"`: the holds are then extended on their own)."""
        if self.keepalive == "auto" and common.no_lease_command(refusal):
            self._lease_support = False
            return True
        return False

    @property
    def _watchdog(self) -> _Watchdog:
        """This process's watchdog: a forked child starts its own (the parent's
        thread does not exist there, and its lock may have been held)."""
        if self._watchdog_of_process.pid != os.getpid():
            self._watchdog_of_process = _Watchdog(self)
        return self._watchdog_of_process

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
        sync: ReplicaSync | None = None,
    ) -> Lease | None:
        """The lease on `key` for `ttl` seconds, or None when another holds it.

        With `wait` (seconds), waits in the server's queue on a connection of
        its own, and returns None when the wait runs out. With `session`, the
        server also releases the lock when that connection closes (the lease
        keeps it open). With `watchdog` (default), the `Locks`' watchdog
        extends the lease every ttl/3 until `release()`. `owner` is a public
        label (1 to 128 bytes) that `LOCK.INFO`, `LOCK.QUEUE` and
        `LOCK.OBSERVE` show.

        With `shared`, a read lease (`LOCK.ACQUIRE … SHARED`): granted beside
        other readers, each with its own token, lease and fence; refused while
        a writer holds the key or anyone waits for it. Its `guard()` runs
        read-only commands only.

        With `sync` (`ReplicaSync(replicas, timeout)`), the grant is answered
        only once that many replicas hold it (`SYNC`), on a connection of its
        own; when fewer did within the timeout, the server undoes it and this
        raises `NotReplicated` (nothing is held). The lease's extends (the
        watchdog's and `extend()`) then carry the same `SYNC`. The timeout
        must be shorter than the ttl less the safety margin.

        Whatever interrupts it (a connection error, an exception, a signal)
        after the server may have granted the lock, it releases the token
        before raising: a grant never outlives the call without its lease.
        """
        request = common.Acquire.of(key, ttl, wait, session, owner, shared=shared, sync=sync)
        return self._acquire(request, watchdog)

    def _acquire(self, request: common.Acquire, watchdog: bool) -> Lease | None:
        common.check_sync_fits(request.sync, request.ttl_ms, self.safety_margin)
        self._check_module()
        if not request.attaches(watchdog) or self._lease_support is False:
            return self._acquire_under(request, watchdog, None)
        started = common.now()
        for attempt in (1, 2):
            session = self._watchdog.session(request.ttl_ms)
            try:
                return self._acquire_under(request, watchdog, session)
            except common.LeaseGone as gone:
                if attempt == 2:
                    raise gone.error from None
                retry = request.waited(common.now() - started)  # NOLEASE: a new lease, once
                if retry is None:
                    return None  # the wait ran out
                request = retry
        raise AssertionError("unreachable")

    def _acquire_under(
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
                reply = self._call(self.client if dedicated is None else dedicated.client, *args)
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
                dedicated.close()
                dedicated = None
            if fence is None:
                return None
            clock = common.LeaseClock(sent, request.ttl_ms, self.safety_margin)
            lease = Lease(self, request, fence, clock, watchdog, session)
            lease._connection = dedicated
            if request.wait_ms is not None and session is None:
                lease._confirm_after_wait()  # an attached hold lives as its session's lease
            lease._start()
            return lease
        except BaseException:
            # The reply may be lost after a grant, or the grant was not handed
            # over (the confirming extend failed, an interrupt): give back what
            # this token may hold.
            if dedicated is not None:
                dedicated.close()
            if not undone:
                self._release_quietly(request)
            raise
        finally:
            if session is not None:
                self._watchdog.acquiring(session, -1)

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
    ) -> contextlib.AbstractContextManager[Lease]:
        """`acquire` as a context manager: yields the lease, releases it on exit.

        Raises `NotAcquired` when the lock is held (or the wait ran out),
        `NotReplicated` when a `sync` grant was not acknowledged by enough
        replicas (nothing is held), and `Lost` on exit when the lease was lost
        before the block ended (also when the server went away: the
        release's error is its `__cause__`).
        """
        request = common.Acquire.of(key, ttl, wait, session, owner, shared=shared, sync=sync)
        return _holding(
            lambda: self._acquire(request, watchdog), common.not_acquired_message(key, wait)
        )

    def acquire_many(
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
        return self._acquire(request, watchdog)

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
    ) -> contextlib.AbstractContextManager[Lease]:
        """`acquire_many` as a context manager: yields the lease on every key,
        releases them all on exit; `NotAcquired` when any key is held (or the
        wait ran out), `Lost` on exit when the lease was lost meanwhile."""
        request = common.Acquire.many(keys, ttl, wait, session, owner, shared=shared, sync=sync)
        message = common.not_acquired_many_message(request.keys or (request.key,), wait)
        return _holding(lambda: self._acquire(request, watchdog), message)

    def semaphore(self, key: common.Key, limit: int) -> Semaphore:
        """The semaphore `key` with `limit` permits: `Semaphore(self, key, limit)`."""
        return Semaphore(self, key, limit)

    def info(self, key: common.Key) -> dict[str, int] | None:
        """`LOCK.INFO`: None when free, else its numbers: fence, ttl, deadline,
        granted, extends, waiters, holders (and `lease`, the number of an
        attached hold's session lease)."""
        return common.info_of(self._call(self.client, "LOCK.INFO", common.check_key(key)))

    def revoke(self, key: common.Key, reason: str | bytes | None = None) -> int:
        """Takes `key` back from whoever holds it (`LOCK.REVOKE key [REASON
        reason]`), an operator's tool: every hold of the key ends as a
        release would, its waiters are served, and the old holders are told
        `REVOKED <reason>` (their `lost_reason` is `LostReason.REVOKED`).
        Returns the number of holds ended (0 when free). `reason` is 1 to 128
        bytes. The server's user needs `@dangerous` (a worker with
        `+@lock -@dangerous` gets `ServerError` with code `NOPERM`)."""
        args: list[object] = ["LOCK.REVOKE", common.check_key(key)]
        checked = common.check_reason(reason)
        if checked is not None:
            args += ["REASON", checked]
        return int(self._call(self.client, *args))

    def _call(self, client: Any, *args: object) -> Any:
        self._check_module()
        try:
            return client.execute_command(*args)
        except self.family.response_error as error:
            raise common.lock_error(error) from error

    def _call_synced(self, sync: ReplicaSync | None, *args: object) -> Any:
        """`args` (which carry `sync`'s `SYNC`, if any): with a sync, on a
        connection of its own, retries off, that reads for longer than the
        sync waits (the request blocks until the replicas acknowledge, and a
        retried one would run twice)."""
        if sync is None:
            return self._call(self.client, *args)
        dedicated = _Dedicated(self, common.sync_read_timeout(sync))
        try:
            return self._call(dedicated.client, *args)
        finally:
            dedicated.close()

    def _release_quietly(self, request: common.Acquire) -> None:
        with contextlib.suppress(Exception):  # else it ends at its ttl
            self.client.execute_command(request.commands.release, *request.target, request.token)


@contextlib.contextmanager
def _holding(acquire: Callable[[], Lease | None], not_acquired: str) -> Iterator[Lease]:
    """The lease `acquire` gives, held for a block: released on exit; `NotAcquired`
    (with that message) without one, `Lost` on exit when it was lost meanwhile,
    its cause the release's error when that failed too."""
    lease = acquire()
    if lease is None:
        raise NotAcquired(not_acquired)
    try:
        yield lease
    except BaseException:
        with contextlib.suppress(Exception):
            lease.release()  # the block's own exception matters more
        raise
    try:
        released = lease.released or lease.release()  # the block may have released it
    except Exception as error:
        if lease.lost.is_set():  # the server went away, and the lease with it
            raise Lost(lease.lost_reason or LostReason.EXPIRED, common.LOST_IN_BLOCK) from error
        raise
    if lease.lost.is_set() or not released:
        raise Lost(lease.lost_reason or LostReason.REFUSED, common.LOST_IN_BLOCK)


class _LostEvent(threading.Event):
    """`Lease.lost`: a threading.Event that also asks the lease's clock, so it is
    set the moment the deadline less the margin has passed, whichever thread
    asks first (after a pause, before the watchdog runs again)."""

    def __init__(self, lease: Lease) -> None:
        super().__init__()
        self._lease = lease

    def is_set(self) -> bool:
        return super().is_set() or self._lease._lost_by_clock()

    def wait(self, timeout: float | None = None) -> bool:
        return self.is_set() or super().wait(timeout)


class Lease(common.LeaseFacts):
    """A held lock, or a semaphore's permits, or a set of locks (`keys`,
    from `acquire_many`): `key` (a set's first), `token`, `fence`,
    `valid_until`, `held`, `remaining()`, `shared` (a read lease), `count`
    (permits; None for a lock); `lost` is set when it is gone or about to be
    (see `lost_reason`).

    In a forked child the lease is the parent's: `held` is False, `lost` is
    set with `LostReason.FORKED`, `release()` returns False without sending,
    and `extend()` and `guard()` raise `Lost`.
    """

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
        self._watchdog = locks._watchdog
        self._lock = self._watchdog.lock
        self.lost: threading.Event = _LostEvent(self)

    def extend(self, ttl: float | None = None, *, sync: ReplicaSync | None = None) -> None:
        """Sets the lease to end `ttl` seconds from now (default: the current ttl).

        Raises `Lost` when the token no longer holds the lock (the key was
        deleted, expired, taken, or overwritten with another type), and
        `LimitReached` when the server's hold policy refuses (the lease then
        still holds until its current deadline).

        `sync` (default: the lease's own, from the acquire) waits for that
        many replicas (`SYNC`). `NotReplicated` when fewer acknowledged it in
        time: the extension stands on the master, but the lease's deadline
        stays where the last replicated extend put it (a failover to a
        replica would keep only that one); the lease is not lost.

        A hold attached to a session lives as long as the session's lease,
        which the watchdog keeps alive: its extend only checks that it still
        holds (`Lost` when not: `REFUSED`, or `REVOKED` with the reason) and
        moves nothing; `ttl` is not used.
        """
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
            reply = self._locks._call_synced(synced, *args)
        except NotReplicated:
            with self._lock:
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
            with self._lock:
                self._clock.extended(sent, ttl_ms)

    def release(self) -> bool:
        """Stops the watchdog and releases: True if released, False if it was
        already gone (expired, deleted, taken, overwritten with another type,
        or released before).

        A release that failed on the network raises the client's error and
        can be called again: it sends again. A hold attached to a session is
        no longer counted as the session's, and the watchdog also sends its
        release again with each of the session's rounds until one is
        answered (`released` is then True), or until the session's lease
        ends (and the hold with it): it is not left on the server for as
        long as the session's other holds keep the lease alive."""
        if self._forked:
            return False  # the parent's lease
        with self._lock:
            if self._released:
                return False
            self._stopped = True
            self._watchdog.remove(self)
        command = (self._commands.release, *self._target, self.token)
        try:
            reply = self._locks._call(self._locks.client, *command)
        except ServerError as error:
            if error.code != "WRONGTYPE":
                raise
            reply = 0  # the key holds another type now: the lease is gone
        except LockError:
            raise
        except Exception:
            self._watchdog.orphan(self, command)
            raise
        finally:
            if self._connection is not None:
                self._connection.close()  # the server releases a session lock with it
        self._released = True
        return self._released_all(reply)

    def guard(self, *command: object, sync: ReplicaSync | None = None) -> Any:
        """Runs `command` only while this lease holds the lock (`LOCK.GUARD`), and
        returns its reply. Raises `Lost` (and sets `lost`) when it does not hold.
        A read lease runs read-only commands only (others: `ServerError`); a
        semaphore's permits guard nothing (`TypeError`).

        With `sync` (never the lease's own: a guarded write is your data),
        the reply comes once that many replicas hold the command's effect;
        `NotReplicated` when fewer did in time: the command ran on the master
        (its reply is lost) and the lease is kept."""
        guard = common.check_command(self._commands, command)
        if self._forked:
            raise common.forked_error()
        synced = common.sync_of(sync)
        args = [guard, self.key, self.token, *common.sync_args(synced), *command]
        try:
            return self._locks._call_synced(synced, *args)
        except Lost as lost:
            self._mark_lost(common.Loss.of(lost))
            raise

    def _confirm_after_wait(self) -> None:
        """After a wait, the grant's moment is unknown: extend once, from a known send."""
        try:
            self.extend()
        except LimitReached:
            self._clock.limit_reached = True
        except Lost:
            pass  # `lost` is set: the caller sees it
        except NotReplicated as error:  # the caller gives the grant back
            raise common.confirm_not_replicated(error) from error

    def _start(self) -> None:
        if not self._stopped:
            self._watchdog.add(self)

    def _mark_lost(self, loss: common.Loss) -> None:
        with self._lock:
            if self._record_loss(loss):
                self._watchdog.remove(self)
                self.lost.set()


class Election(common.ElectionFacts):
    """Leader election on the lock `key`: who holds it leads.

    Candidates wait in the server's queue (`campaign`) and lead with a
    `Lease` of `ttl` seconds that its watchdog extends; `lease.release()`
    resigns and hands the lock to the next candidate. Followers iterate over
    `observe()`. With `sync`, a candidate leads only once that many replicas
    hold its grant, and its lease's extends carry the same `SYNC` (see
    `Locks.acquire`). The recipe and its failure cases:
    docs/leader-election.md.
    """

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
        sync: ReplicaSync | None = None,
    ) -> Lease | None:
        """`count` permits for `ttl` seconds, or None when fewer are free (or
        the `wait` ran out). The options are those of `Locks.acquire`."""
        request = self._request(ttl, count, wait, session, owner, sync)
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
        sync: ReplicaSync | None = None,
    ) -> contextlib.AbstractContextManager[Lease]:
        """`acquire` as a context manager: yields the permits' lease, releases
        them on exit. Raises `NotAcquired` when they are not free (or the wait
        ran out), `NotReplicated` as `Locks.lock`, and `Lost` on exit when
        they were lost before the block ended.
        """
        request = self._request(ttl, count, wait, session, owner, sync)
        return _holding(
            lambda: self.locks._acquire(request, watchdog), self._not_acquired(request, wait)
        )

    def info(self) -> dict[str, int] | None:
        """`SEM.INFO`: None when nobody holds or waits, else limit, used,
        holders, waiters, fence, ttl, deadline."""
        reply = self.locks._call(self.locks.client, "SEM.INFO", self.key)
        return common.info_of(reply, "SEM.INFO")
