//! Checkers C1, C2, C3, C5 and C6 over a recorded history (C4, replica
//! digests, needs live servers and is run by the scenarios; C6, the guarded
//! list in Redis, is in `guarded.rs`).
//!
//! A lease is *certainly held* from the moment its ACQUIRE reply arrived
//! (`t_comp`) until the earliest moment it could have ended: `t_inv + ttl`
//! (the server computed the deadline after the request left), pushed later by
//! each successful EXTEND (`t_inv + ttl`), cut short at the invocation of a
//! RELEASE that returned 1. It *may* be held until the latest possible end:
//! the reply time of the grant or of the last successful EXTEND, plus its TTL.
//! The server expires leases by its wall clock in whole milliseconds and the
//! history uses CLOCK_MONOTONIC, so both bounds get `SLACK_NS` of slack.
//!
//! A hold attached to a lease group (`LEASE id`, scenario 14) lives exactly
//! as long as its lease: it is certainly held until the latest `t_inv + ttl`
//! of the lease's successful `GRANT` and `KEEPALIVE` calls (whenever they
//! were made: the lease, and so the hold once attached, lasted at least that
//! long), and may be held until the latest `t_comp + ttl` of them or of its
//! own grant. `LOCK.LEASE REVOKE` by the harness ends it at the revoke's
//! invocation, as `LOCK.REVOKE` ends the holds it names by fence.
//!
//! Shared holders (issue 13) are checked by the same sweep, [`conflicts`]:
//! two holders may act at once only if both are readers, or both hold a
//! semaphore's permits and, with everyone else acting then, no more than its
//! `limit` are out.

use std::collections::{BTreeMap, HashMap};

use crate::guarded::{self, GuardStats};
use crate::history::{Event, Hold, LeaseOp, Outcome, MS};

pub const SLACK_NS: u64 = 5 * MS;

#[derive(Default, Debug, Clone)]
pub struct Verdict {
    /// C1: accepted critical sections of one key that overlap (a writer
    /// beside anyone, or more than a semaphore's limit of permits at once).
    pub c1: Vec<String>,
    /// C2: a repeated fence, or a fence not above one granted earlier in
    /// real time.
    pub c2: Vec<String>,
    /// C3: two leases certainly held at once (double grants; for shared
    /// holders, a writer beside a reader or more than `limit` permits).
    pub c3_double: Vec<String>,
    /// C3: an EXTEND or RELEASE that returned 1 after its lease could only
    /// have ended.
    pub c3_late: Vec<String>,
    /// C4: replica and master digests differ (filled by scenarios).
    pub c4: Vec<String>,
    /// C5: no grant within TTL + 1 s of a fault's reference time (or service
    /// not back within 1 s, filled by scenarios).
    pub c5: Vec<String>,
    /// C6: the guarded list that survived has two holders' sections
    /// interleaved, a fence going backwards, or a record whose GUARD was
    /// refused. Never tolerated, in any mode.
    pub c6: Vec<String>,
    /// A scenario's own checks (replication stream, persistence round trips).
    pub scenario: Vec<String>,
    /// A scenario's own checks that hold a time bound (a hand-off within
    /// 1 s, observers caught up by the end) or need the workload to have
    /// covered something (every worker granted, the round proving
    /// something): they count, as `scenario` does, unless the machine was
    /// too busy for them ([`Verdict::excuse_timing`]).
    pub timed: Vec<String>,
    /// C5 and `timed` findings of a run on a machine too busy for their
    /// bounds: reported, not counted (a slow machine proves no fault).
    pub not_measured: Vec<String>,
    pub stats: Stats,
}

#[derive(Default, Debug, Clone, Copy)]
pub struct Stats {
    pub acquires: u64,
    pub grants: u64,
    pub unconfirmed: u64,
    pub unknown: u64,
    /// Grants the server undid (`NOSYNC`): never used.
    pub undone: u64,
    pub writes_accepted: u64,
    pub writes_rejected: u64,
    /// Of the rejected writes, those that reached the resource while their
    /// lease was certainly still held: refusals of a live holder (the
    /// semaphore rule allows them; the exclusive and reader rules should not
    /// make any).
    pub live_writes_rejected: u64,
    /// EXTEND/RELEASE invoked after the lease could only have ended that
    /// returned 0, as they should.
    pub late_ops_refused: u64,
    pub extends: u64,
    pub releases: u64,
    /// `LOCK.LEASE` calls (workers' grants and keepalives, the harness'
    /// revokes) and the harness' `LOCK.REVOKE`s.
    pub lease_ops: u64,
    /// Keepalives answered 0: the lease was gone (ran out or revoked).
    pub keepalives_refused: u64,
    /// Accepted sections still under way when the harness revoked their
    /// hold (C1 counts them up to the revoke), and of the writes of such
    /// sections, those the resource refused.
    pub revoked_sections: u64,
    pub revoked_writes_rejected: u64,
    pub faults: u64,
    /// Leases that another grant overlapped (C3): each counted once.
    pub lost_leases: u64,
    /// The guarded list (C6).
    pub guard: GuardStats,
    /// Grants by mode, and how much sharing the resource saw.
    pub holds: HoldStats,
}

