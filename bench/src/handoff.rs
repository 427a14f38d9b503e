//! Handoff latency behind `lock-handoff`: how long a lock sits idle between
//! its holder letting go and a client that was already waiting for it having
//! it, for each way of waiting ([`Recipe`]), and for a writer behind readers.
//!
//! One holder and one waiter per handoff, each on its own connection, in one
//! process, so both instants come from the same monotonic clock:
//!
//! - [`Scenario::Release`]: the holder takes the lock, the waiter starts
//!   waiting, and once it is seen waiting (queued, refused, or blocked in
//!   `BLPOP`) the holder keeps the lock a uniformly random `0..=hold_max_ms`
//!   more, so that the release lands at a random point of a poller's
//!   schedule. The sample runs from the instant just before the holder sends
//!   its release to the instant the waiter's grant arrives.
//! - [`Scenario::Expiry`]: the holder takes the lock with a short lease and
//!   never gives it back; the waiter arrives at a uniformly random point of
//!   the lease's first half (each round starts after a random pause of up
//!   to 100 ms, see [`EXPIRY_PHASE_JITTER`]). The sample runs from the lease's deadline, as
//!   the server reports it (`LOCK.INFO` `deadline`, or `PEXPIRETIME` for a
//!   string key: unix milliseconds), to the grant's arrival, read on the same
//!   host's wall clock.
//!
//! Every round runs each recipe once, in turn (reversed on odd rounds), on a
//! key of its own.
//!
//! [`Scenario::MassExpiry`] is the expiry under load: many keys whose leases
//! run out within the same second, a waiter on each (`mass_expiry.rs`, which
//! builds on this file).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::Script;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::time::{sleep, timeout, Instant};

use crate::load::RetryPolicy;
use crate::scripts;
use crate::stats::Spread;

/// `LOCK.ACQUIRE key ttl-ms TOKEN token WAIT wait-ms`: a waiter's request.
pub(crate) fn acquire_wait(key: &str, ttl_ms: u64, token: &str, wait_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key)
        .arg(ttl_ms)
        .arg("TOKEN")
        .arg(token)
        .arg("WAIT")
        .arg(wait_ms);
    cmd
}

/// How a client waits for a lock someone else holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    /// `LOCK.ACQUIRE key ttl TOKEN t WAIT ms`: the server queues the waiter
    /// and grants it inside the holder's `LOCK.RELEASE`, or from a timer at
    /// the lease's deadline.
    NativeWait,
    /// `SET key t NX PX ttl`, retried after a uniformly random 50–250 ms, as
    /// redsync does; released with the Lua compare-and-delete.
    SetnxPoll,
    /// python-redis-lock: `SET key t NX PX ttl`; when refused, `BLPOP
    /// signal:key <lock expire>` and try again. Released with its UNLOCK
    /// script, which pushes to `signal:key`.
    BlpopSignal,
    /// A writer waiting for readers: two readers hold the key (`LOCK.ACQUIRE
    /// … SHARED`), the writer queues with `LOCK.ACQUIRE … WAIT`, the first
    /// reader leaves (the writer still waits), then the last; the server
    /// grants the writer inside the last reader's `LOCK.RELEASE`, or from a
    /// timer at the later of the readers' deadlines.
    ReadersWait,
    /// A waiter for four keys at once (issue 28): the holder holds them
    /// (`LOCK.MACQUIRE 4`), the waiter queues on every one with
    /// `LOCK.MACQUIRE 4 … WAIT`, the holder gives back three of them (the
    /// waiter still waits), then the last; the server grants the waiter all
    /// four inside that last `LOCK.RELEASE`, or from a timer at the holder's
    /// deadline.
    MultiWait,
}

