"""What leases cost (lease_cost.py measures it): one watchdog per `Locks`,
whatever the number of leases, and no server connection per lease, in both
ways of keeping them (one session lease for all, or an extend each)."""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import Any

from conftest import Server
from lease_cost import measure, measure_asyncio


def test_fifty_leases_share_one_watchdog_thread_and_one_connection(
    client: Any, admin: Any, keepalive: str
) -> None:
    assert measure(client, admin, 1, keepalive) == (1, 1)
    threads, clients = measure(client, admin, 50, keepalive)
    assert threads <= 1  # the watchdog of the first measure may still run
    assert clients <= 1  # the watchdog's connection


def test_fifty_asyncio_leases_share_one_watchdog_task_and_the_clients_pool(
    lib: ModuleType, server: Server, admin: Any, keepalive: str
) -> None:
    async def main() -> None:
        client = lib.asyncio.Redis(port=server.port, socket_timeout=5)
        try:
            tasks, clients = await measure_asyncio(client, admin, 50, keepalive)
            assert tasks <= 2  # the watchdog, and its wait for the next round
            assert clients <= 1  # a second connection of the client's pool at most
        finally:
            await client.connection_pool.disconnect()

    asyncio.run(main())
