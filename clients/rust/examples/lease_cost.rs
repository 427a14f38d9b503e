//! What keeping many holds alive costs: this process takes `--holds` locks
//! (1,000 by default) through one `Locks`, keeps them for `--seconds` (30)
//! with a ttl of `--ttl-ms` (10,000), then reports, as one line of JSON:
//!
//! - `threads`: this process's OS threads (`/proc/self/status`);
//! - `connections`: the server's clients (`INFO clients`), less this
//!   program's own admin connection;
//! - `calls_per_sec`: the server's command calls per second while the holds
//!   were kept (`INFO commandstats` deltas, less the admin's `INFO`s), and
//!   `calls` per command;
//! - `server_cpu_ms_per_sec` (`INFO cpu`) and `client_cpu_ms_per_sec`
//!   (`/proc/self/stat`): CPU time per second of the window;
//! - `lost`: holds lost meanwhile (0 expected).
//!
//! `--mode watchdog` is a watchdog per hold (`LOCK.EXTEND` every ttl/3, the
//! client before sessions), `--mode session` one session (one `LOCK.LEASE`
//! and one keepalive for all of them). Needs a server with the module:
//!
//! ```text
//! redis-server --port 6399 --save '' --loadmodule target/release/libredis_lock.so &
//! cargo run --release -p redis-lock-client --example lease_cost -- --url redis://127.0.0.1:6399/ --mode watchdog
//! cargo run --release -p redis-lock-client --example lease_cost -- --url redis://127.0.0.1:6399/ --mode session
//! ```
//!
//! Linux only (it reads `/proc/self`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis_lock_client::redis::{self, aio::MultiplexedConnection};
use redis_lock_client::{Guard, KeepAlive, LockOptions, Locks};

struct Args {
    url: String,
    mode: KeepAlive,
    holds: usize,
    seconds: u64,
    ttl: Duration,
}

fn usage() -> ! {
    eprintln!(
        "usage: lease_cost --url redis://HOST:PORT/ --mode watchdog|session \
         [--holds 1000] [--seconds 30] [--ttl-ms 10000]"
    );
    std::process::exit(64)
}

fn args() -> Args {
    let mut args = Args {
        url: "redis://127.0.0.1:6379/".into(),
        mode: KeepAlive::Session,
        holds: 1000,
        seconds: 30,
        ttl: Duration::from_secs(10),
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given.next().unwrap_or_else(|| usage());
        let number = || value.parse::<u64>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--url" => args.url = value.clone(),
            "--mode" => {
                args.mode = match value.as_str() {
                    "watchdog" => KeepAlive::Watchdog,
                    "session" => KeepAlive::Session,
                    _ => usage(),
                }
            }
            "--holds" => args.holds = number() as usize,
            "--seconds" => args.seconds = number(),
            "--ttl-ms" => args.ttl = Duration::from_millis(number()),
            _ => usage(),
        }
    }
    args
}

/// `field:value` lines of `INFO section`.
async fn info(admin: &mut MultiplexedConnection, section: &str) -> BTreeMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(admin)
        .await
        .expect("INFO");
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Calls per command (`cmdstat_<name>:calls=N,…`).
async fn command_calls(admin: &mut MultiplexedConnection) -> BTreeMap<String, u64> {
    info(admin, "commandstats")
        .await
        .into_iter()
        .filter_map(|(name, stats)| {
            let name = name.strip_prefix("cmdstat_")?.to_string();
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name, calls))
        })
        .collect()
}

/// The server's CPU time so far, in ms.
async fn server_cpu_ms(admin: &mut MultiplexedConnection) -> f64 {
    let cpu = info(admin, "cpu").await;
    let seconds = |name: &str| {
        cpu.get(name)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (seconds("used_cpu_sys") + seconds("used_cpu_user")) * 1000.0
}

/// This process's CPU time so far, in ms (`/proc/self/stat` utime and
/// stime, in USER_HZ = 100 ticks a second on Linux).
fn client_cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command name (which is in parentheses).
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |at: usize| {
        fields
            .get(at)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    (ticks(11) + ticks(12)) * 10.0
}

/// This process's OS threads (`Threads:` of `/proc/self/status`).
fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let args = args();
    let client = redis::Client::open(args.url.as_str()).expect("a redis:// URL");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("the server is reachable");
    let locks = Locks::connect(client.clone())
        .await
        .expect("Locks::connect")
        .with_options(LockOptions::default().keepalive(args.mode));

    let mut guards: Vec<Guard> = Vec::with_capacity(args.holds);
    for i in 0..args.holds {
        let guard = locks
            .lock(format!("lease-cost:{i}"))
            .ttl(args.ttl)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("lease-cost:{i} is free: {e}"));
        guards.push(guard);
    }

    let calls_before = command_calls(&mut admin).await;
    let server_before = server_cpu_ms(&mut admin).await;
    let client_before = client_cpu_ms();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let window = started.elapsed().as_secs_f64();
    let client_cpu = client_cpu_ms() - client_before;
    let server_cpu = server_cpu_ms(&mut admin).await - server_before;
    let calls_after = command_calls(&mut admin).await;
    let threads = threads();
    let clients: u64 = info(&mut admin, "clients")
        .await
        .get("connected_clients")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let lost = guards.iter().filter(|g| g.is_lost()).count();

    // The admin's own INFOs are not the holds' cost.
    let calls: BTreeMap<String, u64> = calls_after
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(name, after)| {
            (
                name.clone(),
                after - calls_before.get(name).copied().unwrap_or(0),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let total: u64 = calls.values().sum();
    let mode = match args.mode {
        KeepAlive::Watchdog => "watchdog",
        _ => "session",
    };
    let per_command: Vec<String> = calls.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    println!(
        "{{\"mode\": \"{mode}\", \"holds\": {}, \"ttl_ms\": {}, \"seconds\": {window:.1}, \
         \"threads\": {threads}, \"connections\": {}, \"calls\": {{{}}}, \
         \"calls_per_sec\": {:.2}, \"server_cpu_ms_per_sec\": {:.2}, \
         \"client_cpu_ms_per_sec\": {:.2}, \"lost\": {lost}}}",
        args.holds,
        args.ttl.as_millis(),
        clients.saturating_sub(1),
        per_command.join(", "),
        total as f64 / window,
        server_cpu / window,
        client_cpu / window,
    );

    for guard in guards {
        let _ = guard.release().await;
    }
}