impl Recipe {
    pub const ALL: [Recipe; 5] = [
        Recipe::NativeWait,
        Recipe::SetnxPoll,
        Recipe::BlpopSignal,
        Recipe::ReadersWait,
        Recipe::MultiWait,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Recipe::NativeWait => "native-wait",
            Recipe::SetnxPoll => "setnx-poll",
            Recipe::BlpopSignal => "blpop-signal",
            Recipe::ReadersWait => "readers-wait",
            Recipe::MultiWait => "multi-wait",
        }
    }

    pub fn parse(name: &str) -> Option<Recipe> {
        Recipe::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// What ends the holder's tenure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// The holder releases.
    Release,
    /// The holder's lease runs out.
    Expiry,
    /// `keys` holders' leases run out within `spread_ms`, each with a
    /// waiter (`native-wait` only).
    MassExpiry,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::Release, Scenario::Expiry, Scenario::MassExpiry];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Release => "release",
            Scenario::Expiry => "expiry",
            Scenario::MassExpiry => "mass-expiry",
        }
    }

    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

#[derive(Clone, Debug)]
pub struct HandoffConfig {
    pub url: String,
    pub scenario: Scenario,
    pub recipes: Vec<Recipe>,
    pub rounds: usize,
    /// Release: after the waiter is seen waiting, the holder keeps the lock
    /// a uniformly random 0..=`hold_max_ms` more.
    pub hold_max_ms: u64,
    /// Every lease, the holder's and the waiter's. Expiry: the holder's
    /// lease that runs out, and the `BLPOP` timeout of the BLPOP recipe
    /// (python-redis-lock blocks for the lock's expire).
    pub ttl_ms: u64,
    pub retry: RetryPolicy,
    /// How long the BLPOP recipe's signal list lives (python-redis-lock's
    /// `signal_expire`, 1000 ms by default).
    pub signal_expire_ms: u64,
    pub key_prefix: String,
    pub seed: u64,
    /// Mass expiry: how many keys expire, each with a waiter, and within how
    /// many ms of each other (their deadlines spread evenly), the first one
    /// `lead_ms` after the holders take them (the waiters queue meanwhile).
    pub keys: usize,
    pub spread_ms: u64,
    pub lead_ms: u64,
}

/// One recipe's samples, in round order, and their percentiles (µs).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecipeResult {
    pub recipe: String,
    pub samples_us: Vec<f64>,
    /// Rounds not counted because the waiter was not seen waiting before the
    /// holder let go (none on an idle machine; on a busy one, an expiry
    /// round's waiter may come only after the lease ran out).
    pub discarded: u64,
    /// Why there is no sample at all, when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
    #[serde(flatten)]
    pub spread: Spread,
}

impl RecipeResult {
    pub(crate) fn new(recipe: Recipe, samples_us: Vec<f64>, discarded: u64) -> RecipeResult {
        let not_measured = (samples_us.is_empty() && discarded > 0).then(|| {
            format!(
                "in none of its {discarded} rounds was the waiter seen waiting before the holder \
                 let go (a busy machine)"
            )
        });
        RecipeResult {
            recipe: recipe.name().to_string(),
            spread: Spread::of(&samples_us),
            samples_us,
            discarded,
            not_measured,
        }
    }
}

/// What one `lock-handoff` run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HandoffSummary {
    pub scenario: Scenario,
    pub rounds: usize,
    pub hold_max_ms: u64,
    pub ttl_ms: u64,
    pub retry_min_ms: u64,
    pub retry_max_ms: u64,
    pub signal_expire_ms: u64,
    pub elapsed_s: f64,
    /// Keys per round (1 but for mass expiry), the spread asked for, and the
    /// largest span of the deadlines in a round as the server set them.
    #[serde(default = "one")]
    pub keys: usize,
    #[serde(default)]
    pub spread_ms: u64,
    #[serde(default)]
    pub deadline_span_ms: Option<i64>,
    /// Mass expiry, on the server's clock: the share of grants made in the
    /// first millisecond after the holder's deadline (the earliest allowed),
    /// and the latest grant, in ms after its deadline.
    #[serde(default)]
    pub server_first_ms_share: Option<f64>,
    #[serde(default)]
    pub server_max_ms: Option<i64>,
    pub recipes: Vec<RecipeResult>,
    /// Mass expiry: rounds run again because the machine was too slow for
    /// them (a lease ran out before the harness was ready for it), and
    /// those still too slow after every attempt, each with why: not
    /// measured.
    #[serde(default)]
    pub retried: u64,
    #[serde(default)]
    pub not_measured: Vec<String>,
}

