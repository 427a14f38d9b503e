"""Sessions: every hold a `Locks` takes attaches to one server lease per ttl
(`LOCK.LEASE`), kept alive by one keepalive a round whatever their number;
revocation (`LOCK.REVOKE`, `LOCK.LEASE REVOKE`) reaches each hold's loss
signal with the server's reason. Sync and asyncio, redis-py and valkey-py,
against a real server.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import ModuleType
from typing import Any

import pytest
from conftest import Server, wait_until

from redis_lock_client import Lease, Locks, Lost, LostReason, ServerError, Session
from redis_lock_client import asyncio as aio

TTL = 0.6  # seconds: a keepalive every 0.2 s


def calls(admin: Any, command: str) -> int:
    """How many times the server ran `command` (INFO commandstats) since
    the last CONFIG RESETSTAT."""
    stats = admin.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def lease_id(session: Session | None) -> Any:
    """The session's lease id, a secret the package never shows: the tests
    need it to revoke the lease as an operator who knows it would."""
    assert session is not None
    return session._lease_id


def lease_info(admin: Any, session: Session | None) -> dict[str, Any]:
    """LOCK.LEASE INFO of the session's lease, as a dict by field name."""
    reply = admin.execute_command("LOCK.LEASE", "INFO", lease_id(session))
    fields = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
    return {name.decode(): value for name, value in fields.items()}


def test_two_hundred_holds_share_one_lease_one_thread_and_one_keepalive_a_round(
    client: Any, admin: Any
) -> None:
    locks = Locks(client)
    threads = threading.active_count()
    first = locks.acquire("hold:0", TTL)
    assert first is not None and first.session is not None
    with_one = threading.active_count()
    assert with_one == threads + 1  # the watchdog
    renders = locks.semaphore("renders", 25)
    holds: list[Lease | None] = [first]
    holds += [locks.acquire(f"hold:{i}", TTL) for i in range(1, 150)]
    holds += [locks.acquire(f"catalog:{i % 5}", TTL, shared=True) for i in range(25)]
    holds += [renders.acquire(TTL) for _ in range(25)]
    held = [hold for hold in holds if hold is not None]
    assert len(held) == 200
    assert {hold.session for hold in held} == {first.session}  # one session for all
    assert threading.active_count() == with_one  # flat as the holds grew
    assert int(admin.info("lock")["lock_leases"]) == 1
    lease = lease_info(admin, first.session)
    assert lease["holds"] == 200

    admin.config_resetstat()
    started = time.monotonic()
    wait_until(lambda: calls(admin, "lock.lease|keepalive") >= 4)
    time.sleep(TTL)  # a few rounds more: a keepalive a round, never an extend a hold
    keepalives = calls(admin, "lock.lease|keepalive")
    rounds = (time.monotonic() - started) / (TTL / 3)
    assert 4 <= keepalives <= rounds + 2
    assert calls(admin, "lock.extend") == 0 and calls(admin, "sem.extend") == 0
    assert all(hold.held for hold in held)
    assert first.session.holds == 200 and first.session.number == lease["lease"]
    info = locks.info("hold:7")
    assert info is not None and info["lease"] == first.session.number

    assert all(hold.release() for hold in held)
    assert first.session.holds == 0
    assert int(admin.info("lock")["lock_locks"]) == 0


def test_a_revoked_key_is_lost_with_its_reason(client: Any, admin: Any, keepalive: str) -> None:
    locks = Locks(client, keepalive=keepalive)  # type: ignore[arg-type]
    stuck = locks.acquire("job:stuck", TTL)
    other = locks.acquire("job:fine", TTL)
    assert stuck is not None and other is not None
    assert (stuck.session is not None) == (keepalive == "session")
    assert Locks(admin).revoke("job:stuck", "stuck\r\nfor 2 h\x00") == 1
    assert stuck.lost.wait(5)
    assert stuck.lost_reason is LostReason.REVOKED
    assert stuck.revoked_reason == "stuck\\x0d\\x0afor 2 h\\x00"  # as the server escapes it
    assert stuck.lost_message == f"REVOKED {stuck.revoked_reason}"
    assert not other.lost.is_set() and other.held  # one hold taken, not the lease
    with pytest.raises(Lost) as raised:
        stuck.extend()
    assert raised.value.reason is LostReason.REVOKED
    assert stuck.release() is False
    assert Locks(admin).revoke("job:stuck") == 0  # free now
    assert other.release() is True


def test_a_revoked_guard_raises_lost_revoked(client: Any, admin: Any) -> None:
    locks = Locks(client)
    lease = locks.acquire("billing", 30.0)  # no keepalive round before the guard
    assert lease is not None
    admin.execute_command("LOCK.REVOKE", "billing", "REASON", "maintenance")
    with pytest.raises(Lost) as raised:
        lease.guard("SET", "billing:total", 1)
    assert raised.value.reason is LostReason.REVOKED
    assert raised.value.revoked_reason == "maintenance"
    assert lease.lost.is_set() and lease.revoked_reason == "maintenance"
    assert admin.get("billing:total") is None


