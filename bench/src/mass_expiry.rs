//! Hand-off after an expiry under load, behind `lock-handoff --scenario
//! mass-expiry`: `keys` locks whose leases all end within the same
//! `spread_ms` (deadlines spread evenly over it: by default 10,000 keys in
//! one second, ten per millisecond), each with one client waiting for it
//! with `LOCK.ACQUIRE … WAIT`, on a connection of its own. Every waiter is
//! granted when its key's lease runs out; a sample runs from that key's
//! deadline as the server reports it (`PEXPIRETIME`, unix ms) to the grant's
//! arrival, on the same host's wall clock, as in the one-key expiry scenario
//! of [`crate::handoff`].
//!
//! Each round also checks, on the server's clock, that no waiter was granted
//! before its holder's lease ran out: a waiter's lease ends `ttl_ms` after
//! its grant, so its key's `PEXPIRETIME` less `ttl_ms` is the grant's
//! millisecond, which must be past the holder's deadline (else the run
//! fails). Every waiter must be queued, and every deadline read, before the
//! first lease runs out: on a machine too busy for that, the round is run
//! again on fresh keys, up to [`ATTEMPTS`] times, and then reported as not
//! measured (`not_measured`, with why) rather than failing the run. The run
//! is bounded in time.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout};

use crate::handoff::{
    acquire_wait, connect, query, unix_us_now, HandoffConfig, HandoffSummary, Recipe, RecipeResult,
};

/// Commands per pipeline when taking, reading and deleting the keys.
const BATCH: usize = 1000;

/// Connections opened at once.
const CONNECTING: usize = 64;

/// A round (queueing, the expiries, the checks) may take this much longer
/// than its lead and spread.
const ROUND_SLACK: Duration = Duration::from_secs(60);

/// How often a round is tried on a machine too busy for its lead.
pub const ATTEMPTS: usize = 3;

/// Every round, then the summary: one recipe, `native-wait`, with the
/// samples of every round.
pub async fn run(config: &HandoffConfig) -> Result<HandoffSummary, String> {
    if config.recipes != [Recipe::NativeWait] {
        return Err("mass-expiry runs the native-wait recipe only".into());
    }
    if config.keys == 0 || config.rounds == 0 {
        return Err("at least one key and one round".into());
    }
    if config.lead_ms < 100 {
        return Err("--lead-ms must be at least 100".into());
    }
    let started = tokio::time::Instant::now();
    let client = redis::Client::open(config.url.as_str()).map_err(|e| e.to_string())?;
    let mut admin = connect(&client).await?;
    make_room_for(&mut admin, config.keys + 64).await?;
    let waiters = connect_many(&client, config.keys).await?;
    let mut samples = Vec::with_capacity(config.keys * config.rounds);
    let mut server_ms = Vec::with_capacity(config.keys * config.rounds);
    let mut span_ms = 0;
    let (mut retried, mut not_measured) = (0, Vec::new());
    for round in 0..config.rounds {
        let limit = Duration::from_millis(config.lead_ms + config.spread_ms) + ROUND_SLACK;
        let mut too_slow = None;
        for attempt in 0..ATTEMPTS {
            let tried = one_round(config, round, attempt, &mut admin, &waiters);
            match timeout(limit, tried)
                .await
                .map_err(|_| format!("round {round} took over {limit:?}"))??
            {
                Tried::Measured(done) => {
                    samples.extend(done.samples_us);
                    server_ms.extend(done.server_ms);
                    span_ms = span_ms.max(done.span_ms);
                    too_slow = None;
                    break;
                }
                Tried::TooSlow(why) => {
                    retried += u64::from(attempt + 1 < ATTEMPTS);
                    too_slow = Some(why);
                }
            }
        }
        if let Some(why) = too_slow {
            not_measured.push(format!(
                "round {}: {why}, in each of {ATTEMPTS} attempts",
                round + 1
            ));
        }
    }
    let first_ms = server_ms.iter().filter(|&&ms| ms == 1).count();
    let mut result = RecipeResult::new(Recipe::NativeWait, samples, 0);
    if result.samples_us.is_empty() {
        result.not_measured = Some(not_measured.join("; "));
    }
    Ok(HandoffSummary {
        scenario: crate::handoff::Scenario::MassExpiry,
        rounds: config.rounds,
        hold_max_ms: 0,
        ttl_ms: config.ttl_ms,
        retry_min_ms: config.retry.min_ms,
        retry_max_ms: config.retry.max_ms,
        signal_expire_ms: config.signal_expire_ms,
        elapsed_s: started.elapsed().as_secs_f64(),
        keys: config.keys,
        spread_ms: config.spread_ms,
        deadline_span_ms: Some(span_ms),
        server_first_ms_share: Some(first_ms as f64 / server_ms.len().max(1) as f64),
        server_max_ms: server_ms.iter().copied().max(),
        recipes: vec![result],
        retried,
        not_measured,
    })
}