fn one() -> usize {
    1
}

/// Before each expiry round, a uniformly random pause of up to this long, so
/// that rounds do not fall into step with the server's cron: Redis times out
/// a blocked `BLPOP` only when its event loop wakes, which an idle server
/// does every 100 ms (`hz 10`), so a round that starts just after a BLPOP
/// round ended would always meet the cron at the same phase.
pub(crate) const EXPIRY_PHASE_JITTER: Duration = Duration::from_millis(100);

/// No single handoff may take longer than this.
pub(crate) const ROUND_LIMIT: Duration = Duration::from_secs(30);

struct Scripts {
    /// Compare-and-delete (the polling recipe's release).
    release: Script,
    /// python-redis-lock's UNLOCK.
    unlock_signal: Script,
}

/// The keys of one recipe's lock.
struct Keys {
    lock: String,
    signal: String,
    /// `multi-wait`'s four keys, `{lock}:0` … `{lock}:3` (one hash tag: one
    /// Cluster slot); `lock` is the last of them, whose release is timed.
    set: Vec<String>,
}

/// How many keys the `multi-wait` waiter asks for.
pub const MULTI_KEYS: usize = 4;

impl Keys {
    fn of(prefix: &str, recipe: Recipe) -> Keys {
        let name = format!("{prefix}{}", recipe.name());
        let set: Vec<String> = match recipe {
            Recipe::MultiWait => (0..MULTI_KEYS).map(|i| format!("{{{name}}}:{i}")).collect(),
            _ => Vec::new(),
        };
        let lock = set.last().cloned().unwrap_or(name);
        Keys {
            signal: format!("signal:{lock}"),
            lock,
            set,
        }
    }
}

/// `LOCK.MACQUIRE n keys… ttl TOKEN token [WAIT wait-ms]`.
fn multi_acquire(keys: &[String], ttl_ms: u64, token: &str, wait_ms: Option<u64>) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.MACQUIRE");
    cmd.arg(keys.len())
        .arg(keys)
        .arg(ttl_ms)
        .arg("TOKEN")
        .arg(token);
    if let Some(wait_ms) = wait_ms {
        cmd.arg("WAIT").arg(wait_ms);
    }
    cmd
}

/// When the waiter was granted, on both clocks, and whether it was ever
/// refused first (always true for `native-wait`, which is checked on the
/// server instead).
struct Granted {
    at: Instant,
    unix_us: i64,
    refused_first: bool,
}

