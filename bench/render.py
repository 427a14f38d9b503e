"""The benchmark report (docs/benchmarks.md), rendered from the results
document lock-bench writes (docs/benchmarks.json; bench/README.md has its
schema).

    python3 bench/render.py RESULTS.json REPORT.md [--img img] [--check]

A view, nothing more: every figure, goal and verdict is the document's. The
words are bench/report-template.md's; here are how each kind of figure is
shown, the tables (each described as data: its columns' headers, fields and
formats) and the few lines that fill the template in. `--check` fails
unless every section is there (make bench-quick). Standard library only.
"""

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

SCHEMA = 1
TEMPLATE = Path(__file__).with_name("report-template.md")
DASH = "–"
# The headings of a full run's report, and its kinds of goal: --check wants them all.
SECTIONS = ["## Machine", "## Goals", "## 1. ", "## 2. ", "## 3. ", "## 4. ", "### 4.1 ",
            "### 4.2 ", "### 4.3 ", "### 4.4 ", "## 5. ", "### 5.1 ", "### 5.2 ", "### 5.3 ",
            "### 5.4 ", "## 6. ", "## 7. ", "### 7.1 ", "### 7.2 ", "### 7.3 ", "## 8. ",
            "### 8.1 ", "## 9. ", "## 10. ", "### 10.1 ", "### 10.2 ", "## Raw samples"]
GOAL_KINDS = ["ratio", "memory-per-lock", "acquire-at-scale", "release-o1", "waiter-memory",
              "expiry-handoff", "lease-keepalive", "sync"]


# ---------------------------------------------------------------- figures

def missing(v):
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def shown(show):
    """`show`, with a dash for a value that was not measured."""
    return lambda v: DASH if missing(v) else show(v)


num = shown(lambda v: f"{v:,.0f}")  # 1,234
f0, f1, f2, f3 = (shown(lambda v, d=d: f"{v:.{d}f}") for d in range(4))
x = shown(lambda v: f"{v:.2f}×")
text = shown(str)


@shown
def times(v):
    """A ratio that may be large: as many digits as it deserves.

    >>> times(10000.0), times(356.42), times(71.96), times(7.39), times(None)
    ('10,000×', '356×', '72.0×', '7.39×', '–')
    """
    return f"{v:,.0f}×" if v >= 100 else f"{v:.1f}×" if v >= 10 else f"{v:.2f}×"

code = shown(lambda v: f"`{v}`")


@shown
def us(v):
    """Microseconds, in the unit that suits them.

    >>> us(950.4), us(1500.0), us(2_500_000.0), us(None)
    ('950 µs', '1.5 ms', '2.50 s', '–')
    """
    if v < 1000:
        return f"{v:.0f} µs"
    return f"{v / 1000:.1f} ms" if v < 1_000_000 else f"{v / 1_000_000:.2f} s"


@shown
def fine(v):
    """Server latencies of a few µs: one decimal."""
    return f"{v:.1f} µs" if v < 100 else us(v)


def against(value, goal):
    """A ratio judged against `goal`: a miss that two decimals would round up
    to the goal shows three, rounded down.

    >>> against(1.497, 1.5), against(1.4996, 1.5), against(1.503, 1.5), against(1.497, None)
    ('1.497×', '1.499×', '1.50×', '1.50×')
    """
    if goal is not None and not missing(value) and value < goal <= round(value, 2):
        return f"{math.floor(value * 1000) / 1000:.3f}×"
    return x(value)


def against_times(value, goal):
    """A large ratio judged against `goal`: as `times` shows it, but a miss
    that one decimal would round up to the goal shows two, rounded down.

    >>> against_times(99.96, 100), against_times(93.9, 100), against_times(136.5, 100)
    ('99.96×', '93.9×', '136×')
    """
    if (goal is not None and not missing(value) and 10 <= value < goal
            and round(value, 1) >= goal):
        return f"{math.floor(value * 100) / 100:.2f}×"
    return times(value)


def plain(v):
    """A number as prose writes it: 30, 0.95."""
    return f"{v:,.0f}" if v == int(v) else f"{v:g}"


def listing(items):
    items = [str(i) for i in items]
    return " and ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)


def busy(processes):
    return ", ".join(processes) or "none above 10% of a core"


