//! Observer wake-up latency behind `lock-observe`: how long after a lock's
//! holder changes each client blocked in `LOCK.OBSERVE` on that key has the
//! new holder, and what the wake-ups cost the command that caused them and
//! everyone else on the server.
//!
//! A fleet of observers, each on its own connection, follows one key through
//! every change for the whole run: each sends `LOCK.OBSERVE key <fence it
//! last saw> <timeout>`, and on each reply notes the instant and sends the
//! next one with the fence it just saw. Each round makes five changes, one
//! at a time, in this order ([`Change`]):
//!
//! 1. grant: the free key is taken (`LOCK.ACQUIRE … TOKEN a`);
//! 2. hand-off: a client queued with `WAIT` is granted inside a's
//!    `LOCK.RELEASE`;
//! 3. release: that holder releases and nobody waits;
//! 4. grant again;
//! 5. expiry: once every observer waits again, the holder's lease is cut
//!    to `ttl_ms` (`LOCK.EXTEND`, which wakes nobody, after a random 0–100
//!    ms pause, so that the deadline does not fall into step with the
//!    server's cron), and nobody touches the key until it runs out.
//!
//! Every grant takes a long lease, and the short one starts only once the
//! fleet waits again: granted short, a lease could run out on a busy
//! machine before every observer had re-sent its `LOCK.OBSERVE` (which
//! would then answer at once), or before its deadline was read. The cut
//! and the read of its deadline (`LOCK.INFO`) are one `MULTI`, so the
//! deadline is the server's whatever the harness' own delays.
//!
//! Before each change every observer is seen blocked again (`INFO lock`
//! `lock_observers` equals the fleet, read without touching the key) and no
//! reply is left over; after it every observer must reply exactly once,
//! with the new holder's fence (0: free). Anything else fails the run: a
//! slow machine makes every step slower, but none of them wrong. A
//! sample runs, for a grant, hand-off or release, from the instant just
//! before the command is sent to the observer's reply arriving (one
//! monotonic clock, as `lock-handoff` on release); for an expiry, from the
//! lease's deadline as `LOCK.INFO` reports it (unix ms) to the reply
//! arriving on the same host's wall clock (as `lock-handoff` on expiry).
//!
//! A `PING` sent on another connection right after each change's command
//! (and one before it, on a quiet server) shows whether the wake-ups stall
//! the server; it is sent from a thread of its own, so that it does not
//! queue behind the observers' tasks, but it shares the machine's cores with
//! them and the server. `INFO commandstats` gives the server's own time per
//! command, which does not depend on the client.

use std::collections::HashMap;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::Value;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout, Instant};

use crate::handoff::{
    acquire_wait, connect, micros, query, unix_us_now, wait_until_queued, EXPIRY_PHASE_JITTER,
    ROUND_LIMIT,
};
pub use crate::stats::Spread;

/// A change of the observed key's holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Grant,
    Handoff,
    Release,
    Expiry,
}

impl Change {
    pub const ALL: [Change; 4] = [
        Change::Grant,
        Change::Handoff,
        Change::Release,
        Change::Expiry,
    ];

    /// One round, in order.
    const ROUND: [Change; 5] = [
        Change::Grant,
        Change::Handoff,
        Change::Release,
        Change::Grant,
        Change::Expiry,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Change::Grant => "grant",
            Change::Handoff => "hand-off",
            Change::Release => "release",
            Change::Expiry => "expiry",
        }
    }
}

#[derive(Clone, Debug)]
pub struct ObserveConfig {
    pub url: String,
    /// Observers on the key, each on its own connection.
    pub observers: usize,
    /// Rounds of five changes ([`Change::ROUND`]).
    pub rounds: usize,
    /// The lease that runs out in the expiry change (cut to it once every
    /// observer waits again).
    pub ttl_ms: u64,
    pub key: String,
    pub seed: u64,
}