/// Run every round and summarise.
pub async fn run(config: HandoffConfig) -> Result<HandoffSummary, String> {
    if config.scenario == Scenario::MassExpiry {
        return Err("mass-expiry is run by mass_expiry::run".into());
    }
    if config.recipes.is_empty() || config.rounds == 0 {
        return Err("at least one recipe and one round".into());
    }
    if config.ttl_ms < 10 {
        return Err("--ttl-ms must be at least 10".into());
    }
    let client = redis::Client::open(config.url.as_str()).map_err(|e| e.to_string())?;
    let mut holder = connect(&client).await?;
    let waiter = connect(&client).await?;
    let scripts = Scripts {
        release: Script::new(scripts::RELEASE),
        unlock_signal: Script::new(scripts::SIGNAL_UNLOCK),
    };
    // Loaded up front, so that no timed call pays for a NOSCRIPT round trip.
    for script in [&scripts.release, &scripts.unlock_signal] {
        script
            .prepare_invoke()
            .load_async(&mut holder)
            .await
            .map_err(|e| format!("SCRIPT LOAD: {e}"))?;
    }
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); config.recipes.len()];
    let mut discarded = vec![0u64; config.recipes.len()];
    let start = Instant::now();
    for round in 0..config.rounds {
        let mut order: Vec<usize> = (0..config.recipes.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let recipe = config.recipes[index];
            let keys = Keys::of(&config.key_prefix, recipe);
            let waiter_seed = rng.gen();
            let one = async {
                match config.scenario {
                    Scenario::Release => {
                        release_round(
                            recipe,
                            &mut holder,
                            &waiter,
                            &scripts,
                            &keys,
                            &config,
                            &mut rng,
                            waiter_seed,
                        )
                        .await
                    }
                    Scenario::Expiry | Scenario::MassExpiry => {
                        expiry_round(
                            recipe,
                            &mut holder,
                            &waiter,
                            &keys,
                            &config,
                            &mut rng,
                            waiter_seed,
                        )
                        .await
                    }
                }
            };
            let sample = timeout(ROUND_LIMIT, one)
                .await
                .map_err(|_| format!("{}: a handoff took over 30 s", recipe.name()))?
                .map_err(|e| format!("{}: {e}", recipe.name()))?;
            match sample {
                Some(us) => samples[index].push(us),
                None => discarded[index] += 1,
            }
            let _: () = redis::cmd("DEL")
                .arg(&keys.lock)
                .arg(&keys.signal)
                .arg(&keys.set)
                .query_async(&mut holder)
                .await
                .map_err(|e| format!("DEL: {e}"))?;
        }
    }
    Ok(HandoffSummary {
        scenario: config.scenario,
        rounds: config.rounds,
        hold_max_ms: config.hold_max_ms,
        ttl_ms: config.ttl_ms,
        retry_min_ms: config.retry.min_ms,
        retry_max_ms: config.retry.max_ms,
        signal_expire_ms: config.signal_expire_ms,
        elapsed_s: start.elapsed().as_secs_f64(),
        keys: 1,
        spread_ms: 0,
        deadline_span_ms: None,
        server_first_ms_share: None,
        server_max_ms: None,
        retried: 0,
        not_measured: Vec::new(),
        recipes: config
            .recipes
            .iter()
            .zip(samples)
            .zip(discarded)
            .map(|((&recipe, samples), discarded)| RecipeResult::new(recipe, samples, discarded))
            .collect(),
    })
}

