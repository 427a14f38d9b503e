"""Charts for docs/benchmarks.md, drawn from the results document lock-bench
writes (docs/benchmarks.json; bench/README.md has its schema).

    python bench/charts.py RESULTS.json OUT_DIR

Writes throughput_ratios.png, contention_latency.png, memory_per_lock.png,
memory_per_holder.png, scale_latency.png, handoff_latency.png and
observe_latency.png. It only draws: every number comes from the document
(its summary, and the latency distributions' quantiles).
"""

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = ["#3b6ea8", "#e07b39", "#5a9e4b", "#9b59b6", "#c0392b", "#7f8c8d", "#17becf", "#d4a017"]


def throughput_ratios(summary, out):
    rows = summary["ratios"]
    if not rows:
        return
    servers = list(dict.fromkeys(r["server"] for r in rows))
    titles = list(dict.fromkeys(r["title"] for r in rows))
    pipelines = sorted({r["pipeline"] for r in rows})
    series = [(s, p) for s in servers for p in pipelines]
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(titles) * len(series) / 2 + 2))
    height = 0.8 / len(series)
    for i, (server, pipeline) in enumerate(series):
        values = []
        for title in titles:
            match = [
                r["throughput_ratio"]
                for r in rows
                if r["server"] == server and r["pipeline"] == pipeline and r["title"] == title
            ]
            values.append(match[0] if match and match[0] is not None else math.nan)
        ys = [t + i * height for t in range(len(titles))]
        bars = ax.barh(ys, values, height=height, color=COLORS[i % len(COLORS)],
                       label=f"{server}, pipeline {pipeline}")
        for bar, value in zip(bars, values):
            if not math.isnan(value):
                ax.text(bar.get_width() + 0.02, bar.get_y() + bar.get_height() / 2,
                        f"{value:.2f}×", va="center", fontsize=7)
    # Each bar's own goal (a goal may differ by server: + AOF, + replica).
    for i, (server, pipeline) in enumerate(series):
        for t, title in enumerate(titles):
            goal = [r.get("goal") for r in rows
                    if r["server"] == server and r["pipeline"] == pipeline and r["title"] == title]
            if goal and goal[0]:
                y = t + i * height
                ax.plot([goal[0]] * 2, [y - height / 2, y + height / 2], color="black",
                        linestyle="--", linewidth=1)
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_yticks([t + 0.4 - height / 2 for t in range(len(titles))])
    ax.set_yticklabels(titles, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("throughput ratio, native / alternative (median of interleaved rounds; dashed: goal at pipeline 16)")
    ax.set_title("redis-lock throughput relative to the Lua recipes, SET NX PX, SET IFEQ and plain SET")
    ax.legend(fontsize=8, loc="lower right")
    save(fig, out / "throughput_ratios.png")


def contention_latency(summary, out):
    rows = summary["contention"]
    if not rows:
        return
    key_counts = sorted({r["keys"] for r in rows})
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    fig, axes = plt.subplots(1, len(key_counts) + 1, figsize=(15, 4.6))
    styles = {"acquire_p50_us": ":", "acquire_p99_us": "--", "acquire_p999_us": "-"}
    for ax, keys in zip(axes, key_counts):
        for s, strategy in enumerate(strategies):
            sel = sorted((r for r in rows if r["keys"] == keys and r["strategy"] == strategy),
                         key=lambda r: r["contenders"])
            xs = [r["contenders"] for r in sel]
            for field, style in styles.items():
                ys = [max(r[field], 1) / 1000.0 for r in sel]
                ax.plot(xs, ys, linestyle=style, marker="o", markersize=3,
                        color=COLORS[s % len(COLORS)],
                        label=f"{strategy} {field.split('_')[1]}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("contenders")
        ax.set_ylabel("acquire latency, ms (log)")
        ax.set_title("one hot key" if keys == 1 else f"{keys:,} keys")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes[-1]
    for k, keys in enumerate(key_counts):
        for s, strategy in enumerate(strategies):
            sel = sorted((r for r in rows if r["keys"] == keys and r["strategy"] == strategy),
                         key=lambda r: r["contenders"])
            ax.plot([r["contenders"] for r in sel], [r["cycles_per_s"] for r in sel],
                    marker="o", markersize=3, color=COLORS[s % len(COLORS)],
                    linestyle="-" if k else "--",
                    label=f"{strategy}, {'1 key' if keys == 1 else f'{keys:,} keys'}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("contenders")
    ax.set_ylabel("cycles/s (log)")
    ax.set_title("completed lock cycles per second")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("Lock cycles under contention (acquire → hold → release): polling every 50-250 ms vs the server's WAIT queue")
    save(fig, out / "contention_latency.png")


def memory_per_lock(doc, out):
    rows = [r for s in doc["results"]["servers"] if s["memory"] for r in s["memory"]["bulk"]]
    if not rows:
        return
    servers = list(dict.fromkeys(r["server"] for r in rows))
    groups = [(s, c) for s in servers for c in sorted({r["locks"] for r in rows})]
    per_lock = {(r["server"], r["locks"], r["label"]): r["bytes_per_lock"] for r in rows}
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bars(ax, [f"{s}\n{c:,} locks" for s, c in groups],
         [(label, [per_lock.get((s, c, label)) for s, c in groups])
          for label in dict.fromkeys(r["label"] for r in rows)],
         "Memory per held lock", "bytes per held lock (used_memory delta / locks)", fmt="{:.0f}")
    save(fig, out / "memory_per_lock.png")


def memory_per_holder(summary, out):
    rows = summary.get("holder_memory") or []
    if not rows:
        return
    servers = list(dict.fromkeys(r["server"] for r in rows))
    fig, axes = plt.subplots(1, len(servers), figsize=(6.5 * len(servers), 4.4), squeeze=False)
    for ax, server in zip(axes[0], servers):
        labels = list(dict.fromkeys(r["label"] for r in rows if r["server"] == server))
        for i, label in enumerate(labels):
            sel = sorted((r for r in rows if r["server"] == server and r["label"] == label),
                         key=lambda r: r["holders_per_key"])
            # Bytes per holder at one holder a key (the key's own cost), then
            # per extra holder.
            xs = [r["holders_per_key"] for r in sel]
            ys = [r["bytes_per_extra_holder"] if r["bytes_per_extra_holder"] is not None
                  else r["bytes_per_holder"] for r in sel]
            native = "module" in label
            ax.plot(xs, ys, marker="o", markersize=4, color=COLORS[i % len(COLORS)],
                    linestyle="-" if native else "--", label=label)
            for x, y in zip(xs, ys):
                ax.text(x, y, f"{y:.0f}", fontsize=7, ha="left", va="bottom")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("holders per key (log)")
        ax.set_ylabel("bytes (log): at 1, the key; then per extra holder")
        ax.set_title(server, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Memory per holder of a read lock and of a semaphore (used_memory deltas)")
    save(fig, out / "memory_per_holder.png")


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bars(ax, groups, series, title, unit_label, fmt="{:.3g}"):
    """Grouped bars: `groups` are x labels, `series` (label, values) one bar each per group."""
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series):
        xs = [x + i * width for x in range(len(groups))]
        values = [v if v is not None else math.nan for v in values]
        drawn = ax.bar(xs, values, width=width, color=COLORS[i % len(COLORS)], label=label)
        for bar, value in zip(drawn, values):
            if not math.isnan(value):
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), fmt.format(value),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))])
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(unit_label, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def scale_latency(doc, out):
    summary = doc["summary"]
    rows = summary["scale"]
    if not rows:
        return
    release = summary.get("scale_release") or []
    memory = summary.get("scale_memory")
    leave = (doc["results"]["scale"] or {}).get("leave") or []
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.4))
    groups = [f"{row['held']:,} held locks,\n{row.get('waiters', 0):,} waiters" for row in rows]
    for ax, (title, scale, fields) in zip(axes[0][:2], [
        ("ACQUIRE, client (lock-load, includes the round trip), ms", 1000.0,
         [("client_p50_us", "p50"), ("client_p99_us", "p99"), ("client_p999_us", "p999")]),
        ("ACQUIRE, server (INFO latencystats), µs", 1.0,
         [("server_p50_us", "p50"), ("server_p99_us", "p99"), ("server_p999_us", "p99.9")]),
    ]):
        bars(ax, groups, [(name, [(row[f] or 0) / scale for row in rows]) for f, name in fields],
             title, "ms" if scale > 1 else "µs")
    ax = axes[0][2]
    if memory:
        bars(ax, ["a client in BLPOP", "a waiter in LOCK.ACQUIRE … WAIT"], [
            ("its connection", [memory["per_connection"], memory["per_connection"]]),
            ("its wait", [memory["per_blpop"], memory["per_wait"]]),
            ("in all", [memory["per_connection"] + memory["per_blpop"], memory["per_waiter"]]),
        ], f"memory per blocked client ({memory['waiters']:,} clients, used_memory deltas)",
             "bytes", fmt="{:,.0f}")
    else:
        ax.axis("off")
    if release:
        labels = [f"{r['queue']:,}" for r in release]
        bars(axes[1][0], labels, [
            ("p50", [r["client_p50_us"] for r in release]),
            ("p99", [r["client_p99_us"] for r in release]),
        ], "RELEASE by waiters on its key: client round trip, µs", "µs")
        axes[1][0].set_xlabel("waiters on the key", fontsize=8)
        bars(axes[1][1], labels, [
            ("p50", [r["server_p50_us"] for r in release]),
            ("p99", [r["server_p99_us"] for r in release]),
            ("mean", [r["server_mean_us"] for r in release]),
        ], "RELEASE by waiters on its key: server (latencystats, commandstats), µs", "µs")
        axes[1][1].set_xlabel("waiters on the key", fontsize=8)
    else:
        axes[1][0].axis("off")
        axes[1][1].axis("off")
    if leave:
        names = {"head": "head of\nthe longest queue", "tail": "tail of\nthe longest queue",
                 "spread": "spread keys"}
        bars(axes[1][2], [f"{names.get(r['from'], r['from'])}\n({r['queue_before']:,} queued)"
                          if r["from"] != "spread" else names["spread"] for r in leave],
             [("server CPU per waiter", [r["server_cpu_us_per_waiter"] for r in leave])],
             f"waiters leaving (disconnect), {leave[0]['waiters']:,} each, µs", "µs")
    else:
        axes[1][2].axis("off")
    fig.suptitle(f"Scale: many held locks and many waiters ({rows[0]['server']})")
    save(fig, out / "scale_latency.png")