/// One kind of change, over the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChangeResult {
    pub change: String,
    /// Changes of this kind made.
    pub changes: usize,
    /// Every observer's wake-up for every such change, µs, whole.
    pub wakeups_us: Vec<f64>,
    pub wakeup: Spread,
    /// Per change, the last observer's wake-up: when the last one had it.
    pub last_wakeup: Spread,
    /// The command that made the change, send to reply (none for expiry).
    pub command: Spread,
    /// A `PING` on another connection, sent right after that command.
    pub ping: Spread,
    /// The server's main-thread CPU (`INFO cpu`) from just before the
    /// change until every observer was blocked again: the wake-ups, their
    /// replies and the observers' next `LOCK.OBSERVE`.
    pub server_cpu: Spread,
}

/// The server's own time in one command (`INFO commandstats`), over the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CommandStat {
    pub command: String,
    pub calls: u64,
    pub usec_per_call: f64,
}

/// What one `lock-observe` run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ObserveSummary {
    pub observers: usize,
    pub rounds: usize,
    pub ttl_ms: u64,
    pub elapsed_s: f64,
    pub changes: Vec<ChangeResult>,
    /// A `PING` before each change, on a quiet server.
    pub idle_ping: Spread,
    /// Replies the observers got, every one checked: fleet × changes.
    pub replies: u64,
    /// `lock_observers` once every observer had its last reply (must be 0).
    pub observers_at_end: i64,
    pub commandstats: Vec<CommandStat>,
}

/// An observer's `LOCK.OBSERVE` timeout: far beyond any change's wait, so
/// a timeout reply (the holder it saw) fails the run instead of counting.
const OBSERVE_TIMEOUT_MS: u64 = 120_000;

/// The commands whose server time the summary reports.
const STAT_COMMANDS: [&str; 3] = ["lock.acquire", "lock.release", "lock.observe"];

/// One observer's reply.
struct Wake {
    observer: usize,
    at: Instant,
    unix_us: i64,
    fence: u64,
}

/// Where a change's samples start, and what it did.
struct Made {
    /// The monotonic instant (command changes) …
    sent: Option<Instant>,
    /// … or the lease's deadline, unix ms (expiry: the cut lease's).
    deadline_ms: Option<i64>,
    /// The holder's fence after the change (0: free).
    fence: u64,
    command_us: Option<f64>,
    ping_us: Option<f64>,
}

/// Samples of one kind of change, gathered over the rounds.
#[derive(Clone, Default)]
struct Gathered {
    changes: usize,
    wakeups_us: Vec<f64>,
    last_wakeup_us: Vec<f64>,
    command_us: Vec<f64>,
    ping_us: Vec<f64>,
    server_cpu_us: Vec<f64>,
}

