//! Keeping many holds alive (issue 27): one lease group, kept alive by one
//! `LOCK.LEASE KEEPALIVE` per interval, against as many plain holds renewed
//! by `LOCK.EXTEND` each interval (one pipelined batch), on fresh servers of
//! one binary side by side; a third holds as many keys and is sent one
//! `PING` per interval: what any server spends with that many keys (its
//! cron, the expiry sampling), which neither side can avoid, and what any
//! one request costs it (waking up, reading, replying).
//!
//! The three run for the same window on one schedule (a tick every
//! `interval_ms`, from one clock), after a few ticks of warm-up, so that the
//! machine's noise hits them alike. For each the window's server CPU is
//! read (the main thread's, `/proc/<pid>/schedstat`, and the process's,
//! `INFO cpu`), with every command the server ran in it (`INFO
//! commandstats`, reset as it opens) and `INFO lock`: no hold may expire,
//! and every one must still be there at the end. On the lease's server the
//! keys' `PEXPIRETIME` is read before and after the window: the keys a
//! `KEEPALIVE` moved ahead (those whose horizon the lease came near, see
//! docs/commands.md, `LOCK.LEASE`).
//!
//! A busy machine must not fail the run: a lease that runs out while its
//! holds are being taken (a stall between two batches' keep-alives) is
//! set up again, up to [`SETUP_ATTEMPTS`] times, and then the variant is
//! reported as not measured; a hold lost in the window because the
//! harness sent a renewal later than its ttl allows (`max_unrenewed_ms`)
//! makes the goal not measured rather than missed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::Connection;
use serde::Serialize;

use crate::server::{bench_key, info_field, info_int, query, Server};
use crate::stats::Spread;
use crate::throughput::TOKEN;

/// Overrides the profile's window (`duration_s`): `LOCK_BENCH_LEASE_SECONDS=5`.
pub const DURATION_ENV: &str = "LOCK_BENCH_LEASE_SECONDS";
/// The plain holds' first lease, before the warm-up's first `LOCK.EXTEND`
/// brings each to the variant's ttl: long enough for the other servers to
/// be set up.
const PLAIN_SETUP_TTL_MS: u64 = 60_000;
/// The idle server's keys: nothing renews them.
const IDLE_TTL_MS: u64 = 3_600_000;
/// How long after a renewal's (last) reply its server's CPU is read: by
/// then the server has written the reply and gone back to sleep.
const SETTLE: Duration = Duration::from_millis(5);
/// How a side that stopped because another failed ends its error.
const STOPPED: &str = "stopped, another side failed";
/// Holds taken per pipelined batch in the setup (the lease is kept alive
/// between batches).
const SETUP_BATCH: u64 = 1_000;
/// How often the lease side's setup is tried when its lease runs out.
const SETUP_ATTEMPTS: usize = 3;
/// How a side's error begins when the machine was too slow for it, not
/// wrong: the variant is then not measured.
const TOO_SLOW: &str = "too slow: ";

/// A lease ttl and how often it is renewed (a third of it, as
/// docs/commands.md advises; the plain holds alike).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Variant {
    pub ttl_ms: u64,
    pub interval_ms: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub holds: u64,
    /// The measured window, seconds (also [`DURATION_ENV`]).
    pub duration_s: u64,
    /// Ticks before the window opens.
    pub warmup_ticks: u64,
    pub variants: Vec<Variant>,
}

impl Settings {
    /// The profile's settings with the window [`DURATION_ENV`] asks for.
    pub fn with_env_duration(mut self) -> Result<Settings, String> {
        if let Ok(value) = std::env::var(DURATION_ENV) {
            self.duration_s = value
                .trim()
                .parse()
                .ok()
                .filter(|&s: &u64| s > 0)
                .ok_or_else(|| format!("{DURATION_ENV}={value:?}: a whole number of seconds"))?;
        }
        Ok(self)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// One lease, every hold attached; one `KEEPALIVE` a tick.
    Lease,
    /// Plain holds; a pipelined `LOCK.EXTEND` of each a tick.
    Extend,
    /// As many plain keys, long leases; one `PING` a tick.
    Idle,
}

impl Side {
    pub const ALL: [Side; 3] = [Side::Lease, Side::Extend, Side::Idle];

    fn prefix(self) -> &'static str {
        match self {
            Side::Lease => "lease:",
            Side::Extend => "plain:",
            Side::Idle => "idle:",
        }
    }

