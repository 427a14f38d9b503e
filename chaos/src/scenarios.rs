//! Scenarios 1-6: redis-server processes on loopback that the harness starts
//! itself. Scenario 7 (failover) is in `failover.rs`, 8 (leader election)
//! in `election.rs`, 9 and 10 (read/write locks and semaphores) in
//! `shared.rs`.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

use crate::check::{check, Verdict};
use crate::guarded;
use crate::history::{self, mono_ns, Recorder, MS};
use crate::replstream;
use crate::server::{self, Config};
use crate::worker::WorkerArgs;

pub struct Ctx {
    pub cfg: Config,
    /// target/chaos: histories of failing runs, the summary.
    pub out: PathBuf,
    pub exe: PathBuf,
    pub quick: bool,
    pub seed: u64,
    pub keep_history: bool,
}

/// One scenario's figures, for the summary table.
pub struct Report {
    pub id: u32,
    pub name: String,
    pub rerun: String,
    pub runs: u64,
    pub faults: u64,
    pub verdict: Verdict,
    /// Double grants and overlapping sections are reported, not failures
    /// (a mode that cannot be safe, such as async failover).
    pub tolerate_double_grants: bool,
    pub notes: Vec<String>,
    pub seconds: f64,
}

impl Report {
    pub fn new(ctx: &Ctx, id: u32, name: &str) -> Report {
        Report {
            id,
            name: name.to_string(),
            rerun: format!(
                "target/release/lock-chaos {}--scenarios {id} --seed {}",
                if ctx.quick { "--quick " } else { "" },
                ctx.seed
            ),
            runs: 0,
            faults: 0,
            verdict: Verdict::default(),
            tolerate_double_grants: false,
            notes: Vec::new(),
            seconds: 0.0,
        }
    }

    pub fn failures(&self) -> usize {
        self.verdict.failures(self.tolerate_double_grants)
    }
}

/// Is this process stopped (state T in /proc)?
pub fn process_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
        .unwrap_or(false)
}

pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn spawn_worker(ctx: &Ctx, args: &WorkerArgs, netns: Option<&str>) -> Result<Child, String> {
    spawn_process(ctx, &args.to_args(), netns)
}

/// `lock-chaos <args>`, in network namespace `netns` if given.
pub fn spawn_process(ctx: &Ctx, args: &[String], netns: Option<&str>) -> Result<Child, String> {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&ctx.exe);
            c
        }
        None => Command::new(&ctx.exe),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", args.first().map_or("", String::as_str)))
}

/// Worker processes, killed when dropped (an error in a scenario leaves none
/// behind).
pub struct Pool(pub Vec<Child>);

impl std::ops::Deref for Pool {
    type Target = Vec<Child>;
    fn deref(&self) -> &Vec<Child> {
        &self.0
    }
}

impl std::ops::DerefMut for Pool {
    fn deref_mut(&mut self) -> &mut Vec<Child> {
        &mut self.0
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for child in self.0.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Wait for workers to finish on their own (they have a duration), killing
/// any still running after `grace`.
pub fn join_workers(children: &mut Vec<Child>, grace: Duration) {
    let start = Instant::now();
    for child in children.iter_mut() {
        // SAFETY: a worker we spawned; it may be stopped.
        unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if start.elapsed() > grace => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => sleep(Duration::from_millis(20)),
            }
        }
    }
    children.clear();
}

/// A worker template; callers set id, seed and what differs.
pub fn worker_base(rec: &Recorder, addr: &str, key: &str, ttl_ms: u64) -> WorkerArgs {
    WorkerArgs {
        id: 0,
        socket: rec.socket.clone(),
        addr: addr.to_string(),
        sentinels: Vec::new(),
        key: key.to_string(),
        ttl_ms,
        hold_ms: (0, 2),
        wait_ms: 0,
        extend: 0.0,
        duration_ms: 10_000,
        max_acquires: u64::MAX / 2,
        seed: 0,
        replicas: 0,
        sync: 0,
        op_timeout_ms: 1000,
        stop_before_write: 0.0,
        guard: false,
        shared: 0.0,
        limit: 0,
        max_count: 1,
        wait_p: 1.0,
        lease_keys: 0,
        lease_ttl_ms: 0,
        lease_file: String::new(),
        stop_file: String::new(),
        multi_keys: 0,
    }
}

/// Read the guarded list of `key` from `addr`, the server that survived the
/// faults, into the history for C6. A list that cannot be read, or one that
/// is empty (the run proves nothing), is a C6 violation.
pub fn collect_guarded(rec: &Recorder, addr: &str, key: &str, extra: &mut Verdict) {
    match guarded::collect_from(addr, key) {
        Ok(history::Event::Survived { records, .. }) if records.is_empty() => extra.c6.push(
            format!("the guarded list of {key} on {addr} is empty: the run proves nothing"),
        ),
        Ok(event) => {
            rec.record(event);
        }
        Err(e) => extra
            .c6
            .push(format!("the guarded list could not be read: {e}")),
    }
}

