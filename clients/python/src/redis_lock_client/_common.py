"""What the sync and asyncio APIs share: arguments, replies, errors, the
lease's clock, and the settings of the dedicated connections.

Nothing here does I/O. The client library (redis-py or valkey-py) is found
from the class of the client the caller passed, so valkey-py works without
being a dependency.
"""

from __future__ import annotations

import enum
import importlib
import math
import os
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from ._errors import LimitReached, LockError, Lost, LostReason, NotReplicated, ServerError

if TYPE_CHECKING:
    from ._session import Session

Key = str | bytes
# How a `Locks` keeps its holds alive: `Locks(keepalive=...)`.
Keepalive = Literal["auto", "session", "extend"]

# The server refuses a WAIT longer than this (docs/commands.md).
MAX_WAIT_MS = 31_536_000_000
# The server's bounds on an OWNER label, in bytes.
MAX_OWNER_BYTES = 128
# The largest limit the server accepts for a semaphore.
MAX_SEMAPHORE_LIMIT = 1_000_000
# The most replicas `SYNC` may wait for; its timeout has WAIT's bounds.
MAX_SYNC_REPLICAS = 1000
# How long one LOCK.OBSERVE of an election's observer blocks on the server.
OBSERVE_TIMEOUT_S = 30.0
# A dedicated WAIT connection reads for this much longer than the wait, so that
# the server's own timeout (a null reply) always comes first.
WAIT_READ_SLACK_S = 5.0
# How the client libraries hand over an error reply `CODE rest`, by version:
# - redis-py 5.x, valkey-py: a code they know (ERR, WRONGTYPE, ...) is stripped
#   and told by the exception class only; any other (LOST, REVOKED, NOSYNC, ...)
#   stays at the front of the message.
# - redis-py 8.0 and 8.1: the same, and `status_code` names a stripped code.
# - redis-py 8.2: as 8.1, but a code it does not know also gets `status_code`
#   while staying at the front of the message.
# So the code is read from `status_code`, the class or the message's first
# word, and then stripped from the message wherever it still stands there.
# The codes read from the message's first word (with no `status_code`):
_UNSTRIPPED_CODES = frozenset(
    {
        "LIMIT",
        "LOST",
        "NOSYNC",
        "NOLEASE",
        "REVOKED",
        "WRONGTYPE",
        "UNBLOCKED",
        "BUSY",
        "MISCONF",
        "NOREPLICAS",
    }
)
_CLASS_CODES = {
    "OutOfMemoryError": "OOM",
    "ReadOnlyError": "READONLY",
    "NoPermissionError": "NOPERM",
    "BusyLoadingError": "LOADING",
    "ExecAbortError": "EXECABORT",
    "NoScriptError": "NOSCRIPT",
    "AuthenticationError": "NOAUTH",
    "ClusterCrossSlotError": "CROSSSLOT",
    "ClusterDownError": "CLUSTERDOWN",
    "MasterDownError": "MASTERDOWN",
    "TryAgainError": "TRYAGAIN",
}
_CODE = re.compile(r"^([A-Z]+) (.*)$", re.DOTALL)
# The rest of a `NOSYNC` error: `<acked> of <wanted> replicas acknowledged; <what stands>`.
_NOSYNC = re.compile(r"^(\d+) of (\d+) replicas acknowledged; (.*)$", re.DOTALL)


@dataclass(frozen=True)
class Family:
    """The client library a client comes from: its exceptions and retry classes."""

    name: str  # "redis" or "valkey"
    asyncio: bool  # the client is redis.asyncio's or valkey.asyncio's
    module: ModuleType  # the package, or its asyncio subpackage
    response_error: type[Exception]
    connection_errors: tuple[type[Exception], ...]

    def retry_off(self) -> Any:
        """A Retry that never retries, of this library's sync or asyncio kind."""
        retry = importlib.import_module(f"{self.module.__name__}.retry")
        backoff = importlib.import_module(f"{self.name}.backoff")
        return retry.Retry(backoff.NoBackoff(), 0)


def family_of(client: Any) -> Family:
    """redis-py or valkey-py, from the class (or a base class) of `client`."""
    for cls in type(client).__mro__:
        name = cls.__module__.partition(".")[0]
        if name in ("redis", "valkey"):
            asyncio = any(c.__module__.startswith(f"{name}.asyncio") for c in type(client).__mro__)
            exceptions = importlib.import_module(f"{name}.exceptions")
            return Family(
                name=name,
                asyncio=asyncio,
                module=importlib.import_module(f"{name}.asyncio" if asyncio else name),
                response_error=exceptions.ResponseError,
                connection_errors=(exceptions.ConnectionError, exceptions.TimeoutError),
            )
    raise TypeError(
        "Locks needs a redis-py or valkey-py client (redis.Redis, valkey.Valkey, "
        f"or their asyncio forms), not {type(client).__name__}"
    )


