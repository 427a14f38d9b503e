//! Scenario 15 (issue 28): multi-key locks under the faults of scenarios 1,
//! 2 and 4. Workers (`multi_worker.rs`) take random sets of 2-4 keys of a
//! pool of six hash-tagged keys at once with `LOCK.MACQUIRE … WAIT`, write
//! the set's fence to each key's fenced resource, and give the set back
//! with `LOCK.MRELEASE`. Three phases, each a run of its own:
//!
//! - contention: 12 workers on a master with a replica; C4 compares their
//!   digests afterwards, and every worker must have been granted a set (a
//!   request that queues on every key and holds none while it waits cannot
//!   deadlock, nor starve behind sets that overlap it);
//! - paused holders: the harness SIGSTOPs holders of a set past its TTL,
//!   and workers stop themselves between their lease check and their writes;
//! - kill -9 of the master with `appendfsync always`, under load, restarted.
//!
//! The history is per key (see `multi_worker.rs`), so C1-C3 and C5 check
//! each key as one lock. This file adds the multi-key checks: a refused
//! `LOCK.MACQUIRE`'s token holds no key (the worker's `LOCK.MRELEASE` with it
//! released 0), and the contention phase's progress.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::check::Verdict;
use crate::history::{Event, Outcome, Recorder, MS};
use crate::scenarios::{
    aof_always_kill_setup, finish_run, join_workers, kill_restart, pause_holders, spawn_pool_with,
    worker_base, Ctx, Pool, Report,
};
use crate::server;
use crate::worker::WorkerArgs;

const ID: u32 = 15;
/// The pool's base name: keys `{chaos:multi}:0` … `{chaos:multi}:5`.
const KEY: &str = "chaos:multi";
const POOL: u64 = 6;

/// `n` multi-key workers: each `LOCK.MACQUIRE` queues with `WAIT wait_ms`
/// with probability `wait_p`, and retries after a short sleep otherwise.
fn spawn_multi(
    ctx: &Ctx,
    base: &WorkerArgs,
    n: u32,
    seed: u64,
    wait_ms: u64,
    wait_p: f64,
) -> Result<Pool, String> {
    spawn_pool_with(ctx, base, n, seed, |_, a| {
        a.multi_keys = POOL;
        a.wait_ms = wait_ms;
        a.wait_p = wait_p;
    })
}

/// What the multi-key checks found in a history.
#[derive(Default)]
pub struct MultiStats {
    /// Granted sets (one per token, whatever its size), by size.
    pub sets_by_size: [u64; 5],
    /// Refused requests whose token was probed with `LOCK.MRELEASE`, and
    /// those probes that released a key (each a violation).
    pub probes: u64,
    pub probes_released: u64,
    /// Workers and how many sets each was granted.
    pub grants_by_worker: HashMap<u32, u64>,
}

impl MultiStats {
    pub fn describe(&self) -> String {
        let [_, _, two, three, four] = self.sets_by_size;
        format!(
            "{} sets granted (2 keys: {two}, 3: {three}, 4: {four}); {} refused requests probed with MRELEASE, {} of them released a key",
            two + three + four,
            self.probes,
            self.probes_released
        )
    }
}

/// The multi-key checks: a refused request's token holds nothing.
pub fn check_sets(events: &[Event]) -> (Vec<String>, MultiStats) {
    let mut stats = MultiStats::default();
    let mut violations = Vec::new();
    // token -> (worker, keys) of granted sets; refused tokens.
    let mut granted: HashMap<&str, (u32, usize)> = HashMap::new();
    let mut refused: HashSet<&str> = HashSet::new();
    // token -> the probe's count (the same on each key's event).
    let mut probed: HashMap<&str, Option<i64>> = HashMap::new();
    for e in events {
        match e {
            Event::Acquire {
                worker,
                token,
                outcome: Outcome::Granted,
                ..
            } => granted.entry(token).or_insert((*worker, 0)).1 += 1,
            Event::Acquire {
                token,
                outcome: Outcome::Refused,
                ..
            } => {
                refused.insert(token);
            }
            Event::Release { token, result, .. } if refused.contains(token.as_str()) => {
                probed.insert(token, *result);
            }
            _ => {}
        }
    }
    for (worker, size) in granted.values() {
        stats.sets_by_size[(*size).min(4)] += 1;
        *stats.grants_by_worker.entry(*worker).or_default() += 1;
    }
    stats.probes = probed.len() as u64;
    for (token, count) in probed {
        if let Some(n) = count.filter(|&n| n != 0) {
            stats.probes_released += 1;
            violations.push(format!(
                "LOCK.MACQUIRE of token {token} answered null, yet LOCK.MRELEASE with it released {n} keys: a partial grant"
            ));
        }
    }
    (violations, stats)
}