def test_a_revoked_lease_loses_every_hold_and_the_next_hold_gets_a_new_lease(
    client: Any, admin: Any
) -> None:
    locks = Locks(client)
    holds = [locks.acquire(f"job:{i}", TTL) for i in range(20)]
    held = [hold for hold in holds if hold is not None]
    session = held[0].session
    assert len(held) == 20 and session is not None
    assert admin.execute_command("LOCK.LEASE", "REVOKE", lease_id(session)) == 20
    for hold in held:
        assert hold.lost.wait(5)
    assert {(hold.lost_reason, hold.revoked_reason) for hold in held} == {
        (LostReason.REVOKED, "lease revoked")
    }
    assert not session.alive and session.holds == 0

    again = locks.acquire("job:0", TTL)
    assert again is not None and again.session is not None and again.session is not session
    assert int(admin.info("lock")["lock_leases_granted"]) == 2
    assert again.release() is True


def test_keepalives_that_fail_lose_every_hold_at_once(client: Any, server: Server) -> None:
    locks = Locks(client, safety_margin=0.25)  # room for a slow wake-up on a busy machine
    holds = [locks.acquire(f"job:{i}", 0.9) for i in range(50)]
    held = [hold for hold in holds if hold is not None]
    session = held[0].session
    assert len(held) == 50 and session is not None
    time.sleep(0.35)  # one keepalive done
    server.pause()
    try:
        assert held[0].lost.wait(5)
        assert all(hold.lost.is_set() for hold in held)  # all of them, not one by one
        assert time.monotonic() < session.valid_until  # before the client's deadline
        assert {hold.lost_reason for hold in held} == {LostReason.EXPIRED}
        time.sleep(session.valid_until - time.monotonic() + 0.1)
    finally:
        server.resume()
    again = locks.acquire("job:0", 0.9)  # the server let the old lease run out meanwhile
    assert again is not None and again.session is not session
    assert again.session is not None and again.session.alive
    assert again.release() is True


def test_an_acquire_answered_nolease_grants_a_new_lease_once(client: Any, admin: Any) -> None:
    locks = Locks(client)
    first = locks.acquire("job:a", 30.0)  # no keepalive round for 10 s: the client cannot know
    assert first is not None and first.session is not None
    admin.execute_command("LOCK.LEASE", "REVOKE", lease_id(first.session))
    second = locks.acquire("job:b", 30.0)  # NOLEASE, a new lease, sent again
    assert second is not None and second.session is not None
    assert second.session is not first.session and second.held
    assert int(admin.info("lock")["lock_leases_granted"]) == 2
    assert first.lost.wait(5)  # the NOLEASE told the client about the first lease too
    assert first.lost_reason is LostReason.REVOKED and first.revoked_reason == "lease revoked"
    assert second.release() is True


def test_a_waiter_whose_lease_ends_in_the_queue_waits_again_under_a_new_one(
    client: Any, admin: Any
) -> None:
    holder = Locks(admin, keepalive="extend").acquire("billing", 30.0)
    assert holder is not None
    locks = Locks(client)
    other = locks.acquire("other", 30.0)  # grants the session the waiter will use
    assert other is not None and other.session is not None
    granted: list[Lease | None] = []
    waiter = threading.Thread(
        target=lambda: granted.append(locks.acquire("billing", 30.0, wait=10))
    )
    waiter.start()
    wait_until(lambda: (Locks(admin).info("billing") or {}).get("waiters") == 1)
    admin.execute_command("LOCK.LEASE", "REVOKE", lease_id(other.session))
    assert holder.release() is True  # its turn: NOLEASE, then a new lease and a new wait
    waiter.join(10)
    assert len(granted) == 1 and granted[0] is not None
    assert granted[0].session is not None and granted[0].session is not other.session
    assert granted[0].fence > holder.fence and granted[0].release() is True


def test_holds_kept_on_their_own_are_not_attached(client: Any, admin: Any) -> None:
    locks = Locks(client)
    manual = locks.acquire("manual", 5.0, watchdog=False)
    assert manual is not None and manual.session is None
    info = locks.info("manual")
    assert info is not None and "lease" not in info
    extends = Locks(client, keepalive="extend").acquire("extended", 5.0)
    assert extends is not None and extends.session is None
    assert int(admin.info("lock")["lock_leases"]) == 0
    assert manual.release() and extends.release()


