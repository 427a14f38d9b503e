//! Waiting for a lock, on a fresh server: the handoff latency on release and
//! on expiry for `WAIT`, `SET NX PX` polling, python-redis-lock's BLPOP
//! signal and a `WAIT` writer behind readers (`lock-handoff`), the `WAIT`
//! hand-off when many keys expire within the same second (`lock-handoff
//! --scenario mass-expiry`), then fairness over one long contended run per
//! strategy (`lock-load`), unless left out.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::contention::{self, run_json};
use crate::handoff::{HandoffSummary, Recipe, Scenario};
use crate::load::{LoadSummary, Strategy};
use crate::server::{flushall, Server};

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Handoffs per recipe on release, and how long (at most) the holder
    /// keeps the lock once the waiter waits.
    pub release_rounds: usize,
    pub hold_max_ms: u64,
    /// Handoffs per recipe on expiry, and the holder's lease.
    pub expiry_rounds: usize,
    pub expiry_ttl_ms: u64,
    /// Mass expiry: rounds of `mass_keys` leases running out within
    /// `mass_spread_ms`, a `WAIT` waiter on each, the first `mass_lead_ms`
    /// after the holders took them.
    pub mass_rounds: usize,
    pub mass_keys: usize,
    pub mass_spread_ms: u64,
    pub mass_lead_ms: u64,
    pub retry_min_ms: u64,
    pub retry_max_ms: u64,
    /// Fairness: contenders on one key, for how long, holding how long.
    pub fairness_contenders: usize,
    pub fairness_duration_ms: u64,
    pub fairness_hold_ms: u64,
}

/// The fairness runs, one per strategy, in this order.
pub const FAIRNESS_STRATEGIES: [Strategy; 3] = [
    Strategy::NativeWait,
    Strategy::NativePoll,
    Strategy::LuaPoll,
];

