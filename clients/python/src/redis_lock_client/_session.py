"""The session: one server lease (`LOCK.LEASE`) that every hold of one ttl
taken through a `Locks` attaches to, kept alive with one `KEEPALIVE` every
ttl/3 whatever the number of holds (etcd's `concurrency.Session` is the
model: the locks are small things over it, and none of them renews itself).

Nothing here does I/O: the sync and asyncio keepers (`_keeper.Batch`) send
what `round()` asks, in one round trip with the other renewals, and hand the
replies to `settle()`.

- The first hold of a ttl grants the lease (`LOCK.LEASE GRANT ttl-ms`); each
  hold then carries `LEASE id` and is never extended on its own. Its clock
  is the session's (`held`, `lost`, `remaining()` read it).
- Every ttl/3, while the session has holds or acquires in flight:
  `LOCK.LEASE KEEPALIVE id` and `LOCK.LEASE INFO id`. `1` moves the clock,
  from when it was sent. INFO's `holds` below the number attached means some
  hold was ended one by one (deleted, overwritten, `LOCK.REVOKE key`): the
  next round asks those it may be (`LOCK.EXTEND`, which moves nothing for an
  attached hold) and each one gone is lost, with the server's reason.
- `0` to a KEEPALIVE, or `NOLEASE` to an acquire: the lease is gone on the
  server (revoked, run out, or the server lost it). No hold attaches to it
  any more (the next grants a new lease); each of its holds is asked once,
  and every one is lost: `REVOKED` with the server's reason where it gives
  one (`lease revoked` after `LOCK.LEASE REVOKE`), else `REFUSED`.
- No successful KEEPALIVE until the deadline less the safety margin: every
  hold is lost at once (`EXPIRED`); the next hold grants a new lease.

- A release that got no answer (the connection failed: the hold may still
  be on the server, attached to the lease) leaves an orphan: no longer a
  hold of the session, but its release is sent again with each round
  (after the keepalive and INFO, which count it as still there) until one
  is answered, or until the session ends (its lease then ends the hold on
  the server). Orphans alone are not kept alive: when nothing else uses
  the session, its rounds carry only their releases (every `retry_delay`)
  and the lease runs out at its deadline, taking them with it.

An idle session (no hold, no acquire in flight) is not kept alive: a hold
taken before its deadline less the margin attaches to it (and a keepalive
is sent at once, being due), a later one grants a new lease.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._common import (
    LEASE_GONE,
    OVERWRITTEN,
    REFUSED,
    LeaseClock,
    LeaseFacts,
    Loss,
    Renewal,
    fields_of,
    now,
    renewal_of,
)
from ._errors import LockError, Lost, LostReason

# LOCK.LEASE INFO lists the keys of its holds up to this many.
INFO_KEYS = 100


class SessionClock(LeaseClock):
    """A session's clock: moved by its keepalives, read by all its holds."""

    def expiry_message(self) -> str:
        return (
            "the session's lease is about to end and no keepalive succeeded "
            "(server down or unreachable?)"
        )


@dataclass
class SessionRound:
    """What one round of a session sent, to read its replies back: the
    keepalive and the lease's INFO (unless the lease is gone), then an
    extend for each hold asked about."""

    session: Session
    keepalive: bool
    asked: list[LeaseFacts]
    members: frozenset[LeaseFacts]  # the holds attached when it was sent
    released: list[LeaseFacts] = field(default_factory=list)  # orphans sent again
    commands: list[tuple[object, ...]] = field(default_factory=list)


