//! Full lock cycles under contention: `lock-load` against one server, every
//! strategy interleaved run by run.

use std::path::Path;

use serde::Serialize;

use crate::load::{LoadSummary, Strategy};
use crate::server::{flushall, run_against, Server};

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub rounds: usize,
    pub contenders: Vec<usize>,
    /// Key counts: 1 is a single hot key.
    pub keys: Vec<usize>,
    pub duration_ms: u64,
    pub hold_ms: u64,
    pub retry_min_ms: u64,
    pub retry_max_ms: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub server: String,
    pub round: usize,
    pub summary: LoadSummary,
    /// Server main-thread CPU per completed cycle, µs.
    pub server_cpu_us_per_cycle: f64,
}

/// The `lock-load` command line for one run (port shown as `$PORT`).
pub fn load_command(
    settings: &Settings,
    strategy: Strategy,
    contenders: usize,
    keys: usize,
) -> Vec<String> {
    [
        "lock-load",
        "--port",
        "$PORT",
        "--strategy",
        strategy.name(),
        "--contenders",
        &contenders.to_string(),
        "--keys",
        &keys.to_string(),
        "--duration-ms",
        &settings.duration_ms.to_string(),
        "--hold-ms",
        &settings.hold_ms.to_string(),
        "--retry-min-ms",
        &settings.retry_min_ms.to_string(),
        "--retry-max-ms",
        &settings.retry_max_ms.to_string(),
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Run `lock-load` (`argv[0]` is replaced by `binary`) against `port`.
pub fn run_load(binary: &Path, argv: &[String], port: u16) -> Result<LoadSummary, String> {
    run_json(binary, argv, port)
}

/// Run one of the harness' tools (`argv[0]` is replaced by `binary`, `$PORT`
/// by `port`) and parse the one JSON object it prints.
pub fn run_json<T: serde::de::DeserializeOwned>(
    binary: &Path,
    argv: &[String],
    port: u16,
) -> Result<T, String> {
    let stdout = run_against(binary, argv, port)?;
    serde_json::from_str(&stdout).map_err(|e| format!("{} output: {e}", binary.display()))
}

pub fn run(
    server: &Server,
    lock_load: &Path,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Run>, String> {
    let mut conn = server.conn()?;
    let mut runs = Vec::new();
    for &keys in &settings.keys {
        for &contenders in &settings.contenders {
            for round in 0..settings.rounds {
                let mut order = Strategy::ALL.to_vec();
                if round % 2 == 1 {
                    order.reverse();
                }
                for strategy in order {
                    progress(&format!(
                        "{} keys={keys} contenders={contenders} round {}/{} {}",
                        server.label,
                        round + 1,
                        settings.rounds,
                        strategy.name()
                    ));
                    flushall(&mut conn)?;
                    let argv = load_command(settings, strategy, contenders, keys);
                    let cpu_before = server.cpu_ns();
                    let summary = run_load(lock_load, &argv, server.port())?;
                    let cpu_ns = server.cpu_ns().saturating_sub(cpu_before);
                    runs.push(Run {
                        server: server.label.clone(),
                        round,
                        server_cpu_us_per_cycle: cpu_ns as f64
                            / 1000.0
                            / summary.cycles.max(1) as f64,
                        summary,
                    });
                }
            }
        }
    }
    flushall(&mut conn)?;
    Ok(runs)
}
