"""The conformance driver of the Python package (redis_lock_client, sync API).

Speaks the JSON-lines protocol of the conformance harness
(/work/notes/conformance-protocol.md, `conformance/run.py`): one command a
line on stdin, one answer or event a line on stdout. It uses the package as a
user would, through its public API only, so that the harness tests the
package and not this file:

    PYTHONPATH=clients/python/src target/python-venv/bin/python \
        conformance/drivers/python/driver.py redis://127.0.0.1:PORT

Each command runs in a thread of its own, so that an acquire waiting in the
server's queue does not hold back the commands after it. Each lease has a
thread that waits on its `lost` event and prints the `lost` event the moment
the package sets it.

`mode` picks the `Locks`: `session` is `keepalive="session"` (one server
lease, `LOCK.LEASE`, for every hold), `watchdog` is `keepalive="extend"`
(each hold extended on its own with `LOCK.EXTEND`).

`cancel` is answered `not_supported`: the sync API has no way to give up an
acquire that waits in the server's queue (its connection is the package's
own), short of a signal to the whole process.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from typing import Any

from redis_lock_client import (
    Lease,
    LimitReached,
    Locks,
    Lost,
    LostReason,
    NotReplicated,
    ReplicaSync,
    ServerError,
)

import redis

# How often a watcher also asks the lease's clock, in case the watchdog thread
# wakes late: `lost.wait()` reads the clock each time it is called.
_WATCH_SLICE_S = 0.05

# The protocol's reasons. NOT_REPLICATED is a deadline that came (that of the
# last replicated extend), so it is `expired`; FORKED cannot happen here.
_REASONS = {
    LostReason.REFUSED: "refused",
    LostReason.REVOKED: "revoked",
    LostReason.EXPIRED: "expired",
    LostReason.LIMIT: "limit",
    LostReason.NOT_REPLICATED: "expired",
}


class Unsupported(Exception):
    """A command this package's API cannot express: answered `not_supported`."""


class Output:
    """stdout, one JSON object a line, flushed, one writer at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def write(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"))
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


class Hold:
    """A named lease, and whether the driver released it (then its watcher
    ends without a `lost` event, even when the release failed)."""

    def __init__(self, name: str, lease: Lease) -> None:
        self.name = name
        self.lease = lease
        self.releasing = False


def reason_of(lease: Lease) -> str | None:
    reason = lease.lost_reason
    return None if reason is None else _REASONS.get(reason, reason.value)


def error_kind(error: BaseException) -> str:
    """The protocol's error kind for what the package raised."""
    if isinstance(error, Unsupported):
        return "not_supported"
    if isinstance(error, Lost):
        return "revoked" if error.reason is LostReason.REVOKED else "lost"
    if isinstance(error, LimitReached):
        return "limit"
    if isinstance(error, NotReplicated):
        return "nosync"
    if isinstance(error, ServerError):
        return "wrongtype" if error.code == "WRONGTYPE" else "server"
    # The client library's own (the package does not wrap them): redis-py's
    # TimeoutError is not a ConnectionError, the builtin one is an OSError.
    if isinstance(error, (redis.exceptions.TimeoutError, TimeoutError)):
        return "timeout"
    if isinstance(error, (redis.exceptions.ConnectionError, OSError)):
        return "connection"
    if isinstance(error, (TypeError, ValueError)):
        return "not_supported"  # the package refuses the arguments before sending
    return "server"


def json_reply(reply: object) -> object:
    """A guarded command's reply as JSON: bytes as text, lists element-wise."""
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "replace")
    if isinstance(reply, (list, tuple)):
        return [json_reply(item) for item in reply]
    if isinstance(reply, dict):
        return [json_reply(item) for pair in reply.items() for item in pair]
    if reply is None or isinstance(reply, (str, int, float, bool)):
        return reply
    return str(reply)