/// One line on the guarded list of a run, next to the fenced resource's
/// figures of the same run.
pub fn guard_note(v: &Verdict) -> String {
    let g = &v.stats.guard;
    format!(
        "guarded list: {} appends through LOCK.GUARD ({} written, {} unconfirmed, {} refused LOST, {} unknown); \
         {} records survived, {} acknowledged ones lost with their grant; \
         overlapping sections in the surviving data {} (C6: {} violations) vs {} accepted at the fenced resource (fences only, C1)",
        g.sent,
        g.written,
        g.unconfirmed,
        g.lost,
        g.unknown,
        g.survived,
        g.acked_missing,
        g.overlapping,
        v.c6.len(),
        v.c1.len()
    )
}

/// `n` workers from `base`: even ids queue with WAIT, odd ids retry.
pub fn spawn_pool(
    ctx: &Ctx,
    base: &WorkerArgs,
    n: u32,
    seed: u64,
    wait_ms: u64,
) -> Result<Pool, String> {
    spawn_pool_with(ctx, base, n, seed, |i, a| {
        a.wait_ms = if i % 2 == 0 { wait_ms } else { 0 };
    })
}

/// `n` workers from `base`, ids from `base.id` on, each with its own seed
/// derived from `seed`, adjusted by `tune(i, args)`.
pub fn spawn_pool_with(
    ctx: &Ctx,
    base: &WorkerArgs,
    n: u32,
    seed: u64,
    tune: impl Fn(u32, &mut WorkerArgs),
) -> Result<Pool, String> {
    (0..n)
        .map(|i| {
            let mut a = base.clone();
            a.id = base.id + i;
            a.seed = seed.wrapping_mul(1000).wrapping_add(a.id as u64);
            tune(i, &mut a);
            spawn_worker(ctx, &a, None)
        })
        .collect::<Result<_, _>>()
        .map(Pool)
}

/// Check a run's history, add the scenario's own findings, keep the history
/// if it has violations (or always with --keep-history). On a machine too
/// busy for time bounds ([`crate::check::busy`]), C5 and the `timed`
/// findings are reported as not measured instead of counted.
pub fn finish_run(
    ctx: &Ctx,
    report: &mut Report,
    tag: &str,
    seed: u64,
    rec: &Recorder,
    c5_bound_ns: u64,
    extra: Verdict,
) -> Verdict {
    let events = rec.take();
    let mut v = check(&events, c5_bound_ns);
    v.merge(extra);
    if let Some(busy) = crate::check::busy() {
        v.excuse_timing(&busy);
    }
    report.runs += 1;
    report.faults += v.stats.faults;
    let failing = v.failures(report.tolerate_double_grants) > 0;
    if failing || ctx.keep_history || v.violations() > 0 {
        let path = ctx
            .out
            .join(format!("s{}-{tag}-seed{seed}.jsonl", report.id));
        match history::save(&path, &events) {
            Ok(()) => println!("    history kept: {}", path.display()),
            Err(e) => println!("    could not keep the history: {e}"),
        }
    }
    println!(
        "    run {tag} (seed {seed}): {} ops, {} grants, {} faults: {}",
        v.stats.operations(),
        v.stats.grants,
        v.stats.faults,
        v.summary()
    );
    if v.violations() > 0 {
        print!("{}", v.details());
    }
    report.verdict.merge(v.clone());
    v
}

fn q<T: redis::FromRedisValue>(con: &mut Connection, cmd: &redis::Cmd) -> Result<T, String> {
    cmd.query(con).map_err(|e| e.to_string())
}

fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// `service returns within 1 s`: time from `t_resume` until a write command
/// (ACQUIRE + RELEASE of a probe key) answers, on a fresh connection.
fn service_back_ms(addr: &str, t_resume: u64) -> u64 {
    let deadline = t_resume + 10_000 * MS;
    while mono_ns() < deadline {
        if let Ok(mut con) = server::connect(addr, Duration::from_millis(500)) {
            let r: Result<Value, _> = redis::cmd("LOCK.ACQUIRE")
                .arg("chaos:probe")
                .arg(100)
                .query(&mut con);
            if let Ok(Value::Array(_)) = r {
                return (mono_ns() - t_resume) / MS;
            }
        }
        sleep(Duration::from_millis(5));
    }
    (mono_ns() - t_resume) / MS
}

// ---------------------------------------------------------------- scenario 1