/// One handoff on release: µs from the release being sent to the grant
/// arriving, or `None` when the waiter was not seen waiting.
#[allow(clippy::too_many_arguments)]
async fn release_round(
    recipe: Recipe,
    holder: &mut MultiplexedConnection,
    waiter: &MultiplexedConnection,
    scripts: &Scripts,
    keys: &Keys,
    config: &HandoffConfig,
    rng: &mut SmallRng,
    waiter_seed: u64,
) -> Result<Option<f64>, String> {
    let ttl_ms = config.ttl_ms;
    if !try_acquire(recipe, holder, keys, "holder", ttl_ms).await? {
        return Err(format!("{} was not free", keys.lock));
    }
    let (refused_tx, refused_rx) = oneshot::channel();
    let waiting = spawn_waiter(
        recipe,
        waiter.clone(),
        keys,
        config,
        Duration::ZERO,
        ttl_ms,
        waiter_seed,
        refused_tx,
    );
    // Until the waiter really waits: queued on the server, refused (it now
    // sleeps until its next poll), or blocked in BLPOP.
    let seen_waiting = match recipe {
        Recipe::NativeWait => wait_until_queued(holder, &keys.lock).await?,
        Recipe::SetnxPoll => refused_rx.await.is_ok(),
        Recipe::BlpopSignal => refused_rx.await.is_ok() && wait_until_blocked(holder).await?,
        Recipe::ReadersWait => {
            // The first reader leaves: the writer must go on waiting.
            let queued = wait_until_queued(holder, &keys.lock).await?;
            let n: i64 = query(
                holder,
                redis::cmd("LOCK.RELEASE").arg(&keys.lock).arg(READERS[0]),
            )
            .await?;
            if n != 1 {
                return Err("the first reader's release found no lease".into());
            }
            queued && wait_until_queued(holder, &keys.lock).await?
        }
        Recipe::MultiWait => {
            // Queued on every key; the holder gives back all but the last,
            // and the waiter must go on waiting.
            let mut queued = true;
            for key in &keys.set {
                queued &= wait_until_queued(holder, key).await?;
            }
            for key in &keys.set[..MULTI_KEYS - 1] {
                let n: i64 =
                    query(holder, redis::cmd("LOCK.RELEASE").arg(key).arg("holder")).await?;
                if n != 1 {
                    return Err(format!("the holder's release of {key} found no lease"));
                }
            }
            queued && wait_until_queued(holder, &keys.lock).await?
        }
    };
    let hold_us = rng.gen_range(0..=config.hold_max_ms * 1000);
    if hold_us > 0 {
        sleep(Duration::from_micros(hold_us)).await;
    }
    let released_at = Instant::now();
    let released = match recipe {
        Recipe::NativeWait | Recipe::ReadersWait | Recipe::MultiWait => {
            let token = if recipe == Recipe::ReadersWait {
                READERS[1]
            } else {
                "holder"
            };
            let n: i64 = query(
                holder,
                redis::cmd("LOCK.RELEASE").arg(&keys.lock).arg(token),
            )
            .await?;
            n == 1
        }
        Recipe::SetnxPoll => {
            let n: i64 = scripts
                .release
                .key(&keys.lock)
                .arg("holder")
                .invoke_async(holder)
                .await
                .map_err(|e| e.to_string())?;
            n == 1
        }
        Recipe::BlpopSignal => {
            // python-redis-lock's UNLOCK replies 0 when it released.
            let n: i64 = scripts
                .unlock_signal
                .key(&keys.lock)
                .key(&keys.signal)
                .arg("holder")
                .arg(config.signal_expire_ms)
                .invoke_async(holder)
                .await
                .map_err(|e| e.to_string())?;
            n == 0
        }
    };
    if !released {
        return Err("the holder's release found the lock gone".into());
    }
    let granted = waiting
        .await
        .map_err(|e| format!("waiter panicked: {e}"))??;
    if granted.at < released_at {
        return Err("the waiter was granted before the holder let go".into());
    }
    Ok((seen_waiting && granted.refused_first)
        .then(|| granted.at.duration_since(released_at).as_secs_f64() * 1e6))
}

/// One handoff on expiry: µs from the lease's deadline to the grant
/// arriving, or `None` when the waiter was not seen waiting in time.
async fn expiry_round(
    recipe: Recipe,
    holder: &mut MultiplexedConnection,
    waiter: &MultiplexedConnection,
    keys: &Keys,
    config: &HandoffConfig,
    rng: &mut SmallRng,
    waiter_seed: u64,
) -> Result<Option<f64>, String> {
    let ttl_ms = config.ttl_ms;
    sleep(Duration::from_micros(
        rng.gen_range(0..=micros(EXPIRY_PHASE_JITTER)),
    ))
    .await;
    let deadline_ms = take_short(recipe, holder, keys, ttl_ms).await?;
    let arrival = Duration::from_micros(rng.gen_range(0..=ttl_ms * 1000 / 2));
    let (refused_tx, _refused_rx) = oneshot::channel();
    let waiting = spawn_waiter(
        recipe,
        waiter.clone(),
        keys,
        config,
        arrival,
        ttl_ms,
        waiter_seed,
        refused_tx,
    );
    let seen_waiting = match recipe {
        // Queued while the holder's lease still ran.
        Recipe::NativeWait | Recipe::ReadersWait | Recipe::MultiWait => {
            wait_until_queued(holder, &keys.lock).await?
        }
        _ => true,
    };
    let granted = waiting
        .await
        .map_err(|e| format!("waiter panicked: {e}"))??;
    Ok((seen_waiting && granted.refused_first)
        .then(|| (granted.unix_us - deadline_ms * 1000) as f64))
}