class Driver:
    def __init__(self, url: str) -> None:
        client = redis.Redis.from_url(url)
        self.locks = {
            "session": Locks(client, keepalive="session"),
            "watchdog": Locks(client, keepalive="extend"),
        }
        self.out = Output()
        self.holds: dict[str, Hold] = {}
        self.holds_lock = threading.Lock()

    def serve(self) -> None:
        for line in iter(sys.stdin.readline, ""):
            line = line.strip()
            if not line:
                continue
            try:
                command = json.loads(line)
                if not isinstance(command, dict):
                    raise TypeError("not an object")
            except (TypeError, ValueError) as error:
                print(f"driver: bad line {line!r}: {error}", file=sys.stderr)
                continue
            if command.get("op") == "quit":
                self.out.write({"re": command.get("re"), "ev": "bye"})
                return
            threading.Thread(target=self.run, args=(command,), daemon=True).start()

    def run(self, command: dict[str, Any]) -> None:
        """Runs one command and writes its answer (an `error` for what it raised)."""
        re, name = command.get("re"), command.get("name")
        try:
            answer = self.dispatch(command)
            if answer is None:
                return  # answered already
        except Exception as error:  # noqa: BLE001 (every failure is an answer, never a dead thread)
            if not isinstance(error, (Unsupported, Lost, LimitReached, NotReplicated, ServerError)):
                traceback.print_exc(file=sys.stderr)
            answer = {"ev": "error", "name": name, "kind": error_kind(error), "message": str(error)}
        self.out.write({"re": re, **answer})

    def dispatch(self, command: dict[str, Any]) -> dict[str, Any] | None:
        """The answer to `command`; None when it was written already."""
        op, name = command.get("op"), command.get("name", "")
        if op == "acquire":
            return self.acquire(name, command)
        if op == "cancel":
            raise Unsupported("the sync API cannot give up a waiting acquire")
        hold = self.hold(name)
        if op == "held":
            if hold is None:
                return {"ev": "held", "name": name, "held": False, "reason": None}
            return {
                "ev": "held",
                "name": name,
                "held": hold.lease.held,
                "reason": reason_of(hold.lease),
            }
        if hold is None:
            raise Unsupported(f"driver: no lease named {name!r}")
        if op == "release":
            hold.releasing = True
            return {"ev": "released", "name": name, "result": hold.lease.release()}
        if op == "guard":
            reply = hold.lease.guard(*command["command"])
            return {"ev": "guarded", "name": name, "reply": json_reply(reply)}
        raise Unsupported(f"driver: unknown op {op!r}")

    def acquire(self, name: str, command: dict[str, Any]) -> dict[str, Any] | None:
        locks = self.locks.get(command.get("mode", "session"))
        if locks is None:
            raise Unsupported(f"driver: unknown mode {command.get('mode')!r}")
        keys = command["keys"]
        ttl = command["ttl_ms"] / 1000
        wait_ms = command.get("wait_ms")
        wait = None if wait_ms is None else wait_ms / 1000
        sync = command.get("sync")
        replicas = None if sync is None else ReplicaSync(int(sync[0]), sync[1] / 1000)
        if len(keys) == 1:
            lease = locks.acquire(keys[0], ttl, wait=wait, sync=replicas)
        else:
            lease = locks.acquire_many(keys, ttl, wait=wait, sync=replicas)
        if lease is None:
            return {"ev": "not_acquired", "name": name}
        hold = Hold(name, lease)
        with self.holds_lock:
            self.holds[name] = hold
        # The answer goes out before the watcher starts: `lost` follows `acquired`.
        self.out.write(
            {"re": command.get("re"), "ev": "acquired", "name": name, "fence": lease.fence}
        )
        threading.Thread(target=self.watch, args=(hold,), daemon=True).start()
        return None

    def hold(self, name: str) -> Hold | None:
        with self.holds_lock:
            return self.holds.get(name)

    def watch(self, hold: Hold) -> None:
        """Prints `lost` when the package sets the lease's `lost` event."""
        lease = hold.lease
        while not lease.lost.wait(_WATCH_SLICE_S):
            if hold.releasing or lease.released:
                return
        self.out.write(
            {
                "ev": "lost",
                "name": hold.name,
                "reason": reason_of(lease),
                "revoked_reason": lease.revoked_reason,
            }
        )


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: driver.py redis://HOST:PORT", file=sys.stderr)
        sys.exit(2)
    Driver(sys.argv[1]).serve()
    sys.stdout.flush()
    # Threads may still wait on the server (an acquire in its queue): leave
    # without joining them.
    os._exit(0)


if __name__ == "__main__":
    main()