pub fn contention(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 1, "Contention");
    let (runs, secs) = if ctx.quick { (1, 6) } else { (3, 15) };
    let ttl = 2000;
    for run in 0..runs {
        let seed = ctx.seed + run;
        let master = ctx.cfg.start("s1-master", &[])?;
        let replica = ctx.cfg.start("s1-replica", &[])?;
        server::replicate(&replica, &master)?;
        let rec = Recorder::start(&ctx.out.join("s1.sock"))?;
        let mut base = worker_base(&rec, &master.addr(), "chaos:lock", ttl);
        base.duration_ms = secs * 1000;
        base.extend = 0.2;
        let mut workers = spawn_pool(ctx, &base, 16, seed, 2000)?;
        join_workers(&mut workers, Duration::from_secs(secs + 10));
        let extra = Verdict {
            c4: server::digests_agree(&master.addr(), &[replica.addr()], Duration::from_secs(5)),
            ..Verdict::default()
        };
        finish_run(
            ctx,
            &mut report,
            &format!("run{run}"),
            seed,
            &rec,
            (ttl + 1000) * MS,
            extra,
        );
    }
    Ok(report)
}

// ---------------------------------------------------------------- scenario 2

pub fn paused_holder(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 2, "Paused holder");
    let (runs, pauses) = if ctx.quick { (1, 4) } else { (2, 15) };
    let ttl = 1000;
    for run in 0..runs {
        let seed = ctx.seed + 100 + run;
        let mut rng = StdRng::seed_from_u64(seed);
        let master = ctx.cfg.start("s2-master", &[])?;
        let rec = Recorder::start(&ctx.out.join("s2.sock"))?;
        let mut base = worker_base(&rec, &master.addr(), "chaos:lock", ttl);
        base.hold_ms = (20, 80);
        base.extend = 0.5;
        // Long enough for every pause and the tail.
        let secs = pauses * 4 + 5;
        base.duration_ms = secs * 1000;
        base.stop_before_write = 0.02;
        base.guard = true;
        let mut workers = spawn_pool(ctx, &base, 8, seed, 3000)?;
        let paused = pause_holders(&rec, &workers, &mut rng, pauses, ttl);
        sleep(Duration::from_millis(ttl + 1500));
        for w in workers.iter_mut() {
            let _ = w.kill();
        }
        join_workers(&mut workers, Duration::from_secs(5));
        let mut extra = Verdict::default();
        collect_guarded(&rec, &master.addr(), "chaos:lock", &mut extra);
        let v = finish_run(
            ctx,
            &mut report,
            &format!("run{run}"),
            seed,
            &rec,
            (ttl + 1000) * MS,
            extra,
        );
        report.notes.push(format!(
            "run {run}: {}; {} late EXTEND/RELEASE returned 0; {} stale writes rejected by the resource",
            paused.describe(),
            v.stats.late_ops_refused,
            v.stats.writes_rejected
        ));
        report.notes.push(format!("run {run}: {}", guard_note(&v)));
    }
    Ok(report)
}

/// What [`pause_holders`] did.
pub struct Pauses {
    pub harness: u64,
    /// Of the harness' pauses, those that landed while the worker held.
    pub holding: u64,
    pub self_stops: u64,
}

impl Pauses {
    pub fn describe(&self) -> String {
        format!(
            "{} holders paused by the harness ({} while holding), {} paused between lease check and write",
            self.harness, self.holding, self.self_stops
        )
    }
}

/// Pauses from two sides, `pauses` times by the harness: it SIGSTOPs a
/// random holder (worker id = index in `workers`) at a random moment, and a
/// worker SIGSTOPs itself at the worst one, between its last lease check and
/// its write. Either way the harness sends SIGCONT after 1.5-3x the TTL and
/// records the fault. Returns once every paused worker is running again.
pub fn pause_holders(
    rec: &Recorder,
    workers: &[Child],
    rng: &mut StdRng,
    pauses: u64,
    ttl: u64,
) -> Pauses {
    let mut stopped: BTreeMap<usize, (u64, u64, &str)> = BTreeMap::new();
    let mut paused_holding = 0;
    let mut self_stops = 0;
    let mut harness_stops = 0;
    let mut next_stop = mono_ns() + 500 * MS;
    let end = mono_ns() + (pauses * 2500 + 1000) * MS;
    while mono_ns() < end || !stopped.is_empty() {
        sleep(Duration::from_millis(10));
        let now = mono_ns();
        for (i, w) in workers.iter().enumerate() {
            if !stopped.contains_key(&i) && process_stopped(w.id()) {
                let pause = rng.gen_range(ttl * 3 / 2..=ttl * 3);
                stopped.insert(i, (now, now + pause * MS, "self-sigstop-before-write"));
                self_stops += 1;
            }
        }
        if now >= next_stop && now < end && harness_stops < pauses {
            next_stop = now + rng.gen_range(300..800) * MS;
            let holders: Vec<u32> = rec
                .holders()
                .into_iter()
                .filter(|w| !stopped.contains_key(&(*w as usize)))
                .collect();
            if let Some(&victim) = holders.choose(rng) {
                let i = victim as usize;
                {
                    // SAFETY: a worker process we spawned.
                    unsafe { libc::kill(workers[i].id() as i32, libc::SIGSTOP) };
                    if rec.holders().contains(&victim) {
                        paused_holding += 1;
                    }
                    let pause = rng.gen_range(ttl * 3 / 2..=ttl * 3);
                    stopped.insert(i, (now, now + pause * MS, "sigstop-holder"));
                    harness_stops += 1;
                }
            }
        }
        let due: Vec<usize> = stopped
            .iter()
            .filter(|(_, (_, resume, _))| *resume <= now)
            .map(|(i, _)| *i)
            .collect();
        for i in due {
            if let Some((t_start, _, kind)) = stopped.remove(&i) {
                // SAFETY: as above.
                unsafe { libc::kill(workers[i].id() as i32, libc::SIGCONT) };
                let t_heal = mono_ns();
                let detail = format!("worker {i} for {} ms", (t_heal - t_start) / MS);
                rec.fault(kind, detail, t_start, t_heal, t_start);
            }
        }
    }
    Pauses {
        harness: harness_stops,
        holding: paused_holding,
        self_stops,
    }
}

