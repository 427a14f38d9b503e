"""The synchronous API against a real server, with redis-py and valkey-py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from types import ModuleType
from typing import Any

import pytest
from conftest import Server, renewals, wait_until

from redis_lock_client import LimitReached, Locks, Lost, LostReason, NotAcquired, ServerError


def test_acquire_extend_release(client: Any, admin: Any) -> None:
    locks = Locks(client, keepalive="extend")  # an attached hold's extend moves nothing
    lease = locks.acquire("billing", 5.0)
    assert lease is not None
    assert uuid.UUID(lease.token).version == 4
    assert lease.fence > 0
    info = locks.info("billing")
    assert info is not None and info["fence"] == lease.fence
    assert 4000 < admin.pttl("billing") <= 5000

    lease.extend(20.0)
    assert 19000 < admin.pttl("billing") <= 20000
    assert lease.valid_until <= time.monotonic() + 20.0

    assert lease.release() is True
    assert locks.info("billing") is None
    assert lease.release() is False
    assert not lease.lost.is_set()


def test_a_held_key_gives_none_and_lock_raises_not_acquired(client: Any) -> None:
    locks = Locks(client)
    with locks.lock("billing", 5.0) as first:
        assert locks.acquire("billing", 5.0) is None
        with pytest.raises(NotAcquired), locks.lock("billing", 5.0):
            pass
        assert locks.info("billing") is not None
    assert first.released
    with locks.lock("billing", 5.0) as second:
        assert second.fence > first.fence


def test_lock_releases_when_the_block_raises(client: Any) -> None:
    locks = Locks(client)
    with pytest.raises(KeyError), locks.lock("billing", 5.0):
        raise KeyError("the work failed")
    assert locks.info("billing") is None


def test_wait_hands_off_between_two_processes(lib: ModuleType, client: Any, server: Server) -> None:
    locks = Locks(client)
    holder = locks.acquire("billing", 5.0)
    assert holder is not None
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER, lib.__name__, str(server.port), "billing"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: (locks.info("billing") or {}).get("waiters") == 1)
        holder.extend()  # the shared connection is not blocked by anyone's wait
        assert holder.release() is True
        out, _ = waiter.communicate(timeout=10)
    finally:
        waiter.kill()
    assert waiter.returncode == 0
    assert int(out) > holder.fence
    assert locks.info("billing") is None


WAITER = """
import importlib, sys
from redis_lock_client import Locks
lib = importlib.import_module(sys.argv[1])
with Locks(lib.Redis(port=int(sys.argv[2]))).lock(sys.argv[3], 5.0, wait=10) as lease:
    print(lease.fence)
