"""The nightly billing job with redis-lock from Python (the redis-lock-client package).

Several workers (threads here, processes in real life) try to run the job at
once; exactly one gets the lock and runs it, while the package's watchdog
extends the lease and would set `lease.lost` on a loss. Every ledger write
carries the fence; the ledger refuses stale fences. The day's total, a Redis
key next to the lock (`{billing}:total:<night>`, the same hash tag), is
written only under the lock, with `lease.guard("INCRBY", ...)` (the server's
`LOCK.GUARD`): a stale holder's write is refused by the server (`LOST`) and
changes nothing.

    redis-server --port 6379 --loadmodule target/debug/libredis_lock.so &
    make dist-python && pip install target/dist/redis_lock_client-*.whl
    REDIS_URL=redis://127.0.0.1:6379/ python3 examples/python/billing.py

Exits non-zero if the outcome is not the one described (CI runs it).
"""

import os
import sys
import threading
import time

import redis

from redis_lock_client import Locks, Lost, NotAcquired

TTL = 2.0  # seconds; the job runs longer, the watchdog extends the lease
WORKERS = 5
NIGHTS = ["2026-11-28", "2026-11-29"]
INVOICES = [("acme", 1000), ("globex", 2000), ("initech", 3000)]
NIGHT_TOTAL = 6000  # the sum of the invoices


def lock_key(night):
    # The same hash tag as the total: in a cluster, LOCK.GUARD goes to the
    # lock key's master, which must own the total too.
    return f"{{billing}}:nightly:{night}"


def total_key(night):
    return f"{{billing}}:total:{night}"


class Ledger:
    """Stands for the database: refuses writes with a fence below the highest seen."""

    def __init__(self):
        self.lock = threading.Lock()
        self.highest_fence = 0
        self.invoices = {}

    def write_invoice(self, fence, night, customer, cents):
        with self.lock:
            if fence < self.highest_fence:
                raise ValueError(f"stale fence {fence} (seen {self.highest_fence}): write refused")
            self.highest_fence = fence
            self.invoices[night, customer] = (cents, fence)


def say(line):
    sys.stdout.write(line + "\n")  # one write per line: threads do not interleave
    sys.stdout.flush()


def worker(locks, night, ledger, ran, worker_id, start):
    start.wait()
    try:
        with locks.lock(lock_key(night), TTL) as lease:
            for customer, cents in INVOICES:
                time.sleep(0.9)  # longer than the lease in total: the watchdog keeps it
                if lease.lost.is_set():
                    raise RuntimeError(f"lease lost ({lease.lost_reason}): stopping the job")
                ledger.write_invoice(lease.fence, night, customer, cents)
                # Added only if the lease is live on the server (else Lost).
                lease.guard("INCRBY", total_key(night), cents)
            ran.append(lease.fence)
            say(f"[{night}] worker {worker_id}: ran the billing job with fence {lease.fence}")
    except NotAcquired:
        say(f"[{night}] worker {worker_id}: another worker is running it, skipping")


def night(locks, ledger, name):
    ran = []
    start = threading.Barrier(WORKERS)
    threads = [
        threading.Thread(target=worker, args=(locks, name, ledger, ran, i, start))
        for i in range(WORKERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ran) == 1, f"exactly one worker ran the job on {name}: {ran}"
    return ran[0]


def total(r, night):
    return int(r.get(total_key(night)) or 0)


def stale_holder(locks, night):
    """A rerun of `night` gets the lock with a short lease and stalls (a GC
    pause, a stopped VM) past it, with no watchdog. When it wakes up, its
    guarded write to the total is refused by the server: nothing is written."""
    stale = locks.acquire(lock_key(night), 0.2, watchdog=False)
    assert stale is not None, "the night's job is over: the lock is free"
    time.sleep(0.5)
    try:
        stale.guard("INCRBY", total_key(night), 999_999)
        raise AssertionError("a stale holder's guarded write must be refused")
    except Lost as refused:
        say(f"stale guarded write to {total_key(night)}: refused, LOST ({refused})")
    assert stale.lost.is_set()
    assert not stale.release(), "the stale lease was gone"


def main():
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/")
    r = redis.Redis.from_url(url)
    locks = Locks(r)
    # Start from no totals, so that the example can run again on one server.
    r.delete(*[total_key(night) for night in NIGHTS])
    ledger = Ledger()
    first = night(locks, ledger, NIGHTS[0])
    second = night(locks, ledger, NIGHTS[1])
    assert second > first, "the later holder has the larger fence"
    for name in NIGHTS:
        assert total(r, name) == NIGHT_TOTAL, f"{name}: {total(r, name)}"
    stale_holder(locks, NIGHTS[1])
    assert total(r, NIGHTS[1]) == NIGHT_TOTAL, "the stale write changed nothing"
    try:
        ledger.write_invoice(first, NIGHTS[1], "acme", 999_999)
        raise AssertionError("a stale fence must be refused")
    except ValueError as refused:
        say(f"late write with fence {first}: {refused}")
    assert all(fence == second for (n, _), (_c, fence) in ledger.invoices.items() if n == NIGHTS[1])
    say(f"ledger: {ledger.invoices}")
    for name in NIGHTS:
        say(f"total {total_key(name)}: {total(r, name)}")
    say("python billing example: ok")


if __name__ == "__main__":
    main()
