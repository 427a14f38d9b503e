//! Scenario 14 (issue 27): a client that holds many locks through one lease
//! group is paused past its lease, killed, and has its lease revoked.
//!
//! One redis-server on loopback. A lease worker (`lease_worker.rs`) holds
//! `chaos:lease:0` … `chaos:lease:<n-1>` through one lease of ttl T and one
//! keepalive every T/3; on every key a plain worker contends (`LOCK.ACQUIRE
//! … WAIT`, sections of 20-80 ms), so each key has a waiter whenever the
//! lease worker holds it. Both write to the key's fenced resource and
//! through `LOCK.GUARD` to its guarded list. Each round waits until the
//! lease worker holds every key, then:
//! - **pause at the worst moment**: the lease worker stops itself between
//!   its lease check and a fenced write; the harness resumes it after
//!   1.5-3 T. Its write, with its old fence, reaches the resource after
//!   the next holder's;
//! - **pause**: SIGSTOP at whatever moment, for 1.5-3 T;
//! - **kill**: SIGKILL; a new lease worker starts T + 0.5 s later;
//! - **revoke**: as an operator, `LOCK.REVOKE` of one of its keys (`REASON
//!   chaos: operator`, in one `MULTI` with the `LOCK.INFO` that names the
//!   fence it ends), then 300 ms later `LOCK.LEASE REVOKE` of its lease.
//!
//! C1-C6 run on the history as for the other scenarios (per key: each key
//! protects a resource of its own), with the lease's bounds (`check.rs`).
//! The scenario's own checks, per round: every key the lease held is
//! granted to another worker within T + 1 s of the pause or kill (1 s of a
//! revoke); the lease is never renewed after it ran out or was revoked; the
//! paused worker learns, once resumed, that its lease is gone; after a
//! revoke its next guarded append is answered `REVOKED <reason>`. The
//! figures: how long after the lease's end each key was handed on, and the
//! spread between the first and the last key of a round (every hold ending
//! at once), the stale writes refused, the guarded appends refused.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::Child;
use std::thread::sleep;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redis::Value;

use crate::check::Verdict;
use crate::history::{mono_ns, Event, GuardResult, LeaseOp, Outcome, Recorder, MS};
use crate::scenarios::{
    collect_guarded, finish_run, join_workers, map_field, process_stopped, spawn_pool_with,
    spawn_worker, worker_base, Ctx, Report,
};
use crate::server;

const KEY: &str = "chaos:lease";
/// The worker id of the harness' own events (its revokes).
const HARNESS: u32 = 1000;
/// Lease workers' ids, one more for each restart.
const FIRST_LEASE_WORKER: u32 = 100;
const OPERATOR_REASON: &str = "chaos: operator";
/// The reason `LOCK.LEASE REVOKE` gives the holds it ends.
const LEASE_REVOKED: &str = "lease revoked";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fault {
    PauseWorst,
    Pause,
    Kill,
    Revoke,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::PauseWorst => "pause at the worst moment",
            Fault::Pause => "pause",
            Fault::Kill => "kill -9",
            Fault::Revoke => "revoke",
        }
    }
}

/// What a round did, for the analysis of the history.
struct Round {
    fault: Fault,
    worker: u32,
    /// The lease's label, and the keys it held when the fault began.
    lease: String,
    keys: Vec<String>,
    /// Pause: SIGSTOP and SIGCONT; kill: the kill (both); revoke: the
    /// `LOCK.LEASE REVOKE`'s invocation and reply.
    t_start: u64,
    t_heal: u64,
    /// Revoke rounds: the key `LOCK.REVOKE` took back, its invocation and
    /// reply, and the number of holds `LOCK.LEASE REVOKE` ended.
    key_revoke: Option<(String, u64, u64)>,
    lease_revoked: Option<i64>,
}

/// The lease worker in service.
struct LeaseWorker {
    child: Child,
    id: u32,
    lease_file: PathBuf,
    stop_file: PathBuf,
}