pub fn multi_key(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, ID, "Multi-key locks");
    let seed_base = ctx.seed + 100 * ID as u64;

    // Contention, as scenario 1, with a replica for C4.
    let (secs, workers_n) = if ctx.quick { (3, 12) } else { (15, 12) };
    let ttl = 2000;
    {
        let seed = seed_base;
        let master = ctx.cfg.start(&format!("s{ID}-master"), &[])?;
        let replica = ctx.cfg.start(&format!("s{ID}-replica"), &[])?;
        server::replicate(&replica, &master)?;
        let rec = Recorder::start(&ctx.out.join(format!("s{ID}.sock")))?;
        let mut base = worker_base(&rec, &master.addr(), KEY, ttl);
        base.duration_ms = secs * 1000;
        base.extend = 0.2;
        let mut workers = spawn_multi(ctx, &base, workers_n, seed, 2000, 0.75)?;
        join_workers(&mut workers, Duration::from_secs(secs + 10));
        let (own, stats) = check_sets(&rec.snapshot());
        let mut timed = Vec::new();
        for w in 0..workers_n {
            if stats.grants_by_worker.get(&w).copied().unwrap_or(0) == 0 {
                timed.push(format!("worker {w} was never granted a set in {secs} s"));
            }
        }
        let extra = Verdict {
            c4: server::digests_agree(&master.addr(), &[replica.addr()], Duration::from_secs(5)),
            scenario: own,
            timed,
            ..Verdict::default()
        };
        let v = finish_run(
            ctx,
            &mut report,
            "contention",
            seed,
            &rec,
            (ttl + 1000) * MS,
            extra,
        );
        let fewest = stats.grants_by_worker.values().min().copied().unwrap_or(0);
        report.notes.push(format!(
            "contention: {workers_n} workers, {}; every worker granted at least {fewest} sets; {} writes accepted, {} rejected",
            stats.describe(),
            v.stats.writes_accepted,
            v.stats.writes_rejected
        ));
    }

    // Paused holders, as scenario 2.
    let pauses = if ctx.quick { 2 } else { 12 };
    let ttl = 1000;
    {
        let seed = seed_base + 1;
        let mut rng = StdRng::seed_from_u64(seed);
        let master = ctx.cfg.start(&format!("s{ID}-paused"), &[])?;
        let rec = Recorder::start(&ctx.out.join(format!("s{ID}.sock")))?;
        let mut base = worker_base(&rec, &master.addr(), KEY, ttl);
        base.hold_ms = (20, 80);
        base.extend = 0.5;
        base.duration_ms = (pauses * 4 + 5) * 1000;
        base.stop_before_write = 0.02;
        let mut workers = spawn_multi(ctx, &base, 8, seed, 3000, 0.75)?;
        let paused = pause_holders(&rec, &workers, &mut rng, pauses, ttl);
        std::thread::sleep(Duration::from_millis(ttl + 1500));
        for w in workers.iter_mut() {
            let _ = w.kill();
        }
        join_workers(&mut workers, Duration::from_secs(5));
        let (own, stats) = check_sets(&rec.snapshot());
        let extra = Verdict {
            scenario: own,
            ..Verdict::default()
        };
        let v = finish_run(
            ctx,
            &mut report,
            "paused",
            seed,
            &rec,
            (ttl + 1000) * MS,
            extra,
        );
        report.notes.push(format!(
            "paused: {}; {}; {} late MEXTEND/MRELEASE returned 0 (per key); {} stale writes rejected by the resources",
            stats.describe(),
            paused.describe(),
            v.stats.late_ops_refused,
            v.stats.writes_rejected
        ));
    }

    // kill -9 of the master with the AOF always on, as scenario 4.
    let kills = if ctx.quick { 2 } else { 8 };
    let ttl = 2000;
    {
        let seed = seed_base + 2;
        let mut rng = StdRng::seed_from_u64(seed);
        let mode = "aof-always";
        let (mut master, rec, base) = aof_always_kill_setup(ctx, &ID.to_string(), KEY, ttl, kills)?;
        let mut workers = spawn_multi(ctx, &base, 8, seed, 1500, 0.75)?;
        kill_restart(&mut master, &rec, &mut rng, kills, mode)?;
        std::thread::sleep(Duration::from_millis(ttl + 2000));
        for w in workers.iter_mut() {
            let _ = w.kill();
        }
        join_workers(&mut workers, Duration::from_secs(5));
        let (own, stats) = check_sets(&rec.snapshot());
        let mut extra = Verdict {
            scenario: own,
            ..Verdict::default()
        };
        if master.log_tail(20).contains("Bad file format") {
            extra
                .scenario
                .push(format!("{mode}: the server could not load its data"));
        }
        let v = finish_run(ctx, &mut report, mode, seed, &rec, (ttl + 1000) * MS, extra);
        report.notes.push(format!(
            "{mode}: {kills} kills, {}; {} leases lost (C3), {} fence violations (C2), {} writes rejected by the resources",
            stats.describe(),
            v.stats.lost_leases,
            v.c2.len(),
            v.stats.writes_rejected
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Hold;

    fn acquire(token: &str, key: &str, outcome: Outcome) -> Event {
        Event::Acquire {
            worker: 0,
            key: key.into(),
            token: token.into(),
            ttl_ms: 1000,
            t_inv: MS,
            t_comp: 2 * MS,
            fence: (outcome == Outcome::Granted).then_some(1),
            outcome,
            server: "s".into(),
            hold: Hold::Exclusive,
            lease: None,
        }
    }

    fn release(token: &str, key: &str, result: i64) -> Event {
        Event::Release {
            worker: 0,
            key: key.into(),
            token: token.into(),
            t_inv: 3 * MS,
            t_comp: 4 * MS,
            result: Some(result),
        }
    }

    #[test]
    fn a_refused_token_that_releases_a_key_is_a_partial_grant() {
        let clean = vec![
            acquire("a", "{m}:0", Outcome::Granted),
            acquire("a", "{m}:1", Outcome::Granted),
            release("a", "{m}:0", 1),
            release("a", "{m}:1", 1),
            acquire("b", "{m}:0", Outcome::Refused),
            acquire("b", "{m}:2", Outcome::Refused),
            release("b", "{m}:0", 0),
            release("b", "{m}:2", 0),
        ];
        let (violations, stats) = check_sets(&clean);
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!((stats.sets_by_size[2], stats.probes), (1, 1));
        let mut partial = clean.clone();
        partial.push(acquire("c", "{m}:3", Outcome::Refused));
        partial.push(release("c", "{m}:3", 1));
        let (violations, stats) = check_sets(&partial);
        assert_eq!((violations.len(), stats.probes_released), (1, 1));
    }
}
