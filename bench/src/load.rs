//! The lock-cycle load generator behind `lock-load`: contenders run
//! acquire → hold → release against a server until a deadline, and every
//! acquire is timed from its first attempt to its grant.
//!
//! How a contender waits for a taken lock is its [`Strategy`]: polling (the
//! native commands or the Lua recipe, retried after a jittered sleep, as
//! clients must without server-side waiting) or the server's own FIFO queue
//! (`LOCK.ACQUIRE key ttl TOKEN t WAIT timeout-ms`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::Script;
use serde::Serialize;
use tokio::time::{sleep, Instant};

use crate::scripts;
use crate::stats::jain_index;

/// How a contender takes a lock, and how it waits while someone else holds it.
///
/// A new strategy is a variant here plus its arms in [`Strategy::name`],
/// [`Strategy::acquire`] and [`Strategy::release`], and an entry in
/// [`Strategy::ALL`]; timing, handoff, fairness, the report's tables and the
/// charts are shared and pick it up from `ALL`. A strategy whose acquire
/// blocks on the server must return `true` from
/// [`Strategy::needs_dedicated_connection`]: a blocked command stalls every
/// other request queued behind it on a multiplexed connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Strategy {
    /// `LOCK.ACQUIRE key ttl TOKEN t`; on null, sleep a jittered retry delay
    /// and try again. Released with `LOCK.RELEASE`.
    NativePoll,
    /// The Lua recipe (`SET NX PX` plus `INCR` of one global fence key),
    /// polled the same way, as redsync does. Released with the Lua
    /// compare-and-delete.
    LuaPoll,
    /// `LOCK.ACQUIRE key ttl TOKEN t WAIT ms`, with `ms` the time left in the
    /// run: the server queues the contender and hands it the lock on release.
    /// A null reply (the run ended first) gives up. Released with
    /// `LOCK.RELEASE`.
    NativeWait,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [
        Strategy::NativePoll,
        Strategy::LuaPoll,
        Strategy::NativeWait,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::NativePoll => "native-poll",
            Strategy::LuaPoll => "lua-poll",
            Strategy::NativeWait => "native-wait",
        }
    }

    pub fn parse(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether each contender must have a connection of its own.
    pub fn needs_dedicated_connection(self) -> bool {
        self == Strategy::NativeWait
    }

    /// Take `key` for `token`, retrying (or waiting) until granted or until
    /// the run's `deadline`.
    async fn acquire(
        self,
        conn: &mut MultiplexedConnection,
        scripts: &Scripts,
        lock: &LockRequest<'_>,
        retry: &RetryPolicy,
        deadline: Instant,
        rng: &mut SmallRng,
    ) -> redis::RedisResult<Acquired> {
        let mut refusals = 0;
        loop {
            let granted = match self {
                Strategy::NativePoll => native_try_acquire(conn, lock, None).await?,
                Strategy::LuaPoll => lua_try_acquire(conn, scripts, lock).await?,
                Strategy::NativeWait => {
                    // Wait past the deadline: after it nobody starts a new
                    // cycle, so the queue drains by handoffs within moments
                    // and no wait has to time out. (`run` does not count a
                    // grant that comes after the deadline.)
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(Acquired::GaveUp);
                    }
                    let wait_ms =
                        u64::try_from((left + WAIT_PAST_DEADLINE).as_millis()).unwrap_or(u64::MAX);
                    return Ok(match native_try_acquire(conn, lock, Some(wait_ms)).await? {
                        Some(_) => Acquired::Granted { refusals },
                        None => Acquired::GaveUp,
                    });
                }
            };
            if granted.is_some() {
                return Ok(Acquired::Granted { refusals });
            }
            refusals += 1;
            let pause = retry.next_delay(rng);
            if Instant::now() + pause >= deadline {
                return Ok(Acquired::GaveUp);
            }
            sleep(pause).await;
        }
    }

    /// Give `key` back; true when `token` still held it.
    async fn release(
        self,
        conn: &mut MultiplexedConnection,
        scripts: &Scripts,
        lock: &LockRequest<'_>,
    ) -> redis::RedisResult<bool> {
        let released: i64 = match self {
            Strategy::NativePoll | Strategy::NativeWait => {
                redis::cmd("LOCK.RELEASE")
                    .arg(lock.key)
                    .arg(lock.token)
                    .query_async(conn)
                    .await?
            }
            Strategy::LuaPoll => {
                scripts
                    .release
                    .key(lock.key)
                    .arg(lock.token)
                    .invoke_async(conn)
                    .await?
            }
        };
        Ok(released == 1)
    }
}