def dedicated_pool_kwargs(
    client: Any, family: Family, read_timeout: float | None
) -> dict[str, Any]:
    """Arguments for a connection pool of one connection to the same server as
    `client`, with retries off and its own read timeout.

    Retries are off because a retried `LOCK.ACQUIRE … WAIT` queues again at the
    tail, and after a `CLIENT KILL` a reconnecting client would be granted a
    lock nobody waits for (docs/clients.md, "Rules for any client").
    """
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        raise TypeError(
            "Locks needs a client with a connection pool (redis.Redis, valkey.Valkey); "
            "cluster clients are not supported"
        )
    kwargs = dict(pool.connection_kwargs)
    kwargs.update(
        connection_class=pool.connection_class,
        max_connections=1,
        socket_timeout=read_timeout,
        socket_connect_timeout=_shorter(kwargs.get("socket_connect_timeout"), read_timeout),
        retry=family.retry_off(),
        retry_on_timeout=False,
        retry_on_error=[],
    )
    return kwargs


def _shorter(a: float | None, b: float | None) -> float | None:
    """The shorter of two timeouts, where None is no limit."""
    if a is None or b is None:
        return b if a is None else a
    return min(a, b)


REFUSED_MESSAGE = "the token no longer holds the lock: released, expired, deleted or taken"
OVERWRITTEN_MESSAGE = (
    "WRONGTYPE: the key now holds another type of value: it was overwritten, and the lock with it"
)
FORKED_MESSAGE = (
    "this process is a fork of the one that holds the lease: the lease is the parent's, "
    "and the child must neither use it nor release it"
)
LOST_IN_BLOCK = "the lease was lost before the block ended: its work may not have been protected"
LEASE_GONE_MESSAGE = (
    "the session's lease is gone on the server (it ran out, was revoked, or the server lost it), "
    "and the hold with it"
)
# The most bytes a LOCK.REVOKE reason may have.
MAX_REASON_BYTES = 128


def not_acquired_message(key: Key, wait: float | None) -> str:
    if wait is None:
        return f"{key!r} is held by another token"
    return f"{key!r} was still held when the wait of {wait} s ran out"


def not_acquired_many_message(keys: tuple[Key, ...], wait: float | None) -> str:
    if wait is None:
        return f"one of {list(keys)!r} is held by another token"
    return f"one of {list(keys)!r} was still held when the wait of {wait} s ran out"


def no_permits_message(key: Key, count: int, wait: float | None) -> str:
    if wait is None:
        return f"{key!r} has fewer than {count} free permits"
    return f"{key!r} still had fewer than {count} free permits when the wait of {wait} s ran out"


def check_keepalive(keepalive: object) -> Keepalive:
    if keepalive == "auto" or keepalive == "session" or keepalive == "extend":
        return keepalive
    raise ValueError(f'keepalive must be "auto", "session" or "extend", not {keepalive!r}')


def no_lease_command(refusal: LockError) -> bool:
    """Whether a refused `LOCK.LEASE GRANT` says the server has no lease
    groups for this client: an older module (unknown command), or an ACL
    that denies them (NOPERM)."""
    if not isinstance(refusal, ServerError):
        return False
    text = refusal.message.lower()
    unknown = text.startswith("unknown command") or text.startswith("unknown subcommand")
    return refusal.code == "NOPERM" or (refusal.code == "ERR" and unknown)


class LeaseGone(Exception):
    """An acquire under a session was answered NOLEASE (nothing granted):
    its lease is gone on the server; the acquire is sent again, once, under
    a new one."""

    def __init__(self, error: ServerError) -> None:
        super().__init__(str(error))
        self.error = error


def new_token() -> str:
    """The token of a new lease: chosen here, so a lost reply can still be released."""
    return str(uuid.uuid4())


def check_key(key: object) -> Key:
    if not isinstance(key, str | bytes):
        raise TypeError(f"key must be str or bytes, not {type(key).__name__}")
    return key