def rank_name(n, q):
    """Which sample the nearest-rank percentile `q` of `n` samples is.

    >>> rank_name(150, 0.99), rank_name(6, 0.99), rank_name(500, 0.99), rank_name(2000, 0.99)
    ('2nd largest', 'largest', '6th largest', '21st largest')
    """
    k = max(n, 1) - min(max(math.ceil(q * n - 1e-9), 1), max(n, 1)) + 1
    suffix = "th" if k % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return "largest" if k == 1 else f"{k}{suffix} largest"


def not_measured(why):
    """What the report says where the machine was too busy to measure.

    >>> not_measured("the lease ran out first")
    'not measured: the lease ran out first'
    """
    return f"not measured: {why}"


def verdict(judged):
    """A goal's (or a ratio row's) verdict; an expiry hand-off says which
    percentile missed when one did; one the run could not measure says why."""
    if judged["verdict"] == "not-measured":
        return not_measured(judged.get("not_measured") or "the machine was too busy")
    word = {"met": "met", "missed": "**missed**", "reported": "reported"}[judged["verdict"]]
    missed = judged.get("missed") or []
    return f"{word} ({missed[0]})" if len(missed) == 1 else word


def shell(commands):
    """Command lines, each argument quoted where a shell would need it."""
    quote = lambda a: "'" + a.replace("'", "'\\''") + "'" if (" " in a or "'" in a or not a) else a
    return "\n".join(" ".join(map(quote, argv)) for argv in commands)


def where(rows, **match):
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def first(rows, **match):
    return next(iter(where(rows, **match)), None)


# ---------------------------------------------------------------- goals

def goal_cells(g):
    """What a goal's row says, by kind: the goal, what was measured, the
    check beside it (the noise-free figure, or the baseline)."""
    kind, within = g["kind"], lambda t: f"within {(t - 1) * 100:.0f}%"
    if kind == "ratio":
        return (f"{g['comparison']} ≥ {plain(g['threshold'])}×",
                against(g["throughput_ratio"], g["threshold"]), x(g["cpu_ratio"]))
    if kind == "memory-per-lock":
        return (f"Memory per lock ≤ {g['baseline']} ({num(g['locks'])} locks)",
                f"{f0(g['module_bytes'])} B vs {f0(g['baseline_bytes'])} B", "")
    if kind == "acquire-at-scale":
        small, large = g["held"]
        return (f"ACQUIRE p99 with {num(large)} held locks and {num(g['waiters'])} waiters "
                f"{within(g['threshold'])} of {num(small)} held locks",
                f"client p99 {x(g['client_p99_growth'])}",
                f"server p99 {x(g['server_p99_growth'])} (SET PX: {x(g['set_p99_growth'])})")
    if kind == "release-o1":
        return (f"RELEASE with {num(g['queue'])} waiters on its key O(1): server time "
                f"{within(g['threshold'])} of a key with {num(g['baseline_queue'])} waiters",
                f"server mean {x(g['server_mean_growth'])} (p50 {x(g['server_p50_growth'])}, "
                f"p99 {x(g['server_p99_growth'])}); against 2 waiters: "
                f"{x(g['against_2_waiters'])}, 1 waiter: {x(g['against_1_waiter'])}",
                f"client p50 {x(g['client_p50_growth'])}")
    if kind == "waiter-memory":
        return (f"Memory per waiter, reported ({num(g['waiters'])} waiters)",
                f"{num(g['per_waiter'])} B: connection {num(g['per_connection'])} + wait "
                f"{num(g['per_wait'])}", f"a client in BLPOP: {num(g['per_blpop'])} B + connection")
    if kind == "expiry-handoff":
        load = (f"{num(g['keys'])} keys expiring within {g['spread_ms']} ms (5.3)"
                if g["scenario"] == "mass-expiry" else "one key, an idle server (5.2)")
        return (f"Hand-off after an expiry ≤ {plain(g['threshold_p50_us'] / 1000)} ms p50, "
                f"≤ {plain(g['threshold_p99_us'] / 1000)} ms p99 after the deadline: {load}",
                f"p50 {us(g['p50_us'])}, p99 {us(g['p99_us'])}",
                f"after the lease's end: p50 {us(g['after_end_p50_us'])}, "
                f"p99 {us(g['after_end_p99_us'])}")
    if kind == "lease-keepalive":
        return (f"Keeping {num(g['holds'])} holds alive for {f0(g['window_s'])} s, lease ttl "
                f"{num(g['ttl_ms'])} ms renewed every {num(g['interval_ms'])} ms (8): "
                f"≥ {plain(g['threshold'])}× less server CPU than `LOCK.EXTEND` of each",
                f"{against_times(g['renewal_ratio'], g['threshold'])}: "
                f"{us(g['extend_renewal_us'])} against {us(g['lease_renewal_us'])}",
                f"commands' own time {times(g['command_ratio'])}, calls "
                f"{times(g['calls_ratio'])}; whole window, idle work included, "
                f"{times(g['cpu_ratio'])}")
    if kind == "sync":
        return (f"`LOCK.ACQUIRE … SYNC 1` ≥ {plain(g['threshold'])}× `LOCK.ACQUIRE` + "
                f"`WAIT 1`, {g['clients']} clients (9): throughput, p50 and p99",
                f"throughput {x(g['throughput_ratio'])}, p50 {x(g['p50_ratio'])}, "
                f"p99 {x(g['p99_ratio'])}", f"master CPU per grant {x(g['cpu_ratio'])}")
    sys.exit(f"render.py: a goal of kind {kind!r}, unknown")