/// How long a `native-wait` contender still waits after the run's deadline.
const WAIT_PAST_DEADLINE: Duration = Duration::from_secs(5);

struct LockRequest<'a> {
    key: &'a str,
    token: &'a str,
    ttl_ms: u64,
    fence_key: &'a str,
}

enum Acquired {
    Granted {
        refusals: u64,
    },
    /// The run's deadline came first.
    GaveUp,
}

/// `Some(fence)` when granted; with `wait_ms`, the server queues the caller
/// for up to that long.
async fn native_try_acquire(
    conn: &mut MultiplexedConnection,
    lock: &LockRequest<'_>,
    wait_ms: Option<u64>,
) -> redis::RedisResult<Option<u64>> {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(lock.key)
        .arg(lock.ttl_ms)
        .arg("TOKEN")
        .arg(lock.token);
    if let Some(ms) = wait_ms {
        cmd.arg("WAIT").arg(ms);
    }
    let reply: Option<(Vec<u8>, u64)> = cmd.query_async(conn).await?;
    Ok(reply.map(|(_, fence)| fence))
}

async fn lua_try_acquire(
    conn: &mut MultiplexedConnection,
    scripts: &Scripts,
    lock: &LockRequest<'_>,
) -> redis::RedisResult<Option<u64>> {
    let reply: Option<(Vec<u8>, u64)> = scripts
        .acquire
        .key(lock.key)
        .key(lock.fence_key)
        .arg(lock.token)
        .arg(lock.ttl_ms)
        .invoke_async(conn)
        .await?;
    Ok(reply.map(|(_, fence)| fence))
}

struct Scripts {
    acquire: Script,
    release: Script,
}

/// Redsync-style polling: wait a uniformly random delay in `[min, max]`
/// before the next attempt.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RetryPolicy {
    pub min_ms: u64,
    pub max_ms: u64,
}

impl RetryPolicy {
    /// The pause before the next attempt.
    pub fn next_delay(&self, rng: &mut SmallRng) -> Duration {
        Duration::from_micros(
            rng.gen_range(self.min_ms * 1000..=self.max_ms.max(self.min_ms) * 1000),
        )
    }
}

/// One run's workload.
#[derive(Clone, Debug, Serialize)]
pub struct LoadConfig {
    pub url: String,
    pub strategy: Strategy,
    /// Concurrent clients competing for the locks.
    pub contenders: usize,
    /// Server connections the contenders share round-robin.
    pub connections: usize,
    /// Lock keys: 1 is a single hot key.
    pub keys: usize,
    /// Each contender uses only its own keys (`keys >= contenders`): no
    /// contention at all, which isolates the cost of the commands.
    pub partitioned: bool,
    pub key_prefix: String,
    pub duration_ms: u64,
    /// Time a holder keeps the lock before releasing it.
    pub hold_ms: u64,
    pub ttl_ms: u64,
    pub retry: RetryPolicy,
    pub seed: u64,
}