/// Shared holders in a history: grants by mode, and the most readers or
/// permits that acted at the resource at one instant (the proof that the
/// run shared at all).
#[derive(Default, Debug, Clone, Copy)]
pub struct HoldStats {
    pub exclusive: u64,
    pub shared: u64,
    pub permit_grants: u64,
    pub permits: u64,
    pub max_readers_acting: u64,
    pub max_permits_acting: u64,
}

impl HoldStats {
    fn add(&mut self, o: HoldStats) {
        self.exclusive += o.exclusive;
        self.shared += o.shared;
        self.permit_grants += o.permit_grants;
        self.permits += o.permits;
        self.max_readers_acting = self.max_readers_acting.max(o.max_readers_acting);
        self.max_permits_acting = self.max_permits_acting.max(o.max_permits_acting);
    }

    pub fn describe(&self) -> String {
        if self.permit_grants > 0 {
            format!(
                "{} permits in {} grants; up to {} permits acting at once",
                self.permits, self.permit_grants, self.max_permits_acting
            )
        } else {
            format!(
                "{} shared, {} exclusive; up to {} readers acting at once",
                self.shared, self.exclusive, self.max_readers_acting
            )
        }
    }
}

/// The most spans of `hold`'s kind open at one instant, weighted by permits.
fn most_at_once(spans: &[Span], shared: bool) -> u64 {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for s in spans.iter().filter(|s| s.end > s.start) {
        let w = match s.hold {
            Hold::Shared if shared => 1,
            Hold::Permits { count, .. } if !shared => count as i64,
            _ => continue,
        };
        edges.push((s.start, w));
        edges.push((s.end, -w));
    }
    // Ends before starts at the same instant.
    edges.sort_by_key(|&(t, w)| (t, w));
    let (mut now, mut most) = (0i64, 0i64);
    for (_, w) in edges {
        now += w;
        most = most.max(now);
    }
    most as u64
}

impl Stats {
    /// Every command the workers sent, plus every resource write.
    pub fn operations(&self) -> u64 {
        self.acquires
            + self.extends
            + self.releases
            + self.lease_ops
            + self.writes_accepted
            + self.writes_rejected
    }
}

impl Verdict {
    pub fn violations(&self) -> usize {
        self.c1.len()
            + self.c2.len()
            + self.c3_double.len()
            + self.c3_late.len()
            + self.c4.len()
            + self.c5.len()
            + self.c6.len()
            + self.scenario.len()
            + self.timed.len()
    }

    /// On a machine too busy for time bounds (`busy`: why), the findings
    /// that hold one (C5, `timed`) become `not_measured`: the safety
    /// checks (C1-C4, C6, the scenarios' own) still count.
    pub fn excuse_timing(&mut self, busy: &str) {
        let timed = self.c5.drain(..).map(|m| format!("C5: {m}"));
        let timed: Vec<String> = timed.chain(self.timed.drain(..)).collect();
        self.not_measured.extend(
            timed
                .into_iter()
                .map(|m| format!("{m} (not counted: {busy})")),
        );
    }

    /// Violations that count against a run. With `tolerate_double_grants`
    /// (a mode that is known not to be safe, such as async failover),
    /// overlapping sections and double grants are reported but tolerated.
    pub fn failures(&self, tolerate_double_grants: bool) -> usize {
        if tolerate_double_grants {
            self.violations() - self.c1.len() - self.c3_double.len()
        } else {
            self.violations()
        }
    }

    pub fn merge(&mut self, other: Verdict) {
        self.c1.extend(other.c1);
        self.c2.extend(other.c2);
        self.c3_double.extend(other.c3_double);
        self.c3_late.extend(other.c3_late);
        self.c4.extend(other.c4);
        self.c5.extend(other.c5);
        self.c6.extend(other.c6);
        self.scenario.extend(other.scenario);
        self.timed.extend(other.timed);
        self.not_measured.extend(other.not_measured);
        let (a, b) = (&mut self.stats, other.stats);
        a.acquires += b.acquires;
        a.grants += b.grants;
        a.unconfirmed += b.unconfirmed;
        a.unknown += b.unknown;
        a.writes_accepted += b.writes_accepted;
        a.writes_rejected += b.writes_rejected;
        a.live_writes_rejected += b.live_writes_rejected;
        a.late_ops_refused += b.late_ops_refused;
        a.extends += b.extends;
        a.releases += b.releases;
        a.lease_ops += b.lease_ops;
        a.keepalives_refused += b.keepalives_refused;
        a.revoked_sections += b.revoked_sections;
        a.revoked_writes_rejected += b.revoked_writes_rejected;
        a.faults += b.faults;
        a.lost_leases += b.lost_leases;
        a.guard.add(b.guard);
        a.holds.add(b.holds);
    }

    pub fn summary(&self) -> String {
        format!(
            "C1 {} C2 {} C3 {}+{} C4 {} C5 {} C6 {} scenario {}{}",
            self.c1.len(),
            self.c2.len(),
            self.c3_double.len(),
            self.c3_late.len(),
            self.c4.len(),
            self.c5.len(),
            self.c6.len(),
            self.scenario.len() + self.timed.len(),
            if self.not_measured.is_empty() {
                String::new()
            } else {
                format!(" (not measured {})", self.not_measured.len())
            }
        )
    }