impl Drop for LeaseWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The lease's id is a secret: keep no copy.
        let _ = std::fs::remove_file(&self.lease_file);
        let _ = std::fs::remove_file(&self.stop_file);
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: a process this harness spawned and still owns.
    unsafe { libc::kill(child.id() as i32, sig) };
}

pub fn lease_group(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 14, "Lease group: many locks, one lease");
    use Fault::*;
    let (runs, plan): (u64, &[Fault]) = if ctx.quick {
        (1, &[PauseWorst, Pause, Kill, Revoke])
    } else {
        (
            3,
            &[
                PauseWorst, Pause, Kill, Revoke, PauseWorst, Pause, Kill, Revoke,
            ],
        )
    };
    let nkeys: u32 = 16;
    let ttl: u64 = 1000;
    let mut all = Figures::default();
    for run in 0..runs {
        let seed = ctx.seed + 1400 + run;
        let mut rng = StdRng::seed_from_u64(seed);
        let master = ctx.cfg.start("s14-master", &[])?;
        let rec = Recorder::start(&ctx.out.join("s14.sock"))?;
        let mut base = worker_base(&rec, &master.addr(), KEY, ttl);
        // Stopped by the harness.
        base.duration_ms = 600_000;
        base.guard = true;
        let mut contenders = spawn_pool_with(ctx, &base, nkeys, seed, |i, a| {
            a.key = format!("{KEY}:{i}");
            a.wait_ms = 10_000;
            a.hold_ms = (20, 80);
            a.extend = 0.3;
        })?;
        let mut lease_args = base.clone();
        lease_args.lease_keys = nkeys as u64;
        lease_args.lease_ttl_ms = ttl;
        lease_args.wait_ms = 3000;
        lease_args.hold_ms = (2, 10);
        let start_lease_worker = |id: u32| -> Result<LeaseWorker, String> {
            let mut a = lease_args.clone();
            a.id = id;
            a.seed = seed.wrapping_mul(1000).wrapping_add(id as u64);
            let lease_file = ctx.out.join(format!("s14-lease-{id}"));
            let stop_file = ctx.out.join(format!("s14-stop-{id}"));
            let _ = std::fs::remove_file(&lease_file);
            let _ = std::fs::remove_file(&stop_file);
            a.lease_file = lease_file.display().to_string();
            a.stop_file = stop_file.display().to_string();
            Ok(LeaseWorker {
                child: spawn_worker(ctx, &a, None)?,
                id,
                lease_file,
                stop_file,
            })
        };
        let mut lw = start_lease_worker(FIRST_LEASE_WORKER)?;
        let mut rounds: Vec<Round> = Vec::new();
        let mut extra = Verdict::default();
        for &fault in plan {
            if !all_held(&rec, lw.id, nkeys as usize, Duration::from_secs(15)) {
                extra.timed.push(format!(
                    "{}: lease worker {} never held all {nkeys} keys within 15 s: the round proves nothing",
                    fault.name(),
                    lw.id
                ));
                continue;
            }
            let round = match fault {
                PauseWorst | Pause => pause(&rec, &lw, &mut rng, fault, ttl)?,
                Kill => {
                    let round = kill(&rec, &mut lw)?;
                    sleep(Duration::from_millis(ttl + 500));
                    lw = start_lease_worker(lw.id + 1)?;
                    round
                }
                Revoke => revoke(&rec, &lw, &master.addr(), &mut rng, ttl)?,
            };
            if let Some(round) = round {
                rounds.push(round);
            }
        }
        sleep(Duration::from_millis(ttl + 500));
        drop(lw);
        for w in contenders.iter_mut() {
            let _ = w.kill();
        }
        join_workers(&mut contenders, Duration::from_secs(1));
        for i in 0..nkeys {
            collect_guarded(&rec, &master.addr(), &format!("{KEY}:{i}"), &mut extra);
        }
        let events = rec.snapshot();
        let figures = analyse(&events, &rounds, ttl, &mut extra);
        let v = finish_run(
            ctx,
            &mut report,
            &format!("run{run}"),
            seed,
            &rec,
            (ttl + 1000) * MS,
            extra,
        );
        for line in figures.describe(&v, nkeys, ttl) {
            report.notes.push(format!("run {run}: {line}"));
        }
        all.add(figures);
    }
    if runs > 1 {
        let v = report.verdict.clone();
        for line in all.describe(&v, nkeys, ttl) {
            report.notes.push(format!("all runs: {line}"));
        }
    }
    Ok(report)
}

