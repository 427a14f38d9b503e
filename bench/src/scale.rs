//! Scale: does the module slow down when the server holds many locks and
//! many clients wait? Two servers of the same binary run side by side: a
//! small one holding few locks, and a large one holding many locks with
//! clients blocked in `LOCK.ACQUIRE … WAIT` (each on a connection of its
//! own): queues of set lengths on a few keys, the longest of 10,000, and
//! the rest spread over many held locks. Then:
//!
//! - ACQUIRE: the same uncontended workload alternates between the two
//!   servers, run by run;
//! - RELEASE, on the large server: of a key nobody waits for, and of each
//!   queue's key, whose every RELEASE hands the lock to the queue's head
//!   while the previous holder queues again at its tail, so each queue
//!   keeps its length; the keys in turn, round by round;
//! - memory per waiter: `used_memory` before the waiters, with their
//!   connections open, with them blocked in `BLPOP` (the reference: a
//!   client that Redis itself blocks) and with them waiting;
//! - waiters leaving: the server's CPU time per waiter that disconnects from
//!   the head of the longest queue, from its tail, and from the spread keys.
//!
//! A waiter is a real blocked client, so it takes a file descriptor in the
//! server and one here: how many can wait is bounded by both processes'
//! open-file limits (raised to the hard limit here; the server raises its
//! own to `maxclients`), and, per pair of addresses, by the ~28,000
//! ephemeral ports, which is why the large server listens on several
//! loopback addresses. The report says how many waited, and why not more.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::contention::run_load;
use crate::load::{LoadSummary, Strategy};
use crate::server::{dbsize, info_field, info_int, pipelined, query, run_against, Server};
use crate::stats::{median, percentile};
use crate::throughput;

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub rounds: usize,
    /// Held locks on the small and the large server.
    pub held: [u64; 2],
    pub contenders: usize,
    pub keys: usize,
    pub duration_ms: u64,
    /// Requests of the `SET … PX` reference run (redis-benchmark).
    pub set_requests: u64,
    /// Clients blocked in `LOCK.ACQUIRE … WAIT` on the large server, in
    /// all: the queues below, and the rest spread evenly over `waiter_keys`
    /// of its held locks.
    pub waiters: u64,
    pub waiter_keys: u64,
    /// The queue lengths whose RELEASE is timed (0: a key nobody waits for),
    /// each on a key of its own; the longest is the one waiters leave.
    pub release_queues: Vec<u64>,
    /// RELEASE timing: rounds, each timing this many RELEASEs per key.
    pub release_rounds: usize,
    pub release_samples: usize,
    /// Waiters that disconnect from the head of the longest queue, from its
    /// tail, and from the spread keys.
    pub leavers: u64,
    /// Loopback addresses the large server listens on (127.0.0.1 to
    /// 127.0.0.n); the waiters' connections go to each in turn.
    pub addresses: u8,
    /// Before each `used_memory` reading: at least this long after the last
    /// command (Redis frees an idle client's query buffer after 2 s), then
    /// until it stops moving, at most `settle_max_ms`.
    pub settle_min_ms: u64,
    pub settle_max_ms: u64,
}

/// The WAIT of every waiter: longer than any run, so none times out.
const WAIT_MS: u64 = 3_600_000;
/// Lease of the locks held, asked for by the waiters, and of the RELEASE keys.
const LEASE_MS: u64 = 3_600_000;
/// The RELEASE key nobody waits for.
const FREE_KEY: &str = "scale:free";
/// Connections the large server must keep free beside the waiters: the
/// load tool's (`contenders` more), redis-benchmark's 50, the harness' own.
const SPARE_CLIENTS: u64 = 50 + 32;
/// Spread waiters connected (and queued) per batch.
const BATCH: usize = 1000;
/// `LOCK.QUEUE` shows at most this many waiters.
const QUEUE_SHOWN: usize = 1000;

/// The key of the queue of `length` waiters.
pub fn queue_key(length: u64) -> String {
    format!("scale:queue:{length}")
}

#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub server: String,
    pub held: u64,
    /// Clients waiting on the server during the run.
    pub waiters: u64,
    pub round: usize,
    pub summary: LoadSummary,
    /// The server's own `LOCK.ACQUIRE` latency (`INFO latencystats`), µs.
    pub server_p50_us: Option<f64>,
    pub server_p99_us: Option<f64>,
    pub server_p999_us: Option<f64>,
    /// The same server's `SET … PX` latency from a `redis-benchmark` run right
    /// after: what any write pays for the size of the keyspace.
    pub set_p50_us: Option<f64>,
    pub set_p99_us: Option<f64>,
    pub set_p999_us: Option<f64>,
}

