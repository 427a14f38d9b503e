"""The module version check: `MODULE LIST`, asked once per `Locks` (sync and
asyncio) before its first command. The module built from this tree passes,
with one `MODULE LIST` for many commands; a server without the module is
refused with `ModuleVersionError` naming both versions; a user whose ACL
refuses `MODULE LIST` is let through. The comparison (older builds' `ver 1`,
RESP2 and RESP3 replies) is tested on replies made by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import Server

import redis_lock_client
from redis_lock_client import REQUIRED_MODULE_VERSION, Locks, ModuleVersionError
from redis_lock_client import asyncio as async_locks
from redis_lock_client._version import check, lock_module_in


def module_list_calls(admin: Any) -> int:
    """`MODULE LIST`'s calls in `INFO commandstats` (0 when never called)."""
    stats = admin.info("commandstats").get("cmdstat_module|list")
    return 0 if stats is None else int(stats["calls"])


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Server]:
    """A server without the module."""
    started = Server(tmp_path, module=False)
    yield started
    started.stop()


def test_the_package_version_is_the_distributions_and_needs_its_own_minor() -> None:
    assert redis_lock_client.__version__ == version("redis-lock-client")
    major, minor, _patch = (int(p) for p in redis_lock_client.__version__.split("."))
    assert major * 10000 + minor * 100 == REQUIRED_MODULE_VERSION == 400


def module(name: str, ver: object) -> list[object]:
    return [b"name", name.encode(), b"ver", ver, b"path", b"/x.so", b"args", []]


def test_the_lock_module_is_found_in_every_form_of_reply() -> None:
    assert lock_module_in([module("search", 20810), module("lock", 400)]) == (True, 400)
    assert lock_module_in([{"name": "lock", "ver": 1}]) == (True, 1)  # RESP3, decoded
    assert lock_module_in([{b"name": b"lock", b"ver": b"401"}]) == (True, 401)
    assert lock_module_in([module("bf", 1)]) == (True, None)
    assert lock_module_in([]) == (True, None)
    assert lock_module_in(None) == (False, None)  # an error reply: nothing decided
    assert lock_module_in([module("lock", "x")]) == (False, None)


@pytest.mark.parametrize("ver", [400, 401, 499, 10000])
def test_this_module_or_a_newer_one_passes(ver: int) -> None:
    check([module("lock", ver)])


@pytest.mark.parametrize("ver", [1, 300, 399, None])
def test_an_older_or_missing_module_is_refused_naming_both_versions(ver: int | None) -> None:
    reply = [module("other", 1)] if ver is None else [module("lock", ver)]
    with pytest.raises(ModuleVersionError) as refused:
        check(reply)
    assert refused.value.found == ver and refused.value.required == 400
    said = str(refused.value)
    assert f"redis-lock-client {redis_lock_client.__version__}" in said
    assert "0.4.0 or newer" in said
    assert ("no lock module loaded" if ver is None else f"ver {ver}") in said
    check(None)  # an error reply (NOPERM): let through


def test_the_module_of_this_tree_passes_once_per_locks(client: Any, admin: Any) -> None:
    locks = Locks(client)
    assert module_list_calls(admin) == 0, "nothing asked before the first command"
    for _ in range(3):
        with locks.lock("job", 10.0):
            assert locks.info("job") is not None
    assert module_list_calls(admin) == 1


def test_asyncio_passes_once_per_locks(lib: ModuleType, server: Server, admin: Any) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            locks = async_locks.Locks(client)
            # Concurrent first commands: still one check.
            await asyncio.gather(*(locks.info(f"k{i}") for i in range(5)))
            async with locks.lock("job", 10.0):
                pass
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())
    assert module_list_calls(admin) == 1


def test_a_server_without_the_module_is_refused(lib: ModuleType, bare: Server) -> None:
    client = lib.Redis(port=bare.port, socket_timeout=5)
    try:
        locks = Locks(client)
        for _ in range(2):  # a refusal is not remembered: the module may come
            with pytest.raises(ModuleVersionError) as refused:
                locks.acquire("job", 10.0)
            assert refused.value.found is None
            assert "no lock module loaded" in str(refused.value)
        with pytest.raises(ModuleVersionError):
            locks.info("job")
    finally:
        client.close()


def test_asyncio_refuses_a_server_without_the_module(lib: ModuleType, bare: Server) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=bare.port, socket_timeout=5)
        try:
            locks = async_locks.Locks(client)
            with pytest.raises(async_locks.ModuleVersionError) as refused:
                async with locks.lock("job", 10.0):
                    pass
            assert refused.value.found is None
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())


def test_a_user_without_module_list_is_not_checked(
    lib: ModuleType, server: Server, admin: Any
) -> None:
    admin.acl_setuser("worker", enabled=True, nopass=True, keys=["*"], channels=["*"],
                      commands=["+@all", "-module"])  # fmt: skip
    worker = lib.Redis(port=server.port, username="worker", password="any", socket_timeout=5)
    try:
        with Locks(worker).lock("job", 10.0) as lease:
            assert lease.held
    finally:
        worker.close()