    /// The first few messages of each non-empty checker.
    pub fn details(&self) -> String {
        let mut out = String::new();
        for (name, list) in [
            ("C1", &self.c1),
            ("C2", &self.c2),
            ("C3 double grant", &self.c3_double),
            ("C3 late success", &self.c3_late),
            ("C4", &self.c4),
            ("C5", &self.c5),
            ("C6", &self.c6),
            ("scenario", &self.scenario),
            ("scenario", &self.timed),
            ("not measured", &self.not_measured),
        ] {
            for msg in list.iter().take(5) {
                out.push_str(&format!("  {name}: {msg}\n"));
            }
            if list.len() > 5 {
                out.push_str(&format!("  {name}: ... {} more\n", list.len() - 5));
            }
        }
        out
    }
}

#[derive(Clone, Debug)]
struct Grant {
    worker: u32,
    key: String,
    token: String,
    fence: u64,
    t_inv: u64,
    t_comp: u64,
    certain_end: u64,
    confirmed: bool,
    hold: Hold,
    /// The lease group it is attached to (the worker's label).
    lease: Option<String>,
    /// When the harness revoked it (`LOCK.REVOKE`, `LOCK.LEASE REVOKE`).
    revoked_at: Option<u64>,
}

/// An accepted write: (worker, fence, t_start, t_end, hold).
type AcceptedWrite = (u32, u64, u64, u64, Hold);

/// A time interval during which a holder acted, or certainly held its lease.
pub struct Span {
    pub start: u64,
    pub end: u64,
    pub hold: Hold,
}

/// For each span (by index) that starts while others are open and breaks
/// the lock's rule with them, the indices of those others: an exclusive
/// holder beside anyone, a reader beside a writer, or a semaphore holder
/// whose permits, with those of the holders open at that instant, exceed
/// the limit. Permits in use only grow when a span starts, so checking at
/// each start is enough.
pub fn conflicts(spans: &[Span]) -> Vec<(usize, Vec<usize>)> {
    let mut order: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].end > spans[i].start)
        .collect();
    order.sort_by_key(|&i| spans[i].start);
    let mut open: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    for i in order {
        let s = &spans[i];
        open.retain(|&o| spans[o].end > s.start);
        let against: Vec<usize> = match s.hold {
            Hold::Shared => open
                .iter()
                .copied()
                .filter(|&o| spans[o].hold != Hold::Shared)
                .collect(),
            Hold::Permits { count, limit } => {
                let in_use: u64 = open.iter().map(|&o| spans[o].hold.permits()).sum();
                let other_kind = open
                    .iter()
                    .any(|&o| !matches!(spans[o].hold, Hold::Permits { .. }));
                if in_use + count > limit || other_kind {
                    open.clone()
                } else {
                    Vec::new()
                }
            }
            Hold::Exclusive => open.clone(),
        };
        if !against.is_empty() {
            out.push((i, against));
        }
        open.push(i);
    }
    out
}

fn ms(ns: u64) -> f64 {
    ns as f64 / MS as f64
}

/// Run C1, C2, C3, C5 and C6. `c5_bound_ns` is TTL + 1 s.
/// Why the machine is too busy for a run's time bounds to mean anything,
/// if it is: its load average (1 min) above twice its cores, the load
/// under which `make test` failed on time bounds (5 to 9 on 2 cores).
pub fn busy() -> Option<String> {
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    let load: f64 = loadavg.split_whitespace().next()?.parse().ok()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    busy_at(load, cores)
}

fn busy_at(load: f64, cores: usize) -> Option<String> {
    (load > 2.0 * cores as f64)
        .then(|| format!("the machine was busy, load average {load:.1} on {cores} cores"))
}