def seconds_to_ms(name: str, seconds: object, *, minimum_ms: int) -> int:
    """A duration in seconds (int or float) as whole milliseconds, rounded."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds):
        raise ValueError(f"{name} must be finite, not {seconds}")
    ms = round(seconds * 1000)
    if ms < minimum_ms:
        raise ValueError(f"{name} must be at least {minimum_ms / 1000} s, not {seconds}")
    return ms


def ttl_to_ms(ttl: object) -> int:
    return seconds_to_ms("ttl", ttl, minimum_ms=1)


def wait_to_ms(wait: object) -> int | None:
    if wait is None:
        return None
    ms = seconds_to_ms("wait", wait, minimum_ms=1)
    if ms > MAX_WAIT_MS:
        raise ValueError(f"wait must be at most {MAX_WAIT_MS // 1000} s (365 days)")
    return ms


@dataclass(frozen=True)
class ReplicaSync:
    """`SYNC numreplicas timeout-ms`: the request is answered only once
    `replicas` replicas have acknowledged what it did (a grant, an extension,
    a guarded command), and fails with `NotReplicated` when fewer did within
    `timeout` seconds (a grant is then undone by the server).

    `replicas` is 0 to 1000 (0: no `SYNC`, as the server takes it); `timeout`
    is seconds (int or float, rounded to milliseconds), 1 ms to 365 days.
    Checked when made: `TypeError` or `ValueError`."""

    replicas: int
    timeout: float

    def __post_init__(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int):
            raise TypeError(f"replicas must be an int, not {type(self.replicas).__name__}")
        if not 0 <= self.replicas <= MAX_SYNC_REPLICAS:
            raise ValueError(f"replicas must be 0 to {MAX_SYNC_REPLICAS}, not {self.replicas}")
        if seconds_to_ms("sync timeout", self.timeout, minimum_ms=1) > MAX_WAIT_MS:
            raise ValueError(f"the sync timeout must be at most {MAX_WAIT_MS // 1000} s (365 days)")

    @property
    def timeout_ms(self) -> int:
        return round(self.timeout * 1000)


def sync_of(sync: object) -> ReplicaSync | None:
    """A `sync=` argument: None (or 0 replicas) for no `SYNC`."""
    if sync is None:
        return None
    if not isinstance(sync, ReplicaSync):
        raise TypeError(f"sync must be a ReplicaSync, not {type(sync).__name__}")
    return sync if sync.replicas > 0 else None


def sync_args(sync: ReplicaSync | None) -> list[object]:
    return [] if sync is None else ["SYNC", sync.replicas, sync.timeout_ms]


def check_sync_fits(sync: ReplicaSync | None, ttl_ms: int, margin: float | None) -> None:
    """A sync timeout must end before the lease would be taken as lost: an
    answer that came later would be of a lease already given up."""
    if sync is None:
        return
    usable_ms = ttl_ms * (1 - (0.1 if margin is None else margin))
    if sync.timeout_ms >= usable_ms:
        raise ValueError(
            f"the sync timeout ({sync.timeout} s) must be shorter than the ttl less the "
            f"safety margin ({usable_ms / 1000} s)"
        )


def sync_read_timeout(sync: ReplicaSync) -> float:
    """The read timeout of a connection that waits for a synced reply."""
    return sync.timeout_ms / 1000 + WAIT_READ_SLACK_S


def check_owner(owner: object) -> Key | None:
    """An OWNER label: None, or 1 to 128 bytes (str is sent as UTF-8)."""
    if owner is None:
        return None
    if not isinstance(owner, str | bytes):
        raise TypeError(f"owner must be str or bytes, not {type(owner).__name__}")
    size = len(owner.encode() if isinstance(owner, str) else owner)
    if not 1 <= size <= MAX_OWNER_BYTES:
        raise ValueError(f"owner must be 1 to {MAX_OWNER_BYTES} bytes, not {size}")
    return owner


def check_limit(limit: object) -> int:
    """A semaphore's limit: 1 to 1,000,000 permits."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_SEMAPHORE_LIMIT:
        raise ValueError(f"limit must be 1 to {MAX_SEMAPHORE_LIMIT}, not {limit}")
    return limit


def check_count(count: object, limit: int) -> int:
    """How many permits one token takes: 1 to the semaphore's limit."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"count must be an int, not {type(count).__name__}")
    if not 1 <= count <= limit:
        raise ValueError(f"count must be 1 to the limit ({limit}), not {count}")
    return count


@dataclass(frozen=True)
class Commands:
    """The commands that extend, release and guard a lease of one kind."""

    extend: str
    release: str
    guard: str | None  # None: a semaphore's permits guard nothing


LOCK_COMMANDS = Commands("LOCK.EXTEND", "LOCK.RELEASE", "LOCK.GUARD")
# A set of keys taken in one step (issue 28): extended and released together;
# guarded by its first key.
MULTI_COMMANDS = Commands("LOCK.MEXTEND", "LOCK.MRELEASE", "LOCK.GUARD")
SEMAPHORE_COMMANDS = Commands("SEM.EXTEND", "SEM.RELEASE", None)


@dataclass(frozen=True)
class Permits:
    """What `SEM.ACQUIRE` asks for: `count` of the semaphore's `limit` permits."""

    limit: int
    count: int


