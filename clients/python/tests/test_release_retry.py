"""Releases that do not go as planned (issue: defects 1-3 of the network
review), sync and asyncio, with redis-py and valkey-py against a real server:

- a release of a session's hold that failed on the network is sent again by
  the watchdog with the session's rounds: the hold does not stay on the
  server, kept alive by the session for the sake of its other holds;
- a release after the key was overwritten with another type says "already
  gone" (False), not WRONGTYPE;
- an error reply is read the same whatever the client library's version
  makes of it (redis-py 5.x, 8.1, 8.2: each formats `ResponseError` its way).

The network failure is injected by a subclass of the library's client whose
`execute_command` fails the first `LOCK.RELEASE` as a reset connection would;
the watchdog's own connection and the server are real.
"""

from __future__ import annotations

import asyncio
import time
from types import ModuleType
from typing import Any

import pytest
from conftest import Server, wait_until

from redis_lock_client import Locks, Lost, LostReason, NotReplicated, ServerError
from redis_lock_client import asyncio as aio
from redis_lock_client._common import lock_error

RESET = "Connection reset by peer (injected by the test)"


def first_release_fails(lib: ModuleType, port: int) -> Any:
    """A sync client whose first `LOCK.RELEASE` fails as a reset connection would."""

    class ReleaseFails(lib.Redis):  # type: ignore[misc, name-defined]
        failed = False

        def execute_command(self, *args: Any, **options: Any) -> Any:
            if args and args[0] == "LOCK.RELEASE" and not self.failed:
                self.failed = True
                raise lib.ConnectionError(RESET)
            return super().execute_command(*args, **options)

    return ReleaseFails(port=port, socket_timeout=5)


def async_first_release_fails(lib: ModuleType, port: int) -> Any:
    class ReleaseFails(lib.asyncio.Redis):  # type: ignore[misc, name-defined]
        failed = False

        async def execute_command(self, *args: Any, **options: Any) -> Any:
            if args and args[0] == "LOCK.RELEASE" and not self.failed:
                self.failed = True
                raise lib.ConnectionError(RESET)
            return await super().execute_command(*args, **options)

    return ReleaseFails(port=port, socket_timeout=5)


def lease_holds(admin: Any, session: Any) -> int:
    """How many holds the server counts on the session's lease."""
    info = admin.execute_command("LOCK.LEASE", "INFO", session._lease_id)
    fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=True))
    holds: Any = fields.get(b"holds", fields.get("holds"))
    return int(holds)


# 1. A release that failed on the network is sent again.


