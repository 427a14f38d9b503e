"""What keeping many holds costs, per way of keeping them: threads,
connections, server calls and CPU, for 1,000 holds held for 30 s.

    LOCK_MODULE=$PWD/target/debug/libredis_lock.so \\
        target/python-venv/bin/python clients/python/tests/hold_cost.py

(`--holds`, `--seconds`, `--ttl`; `--json FILE` writes the figures as
data; `LOCK_TEST_SERVER=…` for another server.) For each way, a fresh
server with the module and a fresh Python process that takes the holds
through one `Locks` (sync API, redis-py), then, once all are held, a window
of `--seconds` in which the server's `INFO commandstats` and `INFO cpu`
are read at both ends, its `connected_clients` and the process's OS
threads (`/proc/self/status`) sampled. The ways:

- `extend`: `Locks(client, keepalive="extend")`, each hold extended on its
  own (`LOCK.EXTEND` every ttl/3), by one watchdog thread;
- `session`: `Locks(client)` (`keepalive="session"`), every hold attached to
  one server lease kept alive by `LOCK.LEASE KEEPALIVE` (and `INFO`) every
  ttl/3;
- with `--legacy DIR`, also the package as it was before the shared
  watchdog (a thread and a connection per lease: `git archive 3b04547
  clients/python/src | tar -x -C DIR`, then `--legacy
  DIR/clients/python/src`).

- `idle`: no process at all, the server alone: the baseline of its CPU
  (its own timers, and the window's `INFO` reads).

The calls exclude the window's own `INFO` reads. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import Server

HERE = Path(__file__).resolve()


def os_threads() -> int:
    """This process's OS threads, as the kernel counts them."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError("no Threads line in /proc/self/status")


def child(port: int, way: str, holds: int, ttl: float) -> None:
    """Takes the holds, says so, keeps them until told to stop, then reports
    its threads (the most seen), CPU and whether every hold still held."""
    import redis

    from redis_lock_client import Locks

    client = redis.Redis(port=port, socket_timeout=10)
    locks = Locks(client) if way == "legacy" else Locks(client, keepalive=way)  # type: ignore[arg-type]
    leases = [locks.acquire(f"hold:{i}", ttl) for i in range(holds)]
    assert all(lease is not None for lease in leases), "a hold was refused"
    print("held", flush=True)
    cpu = time.process_time()
    threads = os_threads()
    sys.stdin.readline()
    threads = max(threads, os_threads())
    cpu = time.process_time() - cpu
    held = sum(1 for lease in leases if lease is not None and not lease.lost.is_set())
    print(json.dumps({"threads": threads, "client_cpu_s": cpu, "held": held}), flush=True)
    for lease in leases:
        if lease is not None:
            lease.release()


# The idle way's process: holds nothing, talks to no server.
IDLE = """
import json, sys
print("held", flush=True)
sys.stdin.readline()
print(json.dumps({"threads": 1, "client_cpu_s": 0.0, "held": 0}), flush=True)
"""


def server_calls(admin: Any) -> dict[str, int]:
    stats = admin.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}


def server_cpu(admin: Any) -> float:
    cpu = admin.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def measure(way: str, holds: int, seconds: float, ttl: float, legacy: str | None) -> dict[str, Any]:
    import redis

    env = dict(os.environ)
    if way == "legacy":
        assert legacy is not None
        env["PYTHONPATH"] = legacy  # the old package, not the installed one
    with tempfile.TemporaryDirectory() as directory:
        server = Server(Path(directory))
        admin = redis.Redis(port=server.port, socket_timeout=10)
        base_clients = int(admin.info("clients")["connected_clients"])
        command = [sys.executable, str(HERE), "--child", way, "--port", str(server.port),
                   "--holds", str(holds), "--ttl", str(ttl)]  # fmt: skip
        if way == "idle":
            command = [sys.executable, "-c", IDLE]
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            assert process.stdout.readline().strip() == "held"
            calls, cpu, started = server_calls(admin), server_cpu(admin), time.monotonic()
            clients = 0
            leases = int(admin.info("lock")["lock_leases"])
            while time.monotonic() - started < seconds:
                time.sleep(min(1.0, seconds - (time.monotonic() - started)))
                connected = int(admin.info("clients")["connected_clients"])
                clients = max(clients, connected - base_clients)
            after, cpu_after, took = (
                server_calls(admin),
                server_cpu(admin),
                time.monotonic() - started,
            )
            process.stdin.write("stop\n")
            process.stdin.flush()
            report = json.loads(process.stdout.readline())
            process.wait(60)
        finally:
            process.kill()
            server.stop()
    delta = {name: n - calls.get(name, 0) for name, n in after.items() if n > calls.get(name, 0)}
    delta.pop("info", None)  # the window's own reads
    return {
        "way": way,
        "holds": holds,
        "ttl_s": ttl,
        "seconds": round(took, 1),
        "os_threads": report["threads"],
        "server_clients": clients,
        "calls_per_s": round(sum(delta.values()) / took, 2),
        "calls": delta,
        "server_cpu_ms_per_s": round((cpu_after - cpu) * 1000 / took, 2),
        "client_cpu_ms_per_s": round(report["client_cpu_s"] * 1000 / took, 2),
        "held_at_end": report["held"],
        "server_leases": leases,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| way | holds | OS threads | server clients | server calls/s | of which "
        "| server CPU ms/s | client CPU ms/s |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in rows:
        top = sorted(row["calls"].items(), key=lambda item: -item[1])[:3]
        which = ", ".join(f"`{name}` {n / row['seconds']:.2f}" for name, n in top) or "none"
        which = which.replace("|", "\\|")  # a subcommand's name, in a Markdown cell
        lines.append(
            f"| {row['way']} | {row['holds']} | {row['os_threads']} | {row['server_clients']} "
            f"| {row['calls_per_s']} | {which} | {row['server_cpu_ms_per_s']} "
            f"| {row['client_cpu_ms_per_s']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--holds", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--legacy", help="the sources of the package before the shared watchdog")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.port, args.child, args.holds, args.ttl)
        return
    ways = ["idle"] + (["legacy"] if args.legacy else []) + ["extend", "session"]
    rows = []
    for way in ways:
        holds = 0 if way == "idle" else args.holds
        row = measure(way, holds, args.seconds, args.ttl, args.legacy)
        assert row["held_at_end"] == holds, row
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