/// Wait until `worker` holds `n` keys by its own reports.
fn all_held(rec: &Recorder, worker: u32, n: usize, within: Duration) -> bool {
    let give_up = mono_ns() + within.as_nanos() as u64;
    while mono_ns() < give_up {
        if rec.held_keys(worker).len() >= n {
            return true;
        }
        sleep(Duration::from_millis(5));
    }
    false
}

/// The label and id of the lease `lw` uses now.
fn lease_of(lw: &LeaseWorker) -> Result<(String, String), String> {
    let text = std::fs::read_to_string(&lw.lease_file)
        .map_err(|e| format!("{}: {e}", lw.lease_file.display()))?;
    let (label, id) = text
        .split_once(' ')
        .ok_or(format!("{}: no lease", lw.lease_file.display()))?;
    Ok((label.to_string(), id.to_string()))
}

/// SIGSTOP of the lease worker for 1.5-3 T, at a random moment or, for
/// `PauseWorst`, when it stops itself between its lease check and a write.
fn pause(
    rec: &Recorder,
    lw: &LeaseWorker,
    rng: &mut StdRng,
    fault: Fault,
    ttl: u64,
) -> Result<Option<Round>, String> {
    let (lease, _) = lease_of(lw)?;
    let pid = lw.child.id();
    let kind = if fault == Fault::PauseWorst {
        std::fs::write(&lw.stop_file, b"")
            .map_err(|e| format!("{}: {e}", lw.stop_file.display()))?;
        let asked = mono_ns();
        while !process_stopped(pid) && mono_ns() < asked + 1000 * MS {
            sleep(Duration::from_millis(1));
        }
        if !process_stopped(pid) {
            // Take the request back; should it have been taken meanwhile,
            // the worker stops, and the SIGCONT below resumes it.
            let _ = std::fs::remove_file(&lw.stop_file);
            sleep(Duration::from_millis(20));
            if !process_stopped(pid) {
                println!(
                    "    lease worker {} wrote nothing within 1 s: not paused",
                    lw.id
                );
                return Ok(None);
            }
        }
        "sigstop-lease-holder-before-write"
    } else {
        sleep(Duration::from_millis(rng.gen_range(0..200)));
        signal(&lw.child, libc::SIGSTOP);
        "sigstop-lease-holder"
    };
    let t_start = mono_ns();
    // Its last reports are on their way to the recorder.
    sleep(Duration::from_millis(20));
    let keys = rec.held_keys(lw.id);
    let pause = rng.gen_range(ttl * 3 / 2..=ttl * 3);
    sleep(Duration::from_millis(pause).saturating_sub(Duration::from_millis(20)));
    // Taken before the signal: the worker's first reply may reach the
    // recorder before this thread runs again.
    let t_heal = mono_ns();
    signal(&lw.child, libc::SIGCONT);
    rec.fault(
        kind,
        format!("lease worker {} for {} ms", lw.id, (t_heal - t_start) / MS),
        t_start,
        t_heal,
        t_start,
    );
    // Let it find out before the next round.
    sleep(Duration::from_millis(ttl / 2));
    Ok(Some(Round {
        fault,
        worker: lw.id,
        lease,
        keys,
        t_start,
        t_heal,
        key_revoke: None,
        lease_revoked: None,
    }))
}

