"""The conformance driver of the Python package (redis_lock_client, sync API).

Speaks the JSON-lines protocol of the conformance harness
(`conformance/PROTOCOL.md`, run by `conformance/run.py`): `ready` once
connected, then one command a line on stdin, one answer or event a line on
stdout. It uses the package as a
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

`driver.py --asyncio URL` drives the package's asyncio API
(`redis_lock_client.asyncio` over `redis.asyncio`) instead, the same way
with a task a command; there `cancel` cancels the acquire's task, which is
how that API gives up a wait (the package gives back whatever the token may
hold before the task ends).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import traceback
from typing import Any

import redis.asyncio
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
from redis_lock_client import asyncio as aio

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


class Invalid(Exception):
    """A command the protocol does not allow (an unknown op, mode or name, a
    name used twice): answered `invalid`."""


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


def reason_of(lease: Lease | aio.Lease) -> str | None:
    reason = lease.lost_reason
    return None if reason is None else _REASONS.get(reason, reason.value)


def error_kind(error: BaseException) -> str:
    """The protocol's error kind for what the package raised."""
    if isinstance(error, Unsupported):
        return "not_supported"
    if isinstance(error, Invalid):
        return "invalid"
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


def commands() -> Any:
    """The command objects on stdin, one a line; malformed lines are logged."""
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
        yield command


def error_answer(name: str, error: BaseException) -> dict[str, Any]:
    """The `error` answer for what a command raised; a traceback on stderr
    for what the package does not raise by design."""
    if not isinstance(
        error, (Unsupported, Invalid, Lost, LimitReached, NotReplicated, ServerError)
    ):
        traceback.print_exception(error, file=sys.stderr)
    return {"ev": "error", "name": name, "kind": error_kind(error), "message": str(error)}