def test_a_worker_without_dangerous_rights_uses_sessions_but_cannot_revoke(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    try:  # Redis 7.4+ and Valkey: the module's @lock category
        admin.acl_setuser("worker", enabled=True, nopass=True, keys=["*"],
                          commands=["-@all", "+@lock", "-@dangerous"])  # fmt: skip
    except Exception:  # Redis 7.0: by name (the lease subcommands but REVOKE)
        admin.acl_setuser("worker", enabled=True, nopass=True, keys=["*"], commands=[
            "-@all", "+lock.acquire", "+lock.release", "+lock.extend", "+lock.info",
            "+lock.lease|grant", "+lock.lease|keepalive", "+lock.lease|info"])  # fmt: skip
    worker = lib.Redis(port=server.port, username="worker", password="any", socket_timeout=5)
    try:
        locks = Locks(worker)
        lease = locks.acquire("job", TTL)
        assert lease is not None and lease.session is not None
        with pytest.raises(ServerError) as refused:
            locks.revoke("job")
        assert refused.value.code == "NOPERM"
        with pytest.raises(lib.exceptions.NoPermissionError):
            worker.execute_command("LOCK.LEASE", "REVOKE", lease_id(lease.session))
        assert lease.held and lease.release() is True
    finally:
        worker.close()


def test_auto_falls_back_to_extends_where_lock_lease_is_refused(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    admin.acl_setuser("old", enabled=True, nopass=True, keys=["*"], commands=[
        "-@all", "+lock.acquire", "+lock.release", "+lock.extend", "+lock.info"])  # fmt: skip
    old = lib.Redis(port=server.port, username="old", password="any", socket_timeout=5)
    try:
        locks = Locks(old)
        lease = locks.acquire("job", TTL)
        assert lease is not None and lease.session is None  # extended on its own
        wait_until(lambda: (locks.info("job") or {}).get("extends", 0) >= 2)
        assert lease.held and lease.release() is True
        assert locks.acquire("job", TTL, watchdog=False) is not None  # no grant tried again
        assert calls(admin, "lock.lease|grant") == 0
        with pytest.raises(ServerError) as refused:
            Locks(old, keepalive="session").acquire("other", TTL)
        assert refused.value.code == "NOPERM"
    finally:
        old.close()


def test_bad_session_arguments(client: Any) -> None:
    with pytest.raises(ValueError):
        Locks(client, keepalive="lease")  # type: ignore[arg-type]
    locks = Locks(client)
    for reason in ("", b"", "x" * 129):
        with pytest.raises(ValueError):
            locks.revoke("job", reason)
    with pytest.raises(TypeError):
        locks.revoke("job", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        locks.revoke(42)  # type: ignore[arg-type]
    assert locks.revoke(b"\x00job\r\n", "x" * 128) == 0


def test_asyncio_sessions(lib: ModuleType, server: Server, admin: Any) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            locks = aio.Locks(client)
            tasks = len(asyncio.all_tasks())
            holds = [await locks.acquire(f"job:{i}", TTL) for i in range(200)]
            held = [hold for hold in holds if hold is not None]
            session = held[0].session
            assert len(held) == 200 and session is not None
            assert {hold.session for hold in held} == {session}
            while locks._watchdog._batch is not None:  # counted between rounds
                await asyncio.sleep(0.005)
            assert len(asyncio.all_tasks()) - tasks <= 2  # the watchdog and its wait
            assert int(admin.info("lock")["lock_leases"]) == 1
            admin.config_resetstat()
            while calls(admin, "lock.lease|keepalive") < 4:
                await asyncio.sleep(0.02)
            assert calls(admin, "lock.extend") == 0 and all(hold.held for hold in held)

            assert await locks.revoke("job:3", "stuck") == 1  # one hold taken
            await asyncio.wait_for(held[3].lost.wait(), 5)
            assert (held[3].lost_reason, held[3].revoked_reason) == (LostReason.REVOKED, "stuck")
            assert sum(hold.held for hold in held) == 199

            await client.execute_command("LOCK.LEASE", "REVOKE", lease_id(session))
            again = await locks.acquire("job:again", TTL)  # NOLEASE, then a new lease
            assert again is not None and again.session not in (None, session)
            for hold in held:
                await asyncio.wait_for(hold.lost.wait(), 5)
            assert held[0].revoked_reason == "lease revoked"
            assert await again.release() is True
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())


def test_asyncio_keepalives_that_fail_lose_every_hold_at_once(
    lib: ModuleType, server: Server
) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            locks = aio.Locks(client, safety_margin=0.25)
            holds = [await locks.acquire(f"job:{i}", 0.9) for i in range(20)]
            held = [hold for hold in holds if hold is not None]
            assert len(held) == 20
            await asyncio.sleep(0.35)
            server.pause()
            try:
                await asyncio.wait_for(held[0].lost.wait(), 5)
                assert all(hold.lost.is_set() for hold in held)
                assert {hold.lost_reason for hold in held} == {LostReason.EXPIRED}
            finally:
                server.resume()
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())