/// Run every round and summarise.
pub async fn run(config: ObserveConfig) -> Result<ObserveSummary, String> {
    if config.observers == 0 || config.rounds == 0 {
        return Err("at least one observer and one round".into());
    }
    if config.ttl_ms < 10 {
        return Err("--ttl-ms must be at least 10".into());
    }
    let client = redis::Client::open(config.url.as_str()).map_err(|e| e.to_string())?;
    let mut driver = connect(&client).await?;
    let mut pinger = Pinger::start(&client)?;
    let waiter = connect(&client).await?;
    let _: () = query(&mut driver, redis::cmd("DEL").arg(&config.key)).await?;
    let total_changes = config.rounds * Change::ROUND.len();
    let (wakes_tx, mut wakes) = mpsc::unbounded_channel();
    let mut fleet = Vec::with_capacity(config.observers);
    for observer in 0..config.observers {
        let conn = connect(&client).await?;
        fleet.push(tokio::spawn(observe(
            conn,
            config.key.clone(),
            observer,
            total_changes,
            wakes_tx.clone(),
        )));
    }
    drop(wakes_tx);
    let _: () = query(&mut driver, redis::cmd("CONFIG").arg("RESETSTAT")).await?;
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let mut gathered = vec![Gathered::default(); Change::ALL.len()];
    let mut idle_pings = Vec::new();
    let mut replies = 0u64;
    let start = Instant::now();
    for round in 0..config.rounds {
        for (step, change) in Change::ROUND.into_iter().enumerate() {
            let what = format!("round {}, {}", round + 1, change.name());
            // The hand-off's waiter queues first (not a change of holder).
            let waiting = if change == Change::Handoff {
                let handle = tokio::spawn(wait_for_grant(waiter.clone(), config.key.clone()));
                if !wait_until_queued(&mut driver, &config.key).await? {
                    return Err(format!("{what}: the waiter was never queued"));
                }
                Some(handle)
            } else {
                None
            };
            wait_for_observers(&mut driver, config.observers as i64)
                .await
                .map_err(|e| format!("{what}: {e}"))?;
            if let Ok(extra) = wakes.try_recv() {
                return Err(format!(
                    "{what}: observer {} replied with no change",
                    extra.observer
                ));
            }
            pinger.ping();
            idle_pings.push(pinger.took().await?);
            let cpu_before = server_cpu_us(&mut driver).await?;
            if change == Change::Expiry {
                // At a random phase of the server's cron.
                sleep(Duration::from_micros(
                    rng.gen_range(0..=micros(EXPIRY_PHASE_JITTER)),
                ))
                .await;
            }
            let mut made = timeout(
                ROUND_LIMIT,
                make(change, &mut driver, &mut pinger, &config.key, config.ttl_ms),
            )
            .await
            .map_err(|_| format!("{what}: the change took over 30 s"))?
            .map_err(|e| format!("{what}: {e}"))?;
            if let Some(handle) = waiting {
                made.fence = handle
                    .await
                    .map_err(|e| format!("{what}: waiter panicked: {e}"))??;
            }
            let (wakeups, last) = timeout(ROUND_LIMIT, collect(&mut wakes, &config, &made))
                .await
                .map_err(|_| format!("{what}: the observers took over 30 s"))?
                .map_err(|e| format!("{what}: {e}"))?;
            let last_change = round + 1 == config.rounds && step + 1 == Change::ROUND.len();
            let blocked_again = if last_change { 0 } else { config.observers };
            wait_for_observers(&mut driver, blocked_again as i64)
                .await
                .map_err(|e| format!("{what}: {e}"))?;
            let cpu_us = server_cpu_us(&mut driver).await? - cpu_before;
            replies += wakeups.len() as u64;
            let kind = &mut gathered[change as usize];
            kind.changes += 1;
            kind.wakeups_us.extend(wakeups);
            kind.last_wakeup_us.push(last);
            kind.command_us.extend(made.command_us);
            kind.ping_us.extend(made.ping_us);
            kind.server_cpu_us.push(cpu_us);
        }
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    for handle in fleet {
        handle
            .await
            .map_err(|e| format!("observer panicked: {e}"))??;
    }
    let observers_at_end = observers_now(&mut driver).await?;
    if observers_at_end != 0 {
        return Err(format!(
            "lock_observers is {observers_at_end} once every observer is done, not 0"
        ));
    }
    let commandstats = command_stats(&mut driver).await?;
    Ok(ObserveSummary {
        observers: config.observers,
        rounds: config.rounds,
        ttl_ms: config.ttl_ms,
        elapsed_s,
        changes: Change::ALL
            .into_iter()
            .zip(gathered)
            .map(|(change, g)| ChangeResult {
                change: change.name().to_string(),
                changes: g.changes,
                wakeup: Spread::of(&g.wakeups_us),
                last_wakeup: Spread::of(&g.last_wakeup_us),
                command: Spread::of(&g.command_us),
                ping: Spread::of(&g.ping_us),
                server_cpu: Spread::of(&g.server_cpu_us),
                wakeups_us: g.wakeups_us.iter().map(|us| us.round()).collect(),
            })
            .collect(),
        idle_ping: Spread::of(&idle_pings),
        replies,
        observers_at_end,
        commandstats,
    })
}

/// One observer, on its own connection: `LOCK.OBSERVE` once per change,
/// each time with the fence of its last reply (0 at first: the key is
/// free), telling `wakes` of every reply.
async fn observe(
    mut conn: MultiplexedConnection,
    key: String,
    observer: usize,
    changes: usize,
    wakes: mpsc::UnboundedSender<Wake>,
) -> Result<(), String> {
    let mut seen = 0;
    for _ in 0..changes {
        let reply: Value = query(
            &mut conn,
            redis::cmd("LOCK.OBSERVE")
                .arg(&key)
                .arg(seen)
                .arg(OBSERVE_TIMEOUT_MS),
        )
        .await?;
        let (at, unix_us) = (Instant::now(), unix_us_now());
        seen = holder_fence(&reply)?;
        let wake = Wake {
            observer,
            at,
            unix_us,
            fence: seen,
        };
        if wakes.send(wake).is_err() {
            break;
        }
    }
    Ok(())
}

/// The fence of an OBSERVE reply: the map's `fence`, or 0 for null.
fn holder_fence(reply: &Value) -> Result<u64, String> {
    let fields = match reply {
        Value::Nil => return Ok(0),
        Value::Array(items) => items.chunks(2).collect::<Vec<_>>(),
        Value::Map(pairs) => return field_of(pairs.iter().map(|(k, v)| (k, v))),
        other => return Err(format!("LOCK.OBSERVE replied {other:?}")),
    };
    field_of(
        fields
            .into_iter()
            .filter_map(|pair| Some((pair.first()?, pair.get(1)?))),
    )
}

fn field_of<'a>(mut pairs: impl Iterator<Item = (&'a Value, &'a Value)>) -> Result<u64, String> {
    pairs
        .find_map(|(name, value)| match (name, value) {
            (Value::BulkString(n), Value::Int(f)) if n == b"fence" => u64::try_from(*f).ok(),
            (Value::SimpleString(n), Value::Int(f)) if n == "fence" => u64::try_from(*f).ok(),
            _ => None,
        })
        .ok_or_else(|| "LOCK.OBSERVE replied a map without fence".to_string())
}