def test_a_failed_release_of_a_session_hold_is_sent_again(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    locks = Locks(first_release_fails(lib, server.port), keepalive="session")
    kept = locks.acquire("kept", 3.0)
    released = locks.acquire("billing", 3.0)
    assert kept is not None and released is not None
    assert kept.session is released.session and kept.session is not None
    with pytest.raises(lib.ConnectionError):
        released.release()
    started = time.monotonic()
    # The session's keepalives go on for `kept`: without a new release,
    # "billing" would stay as long as they do.
    wait_until(lambda: admin.execute_command("LOCK.INFO", "billing") is None, timeout=20)
    print(f"released again by the watchdog after {time.monotonic() - started:.2f} s")
    wait_until(lambda: released.released)  # its answer read
    assert released.release() is False  # answered already
    assert kept.held and not kept.lost.is_set()
    assert kept.session is not None and kept.session.orphans == 0
    assert lease_holds(admin, kept.session) == 1
    assert kept.release() is True


def test_a_failed_release_of_the_last_hold_lets_the_lease_run_out(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    """With no other hold, the session is no longer kept alive for the
    orphan: its release is sent again, and the lease would end anyway."""
    locks = Locks(first_release_fails(lib, server.port), keepalive="session")
    lease = locks.acquire("billing", 3.0)
    assert lease is not None
    keepalives = int(admin.info("lock")["lock_keepalives"])
    with pytest.raises(lib.ConnectionError):
        lease.release()
    started = time.monotonic()
    wait_until(lambda: admin.execute_command("LOCK.INFO", "billing") is None, timeout=20)
    print(f"gone from the server after {time.monotonic() - started:.2f} s")
    assert int(admin.info("lock")["lock_keepalives"]) == keepalives  # none for the orphan


def test_asyncio_a_failed_release_of_a_session_hold_is_sent_again(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    async def main() -> None:
        client = async_first_release_fails(lib, server.port)
        try:
            locks = aio.Locks(client, keepalive="session")
            kept = await locks.acquire("kept", 3.0)
            released = await locks.acquire("billing", 3.0)
            assert kept is not None and released is not None
            assert kept.session is released.session
            with pytest.raises(lib.ConnectionError):
                await released.release()
            started = time.monotonic()
            deadline = started + 20
            while admin.execute_command("LOCK.INFO", "billing") is not None:
                assert time.monotonic() < deadline, "the release was not sent again"
                await asyncio.sleep(0.05)
            print(f"released again by the watchdog after {time.monotonic() - started:.2f} s")
            while not released.released:  # its answer read
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert kept.held
            assert await kept.release() is True
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())


# 3. A release after the key was overwritten: already gone.


def test_release_after_the_key_was_overwritten_says_already_gone(
    client: Any, admin: Any, keepalive: str
) -> None:
    locks = Locks(client, keepalive=keepalive)  # type: ignore[arg-type]
    lease = locks.acquire("billing", 30.0)
    assert lease is not None
    admin.set("billing", "another program's value")
    assert lease.release() is False
    assert lease.released
    assert admin.get("billing") == b"another program's value"


def test_asyncio_release_after_the_key_was_overwritten_says_already_gone(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            lease = await aio.Locks(client).acquire("billing", 30.0)
            assert lease is not None
            admin.set("billing", "another program's value")
            assert await lease.release() is False
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())


# 2. Error replies, however the library formats them.


def formats(lib: ModuleType, code: str, rest: str) -> list[Exception]:
    """`CODE rest` as each library version hands it over: the code left in
    the message (redis-py 5.x, 8.1, valkey-py: a code they do not know),
    the code left there and named by `status_code` (redis-py 8.2), the code
    stripped and named by `status_code` (8.1, 8.2: a code they know)."""
    error = lib.exceptions.ResponseError
    kept = error(f"{code} {rest}")
    named = error(f"{code} {rest}")
    named.status_code = code
    stripped = error(rest)
    stripped.status_code = code
    return [kept, named, stripped]


@pytest.mark.parametrize("shape", [0, 1, 2])
def test_error_replies_read_the_same_in_every_library_version(lib: ModuleType, shape: int) -> None:
    revoked = lock_error(formats(lib, "REVOKED", "ticket 42")[shape])
    assert isinstance(revoked, Lost) and revoked.reason is LostReason.REVOKED
    assert revoked.revoked_reason == "ticket 42"
    assert str(revoked) == "REVOKED ticket 42"

    nosync = lock_error(
        formats(lib, "NOSYNC", "1 of 2 replicas acknowledged; the grant was undone")[shape]
    )
    assert isinstance(nosync, NotReplicated)
    assert (nosync.acked, nosync.wanted, nosync.undone) == (1, 2, True)
    assert str(nosync).count("NOSYNC") == 1

    lost = lock_error(formats(lib, "LOST", "the token no longer holds the lock")[shape])
    assert isinstance(lost, Lost) and str(lost) == "LOST the token no longer holds the lock"

    wrongtype = lock_error(formats(lib, "WRONGTYPE", "Operation against a key")[shape])
    assert isinstance(wrongtype, ServerError)
    assert (wrongtype.code, wrongtype.message) == ("WRONGTYPE", "Operation against a key")

    if shape != 0:  # `ERR` itself is always stripped
        err = lock_error(formats(lib, "ERR", "syntax error")[shape])
        assert isinstance(err, ServerError) and (err.code, err.message) == ("ERR", "syntax error")