"""


def test_wait_that_runs_out_gives_none(client: Any) -> None:
    locks = Locks(client)
    holder = locks.acquire("billing", 5.0)
    assert holder is not None
    started = time.monotonic()
    assert locks.acquire("billing", 5.0, wait=0.2) is None
    assert 0.15 < time.monotonic() - started < 2
    with pytest.raises(NotAcquired), locks.lock("billing", 5.0, wait=0.05):
        pass
    info = locks.info("billing")
    assert info is not None and info["waiters"] == 0 and info["fence"] == holder.fence


def test_watchdog_keeps_the_lease_for_five_ttls(client: Any, admin: Any, keepalive: str) -> None:
    locks = Locks(client, keepalive=keepalive)  # type: ignore[arg-type]
    # A machine that stalls the keepalive thread for longer than a short
    # lease's margin loses it, rightly: then the same is asked of a longer
    # lease, rather than failing because the machine was busy.
    for ttl in (0.5, 2.0, 5.0):
        try:
            with locks.lock("billing", ttl) as lease:
                time.sleep(5 * ttl)
                if lease.lost.is_set() and ttl < 5.0:
                    continue
                assert not lease.lost.is_set()
                info = locks.info("billing")
                assert info is not None and info["fence"] == lease.fence
                assert renewals(admin, info, keepalive) >= 6
                return
        except Lost:
            if ttl == 5.0:
                raise


def test_lost_when_the_key_is_deleted(client: Any, admin: Any) -> None:
    locks = Locks(client)
    with pytest.raises(Lost) as raised, locks.lock("billing", 0.6) as lease:
        admin.delete("billing")
        assert lease.lost.wait(1.0)
        assert lease.lost_reason is LostReason.REFUSED
    assert raised.value.reason is LostReason.REFUSED


def test_lost_before_the_deadline_when_the_server_is_paused(client: Any, server: Server) -> None:
    locks = Locks(client, safety_margin=0.25)  # room for a slow thread wake-up on a busy machine
    lease = locks.acquire("billing", 0.9)
    assert lease is not None
    time.sleep(0.35)  # one extend done
    server.pause()
    try:
        assert lease.lost.wait(2.0)
        assert time.monotonic() < lease.valid_until  # set before the client's deadline
        assert lease.lost_reason is LostReason.EXPIRED
        time.sleep(lease.valid_until - time.monotonic() + 0.1)
    finally:
        server.resume()
    assert lease.release() is False  # the server let it expire meanwhile
    assert locks.info("billing") is None


def test_a_waiter_killed_by_an_operator_is_never_granted(client: Any, admin: Any) -> None:
    locks = Locks(client)
    holder = locks.acquire("billing", 5.0)
    assert holder is not None
    failures: list[BaseException] = []

    def wait() -> None:
        try:
            locks.acquire("billing", 5.0, wait=10)
        except BaseException as error:
            failures.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: waiting_clients(admin))
    killed = time.monotonic()
    for client_id in waiting_clients(admin):
        admin.execute_command("CLIENT", "KILL", "ID", client_id)
    waiter.join(5)
    assert not waiter.is_alive() and time.monotonic() - killed < 2
    assert len(failures) == 1 and "onnection" in type(failures[0]).__name__
    assert not waiting_clients(admin)  # it did not reconnect and queue again
    assert holder.release() is True
    time.sleep(0.1)
    assert locks.info("billing") is None


def waiting_clients(admin: Any) -> list[str]:
    """The ids of the connections blocked in LOCK.ACQUIRE … WAIT."""
    return [
        str(c["id"])
        for c in admin.client_list()
        if c["cmd"] == "lock.acquire" and "b" in c["flags"]
    ]


def test_guard_runs_the_command_while_held(client: Any, admin: Any) -> None:
    locks = Locks(client)
    with locks.lock("billing", 5.0) as lease:
        assert lease.guard("SET", "total", "42") in (b"OK", "OK", True)
        assert lease.guard("GET", "total") == b"42"
        with pytest.raises(ServerError) as wrong_type:
            lease.guard("LPUSH", "total", "x")
        assert wrong_type.value.code == "WRONGTYPE"
        with pytest.raises(ServerError) as blocking:
            lease.guard("BLPOP", "queue", "0")
        assert blocking.value.code == "ERR" and "blocking" in str(blocking.value)
        assert not lease.lost.is_set()


def test_guard_raises_lost_and_runs_nothing_once_the_lock_is_gone(client: Any, admin: Any) -> None:
    locks = Locks(client)
    lease = locks.acquire("billing", 5.0)
    assert lease is not None
    admin.delete("billing")
    with pytest.raises(Lost) as raised:
        lease.guard("SET", "total", "42")
    assert "LOST" in str(raised.value)
    assert lease.lost.is_set() and lease.lost_reason is LostReason.REFUSED
    assert admin.get("total") is None
    assert lease.release() is False


def test_limit_reached_on_extend_and_in_the_watchdog(client: Any, admin: Any) -> None:
    admin.config_set("lock.max-extends", 1)
    locks = Locks(client)
    lease = locks.acquire("manual", 5.0, watchdog=False)
    assert lease is not None
    lease.extend()
    with pytest.raises(LimitReached):
        lease.extend()
    assert lease.release() is True  # it still held the lock

    # The hold policy does not bound a hold attached to a session: its lease does.
    watched = Locks(client, safety_margin=0.25, keepalive="extend").acquire("watched", 0.6)
    assert watched is not None
    assert watched.lost.wait(1.0)
    assert watched.lost_reason is LostReason.LIMIT
    assert time.monotonic() < watched.valid_until


def test_a_session_lock_ends_with_its_connection(client: Any, admin: Any) -> None:
    locks = Locks(client)
    lease = locks.acquire("billing", 5.0, session=True)
    assert lease is not None
    (session_id,) = [str(c["id"]) for c in admin.client_list() if c["cmd"] == "lock.acquire"]
    admin.execute_command("CLIENT", "KILL", "ID", session_id)
    wait_until(lambda: locks.info("billing") is None)
    assert lease.lost.wait(2.0) and lease.lost_reason is LostReason.REFUSED

    with locks.lock("billing", 5.0, session=True, wait=1) as again:
        assert again.fence > lease.fence
    assert locks.info("billing") is None


def test_resp3_and_decoded_replies(lib: ModuleType, server: Server) -> None:
    client = lib.Redis(port=server.port, protocol=3, decode_responses=True)
    locks = Locks(client)
    with locks.lock("billing", 5.0, wait=1) as lease:
        info = locks.info("billing")
        assert info is not None and info["fence"] == lease.fence
        assert lease.guard("SET", "total", "1") in ("OK", True)
    client.close()


def test_bad_arguments_are_refused_before_sending(client: Any) -> None:
    locks = Locks(client)
    for ttl in (0, -1, 0.0001, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            locks.acquire("billing", ttl)
    for not_a_number in ("10", None, True):
        with pytest.raises(TypeError):
            locks.acquire("billing", not_a_number)  # type: ignore[arg-type]
    for wait in (-1, 0, float("inf"), 400 * 86400):
        with pytest.raises(ValueError):
            locks.acquire("billing", 1, wait=wait)
    with pytest.raises(TypeError):
        locks.acquire(42, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Locks("redis://127.0.0.1")
    with pytest.raises(ValueError):
        Locks(client, safety_margin=0.7)
    lease = locks.acquire("billing", 1)
    assert lease is not None
    with pytest.raises(ValueError):
        lease.guard()
    with pytest.raises(ValueError):
        lease.extend(0)
    assert lease.release() is True


def test_server_refusals_are_server_errors(client: Any, admin: Any) -> None:
    locks = Locks(client)
    admin.config_set("lock.max-ttl-ms", 1000)
    with pytest.raises(ServerError) as too_long:
        locks.acquire("billing", 5.0)
    assert too_long.value.code == "ERR" and "max-ttl-ms" in str(too_long.value)
    admin.set("string", "value")
    with pytest.raises(ServerError) as wrong_type:
        locks.acquire("string", 0.5)
    assert wrong_type.value.code == "WRONGTYPE"
    with pytest.raises(ServerError):
        locks.info("string")