/// The holder takes the lock the recipe's way with a `ttl_ms` lease, and
/// reads its deadline (unix ms) in the same `MULTI`: the server's deadline,
/// however late the harness gets to it (a short lease read afterwards can
/// be gone on a busy machine). `LOCK.INFO` `deadline` is the readers' later
/// one for a shared key and the set's common one for multi-wait;
/// `PEXPIRETIME` the string key's.
async fn take_short(
    recipe: Recipe,
    holder: &mut MultiplexedConnection,
    keys: &Keys,
    ttl_ms: u64,
) -> Result<i64, String> {
    let lock = keys.lock.as_str();
    let mut pipe = redis::pipe();
    pipe.atomic();
    match recipe {
        Recipe::NativeWait => {
            pipe.add_command(native_acquire_cmd(lock, "holder", ttl_ms, false));
        }
        Recipe::ReadersWait => {
            for reader in READERS {
                pipe.add_command(native_acquire_cmd(lock, reader, ttl_ms, true));
            }
        }
        Recipe::MultiWait => {
            pipe.add_command(multi_acquire(&keys.set, ttl_ms, "holder", None));
        }
        Recipe::SetnxPoll | Recipe::BlpopSignal => {
            pipe.add_command(set_nx_cmd(lock, "holder", ttl_ms));
        }
    }
    let native = !matches!(recipe, Recipe::SetnxPoll | Recipe::BlpopSignal);
    if native {
        pipe.cmd("LOCK.INFO").arg(lock);
    } else {
        pipe.cmd("PEXPIRETIME").arg(lock);
    }
    let mut replies: Vec<redis::Value> = pipe
        .query_async(holder)
        .await
        .map_err(|e| format!("take with a {ttl_ms} ms lease: {e}"))?;
    let deadline = replies.pop();
    if replies.contains(&redis::Value::Nil) {
        return Err(format!("{lock} was not free"));
    }
    let deadline_ms = match deadline {
        Some(redis::Value::Int(at)) if !native => Some(at),
        Some(info) if native => {
            let fields: Option<HashMap<String, redis::Value>> =
                redis::from_redis_value(&info).map_err(|e| format!("LOCK.INFO: {e}"))?;
            fields.and_then(|f| match f.get("deadline") {
                Some(redis::Value::Int(at)) => Some(*at),
                _ => None,
            })
        }
        _ => None,
    };
    deadline_ms
        .filter(|&at| at > 0)
        .ok_or_else(|| format!("{lock}: no deadline in the grant's own MULTI"))
}