// ---------------------------------------------------------------- scenario 3

pub fn paused_server(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 3, "Paused server");
    let (runs, faults) = if ctx.quick { (1, 4) } else { (2, 12) };
    let ttl = 1000;
    for run in 0..runs {
        let seed = ctx.seed + 200 + run;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut master = ctx.cfg.start("s3-master", &[])?;
        let replica = ctx.cfg.start("s3-replica", &[])?;
        server::replicate(&replica, &master)?;
        let rec = Recorder::start(&ctx.out.join("s3.sock"))?;
        let mut base = worker_base(&rec, &master.addr(), "chaos:lock", ttl);
        base.hold_ms = (2, 20);
        base.extend = 0.3;
        base.op_timeout_ms = 500;
        base.duration_ms = (faults * 4 + 5) * 1000;
        let mut workers = spawn_pool(ctx, &base, 8, seed, 1500)?;
        let mut extra = Verdict::default();
        let mut worst_ms = 0;
        for i in 0..faults {
            sleep(Duration::from_millis(rng.gen_range(500..1200)));
            if !master.is_running() {
                // Reported by the crash scan of the server logs.
                println!("    the master died: no more faults in this run");
                break;
            }
            let pause_ms = rng.gen_range(ttl / 2..=ttl * 2);
            let t_start = mono_ns();
            let kind = if i % 2 == 0 {
                master.signal(libc::SIGSTOP);
                sleep(Duration::from_millis(pause_ms));
                master.signal(libc::SIGCONT);
                "sigstop-server"
            } else {
                let paused = master.try_conn().and_then(|mut con| {
                    q::<()>(
                        &mut con,
                        redis::cmd("CLIENT").arg("PAUSE").arg(pause_ms).arg("ALL"),
                    )
                });
                if let Err(e) = paused {
                    println!("    CLIENT PAUSE failed: {e}");
                    continue;
                }
                sleep(Duration::from_millis(pause_ms));
                "client-pause"
            };
            let t_heal = mono_ns();
            let back = service_back_ms(&master.addr(), t_heal);
            worst_ms = worst_ms.max(back);
            if back > 1000 {
                extra.c5.push(format!(
                    "{kind} for {pause_ms} ms: service back after {back} ms"
                ));
            }
            rec.fault(kind, format!("{pause_ms} ms"), t_start, t_heal, t_heal);
        }
        sleep(Duration::from_millis(ttl + 1500));
        for w in workers.iter_mut() {
            let _ = w.kill();
        }
        join_workers(&mut workers, Duration::from_secs(5));
        if master.is_running() {
            extra.c4 =
                server::digests_agree(&master.addr(), &[replica.addr()], Duration::from_secs(5));
        }
        finish_run(
            ctx,
            &mut report,
            &format!("run{run}"),
            seed,
            &rec,
            (ttl + 1000) * MS,
            extra,
        );
        report.notes.push(format!(
            "run {run}: service back within {worst_ms} ms of each resume (worst)"
        ));
    }
    Ok(report)
}

// ---------------------------------------------------------------- scenario 4

