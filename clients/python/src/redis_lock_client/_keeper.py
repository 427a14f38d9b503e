"""What a keeper (the sync thread, the asyncio task of one `Locks`) keeps
and sends, without the I/O: `Renewing` decides what is due and when to
wake, and `Batch` is one round trip, sessions' rounds and leases' extends
together, read back into losses.
"""

from __future__ import annotations

import math

from ._common import (
    OVERWRITTEN,
    REFUSED,
    LeaseFacts,
    Loss,
    Renewal,
    ReplicaSync,
    renewal_of,
    sync_args,
)
from ._errors import Lost, NotReplicated
from ._session import Session, SessionRound


class Renewing:
    """What a keeper keeps, and what it does next: which to renew, which are
    past their deadline, when to wake. One per `Locks` (per process); the
    sync and asyncio keepers add the I/O (and the sync one a lock around it).

    It keeps two kinds: the sessions (one server lease per ttl, for every
    hold attached to it: one keepalive a round, whatever their number), and
    the leases extended on their own (`leases`: one extend each, the
    per-lock mode).
    """

    def __init__(self) -> None:
        self.leases: set[LeaseFacts] = set()
        self.sessions: set[Session] = set()
        # The session a new hold of each ttl (ms) attaches to, while usable.
        self.current: dict[int, Session] = {}

    def idle(self, now: float) -> bool:
        """Nothing to keep: the keeper may end (a new hold starts another).
        Drops the sessions no longer in use, and those no new hold may use
        (a current one stays usable until its deadline less the margin)."""
        self.sessions = {session for session in self.sessions if session.in_use}
        self.current = {ttl: s for ttl, s in self.current.items() if s.usable(now)}
        return not self.leases and not self.sessions

    def add(self, lease: LeaseFacts) -> Loss | None:
        """Starts keeping a new lease; its loss if its session ended meanwhile."""
        session = lease._attached
        if session is None:
            self.leases.add(lease)
            return None
        self.sessions.add(session)
        return session.attach(lease)

    def remove(self, lease: LeaseFacts) -> None:
        if lease._attached is None:
            self.leases.discard(lease)
        else:
            lease._attached.detach(lease)

    def usable_session(self, ttl_ms: int, at: float) -> Session | None:
        session = self.current.get(ttl_ms)
        return session if session is not None and session.usable(at) else None

    def acquiring(self, session: Session, change: int) -> list[tuple[LeaseFacts, Loss]]:
        """Counts an acquire in flight under `session` (+1) or done (-1): the
        session is kept alive meanwhile. The losses if it was gone and has
        now nothing left to ask."""
        if change > 0:
            self.sessions.add(session)
        return session.acquiring(change)

    def past_deadline(self, now: float) -> list[LeaseFacts]:
        return [
            lease for lease in self.leases if now >= lease._clock.lost_at and not lease._stopped
        ]

    def expired(self, now: float) -> list[tuple[LeaseFacts, Loss]]:
        """The holds of every session whose deadline less the margin came."""
        return [loss for session in self.sessions for loss in session.expire(now)]

    def due_rounds(self, now: float) -> list[SessionRound]:
        """The rounds of the sessions due now (their keepalives, their questions)."""
        return [session.round() for session in self.sessions if session.due(now)]

    def due(self, now: float) -> list[tuple[LeaseFacts, int]]:
        """The leases to extend now, each with the ttl to extend it by; those
        acquired with `sync` last (see `commands`)."""
        due = [(lease, lease._clock.ttl_ms) for lease in self.leases if lease._extend_due(now)]
        due.sort(key=lambda item: item[0]._sync is not None)  # stable
        return due

    def next_wake(self, now: float, *, extending: bool) -> float:
        """The next deadline or (when `extending`) next renewal of anything kept."""
        wake = math.inf
        for session in self.sessions:
            wake = min(wake, session.next_wake(now, sending=extending))
        for lease in self.leases:
            if lease._stopped:
                continue  # being released: leaves the set at once
            wake = min(wake, lease._clock.lost_at)
            if extending and lease._extending and not lease._clock.limit_reached:
                wake = min(wake, lease._clock.next_extend_at)
        return wake

    @staticmethod
    def commands(batch: list[tuple[LeaseFacts, int]]) -> list[tuple[object, ...]]:
        """One extend a lease, in the batch's order. The synced leases come
        last, and only the last extend carries `SYNC`: a connection's writes
        replicate in order, so the offset it waits for covers every extend
        before it, and one wait serves the batch (a wait each would add up:
        Redis 7.0's replicas acknowledge once a second). It asks for the most
        replicas any of them wants, within the shortest of their timeouts;
        `renewals` reads each lease's outcome from its answer."""
        commands: list[tuple[object, ...]] = [
            (lease._commands.extend, *lease._target, lease.token, ttl_ms) for lease, ttl_ms in batch
        ]
        syncs = [lease._sync for lease, _ in batch if lease._sync is not None]
        if syncs:
            barrier = ReplicaSync(
                max(sync.replicas for sync in syncs), min(sync.timeout for sync in syncs)
            )
            commands[-1] += tuple(sync_args(barrier))
        return commands

    @staticmethod
    def shortest_interval(batch: list[tuple[LeaseFacts, int]]) -> float:
        """How long the watchdog may wait to connect for a batch."""
        return min(lease._clock.interval for lease, _ in batch)

    @staticmethod
    def patience(batch: list[tuple[LeaseFacts, int]]) -> float:
        """How long to wait for a batch's replies before giving up on its
        connection: the longest interval of its leases (each would be due
        again), or its sync timeout and a second, if longer."""
        waits = [lease._clock.interval for lease, _ in batch]
        waits += [
            lease._sync.timeout_ms / 1000 + 1.0 for lease, _ in batch if lease._sync is not None
        ]
        return max(waits)

    @staticmethod
    def settleable(batch: list[tuple[LeaseFacts, int]], answered: int) -> int:
        """How many of a batch's first `answered` replies can be applied now:
        the leases without `sync` as their replies come, the synced ones (the
        batch's tail) only with the last reply, whose `SYNC` vouches for them."""
        if answered >= len(batch):
            return len(batch)
        return min(answered, sum(1 for lease, _ in batch if lease._sync is None))

    @staticmethod
    def renewals(batch: list[tuple[LeaseFacts, int]], replies: list[object]) -> list[Renewal]:
        """What the first replies of a batch (as many as `settleable` allows)
        mean for their leases: a synced lease's extend counts once the last
        extend's `SYNC` was answered with enough replicas for this lease."""
        last = replies[-1] if replies and len(replies) == len(batch) else None
        renewals = []
        for (lease, _), reply in zip(batch, replies, strict=False):
            renewal = renewal_of(reply)
            if lease._sync is not None and renewal in (Renewal.EXTENDED, Renewal.UNREPLICATED):
                renewal = _vouched(lease._sync, last)
            renewals.append(renewal)
        return renewals

    @staticmethod
    def apply(
        lease: LeaseFacts, renewal: Renewal, reply: object, sent: float, ttl_ms: int, now: float
    ) -> Loss | None:
        """Applies one reply to its lease's clock; the loss to record, if any."""
        if lease._stopped:
            return None  # released or lost meanwhile
        if renewal is Renewal.EXTENDED:
            lease._clock.extended(sent, ttl_ms)
        elif renewal is Renewal.REFUSED:
            return REFUSED
        elif renewal is Renewal.REVOKED and isinstance(reply, Lost):
            return Loss.of(reply)
        elif renewal is Renewal.OVERWRITTEN:
            return OVERWRITTEN
        elif renewal is Renewal.LIMIT:
            lease._clock.limit_reached = True  # it ends at its deadline
        elif renewal is Renewal.UNREPLICATED:
            lease._clock.not_replicated(now)
        else:
            lease._clock.failed(now)
        return None