def goal_verdict(g):
    """The verdict, and what it stands on when the run fell short."""
    if g["verdict"] == "not-measured":
        return verdict(g)
    note = ""
    if g["kind"] == "acquire-at-scale" and g["waiters"] < g["waiters_asked"]:
        note = f", with {num(g['waiters'])} of the {num(g['waiters_asked'])} waiters asked for (section 4)"
    if g["kind"] == "lease-keepalive" and not g["all_held"]:
        note = " (a hold was lost or a renewal failed: section 8)"
    if g["kind"] == "sync" and len(g["missed"]) > 1:
        return f"**missed** ({', '.join(g['missed'])})"
    if g["kind"] == "release-o1" and g["queue"] < g["queue_asked"]:
        note = (f" (at {num(g['queue'])} of the {num(g['queue_asked'])} waiters asked for on "
                "its key: section 4)")
    return verdict(g) + note


# ---------------------------------------------------------------- tables

def spread(name, field):
    """A field of one of the row's objects: spread("wakeup", "p50_us")."""
    return lambda row: row[name][field]


RATIOS = [("Comparison", "title", text), ("Pipeline", "pipeline", text),
          ("Throughput ratio", lambda r: against(r["throughput_ratio"], r["goal"]), text),
          ("CPU ratio", "cpu_ratio", x),
          ("Goal", lambda r: r["goal"] and f"≥ {plain(r['goal'])}×: {verdict(r)}",
           lambda v: v or "")]
HANDOFF = [("Recipe", "recipe", text), ("Handoffs", "count", num), ("p50", "p50_us", us),
           ("p90", "p90_us", us), ("p99", "p99_us", us), ("max", "max_us", us),
           ("mean", "mean_us", us), ("Not counted", "discarded", num)]
ORIGIN = {("release", "readers-wait"): "last reader's release",
          ("release", "native-wait"): "holder's release",
          ("expiry", "readers-wait"): "last reader's lease expires",
          ("expiry", "native-wait"): "holder's lease expires",
          ("release", "multi-wait"): "holder's release of the last of 4 keys",
          ("expiry", "multi-wait"): "holder's lease on 4 keys expires",
          "head": "the head of the longest queue", "tail": "the tail of the longest queue",
          "spread": "the spread keys"}
SIDES = {"lease": "one lease: `KEEPALIVE`", "extend": "plain holds: `LOCK.EXTEND` each",
         "idle": "idle: `PING`"}
MODES = {"sync": "`LOCK.ACQUIRE … SYNC`", "acquire-wait": "`LOCK.ACQUIRE` + `WAIT`",
         "acquire": "`LOCK.ACQUIRE` alone"}


def per_tick(row):
    """A side's CPU per tick's requests (none when it sent none)."""
    return row["renewal_cpu_us"] / row["ticks"] if row["ticks"] else None

