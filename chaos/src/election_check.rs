//! The leader-election checks of scenario 8, over a recorded history (the
//! fenced resource's own C1-C3 run on the same history in `check.rs`):
//! - **one leader at a time**: a term acts as leader from its grant's reply
//!   to the end of its last write the resource accepted. Two terms (two
//!   fences) never act at the same instant.
//! - **observers only move forward**: the holder fences each observer saw,
//!   free (0) left out, never go down.
//! - **observers converge**: every observer's last reply names the final
//!   holder (its fence, read from the master once nothing changes any more).
//!
//! It also measures what the report shows: terms, leader changes, why terms
//! ended, and how long after a new leader's own reply each observer saw it.

use std::collections::{BTreeMap, HashMap};

use crate::history::{Event, Outcome, MS};

#[derive(Default, Debug, Clone)]
pub struct ElectionStats {
    /// Confirmed grants to candidates: terms.
    pub terms: u64,
    /// Consecutive terms held by different candidates.
    pub leader_changes: u64,
    /// Terms with at least one accepted write.
    pub acting_terms: u64,
    /// Why terms ended, by the candidates' marks (and the harness' for a
    /// killed leader).
    pub ended: BTreeMap<String, u64>,
    /// Observer replies, and the (term, observer) pairs in which the
    /// observer saw the term.
    pub observed: u64,
    pub seen: u64,
    /// Terms an observer never saw: a later one came first (OBSERVE
    /// promises the newest holder, not every one).
    pub skipped: u64,
    /// Per (term, observer) seen: its first reply naming the term, minus the
    /// new leader's own reply to its ACQUIRE, in ns (0 when the observer
    /// was first: both replies leave the server in the same step).
    pub latencies: Vec<u64>,
    pub observer_first: u64,
}

impl ElectionStats {
    /// The `q` quantile of the convergence times, in ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let mut v = self.latencies.clone();
        v.sort_unstable();
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v[i] as f64 / MS as f64
    }

    pub fn add(&mut self, other: &ElectionStats) {
        self.terms += other.terms;
        self.leader_changes += other.leader_changes;
        self.acting_terms += other.acting_terms;
        for (k, n) in &other.ended {
            *self.ended.entry(k.clone()).or_default() += n;
        }
        self.observed += other.observed;
        self.seen += other.seen;
        self.skipped += other.skipped;
        self.latencies.extend(&other.latencies);
        self.observer_first += other.observer_first;
    }

    pub fn summary(&self) -> String {
        let ended: Vec<String> = self.ended.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!(
            "{} terms ({} acting), {} leader changes; terms ended: {}; observers: {} replies, \
             {} (term, observer) pairs seen, {} skipped; convergence p50 {:.1} ms, p99 {:.1} ms, \
             max {:.1} ms ({} seen by the observer first)",
            self.terms,
            self.acting_terms,
            self.leader_changes,
            ended.join(", "),
            self.observed,
            self.seen,
            self.skipped,
            self.quantile_ms(0.5),
            self.quantile_ms(0.99),
            self.quantile_ms(1.0),
            self.observer_first
        )
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / MS as f64
}

