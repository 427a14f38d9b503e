"""What a lease costs the process and the server: threads and server clients.

    LOCK_MODULE=target/debug/libredis_lock.so python3 clients/python/tests/lease_cost.py

starts a server with the module, takes 1 and then 50 leases through one
`Locks` (sync, redis-py), waits until the watchdog has renewed each of them
at least once (its connections are open then), and prints the threads this
process runs (`threading.active_count()`) and the clients the server counts
(`CLIENT LIST`) beside the figures before the leases, for each way of
keeping them (`keepalive="session"`: one lease for all, renewed by its
keepalives; `"extend"`: an extend each). The asyncio API is measured too:
its tasks (`asyncio.all_tasks()`) and the server's clients. test_cost.py
asserts the same figures. hold_cost.py measures 1,000 holds for longer,
with the server's calls.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import Server

from redis_lock_client import Locks
from redis_lock_client import asyncio as aio

TTL = 0.9  # seconds: the watchdog extends every 0.3 s


def keepalives(admin: Any) -> int:
    return int(admin.info("lock")["lock_keepalives"])


def renewed_once(admin: Any, keys: list[str], keepalives_before: int) -> bool:
    """Each key was extended, or its session's lease kept alive, since."""
    infos = [_fields(admin.execute_command("LOCK.INFO", key)) for key in keys]
    if any(info is None for info in infos):
        return False
    if any(b"lease" in info for info in infos if info is not None):
        return keepalives(admin) > keepalives_before
    return all(int(info[b"extends"]) >= 1 for info in infos if info is not None)


def _fields(info: Any) -> dict[bytes, Any] | None:
    if info is None:
        return None
    return info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=True))


def wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s")
        time.sleep(0.02)


def measure(client: Any, admin: Any, leases: int, keepalive: str = "auto") -> tuple[int, int]:
    """Takes `leases` leases through one `Locks` over `client`, waits for a
    renewal of each, and returns (threads, server clients) added by them."""
    threads = threading.active_count()
    clients = len(admin.client_list())
    locks = Locks(client, keepalive=keepalive)  # type: ignore[arg-type]
    locks.info("warm-up")  # the client's own connection: not the leases' cost
    clients += 1
    keys = [f"cost:{keepalive}:{leases}:{i}" for i in range(leases)]
    before = keepalives(admin)
    held = [locks.acquire(key, TTL) for key in keys]
    try:
        wait_for(lambda: renewed_once(admin, keys, before))
        return threading.active_count() - threads, len(admin.client_list()) - clients
    finally:
        for lease in held:
            if lease is not None:
                lease.release()


async def measure_asyncio(
    client: Any, admin: Any, leases: int, keepalive: str = "auto"
) -> tuple[int, int]:
    """As `measure`, over an asyncio client: (tasks, server clients) added."""
    tasks = len(asyncio.all_tasks())
    clients = len(admin.client_list())
    locks = aio.Locks(client, keepalive=keepalive)  # type: ignore[arg-type]
    await locks.info("warm-up")
    clients += 1
    keys = [f"cost:async:{keepalive}:{leases}:{i}" for i in range(leases)]
    before = keepalives(admin)
    held = [await locks.acquire(key, TTL) for key in keys]
    try:
        while not renewed_once(admin, keys, before):
            await asyncio.sleep(0.02)
        while locks._watchdog._batch is not None:  # counted between rounds, not during one
            await asyncio.sleep(0.005)
        return len(asyncio.all_tasks()) - tasks, len(admin.client_list()) - clients
    finally:
        for lease in held:
            if lease is not None:
                await lease.release()


def main() -> None:
    import redis
    import redis.asyncio

    with tempfile.TemporaryDirectory() as directory:
        server = Server(Path(directory))
        try:
            admin = redis.Redis(port=server.port)
            for keepalive in ("extend", "session"):
                print(f"keepalive={keepalive!r}")
                print("leases  threads added  server clients added   (sync, one Locks, redis-py)")
                for leases in (1, 50):
                    client = redis.Redis(port=server.port)
                    threads, clients = measure(client, admin, leases, keepalive)
                    print(f"{leases:>6}  {threads:>13}  {clients:>20}")
                    client.close()
                print("leases  tasks added    server clients added   (asyncio, one Locks)")
                for leases in (1, 50):

                    async def run(count: int = leases, how: str = keepalive) -> tuple[int, int]:
                        client = redis.asyncio.Redis(port=server.port)
                        try:
                            return await measure_asyncio(client, admin, count, how)
                        finally:
                            await client.connection_pool.disconnect()

                    tasks, clients = asyncio.run(run())
                    print(f"{leases:>6}  {tasks:>11}  {clients:>22}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
