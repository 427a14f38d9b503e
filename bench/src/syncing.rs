//! Grants confirmed on a replica (issue 26): `lock-sync` against a master
//! with one replica attached (both fresh, the same binary, on this
//! machine), `LOCK.ACQUIRE … SYNC 1 t` against the recipe users write today,
//! `LOCK.ACQUIRE` then `WAIT 1 t` on the same connection, with
//! `LOCK.ACQUIRE` alone beside them (what waiting costs). One client, then
//! many, one request at a time each; the modes alternate run by run
//! (reversed on odd rounds), with the master's and the replica's main-thread
//! CPU read around each run.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::contention::run_json;
use crate::server::{flushall, query, Server};
use crate::stats::median;
use crate::sync_load::{Mode, SyncSummary};

/// How long the warm-up grant may wait for the replica, and how often it
/// is tried (a busy machine can keep the replica from acknowledging in
/// time: the runs then start without a warm-up rather than fail).
const WARM_UP_TIMEOUT_MS: u64 = 10_000;
const WARM_UP_ATTEMPTS: usize = 3;

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub rounds: usize,
    /// Client counts, each run with every mode.
    pub clients: Vec<usize>,
    pub duration_ms: u64,
    /// `numreplicas` and `timeout-ms` of `SYNC` and `WAIT`.
    pub replicas: u64,
    pub timeout_ms: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub server: String,
    pub round: usize,
    pub summary: SyncSummary,
    /// Main-thread CPU per request, µs, of the master and of the replica.
    pub master_cpu_us_per_op: f64,
    pub replica_cpu_us_per_op: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SyncResults {
    pub server: String,
    pub runs: Vec<Run>,
    /// Wall time of the section on this server, seconds.
    pub elapsed_s: f64,
}