#[derive(Clone, Debug, Serialize)]
pub struct FairnessRun {
    pub summary: LoadSummary,
    /// Server main-thread CPU per completed cycle, µs.
    pub server_cpu_us_per_cycle: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct WaitingResults {
    pub server: String,
    pub release: HandoffSummary,
    pub expiry: HandoffSummary,
    pub mass_expiry: HandoffSummary,
    pub fairness: Vec<FairnessRun>,
    /// Wall time of each part, seconds.
    pub release_s: f64,
    pub expiry_s: f64,
    pub mass_expiry_s: f64,
    pub fairness_s: f64,
}

/// The `lock-handoff` command line of one scenario (port shown as `$PORT`).
pub fn handoff_command(settings: &Settings, scenario: Scenario) -> Vec<String> {
    let recipes: Vec<&str> = match scenario {
        Scenario::MassExpiry => vec![Recipe::NativeWait.name()],
        _ => Recipe::ALL.iter().map(|r| r.name()).collect(),
    };
    let mut argv: Vec<String> = [
        "lock-handoff",
        "--port",
        "$PORT",
        "--scenario",
        scenario.name(),
        "--recipes",
        &recipes.join(","),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let numbers: Vec<(&str, u64)> = match scenario {
        Scenario::Release => vec![
            ("--rounds", settings.release_rounds as u64),
            ("--hold-max-ms", settings.hold_max_ms),
        ],
        Scenario::Expiry => vec![
            ("--rounds", settings.expiry_rounds as u64),
            ("--ttl-ms", settings.expiry_ttl_ms),
        ],
        // The waiters' own leases outlast the round (the keys are then
        // deleted); nobody polls.
        Scenario::MassExpiry => vec![
            ("--rounds", settings.mass_rounds as u64),
            ("--keys", settings.mass_keys as u64),
            ("--spread-ms", settings.mass_spread_ms),
            ("--lead-ms", settings.mass_lead_ms),
            ("--ttl-ms", 60_000),
        ],
    };
    let retry = match scenario {
        Scenario::MassExpiry => vec![],
        _ => vec![
            ("--retry-min-ms", settings.retry_min_ms),
            ("--retry-max-ms", settings.retry_max_ms),
        ],
    };
    for (flag, value) in numbers.into_iter().chain(retry) {
        argv.push(flag.to_string());
        argv.push(value.to_string());
    }
    argv.push("--json".to_string());
    argv
}

/// The `lock-load` command line of one fairness run.
pub fn fairness_command(settings: &Settings, strategy: Strategy) -> Vec<String> {
    let load = contention::Settings {
        rounds: 1,
        contenders: vec![settings.fairness_contenders],
        keys: vec![1],
        duration_ms: settings.fairness_duration_ms,
        hold_ms: settings.fairness_hold_ms,
        retry_min_ms: settings.retry_min_ms,
        retry_max_ms: settings.retry_max_ms,
    };
    contention::load_command(&load, strategy, settings.fairness_contenders, 1)
}

/// The handoffs, then (`with_fairness`) the fairness runs.
pub fn run(
    server: &Server,
    lock_handoff: &Path,
    lock_load: &Path,
    settings: &Settings,
    with_fairness: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<WaitingResults, String> {
    let mut conn = server.conn()?;
    let mut handoff = |scenario: Scenario, rounds: usize| {
        progress(&match scenario {
            Scenario::MassExpiry => format!(
                "{}: handoff on expiry of {} keys within {} ms, {rounds} rounds",
                server.label, settings.mass_keys, settings.mass_spread_ms
            ),
            _ => format!(
                "{}: handoff on {}, {rounds} rounds of {}",
                server.label,
                scenario.name(),
                Recipe::ALL.map(|r| r.name()).join(", ")
            ),
        });
        flushall(&mut conn)?;
        let started = Instant::now();
        let summary: HandoffSummary = run_json(
            lock_handoff,
            &handoff_command(settings, scenario),
            server.port(),
        )?;
        Ok::<_, String>((summary, started.elapsed().as_secs_f64()))
    };
    let (release, release_s) = handoff(Scenario::Release, settings.release_rounds)?;
    let (expiry, expiry_s) = handoff(Scenario::Expiry, settings.expiry_rounds)?;
    let (mass_expiry, mass_expiry_s) = handoff(Scenario::MassExpiry, settings.mass_rounds)?;
    let started = Instant::now();
    let mut fairness = Vec::new();
    let strategies = if with_fairness {
        &FAIRNESS_STRATEGIES[..]
    } else {
        &[]
    };
    for &strategy in strategies {
        progress(&format!(
            "{}: fairness, {} contenders on one key for {:.0} s, {}",
            server.label,
            settings.fairness_contenders,
            settings.fairness_duration_ms as f64 / 1000.0,
            strategy.name()
        ));
        flushall(&mut conn)?;
        let cpu_before = server.cpu_ns();
        let summary: LoadSummary = run_json(
            lock_load,
            &fairness_command(settings, strategy),
            server.port(),
        )?;
        let cpu_ns = server.cpu_ns().saturating_sub(cpu_before);
        fairness.push(FairnessRun {
            server_cpu_us_per_cycle: cpu_ns as f64 / 1000.0 / summary.cycles.max(1) as f64,
            summary,
        });
    }
    let fairness_s = started.elapsed().as_secs_f64();
    flushall(&mut conn)?;
    Ok(WaitingResults {
        server: server.label.clone(),
        release,
        expiry,
        mass_expiry,
        fairness,
        release_s,
        expiry_s,
        mass_expiry_s,
        fairness_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            release_rounds: 7,
            hold_max_ms: 250,
            expiry_rounds: 5,
            expiry_ttl_ms: 100,
            mass_rounds: 2,
            mass_keys: 10_000,
            mass_spread_ms: 1000,
            mass_lead_ms: 3000,
            retry_min_ms: 50,
            retry_max_ms: 250,
            fairness_contenders: 64,
            fairness_duration_ms: 20_000,
            fairness_hold_ms: 1,
        }
    }

    #[test]
    fn commands_carry_the_settings() {
        let release = handoff_command(&settings(), Scenario::Release).join(" ");
        assert!(release.starts_with("lock-handoff --port $PORT --scenario release"));
        assert!(release
            .contains("--recipes native-wait,setnx-poll,blpop-signal,readers-wait,multi-wait"));
        assert!(release.contains("--rounds 7 --hold-max-ms 250"));
        assert!(release.ends_with("--retry-min-ms 50 --retry-max-ms 250 --json"));
        let expiry = handoff_command(&settings(), Scenario::Expiry).join(" ");
        assert!(expiry.contains("--scenario expiry"));
        assert!(expiry.contains("--rounds 5 --ttl-ms 100"));
        let mass = handoff_command(&settings(), Scenario::MassExpiry).join(" ");
        assert!(mass.contains("--scenario mass-expiry --recipes native-wait --rounds 2"));
        assert!(mass.contains("--keys 10000 --spread-ms 1000 --lead-ms 3000"));
        assert!(mass.ends_with("--ttl-ms 60000 --json"), "{mass}");
        let fair = fairness_command(&settings(), Strategy::NativeWait).join(" ");
        assert!(fair.contains("--strategy native-wait --contenders 64 --keys 1"));
        assert!(fair.contains("--duration-ms 20000 --hold-ms 1"));
    }
}