def _vouched(sync: ReplicaSync, last: object) -> Renewal:
    """A synced lease's extend, by the answer to the batch's last extend (the
    one with `SYNC`): enough replicas acknowledged it for this lease, or not,
    or nothing is known (that extend failed or was refused at once)."""
    if isinstance(last, NotReplicated):
        return Renewal.EXTENDED if last.acked >= sync.replicas else Renewal.UNREPLICATED
    return Renewal.EXTENDED if renewal_of(last) is Renewal.EXTENDED else Renewal.FAILED


class Batch:
    """One round trip of a keeper: the sessions' rounds first (a keepalive
    and an INFO each, and their questions), then the extends of the leases
    kept on their own (the synced ones last: `Renewing.commands`). Replies
    may be read a few at a time (`settle`)."""

    def __init__(
        self, rounds: list[SessionRound], leases: list[tuple[LeaseFacts, int]], sent: float
    ) -> None:
        self.rounds = rounds
        self.leases = leases
        self.sent = sent
        self.replies: list[object] = []
        self._head = sum(len(sent_round.commands) for sent_round in rounds)
        self._rounds_settled = False
        self._leases_settled = 0
        self.give_up_at = sent + self.patience

    def commands(self) -> list[tuple[object, ...]]:
        commands = [command for sent_round in self.rounds for command in sent_round.commands]
        return commands + (Renewing.commands(self.leases) if self.leases else [])

    @property
    def size(self) -> int:
        return self._head + len(self.leases)

    @property
    def missing(self) -> int:
        return self.size - len(self.replies)

    @property
    def shortest_interval(self) -> float:
        """How long the keeper may wait to connect for this batch."""
        intervals = [sent_round.session._clock.interval for sent_round in self.rounds]
        if self.leases:
            intervals.append(Renewing.shortest_interval(self.leases))
        return min(intervals)

    @property
    def patience(self) -> float:
        """How long to wait for the replies before giving up on the
        connection: the longest interval of what it renews (each would be due
        again), or a sync timeout and a second, if longer."""
        waits = [sent_round.session._clock.interval for sent_round in self.rounds]
        if self.leases:
            waits.append(Renewing.patience(self.leases))
        return max(waits)

    def fail(self, error: BaseException) -> None:
        """No more replies will come: each missing one is `error`."""
        self.replies += [error] * self.missing

    def settle(self, now: float) -> list[tuple[LeaseFacts, Loss]]:
        """Applies the replies read so far that can be applied (each once);
        the losses to mark."""
        losses: list[tuple[LeaseFacts, Loss]] = []
        if not self._rounds_settled:
            if len(self.replies) < self._head:
                return losses
            start = 0
            for sent_round in self.rounds:
                end = start + len(sent_round.commands)
                losses += sent_round.session.settle(
                    sent_round, self.replies[start:end], self.sent, now
                )
                start = end
            self._rounds_settled = True
        replies = self.replies[self._head :]
        ready = Renewing.settleable(self.leases, len(replies))
        renewals = Renewing.renewals(self.leases[:ready], replies[:ready])
        settled = list(zip(self.leases, renewals, replies, strict=False))[self._leases_settled :]
        for (lease, ttl_ms), renewal, reply in settled:
            loss = Renewing.apply(lease, renewal, reply, self.sent, ttl_ms, now)
            if loss is not None:
                losses.append((lease, loss))
        self._leases_settled = ready
        return losses