pub fn crash_restart(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 4, "Crash and restart");
    // Double grants are expected where persistence loses acknowledged
    // writes; they are reported per mode. Fence violations always fail.
    report.tolerate_double_grants = true;
    let kills = if ctx.quick { 2 } else { 8 };
    let ttl = 2000;
    let modes: [(&str, &[&str]); 3] = [
        (
            "aof-always",
            &["--appendonly", "yes", "--appendfsync", "always"],
        ),
        (
            "aof-everysec",
            &["--appendonly", "yes", "--appendfsync", "everysec"],
        ),
        ("rdb", &["--save", "1 1"]),
    ];
    for (m, (mode, args)) in modes.iter().enumerate() {
        let seed = ctx.seed + 300 + m as u64;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut master = ctx.cfg.start(&format!("s4-{mode}"), args)?;
        let rec = Recorder::start(&ctx.out.join("s4.sock"))?;
        let mut base = worker_base(&rec, &master.addr(), "chaos:lock", ttl);
        base.hold_ms = (5, 30);
        base.extend = 0.2;
        base.op_timeout_ms = 500;
        base.duration_ms = (kills * 3 + 6) * 1000;
        base.guard = true;
        let mut workers = spawn_pool(ctx, &base, 8, seed, 1500)?;
        let mut extra = Verdict::default();
        kill_restart(&mut master, &rec, &mut rng, kills, mode)?;
        sleep(Duration::from_millis(ttl + 2000));
        for w in workers.iter_mut() {
            let _ = w.kill();
        }
        join_workers(&mut workers, Duration::from_secs(5));
        if master.log_tail(20).contains("Bad file format") {
            extra
                .scenario
                .push(format!("{mode}: the server could not load its data"));
        }
        collect_guarded(&rec, &master.addr(), "chaos:lock", &mut extra);
        let v = finish_run(ctx, &mut report, mode, seed, &rec, (ttl + 1000) * MS, extra);
        report.notes.push(format!(
            "{mode}: {kills} kills, {} grants; {} leases lost, overlapped by {} later grants (double grants); {} overlapping sections at the resource; {} fence violations",
            v.stats.grants,
            v.stats.lost_leases,
            v.c3_double.len(),
            v.c1.len(),
            v.c2.len()
        ));
        report.notes.push(format!("{mode}: {}", guard_note(&v)));
        if *mode == "aof-always" && !v.c3_double.is_empty() {
            report
                .notes
                .push("aof-always allowed double grants: see the kept history".into());
        }
    }
    Ok(report)
}

/// The kill -9 phase's setup shared by the shaped scenarios (as scenario
/// 4's first mode): a master with `appendfsync always`, a recorder, and the
/// worker template for `kills` kills (short holds, a few extensions, 500 ms
/// operation timeouts, long enough for every kill and restart).
pub fn aof_always_kill_setup(
    ctx: &Ctx,
    id: &str,
    key: &str,
    ttl_ms: u64,
    kills: u64,
) -> Result<(server::Server, Recorder, WorkerArgs), String> {
    let master = ctx.cfg.start(
        &format!("s{id}-aof-always"),
        &["--appendonly", "yes", "--appendfsync", "always"],
    )?;
    let rec = Recorder::start(&ctx.out.join(format!("s{id}.sock")))?;
    let mut base = worker_base(&rec, &master.addr(), key, ttl_ms);
    base.hold_ms = (5, 30);
    base.extend = 0.2;
    base.op_timeout_ms = 500;
    base.duration_ms = (kills * 3 + 6) * 1000;
    Ok((master, rec, base))
}

/// `kills` times, after 0.8-2 s: kill -9 of the master under load and a
/// restart at once on the same port and directory, recorded as a fault.
pub fn kill_restart(
    master: &mut server::Server,
    rec: &Recorder,
    rng: &mut StdRng,
    kills: u64,
    mode: &str,
) -> Result<(), String> {
    for _ in 0..kills {
        sleep(Duration::from_millis(rng.gen_range(800..2000)));
        let t_start = mono_ns();
        master.kill();
        master.try_restart()?;
        let t_heal = mono_ns();
        rec.fault("kill-9-restart", mode.to_string(), t_start, t_heal, t_heal);
    }
    Ok(())
}

// ---------------------------------------------------------------- scenario 5

/// Per key: (fence, PEXPIRETIME).
fn lock_states(
    con: &mut Connection,
    keys: &[String],
) -> Result<BTreeMap<String, (i64, i64)>, String> {
    let mut out = BTreeMap::new();
    for k in keys {
        let info: Value = q(con, redis::cmd("LOCK.INFO").arg(k))?;
        let fence = map_field(&info, "fence").unwrap_or(-1);
        let at: i64 = q(con, redis::cmd("PEXPIRETIME").arg(k))?;
        out.insert(k.clone(), (fence, at));
    }
    Ok(out)
}

/// The (name, value) pairs of a RESP2 flat array or RESP3 map reply.
pub fn map_pairs(v: &Value) -> Option<Vec<(&Value, &Value)>> {
    match v {
        Value::Array(items) => Some(
            items
                .chunks(2)
                .filter_map(|c| c.get(1).map(|b| (&c[0], b)))
                .collect(),
        ),
        Value::Map(items) => Some(items.iter().map(|(a, b)| (a, b)).collect()),
        _ => None,
    }
}