/// kill -9 of the lease worker.
fn kill(rec: &Recorder, lw: &mut LeaseWorker) -> Result<Option<Round>, String> {
    let (lease, _) = lease_of(lw)?;
    let keys = rec.held_keys(lw.id);
    let t_start = mono_ns();
    let _ = lw.child.kill();
    let _ = lw.child.wait();
    rec.fault(
        "kill-9-lease-holder",
        format!("lease worker {}", lw.id),
        t_start,
        t_start,
        t_start,
    );
    Ok(Some(Round {
        fault: Fault::Kill,
        worker: lw.id,
        lease,
        keys,
        t_start,
        t_heal: t_start,
        key_revoke: None,
        lease_revoked: None,
    }))
}

/// As an operator: `LOCK.REVOKE` of one of the lease worker's keys, then
/// `LOCK.LEASE REVOKE` of its lease.
fn revoke(
    rec: &Recorder,
    lw: &LeaseWorker,
    addr: &str,
    rng: &mut StdRng,
    ttl: u64,
) -> Result<Option<Round>, String> {
    let (lease, id) = lease_of(lw)?;
    let mut con = server::connect(addr, Duration::from_secs(2))?;
    sleep(Duration::from_millis(rng.gen_range(0..200)));
    let keys = rec.held_keys(lw.id);
    let Some(key) = keys.choose(rng).cloned() else {
        return Ok(None);
    };
    let t_inv = mono_ns();
    let reply: redis::RedisResult<(Value, i64)> = redis::pipe()
        .atomic()
        .cmd("LOCK.INFO")
        .arg(&key)
        .cmd("LOCK.REVOKE")
        .arg(&key)
        .arg("REASON")
        .arg(OPERATOR_REASON)
        .query(&mut con);
    let t_comp = mono_ns();
    let (fences, result) = match &reply {
        Ok((info, n)) => (
            map_field(info, "fence")
                .filter(|f| *f > 0)
                .map(|f| vec![f as u64])
                .unwrap_or_default(),
            Some(*n),
        ),
        Err(e) => return Err(format!("LOCK.REVOKE {key}: {e}")),
    };
    rec.record(Event::Revoke {
        key: key.clone(),
        reason: OPERATOR_REASON.to_string(),
        fences,
        t_inv,
        t_comp,
        result,
    });
    rec.fault("revoke-key", key.clone(), t_inv, t_comp, t_inv);
    sleep(Duration::from_millis(300));
    let keys: Vec<String> = rec
        .held_keys(lw.id)
        .into_iter()
        .filter(|k| *k != key)
        .collect();
    let t_start = mono_ns();
    let reply: redis::RedisResult<i64> = redis::cmd("LOCK.LEASE")
        .arg("REVOKE")
        .arg(&id)
        .query(&mut con);
    let t_heal = mono_ns();
    rec.record(Event::Lease {
        worker: HARNESS,
        lease: lease.clone(),
        op: LeaseOp::Revoke,
        ttl_ms: ttl,
        t_inv: t_start,
        t_comp: t_heal,
        result: reply.as_ref().ok().copied(),
    });
    rec.fault("lease-revoke", lease.clone(), t_start, t_heal, t_start);
    sleep(Duration::from_millis(ttl / 2));
    Ok(Some(Round {
        fault: Fault::Revoke,
        worker: lw.id,
        lease,
        keys,
        t_start,
        t_heal,
        key_revoke: Some((key, t_inv, t_comp)),
        lease_revoked: reply.ok(),
    }))
}

/// The scenario's figures over one or more runs.
#[derive(Default)]
struct Figures {
    rounds: BTreeMap<&'static str, u64>,
    /// ms from the lease's end (the request time of its last renewal plus
    /// T) to each key's next grant, after a pause or a kill.
    expiry_handoff_ms: Vec<f64>,
    /// ms from the pause or kill to each key's next grant.
    fault_handoff_ms: Vec<f64>,
    /// ms from `LOCK.LEASE REVOKE`'s invocation to each key's next grant,
    /// and from `LOCK.REVOKE`'s.
    revoke_handoff_ms: Vec<f64>,
    key_revoke_handoff_ms: Vec<f64>,
    /// Per round: ms between the first and the last key handed on.
    expiry_spread_ms: Vec<f64>,
    revoke_spread_ms: Vec<f64>,
    keys_handed: u64,
    keys_held: u64,
    /// ms from the resume to the first refusal the paused worker got.
    learned_ms: Vec<f64>,
    /// The lease workers' writes and appends, once their holds had ended.
    stale_writes_rejected: u64,
    stale_writes_accepted: u64,
    guard_lost: u64,
    guard_revoked: BTreeMap<String, u64>,
    keepalives_refused: u64,
    releases_refused: u64,
    holds_lease_revoked: i64,
}