/// One attempt at a round: measured, or the machine was too busy for its
/// lead (why), its keys cleaned up.
enum Tried {
    Measured(Round),
    TooSlow(String),
}

/// What one round measured.
struct Round {
    /// µs from each deadline to its waiter's grant arriving.
    samples_us: Vec<f64>,
    /// ms from each deadline to the grant, on the server's clock (1: in the
    /// first millisecond the lease was over).
    server_ms: Vec<i64>,
    /// From the first deadline to the last, ms.
    span_ms: i64,
}

/// One round: the holders take every key, each key's waiter queues, every
/// lease runs out and every waiter is granted. Each attempt on keys of its
/// own.
async fn one_round(
    config: &HandoffConfig,
    round: usize,
    attempt: usize,
    admin: &mut MultiplexedConnection,
    waiters: &[MultiplexedConnection],
) -> Result<Tried, String> {
    let n = config.keys;
    let keys: Vec<String> = (0..n)
        .map(|i| format!("{}mass:{round}.{attempt}:{i}", config.key_prefix))
        .collect();
    // The holders: key i's lease ends i/n of the spread after the first.
    for (chunk_index, chunk) in keys.chunks(BATCH).enumerate() {
        let mut pipe = redis::pipe();
        for (j, key) in chunk.iter().enumerate() {
            let i = (chunk_index * BATCH + j) as u64;
            let ttl = config.lead_ms + i * config.spread_ms / n as u64;
            pipe.cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(ttl)
                .arg("TOKEN")
                .arg("holder");
        }
        let granted: Vec<Option<(Vec<u8>, u64)>> = pipe
            .query_async(admin)
            .await
            .map_err(|e| format!("holders' LOCK.ACQUIRE: {e}"))?;
        if granted.iter().any(Option::is_none) {
            return Err("a holder's key was not free".into());
        }
    }
    let deadlines = expire_times(admin, &keys).await?;
    let first = *deadlines.iter().min().ok_or("no keys")?;
    let last = *deadlines.iter().max().ok_or("no keys")?;
    if deadlines.iter().any(|&d| d < 0) {
        unlink(admin, &keys).await?;
        return Ok(Tried::TooSlow(format!(
            "a holder's lease ran out before the harness read its deadline (lead {} ms)",
            config.lead_ms
        )));
    }
    // Each waiter on its own connection, all at once.
    let wait_ms = config.lead_ms + config.spread_ms + ROUND_SLACK.as_millis() as u64;
    let mut tasks = JoinSet::new();
    for (i, conn) in waiters.iter().enumerate() {
        let mut conn = conn.clone();
        let key = keys[i].clone();
        let ttl_ms = config.ttl_ms;
        tasks.spawn(async move {
            let reply: Option<(Vec<u8>, u64)> =
                query(&mut conn, &acquire_wait(&key, ttl_ms, "waiter", wait_ms)).await?;
            let at = unix_us_now();
            match reply {
                Some(_) => Ok((i, at)),
                None => Err(format!("{key}: the WAIT timed out")),
            }
        });
    }
    // Every waiter queued before the first lease runs out (the `waiters`
    // gauge of INFO lock: read without touching any key).
    let mut late = None;
    loop {
        let queued = waiters_gauge(admin).await?;
        let past_first = unix_us_now() / 1000 >= first;
        if queued == n as i64 {
            if past_first {
                late = Some(format!(
                    "the {n} waiters were queued only at the first deadline"
                ));
            }
            break;
        }
        if past_first {
            late = Some(format!(
                "only {queued} of {n} waiters were queued by the first deadline"
            ));
            break;
        }
        sleep(Duration::from_millis(5)).await;
    }
    let mut arrivals = vec![0i64; n];
    while let Some(done) = tasks.join_next().await {
        let (i, at) = done.map_err(|e| format!("waiter panicked: {e}"))??;
        arrivals[i] = at;
    }
    if let Some(late) = late {
        // Every waiter has had its key by now: the next attempt starts
        // clean.
        unlink(admin, &keys).await?;
        return Ok(Tried::TooSlow(format!(
            "{late} (lead {} ms)",
            config.lead_ms
        )));
    }
    // On the server's clock: every grant after its holder's deadline.
    let leases = expire_times(admin, &keys).await?;
    let mut server_ms = Vec::with_capacity(n);
    for ((key, &deadline), &lease) in keys.iter().zip(&deadlines).zip(&leases) {
        let granted_ms = lease - config.ttl_ms as i64;
        if lease < 0 || granted_ms <= deadline {
            return Err(format!(
                "{key}: granted at {granted_ms} (unix ms), but its holder's lease ran to {deadline}"
            ));
        }
        server_ms.push(granted_ms - deadline);
    }
    unlink(admin, &keys).await?;
    let samples_us = arrivals
        .iter()
        .zip(&deadlines)
        .map(|(&at, &deadline)| (at - deadline * 1000) as f64)
        .collect();
    Ok(Tried::Measured(Round {
        samples_us,
        server_ms,
        span_ms: last - first,
    }))
}

