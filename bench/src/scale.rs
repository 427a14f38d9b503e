//! Scale: does `LOCK.ACQUIRE` slow down when the server holds many locks?
//! Two servers of the same binary run side by side, one holding few locks and
//! one holding many, and the same uncontended workload alternates between
//! them run by run.

use std::path::Path;

use serde::Serialize;

use crate::contention::run_load;
use crate::load::{LoadSummary, Strategy};
use crate::server::{dbsize, info_field, pipelined, query, Server};

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
}

#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub server: String,
    pub held: u64,
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
    [
        "redis-benchmark",
        "-h",
        "127.0.0.1",
        "-p",
        "$PORT",
        "-c",
        "50",
        "-r",
        &settings.keys.to_string(),
        "-n",
        &settings.set_requests.to_string(),
        "--csv",
        "SET",
        "scale-set:__rand_int__",
        crate::throughput::TOKEN,
        "PX",
        "30000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run_set_reference(settings: &Settings, port: u16) -> Result<(), String> {
    let argv = set_command(settings);
    let output = std::process::Command::new(&argv[0])
        .args(argv[1..].iter().map(|a| {
            if a == "$PORT" {
                port.to_string()
            } else {
                a.clone()
            }
        }))
        .output()
        .map_err(|e| format!("run redis-benchmark: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "redis-benchmark failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Hold `count` locks (`held:<n>`, 1 hour leases, server-drawn tokens).
fn hold_locks(conn: &mut redis::Connection, count: u64) -> Result<(), String> {
    pipelined(
        conn,
        (0..count).map(|i| {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(format!("held:{i}")).arg(3_600_000);
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

pub fn run(
    small: &Server,
    large: &Server,
    lock_load: &Path,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Run>, String> {
    let servers = [(small, settings.held[0]), (large, settings.held[1])];
    for (server, held) in servers {
        progress(&format!("{}: holding {held} locks", server.label));
        let mut conn = server.conn()?;
        hold_locks(&mut conn, held)?;
        let keys = dbsize(&mut conn)?;
        if keys != held {
            return Err(format!("expected {held} held locks, found {keys} keys"));
        }
    }
    let argv = load_command(settings);
    let mut runs = Vec::new();
    for round in 0..settings.rounds {
        let mut order = servers.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for (server, held) in order {
            progress(&format!(
                "{} with {held} held locks, round {}/{}",
                server.label,
                round + 1,
                settings.rounds
            ));
            let mut conn = server.conn()?;
            query::<()>(&mut conn, redis::cmd("CONFIG").arg("RESETSTAT"))?;
            let summary = run_load(lock_load, &argv, server.port())?;
            let [p50, p99, p999] = latency_percentiles(&mut conn, "lock.acquire")?;
            query::<()>(&mut conn, redis::cmd("CONFIG").arg("RESETSTAT"))?;
            run_set_reference(settings, server.port())?;
            let [set_p50, set_p99, set_p999] = latency_percentiles(&mut conn, "set")?;
            runs.push(Run {
                server: server.label.clone(),
                held,
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
    Ok(runs)
}