/// The hand-off's waiter: `LOCK.ACQUIRE … WAIT`, then its fence.
async fn wait_for_grant(mut conn: MultiplexedConnection, key: String) -> Result<u64, String> {
    let wait_ms = ROUND_LIMIT.as_millis() as u64;
    let reply: Option<(Vec<u8>, u64)> =
        query(&mut conn, &acquire_wait(&key, wait_ms * 4, "b", wait_ms)).await?;
    reply
        .map(|(_, fence)| fence)
        .ok_or_else(|| "the hand-off's WAIT timed out".to_string())
}

/// Every grant's lease: far beyond a round, so that only the expiry
/// change's cut lease ever runs out.
const LONG_LEASE_MS: u64 = ROUND_LIMIT.as_millis() as u64 * 4;

/// Make one change; for a command, with a `PING` on `pinger` sent right
/// after it. The expiry cuts the holder's lease to `ttl_ms`.
async fn make(
    change: Change,
    driver: &mut MultiplexedConnection,
    pinger: &mut Pinger,
    key: &str,
    ttl_ms: u64,
) -> Result<Made, String> {
    let (mut cmd, token) = match change {
        Change::Grant => {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(key).arg(LONG_LEASE_MS).arg("TOKEN").arg("a");
            (cmd, None)
        }
        // The hand-off releases a's lock, the release b's (granted by it).
        Change::Handoff => (redis::cmd("LOCK.RELEASE"), Some("a")),
        Change::Release => (redis::cmd("LOCK.RELEASE"), Some("b")),
        Change::Expiry => {
            return Ok(Made {
                sent: None,
                deadline_ms: Some(cut_lease(driver, key, ttl_ms).await?),
                fence: 0,
                command_us: None,
                ping_us: None,
            })
        }
    };
    if let Some(token) = token {
        cmd.arg(key).arg(token);
    }
    let sent = Instant::now();
    // (`join!` polls the command first: it is on its way before the PING.)
    let (reply, ()) = tokio::join!(
        async {
            let reply = cmd.query_async::<Value>(driver).await;
            (reply, us_since(sent))
        },
        async { pinger.ping() }
    );
    let (reply, command_us) = reply;
    let reply = reply.map_err(|e| e.to_string())?;
    let ping_us = pinger.took().await?;
    let fence = match (change, &reply) {
        (Change::Grant, Value::Array(items)) => match items.get(1) {
            Some(Value::Int(fence)) => *fence as u64,
            _ => return Err(format!("LOCK.ACQUIRE replied {reply:?}")),
        },
        (Change::Grant, _) => return Err(format!("LOCK.ACQUIRE refused: {reply:?}")),
        (_, Value::Int(1)) => 0,
        _ => return Err(format!("LOCK.RELEASE replied {reply:?}")),
    };
    Ok(Made {
        sent: Some(sent),
        deadline_ms: None,
        fence,
        command_us: Some(command_us),
        ping_us: Some(ping_us),
    })
}