# Every table of the report: (header, field, format) a column; a field is a
# key of the row or a function of it.
TABLES = {
    "goals": [("Goal", lambda g: goal_cells(g)[0], text), ("Server", "server", text),
              ("Throughput ratio", lambda g: goal_cells(g)[1], text),
              ("CPU ratio", lambda g: goal_cells(g)[2], text), ("", goal_verdict, text)],
    "ratios": RATIOS,
    "server_ratios": [("Server", "server", text), *RATIOS],
    "medians": [("Command", "command", text), ("Group", "group", text),
                ("Pipeline", "pipeline", text), ("Requests/s", "rps", num),
                ("CPU µs/req", "cpu_us_per_op", f2), ("Work", "work_share", f2)],
    "contention": [("Contenders", "contenders", text), ("Strategy", "strategy", text),
                   ("Cycles/s", "cycles_per_s", num), ("Acquire p50", "acquire_p50_us", us),
                   ("p99", "acquire_p99_us", us), ("p999", "acquire_p999_us", us),
                   ("Handoff p50", "handoff_p50_us", us), ("p99", "handoff_p99_us", us),
                   ("Refusals/grant", "refusals_per_grant", f2), ("Jain", "jain_index", f2),
                   ("Min", "min_cycles_per_contender", f0), ("Waiting", "waiting_at_end", f0),
                   ("Server CPU µs/cycle", "server_cpu_us_per_cycle", f1)],
    "one_lock": [("Server", "server", text), ("Variant", "label", text),
                 ("Lock key", "lock_key_bytes", lambda v: f"{v} B"),
                 ("Fence key", lambda r: "none (module-wide high-water mark)"
                  if r["fence_key_bytes"] is None else f"{r['fence_key_bytes']} B"
                  + (", shared by all locks" if r["variant"] == "LuaGlobalFence" else ""), text)],
    "bulk": [("Server", "server", text), ("Variant", "label", text), ("Locks", "locks", num),
             ("used_memory delta", "used_memory_delta", num),
             ("Bytes per lock", "bytes_per_lock", f1)],
    "scale": [("Held locks", "held", num), ("Waiters", "waiters", num),
              ("Cycles/s", "cycles_per_s", num), ("Client p50", "client_p50_us", us),
              ("p99", "client_p99_us", us), ("p999", "client_p999_us", us),
              ("Server p50", "server_p50_us", us), ("p99", "server_p99_us", us),
              ("p99.9", "server_p999_us", us), ("SET PX server p50", "set_p50_us", us),
              ("p99", "set_p99_us", us), ("p99.9", "set_p999_us", us)],
    "release": [("Waiters on the key", "queue", num), ("RELEASEs", "samples", num),
                ("Client p50", "client_p50_us", fine), ("p99", "client_p99_us", fine),
                ("Server p50", "server_p50_us", fine), ("p99", "server_p99_us", fine),
                ("p99.9", "server_p999_us", fine), ("mean", "server_mean_us", fine)],
    "leave": [("Leaving from", lambda r: ORIGIN[r["from"]], text), ("Waiters", "waiters", num),
              ("Longest queue before",
               lambda r: None if r["from"] == "spread" else r["queue_before"], num),
              ("Server CPU per waiter", "server_cpu_us_per_waiter", fine),
              ("Wall time", "wall_ms", lambda v: f"{v:.0f} ms")],
    "handoff": HANDOFF,
    "fairness": [("Strategy", spread("summary", "strategy"), text),
                 ("Cycles", spread("summary", "cycles"), num),
                 ("Cycles/s", spread("summary", "cycles_per_s"), num),
                 ("Jain", spread("summary", "jain_index"), f3),
                 ("Min", spread("summary", "min_cycles_per_contender"), text),
                 ("Mean", spread("summary", "mean_cycles_per_contender"), f1),
                 ("Max", spread("summary", "max_cycles_per_contender"), text),
                 *[(h, lambda r, p=p: r["summary"]["acquire"][p], us) for h, p in
                   [("Acquire p50", "p50_us"), ("p99", "p99_us"), ("max", "max_us")]],
                 ("Waiting", spread("summary", "waiting_at_end"), text),
                 ("Server CPU µs/cycle", "server_cpu_us_per_cycle", f1)],
    "observe": [("Change", "change", text), ("Changes", "changes", text),
                ("Wake-ups", spread("wakeup", "count"), num),
                *[(h, spread("wakeup", f"{h}_us"), us) for h in ("p50", "p90", "p99", "max")],
                ("Last p50", spread("last_wakeup", "p50_us"), us),
                ("Command p50", spread("command", "p50_us"), us),
                ("p99", spread("command", "p99_us"), us),
                ("PING p50", spread("ping", "p50_us"), us), ("p99", spread("ping", "p99_us"), us),
                ("max", spread("ping", "max_us"), us),
                ("Server CPU p50", spread("server_cpu", "p50_us"), us)],
    "holders": [("Server", "server", text), ("Shape", "label", text),
                ("Holders per key", "holders_per_key", num), ("Keys", "keys", num),
                ("Bytes per key", "bytes_per_key", num), ("per holder", "bytes_per_holder", f1),
                ("per extra holder", "bytes_per_extra_holder", f1),
                ("MEMORY USAGE of a key", "key_bytes", lambda v: f"{num(v)} B")],
    "readers": [("Hand-off", lambda r: ORIGIN[r["scenario"], r["recipe"]], text),
                ("Waiter", "recipe", code), *HANDOFF[1:6]],
    "keepalive": [("Server", lambda r: SIDES[r["side"]], text), ("Ticks", "ticks", num),
                  ("Lock commands", "lock_calls", num), ("CPU, whole window", "cpu_us", us),
                  ("CPU of the requests", "renewal_cpu_us", us), ("per tick", per_tick, fine),
                  ("Commands' own time", "lock_usec", us),
                  ("Replies", lambda r: f"{num(r['replies_ok'])} of {num(r['replies_expected'])}",
                   text),
                  ("Locks at end", "locks_at_end", num), ("Expired", "expiries", num),
                  ("Keys moved", "keys_moved", num),
                  ("Round trip p50", spread("tick", "p50_us"), us),
                  ("max", spread("tick", "max_us"), us)],
    "sync_ratios": [("Clients", "clients", text), ("Throughput ratio", "throughput_ratio", x),
                    ("p50 ratio", "p50_ratio", x), ("p99 ratio", "p99_ratio", x),
                    ("Master CPU ratio", "cpu_ratio", x),
                    ("Goal", lambda r: r.get("goal") and f"≥ {plain(r['goal']['threshold'])}×: "
                     f"{goal_verdict(r['goal'])}", lambda v: v or "")],
    "sync": [("Clients", "clients", text), ("Mode", lambda r: MODES[r["mode"]], text),
             ("Requests/s", "rps", num), ("p50", "p50_us", us), ("p99", "p99_us", us),
             ("Master CPU µs/req", "master_cpu_us_per_op", f1),
             ("Replica CPU µs/req", "replica_cpu_us_per_op", f1), ("Short", "short", num)],
    "raw_throughput": [("Server", "server", text), ("Command", "case", text),
                       ("Pipeline", "pipeline", text), ("Round", lambda r: r["round"] + 1, text),
                       ("Requests/s", "rps", num), ("CPU µs/req", "cpu_us_per_op", f2),
                       ("Work", "work_share", f3)],
    "raw_contention": [("Keys", spread("summary", "keys"), text),
                       ("Contenders", spread("summary", "contenders"), text),
                       ("Strategy", spread("summary", "strategy"), text),
                       ("Round", lambda r: r["round"] + 1, text),
                       ("Cycles/s", spread("summary", "cycles_per_s"), num),
                       ("Acquire p50", lambda r: r["summary"]["acquire"]["p50_us"], us),
                       ("p99", lambda r: r["summary"]["acquire"]["p99_us"], us),
                       ("p999", lambda r: r["summary"]["acquire"]["p999_us"], us),
                       ("Waiting", spread("summary", "waiting_at_end"), text)],
}