@dataclass(frozen=True)
class Acquire:
    """One `LOCK.ACQUIRE` (or, with `permits`, `SEM.ACQUIRE`), checked: its
    arguments, the client's token, and the connection of its own it needs for
    a wait, a session or a sync. `wait_ms` 0 is the server's `WAIT 0`, no
    limit (an election's campaign). `shared` asks for a read lease; `sync`
    for an answer only once that many replicas hold the grant. With `keys`
    (two or more), `LOCK.MACQUIRE` of the whole set, all or nothing; `key`
    is then its first."""

    key: Key
    ttl_ms: int
    wait_ms: int | None
    session: bool
    token: str
    owner: Key | None = None
    shared: bool = False
    permits: Permits | None = None
    sync: ReplicaSync | None = None
    keys: tuple[Key, ...] | None = None

    @classmethod
    def many(
        cls,
        keys: object,
        ttl: object,
        wait: object,
        session: bool,
        owner: object = None,
        *,
        shared: bool = False,
        sync: object = None,
    ) -> Acquire:
        """`LOCK.MACQUIRE` of `keys` (an iterable of keys, not one key); one key
        is a plain `LOCK.ACQUIRE`."""
        if isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError("keys must be an iterable of keys, not one key")
        if not isinstance(keys, Iterable):
            raise TypeError(f"keys must be an iterable of keys, not {type(keys).__name__}")
        checked = tuple(check_key(key) for key in keys)
        if not checked:
            raise ValueError("keys must name at least one key")
        request = cls.of(checked[0], ttl, wait, session, owner, shared=shared, sync=sync)
        return request if len(checked) == 1 else replace(request, keys=checked)

    @property
    def target(self) -> list[object]:
        """The keys as the lease's commands name them: `key`, or `numkeys
        key…` for a set."""
        return [self.key] if self.keys is None else [len(self.keys), *self.keys]

    @classmethod
    def of(
        cls,
        key: object,
        ttl: object,
        wait: object,
        session: bool,
        owner: object = None,
        *,
        shared: bool = False,
        permits: Permits | None = None,
        sync: object = None,
    ) -> Acquire:
        return cls(
            check_key(key),
            ttl_to_ms(ttl),
            wait_to_ms(wait),
            bool(session),
            new_token(),
            check_owner(owner),
            bool(shared),
            permits,
            sync_of(sync),
        )

    @classmethod
    def campaign(
        cls, key: object, ttl: object, timeout: object, owner: object, sync: object = None
    ) -> Acquire:
        """A candidate's wait in the queue: up to `timeout` seconds, or no limit."""
        wait_ms = 0 if timeout is None else wait_to_ms(timeout)
        return cls(
            check_key(key),
            ttl_to_ms(ttl),
            wait_ms,
            False,
            new_token(),
            check_owner(owner),
            sync=sync_of(sync),
        )

    @property
    def args(self) -> list[object]:
        args: list[object]
        if self.keys is not None:
            args = ["LOCK.MACQUIRE", *self.target, self.ttl_ms]
        elif self.permits is None:
            args = ["LOCK.ACQUIRE", self.key, self.ttl_ms]
        else:
            args = ["SEM.ACQUIRE", self.key, self.permits.limit, self.ttl_ms]
            args += ["COUNT", self.permits.count]
        args += ["TOKEN", self.token]
        if self.shared:
            args.append("SHARED")
        if self.wait_ms is not None:
            args += ["WAIT", self.wait_ms]
        if self.session:
            args.append("SESSION")
        if self.owner is not None:
            args += ["OWNER", self.owner]
        return args + sync_args(self.sync)

    @property
    def commands(self) -> Commands:
        if self.keys is not None:
            return MULTI_COMMANDS
        return LOCK_COMMANDS if self.permits is None else SEMAPHORE_COMMANDS

    def attaches(self, watchdog: bool) -> bool:
        """Whether the hold may attach to a session: it is to be kept alive
        (`watchdog`), and not with `sync` (a keepalive carries no `SYNC`, and
        a replica that missed one would end the lease sooner than counted).
        A set of keys attaches as one hold of the session, each key a hold of
        its lease on the server."""
        return watchdog and self.sync is None

    def waited(self, elapsed: float) -> Acquire | None:
        """The same request after `elapsed` seconds of its wait went by (to
        send it again); None when nothing is left of the wait."""
        if not self.wait_ms:
            return self  # no wait, or no limit
        left = self.wait_ms - round(elapsed * 1000)
        return None if left < 1 else replace(self, wait_ms=left)

    @property
    def needs_own_connection(self) -> bool:
        """A wait and a sync block the connection they run on: a connection
        of its own, with retries off (a retried request would queue again,
        or be granted twice), and a session's lock ends with its own."""
        return self.wait_ms is not None or self.session or self.sync is not None

    def read_timeout(self, client: Any) -> float | None:
        """The own connection's: longer than the wait and the sync together,
        none for a wait without limit, else the client's own."""
        if self.wait_ms == 0:
            return None
        if self.wait_ms is None and self.sync is None:
            timeout: float | None = client.connection_pool.connection_kwargs.get("socket_timeout")
            return timeout
        waits = (self.wait_ms or 0) + (0 if self.sync is None else self.sync.timeout_ms)
        return waits / 1000 + WAIT_READ_SLACK_S