/// The waiter, on its own task and connection: waits `arrival`, then takes
/// the lock the recipe's way, telling `refused` after its first refusal.
#[allow(clippy::too_many_arguments)]
fn spawn_waiter(
    recipe: Recipe,
    mut conn: MultiplexedConnection,
    keys: &Keys,
    config: &HandoffConfig,
    arrival: Duration,
    ttl_ms: u64,
    seed: u64,
    refused: oneshot::Sender<()>,
) -> tokio::task::JoinHandle<Result<Granted, String>> {
    let lock = keys.lock.clone();
    let signal = keys.signal.clone();
    let set = keys.set.clone();
    let retry = config.retry;
    tokio::spawn(async move {
        if !arrival.is_zero() {
            sleep(arrival).await;
        }
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut refused = Some(refused);
        let mut refused_first = false;
        loop {
            let granted = match recipe {
                Recipe::NativeWait | Recipe::ReadersWait => {
                    let wait_ms = ROUND_LIMIT.as_millis() as u64;
                    let reply: Option<(Vec<u8>, u64)> =
                        query(&mut conn, &acquire_wait(&lock, ttl_ms, "waiter", wait_ms)).await?;
                    if reply.is_none() {
                        return Err("the WAIT timed out".into());
                    }
                    // Whether it was queued first is checked on the server.
                    refused_first = true;
                    true
                }
                Recipe::MultiWait => {
                    let wait_ms = ROUND_LIMIT.as_millis() as u64;
                    let cmd = multi_acquire(&set, ttl_ms, "waiter", Some(wait_ms));
                    let reply: Option<(Vec<u8>, u64)> = query(&mut conn, &cmd).await?;
                    if reply.is_none() {
                        return Err("the WAIT timed out".into());
                    }
                    refused_first = true;
                    true
                }
                _ => {
                    let keys = Keys {
                        lock: lock.clone(),
                        signal: signal.clone(),
                        set: Vec::new(),
                    };
                    try_acquire(recipe, &mut conn, &keys, "waiter", ttl_ms).await?
                }
            };
            if granted {
                return Ok(Granted {
                    at: Instant::now(),
                    unix_us: unix_us_now(),
                    refused_first,
                });
            }
            refused_first = true;
            if let Some(tx) = refused.take() {
                let _ = tx.send(());
            }
            match recipe {
                Recipe::NativeWait | Recipe::ReadersWait | Recipe::MultiWait => {
                    unreachable!("WAIT replies only with a grant")
                }
                Recipe::SetnxPoll => sleep(retry.next_delay(&mut rng)).await,
                Recipe::BlpopSignal => {
                    // python-redis-lock blocks for the lock's expire.
                    let _: Option<(Vec<u8>, Vec<u8>)> = query(
                        &mut conn,
                        redis::cmd("BLPOP")
                            .arg(&signal)
                            .arg(format!("{:.3}", ttl_ms as f64 / 1000.0)),
                    )
                    .await?;
                }
            }
        }
    })
}

/// The tokens of the two readers of the `readers-wait` recipe, in the order
/// they leave.
const READERS: [&str; 2] = ["reader-1", "reader-2"];

/// One attempt without waiting: `LOCK.ACQUIRE … TOKEN` or `SET … NX PX`; for
/// the `readers-wait` recipe (whose waiter never comes here), both readers'
/// `LOCK.ACQUIRE … SHARED` under the tokens [`READERS`] (`token` unused);
/// for `multi-wait` (likewise), `LOCK.MACQUIRE` of its four keys.
async fn try_acquire(
    recipe: Recipe,
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
    ttl_ms: u64,
) -> Result<bool, String> {
    let lock = keys.lock.as_str();
    Ok(match recipe {
        Recipe::MultiWait => {
            let reply: Option<(Vec<u8>, u64)> =
                query(conn, &multi_acquire(&keys.set, ttl_ms, token, None)).await?;
            reply.is_some()
        }
        Recipe::NativeWait => native_acquire(conn, lock, token, ttl_ms, false).await?,
        Recipe::ReadersWait => {
            let mut both = true;
            for reader in READERS {
                both &= native_acquire(conn, lock, reader, ttl_ms, true).await?;
            }
            both
        }
        Recipe::SetnxPoll | Recipe::BlpopSignal => {
            let reply: Option<String> = query(conn, &set_nx_cmd(lock, token, ttl_ms)).await?;
            reply.is_some()
        }
    })
}

/// `SET lock token NX PX ttl`.
fn set_nx_cmd(lock: &str, token: &str, ttl_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(lock).arg(token).arg("NX").arg("PX").arg(ttl_ms);
    cmd
}

/// `LOCK.ACQUIRE lock ttl TOKEN token [SHARED]`.
fn native_acquire_cmd(lock: &str, token: &str, ttl_ms: u64, shared: bool) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(lock).arg(ttl_ms).arg("TOKEN").arg(token);
    if shared {
        cmd.arg("SHARED");
    }
    cmd
}