impl Figures {
    fn add(&mut self, o: Figures) {
        for (k, n) in o.rounds {
            *self.rounds.entry(k).or_default() += n;
        }
        self.expiry_handoff_ms.extend(o.expiry_handoff_ms);
        self.fault_handoff_ms.extend(o.fault_handoff_ms);
        self.revoke_handoff_ms.extend(o.revoke_handoff_ms);
        self.key_revoke_handoff_ms.extend(o.key_revoke_handoff_ms);
        self.expiry_spread_ms.extend(o.expiry_spread_ms);
        self.revoke_spread_ms.extend(o.revoke_spread_ms);
        self.keys_handed += o.keys_handed;
        self.keys_held += o.keys_held;
        self.learned_ms.extend(o.learned_ms);
        self.stale_writes_rejected += o.stale_writes_rejected;
        self.stale_writes_accepted += o.stale_writes_accepted;
        self.guard_lost += o.guard_lost;
        for (k, n) in o.guard_revoked {
            *self.guard_revoked.entry(k).or_default() += n;
        }
        self.keepalives_refused += o.keepalives_refused;
        self.releases_refused += o.releases_refused;
        self.holds_lease_revoked += o.holds_lease_revoked;
    }

    /// The figures as lines for the report.
    fn describe(&self, v: &Verdict, nkeys: u32, ttl: u64) -> Vec<String> {
        let rounds = self
            .rounds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut refused = vec![format!("{} `LOST`", self.guard_lost)];
        refused.extend(
            self.guard_revoked
                .iter()
                .map(|(r, n)| format!("{n} `REVOKED {r}`")),
        );
        vec![
            format!(
                "{rounds}; {nkeys} keys held through one lease of {ttl} ms; {} of the {} holds the faults ended went to another worker",
                self.keys_handed, self.keys_held
            ),
            format!(
                "pause or kill: each key granted again {} after the lease's end (its last renewal's request + ttl), {} after the fault; first to last key of a round {}",
                dist(&self.expiry_handoff_ms),
                dist(&self.fault_handoff_ms),
                dist(&self.expiry_spread_ms)
            ),
            format!(
                "revoke: LOCK.LEASE REVOKE ended {} holds, each key granted again {} after it, first to last key {}; LOCK.REVOKE of one key: granted again {} after it",
                self.holds_lease_revoked,
                dist(&self.revoke_handoff_ms),
                dist(&self.revoke_spread_ms),
                dist(&self.key_revoke_handoff_ms)
            ),
            format!(
                "the holder, once its holds had ended: stale fenced writes {} rejected, {} accepted; guarded appends refused: {}; {} KEEPALIVEs and {} RELEASEs answered 0; a resumed holder was told {} after its resume",
                self.stale_writes_rejected,
                self.stale_writes_accepted,
                refused.join(", "),
                self.keepalives_refused,
                self.releases_refused,
                dist(&self.learned_ms)
            ),
            format!(
                "{} grants, {} guarded appends written, {} refused; {} sections under way when their hold was revoked (C1 counts them up to the revoke; their fenced writes: {} rejected)",
                v.stats.grants,
                v.stats.guard.written,
                v.stats.guard.lost + v.stats.guard.revoked,
                v.stats.revoked_sections,
                v.stats.revoked_writes_rejected
            ),
        ]
    }
}