def table(name, rows):
    """The Markdown table `name` of `rows`. A row that says why it was not
    measured (`not_measured`) says so in its first empty cell.

    >>> print(table("release", [{"queue": 2, "samples": 0, "not_measured": "too busy"}]))
    | Waiters on the key | RELEASEs | Client p50 | p99 | Server p50 | p99 | p99.9 | mean |
    | --- | --- | --- | --- | --- | --- | --- | --- |
    | 2 | 0 | not measured: too busy | – | – | – | – | – |
    """
    columns = TABLES[name]
    line = lambda cells: "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"
    out = [line(h for h, _, _ in columns), line("---" for _ in columns)]
    for row in rows:
        why = row.get("not_measured")
        cells = []
        for _, field, show in columns:
            value = field(row) if callable(field) else row.get(field)
            if why and missing(value):
                cells.append(not_measured(why))
                why = None
            else:
                cells.append(show(value))
        out.append(line(cells))
    return "\n".join(out)


# ---------------------------------------------------------------- the template

class Fields(dict):
    """A JSON object whose fields also read as attributes: run.machine.cores."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


BLOCK = re.compile(r"\{%\s*(if|for|set|else|end)\b\s*(.*?)\s*%\}$")
FIGURE = re.compile(r"\{\{(.*?)\}\}")


def parse(lines, at=0):
    """The template's lines as a tree: a line is text, or a block
    (kind, argument, its lines, its else-lines, line number)."""
    nodes = []
    while at < len(lines):
        number, line = lines[at]
        block = BLOCK.match(line.strip())
        if not block:
            nodes.append((number, line))
        elif block[1] in ("else", "end"):
            return nodes, at, block[1]
        elif block[1] == "set":
            nodes.append(("set", block[2], [], [], number))
        else:
            body, at, stop = parse(lines, at + 1)
            orelse = []
            if stop == "else":
                orelse, at, stop = parse(lines, at + 1)
            nodes.append((block[1], block[2], body, orelse, number))
        at += 1
    return nodes, at, None


def fill(nodes, names, out):
    for node in nodes:
        number = node[0] if len(node) == 2 else node[4]
        try:
            if len(node) == 2:
                out.append(FIGURE.sub(lambda m: str(eval(m[1], names)), node[1]))
            elif node[0] == "set":
                exec(node[1], names)
            elif node[0] == "if":
                fill(node[2] if eval(node[1], names) else node[3], names, out)
            else:
                target, _, items = node[1].partition(" in ")
                for names["_item"] in eval(items, names):
                    exec(f"{target} = _item", names)
                    fill(node[2], names, out)
        except SystemExit:
            raise
        except Exception as error:  # noqa: BLE001 (say where the template broke)
            sys.exit(f"render.py: {TEMPLATE.name} line {number}: {error!r}")


def render(doc, img, data):
    """The report of `doc`: the template, filled in."""
    if doc.get("schema") != SCHEMA:
        sys.exit(f"render.py: schema {doc.get('schema')!r}, not {SCHEMA}: re-run lock-bench")
    template = re.sub(r"\{#.*?#\}\n?", "", TEMPLATE.read_text(), flags=re.S)
    nodes, _, _ = parse(list(enumerate(template.splitlines(), 1)))
    names = {**globals(), **doc, "img": img, "data": data}
    out = []
    fill(nodes, names, out)
    # One blank line between blocks, whichever were left out.
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def lacks(doc, report):
    """What --check wants of a report and does not find: a section's
    heading, a kind of goal (a goal the run could not measure is there, and
    says so)."""
    headings = [line for line in report.splitlines() if line.startswith("#")]
    kinds = {g["kind"] for g in doc["goals"]}
    absent = [s for s in SECTIONS if not any(h.startswith(s) for h in headings)]
    return absent + [f"a goal of kind {k}" for k in GOAL_KINDS if k not in kinds]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="the JSON document lock-bench wrote")
    parser.add_argument("report", type=Path, help="the Markdown report to write")
    parser.add_argument("--img", default="img", help="the charts' folder, relative to the report")
    parser.add_argument("--check", action="store_true", help="fail unless every section is there")
    args = parser.parse_args()
    if not args.results.exists():
        sys.exit(f"render.py: no {args.results}: run lock-bench (make bench) first")
    doc = json.loads(args.results.read_text(), object_hook=Fields)
    report = render(doc, args.img, os.path.relpath(args.results, args.report.parent))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(report)
    absent = lacks(doc, report)
    if args.check and absent:
        sys.exit(f"render.py: {args.report} lacks {', '.join(absent)}")
    print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