def fence_of(reply: object) -> int | None:
    """The fence of an ACQUIRE reply `[token, fence]`, or None for a refusal."""
    if reply is None:
        return None
    if isinstance(reply, (list, tuple)) and len(reply) == 2:
        return int(reply[1])
    raise ServerError("ERR", f"unexpected reply to LOCK.ACQUIRE: {reply!r}")


def fields_of(command: str, reply: object) -> dict[str, object] | None:
    """A map reply (RESP3) or flat name/value array (RESP2) as a dict by name."""
    if reply is None:
        return None
    if isinstance(reply, dict):
        pairs = list(reply.items())
    elif isinstance(reply, (list, tuple)):
        pairs = list(zip(reply[::2], reply[1::2], strict=True))
    else:
        raise ServerError("ERR", f"unexpected reply to {command}: {reply!r}")
    return {(name.decode() if isinstance(name, bytes) else str(name)): v for name, v in pairs}


def info_of(reply: object, command: str = "LOCK.INFO") -> dict[str, int] | None:
    """LOCK.INFO's (or SEM.INFO's) numeric fields as a dict (the text fields
    `mode` and `owner` are left out; the label: `Election.leader()`)."""
    fields = fields_of(command, reply)
    if fields is None:
        return None
    return {name: _int(value) for name, value in fields.items() if name not in ("owner", "mode")}


def _int(value: object) -> int:
    if isinstance(value, int | str | bytes):
        return int(value)
    raise ServerError("ERR", f"unexpected field in a lock reply: {value!r}")


@dataclass(frozen=True)
class Leader:
    """A leader as `Election.leader()` and `Election.observe()` see it."""

    fence: int
    """Larger than every earlier leader's: pass it with every leader-only write."""
    owner: str | None
    """The label it campaigned with (None without one; not UTF-8: lossily)."""
    ttl: float | None
    """Seconds left in its lease when the server answered; None without a TTL."""


def leader_of(reply: object) -> Leader | None:
    """The holder in a LOCK.OBSERVE or LOCK.INFO reply, or None when free."""
    fields = fields_of("LOCK.OBSERVE", reply)
    if fields is None:
        return None
    owner = fields.get("owner")
    if isinstance(owner, bytes):
        owner = owner.decode(errors="replace")
    ttl_ms = _int(fields.get("ttl"))
    return Leader(
        fence=_int(fields.get("fence")),
        owner=None if owner is None else str(owner),
        ttl=None if ttl_ms < 0 else ttl_ms / 1000,
    )


def fence_seen(leader: Leader | None) -> int:
    """What LOCK.OBSERVE takes as the holder last seen: its fence, 0 for nobody."""
    return 0 if leader is None else leader.fence


class ElectionFacts:
    """What a sync and an asyncio election share: the key, the lease's ttl, the
    candidate's label, and how long each observe blocks. Each adds its I/O."""

    def __init__(
        self, key: object, ttl: float, owner: object, observe_timeout: object, sync: object
    ) -> None:
        self.key = check_key(key)
        self.ttl = ttl
        self.owner = check_owner(owner)
        ttl_to_ms(ttl)
        self._observe_ms = seconds_to_ms("observe_timeout", observe_timeout, minimum_ms=1)
        self.sync = sync_of(sync)

    def _campaign_request(self, timeout: float | None) -> Acquire:
        return Acquire.campaign(self.key, self.ttl, timeout, self.owner, self.sync)

    def _observe_args(self, leader: Leader | None) -> list[object]:
        return ["LOCK.OBSERVE", self.key, fence_seen(leader), self._observe_ms]

    @property
    def _observe_read_timeout(self) -> float:
        """Longer than the observe, so the server's answer always comes first."""
        return self._observe_ms / 1000 + WAIT_READ_SLACK_S