/// "min a / p50 b / p99 c / max d ms (n)"; "none" when empty.
fn dist(values: &[f64]) -> String {
    if values.is_empty() {
        return "none".into();
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "min {:.1} / p50 {:.1} / p99 {:.1} / max {:.1} ms (n={})",
        v[0],
        at(0.5),
        at(0.99),
        v[v.len() - 1],
        v.len()
    )
}

fn ms(a: u64, b: u64) -> f64 {
    (a as f64 - b as f64) / MS as f64
}

/// The history, indexed for the rounds.
struct Index<'a> {
    events: &'a [Event],
    /// key -> (t_comp, worker) of each grant, in time order.
    grants: HashMap<&'a str, Vec<(u64, u32)>>,
    /// lease label -> (t_inv, t_comp) of each successful GRANT/KEEPALIVE.
    renewals: HashMap<&'a str, Vec<(u64, u64)>>,
    /// lease label -> the fences and tokens of the holds granted under it.
    fences: HashMap<&'a str, HashSet<u64>>,
    tokens: HashMap<&'a str, HashSet<&'a str>>,
}

impl<'a> Index<'a> {
    fn new(events: &'a [Event]) -> Index<'a> {
        let mut index = Index {
            events,
            grants: HashMap::new(),
            renewals: HashMap::new(),
            fences: HashMap::new(),
            tokens: HashMap::new(),
        };
        for e in events {
            match e {
                Event::Acquire {
                    key,
                    worker,
                    token,
                    t_comp,
                    outcome: Outcome::Granted,
                    fence,
                    lease,
                    ..
                } => {
                    let grants = index.grants.entry(key.as_str()).or_default();
                    grants.push((*t_comp, *worker));
                    if let (Some(lease), Some(fence)) = (lease, fence) {
                        let lease = lease.as_str();
                        index.fences.entry(lease).or_default().insert(*fence);
                        index.tokens.entry(lease).or_default().insert(token);
                    }
                }
                Event::Lease {
                    lease,
                    op: LeaseOp::Grant | LeaseOp::Keepalive,
                    t_inv,
                    t_comp,
                    result: Some(1),
                    ..
                } => {
                    let renewals = index.renewals.entry(lease.as_str()).or_default();
                    renewals.push((*t_inv, *t_comp));
                }
                _ => {}
            }
        }
        for list in index.grants.values_mut() {
            list.sort_unstable();
        }
        index
    }

    /// The first grant of `key` to a worker other than `worker` from `t` on.
    fn handed(&self, key: &str, worker: u32, t: u64) -> Option<u64> {
        self.grants
            .get(key)?
            .iter()
            .find(|(tc, w)| *tc >= t && *w != worker)
            .map(|(tc, _)| *tc)
    }

    /// Request times of the successful renewals of `lease`.
    fn renewed(&self, lease: &str) -> impl Iterator<Item = u64> + '_ {
        self.renewals
            .get(lease)
            .into_iter()
            .flatten()
            .map(|(t, _)| *t)
    }

    fn of_lease(&self, lease: &str, fence: u64) -> bool {
        self.fences.get(lease).is_some_and(|s| s.contains(&fence))
    }

    fn token_of_lease(&self, lease: &str, token: &str) -> bool {
        self.tokens.get(lease).is_some_and(|s| s.contains(token))
    }

    /// The guarded appends by `r`'s worker, for holds of `r`'s lease on
    /// `keys`, that the server may have run after a revoke invoked at
    /// `t_inv` and answered at `t_comp` (their reply came after `t_inv`):
    /// (sent after `t_comp`, result, reason).
    fn guards_around(
        &self,
        r: &Round,
        keys: &[String],
        t_inv: u64,
        t_comp: u64,
    ) -> Vec<(bool, GuardResult, &str)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Guarded {
                    worker,
                    key,
                    fence,
                    t_inv: sent,
                    t_comp: answered,
                    result,
                    reason,
                    ..
                } if *worker == r.worker
                    && *answered > t_inv
                    && keys.contains(key)
                    && self.of_lease(&r.lease, *fence) =>
                {
                    Some((*sent > t_comp, *result, reason.as_deref().unwrap_or("")))
                }
                _ => None,
            })
            .collect()
    }
}

