//! The load behind `lock-sync`: grants that a client wants on a replica
//! before it goes on, taken one of three ways ([`Mode`]), by clients each on
//! a connection of its own, one request at a time (pipeline 1), for a
//! bounded time.
//!
//! Every request takes a key nobody took before (`<prefix><client>:<n>`),
//! so every one is a grant whose effect goes to the replica, and the
//! command's wait has something to wait for. A sample runs from just before
//! the `LOCK.ACQUIRE` is sent to the reply that tells the client its grant
//! is on the replicas: the `LOCK.ACQUIRE … SYNC` reply, or the `WAIT` reply
//! of the two-command recipe (one monotonic clock). A grant the replicas did
//! not acknowledge in time (`NOSYNC`, or `WAIT` replying fewer replicas) is
//! counted as `short`, and its time is a sample like any other.

use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use tokio::time::{Duration, Instant};

use crate::handoff::{connect, micros};
use crate::stats::Spread;

/// How a client learns that its grant is on the replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// `LOCK.ACQUIRE key ttl SYNC n t`: one command, answered once `n`
    /// replicas hold the grant (or `NOSYNC`, the grant undone).
    Sync,
    /// `LOCK.ACQUIRE key ttl`, then `WAIT n t` on the same connection: the
    /// recipe users write today (two round trips; a grant `WAIT` finds short
    /// stays granted).
    AcquireWait,
    /// `LOCK.ACQUIRE key ttl` alone: nothing waits for the replica (the
    /// floor: what waiting costs).
    Acquire,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Sync, Mode::AcquireWait, Mode::Acquire];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::AcquireWait => "acquire-wait",
            Mode::Acquire => "acquire",
        }
    }

    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }
}

#[derive(Clone, Debug)]
pub struct SyncConfig {
    pub url: String,
    pub mode: Mode,
    /// Clients, each on a connection of its own.
    pub clients: usize,
    pub duration_ms: u64,
    /// `numreplicas` of `SYNC` and `WAIT`.
    pub replicas: u64,
    /// `timeout-ms` of `SYNC` and `WAIT`.
    pub timeout_ms: u64,
    /// The grants' lease: longer than the run, so that none runs out in it.
    pub ttl_ms: u64,
    pub key_prefix: String,
}

/// What one `lock-sync` run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SyncSummary {
    pub mode: Mode,
    pub clients: usize,
    pub replicas: u64,
    pub timeout_ms: u64,
    pub elapsed_s: f64,
    /// Requests answered within the run (each a grant).
    pub requests: u64,
    pub rps: f64,
    /// Send of the `LOCK.ACQUIRE` to the reply that confirms the replicas
    /// (`SYNC`'s, or `WAIT`'s), µs.
    pub latency: Spread,
    /// Grants the replicas did not acknowledge within the timeout:
    /// `NOSYNC` replies, or `WAIT` replies below `replicas`.
    pub short: u64,
    /// Every sample, µs (the results document keeps their quantiles).
    pub samples_us: Vec<f64>,
}

/// What one client counted.
#[derive(Default)]
struct Tally {
    samples_us: Vec<f64>,
    short: u64,
}

/// Run the clients until the deadline and summarise.
pub async fn run(config: SyncConfig) -> Result<SyncSummary, String> {
    if config.clients == 0 || config.duration_ms == 0 {
        return Err("at least one client and a duration".into());
    }
    let client = redis::Client::open(config.url.as_str()).map_err(|e| e.to_string())?;
    let mut connections = Vec::with_capacity(config.clients);
    for _ in 0..config.clients {
        connections.push(connect(&client).await?);
    }
    let started = Instant::now();
    let deadline = started + Duration::from_millis(config.duration_ms);
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(index, conn)| {
            let config = config.clone();
            tokio::spawn(async move { client_loop(conn, &config, index, deadline).await })
        })
        .collect();
    let mut samples_us = Vec::new();
    let mut short = 0;
    for task in tasks {
        let tally = task.await.map_err(|e| e.to_string())??;
        samples_us.extend(tally.samples_us);
        short += tally.short;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let requests = samples_us.len() as u64;
    Ok(SyncSummary {
        mode: config.mode,
        clients: config.clients,
        replicas: config.replicas,
        timeout_ms: config.timeout_ms,
        elapsed_s,
        requests,
        rps: requests as f64 / elapsed_s.max(1e-9),
        latency: Spread::of(&samples_us),
        short,
        samples_us,
    })
}

/// One client: fresh keys, one request at a time, until the deadline.
async fn client_loop(
    mut conn: MultiplexedConnection,
    config: &SyncConfig,
    index: usize,
    deadline: Instant,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    for n in 0u64.. {
        if Instant::now() >= deadline {
            break;
        }
        let key = format!("{}{index}:{n}", config.key_prefix);
        let sent = Instant::now();
        let held = take(&mut conn, config, &key).await?;
        let took = micros(sent.elapsed()) as f64;
        // A reply that comes after the deadline is not counted: the run's
        // rate is over its duration.
        if Instant::now() > deadline {
            break;
        }
        tally.samples_us.push(took);
        tally.short += u64::from(!held);
    }
    Ok(tally)
}

/// Take `key` the mode's way; whether the replicas acknowledged the grant.
async fn take(
    conn: &mut MultiplexedConnection,
    config: &SyncConfig,
    key: &str,
) -> Result<bool, String> {
    let mut acquire = redis::cmd("LOCK.ACQUIRE");
    acquire.arg(key).arg(config.ttl_ms);
    if config.mode == Mode::Sync {
        acquire
            .arg("SYNC")
            .arg(config.replicas)
            .arg(config.timeout_ms);
    }
    let granted: Result<Option<(Vec<u8>, u64)>, redis::RedisError> =
        acquire.query_async(conn).await;
    let granted = match granted {
        Ok(granted) => granted,
        Err(e) if e.code() == Some("NOSYNC") => return Ok(false),
        Err(e) => return Err(format!("LOCK.ACQUIRE {key}: {e}")),
    };
    if granted.is_none() {
        return Err(format!(
            "LOCK.ACQUIRE {key} was refused: the key should be fresh"
        ));
    }
    if config.mode != Mode::AcquireWait {
        return Ok(true);
    }
    let acked: u64 = redis::cmd("WAIT")
        .arg(config.replicas)
        .arg(config.timeout_ms)
        .query_async(conn)
        .await
        .map_err(|e| format!("WAIT: {e}"))?;
    Ok(acked >= config.replicas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip() {
        for mode in Mode::ALL {
            assert_eq!(Mode::parse(mode.name()), Some(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.name()));
        }
        assert_eq!(Mode::parse("wait"), None);
    }
}
