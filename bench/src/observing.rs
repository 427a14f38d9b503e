//! Following a lock's holder, on a fresh server: `lock-observe` with a few
//! observers (the wake-up latency of each kind of change, next to the `WAIT`
//! hand-off of the waiting section) and with a thousand on one key (each
//! change wakes each once; what the storm costs the command and the server).

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::contention::run_json;
use crate::observe::ObserveSummary;
use crate::server::{flushall, Server};

/// One `lock-observe` run: a fleet of observers on one key.
#[derive(Clone, Debug, Serialize)]
pub struct Fleet {
    pub observers: usize,
    pub rounds: usize,
    /// The lease that runs out in the expiry change (the holder's is cut
    /// to it once the whole fleet waits again).
    pub ttl_ms: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// In this order; the last is the large one.
    pub fleets: Vec<Fleet>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ObserveResults {
    pub server: String,
    pub runs: Vec<ObserveSummary>,
    /// Wall time of the section on this server, seconds.
    pub elapsed_s: f64,
}

/// The `lock-observe` command line of one fleet (port shown as `$PORT`).
pub fn observe_command(fleet: &Fleet) -> Vec<String> {
    let mut argv: Vec<String> = ["lock-observe", "--port", "$PORT"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for (flag, value) in [
        ("--observers", fleet.observers as u64),
        ("--rounds", fleet.rounds as u64),
        ("--ttl-ms", fleet.ttl_ms),
    ] {
        argv.push(flag.to_string());
        argv.push(value.to_string());
    }
    argv.push("--json".to_string());
    argv
}

pub fn run(
    server: &Server,
    lock_observe: &Path,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<ObserveResults, String> {
    let mut conn = server.conn()?;
    let started = Instant::now();
    let mut runs = Vec::new();
    for fleet in &settings.fleets {
        progress(&format!(
            "{}: LOCK.OBSERVE, {} observers on one key, {} rounds of 5 changes",
            server.label, fleet.observers, fleet.rounds
        ));
        flushall(&mut conn)?;
        runs.push(run_json(
            lock_observe,
            &observe_command(fleet),
            server.port(),
        )?);
    }
    flushall(&mut conn)?;
    Ok(ObserveResults {
        server: server.label.clone(),
        runs,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_carries_the_fleet() {
        let fleet = Fleet {
            observers: 1000,
            rounds: 20,
            ttl_ms: 300,
        };
        assert_eq!(
            observe_command(&fleet).join(" "),
            "lock-observe --port $PORT --observers 1000 --rounds 20 --ttl-ms 300 --json"
        );
    }
}
