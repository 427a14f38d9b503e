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


class NotMeasured(unittest.TestCase):
    """What a busy machine could not measure is said, never a failure."""

    WHY = "the 300 ms lease ran out while its holds were taken, in each of 3 attempts"

    def unmeasured_lease(self):
        """The fixture with its second lease ttl not measured, as lock-bench
        writes it: no sides, a row of nulls, the goal not measured."""
        doc = document()
        run = doc.results.keepalive.runs[1]
        run["sides"] = []
        run["not_measured"] = self.WHY
        row = doc.summary.keepalive[1]
        for field in row:
            if field.endswith(("_us", "_ratio")):
                row[field] = None
        row.update(lease_calls=0, extend_calls=0, keys_moved=None, all_held=False,
                   not_measured=self.WHY)
        goal = render.first(doc.goals, kind="lease-keepalive", ttl_ms=row.ttl_ms)
        goal.update(row, verdict="not-measured")
        return doc

    def test_a_goal_not_measured_says_why_in_the_goals_table(self):
        report = report_of(self.unmeasured_lease())
        goals = table_rows(report, "## Goals")
        lease = [r for r in goals if r[0].startswith("Keeping 10,000 holds alive")]
        self.assertEqual(lease[1][4], f"not measured: {self.WHY}")
        self.assertEqual(lease[1][2], f"{render.DASH}: {render.DASH} against {render.DASH}")
        self.assertNotIn("not measured", lease[0][4])

    def test_a_lease_ttl_not_measured_has_its_subsection_with_why(self):
        report = report_of(self.unmeasured_lease())
        section = report.split("### 8.2 ")[1].split("\n## ")[0]
        self.assertIn(f"**not measured: {self.WHY}.**", section)
        self.assertNotIn("| one lease", section)
        # The other ttl is shown as measured.
        self.assertEqual(len(table_rows(report, "### 8.1 ")), 3)

    def test_check_still_passes_with_a_not_measured_goal(self):
        doc = self.unmeasured_lease()
        report = report_of(doc)
        lacking = render.lacks(doc, report)
        self.assertNotIn("a goal of kind lease-keepalive", lacking)
        self.assertNotIn("## 8. ", lacking)

    def test_a_row_not_measured_says_why_in_its_first_empty_cell(self):
        row = {"recipe": "native-wait", "count": 0, "discarded": 0, "p50_us": None,
               "p90_us": None, "p99_us": None, "max_us": None, "mean_us": None,
               "not_measured": "round 1: only 7 of 500 waiters were queued by the first deadline"}
        measured = {"recipe": "setnx-poll", "count": 3, "discarded": 1, "p50_us": 900.0,
                    "p90_us": 1000.0, "p99_us": 1000.0, "max_us": 1000.0, "mean_us": 950.0}
        lines = render.table("handoff", [row, measured]).splitlines()
        cells = [c.strip() for c in lines[2].strip("|").split("|")]
        self.assertEqual(cells[:4], ["native-wait", "0", f"not measured: {row['not_measured']}",
                                     render.DASH])
        self.assertNotIn("not measured", lines[3])

    def test_a_sync_goal_not_measured_is_not_a_miss(self):
        goal = {"kind": "sync", "verdict": "not-measured", "missed": [],
                "not_measured": "no p99 ratio: a run answered no request within its duration"}
        self.assertEqual(render.goal_verdict(goal),
                         "not measured: no p99 ratio: a run answered no request within its duration")


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