class SemaphoreFacts:
    """What a sync and an asyncio semaphore share: the key, the limit, and the
    checked `SEM.ACQUIRE` of a request. Each adds its I/O."""

    def __init__(self, key: object, limit: object) -> None:
        self.key = check_key(key)
        self.limit = check_limit(limit)

    def _request(
        self,
        ttl: object,
        count: object,
        wait: object,
        session: bool,
        owner: object,
        sync: object,
    ) -> Acquire:
        permits = Permits(self.limit, check_count(count, self.limit))
        return Acquire.of(self.key, ttl, wait, session, owner, permits=permits, sync=sync)

    def _not_acquired(self, request: Acquire, wait: float | None) -> str:
        assert request.permits is not None
        return no_permits_message(self.key, request.permits.count, wait)


def lock_error(error: Exception) -> LockError:
    """The package's exception for an error reply of the client library."""
    message = str(error)
    status = getattr(error, "status_code", None)
    code = status if isinstance(status, str) and status else None
    code = code or _CLASS_CODES.get(type(error).__name__)
    match = _CODE.match(message)
    if code is None:  # else `ERR`: the libraries strip `ERR ` and keep the rest
        code = match.group(1) if match and match.group(1) in _UNSTRIPPED_CODES else "ERR"
    if match and match.group(1) == code:
        message = match.group(2)  # left at the front (redis-py 8.2, unknown codes)
    if code == "LIMIT":
        return LimitReached(f"LIMIT {message}")
    if code == "LOST":
        return Lost(LostReason.REFUSED, f"LOST {message}")
    if code == "REVOKED":
        return Lost(LostReason.REVOKED, f"REVOKED {message}", revoked_reason=message)
    if code == "NOSYNC":
        counts = _NOSYNC.match(message)
        acked, wanted = (int(counts[1]), int(counts[2])) if counts else (0, 0)
        undone = message.endswith("the grant was undone")
        return NotReplicated(acked, wanted, f"NOSYNC {message}", undone=undone)
    return ServerError(code, message)


class LeaseClock:
    """When a lease ends, by the client's monotonic clock, and when to extend it.

    The deadline counts from the moment the command that set the lease was
    sent: the server starts the lease later than that, so the client's deadline
    is never later than the server's. `lost_at` is that deadline less the
    safety margin.
    """

    def __init__(self, sent: float, ttl_ms: int, margin: float | None) -> None:
        self.ttl_ms = ttl_ms
        self.margin_fraction = margin
        self.sent_at = sent
        self.valid_until = sent + ttl_ms / 1000
        self.next_extend_at = sent + self.interval
        self.limit_reached = False
        # The last extend was answered NOSYNC: not counted, tried again.
        self.unreplicated = False

    @property
    def ttl(self) -> float:
        return self.ttl_ms / 1000

    @property
    def interval(self) -> float:
        """The watchdog extends every ttl/3."""
        return self.ttl / 3

    @property
    def margin(self) -> float:
        return self.ttl * (0.1 if self.margin_fraction is None else self.margin_fraction)

    @property
    def lost_at(self) -> float:
        return self.valid_until - self.margin

    @property
    def retry_delay(self) -> float:
        """The pause after a failed extend before the next try."""
        return min(self.ttl / 20, 0.5)

    def extended(self, sent: float, ttl_ms: int) -> None:
        """An extend sent at `sent` succeeded. Of two extends in flight at once
        (the watchdog's and the caller's), the one sent last counts."""
        if sent < self.sent_at:
            return
        self.ttl_ms = ttl_ms
        self.sent_at = sent
        self.valid_until = sent + ttl_ms / 1000
        self.next_extend_at = sent + self.interval
        self.unreplicated = False

    def failed(self, now: float) -> None:
        self.next_extend_at = now + self.retry_delay

    def not_replicated(self, now: float) -> None:
        """An extend was answered NOSYNC: it stands on the master only, so the
        deadline stays where the last replicated one put it; tried again."""
        self.unreplicated = True
        self.failed(now)

    def expiry_reason(self) -> LostReason:
        if self.limit_reached:
            return LostReason.LIMIT
        return LostReason.NOT_REPLICATED if self.unreplicated else LostReason.EXPIRED

    def expiry_message(self) -> str:
        if self.limit_reached:
            return "the server's hold limit refused to extend the lease, and it is about to end"
        if self.unreplicated:
            return (
                "the lease is about to end: its extends were not acknowledged by enough "
                "replicas (NOSYNC), so a failover would lose it"
            )
        return "the lease is about to end and no extend succeeded (server down or unreachable?)"


