"""The package's exceptions: one per thing a caller decides on.

Connection problems are not wrapped: the client's own ConnectionError and
TimeoutError (redis-py's or valkey-py's) pass through, since the caller
cannot tell from them whether the command ran.
"""

from __future__ import annotations

import enum


class LockError(Exception):
    """Base class of every error this package raises for a lock reply."""


class NotAcquired(LockError):
    """`Locks.lock()` could not get the lock: it is held, or the wait ran out."""


class LostReason(str, enum.Enum):
    """Why a lease was lost (`Lease.lost_reason`)."""

    REFUSED = "refused"
    """The server said the token no longer holds the lock: released, expired,
    deleted or taken (`LOCK.EXTEND` replied 0, or `LOCK.GUARD` replied `LOST`)."""
    EXPIRED = "expired"
    """The deadline, less the safety margin, passed without a successful extend
    (server down, paused or unreachable)."""
    LIMIT = "limit"
    """The server's hold policy (`lock.max-hold-ms`, `lock.max-extends`) refused
    an extension, and the deadline, less the margin, came."""
    FORKED = "forked"
    """Seen in a forked child: the lease is its parent's, no watchdog runs for it
    there, and the child must neither use it nor release it."""
    NOT_REPLICATED = "not_replicated"
    """A lease acquired with `sync`: its extends went on being answered
    `NOSYNC` (fewer replicas than asked acknowledged them), and the deadline
    that the last replicated extend set, less the margin, came. The master may
    still hold it; a failover to a replica would not."""
    REVOKED = "revoked"
    """Taken away on the server: an operator's `LOCK.REVOKE key [REASON …]`,
    or the hold's session lease ended by `LOCK.LEASE REVOKE` (the reason
    `lease revoked`). `revoked_reason` holds the reason the server gave."""


class Lost(LockError):
    """The lease is gone, or is about to be: stop working on the resource.

    `reason` says why; `revoked_reason` is the server's reason text when it
    was taken away (`LostReason.REVOKED`), else None."""

    def __init__(
        self, reason: LostReason, message: str, *, revoked_reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.revoked_reason = revoked_reason


class LimitReached(LockError):
    """A `LIMIT …` reply: `lock.max-hold-ms`, `lock.max-extends` or
    `lock.max-waiters`. After an extend, the lease still holds until its
    current deadline."""


class NotReplicated(LockError):
    """A `NOSYNC …` reply to a request made with `sync`: fewer than `wanted`
    replicas acknowledged it within the sync timeout (`acked` did).

    - From an acquire (`acquire()`, `lock()`, `permit()`, `campaign()`): not
      acquired, and nothing is held (`undone` is True): the server undid the
      grant as a release would (after a `wait`, the package gave the grant
      back when its confirming extend was not replicated).
    - From `extend()`: the extension stands on the master but not on enough
      replicas, so the lease's deadline is not moved (it stays where the last
      replicated extend put it); the lease is not lost.
    - From `guard()`: the guarded command ran on the master (its reply is
      lost), and may not be on enough replicas.
    """

    def __init__(self, acked: int, wanted: int, message: str, *, undone: bool) -> None:
        super().__init__(message)
        self.acked = acked
        self.wanted = wanted
        self.undone = undone


class ServerError(LockError):
    """Any other error reply to a lock command (`ERR …`, `WRONGTYPE …`, `OOM …`,
    `READONLY …`, an unknown command when the module is not loaded, or the
    error of a command run by `Lease.guard`). `code` is its first word."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


class ModuleVersionError(LockError):
    """The server's `lock` module is older than this package needs, or not
    loaded (`MODULE LIST`, asked once per `Locks` before its first command).
    A client x.y.* needs the module x.y.0 or newer: upgrade the module (or
    load it), or use a client as old as the module.

    `found` is the module's `ver` (major*10000 + minor*100 + patch; builds
    before 0.4.0 report 1), None when no `lock` module is loaded; `required`
    the oldest `ver` this package works with."""

    def __init__(self, found: int | None, required: int, message: str) -> None:
        super().__init__(message)
        self.found = found
        self.required = required