/// A bulk or simple string reply as text.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).to_string()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// An integer field of a RESP2 flat array or RESP3 map reply.
pub fn map_field(v: &Value, name: &str) -> Option<i64> {
    map_pairs(v)?.into_iter().find_map(|(k, val)| match val {
        Value::Int(n) if text(k).as_deref() == Some(name) => Some(*n),
        _ => None,
    })
}

fn acquire(con: &mut Connection, key: &str, ttl: u64, token: &str) -> Result<Option<u64>, String> {
    let v: Value = q(
        con,
        redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(ttl)
            .arg("TOKEN")
            .arg(token),
    )?;
    Ok(match v {
        Value::Array(items) if items.len() == 2 => match items[1] {
            Value::Int(f) => Some(f as u64),
            _ => None,
        },
        _ => None,
    })
}

fn wait_bg(con: &mut Connection, field: &str) -> Result<(), String> {
    let start = Instant::now();
    loop {
        // Scheduled first: the server cron turns a scheduled rewrite into a
        // running one between two INFO calls, so read the other way round
        // both could say 0 while a rewrite runs.
        let sched = info_field(con, "persistence", "aof_rewrite_scheduled");
        let busy = info_field(con, "persistence", field);
        if busy == "0" && (sched.is_empty() || sched == "0") {
            return Ok(());
        }
        // (Far beyond a busy machine's delays: a fork that never ends is
        // a fault.)
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!("{field} still 1 after 60 s"));
        }
        sleep(Duration::from_millis(20));
    }
}