def cdf(ax, quantiles_us, **style):
    """A distribution as a step curve, from its quantiles (0 to 1, evenly)."""
    if not quantiles_us:
        return
    xs = [max(v, 1.0) / 1000.0 for v in quantiles_us]
    ys = [k / (len(xs) - 1) for k in range(len(xs))] if len(xs) > 1 else [1.0]
    ax.step(xs, ys, where="post", **style)


def handoff_latency(doc, out):
    waiting = doc["results"].get("waiting")
    if not waiting:
        return
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    panels = [
        ("release", "handoff on release: release sent → grant received"),
        ("expiry", f"handoff after expiry ({waiting['expiry']['ttl_ms']} ms lease): "
                   "deadline → grant received"),
    ]
    for ax, (scenario, title) in zip(axes, panels):
        for i, row in enumerate(waiting[scenario]["recipes"]):
            if row["p50_us"] is None:
                continue
            cdf(ax, row["cdf_us"], color=COLORS[i % len(COLORS)],
                label=f"{row['recipe']}: p50 {row['p50_us'] / 1000:.3g} ms, "
                      f"p99 {row['p99_us'] / 1000:.3g} ms")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("ms (log)")
        ax.set_ylabel(f"fraction of handoffs ({waiting[scenario]['rounds']} per recipe)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    ax = axes[2]
    rows = [dict(run["summary"], duration_s=doc["profile"]["waiting"]["fairness_duration_ms"] / 1000)
            for run in waiting["fairness"]]
    fields = [("min_cycles_per_contender", "min"), ("mean_cycles_per_contender", "mean"),
              ("max_cycles_per_contender", "max")]
    width = 0.8 / len(fields)
    for f, (field, name) in enumerate(fields):
        xs = [r + f * width for r in range(len(rows))]
        values = [row[field] for row in rows]
        drawn = ax.bar(xs, values, width=width, color=COLORS[f], label=name)
        for bar, value in zip(drawn, values):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{value:.0f}",
                    ha="center", va="bottom", fontsize=7)
    for r, row in enumerate(rows):
        jain = row["jain_index"]
        top = row["max_cycles_per_contender"]
        ax.text(r + width, top * 1.06 + 0.5, f"Jain {jain:.3f}" if jain is not None else "",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks([r + width for r in range(len(rows))])
    ax.set_xticklabels([row["strategy"] for row in rows])
    ax.set_ylabel("lock cycles per contender")
    ax.margins(y=0.15)
    if rows:
        ax.set_title(f"fairness: {rows[0]['contenders']} contenders, one key, "
                     f"{rows[0]['duration_s']:.0f} s", fontsize=9)
    ax.legend(fontsize=8)
    fig.suptitle(f"Waiting for a lock: LOCK.ACQUIRE … WAIT vs SET NX PX polling vs "
                 f"python-redis-lock's BLPOP signal ({waiting['server']})")
    save(fig, out / "handoff_latency.png")


def observe_latency(doc, out):
    servers = doc["results"].get("observe") or []
    if not servers:
        return
    waiting = doc["results"].get("waiting")
    columns = max(len(s["runs"]) for s in servers)
    fig, axes = plt.subplots(len(servers), columns, figsize=(7 * columns, 4.4 * len(servers)),
                             squeeze=False)
    for row, server in zip(axes, servers):
        for ax, run in zip(row, server["runs"]):
            for i, change in enumerate(run["changes"]):
                wake = change["wakeup"]
                if not wake["count"]:
                    continue
                cdf(ax, change["cdf_us"], color=COLORS[i % len(COLORS)],
                    label=f"{change['change']}: p50 {wake['p50_us'] / 1000:.3g} ms, "
                          f"p99 {wake['p99_us'] / 1000:.3g} ms")
            if waiting and waiting["server"] == server["server"]:
                for scenario, style in (("release", "--"), ("expiry", ":")):
                    for native in (r for r in waiting[scenario]["recipes"]
                                   if r["recipe"] == "native-wait"):
                        cdf(ax, native["cdf_us"], color="black", linestyle=style, linewidth=1,
                            label=f"WAIT hand-off on {scenario} (section 5)")
            ax.set_xscale("log")
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("ms from the change (log)")
            ax.set_ylabel("fraction of wake-ups")
            ax.set_title(f"{server['server']}: {run['observers']:,} observers, "
                         f"rounds: {run['rounds']}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
        for ax in row[len(server["runs"]):]:
            ax.axis("off")
    fig.suptitle("LOCK.OBSERVE: from a change of holder to each observer's reply")
    save(fig, out / "observe_latency.png")


def main():
    results, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    doc = json.loads(results.read_text())
    summary = doc["summary"]
    for chart in (throughput_ratios, contention_latency, memory_per_holder):
        chart(summary, out)
    for chart in (memory_per_lock, scale_latency, handoff_latency, observe_latency):
        chart(doc, out)
    print(f"charts written to {out}")


if __name__ == "__main__":
    main()