/// The `lock-sync` command line of one run (port shown as `$PORT`).
pub fn sync_command(settings: &Settings, mode: Mode, clients: usize) -> Vec<String> {
    [
        "lock-sync",
        "--port",
        "$PORT",
        "--mode",
        mode.name(),
        "--clients",
        &clients.to_string(),
        "--duration-ms",
        &settings.duration_ms.to_string(),
        "--replicas",
        &settings.replicas.to_string(),
        "--timeout-ms",
        &settings.timeout_ms.to_string(),
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Every run on `master`, whose replica is `replica` (attached and synced).
pub fn run(
    master: &Server,
    replica: &Server,
    lock_sync: &Path,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<SyncResults, String> {
    let mut conn = master.conn()?;
    // One confirmed grant before the runs: right after the replica's first
    // sync, the first acknowledgement can take about a second (0.94 s on
    // Redis 7.0 in a quick run: the replica's own periodic one), which is
    // not what the runs measure.
    for attempt in 1..=WARM_UP_ATTEMPTS {
        let warm_up = query::<redis::Value>(
            &mut conn,
            redis::cmd("LOCK.ACQUIRE")
                .arg(format!("sync:warm-up:{attempt}"))
                .arg(1000)
                .arg("SYNC")
                .arg(settings.replicas)
                .arg(WARM_UP_TIMEOUT_MS),
        );
        match warm_up {
            Ok(_) => break,
            Err(e) => progress(&format!(
                "{}: the warm-up grant was not acknowledged (attempt {attempt} of \
                 {WARM_UP_ATTEMPTS}): {e}",
                master.label
            )),
        }
    }
    let started = Instant::now();
    let mut runs = Vec::new();
    for round in 0..settings.rounds {
        for &clients in &settings.clients {
            let mut order = Mode::ALL.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for mode in order {
                progress(&format!(
                    "{} + replica: round {}/{} {clients} client(s) {}",
                    master.label,
                    round + 1,
                    settings.rounds,
                    mode.name()
                ));
                flushall(&mut conn)?;
                let (master_before, replica_before) = (master.cpu_ns(), replica.cpu_ns());
                let summary: SyncSummary = run_json(
                    lock_sync,
                    &sync_command(settings, mode, clients),
                    master.port(),
                )?;
                let per_op = |after: u64, before: u64| {
                    after.saturating_sub(before) as f64 / 1000.0 / summary.requests.max(1) as f64
                };
                runs.push(Run {
                    server: master.label.clone(),
                    round,
                    master_cpu_us_per_op: per_op(master.cpu_ns(), master_before),
                    replica_cpu_us_per_op: per_op(replica.cpu_ns(), replica_before),
                    summary,
                });
            }
        }
    }
    flushall(&mut conn)?;
    Ok(SyncResults {
        server: master.label.clone(),
        runs,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// Medians over rounds of one mode at one client count.
#[derive(Clone, Debug, Serialize)]
pub struct SyncRow {
    pub server: String,
    pub clients: usize,
    pub mode: Mode,
    pub rps: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub master_cpu_us_per_op: f64,
    pub replica_cpu_us_per_op: f64,
    /// Grants the replica did not acknowledge in time, over the rounds.
    pub short: u64,
}

/// `SYNC` against `LOCK.ACQUIRE` + `WAIT` at one client count: medians over
/// rounds of the ratios within each round, each the module's side over the
/// recipe's (higher is better for `SYNC`): throughput, and the recipe's
/// latency over `SYNC`'s, and the recipe's master CPU per request over
/// `SYNC`'s.
#[derive(Clone, Debug, Serialize)]
pub struct SyncRatioRow {
    pub server: String,
    pub clients: usize,
    pub throughput_ratio: Option<f64>,
    pub p50_ratio: Option<f64>,
    pub p99_ratio: Option<f64>,
    pub cpu_ratio: Option<f64>,
}

pub fn rows(results: &SyncResults, settings: &Settings) -> (Vec<SyncRow>, Vec<SyncRatioRow>) {
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &clients in &settings.clients {
        let runs = |mode: Mode| -> Vec<&Run> {
            results
                .runs
                .iter()
                .filter(|r| r.summary.clients == clients && r.summary.mode == mode)
                .collect()
        };
        for mode in Mode::ALL {
            let runs = runs(mode);
            if runs.is_empty() {
                continue;
            }
            let of = |f: fn(&Run) -> f64| median(&runs.iter().map(|r| f(r)).collect::<Vec<_>>());
            let of_opt = |f: fn(&Run) -> Option<f64>| {
                median(&runs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            rows.push(SyncRow {
                server: results.server.clone(),
                clients,
                mode,
                rps: of(|r| r.summary.rps).unwrap_or(f64::NAN),
                p50_us: of_opt(|r| r.summary.latency.p50_us),
                p99_us: of_opt(|r| r.summary.latency.p99_us),
                master_cpu_us_per_op: of(|r| r.master_cpu_us_per_op).unwrap_or(f64::NAN),
                replica_cpu_us_per_op: of(|r| r.replica_cpu_us_per_op).unwrap_or(f64::NAN),
                short: runs.iter().map(|r| r.summary.short).sum(),
            });
        }
        let (sync, recipe) = (runs(Mode::Sync), runs(Mode::AcquireWait));
        let paired = |value: fn(&Run) -> Option<f64>, recipe_over_sync: bool| {
            let ratios: Vec<f64> = sync
                .iter()
                .filter_map(|s| {
                    let w = recipe.iter().find(|w| w.round == s.round)?;
                    let (s, w) = (value(s)?, value(w)?);
                    Some(if recipe_over_sync { w / s } else { s / w })
                })
                .collect();
            median(&ratios)
        };
        if !sync.is_empty() && !recipe.is_empty() {
            ratios.push(SyncRatioRow {
                server: results.server.clone(),
                clients,
                throughput_ratio: paired(|r| Some(r.summary.rps), false),
                p50_ratio: paired(|r| r.summary.latency.p50_us, true),
                p99_ratio: paired(|r| r.summary.latency.p99_us, true),
                cpu_ratio: paired(|r| Some(r.master_cpu_us_per_op), true),
            });
        }
    }
    (rows, ratios)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Spread;

    fn run(round: usize, clients: usize, mode: Mode, rps: f64, p50_us: f64) -> Run {
        Run {
            server: "s".into(),
            round,
            summary: SyncSummary {
                mode,
                clients,
                replicas: 1,
                timeout_ms: 1000,
                elapsed_s: 1.0,
                requests: rps as u64,
                rps,
                latency: Spread {
                    p50_us: Some(p50_us),
                    p99_us: Some(p50_us * 2.0),
                    ..Spread::default()
                },
                short: 0,
                samples_us: Vec::new(),
            },
            master_cpu_us_per_op: 10.0,
            replica_cpu_us_per_op: 1.0,
        }
    }

    #[test]
    fn ratios_are_paired_within_each_round() {
        let settings = Settings {
            rounds: 2,
            clients: vec![50],
            duration_ms: 1000,
            replicas: 1,
            timeout_ms: 1000,
        };
        let results = SyncResults {
            server: "s".into(),
            runs: vec![
                run(0, 50, Mode::Sync, 900.0, 2000.0),
                run(0, 50, Mode::AcquireWait, 1000.0, 1000.0),
                run(1, 50, Mode::AcquireWait, 3000.0, 3000.0),
                run(1, 50, Mode::Sync, 3000.0, 1000.0),
                run(1, 50, Mode::Acquire, 9000.0, 500.0),
            ],
            elapsed_s: 2.0,
        };
        let (rows, ratios) = rows(&results, &settings);
        let modes: Vec<Mode> = rows.iter().map(|r| r.mode).collect();
        assert_eq!(modes, Mode::ALL);
        // Medians over rounds: SYNC's rps (900, 3000), p50 (2000, 1000).
        assert_eq!(rows[0].rps, 1950.0);
        assert_eq!(rows[0].p50_us, Some(1500.0));
        // Within each round: throughput 0.9 and 1.0, latency 0.5 and 3.0.
        let ratio = &ratios[0];
        assert_eq!(ratio.throughput_ratio, Some(0.95));
        assert_eq!(ratio.p50_ratio, Some(1.75));
        assert_eq!(ratio.cpu_ratio, Some(1.0));
    }

    #[test]
    fn the_command_carries_the_run() {
        let settings = Settings {
            rounds: 3,
            clients: vec![1, 50],
            duration_ms: 3000,
            replicas: 1,
            timeout_ms: 1000,
        };
        assert_eq!(
            sync_command(&settings, Mode::AcquireWait, 50).join(" "),
            "lock-sync --port $PORT --mode acquire-wait --clients 50 --duration-ms 3000 \
             --replicas 1 --timeout-ms 1000 --json"
        );
    }
}
