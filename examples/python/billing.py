"""The nightly billing job with redis-lock from Python (redis-py).

Several workers (threads here, processes in real life) try to run the job at
once; exactly one gets the lock and runs it. A renewal thread extends the
lease every ttl/3 and flags the loss if an extend is refused or the deadline
(minus a margin) passes. Every ledger write carries the fence; the ledger
refuses stale fences.

    redis-server --port 6379 --loadmodule target/debug/libredis_lock.so &
    pip install redis
    REDIS_URL=redis://127.0.0.1:6379/ python3 examples/python/billing.py

Exits non-zero if the outcome is not the one described (CI runs it).
"""

import os
import sys
import threading
import time
import uuid

import redis

TTL_MS = 2000
MARGIN_S = 0.2
WORKERS = 5


class Ledger:
    """Stands for the database: refuses writes with a fence below the highest seen."""

    def __init__(self):
        self.lock = threading.Lock()
        self.highest_fence = 0
        self.invoices = {}

    def write_invoice(self, fence, customer, cents):
        with self.lock:
            if fence < self.highest_fence:
                raise ValueError(f"stale fence {fence} (seen {self.highest_fence}): write refused")
            self.highest_fence = fence
            self.invoices[customer] = (cents, fence)


class Lease:
    """A held lock: keeps itself alive until release(), sets `lost` on loss."""

    def __init__(self, r, key, token, fence, sent):
        self.r, self.key, self.token, self.fence = r, key, token, fence
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._valid_until = sent + TTL_MS / 1000  # on the monotonic clock
        self._thread = threading.Thread(target=self._renew, daemon=True)
        self._thread.start()

    def _renew(self):
        while not self._stop.wait(TTL_MS / 3000):
            sent = time.monotonic()
            try:
                extended = self.r.execute_command("LOCK.EXTEND", self.key, self.token, TTL_MS)
            except redis.RedisError:
                extended = None  # try again until the deadline
            if extended == 1:
                self._valid_until = sent + TTL_MS / 1000
            elif extended == 0 or time.monotonic() > self._valid_until - MARGIN_S:
                self.lost.set()
                return

    def release(self):
        self._stop.set()
        self._thread.join()
        return self.r.execute_command("LOCK.RELEASE", self.key, self.token) == 1


def say(line):
    sys.stdout.write(line + "\n")  # one write per line: threads do not interleave
    sys.stdout.flush()


def try_acquire(r, key):
    token = str(uuid.uuid4())
    sent = time.monotonic()
    reply = r.execute_command("LOCK.ACQUIRE", key, TTL_MS, "TOKEN", token)
    if reply is None:
        return None  # held by another worker
    _token, fence = reply
    return Lease(r, key, token, int(fence), sent)


def worker(url, night, ledger, ran, worker_id, start):
    r = redis.Redis.from_url(url)
    start.wait()
    lease = try_acquire(r, f"billing:nightly:{night}")
    if lease is None:
        say(f"[{night}] worker {worker_id}: another worker is running it, skipping")
        return
    try:
        for i, customer in enumerate(["acme", "globex", "initech"]):
            time.sleep(0.9)  # longer than the lease in total: the renewal keeps it
            if lease.lost.is_set():
                raise RuntimeError("lease lost: stopping the job")
            ledger.write_invoice(lease.fence, customer, 1000 * (i + 1))
        ran.append(lease.fence)
        say(f"[{night}] worker {worker_id}: ran the billing job with fence {lease.fence}")
    finally:
        lease.release()


def night(url, ledger, name):
    ran = []
    start = threading.Barrier(WORKERS)
    threads = [
        threading.Thread(target=worker, args=(url, name, ledger, ran, i, start))
        for i in range(WORKERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ran) == 1, f"exactly one worker ran the job on {name}: {ran}"
    return ran[0]


def main():
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/")
    ledger = Ledger()
    first = night(url, ledger, "2026-11-28")
    second = night(url, ledger, "2026-11-29")
    assert second > first, "the later holder has the larger fence"
    try:
        ledger.write_invoice(first, "acme", 999_999)
        raise AssertionError("a stale fence must be refused")
    except ValueError as refused:
        say(f"late write with fence {first}: {refused}")
    assert all(fence == second for _cents, fence in ledger.invoices.values())
    say(f"ledger: {ledger.invoices}")
    say("python billing example: ok")


if __name__ == "__main__":
    main()