class Session:
    """One lease on the server, for every hold of one ttl taken through a
    `Locks` (see the module's doc). Its public face: `ttl`, `valid_until`,
    `alive`, `holds` and `number` (the lease's public number, as `LOCK.INFO`
    and `LOCK.LEASE INFO` show it; None until the first keepalive).

    The lease's id is a secret (whoever knows it keeps the holds alive or
    revokes them): it is sent, never shown."""

    def __init__(self, lease_id: object, ttl_ms: int, sent: float, margin: float | None) -> None:
        self._lease_id = lease_id
        self.ttl_ms = ttl_ms
        self._clock = SessionClock(sent, ttl_ms, margin)
        self._holds: set[LeaseFacts] = set()
        self._acquiring = 0  # acquires in flight that carry this lease
        self._gone = False  # the server said the lease is gone: nothing attaches
        self._ended = False  # gone and settled, or lost by the clock
        self._to_ask: set[LeaseFacts] = set()  # holds the next round asks about
        # Released with no answer: their release commands, sent each round.
        self._orphans: dict[LeaseFacts, tuple[object, ...]] = {}
        self._orphans_due_at = 0.0  # when only orphans are left: their next round
        self.number: int | None = None

    def __repr__(self) -> str:
        state = "alive" if self.alive else "ended"
        return f"<Session lease {self.number} ttl {self.ttl} s, {len(self._holds)} holds, {state}>"

    @property
    def ttl(self) -> float:
        """The lease's ttl, seconds: a third of it between keepalives."""
        return self.ttl_ms / 1000

    @property
    def valid_until(self) -> float:
        """The lease's end by `time.monotonic()`, never later than the server's."""
        return self._clock.valid_until

    @property
    def alive(self) -> bool:
        """Neither gone on the server nor past its deadline less the margin."""
        return not self._gone and not self._ended and self._clock.lost_at > now()

    @property
    def holds(self) -> int:
        """The holds attached to it now."""
        return len(self._holds)

    # What `Locks` asks.

    def usable(self, at: float) -> bool:
        """Whether a new hold may attach to it."""
        return not self._gone and not self._ended and at < self._clock.lost_at

    def lease_args(self) -> list[object]:
        return ["LEASE", self._lease_id]

    def attach(self, hold: LeaseFacts) -> Loss | None:
        """Adds a hold granted under this lease; its loss if the session has
        ended meanwhile (the hold is asked about if the lease is gone)."""
        if self._ended:
            return Loss(self._clock.expiry_reason(), self._clock.expiry_message())
        self._holds.add(hold)
        if self._gone:
            self._to_ask.add(hold)
        return None

    def detach(self, hold: LeaseFacts) -> None:
        self._holds.discard(hold)
        self._to_ask.discard(hold)
        self._orphans.pop(hold, None)

    def orphan(self, hold: LeaseFacts, release: tuple[object, ...], at: float) -> None:
        """A hold whose release got no answer: detached, and its `release`
        command sent again with each round until one is answered (see the
        module's doc). Nothing to do once the session has ended or its
        lease is gone (the hold went with it)."""
        self.detach(hold)
        if self._gone or self._ended:
            return
        self._orphans[hold] = release
        self._orphans_due_at = min(self._orphans_due_at, at) if len(self._orphans) > 1 else at

    @property
    def orphans(self) -> int:
        """The releases still to be answered."""
        return len(self._orphans)

    def acquiring(self, change: int) -> list[tuple[LeaseFacts, Loss]]:
        """An acquire carrying the lease starts (+1) or ends (-1); the losses
        when that was all a gone lease waited for."""
        self._acquiring += change
        return self._settle_gone() if self._gone and change < 0 else []

    def gone(self) -> None:
        """The server said the lease is gone (KEEPALIVE 0, NOLEASE): nothing
        attaches any more, and each hold is asked about in the next round
        (the orphans went with the lease)."""
        if not self._gone:
            self._gone = True
            self._orphans.clear()
            self._to_ask = set(self._holds)
            self._settle_gone()

    # What the keeper asks.

    @property
    def in_use(self) -> bool:
        """It has holds, or acquires in flight, or questions to ask, or
        releases to send again."""
        return not self._ended and bool(
            self._holds or self._acquiring or self._to_ask or self._orphans
        )

    @property
    def _kept_alive(self) -> bool:
        """Whether its rounds carry a keepalive: not for orphans alone."""
        return not self._gone and bool(self._holds or self._acquiring)

    def due(self, at: float) -> bool:
        if not self.in_use:
            return False
        if self._to_ask or (self._kept_alive and at >= self._clock.next_extend_at):
            return True
        return bool(self._orphans) and at >= self._orphans_due_at

    def next_wake(self, at: float, *, sending: bool) -> float:
        """Its next deadline, or (when `sending`) its next round."""
        if not self.in_use:
            return math.inf
        wake = self._clock.lost_at
        if sending:
            if self._to_ask:
                wake = at
            elif self._kept_alive:
                wake = min(wake, self._clock.next_extend_at)
            if self._orphans:
                wake = min(wake, self._orphans_due_at)
        return wake

    def round(self) -> SessionRound:
        """The commands of its next round; what it asked is cleared."""
        asked = list(self._to_ask)
        self._to_ask.clear()
        released = list(self._orphans)
        sent = SessionRound(self, self._kept_alive, asked, frozenset(self._holds), released)
        if sent.keepalive:
            sent.commands += [
                ("LOCK.LEASE", "KEEPALIVE", self._lease_id),
                ("LOCK.LEASE", "INFO", self._lease_id),
            ]
        sent.commands += [(h._commands.extend, *h._target, h.token, self.ttl_ms) for h in asked]
        sent.commands += [self._orphans[hold] for hold in released]
        # Not again before this round is answered, or a pause after a failure.
        self._orphans_due_at = now() + self._clock.retry_delay
        return sent

    def settle(
        self, sent: SessionRound, replies: list[object], sent_at: float, at: float
    ) -> list[tuple[LeaseFacts, Loss]]:
        """Applies a round's replies (an exception for each that failed);
        the losses to mark."""
        if sent.keepalive:
            self._keepalive(sent, replies[0], replies[1], sent_at, at)
            replies = replies[2:]
        losses = []
        for hold, reply in zip(sent.asked, replies, strict=False):
            if hold not in self._holds:
                continue  # released or lost meanwhile
            loss = self._answer(reply)
            if loss is not None:
                losses.append((hold, loss))
                self.detach(hold)
        for hold, reply in zip(sent.released, replies[len(sent.asked) :], strict=False):
            if hold in self._orphans and _answered(reply):
                del self._orphans[hold]  # released, or already gone
                hold._released = True
        if self._gone:
            losses += self._settle_gone()
        return losses

    def expire(self, at: float) -> list[tuple[LeaseFacts, Loss]]:
        """Every hold, lost, once the deadline less the margin has come (no
        keepalive succeeded, or the lease is gone and its holds did not
        answer): the session ends."""
        if self._ended or not self.in_use or at < self._clock.lost_at:
            return []
        self._ended = True
        loss = LEASE_GONE if self._gone else Loss(LostReason.EXPIRED, self._clock.expiry_message())
        losses = [(hold, loss) for hold in self._holds]
        self._holds.clear()
        self._to_ask.clear()
        self._orphans.clear()  # the lease ends them on the server
        return losses

    def _keepalive(
        self, sent: SessionRound, alive: object, info: object, sent_at: float, at: float
    ) -> None:
        renewal = renewal_of(alive)
        if renewal is Renewal.REFUSED:
            self.gone()
        elif renewal is not Renewal.EXTENDED:
            self._clock.failed(at)  # tried again until the deadline
        elif info is None:
            self._clock.extended(sent_at, self.ttl_ms)
            self.gone()  # revoked between the two
        else:
            self._clock.extended(sent_at, self.ttl_ms)
            if not isinstance(info, BaseException):
                self._count(sent.members & self._holds, info)

    def _count(self, members: frozenset[LeaseFacts], info: object) -> None:
        """Compares the server's count of holds with ours (`members`: those
        attached when the round was sent and still now): fewer there means
        some were ended one by one (deleted, overwritten, revoked); asks
        about those whose key the server no longer lists (all of them when
        it lists them all, or only some of its keys)."""
        try:
            fields = fields_of("LOCK.LEASE INFO", info) or {}
        except LockError:
            return  # not a map: nothing to compare
        number, holds, keys = fields.get("lease"), fields.get("holds"), fields.get("keys")
        if isinstance(number, int | bytes | str):
            self.number = int(number)
        # The server counts a hold per key: a set (`acquire_many`) is as
        # many holds as it has keys. An orphan is still there when INFO
        # runs (its release is sent after it).
        ours = sum(len(member.keys) for member in members)
        ours += sum(len(hold.keys) for hold in self._orphans)
        if not isinstance(holds, int | bytes | str) or int(holds) >= ours:
            return
        listed = {_bytes(key) for key in keys} if isinstance(keys, list | tuple) else set()
        suspects = set(members)
        if int(holds) <= INFO_KEYS:
            suspects = {
                hold for hold in suspects if any(_bytes(key) not in listed for key in hold.keys)
            }
        self._to_ask |= suspects or members

    def _answer(self, reply: object) -> Loss | None:
        """The loss a hold's extend (asked about) says, or None: it holds."""
        renewal = renewal_of(reply)
        if renewal is Renewal.REVOKED and isinstance(reply, Lost):
            return Loss.of(reply)
        if renewal is Renewal.OVERWRITTEN:
            return OVERWRITTEN
        if self._gone:
            return LEASE_GONE  # 0, an error, or held without the lease: lost with it
        return REFUSED if renewal is Renewal.REFUSED else None

    def _settle_gone(self) -> list[tuple[LeaseFacts, Loss]]:
        """A gone lease ends once nothing is left to ask (acquires still in
        flight will get NOLEASE, or attach and be asked)."""
        if self._to_ask or self._acquiring or self._ended:
            return []
        self._ended = True
        losses = [(hold, LEASE_GONE) for hold in self._holds]
        self._holds.clear()
        return losses


def _answered(reply: object) -> bool:
    """Whether a release sent again got the server's answer (any reply, an
    error reply too: `WRONGTYPE` says the hold is gone), not a connection
    failure."""
    return isinstance(reply, LockError) or not isinstance(reply, BaseException)


def _bytes(key: object) -> bytes:
    if isinstance(key, str):
        return key.encode()
    return key if isinstance(key, bytes) else str(key).encode()
