//! Scenario 8: leader election on a lock (issue 16), under a paused leader, a
//! killed leader and a Sentinel failover.
//!
//! Three candidates campaign for `chaos:leader` (`candidate.rs`): candidate 0
//! runs in the isolated client's namespace of scenario 7's network, the two
//! others and two observers in the root namespace; every one finds the
//! master through the Sentinels. Leaders do their work as writes to the
//! fenced resource and resign after a term of 0.5-2 s, so leadership moves
//! on its own as well as through the faults:
//! - **paused leader**: the harness SIGSTOPs the leader for 1.5-3x the TTL,
//!   either at a random moment or at the worst one (the leader stops itself
//!   between its lease check and its write, when the harness asks);
//! - **killed leader**: kill -9 of the leader's process, restarted 200 ms
//!   later as a fresh candidate;
//! - **Sentinel failover**: once candidate 0 leads, its namespace and the
//!   master's are cut off from everything else, as in scenario 7; the
//!   Sentinels promote a replica, the partition heals after 1.5-2.5 s more
//!   and the old master rejoins as a replica. Grants and extensions count
//!   only once `WAIT 1` confirms them (`min-replicas-to-write 1`), so the
//!   isolated leader's lease cannot outlive it on the promoted replica.
//!
//! Checked: C1-C5 on the candidates' grants and leader writes, C4 after the
//! run, and the election's own checks (`election_check.rs`): one acting
//! leader at a time, observers never going back, and every observer's last
//! reply naming the final holder.

use std::process::Child;
use std::thread::sleep;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::candidate::{candidate_of, holder, ElectArgs};
use crate::check::Verdict;
use crate::election_check::{check_election, ElectionStats};
use crate::failover::{
    cli_in, heal, isolate, netns_available, ns_of, sentinel_group, wait_demotion, wait_for,
    wait_promotion, Sentinels, CLIENT_NS,
};
use crate::history::{mono_ns, Event, Outcome, Recorder, MS};
use crate::scenarios::{finish_run, process_stopped, spawn_process, Ctx, Pool, Report};
use crate::server;

const KEY: &str = "chaos:leader";
const CANDIDATES: u32 = 3;
/// Observer ids follow the candidates'.
const OBSERVERS: [u32; 2] = [10, 11];

/// The holder of the election key on `master`: (fence, candidate).
fn current_leader(master: &str) -> Option<(u64, u32)> {
    let mut con = server::connect(master, Duration::from_millis(500)).ok()?;
    let info: redis::Value = redis::cmd("LOCK.INFO").arg(KEY).query(&mut con).ok()?;
    let (fence, owner) = holder(&info)?;
    let id = candidate_of(&owner)?;
    (fence > 0).then_some((fence, id))
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: a process this harness spawned and still owns.
    unsafe { libc::kill(child.id() as i32, sig) };
}

struct Run<'a> {
    ctx: &'a Ctx,
    rec: Recorder,
    base: ElectArgs,
    rng: StdRng,
    candidates: Pool,
    /// Candidate restarts so far (a restarted one gets a fresh seed).
    restarts: u64,
    notes: Vec<String>,
}

