"""What `sync` costs: a synced acquire's latency, and the watchdog's waits.

    LOCK_MODULE=target/debug/libredis_lock.so python3 clients/python/tests/sync_cost.py

(`LOCK_TEST_SERVER=…/valkey-server` for another server) starts a master and
a replica with the module, then times 20 acquires one after the other
(each then released) without `sync` and with `ReplicaSync(1, 5)`, then 20
synced acquires at once (threads), and keeps those 20 leases through one
`Locks` (sync API, redis-py) until the watchdog extended each of them twice:
the server's `lock_syncs` count (`INFO lock`) shows how many waits for the
replicas the watchdog's extends cost (one a batch, not one a lease).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import Server, attach_replica

from redis_lock_client import Locks, ReplicaSync

ROUNDS = 20
LEASES = 20
SYNC = ReplicaSync(1, 5.0)


def timed(locks: Locks, sync: ReplicaSync | None) -> list[float]:
    """Milliseconds of each of ROUNDS acquires (released after)."""
    times = []
    for i in range(ROUNDS):
        started = time.monotonic()
        lease = locks.acquire(f"cost:{sync is not None}:{i}", 30.0, sync=sync)
        times.append((time.monotonic() - started) * 1000)
        assert lease is not None
        lease.release()
    return times


def syncs(admin: Any) -> int:
    return int(admin.info("lock")["lock_syncs"])


def extends(admin: Any, key: str) -> int:
    info = Locks(admin).info(key)
    return -1 if info is None else info["extends"]


def main() -> None:
    import redis

    with tempfile.TemporaryDirectory() as directory:
        server = Server(Path(directory))
        replica = attach_replica(server, Path(directory) / "replica")
        try:
            admin = redis.Redis(port=server.port)
            print(
                admin.info("server").get("valkey_version") or admin.info("server")["redis_version"]
            )
            locks = Locks(redis.Redis(port=server.port))
            for name, sync in (("without sync", None), ("sync=ReplicaSync(1, 5)", SYNC)):
                times = timed(locks, sync)
                print(
                    f"acquire {name}: median {statistics.median(times):.1f} ms, "
                    f"min {min(times):.1f}, max {max(times):.1f} ({ROUNDS} acquires)"
                )
            keys = [f"watched:{i}" for i in range(LEASES)]
            started = time.monotonic()
            with ThreadPoolExecutor(LEASES) as pool:
                leases = list(pool.map(lambda key: locks.acquire(key, 6.0, sync=SYNC), keys))
            took = (time.monotonic() - started) * 1000
            print(f"{LEASES} synced acquires at once: {took:.0f} ms in all")
            before = syncs(admin)
            deadline = time.monotonic() + 60
            while min(extends(admin, key) for key in keys) < 2:
                assert time.monotonic() < deadline, "the watchdog did not extend them"
                time.sleep(0.05)
            waits = syncs(admin) - before
            done = sum(extends(admin, key) for key in keys)
            print(f"{LEASES} synced leases: {done} extends, {waits} waits for the replicas")
            for lease in leases:
                assert lease is not None and lease.held
                lease.release()
        finally:
            replica.stop()
            server.stop()


if __name__ == "__main__":
    main()