pub fn persistence(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 5, "Persistence round trips");
    let rounds = if ctx.quick { 3 } else { 20 };
    let nkeys = 20;
    let seed = ctx.seed + 400;
    let mut rng = StdRng::seed_from_u64(seed);
    let master = ctx.cfg.start("s5-master", &["--appendonly", "yes"])?;
    let target = ctx.cfg.start("s5-target", &[])?;
    let mut con = master.try_conn()?;
    let mut tcon = target.try_conn()?;
    let keys: Vec<String> = (0..nkeys).map(|i| format!("chaos:p{i}")).collect();
    let mut v = Verdict::default();
    let mut ops = 0u64;
    let mut highest = 0u64;
    let mut seq = 0;
    for round in 0..rounds {
        // Fresh leases of various TTLs, some extended, some left alone.
        for k in &keys {
            let exists: i64 = q(&mut con, redis::cmd("EXISTS").arg(k))?;
            if exists == 0 || rng.gen_bool(0.5) {
                let _: Value = q(&mut con, redis::cmd("DEL").arg(k))?;
                seq += 1;
                if let Some(f) = acquire(
                    &mut con,
                    k,
                    rng.gen_range(20_000..60_000),
                    &format!("t{seq}"),
                )? {
                    highest = highest.max(f);
                }
                ops += 2;
            }
        }
        let kind = round % 3;
        let before = lock_states(&mut con, &keys)?;
        let digest_before = server::digest(&mut con)?;
        let t_start = mono_ns();
        let name = match kind {
            0 => {
                let _: Value = q(&mut con, &redis::cmd("BGREWRITEAOF"))?;
                wait_bg(&mut con, "aof_rewrite_in_progress")?;
                let _: Value = q(&mut con, redis::cmd("DEBUG").arg("LOADAOF"))?;
                "BGREWRITEAOF + DEBUG LOADAOF"
            }
            1 => {
                let _: Value = q(&mut con, &redis::cmd("BGSAVE"))?;
                wait_bg(&mut con, "rdb_bgsave_in_progress")?;
                let _: Value = q(&mut con, redis::cmd("DEBUG").arg("RELOAD"))?;
                "BGSAVE + DEBUG RELOAD"
            }
            _ => "DUMP/RESTORE",
        };
        ops += 3;
        let t_heal = mono_ns();
        report.faults += 1;
        if kind == 2 {
            // DUMP every key; RESTORE it ABSTTL on the other server and in
            // place (REPLACE); compare both with the original.
            for k in &keys {
                let payload: Vec<u8> = q(&mut con, redis::cmd("DUMP").arg(k))?;
                let at = before[k].1;
                let dv: Value = q(&mut con, redis::cmd("DEBUG").arg("DIGEST-VALUE").arg(k))?;
                let _: () = q(
                    &mut tcon,
                    redis::cmd("RESTORE")
                        .arg(k)
                        .arg(at)
                        .arg(&payload)
                        .arg("ABSTTL")
                        .arg("REPLACE"),
                )?;
                let _: () = q(
                    &mut con,
                    redis::cmd("RESTORE")
                        .arg(k)
                        .arg(at)
                        .arg(&payload)
                        .arg("ABSTTL")
                        .arg("REPLACE"),
                )?;
                let dv_target: Value =
                    q(&mut tcon, redis::cmd("DEBUG").arg("DIGEST-VALUE").arg(k))?;
                let dv_after: Value = q(&mut con, redis::cmd("DEBUG").arg("DIGEST-VALUE").arg(k))?;
                ops += 7;
                if dv != dv_target || dv != dv_after {
                    v.c4.push(format!(
                        "round {round}: DIGEST-VALUE of {k} changed by DUMP/RESTORE"
                    ));
                }
            }
            let restored = lock_states(&mut tcon, &keys)?;
            for (k, (fence, at)) in &before {
                let (f2, at2) = restored[k];
                if *fence != f2 || (at - at2).abs() > 50 {
                    v.c4.push(format!("round {round}: {k} restored on the target as fence {f2} expiring at {at2}, was {fence} at {at}"));
                }
            }
            seq += 1;
            let next = acquire(&mut tcon, "chaos:fresh", 1000, &format!("t{seq}"))?.unwrap_or(0);
            let _: Value = q(&mut tcon, redis::cmd("DEL").arg("chaos:fresh"))?;
            ops += 2;
            let max_restored = restored.values().map(|s| s.0).max().unwrap_or(0);
            if next as i64 <= max_restored {
                v.c2.push(format!("round {round}: the target's next fence {next} is not above the restored {max_restored}"));
            }
        }
        let after = lock_states(&mut con, &keys)?;
        let digest_after = server::digest(&mut con)?;
        if digest_after != digest_before {
            v.c4.push(format!(
                "round {round}: {name}: digest {digest_before} became {digest_after}"
            ));
        }
        for (k, (fence, at)) in &before {
            let (f2, at2) = after[k];
            if *fence != f2 {
                v.c4.push(format!(
                    "round {round}: {name}: {k} fence {fence} became {f2}"
                ));
            }
            if (at - at2).abs() > 50 {
                v.c4.push(format!(
                    "round {round}: {name}: {k} expiry moved by {} ms",
                    at2 - at
                ));
            }
        }
        // Fences continue: a new grant is above every fence issued before.
        seq += 1;
        let next = acquire(&mut con, "chaos:fresh", 1000, &format!("t{seq}"))?.unwrap_or(0);
        let _: Value = q(&mut con, redis::cmd("DEL").arg("chaos:fresh"))?;
        ops += 2;
        if next <= highest {
            v.c2.push(format!(
                "round {round}: {name}: next fence {next} is not above {highest}"
            ));
        }
        highest = highest.max(next);
        let _ = (t_start, t_heal);
        ops += 2 * nkeys as u64;
    }
    v.stats.faults = report.faults;
    report.runs = rounds;
    report.notes.push(format!(
        "{rounds} round trips over {nkeys} lock keys: {} BGREWRITEAOF+LOADAOF, {} BGSAVE+RELOAD, {} DUMP/RESTORE",
        rounds.div_ceil(3),
        (rounds + 1) / 3,
        rounds / 3
    ));
    // The verdict's stats count commands here.
    v.stats.acquires = ops;
    v.stats.faults = 0;
    println!("    {rounds} rounds, {ops} commands: {}", v.summary());
    if v.violations() > 0 {
        print!("{}", v.details());
    }
    report.verdict.merge(v);
    Ok(report)
}

// ---------------------------------------------------------------- scenario 6

/// Effects with absolute times, and framing. Grants and extensions go out as
/// `LOCK.SETSTATE`; `PEXPIREAT` is what Redis writes for a client's own
/// `PEXPIRE` of a lock key. Valkey 8 propagates an expiry as `UNLINK`
/// (`lazyfree-lazy-expire yes`), the same effect as `DEL`.
const STREAM_ALLOWED: &[&str] = &[
    "lock.setstate",
    "pexpireat",
    "del",
    "unlink",
    "select",
    "ping",
    "multi",
    "exec",
];

/// The key of the harness' last write in scenario 6, which ends its reading
/// of the stream.
const STREAM_END: &str = "chaos:stream-end";