/// The rounds' figures and the scenario's own checks, from the history.
fn analyse(events: &[Event], rounds: &[Round], ttl: u64, extra: &mut Verdict) -> Figures {
    let index = Index::new(events);
    let mut f = Figures::default();
    for r in rounds {
        *f.rounds.entry(r.fault.name()).or_default() += 1;
        // The lease is never renewed after it ran out or was revoked.
        let ended = if r.fault == Fault::Revoke {
            r.t_heal
        } else {
            r.t_heal.max(r.t_start + ttl * MS)
        };
        if let Some(t) = index.renewed(&r.lease).find(|t| *t > ended) {
            extra.scenario.push(format!(
                "{}: lease {} renewed {:.0} ms after the fault, after it had ended",
                r.fault.name(),
                r.lease,
                ms(t, r.t_start)
            ));
        }
        handoffs(&index, r, ttl, &mut f, extra);
        if r.fault == Fault::Revoke {
            revocation_replies(&index, r, &mut f, extra);
        }
        aftermath(&index, r, &mut f, extra);
    }
    f
}

/// Every key the lease held went to another worker: how soon after the
/// lease's end (pause, kill) or the revoke, and how close together.
fn handoffs(index: &Index, r: &Round, ttl: u64, f: &mut Figures, extra: &mut Verdict) {
    let revoke = r.fault == Fault::Revoke;
    // The earliest the lease could end: its last renewal's request + T.
    let lease_end = index
        .renewed(&r.lease)
        .filter(|t| *t < r.t_start)
        .max()
        .map_or(0, |t| t + ttl * MS);
    let at = r.key_revoke.as_ref().map_or(r.t_start, |k| k.1);
    if lease_end <= at {
        extra.timed.push(format!(
            "{}: lease {} was not certainly live when the fault began ({:.0} ms after its earliest end): the round proves nothing",
            r.fault.name(),
            r.lease,
            ms(at, lease_end)
        ));
        return;
    }
    let limit = if revoke { 1000 * MS } else { (ttl + 1000) * MS };
    let mut times = Vec::new();
    for key in &r.keys {
        f.keys_held += 1;
        match index.handed(key, r.worker, r.t_start) {
            Some(t) if t <= r.t_start + limit => {
                f.keys_handed += 1;
                times.push(t);
                if revoke {
                    f.revoke_handoff_ms.push(ms(t, r.t_start));
                } else {
                    f.expiry_handoff_ms.push(ms(t, lease_end));
                    f.fault_handoff_ms.push(ms(t, r.t_start));
                }
            }
            other => extra.timed.push(format!(
                "{}: {key} of lease {} not granted to another worker within {} ms{}",
                r.fault.name(),
                r.lease,
                limit / MS,
                other.map_or(String::new(), |t| format!(
                    " (after {:.0} ms)",
                    ms(t, r.t_start)
                ))
            )),
        }
    }
    if let (Some(lo), Some(hi)) = (times.iter().min(), times.iter().max()) {
        let spread = if revoke {
            &mut f.revoke_spread_ms
        } else {
            &mut f.expiry_spread_ms
        };
        spread.push(ms(*hi, *lo));
    }
    if let Some((key, t_inv, _)) = &r.key_revoke {
        match index.handed(key, r.worker, *t_inv) {
            Some(t) if t <= t_inv + 1000 * MS => f.key_revoke_handoff_ms.push(ms(t, *t_inv)),
            _ => extra.timed.push(format!(
                "LOCK.REVOKE {key}: not granted to another worker within 1 s"
            )),
        }
    }
}