    /// What each side sends, as the report shows it (`<n>`: twelve digits).
    pub fn commands(self, variant: &Variant, holds: u64) -> Vec<String> {
        let holds = grouped(holds);
        let ttl = variant.ttl_ms;
        let every = variant.interval_ms;
        match self {
            Side::Lease => vec![
                format!("LOCK.LEASE GRANT {ttl}"),
                format!("LOCK.ACQUIRE lease:<n> {ttl} TOKEN <token> LEASE <id>   ({holds} holds)"),
                format!("LOCK.LEASE KEEPALIVE <id>   (every {every} ms)"),
            ],
            Side::Extend => vec![
                format!("LOCK.ACQUIRE plain:<n> {PLAIN_SETUP_TTL_MS} TOKEN <token>   ({holds} holds)"),
                format!("LOCK.EXTEND plain:<n> <token> {ttl}   ({holds} in one pipeline every {every} ms)"),
            ],
            Side::Idle => vec![
                format!("LOCK.ACQUIRE idle:<n> {IDLE_TTL_MS} TOKEN <token>   ({holds} holds)"),
                format!("PING   (every {every} ms)"),
            ],
        }
    }
}

/// `10000` as `10,000`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The server's own count and time of one command (`INFO commandstats`).
#[derive(Clone, Debug, Serialize)]
pub struct CommandStat {
    pub command: String,
    pub calls: u64,
    pub usec: u64,
}