class Names:
    """The names acquires used: a name is used by one acquire per driver
    process (checked on the reading thread, in the order of the lines)."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.used: set[str] = set()

    def fresh(self, command: dict[str, Any]) -> bool:
        """False (and answered `invalid`) for an acquire of a name used before."""
        if command.get("op") != "acquire":
            return True
        name = command.get("name", "")
        if name in self.used:
            error = Invalid(f"driver: the name {name!r} was used by an acquire before")
            self.out.write({"re": command.get("re"), **error_answer(name, error)})
            return False
        self.used.add(name)
        return True


class AcquireArgs:
    """An `acquire` command's arguments, in the package's units (seconds)."""

    def __init__(self, command: dict[str, Any]) -> None:
        self.mode = command.get("mode", "session")
        if self.mode not in ("session", "watchdog"):
            raise Invalid(f"driver: unknown mode {self.mode!r}")
        self.keys: list[str] = command["keys"]
        self.ttl: float = command["ttl_ms"] / 1000
        wait_ms = command.get("wait_ms")
        self.wait = None if wait_ms is None else wait_ms / 1000
        sync = command.get("sync")
        self.sync = None if sync is None else ReplicaSync(int(sync[0]), sync[1] / 1000)


class Driver:
    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        client = self.client
        self.locks = {
            "session": Locks(client, keepalive="session"),
            "watchdog": Locks(client, keepalive="extend"),
        }
        self.out = Output()
        self.holds: dict[str, Hold] = {}
        self.holds_lock = threading.Lock()
        self.names = Names(self.out)

    def serve(self) -> None:
        self.client.ping()  # connected: a server that is not there ends the driver
        self.out.write({"ev": "ready"})
        self.serve_commands()
        leave()

    def serve_commands(self) -> None:
        for command in commands():
            if command.get("op") == "quit":
                self.out.write({"re": command.get("re"), "ev": "bye"})
                break
            if not self.names.fresh(command):
                continue
            threading.Thread(target=self.run, args=(command,), daemon=True).start()

    def run(self, command: dict[str, Any]) -> None:
        """Runs one command and writes its answer (an `error` for what it raised)."""
        re, name = command.get("re"), command.get("name", "")
        try:
            answer = self.dispatch(command)
            if answer is None:
                return  # answered already
        except Exception as error:  # noqa: BLE001 (every failure is an answer, never a dead thread)
            answer = error_answer(name, error)
        self.out.write({"re": re, **answer})

    def dispatch(self, command: dict[str, Any]) -> dict[str, Any] | None:
        """The answer to `command`; None when it was written already."""
        op, name = command.get("op"), command.get("name", "")
        if op == "acquire":
            return self.acquire(name, command)
        if op == "cancel":
            raise Unsupported("the sync API cannot give up a waiting acquire")
        hold = self.hold(name)
        if hold is None:
            raise Invalid(f"driver: no lease named {name!r}")
        if op == "held":
            return {
                "ev": "held",
                "name": name,
                "held": hold.lease.held,
                "reason": reason_of(hold.lease),
            }
        if op == "release":
            hold.releasing = True
            return {"ev": "released", "name": name, "result": hold.lease.release()}
        if op == "guard":
            reply = hold.lease.guard(*command["command"])
            return {"ev": "guarded", "name": name, "reply": json_reply(reply)}
        raise Invalid(f"driver: unknown op {op!r}")

    def acquire(self, name: str, command: dict[str, Any]) -> dict[str, Any] | None:
        args = AcquireArgs(command)
        locks = self.locks[args.mode]
        if len(args.keys) == 1:
            lease = locks.acquire(args.keys[0], args.ttl, wait=args.wait, sync=args.sync)
        else:
            lease = locks.acquire_many(args.keys, args.ttl, wait=args.wait, sync=args.sync)
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


class AsyncHold:
    """A named lease of the asyncio API (see `Hold`)."""

    def __init__(self, name: str, lease: aio.Lease) -> None:
        self.name = name
        self.lease = lease
        self.releasing = False


class AsyncDriver:
    """The driver over the asyncio API: one event loop, a task a command."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.out = Output()
        self.holds: dict[str, AsyncHold] = {}
        self.waiting: dict[str, asyncio.Task[None]] = {}  # acquires in flight, by name
        self.tasks: set[asyncio.Task[None]] = set()  # kept referenced until done

    async def serve(self) -> None:
        client = redis.asyncio.Redis.from_url(self.url)
        self.locks = {
            "session": aio.Locks(client, keepalive="session"),
            "watchdog": aio.Locks(client, keepalive="extend"),
        }
        await client.ping()  # connected: a server that is not there ends the driver
        self.out.write({"ev": "ready"})
        names = Names(self.out)
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        def read() -> None:  # stdin on a thread: a blocking read must not stop the loop
            for command in commands():
                loop.call_soon_threadsafe(lines.put_nowait, command)
            loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=read, daemon=True).start()
        while (command := await lines.get()) is not None:
            if command.get("op") == "quit":
                self.out.write({"re": command.get("re"), "ev": "bye"})
                break
            if not names.fresh(command):
                continue
            if command.get("op") == "acquire":
                task = self.spawn(self.acquire(command))
                self.waiting[command.get("name", "")] = task
            else:
                self.spawn(self.run(command))
        leave()

    def spawn(self, work: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def run(self, command: dict[str, Any]) -> None:
        re, name = command.get("re"), command.get("name", "")
        try:
            answer = await self.dispatch(command)
        except Exception as error:  # noqa: BLE001 (every failure is an answer, never a dead task)
            answer = error_answer(name, error)
        self.out.write({"re": re, **answer})

    async def dispatch(self, command: dict[str, Any]) -> dict[str, Any]:
        op, name = command.get("op"), command.get("name", "")
        if op == "cancel":
            task = self.waiting.pop(name, None)
            if task is not None:
                task.cancel()
                await asyncio.wait([task])  # its own answer goes first
            return {"ev": "cancelled", "name": name}
        hold = self.holds.get(name)
        if hold is None:
            raise Invalid(f"driver: no lease named {name!r}")
        if op == "held":
            return {
                "ev": "held",
                "name": name,
                "held": hold.lease.held,
                "reason": reason_of(hold.lease),
            }
        if op == "release":
            hold.releasing = True
            return {"ev": "released", "name": name, "result": await hold.lease.release()}
        if op == "guard":
            reply = await hold.lease.guard(*command["command"])
            return {"ev": "guarded", "name": name, "reply": json_reply(reply)}
        raise Invalid(f"driver: unknown op {op!r}")

    async def acquire(self, command: dict[str, Any]) -> None:
        re, name = command.get("re"), command.get("name", "")
        try:
            args = AcquireArgs(command)
            locks = self.locks[args.mode]
            if len(args.keys) == 1:
                lease = await locks.acquire(args.keys[0], args.ttl, wait=args.wait, sync=args.sync)
            else:
                lease = await locks.acquire_many(
                    args.keys, args.ttl, wait=args.wait, sync=args.sync
                )
        except asyncio.CancelledError:
            answer = {"ev": "error", "name": name, "kind": "cancelled", "message": "cancelled"}
            self.out.write({"re": re, **answer})
            return
        except Exception as error:  # noqa: BLE001 (every failure is an answer, never a dead task)
            self.out.write({"re": re, **error_answer(name, error)})
            return
        finally:
            if self.waiting.get(name) is asyncio.current_task():
                del self.waiting[name]
        if lease is None:
            self.out.write({"re": re, "ev": "not_acquired", "name": name})
            return
        hold = AsyncHold(name, lease)
        self.holds[name] = hold
        # The answer goes out before the watcher starts: `lost` follows `acquired`.
        self.out.write({"re": re, "ev": "acquired", "name": name, "fence": lease.fence})
        self.spawn(self.watch(hold))

    async def watch(self, hold: AsyncHold) -> None:
        """Prints `lost` when the package sets the lease's `lost` event."""
        lease = hold.lease
        while not (hold.releasing or lease.released):
            try:
                await asyncio.wait_for(lease.lost.wait(), _WATCH_SLICE_S)
            except TimeoutError:
                continue  # the next wait() asks the lease's clock again
            self.out.write(
                {
                    "ev": "lost",
                    "name": hold.name,
                    "reason": reason_of(lease),
                    "revoked_reason": lease.revoked_reason,
                }
            )
            return


def main() -> None:
    args = sys.argv[1:]
    use_asyncio = args[:1] == ["--asyncio"]
    if use_asyncio:
        args = args[1:]
    if len(args) != 1:
        print("usage: driver.py [--asyncio] redis://HOST:PORT", file=sys.stderr)
        sys.exit(2)
    if use_asyncio:
        asyncio.run(AsyncDriver(args[0]).serve())
    else:
        Driver(args[0]).serve()


def leave() -> None:
    """Exits at once after `bye` (or the end of stdin): the acquires still
    waiting in the server's queue are neither joined nor cancelled, which
    would print answers after `bye`."""
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
