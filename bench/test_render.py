"""Tests of render.py on a small results document: testdata/lease-sync.json,
a quick run of the lease and SYNC sections (`lock-bench --profile quick
--only lease,sync`), trimmed (no scripts, no quantiles). Standard library
only; `make bench-quick` runs it:

    python3 bench/test_render.py
"""

import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import render  # noqa: E402 (the renderer beside this file)

FIXTURE = Path(__file__).parent / "testdata" / "lease-sync.json"


def document():
    return json.loads(FIXTURE.read_text(), object_hook=render.Fields)


def report_of(doc):
    return render.render(doc, "img", "results.json")


def table_rows(report, heading, nth=1):
    """The rows of the `nth` table after `heading` (a line it starts)."""
    lines = report.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(heading))
    for _ in range(nth):
        start = next(i for i in range(at + 1, len(lines))
                     if lines[i].startswith("|") and not lines[i - 1].startswith("|"))
        at = start
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


class LeaseSection(unittest.TestCase):
    def setUp(self):
        self.doc = document()
        self.report = report_of(self.doc)

    def test_each_lease_ttl_has_its_subsection(self):
        self.assertIn("## 8. Keeping many holds alive: one lease against LOCK.EXTEND",
                      self.report)
        self.assertIn("### 8.1 Lease ttl 3,000 ms, renewed every 1,000 ms", self.report)
        self.assertIn("### 8.2 Lease ttl 300 ms, renewed every 100 ms", self.report)

    def test_the_table_has_a_row_per_server_with_its_figures(self):
        rows = table_rows(self.report, "### 8.1 ")
        self.assertEqual([r[0] for r in rows], ["one lease: `KEEPALIVE`",
                                                "plain holds: `LOCK.EXTEND` each",
                                                "idle: `PING`"])
        run = self.doc.results.keepalive.runs[0]
        lease, extend, idle = run.sides
        self.assertEqual(rows[0][1], render.num(lease.ticks))
        self.assertEqual(rows[1][2], render.num(extend.lock_calls))
        self.assertEqual(rows[1][7], f"{render.num(extend.replies_ok)} of "
                         f"{render.num(extend.replies_expected)}")
        self.assertEqual(rows[0][5], render.fine(lease.renewal_cpu_us / lease.ticks))
        # The plain holds' keys are not read: a dash, not 0.
        self.assertEqual((rows[0][10], rows[1][10]), ("0", render.DASH))

    def test_the_ratios_and_the_verdict_follow_the_table(self):
        row = self.doc.summary.keepalive[0]
        goal = render.first(self.doc.goals, kind="lease-keepalive", ttl_ms=3000)
        line = next(line for line in self.report.splitlines()
                    if line.startswith("`LOCK.EXTEND` of each hold against the lease"))
        self.assertIn(f"**{render.against_times(row.renewal_ratio, 100.0)}**", line)
        self.assertIn(f"Calls {render.times(row.calls_ratio)}", line)
        self.assertIn("Calls 10,000×", line)
        self.assertIn(f"the goal, ≥ 100×: {render.goal_verdict(goal)}", line)

    def test_the_commands_are_shown_per_ttl(self):
        self.assertIn("extend  LOCK.EXTEND plain:<n> <token> 300   (10,000 in one pipeline "
                      "every 100 ms)", self.report)
        self.assertIn("lease   LOCK.LEASE KEEPALIVE <id>   (every 1000 ms)", self.report)


class SyncSection(unittest.TestCase):
    def setUp(self):
        self.doc = document()
        self.report = report_of(self.doc)

    def test_each_server_has_its_ratios_and_medians(self):
        self.assertIn("## 9. SYNC: a grant answered once a replica holds it", self.report)
        for server in ("Redis 7.0.15", "Valkey 8.1.8"):
            ratios = table_rows(self.report, f"### {server} + replica")
            self.assertEqual([r[0] for r in ratios], ["1", "50"])
            # The goal is judged with the most clients only.
            self.assertEqual(ratios[0][5], "")
            self.assertTrue(ratios[1][5].startswith("≥ 1×: "), ratios[1][5])
        modes = [r[1] for r in table_rows(self.report, "### Redis 7.0.15 + replica", nth=2)]
        self.assertEqual(modes[:3], ["`LOCK.ACQUIRE … SYNC`", "`LOCK.ACQUIRE` + `WAIT`",
                                     "`LOCK.ACQUIRE` alone"])

    def test_every_command_line_is_shown(self):
        for argv in self.doc.method.commands.sync:
            self.assertIn(" ".join(argv), self.report)


class Goals(unittest.TestCase):
    def test_the_goals_table_has_the_new_kinds(self):
        report = report_of(document())
        goals = table_rows(report, "## Goals")
        self.assertEqual(sum(r[0].startswith("Keeping 10,000 holds alive") for r in goals), 2)
        self.assertEqual(sum(r[0].startswith("`LOCK.ACQUIRE … SYNC 1`") for r in goals), 2)

    def test_a_sync_miss_names_what_missed(self):
        goal = {"kind": "sync", "verdict": "missed", "missed": ["throughput", "p99"]}
        self.assertEqual(render.goal_verdict(goal), "**missed** (throughput, p99)")
        goal = {"kind": "sync", "verdict": "missed", "missed": ["p50"]}
        self.assertEqual(render.goal_verdict(goal), "**missed** (p50)")
        goal = {"kind": "sync", "verdict": "met", "missed": []}
        self.assertEqual(render.goal_verdict(goal), "met")

    def test_a_lease_goal_says_when_a_hold_was_lost(self):
        goal = dict(render.first(document().goals, kind="lease-keepalive"), all_held=False,
                    verdict="missed")
        self.assertIn("a hold was lost", render.goal_verdict(goal))
        cells = render.goal_cells(goal)
        self.assertIn("≥ 100× less server CPU than `LOCK.EXTEND` of each", cells[0])

    def test_check_asks_for_the_new_sections(self):
        self.assertIn("## 8. ", render.SECTIONS)
        self.assertIn("## 9. ", render.SECTIONS)
        self.assertIn("lease-keepalive", render.GOAL_KINDS)
        self.assertIn("sync", render.GOAL_KINDS)


class WithoutTheSections(unittest.TestCase):
    def test_a_run_without_them_renders_without_them(self):
        doc = document()
        # (Items, not attributes: Fields reads its items as attributes.)
        doc.results["keepalive"] = None
        doc.results["sync"] = []
        doc["goals"] = [g for g in doc.goals if g.kind not in ("lease-keepalive", "sync")]
        report = report_of(doc)
        self.assertNotIn("## 8. ", report)
        self.assertNotIn("## 9. ", report)

    def test_a_document_from_before_them_renders(self):
        doc = document()
        for name in ("keepalive", "sync"):
            del doc.results[name]
        doc["goals"] = []
        report = report_of(doc)
        self.assertIn("## Raw samples", report)
        self.assertNotIn("## 8. ", report)


if __name__ == "__main__":
    unittest.main()