@dataclass(frozen=True)
class Loss:
    """Why a lease is lost, as its `lost_reason`, `lost_message` and
    `revoked_reason` will say."""

    reason: LostReason
    message: str
    revoked_reason: str | None = None

    @classmethod
    def of(cls, lost: Lost) -> Loss:
        return cls(lost.reason, str(lost), lost.revoked_reason)


REFUSED = Loss(LostReason.REFUSED, REFUSED_MESSAGE)
OVERWRITTEN = Loss(LostReason.REFUSED, OVERWRITTEN_MESSAGE)
LEASE_GONE = Loss(LostReason.REFUSED, LEASE_GONE_MESSAGE)


class Renewal(enum.Enum):
    """What one reply to a watchdog's extend means for its lease."""

    EXTENDED = "extended"  # 1: the deadline moves
    REFUSED = "refused"  # 0: the token no longer holds the lock: lost now
    REVOKED = "revoked"  # REVOKED <reason>: taken away on the server: lost now
    OVERWRITTEN = "overwritten"  # WRONGTYPE: the key holds another type now: lost now
    LIMIT = "limit"  # LIMIT: no more extends; the lease ends at its deadline
    UNREPLICATED = "unreplicated"  # NOSYNC: on the master only; try again until the deadline
    FAILED = "failed"  # no answer, or another error: try again until the deadline


def renewal_of(reply: object) -> Renewal:
    """The meaning of a watchdog extend's reply: the reply itself, or the
    exception it came as (this package's, or a connection error)."""
    if isinstance(reply, LimitReached):
        return Renewal.LIMIT
    if isinstance(reply, NotReplicated):
        return Renewal.UNREPLICATED
    if isinstance(reply, ServerError) and reply.code == "WRONGTYPE":
        return Renewal.OVERWRITTEN
    if isinstance(reply, Lost) and reply.reason is LostReason.REVOKED:
        return Renewal.REVOKED
    if isinstance(reply, BaseException):
        return Renewal.FAILED
    return Renewal.EXTENDED if reply == 1 else Renewal.REFUSED


class LeaseFacts:
    """What a sync and an asyncio lease both hold: the lock's facts, the clock,
    why it was lost. Each adds its own `lost` event and I/O.

    `shared` is true for a read lease; `count` is the number of a semaphore's
    permits the lease holds (None for a lock). A hold attached to a `Session`
    reads the session's clock (its lease is the session's) and is never
    extended on its own."""

    lost: Any  # threading.Event or asyncio.Event, both asking `_lost_by_clock()`

    def __init__(
        self,
        request: Acquire,
        fence: int,
        clock: LeaseClock,
        extending: bool,
        session: Session | None = None,
    ) -> None:
        self.key = request.key
        self.keys: tuple[Key, ...] = (request.key,) if request.keys is None else request.keys
        self._target = request.target  # the keys as its extend and release name them
        self.token = request.token
        self.fence = fence
        self.shared = request.shared
        self.count = None if request.permits is None else request.permits.count
        self._commands = request.commands
        self._sync = request.sync  # the watchdog's extends and extend() carry it
        self._loss: Loss | None = None
        self._attached = session  # its lease is this session's
        self._clock = clock if session is None else session._clock
        self._extending = extending and session is None  # the watchdog extends it
        self._stopped = False  # released or lost: the watchdog ends
        self._released = False  # a release was answered
        self._pid = os.getpid()

    def _released_all(self, reply: object) -> bool:
        """Whether a release's reply says every key was released (1 for a
        lock, the set's size for `LOCK.MRELEASE`)."""
        return bool(reply == len(self.keys))

    @property
    def valid_until(self) -> float:
        """The lease's end by `time.monotonic()`, never later than the server's."""
        return self._clock.valid_until

    @property
    def released(self) -> bool:
        """True once a `release()` was answered (whatever the answer)."""
        return self._released

    @property
    def held(self) -> bool:
        """True while the lease holds by this process's clock: not released, not
        lost, and before `valid_until` less the safety margin. Computed when
        read, so it is right the moment a paused process runs again (and
        `lost` is set then); False in a forked child."""
        return not self._stopped and not self.lost.is_set()

    def remaining(self) -> float:
        """Seconds left until the lease must be taken as lost (`valid_until`
        less the safety margin), by the monotonic clock; 0.0 once not `held`."""
        if not self.held:
            return 0.0
        return max(self._clock.lost_at - now(), 0.0)

    @property
    def session(self) -> Session | None:
        """The session whose lease this hold is attached to (`LEASE`), or None
        when it is extended on its own (`keepalive="extend"`, `watchdog=False`,
        `sync`, or a server without `LOCK.LEASE`)."""
        return self._attached

    @property
    def lost_reason(self) -> LostReason | None:
        """Why `lost` is set (None while it is not)."""
        if self._forked:
            return LostReason.FORKED
        return None if self._loss is None else self._loss.reason

    @property
    def lost_message(self) -> str | None:
        """The loss in words (None while `lost` is not set)."""
        if self._forked:
            return FORKED_MESSAGE
        return None if self._loss is None else self._loss.message

    @property
    def revoked_reason(self) -> str | None:
        """The reason the server gave when the hold was taken away
        (`LostReason.REVOKED`: `LOCK.REVOKE`'s `REASON`, or `lease revoked`);
        None otherwise."""
        return None if self._loss is None or self._forked else self._loss.revoked_reason

    @property
    def _forked(self) -> bool:
        return os.getpid() != self._pid

    def _extend_due(self, now: float) -> bool:
        clock = self._clock
        return self._extending and not clock.limit_reached and now >= clock.next_extend_at

    def _lost_by_clock(self) -> bool:
        """Whether the clock says the lease is lost; records it (and sets
        `lost`) when the deadline less the margin has come and nobody noticed."""
        if self._forked:
            return True  # the parent's lease: nothing here may touch its state
        if self._stopped or now() < self._clock.lost_at:
            return False
        self._mark_lost(Loss(self._clock.expiry_reason(), self._clock.expiry_message()))
        return True

    def _mark_lost(self, loss: Loss) -> None:
        raise NotImplementedError

    def _record_loss(self, loss: Loss) -> bool:
        """Notes the loss; False when the lease was already released or lost."""
        if self._stopped:
            return False
        self._stopped = True
        self._loss = loss
        return True


