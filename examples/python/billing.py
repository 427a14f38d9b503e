"""The nightly billing job with redis-lock from Python (redis-py).

Several workers (threads here, processes in real life) try to run the job at
once; exactly one gets the lock and runs it. A renewal thread extends the
lease every ttl/3 and flags the loss if an extend is refused or the deadline
(minus a margin) passes. Every ledger write carries the fence; the ledger
refuses stale fences. The day's total, a Redis key next to the lock
(`{billing}:total:<night>`, the same hash tag), is written only under the
lock, with `LOCK.GUARD key token INCRBY ...`: a stale holder's write is
refused by the server (`LOST`) and changes nothing.

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
NIGHTS = ["2026-11-28", "2026-11-29"]
INVOICES = [("acme", 1000), ("globex", 2000), ("initech", 3000)]
NIGHT_TOTAL = 6000  # the sum of the invoices


def lock_key(night):
    # The same hash tag as the total: in a cluster, LOCK.GUARD goes to the
    # lock key's master, which must own the total too.
    return f"{{billing}}:nightly:{night}"


def total_key(night):
    return f"{{billing}}:total:{night}"


class LockLost(Exception):
    """The server answered a guarded command with LOST: nothing ran."""


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

    def __init__(self, r, key, token, fence, sent, renew=True):
        self.r, self.key, self.token, self.fence = r, key, token, fence
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._valid_until = sent + TTL_MS / 1000  # on the monotonic clock
        self._thread = threading.Thread(target=self._renew, daemon=True)
        if renew:
            self._thread.start()

    def guard(self, *command):
        """Run `command` only while this lease holds the lock, in one atomic
        step with the server's check; its reply, or LockLost (and `lost` set)."""
        try:
            return self.r.execute_command("LOCK.GUARD", self.key, self.token, *command)
        except redis.ResponseError as e:
            if str(e).startswith("LOST "):
                self.lost.set()
                raise LockLost(str(e)) from e
            raise  # the command's own error, or one LOCK.GUARD refuses to run

    def _renew(self):
        while not self._stop.wait(TTL_MS / 3000):
            if self.lost.is_set():
                return  # a guarded command was answered LOST
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
        if self._thread.is_alive():
            self._thread.join()
        return self.r.execute_command("LOCK.RELEASE", self.key, self.token) == 1


def say(line):
    sys.stdout.write(line + "\n")  # one write per line: threads do not interleave
    sys.stdout.flush()


def try_acquire(r, key, ttl_ms=TTL_MS, renew=True):
    token = str(uuid.uuid4())
    sent = time.monotonic()
    reply = r.execute_command("LOCK.ACQUIRE", key, ttl_ms, "TOKEN", token)
    if reply is None:
        return None  # held by another worker
    _token, fence = reply
    return Lease(r, key, token, int(fence), sent, renew)


def worker(url, night, ledger, ran, worker_id, start):
    r = redis.Redis.from_url(url)
    start.wait()
    lease = try_acquire(r, lock_key(night))
    if lease is None:
        say(f"[{night}] worker {worker_id}: another worker is running it, skipping")
        return
    try:
        for customer, cents in INVOICES:
            time.sleep(0.9)  # longer than the lease in total: the renewal keeps it
            if lease.lost.is_set():
                raise RuntimeError("lease lost: stopping the job")
            ledger.write_invoice(lease.fence, customer, cents)
            # Added only if the lease is live on the server (else LockLost).
            lease.guard("INCRBY", total_key(night), cents)
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


def total(r, night):
    return int(r.get(total_key(night)) or 0)


def stale_holder(r, night):
    """A rerun of `night` gets the lock with a short lease and stalls (a GC
    pause, a stopped VM) past it, renewing nothing. When it wakes up, its
    guarded write to the total is refused by the server: nothing is written."""
    stale = try_acquire(r, lock_key(night), ttl_ms=200, renew=False)
    assert stale is not None, "the night's job is over: the lock is free"
    time.sleep(0.5)
    try:
        stale.guard("INCRBY", total_key(night), 999_999)
        raise AssertionError("a stale holder's guarded write must be refused")
    except LockLost as refused:
        say(f"stale guarded write to {total_key(night)}: refused, LOST ({refused})")
    assert stale.lost.is_set()
    assert not stale.release(), "the stale lease was gone"


def main():
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/")
    r = redis.Redis.from_url(url)
    # Start from no totals, so that the example can run again on one server.
    r.delete(*[total_key(night) for night in NIGHTS])
    ledger = Ledger()
    first = night(url, ledger, NIGHTS[0])
    second = night(url, ledger, NIGHTS[1])
    assert second > first, "the later holder has the larger fence"
    for name in NIGHTS:
        assert total(r, name) == NIGHT_TOTAL, f"{name}: {total(r, name)}"
    stale_holder(r, NIGHTS[1])
    assert total(r, NIGHTS[1]) == NIGHT_TOTAL, "the stale write changed nothing"
    try:
        ledger.write_invoice(first, "acme", 999_999)
        raise AssertionError("a stale fence must be refused")
    except ValueError as refused:
        say(f"late write with fence {first}: {refused}")
    assert all(fence == second for _cents, fence in ledger.invoices.values())
    say(f"ledger: {ledger.invoices}")
    for name in NIGHTS:
        say(f"total {total_key(name)}: {total(r, name)}")
    say("python billing example: ok")


if __name__ == "__main__":
    main()