/// Check a scenario 8 history; `final_fence` is the holder the harness read
/// at the end (0: none read, the convergence check is skipped).
pub fn check_election(events: &[Event], final_fence: u64) -> (Vec<String>, ElectionStats) {
    let mut out = Vec::new();
    let mut stats = ElectionStats::default();
    // fence -> (candidate, grant reply)
    let mut terms: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
    // fence -> end of its last accepted write
    let mut acted: HashMap<u64, u64> = HashMap::new();
    // observer -> its replies (t_comp, fence)
    let mut seen: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for e in events {
        match e {
            Event::Acquire {
                worker,
                outcome: Outcome::Granted,
                fence: Some(f),
                t_comp,
                ..
            } => {
                terms.insert(*f, (*worker, *t_comp));
            }
            Event::Write {
                fence,
                t_end,
                accepted: true,
                term: true,
                ..
            } => {
                let end = acted.entry(*fence).or_insert(*t_end);
                *end = (*end).max(*t_end);
            }
            Event::Observed {
                worker,
                fence,
                t_comp,
                ..
            } => seen.entry(*worker).or_default().push((*t_comp, *fence)),
            Event::Leader { reason, .. } => *stats.ended.entry(reason.clone()).or_default() += 1,
            _ => {}
        }
    }
    stats.terms = terms.len() as u64;
    let mut by_time: Vec<(u64, u32)> = terms.values().map(|(w, t)| (*t, *w)).collect();
    by_time.sort_unstable();
    stats.leader_changes = by_time.windows(2).filter(|p| p[0].1 != p[1].1).count() as u64;

    // One leader at a time, among the terms the resource accepted.
    let mut acting: Vec<(u64, u64, u64, u32)> = terms
        .iter()
        .filter_map(|(f, (w, t))| acted.get(f).map(|end| (*t, *end, *f, *w)))
        .collect();
    acting.sort_unstable();
    stats.acting_terms = acting.len() as u64;
    let mut last: Option<(u64, u64, u32)> = None; // end, fence, candidate
    for &(start, end, fence, cand) in &acting {
        if let Some((end0, f0, c0)) = last {
            if start < end0 {
                out.push(format!(
                    "two leaders: candidate {cand} (fence {fence}) acted {:.1} ms before candidate {c0} (fence {f0}) last did",
                    ms(end0 - start)
                ));
            }
        }
        if last.is_none_or(|(end0, _, _)| end > end0) {
            last = Some((end, fence, cand));
        }
    }

    // Observers: forward only, converged, and how fast.
    for (obs, replies) in &mut seen {
        replies.sort_unstable();
        stats.observed += replies.len() as u64;
        let mut highest = 0;
        let mut first_seen: HashMap<u64, u64> = HashMap::new();
        for &(t, fence) in replies.iter() {
            if fence == 0 {
                continue;
            }
            if fence < highest {
                out.push(format!(
                    "observer {obs} saw fence {fence} after fence {highest}: it went back"
                ));
            }
            highest = highest.max(fence);
            first_seen.entry(fence).or_insert(t);
        }
        for (fence, (_, t_grant)) in &terms {
            match first_seen.get(fence) {
                Some(&t) => {
                    stats.seen += 1;
                    if t < *t_grant {
                        stats.observer_first += 1;
                    }
                    stats.latencies.push(t.saturating_sub(*t_grant));
                }
                None => stats.skipped += 1,
            }
        }
        if final_fence > 0 {
            let last = replies.last().map_or(0, |r| r.1);
            if last != final_fence {
                out.push(format!(
                    "observer {obs} did not converge: its last reply names fence {last}, the holder is fence {final_fence}"
                ));
            }
        }
    }
    if final_fence > 0 && seen.is_empty() {
        out.push("no observer replied: the run proves nothing".into());
    }
    (out, stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Hold;

    fn grant(cand: u32, fence: u64, t_comp: u64) -> Event {
        Event::Acquire {
            worker: cand,
            key: "leader".into(),
            token: format!("c{cand}-{fence}"),
            ttl_ms: 1000,
            t_inv: 0,
            t_comp: t_comp * MS,
            outcome: Outcome::Granted,
            fence: Some(fence),
            server: "s".into(),
            hold: Hold::Exclusive,
            lease: None,
        }
    }

    fn work(cand: u32, fence: u64, t_start: u64, t_end: u64, accepted: bool) -> Event {
        Event::Write {
            worker: cand,
            key: "leader".into(),
            fence,
            t_start: t_start * MS,
            t_end: t_end * MS,
            t_recv: t_end * MS,
            accepted,
            term: true,
            hold: Hold::Exclusive,
        }
    }

    fn observed(obs: u32, fence: u64, t_comp: u64) -> Event {
        Event::Observed {
            worker: obs,
            key: "leader".into(),
            fence,
            owner: String::new(),
            t_inv: 0,
            t_comp: t_comp * MS,
            server: "s".into(),
        }
    }

    fn clean() -> Vec<Event> {
        vec![
            grant(0, 10, 0),
            observed(10, 10, 1),
            work(0, 10, 1, 5, true),
            work(0, 10, 5, 9, true),
            grant(1, 20, 100),
            observed(10, 0, 95),
            observed(10, 20, 103),
            observed(11, 20, 99),
            work(1, 20, 101, 110, true),
            // The old leader's late write, refused: not acting.
            work(0, 10, 9, 12, false),
        ]
    }

    #[test]
    fn a_clean_handover_passes_and_is_measured() {
        let (v, s) = check_election(&clean(), 20);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((s.terms, s.acting_terms, s.leader_changes), (2, 2, 1));
        // Observer 10 saw both terms, observer 11 only the second.
        assert_eq!((s.seen, s.skipped, s.observer_first), (3, 1, 1));
        assert_eq!(s.quantile_ms(1.0), 3.0);
        assert_eq!(s.quantile_ms(0.5), 1.0);
    }

    #[test]
    fn two_leaders_at_once_are_flagged() {
        let mut h = clean();
        // The old leader's write accepted while the new one already acted.
        h.push(work(0, 10, 105, 120, true));
        let (v, _) = check_election(&h, 20);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("two leaders"), "{v:?}");
    }

    #[test]
    fn an_observer_going_back_or_not_converging_is_flagged() {
        let mut h = clean();
        h.push(observed(11, 10, 130));
        let (v, _) = check_election(&h, 20);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("went back"), "{v:?}");
        assert!(v[1].contains("did not converge"), "{v:?}");
        // Without a final holder only the order is checked.
        assert_eq!(check_election(&h, 0).0.len(), 1);
    }
}
