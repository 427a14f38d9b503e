"""What a lease costs the process and the server: threads and server clients.

    LOCK_MODULE=target/debug/libredis_lock.so python3 clients/python/tests/lease_cost.py

starts a server with the module, takes 1 and then 50 leases through one
`Locks` (sync, redis-py), waits until the watchdog has extended each of them
at least once (its connections are open then), and prints the threads this
process runs (`threading.active_count()`) and the clients the server counts
(`CLIENT LIST`) beside the figures before the leases. The asyncio API is
measured too: its tasks (`asyncio.all_tasks()`) and the server's clients.
test_cost.py asserts the same figures.
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


def extended_once(admin: Any, keys: list[str]) -> bool:
    infos = [admin.execute_command("LOCK.INFO", key) for key in keys]
    return all(_extends(info) >= 1 for info in infos)


def _extends(info: Any) -> int:
    if info is None:
        return -1
    fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=True))
    return int(fields[b"extends"])


def wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s")
        time.sleep(0.02)


def measure(client: Any, admin: Any, leases: int) -> tuple[int, int]:
    """Takes `leases` leases through one `Locks` over `client`, waits for an
    extend of each, and returns (threads, server clients) added by them."""
    threads = threading.active_count()
    clients = len(admin.client_list())
    locks = Locks(client)
    locks.info("warm-up")  # the client's own connection: not the leases' cost
    clients += 1
    keys = [f"cost:{leases}:{i}" for i in range(leases)]
    held = [locks.acquire(key, TTL) for key in keys]
    try:
        wait_for(lambda: extended_once(admin, keys))
        return threading.active_count() - threads, len(admin.client_list()) - clients
    finally:
        for lease in held:
            if lease is not None:
                lease.release()


async def measure_asyncio(client: Any, admin: Any, leases: int) -> tuple[int, int]:
    """As `measure`, over an asyncio client: (tasks, server clients) added."""
    tasks = len(asyncio.all_tasks())
    clients = len(admin.client_list())
    locks = aio.Locks(client)
    await locks.info("warm-up")
    clients += 1
    keys = [f"cost:async:{leases}:{i}" for i in range(leases)]
    held = [await locks.acquire(key, TTL) for key in keys]
    try:
        while not extended_once(admin, keys):
            await asyncio.sleep(0.02)
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
            print("leases  threads added  server clients added   (sync, one Locks, redis-py)")
            for leases in (1, 50):
                client = redis.Redis(port=server.port)
                threads, clients = measure(client, admin, leases)
                print(f"{leases:>6}  {threads:>13}  {clients:>20}")
                client.close()
            print("leases  tasks added    server clients added   (asyncio, one Locks)")
            for leases in (1, 50):

                async def run(count: int = leases) -> tuple[int, int]:
                    client = redis.asyncio.Redis(port=server.port)
                    try:
                        return await measure_asyncio(client, admin, count)
                    finally:
                        await client.connection_pool.disconnect()

                tasks, clients = asyncio.run(run())
                print(f"{leases:>6}  {tasks:>11}  {clients:>22}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