impl Run<'_> {
    fn args(&self, id: u32) -> ElectArgs {
        let mut a = self.base.clone();
        a.id = id;
        a.seed = self.base.seed * 1000 + self.restarts * 10 + id as u64;
        a.stop_file = self.base.stop_file.with_file_name(format!("stop-{id}"));
        a
    }

    fn spawn_candidate(&self, id: u32) -> Result<Child, String> {
        let ns = (id == 0).then_some(CLIENT_NS);
        spawn_process(self.ctx, &self.args(id).to_args("candidate"), ns)
    }

    /// SIGSTOP the leader for 1.5-3x the TTL; `worst`: at its worst moment,
    /// between its lease check and its write.
    fn pause_leader(&mut self, master: &str, worst: bool) -> Result<(), String> {
        let Some((fence, id)) = current_leader(master) else {
            self.notes.push("no leader to pause".into());
            return Ok(());
        };
        let child = &self.candidates[id as usize];
        let pid = child.id();
        let kind = if worst {
            let stop = self.args(id).stop_file;
            std::fs::write(&stop, b"").map_err(|e| format!("{}: {e}", stop.display()))?;
            let asked = mono_ns();
            while !process_stopped(pid) && mono_ns() < asked + 1000 * MS {
                sleep(Duration::from_millis(2));
            }
            // Not stopped within 1 s and the file still there: it lost the
            // lead before its next write. Take the request back.
            if !process_stopped(pid) && std::fs::remove_file(&stop).is_ok() {
                self.notes.push(format!(
                    "candidate {id} (fence {fence}) wrote nothing within 1 s: not paused"
                ));
                return Ok(());
            }
            while !process_stopped(pid) && mono_ns() < asked + 2000 * MS {
                sleep(Duration::from_millis(2));
            }
            "sigstop-leader-before-write"
        } else {
            signal(child, libc::SIGSTOP);
            "sigstop-leader"
        };
        let t_start = mono_ns();
        let ttl = self.base.ttl_ms;
        let pause = self.rng.gen_range(ttl * 3 / 2..=ttl * 3);
        sleep(Duration::from_millis(pause));
        signal(child, libc::SIGCONT);
        let t_heal = mono_ns();
        let detail = format!(
            "candidate {id} (fence {fence}) for {} ms",
            (t_heal - t_start) / MS
        );
        self.rec.fault(kind, detail, t_start, t_heal, t_start);
        Ok(())
    }

    /// kill -9 of the leader, restarted 200 ms later. It cannot mark the
    /// end of its term, so the harness does, with the time of the kill.
    fn kill_leader(&mut self, master: &str) -> Result<(), String> {
        let Some((fence, id)) = current_leader(master) else {
            self.notes.push("no leader to kill".into());
            return Ok(());
        };
        let child = &mut self.candidates[id as usize];
        let t_kill = mono_ns();
        let _ = child.kill();
        let _ = child.wait();
        let t_grant = self
            .rec
            .snapshot()
            .iter()
            .find_map(|e| match e {
                Event::Acquire {
                    fence: Some(f),
                    t_comp,
                    ..
                } if *f == fence => Some(*t_comp),
                _ => None,
            })
            .unwrap_or(t_kill);
        self.rec.record(Event::Leader {
            worker: id,
            key: KEY.into(),
            fence,
            t_start: t_grant,
            t_end: t_kill,
            reason: "killed".into(),
        });
        self.rec.fault(
            "kill-9-leader",
            format!("candidate {id} (fence {fence})"),
            t_kill,
            t_kill,
            t_kill,
        );
        sleep(Duration::from_millis(200));
        self.restarts += 1;
        self.candidates[id as usize] = self.spawn_candidate(id)?;
        Ok(())
    }

    /// Partition candidate 0 (once it leads) with the master; wait for the
    /// promotion, heal, wait for the old master to rejoin. Returns the new
    /// master.
    fn failover(
        &mut self,
        master: &str,
        others: &[String],
        extra: &mut Verdict,
    ) -> Result<String, String> {
        let led = wait_for("candidate 0 leading", Duration::from_secs(8), || {
            current_leader(master).is_some_and(|(_, id)| id == 0)
        })
        .is_ok();
        let leader = current_leader(master);
        let old_ns = ns_of(master);
        let t_part = mono_ns();
        isolate(old_ns, CLIENT_NS)?;
        isolate(CLIENT_NS, old_ns)?;
        // A plain write only the isolated side sees.
        let marker = format!("chaos:iso-marker:s8:{}", self.base.seed);
        let marked = cli_in(CLIENT_NS, master, &["SET", &marker, "1"])?;
        let (replica, promoted) = wait_promotion(others)?;
        let t_promoted = mono_ns();
        sleep(Duration::from_millis(self.rng.gen_range(1500..2500)));
        let mut newcon = server::connect(&replica, Duration::from_secs(2))?;
        let on_new: i64 = redis::cmd("EXISTS")
            .arg(&marker)
            .query(&mut newcon)
            .map_err(|e| e.to_string())?;
        let on_old = cli_in(CLIENT_NS, master, &["EXISTS", &marker])?;
        let t_heal = mono_ns();
        heal(old_ns)?;
        heal(CLIENT_NS)?;
        if marked != "OK" || on_new != 0 || on_old != "1" {
            extra.timed.push(format!(
                "the partition did not lose writes (marker SET {marked:?}, on the new master {on_new}, on the old {on_old:?})"
            ));
        }
        // The quick form does not wait the ~10 s Sentinel takes to turn
        // the old master into a replica (C4 then leaves it out).
        let demoted = if self.ctx.quick {
            "the old master not waited for (quick form)".to_string()
        } else {
            format!(
                "old master a replica {:.1} s after the heal",
                wait_demotion(master)?
            )
        };
        // C5 measures from the promotion: before it no majority master exists.
        self.rec.fault(
            "partition-failover",
            format!("leader {leader:?} cut off with the master"),
            t_part,
            t_heal,
            t_promoted,
        );
        let isolated = self
            .rec
            .snapshot()
            .iter()
            .fold((0, 0), |(g, x), e| match e {
                Event::Acquire {
                    worker: 0,
                    outcome: Outcome::Unconfirmed,
                    t_inv,
                    ..
                } if *t_inv > t_part => (g + 1, x),
                Event::Extend {
                    worker: 0,
                    result: None,
                    t_inv,
                    ..
                } if *t_inv > t_part => (g, x + 1),
                _ => (g, x),
            });
        self.notes.push(format!(
            "failover: leader at the partition {} ({}); promoted {promoted:.1} s after the partition, \
             {demoted}; candidate 0 got {} grants and {} extensions \
             no replica confirmed (not used)",
            leader.map_or("none".to_string(), |(f, id)| format!("candidate {id}, fence {f}")),
            if led { "candidate 0, as planned" } else { "candidate 0 did not lead within 8 s" },
            isolated.0,
            isolated.1
        ));
        Ok(replica)
    }
}