def extend_error(lease: LeaseFacts, error: LockError) -> Lost | None:
    """The `Lost` an explicit extend raises for an error reply that means the
    lock is gone (WRONGTYPE: the key was overwritten; REVOKED: taken away),
    having marked the lease lost; None for the others."""
    if isinstance(error, ServerError) and error.code == "WRONGTYPE":
        lease._mark_lost(OVERWRITTEN)
        return Lost(LostReason.REFUSED, OVERWRITTEN_MESSAGE)
    if isinstance(error, Lost):
        lease._mark_lost(Loss.of(error))
        return error
    return None


def check_reason(reason: object) -> Key | None:
    """A LOCK.REVOKE reason: None (the server's default), or 1 to 128 bytes
    (str is sent as UTF-8)."""
    if reason is None:
        return None
    if not isinstance(reason, str | bytes):
        raise TypeError(f"reason must be str or bytes, not {type(reason).__name__}")
    size = len(reason.encode() if isinstance(reason, str) else reason)
    if not 1 <= size <= MAX_REASON_BYTES:
        raise ValueError(f"reason must be 1 to {MAX_REASON_BYTES} bytes, not {size}")
    return reason


def confirm_not_replicated(error: NotReplicated) -> NotReplicated:
    """The error of a waited grant whose confirming extend was answered
    NOSYNC: the grant is given back (its deadline on the replicas is unknown)."""
    return NotReplicated(
        error.acked,
        error.wanted,
        f"NOSYNC {error.acked} of {error.wanted} replicas acknowledged the extend that "
        "confirms a waited grant; the grant was given back",
        undone=True,
    )


def forked_error() -> Lost:
    return Lost(LostReason.FORKED, FORKED_MESSAGE)


def now() -> float:
    return time.monotonic()


def check_margin(margin: object) -> float | None:
    """The safety margin, a fraction of the ttl in [0, 0.5)."""
    if margin is None:
        return None
    if isinstance(margin, bool) or not isinstance(margin, (int, float)):
        raise TypeError(f"safety_margin must be a fraction of the ttl, not {type(margin).__name__}")
    if not 0 <= margin < 0.5:
        raise ValueError(f"safety_margin must be in [0, 0.5), not {margin}")
    return float(margin)


def check_command(commands: Commands, command: tuple[object, ...]) -> str:
    """The guard command of this kind of lease, for a command that is there."""
    if commands.guard is None:
        raise TypeError("a semaphore's permits guard no command: guard() is for locks")
    if not command:
        raise ValueError("guard needs a command to run, as in guard('SET', 'key', 'value')")
    return commands.guard