/// `UNLINK` every key, in pipelined batches.
async fn unlink(conn: &mut MultiplexedConnection, keys: &[String]) -> Result<(), String> {
    for chunk in keys.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("UNLINK").arg(key).ignore();
        }
        pipe.query_async::<()>(conn)
            .await
            .map_err(|e| format!("UNLINK: {e}"))?;
    }
    Ok(())
}

/// `PEXPIRETIME` of every key (unix ms; negative: no key or no TTL).
async fn expire_times(
    conn: &mut MultiplexedConnection,
    keys: &[String],
) -> Result<Vec<i64>, String> {
    let mut times = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("PEXPIRETIME").arg(key);
        }
        let batch: Vec<i64> = pipe
            .query_async(conn)
            .await
            .map_err(|e| format!("PEXPIRETIME: {e}"))?;
        times.extend(batch);
    }
    Ok(times)
}

/// `lock_waiters` from `INFO lock`: clients waiting, over all keys.
async fn waiters_gauge(conn: &mut MultiplexedConnection) -> Result<i64, String> {
    let info: String = query(conn, redis::cmd("INFO").arg("lock")).await?;
    info.lines()
        .find_map(|line| line.strip_prefix("lock_waiters:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO lock has no lock_waiters".to_string())
}

/// Raise `maxclients` to at least `wanted` (the default, 10,000, is one
/// short of 10,000 waiters and the harness' own connection).
async fn make_room_for(conn: &mut MultiplexedConnection, wanted: usize) -> Result<(), String> {
    let (_, current): (String, usize) =
        query(conn, redis::cmd("CONFIG").arg("GET").arg("maxclients")).await?;
    if current >= wanted {
        return Ok(());
    }
    let _: () = query(
        conn,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg(wanted),
    )
    .await
    .map_err(|e| format!("CONFIG SET maxclients {wanted} ({e}): raise ulimit -n"))?;
    let (_, now): (String, usize) =
        query(conn, redis::cmd("CONFIG").arg("GET").arg("maxclients")).await?;
    if now < wanted {
        return Err(format!(
            "the server allows {now} clients, {wanted} are needed: raise ulimit -n"
        ));
    }
    Ok(())
}

/// `n` connections of their own, opened a few at a time.
async fn connect_many(
    client: &redis::Client,
    n: usize,
) -> Result<Vec<MultiplexedConnection>, String> {
    let gate = std::sync::Arc::new(Semaphore::new(CONNECTING));
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let client = client.clone();
        let gate = gate.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.map_err(|e| e.to_string())?;
            connect(&client)
                .await
                .map(|conn| (i, conn))
                .map_err(|e| format!("{e} (connection {i} of {n}: ulimit -n?)"))
        });
    }
    let mut conns: Vec<Option<MultiplexedConnection>> = (0..n).map(|_| None).collect();
    while let Some(done) = tasks.join_next().await {
        let (i, conn) = done.map_err(|e| format!("connect panicked: {e}"))??;
        conns[i] = Some(conn);
    }
    Ok(conns.into_iter().flatten().collect())
}