/// What one server did in the window.
#[derive(Clone, Debug, Serialize)]
pub struct SideResult {
    pub side: Side,
    /// The main thread's CPU over the window, µs (`/proc/<pid>/schedstat`).
    pub cpu_us: f64,
    /// The process's, µs (`INFO cpu` `used_cpu_user` + `used_cpu_sys`).
    pub process_cpu_us: f64,
    /// The main thread's CPU over each tick's requests (the renewal, or
    /// the idle server's `PING`), from the send to [`SETTLE`] after the
    /// (last) reply, summed, µs; and the length of those spans, ms.
    pub renewal_cpu_us: f64,
    pub renewal_window_ms: f64,
    /// Every command the server ran in the window, the measuring ones
    /// (`config|resetstat`, `info`) included.
    pub commands: Vec<CommandStat>,
    /// Of those, the lock commands' (`lock.*`) calls and time.
    pub lock_calls: u64,
    pub lock_usec: u64,
    /// Ticks in the window: `KEEPALIVE`s, pipelined batches or `PING`s sent.
    pub ticks: u64,
    /// Replies `1` (the lease lives; the hold was extended) or `PONG`, of
    /// `ticks` × requests per tick.
    pub replies_ok: u64,
    pub replies_expected: u64,
    /// The most a tick was sent after its time, ms.
    pub max_late_ms: f64,
    /// The longest a server may have gone without a renewal in the window:
    /// from one tick's send to the next one's (last) reply, ms. At the
    /// variant's ttl or more, a lost hold is the harness' lateness.
    #[serde(default)]
    pub max_unrenewed_ms: f64,
    /// Each tick's round trip, from its send to its (last) reply.
    pub tick: Spread,
    /// `INFO lock` `lock_locks` after the window, and the holds that
    /// expired in it (`lock_expiries`): must be `holds` and 0.
    pub locks_at_end: i64,
    pub expiries: i64,
    /// Lease side: keys whose TTL a `KEEPALIVE` moved in the window.
    pub keys_moved: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VariantResult {
    pub ttl_ms: u64,
    pub interval_ms: u64,
    pub holds: u64,
    /// The window: its ticks times the interval, seconds.
    pub window_s: f64,
    pub sides: Vec<SideResult>,
    /// Why the variant was not measured (no sides then): the machine was
    /// too slow for its setup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct KeepaliveResults {
    pub server: String,
    pub runs: Vec<VariantResult>,
    /// Wall time of the section, seconds.
    pub elapsed_s: f64,
}

/// A variant's three servers side by side: what the report shows and the
/// goal is judged on (issue 27: at least 100× less server time for the
/// lease).
#[derive(Clone, Debug, Serialize)]
pub struct KeepaliveRow {
    pub server: String,
    pub ttl_ms: u64,
    pub interval_ms: u64,
    pub holds: u64,
    pub window_s: f64,
    /// Lock commands the server ran in the window, each side.
    pub lease_calls: u64,
    pub extend_calls: u64,
    pub calls_ratio: f64,
    /// Main-thread CPU over the whole window, µs, each server: each with
    /// the idle work every server does (the idle server's figure).
    pub lease_cpu_us: f64,
    pub extend_cpu_us: f64,
    pub idle_cpu_us: f64,
    /// Extend's over the lease's.
    pub cpu_ratio: f64,
    /// The whole window less the idle server's: what the renewals added,
    /// give or take the spread between idle servers (≈ ±10 ms a minute on
    /// the 2-core machine), which is the size of the lease's own cost.
    pub lease_above_idle_us: f64,
    pub extend_above_idle_us: f64,
    /// The renewals' CPU (`renewal_cpu_us`: each tick from its send until
    /// the server slept again), less what the idle server spends in as
    /// long (its rate outside its `PING`s): the cost of keeping the holds
    /// alive, with the idle noise cut to the renewals' spans. Never less
    /// than the lock commands' own time.
    pub lease_renewal_us: f64,
    pub extend_renewal_us: f64,
    /// The idle server's `PING`s, the same way: what one request costs
    /// any server here, whatever it asks.
    pub ping_us: f64,
    /// Extend's over the lease's: the goal's figure.
    pub renewal_ratio: f64,
    /// The lock commands' own time (`INFO commandstats` `usec`), µs.
    pub lease_command_us: u64,
    pub extend_command_us: u64,
    pub command_ratio: f64,
    /// Keys whose TTL a `KEEPALIVE` moved in the window.
    pub keys_moved: Option<u64>,
    /// Every renewal replied `1`, no hold expired, and every one was still
    /// there at the end, on both sides.
    pub all_held: bool,
    /// A hold was lost on a side whose renewals came further apart than the
    /// ttl (the harness was late, not the server): why the goal is not
    /// measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

impl KeepaliveRow {
    /// A variant the machine was too slow to set up: no figures, and why.
    fn not_measured(server: &str, run: &VariantResult, why: &str) -> KeepaliveRow {
        KeepaliveRow {
            server: server.to_string(),
            ttl_ms: run.ttl_ms,
            interval_ms: run.interval_ms,
            holds: run.holds,
            window_s: run.window_s,
            lease_calls: 0,
            extend_calls: 0,
            calls_ratio: f64::NAN,
            lease_cpu_us: f64::NAN,
            extend_cpu_us: f64::NAN,
            idle_cpu_us: f64::NAN,
            cpu_ratio: f64::NAN,
            lease_above_idle_us: f64::NAN,
            extend_above_idle_us: f64::NAN,
            lease_renewal_us: f64::NAN,
            extend_renewal_us: f64::NAN,
            ping_us: f64::NAN,
            renewal_ratio: f64::NAN,
            lease_command_us: 0,
            extend_command_us: 0,
            command_ratio: f64::NAN,
            keys_moved: None,
            all_held: false,
            not_measured: Some(why.to_string()),
        }
    }
}

pub fn rows(results: &KeepaliveResults) -> Vec<KeepaliveRow> {
    results
        .runs
        .iter()
        .filter_map(|run| {
            if let Some(why) = &run.not_measured {
                return Some(KeepaliveRow::not_measured(&results.server, run, why));
            }
            let side = |wanted: Side| run.sides.iter().find(|s| s.side == wanted);
            let (lease, extend, idle) =
                (side(Side::Lease)?, side(Side::Extend)?, side(Side::Idle)?);
            // The idle server's CPU per ms of the window, outside its PINGs.
            let idle_per_ms = (idle.cpu_us - idle.renewal_cpu_us)
                / (run.window_s * 1000.0 - idle.renewal_window_ms).max(1.0);
            let renewal = |s: &SideResult| {
                (s.renewal_cpu_us - idle_per_ms * s.renewal_window_ms).max(s.lock_usec as f64)
            };
            let held = |s: &SideResult| {
                s.replies_ok == s.replies_expected
                    && s.expiries == 0
                    && u64::try_from(s.locks_at_end) == Ok(run.holds)
            };
            let (lease_renewal_us, extend_renewal_us) = (renewal(lease), renewal(extend));
            let all_held = held(lease) && held(extend);
            let late = [lease, extend]
                .into_iter()
                .filter(|s| !held(s) && s.max_unrenewed_ms >= run.ttl_ms as f64)
                .map(|s| {
                    format!(
                        "{:?} side: a hold was lost after the harness left {:.0} ms between \
                         renewals of a {} ms lease (a busy machine)",
                        s.side, s.max_unrenewed_ms, run.ttl_ms
                    )
                })
                .collect::<Vec<_>>();
            Some(KeepaliveRow {
                server: results.server.clone(),
                ttl_ms: run.ttl_ms,
                interval_ms: run.interval_ms,
                holds: run.holds,
                window_s: run.window_s,
                lease_calls: lease.lock_calls,
                extend_calls: extend.lock_calls,
                calls_ratio: extend.lock_calls as f64 / lease.lock_calls as f64,
                lease_cpu_us: lease.cpu_us,
                extend_cpu_us: extend.cpu_us,
                idle_cpu_us: idle.cpu_us,
                cpu_ratio: extend.cpu_us / lease.cpu_us,
                lease_above_idle_us: lease.cpu_us - idle.cpu_us,
                extend_above_idle_us: extend.cpu_us - idle.cpu_us,
                lease_renewal_us,
                extend_renewal_us,
                ping_us: renewal(idle),
                renewal_ratio: extend_renewal_us / lease_renewal_us,
                lease_command_us: lease.lock_usec,
                extend_command_us: extend.lock_usec,
                command_ratio: extend.lock_usec as f64 / lease.lock_usec as f64,
                keys_moved: lease.keys_moved,
                all_held,
                not_measured: (!all_held && !late.is_empty()).then(|| late.join("; ")),
            })
        })
        .collect()
}

/// Run every variant, each on three fresh servers started by `start`.
pub fn run(
    start: &dyn Fn() -> Result<Server, String>,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<KeepaliveResults, String> {
    let started = Instant::now();
    let mut runs = Vec::new();
    let mut label = String::new();
    for variant in &settings.variants {
        let servers = [start()?, start()?, start()?];
        label.clone_from(&servers[0].label);
        progress(&format!(
            "{label}: {} holds kept alive for {} s, lease ttl {} ms renewed every {} ms \
             against LOCK.EXTEND, beside an idle server",
            settings.holds, settings.duration_s, variant.ttl_ms, variant.interval_ms
        ));
        runs.push(run_variant(&servers, settings, variant)?);
    }
    Ok(KeepaliveResults {
        server: label,
        runs,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// The three sides at once, one thread each, on one tick schedule.
fn run_variant(
    servers: &[Server; 3],
    settings: &Settings,
    variant: &Variant,
) -> Result<VariantResult, String> {
    if variant.interval_ms == 0 || variant.interval_ms >= variant.ttl_ms {
        return Err(format!(
            "lease ttl {} ms renewed every {} ms: the interval must be shorter",
            variant.ttl_ms, variant.interval_ms
        ));
    }
    let window_ticks = (settings.duration_s * 1000).div_ceil(variant.interval_ms);
    let schedule = Schedule {
        epoch: Instant::now(),
        interval: Duration::from_millis(variant.interval_ms),
        ready: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        first_tick: OnceLock::new(),
        warmup_ticks: settings.warmup_ticks.max(1),
        window_ticks,
        sides: Side::ALL.len(),
    };
    let sides = std::thread::scope(|scope| {
        let threads: Vec<_> = Side::ALL
            .into_iter()
            .zip(servers)
            .map(|(side, server)| {
                let schedule = &schedule;
                scope.spawn(move || drive(side, server, settings, variant, schedule))
            })
            .collect();
        let results: Vec<Result<SideResult, String>> = threads
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| "a keep-alive thread panicked".to_string())?
            })
            .collect();
        // The side that failed first, rather than those it stopped.
        let failed = results.iter().filter_map(|r| r.as_ref().err());
        if let Some(error) = failed
            .clone()
            .find(|e| !e.ends_with(STOPPED))
            .or(failed.clone().next())
        {
            return match error.split_once(TOO_SLOW) {
                Some((side, why)) => Ok(Err(format!("{side}{why}"))),
                None => Err(error.clone()),
            };
        }
        Ok(Ok(results
            .into_iter()
            .filter_map(Result::ok)
            .collect::<Vec<_>>()))
    })?;
    let (sides, not_measured) = match sides {
        Ok(sides) => (sides, None),
        Err(why) => (Vec::new(), Some(why)),
    };
    Ok(VariantResult {
        ttl_ms: variant.ttl_ms,
        interval_ms: variant.interval_ms,
        holds: settings.holds,
        window_s: (window_ticks * variant.interval_ms) as f64 / 1000.0,
        sides,
        not_measured,
    })
}

/// One tick grid for the three threads: tick `k` is due at `epoch + k ×
/// interval`. Once every side is set up, the window opens `warmup_ticks`
/// later and lasts `window_ticks`.
struct Schedule {
    epoch: Instant,
    interval: Duration,
    ready: AtomicUsize,
    /// A side failed: the others stop at their next tick.
    failed: AtomicBool,
    first_tick: OnceLock<u64>,
    warmup_ticks: u64,
    window_ticks: u64,
    sides: usize,
}

impl Schedule {
    fn due(&self, tick: u64) -> Instant {
        self.epoch + self.interval * u32::try_from(tick).unwrap_or(u32::MAX)
    }

    /// The first tick due after now.
    fn next_tick(&self) -> u64 {
        let since = self.epoch.elapsed().as_nanos();
        (since / self.interval.as_nanos().max(1)) as u64 + 1
    }

    /// The window's first tick, fixed by whichever side first sees every
    /// side ready (at its tick `now`).
    fn first_tick(&self, now: u64) -> Option<u64> {
        if let Some(&first) = self.first_tick.get() {
            return Some(first);
        }
        (self.ready.load(Ordering::SeqCst) == self.sides)
            .then(|| *self.first_tick.get_or_init(|| now + self.warmup_ticks))
    }
}

/// What a side sends each tick.
enum Work {
    Keepalive(redis::Cmd),
    Extend(redis::Pipeline),
    Ping,
}

impl Work {
    fn requests(&self, holds: u64) -> u64 {
        match self {
            Work::Keepalive(_) | Work::Ping => 1,
            Work::Extend(_) => holds,
        }
    }

    /// Send one tick's requests; the replies that are `1`.
    fn send(&self, conn: &mut Connection) -> Result<u64, String> {
        match self {
            Work::Keepalive(cmd) => {
                let alive: i64 = query(conn, &mut cmd.clone())?;
                Ok(u64::from(alive == 1))
            }
            Work::Extend(pipe) => {
                let replies: Vec<i64> = pipe
                    .query(conn)
                    .map_err(|e| format!("LOCK.EXTEND pipeline: {e}"))?;
                Ok(replies.iter().filter(|&&r| r == 1).count() as u64)
            }
            Work::Ping => {
                let pong: String = query(conn, &mut redis::cmd("PING"))?;
                Ok(u64::from(pong == "PONG"))
            }
        }
    }
}

/// One side: set up, join the schedule, measure the window. A side that
/// fails stops the others.
fn drive(
    side: Side,
    server: &Server,
    settings: &Settings,
    variant: &Variant,
    schedule: &Schedule,
) -> Result<SideResult, String> {
    let result = drive_side(side, server, settings, variant, schedule);
    if result.is_err() {
        schedule.failed.store(true, Ordering::SeqCst);
    }
    result
}

fn drive_side(
    side: Side,
    server: &Server,
    settings: &Settings,
    variant: &Variant,
    schedule: &Schedule,
) -> Result<SideResult, String> {
    let mut conn = server.conn()?;
    let work = set_up_again_if_late(&mut conn, side, settings.holds, variant)?;
    schedule.ready.fetch_add(1, Ordering::SeqCst);
    let keys: Vec<String> = match side {
        Side::Lease => (0..settings.holds)
            .map(|i| bench_key(side.prefix(), i))
            .collect(),
        _ => Vec::new(),
    };
    let mut tick = schedule.next_tick();
    let mut before = None;
    let mut ticks = 0;
    let mut replies_ok = 0;
    let mut max_late_ms: f64 = 0.0;
    let (mut last_sent, mut max_unrenewed_ms): (Option<Instant>, f64) = (None, 0.0);
    let mut round_trips_us = Vec::new();
    let mut expiries_before = Vec::new();
    let (mut renewal_cpu_ns, mut renewal_window) = (0, Duration::ZERO);
    loop {
        let due = schedule.due(tick);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if schedule.failed.load(Ordering::SeqCst) {
            return Err(format!("{side:?}: {STOPPED}"));
        }
        let first = schedule.first_tick(tick);
        if first == Some(tick) {
            before = Some(snapshot_open(server, &mut conn)?);
        }
        if let Some(first) = first {
            if tick == first + schedule.window_ticks {
                break;
            }
        }
        let in_window = first.is_some_and(|first| tick >= first);
        let cpu_before = server.cpu_ns();
        let sent = Instant::now();
        let ok = work.send(&mut conn)?;
        if let Some(last) = last_sent.filter(|_| in_window) {
            max_unrenewed_ms = max_unrenewed_ms.max(last.elapsed().as_secs_f64() * 1000.0);
        }
        last_sent = Some(sent);
        if in_window {
            ticks += 1;
            replies_ok += ok;
            round_trips_us.push(sent.elapsed().as_secs_f64() * 1e6);
            max_late_ms = max_late_ms.max(sent.duration_since(due).as_secs_f64() * 1000.0);
            // The server's CPU from the send until it has surely gone back
            // to sleep after the last reply.
            std::thread::sleep(SETTLE);
            renewal_cpu_ns += server.cpu_ns().saturating_sub(cpu_before);
            renewal_window += sent.elapsed();
        }
        // The keys' TTLs as the window opens (no KEEPALIVE comes between).
        if first == Some(tick + 1) {
            expiries_before = pexpiretimes(&mut conn, &keys)?;
        }
        tick += 1;
    }
    let opened = before.ok_or_else(|| format!("{side:?}: the window never opened"))?;
    let closed = snapshot(server, &mut conn)?;
    let commands = command_stats(&mut conn)?;
    let locks_at_end = info_int(&mut conn, "lock", "lock_locks")?;
    let keys_moved = match side {
        Side::Lease => {
            let after = pexpiretimes(&mut conn, &keys)?;
            Some(
                expiries_before
                    .iter()
                    .zip(&after)
                    .filter(|(a, b)| a != b)
                    .count() as u64,
            )
        }
        _ => None,
    };
    let lock_commands = commands.iter().filter(|c| c.command.starts_with("lock."));
    Ok(SideResult {
        side,
        cpu_us: closed.cpu_ns.saturating_sub(opened.cpu_ns) as f64 / 1000.0,
        process_cpu_us: closed.process_cpu_us - opened.process_cpu_us,
        renewal_cpu_us: renewal_cpu_ns as f64 / 1000.0,
        renewal_window_ms: renewal_window.as_secs_f64() * 1000.0,
        lock_calls: lock_commands.clone().map(|c| c.calls).sum(),
        lock_usec: lock_commands.map(|c| c.usec).sum(),
        commands,
        ticks,
        replies_ok,
        replies_expected: ticks * work.requests(settings.holds),
        max_late_ms,
        max_unrenewed_ms,
        tick: Spread::of(&round_trips_us),
        locks_at_end,
        expiries: closed.expiries - opened.expiries,
        keys_moved,
    })
}

/// [`set_up`], again on an empty server when the lease side's lease ran
/// out while its holds were being taken (a stall between two batches), up
/// to [`SETUP_ATTEMPTS`] times; then a [`TOO_SLOW`] error.
fn set_up_again_if_late(
    conn: &mut Connection,
    side: Side,
    holds: u64,
    variant: &Variant,
) -> Result<Work, String> {
    let mut attempt = 1;
    loop {
        match set_up(conn, side, holds, variant)? {
            Ok(work) => return Ok(work),
            Err(why) if attempt < SETUP_ATTEMPTS => {
                eprintln!("{side:?} setup, attempt {attempt}: {why}; again");
                query::<()>(conn, redis::cmd("FLUSHALL").arg("SYNC"))?;
                attempt += 1;
            }
            Err(why) => {
                return Err(format!(
                    "{side:?} setup: {TOO_SLOW}{why}, in each of {SETUP_ATTEMPTS} attempts"
                ))
            }
        }
    }
}

/// Take `holds` keys the side's way; what it sends each tick, or (`Ok(Err)`)
/// why the lease ran out before every hold was attached to it.
fn set_up(
    conn: &mut Connection,
    side: Side,
    holds: u64,
    variant: &Variant,
) -> Result<Result<Work, String>, String> {
    let ttl_ms = variant.ttl_ms;
    let lease: Option<String> = match side {
        Side::Lease => Some(query(
            conn,
            redis::cmd("LOCK.LEASE").arg("GRANT").arg(ttl_ms),
        )?),
        _ => None,
    };
    let keepalive = lease.as_ref().map(|id| {
        let mut cmd = redis::cmd("LOCK.LEASE");
        cmd.arg("KEEPALIVE").arg(id);
        cmd
    });
    let mut at = 0;
    while at < holds {
        let mut pipe = redis::pipe();
        for i in at..(at + SETUP_BATCH).min(holds) {
            let cmd = pipe.cmd("LOCK.ACQUIRE").arg(bench_key(side.prefix(), i));
            match (side, &lease) {
                (Side::Lease, Some(id)) => {
                    cmd.arg(ttl_ms).arg("TOKEN").arg(TOKEN).arg("LEASE").arg(id)
                }
                (Side::Extend, _) => cmd.arg(PLAIN_SETUP_TTL_MS).arg("TOKEN").arg(TOKEN),
                _ => cmd.arg(IDLE_TTL_MS).arg("TOKEN").arg(TOKEN),
            };
        }
        let granted: Vec<Option<(Vec<u8>, u64)>> = match pipe.query(conn) {
            Ok(granted) => granted,
            // A grant `LEASE id` of a lease that ran out.
            Err(e) if e.code() == Some("NOLEASE") => {
                return Ok(Err(format!(
                    "the {ttl_ms} ms lease ran out while its holds were taken ({e})"
                )))
            }
            Err(e) => return Err(format!("{side:?} setup: LOCK.ACQUIRE: {e}")),
        };
        if granted.iter().any(Option::is_none) {
            return Err(format!("{side:?} setup: a LOCK.ACQUIRE was refused"));
        }
        if let Some(cmd) = &keepalive {
            let alive: i64 = query(conn, &mut cmd.clone())?;
            if alive != 1 {
                return Ok(Err(format!(
                    "the {ttl_ms} ms lease ran out while its holds were taken"
                )));
            }
        }
        at += SETUP_BATCH;
    }
    Ok(Ok(match side {
        Side::Lease => Work::Keepalive(keepalive.ok_or("no lease granted")?),
        Side::Extend => {
            let mut pipe = redis::pipe();
            for i in 0..holds {
                pipe.cmd("LOCK.EXTEND")
                    .arg(bench_key(side.prefix(), i))
                    .arg(TOKEN)
                    .arg(ttl_ms);
            }
            Work::Extend(pipe)
        }
        Side::Idle => Work::Ping,
    }))
}

/// Where the server's counters stood.
struct Snapshot {
    cpu_ns: u64,
    process_cpu_us: f64,
    expiries: i64,
}

fn snapshot(server: &Server, conn: &mut Connection) -> Result<Snapshot, String> {
    let cpu_ns = server.cpu_ns();
    let mut seconds = |field: &str| -> Result<f64, String> {
        info_field(conn, "cpu", field)?
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("INFO cpu has no {field}"))
    };
    let process_cpu_us = (seconds("used_cpu_user")? + seconds("used_cpu_sys")?) * 1e6;
    Ok(Snapshot {
        cpu_ns,
        process_cpu_us,
        expiries: info_int(conn, "lock", "lock_expiries")?,
    })
}

/// Open the window: commandstats reset, then the counters read.
fn snapshot_open(server: &Server, conn: &mut Connection) -> Result<Snapshot, String> {
    query::<()>(conn, redis::cmd("CONFIG").arg("RESETSTAT"))?;
    snapshot(server, conn)
}

/// `PEXPIRETIME` of `keys`, in one pipeline (none: empty).
fn pexpiretimes(conn: &mut Connection, keys: &[String]) -> Result<Vec<i64>, String> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("PEXPIRETIME").arg(key);
    }
    pipe.query(conn).map_err(|e| format!("PEXPIRETIME: {e}"))
}