/// How many waited on the large server, and what they cost in memory.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WaiterSetup {
    pub asked: u64,
    /// Clients that waited (`INFO lock` `lock_waiters`).
    pub placed: u64,
    /// Their connections: each queue's key also has a connection holding
    /// the lock (a waiter that was granted), which queues again when it
    /// hands over.
    pub connections: u64,
    /// The queues' lengths (the longest may be shorter than asked), and the
    /// rest: waiters over `spread_keys` held locks.
    pub queues: Vec<u64>,
    pub spread: u64,
    pub spread_keys: u64,
    /// Fewer than asked could wait: the open-file limits below left room
    /// for no more.
    pub limited: bool,
    /// This harness' open-file limit (soft, after raising it, and hard),
    /// and the connections it left room for.
    pub harness_nofile: [u64; 2],
    pub harness_room: u64,
    /// `maxclients` asked of the large server, what it got (Redis lowers
    /// it to its open-file limit less 32), and the connections that left
    /// room for beside the load.
    pub maxclients_asked: u64,
    pub maxclients: u64,
    pub server_room: u64,
    pub addresses: u8,
    /// Seconds to connect every waiter, and to queue them all.
    pub connect_s: f64,
    pub queue_s: f64,
    /// `used_memory`, settled: with the held locks only; with the
    /// connections open and idle; with each blocked in `BLPOP` on a list
    /// key laid out as its lock; idle again; waiting in `LOCK.ACQUIRE …
    /// WAIT` (and a holder per queue).
    pub memory_before: i64,
    pub memory_connected: i64,
    pub memory_blpop: i64,
    pub memory_idle: i64,
    pub memory_waiting: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReleaseRun {
    /// Waiters on the key at every RELEASE (0: nobody waits).
    pub queue: u64,
    pub round: usize,
    pub samples: usize,
    /// Round trip of each RELEASE, µs (sorted).
    pub client_us: Vec<f64>,
    /// `INFO latencystats` and `INFO commandstats` (`usec_per_call`) of
    /// `lock.release`, reset before the run, µs.
    pub server_p50_us: Option<f64>,
    pub server_p99_us: Option<f64>,
    pub server_p999_us: Option<f64>,
    pub server_mean_us: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LeaveRun {
    /// "head", "tail" or "spread".
    pub from: &'static str,
    pub waiters: u64,
    /// Waiters on the longest queue's key before they left.
    pub queue_before: u64,
    /// The server's main-thread CPU from the first close to the last
    /// waiter gone, per waiter.
    pub server_cpu_us_per_waiter: f64,
    pub wall_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScaleResults {
    pub server: String,
    pub runs: Vec<Run>,
    pub waiters: WaiterSetup,
    pub release: Vec<ReleaseRun>,
    pub leave: Vec<LeaveRun>,
    /// Seconds: loading and queueing, the ACQUIRE rounds, RELEASE, leaving.
    pub setup_s: f64,
    pub acquire_s: f64,
    pub release_s: f64,
    pub leave_s: f64,
}

/// Uncontended cycles: each contender has keys of its own, no hold.
pub fn load_command(settings: &Settings) -> Vec<String> {
    [
        "lock-load",
        "--port",
        "$PORT",
        "--strategy",
        Strategy::NativePoll.name(),
        "--contenders",
        &settings.contenders.to_string(),
        "--keys",
        &settings.keys.to_string(),
        "--partition",
        "--key-prefix",
        "scale:",
        "--hold-ms",
        "0",
        "--duration-ms",
        &settings.duration_ms.to_string(),
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The reference: plain `SET … PX` on fresh keys, 50 clients, no pipeline.
pub fn set_command(settings: &Settings) -> Vec<String> {
    let set = [
        "SET",
        "scale-set:__rand_int__",
        throughput::TOKEN,
        "PX",
        "30000",
    ];
    throughput::redis_benchmark(50, None, settings.keys as u64, settings.set_requests, &set)
}

/// The waiters' commands, as sent (`<L>`: a queue's length, `<c>.<g>`: the
/// connection and how often it queued, `<n>`: the held lock).
pub fn waiter_commands() -> [String; 2] {
    [
        format!("LOCK.ACQUIRE scale:queue:<L> {LEASE_MS} TOKEN w<c>.<g> WAIT {WAIT_MS}"),
        format!("LOCK.ACQUIRE held:<n> {LEASE_MS} WAIT {WAIT_MS}"),
    ]
}

/// The large server's extra arguments: room for every waiter, on
/// `settings.addresses` loopback addresses.
pub fn large_server_args(settings: &Settings) -> Vec<String> {
    let mut args = vec!["--maxclients".to_string(), maxclients(settings).to_string()];
    args.push("--bind".to_string());
    args.extend((1..=settings.addresses.max(1)).map(|n| format!("127.0.0.{n}")));
    args
}

/// The waiters, a holder per queue, and the spare connections.
fn maxclients(settings: &Settings) -> u64 {
    settings.waiters
        + settings.release_queues.len() as u64
        + SPARE_CLIENTS
        + settings.contenders as u64
}

fn run_set_reference(settings: &Settings, port: u16) -> Result<(), String> {
    let argv = set_command(settings);
    run_against(Path::new(&argv[0]), &argv, port).map(|_| ())
}

/// Hold `count` locks (`held:<n>`, 1 hour leases, server-drawn tokens).
fn hold_locks(conn: &mut redis::Connection, count: u64) -> Result<(), String> {
    pipelined(
        conn,
        (0..count).map(|i| {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(format!("held:{i}")).arg(LEASE_MS);
            cmd
        }),
    )
}

/// `p50=…,p99=…,p99.9=…` of one command in `INFO latencystats`.
fn latency_percentiles(
    conn: &mut redis::Connection,
    command: &str,
) -> Result<[Option<f64>; 3], String> {
    let line = info_field(
        conn,
        "latencystats",
        &format!("latency_percentiles_usec_{command}"),
    )?
    .unwrap_or_default();
    let get = |name: &str| {
        line.split(',')
            .find_map(|part| part.strip_prefix(name))
            .and_then(|v| v.parse().ok())
    };
    Ok([get("p50="), get("p99="), get("p99.9=")])
}

/// `usec_per_call` of one command in `INFO commandstats`.
fn mean_latency(conn: &mut redis::Connection, command: &str) -> Result<Option<f64>, String> {
    let line = info_field(conn, "commandstats", &format!("cmdstat_{command}"))?;
    Ok(line.and_then(|line| {
        line.split(',')
            .find_map(|part| part.strip_prefix("usec_per_call="))
            .and_then(|v| v.parse().ok())
    }))
}

fn reset_stats(conn: &mut redis::Connection) -> Result<(), String> {
    query::<()>(conn, redis::cmd("CONFIG").arg("RESETSTAT"))
}

pub fn run(
    small: &Server,
    large: &Server,
    lock_load: &Path,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<ScaleResults, String> {
    let started = Instant::now();
    for (server, held) in [(small, settings.held[0]), (large, settings.held[1])] {
        progress(&format!("{}: holding {held} locks", server.label));
        let mut conn = server.conn()?;
        hold_locks(&mut conn, held)?;
        let keys = dbsize(&mut conn)?;
        if keys != held {
            return Err(format!("expected {held} held locks, found {keys} keys"));
        }
    }
    let mut waiters = Waiters::place(large, settings, progress)?;
    let setup_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let servers = [
        (small, settings.held[0], 0),
        (large, settings.held[1], waiters.setup.placed),
    ];
    let argv = load_command(settings);
    let mut runs = Vec::new();
    for round in 0..settings.rounds {
        let mut order = servers.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for (server, held, waiting) in order {
            progress(&format!(
                "{} with {held} held locks and {waiting} waiters, round {}/{}",
                server.label,
                round + 1,
                settings.rounds
            ));
            let mut conn = server.conn()?;
            reset_stats(&mut conn)?;
            let summary = run_load(lock_load, &argv, server.port())?;
            let [p50, p99, p999] = latency_percentiles(&mut conn, "lock.acquire")?;
            reset_stats(&mut conn)?;
            run_set_reference(settings, server.port())?;
            let [set_p50, set_p99, set_p999] = latency_percentiles(&mut conn, "set")?;
            runs.push(Run {
                server: server.label.clone(),
                held,
                waiters: waiting,
                round,
                summary,
                server_p50_us: p50,
                server_p99_us: p99,
                server_p999_us: p999,
                set_p50_us: set_p50,
                set_p99_us: set_p99,
                set_p999_us: set_p999,
            });
        }
    }
    let acquire_s = started.elapsed().as_secs_f64();
    waiters.check_waiting()?;

    let started = Instant::now();
    let release = waiters.time_releases(settings, progress)?;
    waiters.check_waiting()?;
    let release_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let leave = waiters.leave(settings, progress)?;
    let leave_s = started.elapsed().as_secs_f64();
    Ok(ScaleResults {
        server: large.label.clone(),
        runs,
        waiters: waiters.setup.clone(),
        release,
        leave,
        setup_s,
        acquire_s,
        release_s,
        leave_s,
    })
}

/// One RESP command.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Read from `stream` until `lines` CRLF-ended lines came; return them.
fn read_lines(stream: &mut TcpStream, lines: usize) -> Result<Vec<String>, String> {
    let mut text = Vec::new();
    let mut byte = [0u8; 1];
    let mut seen = 0;
    while seen < lines {
        stream
            .read_exact(&mut byte)
            .map_err(|e| format!("read a reply: {e}"))?;
        text.push(byte[0]);
        if text.ends_with(b"\r\n") {
            seen += 1;
        }
    }
    Ok(String::from_utf8_lossy(&text)
        .split("\r\n")
        .take(lines)
        .map(str::to_string)
        .collect())
}

/// Raise this process' soft open-file limit to its hard limit; both, after.
#[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
fn raise_nofile_limit() -> [u64; 2] {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return [0, 0];
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    [limit.rlim_cur as u64, limit.rlim_max as u64]
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// One queue whose RELEASE is timed: its connections, in queue order, and
/// the one holding the lock.
struct Queue {
    length: u64,
    key: String,
    /// Connection indices waiting, from the head.
    order: VecDeque<usize>,
    holder: usize,
}

/// The waiters on the large server.
struct Waiters<'a> {
    server: &'a Server,
    control: redis::Connection,
    /// Every connection (`None` once it left), its client id, its lock key
    /// and its token (the queues' connections; the spread ones let the
    /// server draw one).
    conns: Vec<Option<TcpStream>>,
    ids: Vec<u64>,
    keys: Vec<String>,
    tokens: Vec<String>,
    /// How often each connection queued (its tokens are `w<c>.<g>`).
    queued: Vec<u64>,
    queues: Vec<Queue>,
    /// The spread waiters' connections, one per key first.
    spread: Vec<usize>,
    setup: WaiterSetup,
}

impl<'a> Waiters<'a> {
    /// Wait (bounded) until `field` of `INFO section` is `want`.
    fn await_count(&mut self, section: &str, field: &str, want: u64) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let now = info_int(&mut self.control, section, field)? as u64;
            if now == want {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(120) {
                return Err(format!("INFO {section} {field} is {now}, not {want}"));
            }
            if started.elapsed() > Duration::from_millis(20) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    /// `used_memory` once Redis has trimmed idle clients' buffers.
    fn settled_memory(&mut self, settings: &Settings) -> Result<i64, String> {
        std::thread::sleep(Duration::from_millis(settings.settle_min_ms));
        let deadline = Instant::now() + Duration::from_millis(settings.settle_max_ms);
        let mut last = info_int(&mut self.control, "memory", "used_memory")?;
        loop {
            if Instant::now() >= deadline {
                return Ok(last);
            }
            std::thread::sleep(Duration::from_millis(500));
            let now = info_int(&mut self.control, "memory", "used_memory")?;
            if (now - last).abs() <= last / 1000 {
                return Ok(now);
            }
            last = now;
        }
    }

    /// Connect as many waiters as both processes' limits allow (up to the
    /// settings'), measure their memory, and queue them.
    fn place(
        server: &'a Server,
        settings: &Settings,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Waiters<'a>, String> {
        let mut control = server.conn()?;
        let nofile = raise_nofile_limit();
        let (_, got): (String, u64) = query(
            &mut control,
            redis::cmd("CONFIG").arg("GET").arg("maxclients"),
        )?;
        let asked = maxclients(settings);
        let harness_room = nofile[0].saturating_sub(open_fds() + SPARE_CLIENTS);
        let server_room = got.saturating_sub(SPARE_CLIENTS + settings.contenders as u64);
        let wanted = settings.waiters + settings.release_queues.len() as u64;
        let room = wanted.min(harness_room).min(server_room);
        // The queues first, shortest first (the longest takes what is
        // left); each has a holder beside its waiters. Then the spread.
        let mut lengths: Vec<u64> = settings
            .release_queues
            .iter()
            .copied()
            .filter(|&l| l > 0)
            .collect();
        lengths.sort_unstable();
        let mut left = room;
        let mut queues = Vec::new();
        for length in lengths {
            let length = length.min(left.saturating_sub(1));
            if length == 0 {
                break;
            }
            left -= length + 1;
            queues.push(length);
        }
        let spread_keys = settings
            .waiter_keys
            .min(settings.held[1].saturating_sub(1))
            .max(1);
        let spread = settings
            .waiters
            .saturating_sub(queues.iter().sum::<u64>())
            .min(left);
        let connections = queues.iter().map(|l| l + 1).sum::<u64>() + spread;
        let mut waiters = Waiters {
            server,
            control,
            conns: Vec::with_capacity(connections as usize),
            ids: Vec::with_capacity(connections as usize),
            keys: Vec::with_capacity(connections as usize),
            tokens: vec![String::new(); connections as usize],
            queued: vec![0; connections as usize],
            queues: Vec::new(),
            spread: Vec::new(),
            setup: WaiterSetup {
                asked: settings.waiters,
                placed: queues.iter().sum::<u64>() + spread,
                connections,
                queues: queues.clone(),
                spread,
                spread_keys,
                limited: room < wanted,
                harness_nofile: nofile,
                harness_room,
                maxclients_asked: asked,
                maxclients: got,
                server_room,
                addresses: settings.addresses.max(1),
                ..WaiterSetup::default()
            },
        };
        for &length in &queues {
            let first = waiters.keys.len();
            for _ in 0..=length {
                waiters.keys.push(queue_key(length));
            }
            waiters.queues.push(Queue {
                length,
                key: queue_key(length),
                order: (first..=first + length as usize).collect(),
                holder: usize::MAX,
            });
        }
        for j in 0..spread {
            waiters.spread.push(waiters.keys.len());
            waiters.keys.push(format!("held:{}", 1 + j % spread_keys));
        }
        for q in 0..waiters.queues.len() {
            let key = waiters.queues[q].key.clone();
            query::<()>(
                &mut waiters.control,
                redis::cmd("LOCK.ACQUIRE")
                    .arg(&key)
                    .arg(LEASE_MS)
                    .arg("TOKEN")
                    .arg("h"),
            )?;
        }
        waiters.setup.memory_before = waiters.settled_memory(settings)?;

        progress(&format!(
            "{}: connecting {connections} waiters over {} addresses{}",
            server.label,
            waiters.setup.addresses,
            if waiters.setup.limited {
                format!(
                    " (of {} asked: room for {harness_room} here, {server_room} in the server)",
                    settings.waiters
                )
            } else {
                String::new()
            }
        ));
        let started = Instant::now();
        let client_id = resp(&["CLIENT", "ID"]);
        for first in (0..connections as usize).step_by(BATCH) {
            let last = (first + BATCH).min(connections as usize);
            for i in first..last {
                let address =
                    Ipv4Addr::new(127, 0, 0, 1 + (i % waiters.setup.addresses as usize) as u8);
                let mut stream = TcpStream::connect_timeout(
                    &SocketAddr::from((address, server.port())),
                    Duration::from_secs(10),
                )
                .map_err(|e| format!("connect waiter {i} to {address}: {e}"))?;
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .map_err(|e| e.to_string())?;
                stream
                    .write_all(&client_id)
                    .map_err(|e| format!("waiter {i}: {e}"))?;
                waiters.conns.push(Some(stream));
            }
            for i in first..last {
                let stream = waiters.conns[i].as_mut().expect("connected");
                let line = read_lines(stream, 1)?.remove(0);
                let id = line
                    .strip_prefix(':')
                    .and_then(|id| id.parse().ok())
                    .ok_or_else(|| format!("CLIENT ID replied {line}"))?;
                waiters.ids.push(id);
            }
        }
        waiters.setup.connect_s = started.elapsed().as_secs_f64();
        waiters.setup.memory_connected = waiters.settled_memory(settings)?;

        // The reference: the same connections blocked by Redis itself.
        progress(&format!("{}: {connections} clients in BLPOP", server.label));
        let mut per_key: HashMap<String, u64> = HashMap::new();
        for i in 0..connections as usize {
            let key = format!("blpop:{}", waiters.keys[i]);
            waiters.send(i, &resp(&["BLPOP", &key, "0"]))?;
            *per_key.entry(key).or_default() += 1;
        }
        waiters.await_count("clients", "blocked_clients", connections)?;
        waiters.setup.memory_blpop = waiters.settled_memory(settings)?;
        pipelined(
            &mut waiters.control,
            per_key.iter().map(|(key, count)| {
                let mut cmd = redis::cmd("RPUSH");
                cmd.arg(key);
                for _ in 0..*count {
                    cmd.arg("x");
                }
                cmd
            }),
        )?;
        waiters.await_count("clients", "blocked_clients", 0)?;
        for i in 0..connections as usize {
            // `*2`, `$n`, the key, `$1`, `x`.
            let stream = waiters.conns[i].as_mut().expect("connected");
            read_lines(stream, 5)?;
        }
        waiters.setup.memory_idle = waiters.settled_memory(settings)?;

        progress(&format!(
            "{}: queueing {} waiters",
            server.label, waiters.setup.placed
        ));
        let started = Instant::now();
        // Each queue one at a time, so that its order is the connections'
        // (and LOCK.QUEUE shows it), then the first is granted: the holder.
        let mut waiting = 0;
        for q in 0..waiters.queues.len() {
            let order: Vec<usize> = waiters.queues[q].order.iter().copied().collect();
            for i in order {
                waiters.join(q, i)?;
                waiting += 1;
                waiters.await_count("lock", "lock_waiters", waiting)?;
            }
            let key = waiters.queues[q].key.clone();
            let released: i64 = query(
                &mut waiters.control,
                redis::cmd("LOCK.RELEASE").arg(&key).arg("h"),
            )?;
            if released != 1 {
                return Err(format!("LOCK.RELEASE {key} h replied {released}"));
            }
            waiting -= 1;
            waiters.granted(q)?;
        }
        let spread_conns = waiters.spread.clone();
        for batch in spread_conns.chunks(BATCH) {
            for &i in batch {
                let command = resp(&[
                    "LOCK.ACQUIRE",
                    &waiters.keys[i].clone(),
                    &LEASE_MS.to_string(),
                    "WAIT",
                    &WAIT_MS.to_string(),
                ]);
                waiters.send(i, &command)?;
            }
            waiting += batch.len() as u64;
            waiters.await_count("lock", "lock_waiters", waiting)?;
        }
        waiters.setup.queue_s = started.elapsed().as_secs_f64();
        waiters.setup.memory_waiting = waiters.settled_memory(settings)?;
        waiters.check_waiting()?;
        Ok(waiters)
    }

    fn send(&mut self, i: usize, command: &[u8]) -> Result<(), String> {
        let stream = self.conns[i]
            .as_mut()
            .ok_or_else(|| format!("waiter {i} has left"))?;
        stream
            .write_all(command)
            .map_err(|e| format!("waiter {i}: {e}"))
    }

    /// Connection `i` queues for queue `q`'s key with a token of its own.
    fn join(&mut self, q: usize, i: usize) -> Result<(), String> {
        self.queued[i] += 1;
        self.tokens[i] = format!("w{i}.{}", self.queued[i]);
        let command = resp(&[
            "LOCK.ACQUIRE",
            &self.queues[q].key.clone(),
            &LEASE_MS.to_string(),
            "TOKEN",
            &self.tokens[i].clone(),
            "WAIT",
            &WAIT_MS.to_string(),
        ]);
        self.send(i, &command)
    }

    /// Queue `q`'s head was granted: read its grant, make it the holder.
    fn granted(&mut self, q: usize) -> Result<(), String> {
        let head = self.queues[q]
            .order
            .pop_front()
            .ok_or_else(|| format!("{} has nobody to grant", self.queues[q].key))?;
        let stream = self.conns[head]
            .as_mut()
            .ok_or_else(|| format!("waiter {head} has left"))?;
        // `*2`, `$n`, the token, `:fence`.
        let reply = read_lines(stream, 4)?;
        if reply[0] != "*2" || reply[2] != self.tokens[head] {
            return Err(format!(
                "{}'s head {head} got {reply:?}, not its token {}",
                self.queues[q].key, self.tokens[head]
            ));
        }
        self.queues[q].holder = head;
        Ok(())
    }

    fn check_waiting(&mut self) -> Result<(), String> {
        let waiting = info_int(&mut self.control, "lock", "lock_waiters")? as u64;
        if waiting != self.setup.placed {
            return Err(format!(
                "{waiting} clients wait, not the {} placed",
                self.setup.placed
            ));
        }
        for q in 0..self.queues.len() {
            self.check_queue(q)?;
        }
        Ok(())
    }

    /// Queue `q` is as long as it should be, and its head (as much as
    /// `LOCK.QUEUE` shows) is its connections in their order.
    fn check_queue(&mut self, q: usize) -> Result<(), String> {
        let key = self.queues[q].key.clone();
        let length = queue_len(&mut self.control, &key)?;
        if length != self.queues[q].order.len() as u64 {
            return Err(format!(
                "{key} has {length} waiters, not {}",
                self.queues[q].order.len()
            ));
        }
        let entries: Vec<redis::Value> = query(
            &mut self.control,
            redis::cmd("LOCK.QUEUE")
                .arg(&key)
                .arg("COUNT")
                .arg(QUEUE_SHOWN),
        )?;
        for (entry, &i) in entries.iter().zip(&self.queues[q].order) {
            let id = client_of(entry)?;
            if id != self.ids[i] {
                return Err(format!(
                    "{key}: client {id} waits where {} should",
                    self.ids[i]
                ));
            }
        }
        Ok(())
    }

    /// RELEASE of a key nobody waits for and of each queue's key, the keys
    /// in turn round by round (reversed on odd rounds). A queue's RELEASE
    /// grants its head; the previous holder then queues again at its tail,
    /// so the queue keeps its length.
    fn time_releases(
        &mut self,
        settings: &Settings,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Vec<ReleaseRun>, String> {
        let mut conn = self.server.conn()?;
        // `None`: the key nobody waits for.
        let mut keys: Vec<Option<usize>> = Vec::new();
        if settings.release_queues.contains(&0) {
            keys.push(None);
        }
        keys.extend((0..self.queues.len()).map(Some));
        let mut runs = Vec::new();
        for round in 0..settings.release_rounds {
            let mut order = keys.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for which in order {
                let length = which.map_or(0, |q| self.queues[q].length);
                progress(&format!(
                    "{}: {} RELEASEs with {length} waiters, round {}/{}",
                    self.server.label,
                    settings.release_samples,
                    round + 1,
                    settings.release_rounds
                ));
                let mut client_us = Vec::with_capacity(settings.release_samples);
                reset_stats(&mut conn)?;
                for _ in 0..settings.release_samples {
                    let (key, token) = match which {
                        None => {
                            query::<()>(
                                &mut conn,
                                redis::cmd("LOCK.ACQUIRE")
                                    .arg(FREE_KEY)
                                    .arg(LEASE_MS)
                                    .arg("TOKEN")
                                    .arg("f"),
                            )?;
                            (FREE_KEY.to_string(), "f".to_string())
                        }
                        Some(q) => {
                            let holder = self.queues[q].holder;
                            (self.queues[q].key.clone(), self.tokens[holder].clone())
                        }
                    };
                    let mut release = redis::cmd("LOCK.RELEASE");
                    release.arg(&key).arg(&token);
                    let sent = Instant::now();
                    let released: i64 = query(&mut conn, &mut release)?;
                    client_us.push(sent.elapsed().as_secs_f64() * 1e6);
                    if released != 1 {
                        return Err(format!("LOCK.RELEASE {key} {token} replied {released}"));
                    }
                    if let Some(q) = which {
                        // The head has it; the previous holder queues again.
                        let previous = self.queues[q].holder;
                        self.granted(q)?;
                        self.join(q, previous)?;
                        self.queues[q].order.push_back(previous);
                        let length = self.queues[q].length;
                        let started = Instant::now();
                        // (Bounded far beyond a busy machine's delays: a
                        // waiter that never comes back is a fault.)
                        while queue_len(&mut conn, &key)? != length {
                            if started.elapsed() > Duration::from_secs(60) {
                                return Err(format!(
                                    "{key} did not get its waiter back within 60 s"
                                ));
                            }
                        }
                    }
                }
                let [p50, p99, p999] = latency_percentiles(&mut conn, "lock.release")?;
                let mean = mean_latency(&mut conn, "lock.release")?;
                client_us.sort_by(|a, b| a.total_cmp(b));
                runs.push(ReleaseRun {
                    queue: length,
                    round,
                    samples: settings.release_samples,
                    client_us,
                    server_p50_us: p50,
                    server_p99_us: p99,
                    server_p999_us: p999,
                    server_mean_us: mean,
                });
            }
        }
        Ok(runs)
    }

    /// Waiters disconnect: from the head of the longest queue, in queue
    /// order; from its tail, last come first; from the spread keys, one per
    /// key first. The server's CPU per waiter gone, for each.
    fn leave(
        &mut self,
        settings: &Settings,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Vec<LeaveRun>, String> {
        let longest = self
            .queues
            .iter()
            .enumerate()
            .max_by_key(|(_, q)| q.length)
            .map(|(q, _)| q);
        let mut groups: Vec<(&'static str, Vec<usize>)> = Vec::new();
        if let Some(q) = longest {
            let order: Vec<usize> = self.queues[q].order.iter().copied().collect();
            let count = (settings.leavers as usize).min(order.len() / 2);
            groups.push(("head", order[..count].to_vec()));
            groups.push((
                "tail",
                order[order.len() - count..].iter().rev().copied().collect(),
            ));
        }
        groups.push((
            "spread",
            self.spread
                .iter()
                .copied()
                .take(settings.leavers as usize)
                .collect(),
        ));
        let longest_key = longest.map(|q| self.queues[q].key.clone());
        let mut runs = Vec::new();
        for (from, group) in groups {
            if group.is_empty() {
                continue;
            }
            progress(&format!(
                "{}: {} waiters leave from the {from}",
                self.server.label,
                group.len()
            ));
            let queue_before = match &longest_key {
                Some(key) => queue_len(&mut self.control, key)?,
                None => 0,
            };
            let waiting = info_int(&mut self.control, "lock", "lock_waiters")? as u64;
            let cpu_before = self.server.cpu_ns();
            let started = Instant::now();
            for &i in &group {
                self.conns[i] = None;
            }
            self.await_count("lock", "lock_waiters", waiting - group.len() as u64)?;
            let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
            let cpu_ns = self.server.cpu_ns().saturating_sub(cpu_before);
            runs.push(LeaveRun {
                from,
                waiters: group.len() as u64,
                queue_before,
                server_cpu_us_per_waiter: cpu_ns as f64 / 1000.0 / group.len() as f64,
                wall_ms,
            });
        }
        Ok(runs)
    }
}

/// The `client` field of a `LOCK.QUEUE` entry (a map, or its flat RESP2 array).
fn client_of(entry: &redis::Value) -> Result<u64, String> {
    field_of(entry, "client").ok_or_else(|| format!("LOCK.QUEUE entry {entry:?}"))
}

/// An integer field of a map reply (or its flat RESP2 array).
fn field_of(reply: &redis::Value, name: &str) -> Option<u64> {
    let pairs: Vec<(&redis::Value, &redis::Value)> = match reply {
        redis::Value::Array(flat) => flat
            .chunks(2)
            .filter(|kv| kv.len() == 2)
            .map(|kv| (&kv[0], &kv[1]))
            .collect(),
        redis::Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs.into_iter().find_map(|(k, v)| match (k, v) {
        (redis::Value::BulkString(key), redis::Value::Int(n)) if key == name.as_bytes() => {
            Some(*n as u64)
        }
        _ => None,
    })
}

/// `LOCK.INFO key`'s `waiters` (0 when the key is free).
fn queue_len(conn: &mut redis::Connection, key: &str) -> Result<u64, String> {
    let info: redis::Value = query(conn, redis::cmd("LOCK.INFO").arg(key))?;
    if info == redis::Value::Nil {
        return Ok(0);
    }
    field_of(&info, "waiters").ok_or_else(|| format!("LOCK.INFO {key} replied {info:?}"))
}

/// One RELEASE figure, over rounds.
#[derive(Clone, Debug, Serialize)]
pub struct ReleaseRow {
    /// Waiters on the key at every RELEASE.
    pub queue: u64,
    pub samples: usize,
    /// Percentiles of every round trip; medians over rounds of the
    /// server's figures.
    pub client_p50_us: Option<f64>,
    pub client_p99_us: Option<f64>,
    pub server_p50_us: Option<f64>,
    pub server_p99_us: Option<f64>,
    pub server_p999_us: Option<f64>,
    pub server_mean_us: Option<f64>,
}

pub fn release_rows(results: &ScaleResults) -> Vec<ReleaseRow> {
    let med = |values: Vec<Option<f64>>| median(&values.into_iter().flatten().collect::<Vec<_>>());
    let mut queues: Vec<u64> = results.release.iter().map(|r| r.queue).collect();
    queues.sort_unstable();
    queues.dedup();
    queues
        .into_iter()
        .map(|queue| {
            let runs: Vec<&ReleaseRun> = results
                .release
                .iter()
                .filter(|r| r.queue == queue)
                .collect();
            let all: Vec<f64> = runs
                .iter()
                .flat_map(|r| r.client_us.iter().copied())
                .collect();
            ReleaseRow {
                queue,
                samples: runs.iter().map(|r| r.samples).sum(),
                client_p50_us: percentile(&all, 0.50),
                client_p99_us: percentile(&all, 0.99),
                server_p50_us: med(runs.iter().map(|r| r.server_p50_us).collect()),
                server_p99_us: med(runs.iter().map(|r| r.server_p99_us).collect()),
                server_p999_us: med(runs.iter().map(|r| r.server_p999_us).collect()),
                server_mean_us: med(runs.iter().map(|r| r.server_mean_us).collect()),
            }
        })
        .collect()
}

/// Memory per waiter, bytes.
#[derive(Clone, Debug, Serialize)]
pub struct WaiterMemoryRow {
    pub waiters: u64,
    /// An idle connection.
    pub per_connection: f64,
    /// On top of its connection: blocked in `BLPOP` (Redis' own blocking),
    /// and waiting in `LOCK.ACQUIRE … WAIT`.
    pub per_blpop: f64,
    pub per_wait: f64,
    /// A waiter in all: its connection and its wait.
    pub per_waiter: f64,
}

pub fn memory_row(results: &ScaleResults) -> Option<WaiterMemoryRow> {
    let setup = &results.waiters;
    let (waiters, connections) = (setup.placed, setup.connections);
    (waiters > 0 && connections > 0).then(|| {
        let per = |from: i64, to: i64, n: u64| (to - from) as f64 / n as f64;
        let per_connection = per(setup.memory_before, setup.memory_connected, connections);
        let per_wait = per(setup.memory_idle, setup.memory_waiting, waiters);
        WaiterMemoryRow {
            waiters,
            per_connection,
            per_blpop: per(setup.memory_connected, setup.memory_blpop, connections),
            per_wait,
            per_waiter: per_connection + per_wait,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_resp() {
        assert_eq!(
            resp(&["CLIENT", "ID"]),
            b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n"
        );
    }

    #[test]
    fn the_large_server_has_room_and_every_address() {
        let settings = Settings {
            rounds: 1,
            held: [10, 100],
            contenders: 8,
            keys: 64,
            duration_ms: 100,
            set_requests: 100,
            waiters: 1000,
            waiter_keys: 10,
            release_queues: vec![0, 1, 100],
            release_rounds: 1,
            release_samples: 10,
            leavers: 10,
            addresses: 3,
            settle_min_ms: 0,
            settle_max_ms: 0,
        };
        let args = large_server_args(&settings).join(" ");
        assert_eq!(
            args,
            "--maxclients 1093 --bind 127.0.0.1 127.0.0.2 127.0.0.3"
        );
        assert_eq!(
            set_command(&settings).join(" "),
            format!(
                "redis-benchmark -h 127.0.0.1 -p $PORT -c 50 -r 64 -n 100 --csv \
                 SET scale-set:__rand_int__ {} PX 30000",
                throughput::TOKEN
            )
        );
    }

    #[test]
    fn map_fields_in_either_protocol() {
        use redis::Value::{Array, BulkString, Int, Map};
        let flat = Array(vec![BulkString(b"waiters".to_vec()), Int(7)]);
        let map = Map(vec![(BulkString(b"client".to_vec()), Int(9))]);
        assert_eq!(field_of(&flat, "waiters"), Some(7));
        assert_eq!(field_of(&map, "client"), Some(9));
        assert_eq!(field_of(&flat, "client"), None);
    }
}
