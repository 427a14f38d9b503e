"""The nightly billing job with redis-lock from Python (the redis-lock-client package).

Several workers (threads here, processes in real life) try to run the job at
once; exactly one gets the lock and runs it, while the package's watchdog
extends the lease and would set `lease.lost` on a loss. Every ledger write
carries the fence; the ledger refuses stale fences. An auditor waits in the
server's queue for the job to finish, then records the night's total in
Redis with a guarded write, which runs only while its lease holds.

    redis-server --port 6379 --loadmodule target/debug/libredis_lock.so &
    pip install ./clients/python
    REDIS_URL=redis://127.0.0.1:6379/ python3 examples/python/billing.py

Exits non-zero if the outcome is not the one described (CI runs it).
"""

import os
import sys
import threading
import time

import redis

from redis_lock_client import Locks, NotAcquired

TTL = 2.0  # seconds; the job runs longer, the watchdog extends the lease
WORKERS = 5


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

    def total(self, night):
        with self.lock:
            return sum(cents for (n, _), (cents, _) in self.invoices.items() if n == night)


def say(line):
    sys.stdout.write(line + "\n")  # one write per line: threads do not interleave
    sys.stdout.flush()


def worker(locks, night, ledger, ran, worker_id, start, job_started):
    start.wait()
    try:
        with locks.lock(f"billing:nightly:{night}", TTL) as lease:
            job_started.set()
            for i, customer in enumerate(["acme", "globex", "initech"]):
                time.sleep(0.9)  # longer than the lease in total: the watchdog keeps it
                if lease.lost.is_set():
                    raise RuntimeError(f"lease lost ({lease.lost_reason}): stopping the job")
                ledger.write_invoice(lease.fence, night, customer, 1000 * (i + 1))
            ran.append(lease.fence)
            say(f"[{night}] worker {worker_id}: ran the billing job with fence {lease.fence}")
    except NotAcquired:
        say(f"[{night}] worker {worker_id}: another worker is running it, skipping")


def audit(locks, night, ledger, audited):
    """Waits (on a connection of its own) until the job releases the lock."""
    with locks.lock(f"billing:nightly:{night}", TTL, wait=30) as lease:
        total = ledger.total(night)
        lease.guard("SET", f"billing:total:{night}", total)
        audited.append(lease.fence)
        say(f"[{night}] auditor: recorded the total {total} with fence {lease.fence}")


def night(url, ledger, name):
    locks = Locks(redis.Redis.from_url(url))
    ran, audited = [], []
    start, job_started = threading.Barrier(WORKERS), threading.Event()
    threads = [
        threading.Thread(target=worker, args=(locks, name, ledger, ran, i, start, job_started))
        for i in range(WORKERS)
    ]
    for t in threads:
        t.start()
    assert job_started.wait(10), "a worker got the lock"
    auditor = threading.Thread(target=audit, args=(locks, name, ledger, audited))
    auditor.start()
    for t in [*threads, auditor]:
        t.join()
    assert len(ran) == 1, f"exactly one worker ran the job on {name}: {ran}"
    assert audited and audited[0] > ran[0], "the auditor came after the job, with a larger fence"
    stored = int(locks.client.get(f"billing:total:{name}"))
    assert stored == ledger.total(name) == 6000, f"the total in Redis: {stored}"
    return ran[0]


def main():
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/")
    ledger = Ledger()
    first = night(url, ledger, "2026-11-28")
    second = night(url, ledger, "2026-11-29")
    assert second > first, "the later holder has the larger fence"
    try:
        ledger.write_invoice(first, "2026-11-29", "acme", 999_999)
        raise AssertionError("a stale fence must be refused")
    except ValueError as refused:
        say(f"late write with fence {first}: {refused}")
    say(f"ledger: {ledger.invoices}")
    say("python billing example: ok")


if __name__ == "__main__":
    main()