/// Cut a's lease to `ttl_ms` from now; its deadline (unix ms), read in the
/// same `MULTI`, so that no delay of the harness can come between them.
async fn cut_lease(
    driver: &mut MultiplexedConnection,
    key: &str,
    ttl_ms: u64,
) -> Result<i64, String> {
    let (extended, info): (i64, Option<HashMap<String, Value>>) = redis::pipe()
        .atomic()
        .cmd("LOCK.EXTEND")
        .arg(key)
        .arg("a")
        .arg(ttl_ms)
        .cmd("LOCK.INFO")
        .arg(key)
        .query_async(driver)
        .await
        .map_err(|e| format!("LOCK.EXTEND + LOCK.INFO: {e}"))?;
    if extended != 1 {
        return Err(format!("LOCK.EXTEND of a's lease replied {extended}"));
    }
    match info.as_ref().and_then(|fields| fields.get("deadline")) {
        Some(Value::Int(deadline_ms)) => Ok(*deadline_ms),
        other => Err(format!("LOCK.INFO after the cut: deadline {other:?}")),
    }
}

/// Every observer's reply to one change, exactly one each, with the new
/// holder: the wake-ups (µs) and the last of them.
async fn collect(
    wakes: &mut mpsc::UnboundedReceiver<Wake>,
    config: &ObserveConfig,
    made: &Made,
) -> Result<(Vec<f64>, f64), String> {
    let mut woken = vec![false; config.observers];
    let mut wakeups = Vec::with_capacity(config.observers);
    while wakeups.len() < config.observers {
        let wake = wakes
            .recv()
            .await
            .ok_or("an observer stopped before the change")?;
        if std::mem::replace(&mut woken[wake.observer], true) {
            return Err(format!("observer {} replied twice", wake.observer));
        }
        if wake.fence != made.fence {
            return Err(format!(
                "observer {} saw fence {}, the holder is {}",
                wake.observer, wake.fence, made.fence
            ));
        }
        wakeups.push(match (made.sent, made.deadline_ms) {
            (Some(sent), _) => wake.at.duration_since(sent).as_secs_f64() * 1e6,
            (None, Some(deadline_ms)) => (wake.unix_us - deadline_ms * 1000) as f64,
            (None, None) => return Err("a change with no start".into()),
        });
    }
    let last = wakeups.iter().copied().fold(f64::MIN, f64::max);
    Ok((wakeups, last))
}