/// After `LOCK.REVOKE key`, every guarded append the holder sent to that
/// key once the revoke had answered is refused `REVOKED <the operator's
/// reason>`, and after `LOCK.LEASE REVOKE` every one to the lease's other
/// keys `REVOKED lease revoked`; and the holder was told so at least once
/// (an append in flight during the revoke may have run before it).
fn revocation_replies(index: &Index, r: &Round, f: &mut Figures, extra: &mut Verdict) {
    f.holds_lease_revoked += r.lease_revoked.unwrap_or(0);
    if let Some((key, t_inv, t_comp)) = &r.key_revoke {
        let keys = [key.clone()];
        let what = format!("LOCK.REVOKE {key}");
        told(
            index,
            r,
            &keys,
            (*t_inv, *t_comp),
            OPERATOR_REASON,
            &what,
            extra,
        );
    }
    let span = (r.t_start, r.t_heal);
    told(
        index,
        r,
        &r.keys,
        span,
        LEASE_REVOKED,
        "LOCK.LEASE REVOKE",
        extra,
    );
}

fn told(
    index: &Index,
    r: &Round,
    keys: &[String],
    (t_inv, t_comp): (u64, u64),
    reason: &str,
    what: &str,
    extra: &mut Verdict,
) {
    let guards = index.guards_around(r, keys, t_inv, t_comp);
    let refused = |result: GuardResult, why: &str| result == GuardResult::Revoked && why == reason;
    for (after, result, why) in &guards {
        if *after && !refused(*result, why) {
            extra.scenario.push(format!(
                "{what}: a LOCK.GUARD the holder sent after it got {result:?} {why:?}, not REVOKED {reason}"
            ));
        }
    }
    if !guards.iter().any(|(_, result, why)| refused(*result, why)) {
        extra.timed.push(format!(
            "{what}: the holder was never told REVOKED {reason}: the round proves nothing"
        ));
    }
}

/// What the lease worker did with the holds of the lease once they had
/// ended (a killed one did nothing), and, after a pause, how soon it was
/// told.
fn aftermath(index: &Index, r: &Round, f: &mut Figures, extra: &mut Verdict) {
    let from = match &r.key_revoke {
        Some((_, t_inv, _)) => *t_inv,
        None => r.t_start,
    };
    let mut first_refusal: Option<u64> = None;
    let mut refused = |t: u64| {
        if t >= r.t_heal {
            first_refusal = Some(first_refusal.map_or(t, |f: u64| f.min(t)));
        }
    };
    for e in index.events {
        match e {
            // Only a write sent across the pause reaches the resource after
            // its hold ended: a careful worker sends none after that.
            Event::Write {
                worker,
                fence,
                t_recv,
                accepted,
                ..
            } if *worker == r.worker
                && r.fault != Fault::Revoke
                && *t_recv >= r.t_heal
                && index.of_lease(&r.lease, *fence) =>
            {
                if *accepted {
                    f.stale_writes_accepted += 1;
                } else {
                    f.stale_writes_rejected += 1;
                }
            }
            Event::Guarded {
                worker,
                fence,
                t_inv,
                t_comp,
                result,
                reason,
                ..
            } if *worker == r.worker && *t_inv > from && index.of_lease(&r.lease, *fence) => {
                match result {
                    GuardResult::Lost => f.guard_lost += 1,
                    GuardResult::Revoked => {
                        let reason = reason.clone().unwrap_or_default();
                        *f.guard_revoked.entry(reason).or_default() += 1;
                    }
                    _ => continue,
                }
                refused(*t_comp);
            }
            Event::Lease {
                lease,
                op: LeaseOp::Keepalive,
                t_inv,
                t_comp,
                result: Some(0),
                ..
            } if *lease == r.lease && *t_inv > from => {
                f.keepalives_refused += 1;
                refused(*t_comp);
            }
            Event::Release {
                token,
                t_inv,
                result: Some(0),
                ..
            } if *t_inv > from && index.token_of_lease(&r.lease, token) => {
                f.releases_refused += 1;
            }
            _ => {}
        }
    }
    if matches!(r.fault, Fault::Pause | Fault::PauseWorst) {
        match first_refusal {
            Some(t) => f.learned_ms.push(ms(t, r.t_heal)),
            None => extra.timed.push(format!(
                "{}: lease worker {} was never told its lease {} was gone by the run's end",
                r.fault.name(),
                r.worker,
                r.lease
            )),
        }
    }
}