pub fn election(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 8, "Leader election (paused, killed, failover)");
    if !netns_available() {
        report
            .notes
            .push("skipped: needs root and `ip netns` (network namespaces)".into());
        return Ok(report);
    }
    let (runs, pauses, kills) = if ctx.quick { (1, 1, 1) } else { (2, 2, 2) };
    let ttl = 1000;
    let mut total = ElectionStats::default();
    for run in 0..runs {
        let seed = ctx.seed + 700 + run;
        let (_net, servers, _sentinels) = sentinel_group(ctx, "s8", true)?;
        let mut master = servers[0].addr();
        let rec = Recorder::start(&ctx.out.join("s8.sock"))?;
        let files = ctx.out.join("s8-files");
        let _ = std::fs::remove_dir_all(&files);
        std::fs::create_dir_all(&files).map_err(|e| format!("{}: {e}", files.display()))?;
        let base = ElectArgs {
            id: 0,
            socket: rec.socket.clone(),
            addr: master.clone(),
            sentinels: Sentinels::addrs(),
            key: KEY.into(),
            ttl_ms: ttl,
            margin_ms: 100,
            work_ms: (5, 20),
            term_ms: (500, 2000),
            read_ms: 1500,
            observe_ms: 1000,
            duration_ms: 300_000,
            seed,
            replicas: 1,
            op_timeout_ms: 500,
            stop_file: files.join("stop"),
            quiet_file: files.join("quiet"),
        };
        let mut run_state = Run {
            ctx,
            rec: rec.clone(),
            base: base.clone(),
            rng: StdRng::seed_from_u64(seed),
            candidates: Pool(Vec::new()),
            restarts: 0,
            notes: Vec::new(),
        };
        for id in 0..CANDIDATES {
            let child = run_state.spawn_candidate(id)?;
            run_state.candidates.push(child);
        }
        let mut observers = Pool(Vec::new());
        for id in OBSERVERS {
            let mut a = base.clone();
            a.id = id;
            observers.push(spawn_process(ctx, &a.to_args("observer"), None)?);
        }
        let mut extra = Verdict::default();
        let r = &mut run_state;
        sleep(Duration::from_millis(r.rng.gen_range(1500..2500)));
        for i in 0..pauses {
            r.pause_leader(&master, i % 2 == 0)?;
            sleep(Duration::from_millis(r.rng.gen_range(500..1500)));
        }
        for _ in 0..kills {
            r.kill_leader(&master)?;
            sleep(Duration::from_millis(
                r.rng.gen_range(ttl + 500..ttl + 1500),
            ));
        }
        let others: Vec<String> = servers
            .iter()
            .map(|s| s.addr())
            .filter(|s| *s != master)
            .collect();
        master = r.failover(&master, &others, &mut extra)?;
        // Quiet: no more resignations. The final holder is the one that
        // stays put for a second; then every observer must name it.
        std::fs::write(&base.quiet_file, b"").map_err(|e| e.to_string())?;
        sleep(Duration::from_millis(ttl));
        let mut final_fence = 0;
        for _ in 0..5 {
            let before = current_leader(&master);
            sleep(Duration::from_millis(1000));
            if let Some((f, _)) = before.filter(|b| current_leader(&master) == Some(*b)) {
                final_fence = f;
                break;
            }
        }
        if final_fence == 0 {
            extra
                .timed
                .push("no leader held still for a second at the end".into());
        }
        for child in observers.iter_mut().chain(r.candidates.iter_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let rest: Vec<String> = servers
            .iter()
            .map(|s| s.addr())
            .filter(|s| *s != master && !(ctx.quick && others.iter().all(|o| o != s)))
            .collect();
        extra.c4 = server::digests_agree(&master, &rest, Duration::from_secs(10));
        let (found, stats) = check_election(&rec.snapshot(), final_fence);
        // Observers catching up by the end and a run that proves something
        // are time bounds: not counted on a busy machine (finish_run).
        let (timed, safety): (Vec<String>, Vec<String>) = found
            .into_iter()
            .partition(|m| m.contains("did not converge") || m.contains("proves nothing"));
        extra.scenario.extend(safety);
        extra.timed.extend(timed);
        let v = finish_run(
            ctx,
            &mut report,
            &format!("run{run}"),
            seed,
            &rec,
            (ttl + 1000) * MS,
            extra,
        );
        let notes = std::mem::take(&mut r.notes);
        report
            .notes
            .extend(notes.into_iter().map(|n| format!("run {run}: {n}")));
        let converged = !v
            .timed
            .iter()
            .chain(&v.not_measured)
            .any(|m| m.contains("did not converge"));
        report.notes.push(format!(
            "run {run}: {}; leader writes {} accepted, {} refused (stale fence); final holder fence {final_fence}, \
             named by every observer's last reply: {}",
            stats.summary(),
            v.stats.writes_accepted,
            v.stats.writes_rejected,
            if converged { "yes" } else { "no" }
        ));
        total.add(&stats);
    }
    if runs > 1 {
        report.notes.push(format!("all runs: {}", total.summary()));
    }
    Ok(report)
}