/// `lock_observers` of `INFO lock` (it does not touch the observed key).
async fn observers_now(conn: &mut MultiplexedConnection) -> Result<i64, String> {
    let info: String = query(conn, redis::cmd("INFO").arg("lock")).await?;
    info.lines()
        .find_map(|line| line.strip_prefix("lock_observers:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO lock has no lock_observers".into())
}

/// The server's main-thread CPU time so far (user + system), µs.
async fn server_cpu_us(conn: &mut MultiplexedConnection) -> Result<f64, String> {
    let info: String = query(conn, redis::cmd("INFO").arg("cpu")).await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or_else(|| format!("INFO cpu has no {name}"))
    };
    Ok((field("used_cpu_user_main_thread")? + field("used_cpu_sys_main_thread")?) * 1e6)
}

/// Until `n` observers are blocked.
async fn wait_for_observers(conn: &mut MultiplexedConnection, n: i64) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let now = observers_now(conn).await?;
        if now == n {
            return Ok(());
        }
        if start.elapsed() > ROUND_LIMIT {
            return Err(format!("{now} observers blocked after 30 s, not {n}"));
        }
        sleep(Duration::from_micros(200)).await;
    }
}

/// `calls` and `usec_per_call` of [`STAT_COMMANDS`] in `INFO commandstats`.
async fn command_stats(conn: &mut MultiplexedConnection) -> Result<Vec<CommandStat>, String> {
    let info: String = query(conn, redis::cmd("INFO").arg("commandstats")).await?;
    Ok(STAT_COMMANDS
        .iter()
        .filter_map(|&command| {
            let line = info
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))?;
            let fields: HashMap<&str, &str> =
                line.split(',').filter_map(|f| f.split_once('=')).collect();
            Some(CommandStat {
                command: command.to_string(),
                calls: fields.get("calls")?.parse().ok()?,
                usec_per_call: fields.get("usec_per_call")?.parse().ok()?,
            })
        })
        .collect())
}

/// `PING` from a thread of its own, on a connection of its own: told to
/// send by [`Pinger::ping`], answering with the round trip, µs.
struct Pinger {
    go: std::sync::mpsc::Sender<()>,
    took: mpsc::UnboundedReceiver<Result<f64, String>>,
}

impl Pinger {
    fn start(client: &redis::Client) -> Result<Pinger, String> {
        let mut conn = client
            .get_connection()
            .map_err(|e| format!("connect: {e}"))?;
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        let (took_tx, took) = mpsc::unbounded_channel();
        // Ends when `go` is dropped.
        std::thread::spawn(move || {
            for () in go_rx {
                let at = std::time::Instant::now();
                let pong: Result<String, _> = redis::cmd("PING").query(&mut conn);
                let took = pong
                    .map(|_| at.elapsed().as_secs_f64() * 1e6)
                    .map_err(|e| format!("PING: {e}"));
                if took_tx.send(took).is_err() {
                    break;
                }
            }
        });
        Ok(Pinger { go, took })
    }

    fn ping(&self) {
        let _ = self.go.send(());
    }

    async fn took(&mut self) -> Result<f64, String> {
        self.took.recv().await.ok_or("the PING thread stopped")?
    }
}

fn us_since(at: Instant) -> f64 {
    at.elapsed().as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_of_a_round_has_its_kind() {
        for change in Change::ROUND {
            assert_eq!(Change::ALL[change as usize], change);
        }
        assert!(Change::ALL.iter().all(|c| Change::ROUND.contains(c)));
    }

    #[test]
    fn the_fence_of_an_observe_reply() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(holder_fence(&Value::Nil), Ok(0));
        let resp2 = Value::Array(vec![
            bulk("fence"),
            Value::Int(7),
            bulk("ttl"),
            Value::Int(100),
        ]);
        assert_eq!(holder_fence(&resp2), Ok(7));
        let resp3 = Value::Map(vec![
            (bulk("ttl"), Value::Int(1)),
            (bulk("fence"), Value::Int(9)),
        ]);
        assert_eq!(holder_fence(&resp3), Ok(9));
        assert!(holder_fence(&Value::Array(vec![bulk("ttl"), Value::Int(1)])).is_err());
    }
}