pub fn check(events: &[Event], c5_bound_ns: u64) -> Verdict {
    let mut v = Verdict::default();
    // (key, token) -> its EXTEND/RELEASE events in invocation order.
    let mut ops: HashMap<(String, String), Vec<&Event>> = HashMap::new();
    let mut grants: Vec<Grant> = Vec::new();
    // key -> its accepted writes.
    let mut writes: BTreeMap<&str, Vec<AcceptedWrite>> = BTreeMap::new();
    // (fence, arrival) of each rejected write.
    let mut rejected: Vec<(u64, u64)> = Vec::new();
    let mut faults: Vec<(String, String, u64)> = Vec::new();
    // lease label -> (t_inv, t_comp, ttl) of each successful GRANT/KEEPALIVE.
    let mut renewals: HashMap<&str, Vec<(u64, u64, u64)>> = HashMap::new();
    // lease label -> (t_inv, t_comp) of each harness REVOKE.
    let mut lease_revokes: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    // (key, fence) -> t_inv of the LOCK.REVOKE that ended it.
    let mut key_revokes: HashMap<(&str, u64), u64> = HashMap::new();
    for event in events {
        match event {
            Event::Acquire {
                worker,
                key,
                token,
                ttl_ms,
                t_inv,
                t_comp,
                outcome,
                fence,
                hold,
                lease,
                ..
            } => {
                v.stats.acquires += 1;
                if *outcome == Outcome::Granted {
                    let h = &mut v.stats.holds;
                    match hold {
                        Hold::Exclusive => h.exclusive += 1,
                        Hold::Shared => h.shared += 1,
                        Hold::Permits { count, .. } => {
                            h.permit_grants += 1;
                            h.permits += count;
                        }
                    }
                }
                match outcome {
                    Outcome::Granted => v.stats.grants += 1,
                    Outcome::Unconfirmed => v.stats.unconfirmed += 1,
                    Outcome::Unknown => v.stats.unknown += 1,
                    Outcome::Undone => v.stats.undone += 1,
                    Outcome::Refused => {}
                }
                if let (Some(fence), Outcome::Granted | Outcome::Unconfirmed) = (fence, outcome) {
                    grants.push(Grant {
                        worker: *worker,
                        key: key.clone(),
                        token: token.clone(),
                        fence: *fence,
                        t_inv: *t_inv,
                        t_comp: *t_comp,
                        certain_end: t_inv + ttl_ms * MS,
                        confirmed: *outcome == Outcome::Granted,
                        hold: *hold,
                        lease: lease.clone(),
                        revoked_at: None,
                    });
                }
            }
            Event::Extend { key, token, .. } => {
                v.stats.extends += 1;
                ops.entry((key.clone(), token.clone()))
                    .or_default()
                    .push(event);
            }
            Event::Release { key, token, .. } => {
                v.stats.releases += 1;
                ops.entry((key.clone(), token.clone()))
                    .or_default()
                    .push(event);
            }
            Event::Write {
                worker,
                key,
                fence,
                t_start,
                t_end,
                t_recv,
                accepted,
                hold,
                ..
            } => {
                if *accepted {
                    v.stats.writes_accepted += 1;
                    writes
                        .entry(key.as_str())
                        .or_default()
                        .push((*worker, *fence, *t_start, *t_end, *hold));
                } else {
                    v.stats.writes_rejected += 1;
                    rejected.push((*fence, *t_recv));
                }
            }
            Event::Fault {
                kind,
                detail,
                t_ref,
                ..
            } => {
                v.stats.faults += 1;
                faults.push((kind.clone(), detail.clone(), *t_ref));
            }
            Event::Lease {
                lease,
                op,
                ttl_ms,
                t_inv,
                t_comp,
                result,
                ..
            } => {
                v.stats.lease_ops += 1;
                match (op, result) {
                    (LeaseOp::Revoke, _) => lease_revokes
                        .entry(lease.as_str())
                        .or_default()
                        .push((*t_inv, *t_comp)),
                    (_, Some(1)) => renewals.entry(lease.as_str()).or_default().push((
                        *t_inv,
                        *t_comp,
                        ttl_ms * MS,
                    )),
                    (LeaseOp::Keepalive, Some(0)) => v.stats.keepalives_refused += 1,
                    _ => {}
                }
            }
            Event::Revoke {
                key, fences, t_inv, ..
            } => {
                v.stats.lease_ops += 1;
                for f in fences {
                    key_revokes.insert((key.as_str(), *f), *t_inv);
                }
            }
            Event::Guarded { .. }
            | Event::Survived { .. }
            | Event::Observed { .. }
            | Event::Leader { .. } => {}
        }
    }

    // Lease bounds from each grant's own EXTEND/RELEASE calls; C3 late successes.
    let ttl_of = |e: &Event| match e {
        Event::Extend { ttl_ms, .. } => Some(*ttl_ms),
        _ => None,
    };
    for grant in grants.iter_mut() {
        let grant_ttl = grant.certain_end - grant.t_inv;
        let mut latest_end = grant.t_comp + grant_ttl;
        if let Some(lease) = &grant.lease {
            // The hold's own ttl is a name only: its lease's renewals bound
            // it (the lease's GRANT is one, recorded before any hold).
            grant.certain_end = grant.t_comp;
            latest_end = grant.t_comp;
            for &(t_inv, t_comp, ttl) in renewals.get(lease.as_str()).into_iter().flatten() {
                grant.certain_end = grant.certain_end.max(t_inv + ttl);
                latest_end = latest_end.max(t_comp + ttl);
            }
        }
        // Taken away by the harness: a revoke of its lease (a grant asked for
        // after the revoke's reply would have got NOLEASE), or of its fence.
        let lease_revoked = grant.lease.as_deref().and_then(|l| {
            lease_revokes
                .get(l)?
                .iter()
                .filter(|&&(_, t_comp)| grant.t_inv < t_comp)
                .map(|&(t_inv, _)| t_inv)
                .min()
        });
        let key_revoked = key_revokes.get(&(grant.key.as_str(), grant.fence)).copied();
        let revoked_at = lease_revoked.into_iter().chain(key_revoked).min();
        grant.revoked_at = revoked_at;
        let Some(list) = ops.get_mut(&(grant.key.clone(), grant.token.clone())) else {
            if let Some(t) = revoked_at {
                grant.certain_end = grant.certain_end.min(t);
            }
            continue;
        };
        list.sort_by_key(|e| match e {
            Event::Extend { t_inv, .. } | Event::Release { t_inv, .. } => *t_inv,
            _ => 0,
        });
        let mut released_at = None;
        for e in list.iter() {
            let (t_inv, t_comp, result, name) = match e {
                Event::Extend {
                    t_inv,
                    t_comp,
                    result,
                    ..
                } => (*t_inv, *t_comp, *result, "EXTEND"),
                Event::Release {
                    t_inv,
                    t_comp,
                    result,
                    ..
                } => (*t_inv, *t_comp, *result, "RELEASE"),
                _ => continue,
            };
            if released_at.is_some() {
                break;
            }
            let late = t_inv > latest_end + SLACK_NS;
            if late && result == Some(1) {
                v.c3_late.push(format!(
                    "worker {} {name} of fence {} returned 1 {:.1} ms after the lease could only have ended",
                    grant.worker,
                    grant.fence,
                    ms(t_inv - latest_end)
                ));
            } else if late && result == Some(0) {
                v.stats.late_ops_refused += 1;
            }
            if result == Some(1) {
                if let Some(ttl) = ttl_of(e) {
                    // An EXTEND of a hold in a lease group moves nothing.
                    if grant.lease.is_none() {
                        grant.certain_end = grant.certain_end.max(t_inv + ttl * MS);
                        latest_end = latest_end.max(t_comp + ttl * MS);
                    }
                } else {
                    released_at = Some(t_inv);
                }
            }
        }
        if let Some(t) = released_at.into_iter().chain(revoked_at).min() {
            grant.certain_end = grant.certain_end.min(t);
        }
    }

    let certain_end: HashMap<u64, u64> = grants.iter().map(|g| (g.fence, g.certain_end)).collect();
    v.stats.live_writes_rejected = rejected
        .iter()
        .filter(|(f, t)| certain_end.get(f).is_some_and(|e| t + SLACK_NS < *e))
        .count() as u64;

    // C1: accepted critical sections of one key never overlap (readers may
    // share, and up to a semaphore's limit of permits).
    // A section under way when its hold was revoked counts up to the revoke:
    // the holder could not know before it asked the server again, and what
    // it did after is for the fence (its write reached the resource before
    // the next holder's, or was refused) and for LOCK.GUARD (C6).
    let revoked_at: HashMap<u64, u64> = grants
        .iter()
        .filter_map(|g| Some((g.fence, g.revoked_at?)))
        .collect();
    v.stats.revoked_writes_rejected = rejected
        .iter()
        .filter(|(f, _)| revoked_at.contains_key(f))
        .count() as u64;
    let multi_key = writes.len() > 1;
    for (key, writes) in &writes {
        let spans: Vec<Span> = writes
            .iter()
            .map(|&(_, fence, start, end, hold)| {
                let end = match revoked_at.get(&fence) {
                    Some(&r) if r < end => {
                        v.stats.revoked_sections += 1;
                        r
                    }
                    _ => end,
                };
                Span { start, end, hold }
            })
            .collect();
        let h = &mut v.stats.holds;
        h.max_readers_acting = h.max_readers_acting.max(most_at_once(&spans, true));
        h.max_permits_acting = h.max_permits_acting.max(most_at_once(&spans, false));
        for (i, against) in conflicts(&spans) {
            let (worker, fence, t_start, _, hold) = writes[i];
            let Some(&o) = against.iter().max_by_key(|&&o| writes[o].3) else {
                continue;
            };
            let (w0, f0, _, end0, hold0) = writes[o];
            v.c1.push(format!(
                "{}critical section of worker {worker} (fence {fence}, {}) starts {:.1} ms before that of worker {w0} (fence {f0}, {}) ends{}",
                if multi_key { format!("key {key}: ") } else { String::new() },
                hold.label(),
                ms(end0 - t_start),
                hold0.label(),
                if against.len() > 1 {
                    format!(", with {} others open", against.len() - 1)
                } else {
                    String::new()
                }
            ));
        }
    }

    // C2: fences are unique, and increase in real-time order.
    let mut by_fence: HashMap<u64, &Grant> = HashMap::new();
    for g in &grants {
        if let Some(other) = by_fence.insert(g.fence, g) {
            if other.token != g.token {
                v.c2.push(format!(
                    "fence {} granted twice: to worker {} and worker {}",
                    g.fence, other.worker, g.worker
                ));
            }
        }
    }
    let mut by_comp: Vec<&Grant> = grants.iter().collect();
    by_comp.sort_by_key(|g| g.t_comp);
    let mut by_inv: Vec<&Grant> = grants.iter().collect();
    by_inv.sort_by_key(|g| g.t_inv);
    let mut done = 0;
    let mut highest: Option<&Grant> = None;
    for g in by_inv {
        while done < by_comp.len() && by_comp[done].t_comp < g.t_inv {
            let c = by_comp[done];
            if highest.is_none_or(|h| c.fence > h.fence) {
                highest = Some(c);
            }
            done += 1;
        }
        if let Some(h) = highest {
            if h.fence >= g.fence {
                v.c2.push(format!(
                    "fence {} (worker {}) is not above fence {} (worker {}) granted {:.1} ms before it was requested",
                    g.fence,
                    g.worker,
                    h.fence,
                    h.worker,
                    ms(g.t_inv - h.t_comp)
                ));
            }
        }
    }

    // C3: no instant at which the leases certainly held break the rule.
    let mut by_key: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in grants.iter().filter(|g| g.confirmed) {
        by_key.entry(&g.key).or_default().push(g);
    }
    let mut lost = std::collections::HashSet::new();
    for list in by_key.values() {
        let spans: Vec<Span> = list
            .iter()
            .map(|g| Span {
                start: g.t_comp,
                end: g.certain_end.saturating_sub(SLACK_NS),
                hold: g.hold,
            })
            .collect();
        for (i, against) in conflicts(&spans) {
            let g = list[i];
            let Some(&o) = against.iter().max_by_key(|&&o| spans[o].end) else {
                continue;
            };
            let h = list[o];
            lost.extend(against.iter().map(|&o| list[o].fence));
            v.c3_double.push(format!(
                "key {}: worker {} got fence {} ({}) while worker {} certainly still held fence {} ({}, for {:.1} ms more){}",
                g.key,
                g.worker,
                g.fence,
                g.hold.label(),
                h.worker,
                h.fence,
                h.hold.label(),
                ms(spans[o].end - g.t_comp),
                if against.len() > 1 {
                    format!(", with {} other holders", against.len() - 1)
                } else {
                    String::new()
                }
            ));
        }
    }

    v.stats.lost_leases = lost.len() as u64;

    // C5: after each fault, a grant within TTL + 1 s.
    let mut grant_times: Vec<u64> = grants
        .iter()
        .filter(|g| g.confirmed)
        .map(|g| g.t_comp)
        .collect();
    grant_times.sort_unstable();
    for (kind, detail, t_ref) in faults {
        let first = grant_times.iter().find(|&&t| t >= t_ref);
        match first {
            Some(&t) if t - t_ref <= c5_bound_ns => {}
            Some(&t) => v.c5.push(format!(
                "{kind} ({detail}): first grant {:.0} ms after the fault, bound {:.0} ms",
                ms(t - t_ref),
                ms(c5_bound_ns)
            )),
            None => {
                v.c5.push(format!("{kind} ({detail}): no grant after the fault"))
            }
        }
    }

    // C6: the guarded list that survived.
    (v.c6, v.stats.guard) = guarded::check(events);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(worker: u32, fence: u64, t_inv: u64, t_comp: u64, ttl_ms: u64) -> Event {
        Event::Acquire {
            worker,
            key: "k".into(),
            token: format!("w{worker}-{fence}"),
            ttl_ms,
            t_inv: t_inv * MS,
            t_comp: t_comp * MS,
            outcome: Outcome::Granted,
            fence: Some(fence),
            server: "s".into(),
            hold: Hold::Exclusive,
            lease: None,
        }
    }

    fn release(worker: u32, fence: u64, t_inv: u64, result: i64) -> Event {
        Event::Release {
            worker,
            key: "k".into(),
            token: format!("w{worker}-{fence}"),
            t_inv: t_inv * MS,
            t_comp: (t_inv + 1) * MS,
            result: Some(result),
        }
    }

    fn write(worker: u32, fence: u64, t_start: u64, t_end: u64) -> Event {
        Event::Write {
            worker,
            key: "k".into(),
            fence,
            t_start: t_start * MS,
            t_end: t_end * MS,
            t_recv: t_end * MS,
            accepted: true,
            term: false,
            hold: Hold::Exclusive,
        }
    }

    #[test]
    fn a_clean_handoff_history_passes() {
        let h = vec![
            grant(1, 10, 0, 1, 2000),
            write(1, 10, 2, 10),
            release(1, 10, 11, 1),
            grant(2, 11, 5, 13, 2000),
            write(2, 11, 14, 20),
            release(2, 11, 21, 1),
        ];
        let v = check(&h, 3000 * MS);
        assert_eq!(v.violations(), 0, "{}", v.details());
        assert_eq!(v.stats.grants, 2);
    }

    #[test]
    fn overlapping_sections_repeated_fences_and_double_grants_are_flagged() {
        let h = vec![
            grant(1, 10, 0, 1, 2000),
            grant(2, 10, 50, 51, 2000),
            write(1, 10, 2, 100),
            write(2, 11, 60, 70),
        ];
        let v = check(&h, 3000 * MS);
        assert_eq!(v.c1.len(), 1);
        // Repeated, and not above the fence granted before it was asked for.
        assert_eq!(v.c2.len(), 2);
        assert_eq!(v.c3_double.len(), 1);
    }

    #[test]
    fn a_late_release_that_succeeds_is_flagged_and_one_that_fails_is_counted() {
        let h = vec![
            grant(1, 10, 0, 1, 100),
            release(1, 10, 500, 1),
            grant(2, 11, 600, 601, 100),
            release(2, 11, 900, 0),
        ];
        let v = check(&h, 3000 * MS);
        assert_eq!(v.c3_late.len(), 1);
        assert_eq!(v.stats.late_ops_refused, 1);
    }

    #[test]
    fn a_grant_after_expiry_is_legal_and_c5_measures_from_the_fault() {
        let mut h = vec![grant(1, 10, 0, 1, 100), grant(2, 11, 150, 151, 100)];
        h.push(Event::Fault {
            kind: "pause".into(),
            detail: String::new(),
            t_start: 0,
            t_heal: 0,
            t_ref: 140 * MS,
        });
        assert_eq!(check(&h, 1100 * MS).violations(), 0);
        assert_eq!(check(&h, 5 * MS).c5.len(), 1);
    }

    fn with_hold(mut e: Event, h: Hold) -> Event {
        match &mut e {
            Event::Acquire { hold, .. } | Event::Write { hold, .. } => *hold = h,
            _ => {}
        }
        e
    }

    #[test]
    fn readers_together_pass_and_a_writer_beside_a_reader_is_flagged() {
        let sh = |e| with_hold(e, Hold::Shared);
        let h = vec![
            sh(grant(1, 10, 0, 1, 2000)),
            sh(grant(2, 11, 0, 2, 2000)),
            sh(write(1, 10, 3, 50)),
            sh(write(2, 11, 4, 40)),
            release(1, 10, 60, 1),
            release(2, 11, 61, 1),
        ];
        let v = check(&h, 3000 * MS);
        assert_eq!(v.violations(), 0, "{}", v.details());
        assert_eq!(v.stats.holds.max_readers_acting, 2);
        assert_eq!(v.stats.holds.shared, 2);

        let mut bad = h.clone();
        bad.push(grant(3, 12, 5, 6, 2000));
        bad.push(write(3, 12, 7, 20));
        let v = check(&bad, 3000 * MS);
        assert_eq!(v.c1.len(), 1, "{}", v.details());
        assert_eq!(v.c3_double.len(), 1, "{}", v.details());
        assert_eq!(v.stats.lost_leases, 2);
    }

    #[test]
    fn permits_up_to_the_limit_pass_and_one_more_is_flagged() {
        let p = |e, count| with_hold(e, Hold::Permits { count, limit: 4 });
        let mut h = vec![
            p(grant(1, 10, 0, 1, 2000), 2),
            p(grant(2, 11, 0, 2, 2000), 1),
            p(grant(3, 12, 0, 3, 2000), 1),
            p(write(1, 10, 4, 50), 2),
            p(write(2, 11, 5, 50), 1),
            p(write(3, 12, 6, 50), 1),
        ];
        for (w, f) in [(1, 10), (2, 11), (3, 12)] {
            h.push(release(w, f, 60, 1));
        }
        let v = check(&h, 3000 * MS);
        assert_eq!(v.violations(), 0, "{}", v.details());
        assert_eq!(v.stats.holds.max_permits_acting, 4);
        assert_eq!(v.stats.holds.permits, 4);

        h.push(p(grant(4, 13, 7, 8, 2000), 1));
        h.push(p(write(4, 13, 9, 20), 1));
        let v = check(&h, 3000 * MS);
        assert_eq!(v.c1.len(), 1, "{}", v.details());
        assert_eq!(v.c3_double.len(), 1, "{}", v.details());
    }

    #[test]
    fn the_resource_rules_for_readers_writers_and_permits() {
        use crate::history::Resource;
        let mut r = Resource::default();
        // Readers granted together pass in any order; a writer below any
        // fence already seen does not.
        assert!(r.admits(1, 5, Hold::Shared, false));
        assert!(r.admits(2, 7, Hold::Shared, false));
        assert!(r.admits(3, 6, Hold::Shared, false));
        assert!(!r.admits(4, 6, Hold::Exclusive, false));
        assert!(r.admits(4, 8, Hold::Exclusive, false));
        // A reader paused past its lease, once a writer has written.
        assert!(!r.admits(1, 7, Hold::Shared, false));
        assert!(r.admits(2, 9, Hold::Shared, false));

        let mut r = Resource::default();
        let p = |count| Hold::Permits { count, limit: 3 };
        assert!(r.admits(1, 10, p(2), false));
        assert!(r.admits(2, 11, p(1), false));
        assert!(r.admits(3, 12, p(2), false));
        // 11 and 12 were granted after 10 and need 3 permits with it: 10's
        // lease must have ended.
        assert!(!r.admits(1, 10, p(2), false));
        r.released(3);
        assert!(r.admits(1, 10, p(2), false));
    }

    /// A grant of `key` attached to lease `label`.
    fn lease_grant(worker: u32, key: &str, fence: u64, t_inv: u64, label: &str) -> Event {
        match grant(worker, fence, t_inv, t_inv + 1, 1000) {
            Event::Acquire {
                worker,
                token,
                ttl_ms,
                t_inv,
                t_comp,
                outcome,
                fence,
                server,
                hold,
                ..
            } => Event::Acquire {
                worker,
                key: key.into(),
                token,
                ttl_ms,
                t_inv,
                t_comp,
                outcome,
                fence,
                server,
                hold,
                lease: Some(label.into()),
            },
            other => other,
        }
    }

    fn lease_op(label: &str, op: LeaseOp, t_inv: u64, result: i64) -> Event {
        Event::Lease {
            worker: 100,
            lease: label.into(),
            op,
            ttl_ms: 1000,
            t_inv: t_inv * MS,
            t_comp: (t_inv + 1) * MS,
            result: Some(result),
        }
    }

    fn on_key(mut e: Event, k: &str) -> Event {
        match &mut e {
            Event::Acquire { key, .. } | Event::Write { key, .. } => *key = k.into(),
            _ => {}
        }
        e
    }

    #[test]
    fn a_lease_hold_lives_by_its_lease_renewals_not_its_own_ttl() {
        // Granted at 0, renewed at 300 and 600: the hold taken at 900
        // certainly lives until 1600, not 900 + its ttl.
        let base = vec![
            lease_op("L", LeaseOp::Grant, 0, 1),
            lease_op("L", LeaseOp::Keepalive, 300, 1),
            lease_op("L", LeaseOp::Keepalive, 600, 1),
            lease_grant(100, "k", 10, 900, "L"),
            lease_op("L", LeaseOp::Keepalive, 1200, 0),
        ];
        let mut h = base.clone();
        h.push(grant(1, 11, 1650, 1651, 1000));
        let v = check(&h, 3000 * MS);
        assert_eq!(v.violations(), 0, "{}", v.details());
        assert_eq!((v.stats.lease_ops, v.stats.keepalives_refused), (4, 1));
        // Inside the lease's bound: a double grant.
        let mut h = base.clone();
        h.push(grant(1, 11, 1500, 1501, 1000));
        assert_eq!(check(&h, 3000 * MS).c3_double.len(), 1);
        // A keepalive answered 1 after the hold's RELEASE answered 0 there
        // would be a late success: not here, the lease had ended.
        let mut h = base;
        h.push(release(100, 10, 1700, 0));
        let v = check(&h, 3000 * MS);
        assert_eq!(v.stats.late_ops_refused, 1, "{}", v.details());
    }

    #[test]
    fn a_revoke_of_the_lease_or_of_the_fence_ends_the_hold_at_the_revoke() {
        let base = vec![
            lease_op("L", LeaseOp::Grant, 0, 1),
            lease_grant(100, "k", 10, 10, "L"),
            lease_op("L", LeaseOp::Keepalive, 300, 1),
            grant(1, 11, 520, 521, 1000),
        ];
        assert_eq!(check(&base, 3000 * MS).c3_double.len(), 1);
        let mut by_lease = base.clone();
        by_lease.push(Event::Lease {
            worker: 1000,
            lease: "L".into(),
            op: LeaseOp::Revoke,
            ttl_ms: 1000,
            t_inv: 500 * MS,
            t_comp: 510 * MS,
            result: Some(1),
        });
        let v = check(&by_lease, 3000 * MS);
        assert_eq!(v.violations(), 0, "{}", v.details());
        let mut by_fence = base.clone();
        by_fence.push(Event::Revoke {
            key: "k".into(),
            reason: "r".into(),
            fences: vec![10],
            t_inv: 500 * MS,
            t_comp: 510 * MS,
            result: Some(1),
        });
        assert_eq!(check(&by_fence, 3000 * MS).violations(), 0);
        // Another fence of the key is not taken away.
        let mut other = base;
        other.push(Event::Revoke {
            key: "k".into(),
            reason: "r".into(),
            fences: vec![9],
            t_inv: 500 * MS,
            t_comp: 510 * MS,
            result: Some(0),
        });
        assert_eq!(check(&other, 3000 * MS).c3_double.len(), 1);
    }

    #[test]
    fn sections_of_two_keys_may_overlap_and_a_revoked_one_counts_until_the_revoke() {
        let h = vec![
            on_key(grant(1, 10, 0, 1, 2000), "a"),
            on_key(grant(2, 11, 0, 2, 2000), "b"),
            on_key(write(1, 10, 3, 50), "a"),
            on_key(write(2, 11, 4, 40), "b"),
        ];
        assert_eq!(check(&h, 3000 * MS).violations(), 0);
        // Revoked at 20 while its section ran to 50; the next holder's
        // section starts at 30.
        let mut h = vec![
            grant(1, 10, 0, 1, 2000),
            grant(2, 11, 21, 22, 2000),
            write(1, 10, 3, 50),
            write(2, 11, 30, 60),
        ];
        assert_eq!(check(&h, 3000 * MS).c1.len(), 1);
        h.push(Event::Revoke {
            key: "k".into(),
            reason: "r".into(),
            fences: vec![10],
            t_inv: 20 * MS,
            t_comp: 21 * MS,
            result: Some(1),
        });
        let v = check(&h, 3000 * MS);
        assert_eq!(v.violations(), 0, "{}", v.details());
        assert_eq!(v.stats.revoked_sections, 1);
    }

    #[test]
    fn the_fenced_resource_compares_fences_per_key() {
        let socket =
            std::env::temp_dir().join(format!("lock-chaos-test-{}.sock", std::process::id()));
        let rec = crate::history::Recorder::start(&socket).expect("recorder");
        let w = |key: &str, fence| Event::Write {
            worker: 1,
            key: key.into(),
            fence,
            t_start: 0,
            t_end: 0,
            t_recv: 0,
            accepted: false,
            term: false,
            hold: Hold::Exclusive,
        };
        assert_eq!(rec.record(w("a", 20)), Some("OK\n"));
        assert_eq!(rec.record(w("b", 10)), Some("OK\n"));
        assert_eq!(rec.record(w("a", 15)), Some("NO\n"));
        let _ = std::fs::remove_file(&socket);
    }

    #[test]
    fn on_a_busy_machine_time_bounds_are_not_measured_and_safety_still_counts() {
        assert_eq!(busy_at(4.0, 2), None);
        let why = busy_at(5.5, 2).expect("busy");
        assert_eq!(why, "the machine was busy, load average 5.5 on 2 cores");
        let mut v = Verdict {
            c3_double: vec!["a double grant".into()],
            c5: vec!["first grant 3100 ms after the fault".into()],
            timed: vec!["worker 3 was never granted a set".into()],
            ..Verdict::default()
        };
        assert_eq!(v.failures(false), 3);
        v.excuse_timing(&why);
        assert_eq!(v.failures(false), 1, "the double grant still counts");
        assert!(v.c5.is_empty() && v.timed.is_empty());
        assert_eq!(
            v.not_measured,
            [
                format!("C5: first grant 3100 ms after the fault (not counted: {why})"),
                format!("worker 3 was never granted a set (not counted: {why})"),
            ]
        );
        assert!(v.summary().ends_with("(not measured 2)"), "{}", v.summary());
    }
}