/// Percentiles in microseconds.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Percentiles {
    fn of(histogram: &Histogram<u64>) -> Percentiles {
        Percentiles {
            count: histogram.len(),
            p50_us: histogram.value_at_quantile(0.50),
            p99_us: histogram.value_at_quantile(0.99),
            p999_us: histogram.value_at_quantile(0.999),
            max_us: histogram.max(),
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct LoadSummary {
    pub strategy: String,
    pub contenders: usize,
    pub connections: usize,
    pub keys: usize,
    pub partitioned: bool,
    pub hold_ms: u64,
    pub retry_min_ms: u64,
    pub retry_max_ms: u64,
    pub elapsed_s: f64,
    /// Completed acquire → hold → release cycles.
    pub cycles: u64,
    pub cycles_per_s: f64,
    /// From the first attempt to the grant, for every granted acquire.
    pub acquire: Percentiles,
    /// From the moment a holder sends its release to the grant of a
    /// contender that was already waiting for that key: how long a freed lock
    /// sits idle before the next holder has it.
    pub handoff: Percentiles,
    /// Refused attempts per granted acquire.
    pub refusals_per_grant: f64,
    /// Cycles of the least and most successful contender, and the mean.
    pub min_cycles_per_contender: u64,
    pub max_cycles_per_contender: u64,
    pub mean_cycles_per_contender: f64,
    /// Jain's index over cycles per contender (1 = perfectly even).
    pub jain_index: Option<f64>,
    /// Contenders still waiting when the deadline came (or granted only
    /// after it), and the longest of those waits up to the deadline:
    /// latencies above only count acquires granted within the run.
    pub waiting_at_end: u64,
    pub longest_unfinished_wait_us: u64,
    /// Releases that found the lock no longer theirs (the lease ran out).
    pub lost_leases: u64,
}

/// What one contender counted.
struct ContenderTally {
    cycles: u64,
    refusals: u64,
    grants: u64,
    acquire_us: Histogram<u64>,
    handoff_us: Histogram<u64>,
    unfinished_wait_us: Option<u64>,
    lost_leases: u64,
}

fn new_histogram() -> Histogram<u64> {
    // 1 µs to 1 hour, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

/// Run the workload and summarise it.
pub async fn run(config: LoadConfig) -> Result<LoadSummary, String> {
    if config.contenders == 0 || config.keys == 0 {
        return Err("contenders and keys must be at least 1".into());
    }
    if config.partitioned && config.keys < config.contenders {
        return Err("--partition needs at least as many keys as contenders".into());
    }
    let connections = if config.strategy.needs_dedicated_connection() {
        config.contenders
    } else {
        config.connections.clamp(1, config.contenders)
    };
    let client = redis::Client::open(config.url.as_str()).map_err(|e| e.to_string())?;
    let mut pool = Vec::with_capacity(connections);
    for _ in 0..connections {
        pool.push(
            client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("connect to {}: {e}", config.url))?,
        );
    }
    let scripts = Arc::new(Scripts {
        acquire: Script::new(scripts::ACQUIRE),
        release: Script::new(scripts::RELEASE),
    });
    let key_names: Arc<Vec<String>> = Arc::new(
        (0..config.keys)
            .map(|i| format!("{}{i}", config.key_prefix))
            .collect(),
    );
    let fence_key = format!("{}fence", config.key_prefix);
    // When each key was last released, in µs since `start` (0: never).
    let released_at: Arc<Vec<AtomicU64>> =
        Arc::new((0..config.keys).map(|_| AtomicU64::new(0)).collect());

    let start = Instant::now();
    let deadline = start + Duration::from_millis(config.duration_ms);
    let mut tasks = Vec::with_capacity(config.contenders);
    for contender in 0..config.contenders {
        let mut conn = pool[contender % connections].clone();
        let scripts = Arc::clone(&scripts);
        let key_names = Arc::clone(&key_names);
        let released_at = Arc::clone(&released_at);
        let fence_key = fence_key.clone();
        let config = config.clone();
        tasks.push(tokio::spawn(async move {
            contend(
                contender,
                &mut conn,
                &scripts,
                &key_names,
                &released_at,
                &fence_key,
                &config,
                start,
                deadline,
            )
            .await
        }));
    }
    // Every contender stops by itself at the deadline (plus one hold and a
    // round trip); the guard only turns a server that stopped answering into
    // an error instead of a hang.
    let guard = deadline
        + Duration::from_millis(config.hold_ms)
        + WAIT_PAST_DEADLINE
        + Duration::from_secs(10);
    let mut tallies = Vec::with_capacity(tasks.len());
    for task in tasks {
        let finished = tokio::time::timeout_at(guard, task)
            .await
            .map_err(|_| "a contender did not finish long after the deadline".to_string())?;
        tallies.push(
            finished
                .map_err(|e| format!("contender panicked: {e}"))?
                .map_err(|e| format!("redis error: {e}"))?,
        );
    }
    let elapsed_s = start
        .elapsed()
        .as_secs_f64()
        .max(config.duration_ms as f64 / 1000.0);
    Ok(summarise(&config, connections, elapsed_s, &tallies))
}

#[allow(clippy::too_many_arguments)]
async fn contend(
    contender: usize,
    conn: &mut MultiplexedConnection,
    scripts: &Scripts,
    key_names: &[String],
    released_at: &[AtomicU64],
    fence_key: &str,
    config: &LoadConfig,
    start: Instant,
    deadline: Instant,
) -> redis::RedisResult<ContenderTally> {
    let mut rng =
        SmallRng::seed_from_u64(config.seed ^ (contender as u64).wrapping_mul(0x9E37_79B9));
    let mut tally = ContenderTally {
        cycles: 0,
        refusals: 0,
        grants: 0,
        acquire_us: new_histogram(),
        handoff_us: new_histogram(),
        unfinished_wait_us: None,
        lost_leases: 0,
    };
    let hold = Duration::from_millis(config.hold_ms);
    let mut token = String::new();
    let mut own_key_turn = 0usize;
    while Instant::now() < deadline {
        let key_index = if config.partitioned {
            // Keys contender, contender + n, contender + 2n, … in turn.
            let owned = (key_names.len() - contender).div_ceil(config.contenders);
            let index = contender + (own_key_turn % owned) * config.contenders;
            own_key_turn += 1;
            index
        } else {
            rng.gen_range(0..key_names.len())
        };
        token.clear();
        use std::fmt::Write;
        let _ = write!(token, "c{contender}-{}", tally.cycles);
        let lock = LockRequest {
            key: &key_names[key_index],
            token: &token,
            ttl_ms: config.ttl_ms,
            fence_key,
        };
        let first_attempt = Instant::now();
        let refusals = match config
            .strategy
            .acquire(conn, scripts, &lock, &config.retry, deadline, &mut rng)
            .await?
        {
            Acquired::Granted { refusals } => refusals,
            Acquired::GaveUp => {
                tally.unfinished_wait_us = Some(micros(first_attempt.elapsed()));
                break;
            }
        };
        let granted = Instant::now();
        if granted > deadline {
            // Too late to count: give the lock back at once.
            config.strategy.release(conn, scripts, &lock).await?;
            tally.unfinished_wait_us = Some(micros(deadline - first_attempt));
            break;
        }
        tally.grants += 1;
        tally.refusals += refusals;
        record(&mut tally.acquire_us, granted - first_attempt);
        // Whoever asked before the key's last release was waiting for it.
        let last_release = released_at[key_index].load(Ordering::Acquire);
        if last_release > micros(first_attempt - start) {
            let granted_at = micros(granted - start);
            record_micros(
                &mut tally.handoff_us,
                granted_at.saturating_sub(last_release),
            );
        }
        if !hold.is_zero() {
            sleep(hold).await;
        }
        // Stamped before the command is sent: a waiter may be granted (and
        // read the stamp) before this contender sees its own reply.
        released_at[key_index].store(micros(start.elapsed()).max(1), Ordering::Release);
        if !config.strategy.release(conn, scripts, &lock).await? {
            tally.lost_leases += 1;
        }
        tally.cycles += 1;
    }
    Ok(tally)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn record(histogram: &mut Histogram<u64>, duration: Duration) {
    record_micros(histogram, micros(duration));
}

fn record_micros(histogram: &mut Histogram<u64>, us: u64) {
    histogram.saturating_record(us.max(1));
}

fn summarise(
    config: &LoadConfig,
    connections: usize,
    elapsed_s: f64,
    tallies: &[ContenderTally],
) -> LoadSummary {
    let mut acquire = new_histogram();
    let mut handoff = new_histogram();
    for tally in tallies {
        let _ = acquire.add(&tally.acquire_us);
        let _ = handoff.add(&tally.handoff_us);
    }
    let cycles_per_contender: Vec<u64> = tallies.iter().map(|t| t.cycles).collect();
    let cycles: u64 = cycles_per_contender.iter().sum();
    let grants: u64 = tallies.iter().map(|t| t.grants).sum();
    let refusals: u64 = tallies.iter().map(|t| t.refusals).sum();
    let unfinished: Vec<u64> = tallies
        .iter()
        .filter_map(|t| t.unfinished_wait_us)
        .collect();
    LoadSummary {
        strategy: config.strategy.name().to_string(),
        contenders: config.contenders,
        connections,
        keys: config.keys,
        partitioned: config.partitioned,
        hold_ms: config.hold_ms,
        retry_min_ms: config.retry.min_ms,
        retry_max_ms: config.retry.max_ms,
        elapsed_s,
        cycles,
        cycles_per_s: cycles as f64 / elapsed_s,
        acquire: Percentiles::of(&acquire),
        handoff: Percentiles::of(&handoff),
        refusals_per_grant: if grants == 0 {
            0.0
        } else {
            refusals as f64 / grants as f64
        },
        min_cycles_per_contender: cycles_per_contender.iter().copied().min().unwrap_or(0),
        max_cycles_per_contender: cycles_per_contender.iter().copied().max().unwrap_or(0),
        mean_cycles_per_contender: cycles as f64 / cycles_per_contender.len().max(1) as f64,
        jain_index: jain_index(&cycles_per_contender),
        waiting_at_end: unfinished.len() as u64,
        longest_unfinished_wait_us: unfinished.iter().copied().max().unwrap_or(0),
        lost_leases: tallies.iter().map(|t| t.lost_leases).sum(),
    }
}