pub fn replication_stream(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 6, "Replication stream");
    let (runs, secs) = if ctx.quick { (1, 5) } else { (3, 10) };
    let ttl = 300;
    for run in 0..runs {
        let seed = ctx.seed + 500 + run;
        let master = ctx.cfg.start("s6-master", &[])?;
        let replica = ctx.cfg.start("s6-replica", &[])?;
        server::replicate(&replica, &master)?;
        let stream = replstream::attach(&master.addr())?;
        let rec = Recorder::start(&ctx.out.join("s6.sock"))?;
        let mut base = worker_base(&rec, &master.addr(), "chaos:lock", ttl);
        // Some sections outlive their lease: handoffs on expiry come from
        // the module's timer, outside any command.
        base.hold_ms = (0, 400);
        base.extend = 0.3;
        base.duration_ms = secs * 1000;
        let mut workers = spawn_pool(ctx, &base, 8, seed, 1000)?;
        // Every other effect by hand: renewal by the same token, EXTEND,
        // RELEASE, DEL by a client, expiry without waiters.
        let mut con = master.try_conn()?;
        let mut scripted = Vec::new();
        for i in 0..20 {
            let key = format!("chaos:s{i}");
            let tok = format!("script-{run}-{i}");
            if let Some(f) = acquire(&mut con, &key, 200, &tok)? {
                scripted.push(f);
            }
            acquire(&mut con, &key, 250, &tok)?;
            let _: Value = q(
                &mut con,
                redis::cmd("LOCK.EXTEND").arg(&key).arg(&tok).arg(300),
            )?;
            match i % 3 {
                0 => {
                    let _: Value = q(&mut con, redis::cmd("LOCK.RELEASE").arg(&key).arg(&tok))?;
                }
                1 => {
                    let _: Value = q(&mut con, redis::cmd("DEL").arg(&key))?;
                }
                _ => {} // expires
            }
            let _: Value = q(
                &mut con,
                redis::cmd("LOCK.RELEASE").arg(&key).arg("not-the-holder"),
            )?;
            let _: Value = q(
                &mut con,
                redis::cmd("LOCK.ACQUIRE")
                    .arg("chaos:s0")
                    .arg("x")
                    .arg("TOKEN")
                    .arg("t"),
            )
            .or_else(|e| Ok::<Value, String>(Value::SimpleString(e)))?;
        }
        join_workers(&mut workers, Duration::from_secs(secs + 10));
        sleep(Duration::from_millis(ttl + 1000));
        // The last write: once the stream has carried it, it has carried
        // everything before (the reader may lag on a busy machine).
        acquire(&mut con, STREAM_END, 60_000, &format!("stream-end-{run}"))?;
        let commands = stream.stop_after(STREAM_END, Duration::from_secs(60));
        let mut extra = Verdict::default();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut stream_fences = HashSet::new();
        let now = wall_ms() as i64;
        let day = 86_400_000;
        for cmd in &commands {
            let name = cmd.first().map(|s| s.to_lowercase()).unwrap_or_default();
            *counts.entry(name.clone()).or_default() += 1;
            if !STREAM_ALLOWED.contains(&name.as_str()) {
                extra
                    .scenario
                    .push(format!("replication stream carries {cmd:?}"));
                continue;
            }
            let absolute = |s: &str| s.parse::<i64>().is_ok_and(|t| (t - now).abs() < day);
            match name.as_str() {
                "pexpireat" if !cmd.get(2).is_some_and(|t| absolute(t)) => {
                    extra
                        .scenario
                        .push(format!("PEXPIREAT without an absolute time: {cmd:?}"));
                }
                "lock.setstate" => {
                    // `key token fence deadline granted [extends]`: both times
                    // absolute; an extension carries its count.
                    if !cmd.get(4).is_some_and(|t| absolute(t))
                        || !cmd.get(5).is_some_and(|t| absolute(t))
                    {
                        extra.scenario.push(format!(
                            "LOCK.SETSTATE without an absolute deadline and grant time: {cmd:?}"
                        ));
                    }
                    if cmd.len() == 7 {
                        *counts
                            .entry("lock.setstate (extension)".into())
                            .or_default() += 1;
                    }
                    if let Some(f) = cmd.get(3).and_then(|f| f.parse::<u64>().ok()) {
                        stream_fences.insert(f);
                    }
                }
                _ => {}
            }
        }
        for needed in ["lock.setstate", "lock.setstate (extension)", "del"] {
            if !counts.contains_key(needed) {
                extra.timed.push(format!(
                    "the stream never carried {needed}: the workload did not cover it"
                ));
            }
        }
        // Every grant the workers saw reached the stream with its fence.
        let events = rec.take();
        let mut missing = 0;
        for e in &events {
            if let history::Event::Acquire { fence: Some(f), .. } = e {
                if !stream_fences.contains(f) {
                    missing += 1;
                }
            }
            rec.record(e.clone());
        }
        for f in &scripted {
            if !stream_fences.contains(f) {
                missing += 1;
            }
        }
        if missing > 0 {
            extra.scenario.push(format!(
                "{missing} grants never reached the replication stream as LOCK.SETSTATE"
            ));
        }
        extra.c4 = server::digests_agree(&master.addr(), &[replica.addr()], Duration::from_secs(5));
        finish_run(
            ctx,
            &mut report,
            &format!("run{run}"),
            seed,
            &rec,
            (ttl + 1000) * MS,
            extra,
        );
        report.notes.push(format!(
            "run {run}: stream carried {}",
            counts
                .iter()
                .map(|(k, v)| format!("{k} x{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(report)
}