/// Every `cmdstat_` line of `INFO commandstats`.
fn command_stats(conn: &mut Connection) -> Result<Vec<CommandStat>, String> {
    let info: String = query(conn, redis::cmd("INFO").arg("commandstats"))?;
    Ok(parse_command_stats(&info))
}

/// `cmdstat_lock.lease|keepalive:calls=60,usec=812,usec_per_call=13.53,…`
/// lines as command, calls and usec.
pub fn parse_command_stats(info: &str) -> Vec<CommandStat> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |wanted: &str| {
                fields
                    .split(',')
                    .filter_map(|f| f.split_once('='))
                    .find(|(k, _)| *k == wanted)
                    .and_then(|(_, v)| v.parse().ok())
            };
            Some(CommandStat {
                command: name.to_string(),
                calls: field("calls")?,
                usec: field("usec")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(side: Side, cpu_us: f64, renewal_cpu_us: f64, lock_usec: u64) -> SideResult {
        SideResult {
            side,
            cpu_us,
            process_cpu_us: cpu_us,
            renewal_cpu_us,
            renewal_window_ms: 100.0,
            commands: Vec::new(),
            lock_calls: 10,
            lock_usec,
            ticks: 10,
            replies_ok: 10,
            replies_expected: 10,
            max_late_ms: 0.0,
            max_unrenewed_ms: 0.0,
            tick: Spread::default(),
            locks_at_end: 5,
            expiries: 0,
            keys_moved: None,
        }
    }

    #[test]
    fn the_renewals_are_taken_less_the_idle_servers_time_in_as_long() {
        let mut results = KeepaliveResults {
            server: "s".into(),
            runs: vec![VariantResult {
                ttl_ms: 3000,
                interval_ms: 1000,
                holds: 5,
                window_s: 10.0,
                sides: vec![
                    side(Side::Lease, 2_000.0, 1_100.0, 50),
                    side(Side::Extend, 90_000.0, 80_100.0, 60_000),
                    // 1,100 µs in 100 ms of PINGs; 9,900 µs in the other 9,900 ms.
                    side(Side::Idle, 11_000.0, 1_100.0, 0),
                ],
                not_measured: None,
            }],
            elapsed_s: 10.0,
        };
        let row = &rows(&results)[0];
        assert_eq!(row.lease_renewal_us, 1_000.0);
        assert_eq!(row.extend_renewal_us, 80_000.0);
        assert_eq!(row.ping_us, 1_000.0);
        assert_eq!(row.renewal_ratio, 80.0);
        assert_eq!(row.cpu_ratio, 45.0);
        assert_eq!(row.command_ratio, 1_200.0);
        assert!(row.all_held);
        // Never less than the commands' own time; a lost hold is told.
        results.runs[0].sides[0].renewal_cpu_us = 90.0;
        results.runs[0].sides[1].expiries = 1;
        let row = &rows(&results)[0];
        assert_eq!(row.lease_renewal_us, 50.0);
        assert!(!row.all_held);
        // A hold lost while the renewals kept within the ttl is a loss …
        results.runs[0].sides[1].max_unrenewed_ms = 2_999.0;
        assert_eq!(rows(&results)[0].not_measured, None);
        // … and one lost after the harness left a ttl between renewals is
        // the busy machine's: not measured.
        results.runs[0].sides[1].max_unrenewed_ms = 3_400.0;
        let row = &rows(&results)[0];
        assert!(!row.all_held);
        let why = row.not_measured.as_deref().unwrap_or_default();
        assert!(
            why.starts_with("Extend side: a hold was lost after"),
            "{why}"
        );
        assert!(
            why.contains("3400 ms between renewals of a 3000 ms lease"),
            "{why}"
        );
    }

    #[test]
    fn a_variant_the_machine_was_too_slow_to_set_up_is_a_row_that_says_why() {
        let results = KeepaliveResults {
            server: "s".into(),
            runs: vec![VariantResult {
                ttl_ms: 300,
                interval_ms: 100,
                holds: 5,
                window_s: 5.0,
                sides: Vec::new(),
                not_measured: Some("Lease setup: the 300 ms lease ran out".into()),
            }],
            elapsed_s: 1.0,
        };
        let row = &rows(&results)[0];
        assert_eq!(row.ttl_ms, 300);
        assert!(row.renewal_ratio.is_nan() && !row.all_held);
        assert_eq!(
            row.not_measured.as_deref(),
            Some("Lease setup: the 300 ms lease ran out")
        );
    }

    #[test]
    fn each_side_says_what_it_sends() {
        let variant = Variant {
            ttl_ms: 3000,
            interval_ms: 1000,
        };
        assert_eq!(
            Side::Extend.commands(&variant, 10_000)[1],
            "LOCK.EXTEND plain:<n> <token> 3000   (10,000 in one pipeline every 1000 ms)"
        );
        assert_eq!(
            Side::Idle.commands(&variant, 100)[1],
            "PING   (every 1000 ms)"
        );
        assert_eq!(
            [grouped(0), grouped(999), grouped(1000), grouped(1_234_567)],
            ["0", "999", "1,000", "1,234,567"]
        );
    }

    #[test]
    fn reads_every_command_of_commandstats() {
        let info = "# Commandstats\r\n\
            cmdstat_lock.lease|keepalive:calls=60,usec=812,usec_per_call=13.53,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_lock.extend:calls=600000,usec=1200000,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_config|resetstat:calls=1,usec=9,usec_per_call=9.00\r\n\
            cmdstat_broken:calls=x,usec=1\r\n";
        let stats = parse_command_stats(info);
        let names: Vec<&str> = stats.iter().map(|s| s.command.as_str()).collect();
        assert_eq!(
            names,
            ["lock.lease|keepalive", "lock.extend", "config|resetstat"]
        );
        assert_eq!((stats[0].calls, stats[0].usec), (60, 812));
        assert_eq!((stats[1].calls, stats[1].usec), (600_000, 1_200_000));
    }

    #[test]
    fn the_window_opens_once_every_side_is_ready() {
        let schedule = Schedule {
            epoch: Instant::now(),
            interval: Duration::from_millis(100),
            ready: AtomicUsize::new(2),
            failed: AtomicBool::new(false),
            first_tick: OnceLock::new(),
            warmup_ticks: 3,
            window_ticks: 10,
            sides: 3,
        };
        assert_eq!(schedule.first_tick(5), None);
        schedule.ready.fetch_add(1, Ordering::SeqCst);
        assert_eq!(schedule.first_tick(6), Some(9));
        // A side that sees it a tick later gets the same window.
        assert_eq!(schedule.first_tick(7), Some(9));
        assert_eq!(schedule.due(10) - schedule.due(0), Duration::from_secs(1));
    }

    #[test]
    fn the_duration_comes_from_the_environment_when_set() {
        let settings = Settings {
            holds: 10,
            duration_s: 60,
            warmup_ticks: 3,
            variants: Vec::new(),
        };
        // (The only test that touches the variable.)
        std::env::set_var(DURATION_ENV, "5");
        assert_eq!(
            settings.clone().with_env_duration().map(|s| s.duration_s),
            Ok(5)
        );
        std::env::set_var(DURATION_ENV, "soon");
        assert!(settings.clone().with_env_duration().is_err());
        std::env::remove_var(DURATION_ENV);
        assert_eq!(settings.with_env_duration().map(|s| s.duration_s), Ok(60));
    }
}