/// `LOCK.ACQUIRE lock ttl TOKEN token [SHARED]`: whether it was granted.
async fn native_acquire(
    conn: &mut MultiplexedConnection,
    lock: &str,
    token: &str,
    ttl_ms: u64,
    shared: bool,
) -> Result<bool, String> {
    let reply: Option<(Vec<u8>, u64)> =
        query(conn, &native_acquire_cmd(lock, token, ttl_ms, shared)).await?;
    Ok(reply.is_some())
}

/// `LOCK.INFO`'s integer fields as a map (null: the key is free); the
/// text fields (`mode`, `owner`) are left out.
pub(crate) async fn lock_info(
    conn: &mut MultiplexedConnection,
    lock: &str,
) -> Result<Option<HashMap<String, i64>>, String> {
    let fields: Option<HashMap<String, redis::Value>> =
        query(conn, redis::cmd("LOCK.INFO").arg(lock)).await?;
    Ok(fields.map(|fields| {
        fields
            .into_iter()
            .filter_map(|(name, value)| match value {
                redis::Value::Int(n) => Some((name, n)),
                _ => None,
            })
            .collect()
    }))
}

/// Poll `LOCK.INFO` until someone waits for `lock` (true), or the lock is
/// gone or has another holder (false: the wait was never seen).
pub(crate) async fn wait_until_queued(
    conn: &mut MultiplexedConnection,
    lock: &str,
) -> Result<bool, String> {
    let start = Instant::now();
    let mut fence = None;
    loop {
        let Some(info) = lock_info(conn, lock).await? else {
            return Ok(false);
        };
        if info.get("waiters").copied().unwrap_or(0) > 0 {
            return Ok(true);
        }
        let now = info.get("fence").copied();
        if fence.is_some_and(|f| Some(f) != now) {
            return Ok(false);
        }
        fence = now;
        if start.elapsed() > ROUND_LIMIT {
            return Ok(false);
        }
        sleep(Duration::from_micros(200)).await;
    }
}

/// Poll `INFO clients` until a client is blocked (the waiter's `BLPOP`; the
/// run is alone on its server).
async fn wait_until_blocked(conn: &mut MultiplexedConnection) -> Result<bool, String> {
    let start = Instant::now();
    loop {
        let info: String = query(conn, redis::cmd("INFO").arg("clients")).await?;
        let blocked = info
            .lines()
            .find_map(|line| line.strip_prefix("blocked_clients:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if blocked > 0 {
            return Ok(true);
        }
        if start.elapsed() > ROUND_LIMIT {
            return Ok(false);
        }
        sleep(Duration::from_micros(200)).await;
    }
}

/// A connection of its own (a blocked command holds up its connection).
pub(crate) async fn connect(client: &redis::Client) -> Result<MultiplexedConnection, String> {
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connect to {:?}: {e}", client.get_connection_info().addr))
}

pub(crate) async fn query<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    cmd.query_async(conn).await.map_err(|e| e.to_string())
}

pub(crate) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

pub(crate) fn unix_us_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipe_and_scenario_names_round_trip() {
        for recipe in Recipe::ALL {
            assert_eq!(Recipe::parse(recipe.name()), Some(recipe));
        }
        for scenario in Scenario::ALL {
            assert_eq!(Scenario::parse(scenario.name()), Some(scenario));
        }
        assert_eq!(Recipe::parse("nope"), None);
    }

    #[test]
    fn result_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let r = RecipeResult::new(Recipe::SetnxPoll, samples, 2);
        assert_eq!(r.spread.p50_us, Some(50.0));
        assert_eq!(r.spread.p99_us, Some(99.0));
        assert_eq!(r.spread.max_us, Some(100.0));
        assert_eq!(r.discarded, 2);
        let empty = RecipeResult::new(Recipe::NativeWait, Vec::new(), 0);
        assert_eq!(empty.spread.p50_us, None);
    }
}
