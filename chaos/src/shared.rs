//! Scenarios 9 and 10 (issue 13): shared holders under the faults of
//! scenarios 2 and 4. Scenario 9 is a read/write lock (`LOCK.ACQUIRE …
//! [SHARED]`), scenario 10 a semaphore (`SEM.ACQUIRE … COUNT n`). Each runs
//! a paused-holder phase (the harness SIGSTOPs holders, workers SIGSTOP
//! themselves between their lease check and their write) and a kill -9
//! phase (the master with `appendfsync always`, killed under load and
//! restarted). The checkers are the generalised C1-C5: no writer beside a
//! reader, no more than `limit` permits acting or certainly held at once,
//! fences unique and increasing; the fenced resource's rules for shared
//! holders are in `history.rs` (`Resource`).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::check::Verdict;
use crate::history::{Recorder, MS};
use crate::scenarios::{
    aof_always_kill_setup, finish_run, join_workers, kill_restart, pause_holders, spawn_pool_with,
    worker_base, Ctx, Pool, Report,
};
use crate::worker::WorkerArgs;

/// The shape of the holders under test.
#[derive(Clone, Copy)]
enum Shape {
    /// A read lease with this probability, else exclusive.
    ReadWrite { shared: f64 },
    /// 1 to `max_count` of `limit` permits.
    Semaphore { limit: u64, max_count: u64 },
}

impl Shape {
    fn key(&self) -> &'static str {
        match self {
            Shape::ReadWrite { .. } => "chaos:rw",
            Shape::Semaphore { .. } => "chaos:sem",
        }
    }

    fn apply(&self, a: &mut WorkerArgs) {
        match *self {
            Shape::ReadWrite { shared } => a.shared = shared,
            Shape::Semaphore { limit, max_count } => {
                a.limit = limit;
                a.max_count = max_count;
            }
        }
    }
}

pub fn read_write(ctx: &Ctx) -> Result<Report, String> {
    let shape = Shape::ReadWrite { shared: 0.6 };
    shared_holders(ctx, 9, "Read/write lock", shape)
}

pub fn semaphore(ctx: &Ctx) -> Result<Report, String> {
    let shape = Shape::Semaphore {
        limit: 4,
        max_count: 3,
    };
    shared_holders(ctx, 10, "Semaphore", shape)
}

/// `n` workers of `shape`: each ACQUIRE queues with `WAIT wait_ms` half the
/// time and retries after a short sleep otherwise.
fn spawn_shape(
    ctx: &Ctx,
    base: &WorkerArgs,
    shape: Shape,
    n: u32,
    seed: u64,
    wait_ms: u64,
) -> Result<Pool, String> {
    spawn_pool_with(ctx, base, n, seed, |_, a| {
        a.wait_ms = wait_ms;
        a.wait_p = 0.5;
        shape.apply(a);
    })
}

fn shared_holders(ctx: &Ctx, id: u32, name: &str, shape: Shape) -> Result<Report, String> {
    let mut report = Report::new(ctx, id, name);
    let key = shape.key();
    let seed_base = ctx.seed + 100 * id as u64;

    // Paused holders, as scenario 2.
    let (runs, pauses) = if ctx.quick { (1, 3) } else { (2, 12) };
    let ttl = 1000;
    for run in 0..runs {
        let seed = seed_base + run;
        let mut rng = StdRng::seed_from_u64(seed);
        let master = ctx.cfg.start(&format!("s{id}-paused"), &[])?;
        let rec = Recorder::start(&ctx.out.join(format!("s{id}.sock")))?;
        let mut base = worker_base(&rec, &master.addr(), key, ttl);
        base.hold_ms = (20, 80);
        base.extend = 0.5;
        base.duration_ms = (pauses * 4 + 5) * 1000;
        base.stop_before_write = 0.02;
        let mut workers = spawn_shape(ctx, &base, shape, 8, seed, 3000)?;
        let paused = pause_holders(&rec, &workers, &mut rng, pauses, ttl);
        std::thread::sleep(Duration::from_millis(ttl + 1500));
        for w in workers.iter_mut() {
            let _ = w.kill();
        }
        join_workers(&mut workers, Duration::from_secs(5));
        let v = finish_run(
            ctx,
            &mut report,
            &format!("paused{run}"),
            seed,
            &rec,
            (ttl + 1000) * MS,
            Verdict::default(),
        );
        report.notes.push(format!(
            "paused run {run}: {} grants ({}); {}; {} late EXTEND/RELEASE returned 0; {} writes rejected by the resource ({} of them while the lease was certainly held)",
            v.stats.grants,
            v.stats.holds.describe(),
            paused.describe(),
            v.stats.late_ops_refused,
            v.stats.writes_rejected,
            v.stats.live_writes_rejected
        ));
    }

    // kill -9 of the master with the AOF always on, as scenario 4.
    let kills = if ctx.quick { 2 } else { 8 };
    let ttl = 2000;
    let seed = seed_base + 50;
    let mut rng = StdRng::seed_from_u64(seed);
    let mode = "aof-always";
    let (mut master, rec, base) = aof_always_kill_setup(ctx, &id.to_string(), key, ttl, kills)?;
    let mut workers = spawn_shape(ctx, &base, shape, 8, seed, 1500)?;
    kill_restart(&mut master, &rec, &mut rng, kills, mode)?;
    std::thread::sleep(Duration::from_millis(ttl + 2000));
    for w in workers.iter_mut() {
        let _ = w.kill();
    }
    join_workers(&mut workers, Duration::from_secs(5));
    let mut extra = Verdict::default();
    if master.log_tail(20).contains("Bad file format") {
        extra
            .scenario
            .push(format!("{mode}: the server could not load its data"));
    }
    let v = finish_run(ctx, &mut report, mode, seed, &rec, (ttl + 1000) * MS, extra);
    report.notes.push(format!(
        "{mode}: {kills} kills, {} grants ({}); {} leases lost (C3), {} fence violations (C2), {} writes rejected by the resource ({} of them while the lease was certainly held)",
        v.stats.grants,
        v.stats.holds.describe(),
        v.stats.lost_leases,
        v.c2.len(),
        v.stats.writes_rejected,
        v.stats.live_writes_rejected
    ));
    Ok(report)
}
