//! Throughput per command with `redis-benchmark`: each native command against
//! what users run instead, interleaved run by run on one server.

use std::path::Path;

use serde::Serialize;

use crate::scripts;
use crate::server::{
    bench_key, dbsize, flushall, info_field, info_int, pipelined, query, run_against, Server,
};
use crate::stats::median;

/// The 36-byte token of the rows that pass one (the length of a drawn UUID).
pub const TOKEN: &str = "0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c6";
/// Lease of the locks prepared for EXTEND and RELEASE: long enough that none
/// runs out during a phase.
pub const PREPARED_TTL_MS: u64 = 600_000;
const LOCK_PREFIX: &str = "lk:";
const STRING_PREFIX: &str = "sk:";
/// The keys the GUARD rows write, each run over the same range.
const DATA_PREFIX: &str = "dk:";
/// What the GUARD rows write (and what the data keys hold before they run).
pub const GUARDED_VALUE: &str = "v";
/// The semaphores (`SEM.*`) and the Lua recipe's sorted sets of permits.
const SEM_PREFIX: &str = "sm:";
const PERMITS_PREFIX: &str = "zs:";
/// The read locks (`LOCK.ACQUIRE … SHARED`) and the Lua recipe's hashes.
const SHARED_PREFIX: &str = "rk:";
const READ_HASH_PREFIX: &str = "hk:";
/// The limit of every benchmarked semaphore: far above the few holders a key
/// drawn at random gets in a run, so that every acquire is a grant.
pub const SEM_LIMIT: u32 = 10;
/// The second holder of every key the SEM and SHARED release rows run on:
/// the key outlives the caller's release, as a semaphore or read lock with
/// other holders does (`SEM.RELEASE` of a key that is gone replies
/// `WRONGTYPE`, which would stop `redis-benchmark`).
/// The two locks of each multi-key request (issue 28): `LOCK.MACQUIRE 2`'s
/// and the Lua recipe's, each drawn from a range of its own so that a
/// request never names one key twice.
const MULTI_LOCK_PREFIXES: [&str; 2] = ["ma:", "mb:"];
const MULTI_STRING_PREFIXES: [&str; 2] = ["sa:", "sb:"];
const OTHER_TOKEN: &str = "5d1c7e8a-9b2f-4c3d-8e4f-a0b1c2d3e4f5";
/// A 36-byte token of its own for each request of the SEM and SHARED
/// acquire rows (`redis-benchmark` puts twelve random digits in place of
/// `__rand_int__`): each adds a holder, as a new client would.
const FRESH_TOKEN: &str = "0b8e4f53-3c43-4a0e-9f53-__rand_int__";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Group {
    Acquire,
    Extend,
    Release,
    Guard,
    /// `SEM.ACQUIRE` against the Lua semaphore, from an empty database.
    SemAcquire,
    /// `SEM.RELEASE` against the Lua semaphore's, one holder per key.
    SemRelease,
    /// `LOCK.ACQUIRE … SHARED` against the Lua read lock, from empty.
    SharedAcquire,
    /// `LOCK.RELEASE` of a reader against the Lua read unlock.
    SharedRelease,
    /// `LOCK.MACQUIRE 2` against the Lua two-key acquire with a fence, from
    /// an empty database.
    MultiAcquire,
    /// `LOCK.MRELEASE 2` against the Lua two-key compare-and-delete, both
    /// keys held by the caller.
    MultiRelease,
}

impl Group {
    pub const ALL: [Group; 10] = [
        Group::Acquire,
        Group::Extend,
        Group::Release,
        Group::Guard,
        Group::SemAcquire,
        Group::SemRelease,
        Group::SharedAcquire,
        Group::SharedRelease,
        Group::MultiAcquire,
        Group::MultiRelease,
    ];

    /// The group's name for `lock-bench --only`.
    pub fn name(self) -> &'static str {
        match self {
            Group::Acquire => "acquire",
            Group::Extend => "extend",
            Group::Release => "release",
            Group::Guard => "guard",
            Group::SemAcquire => "sem-acquire",
            Group::SemRelease => "sem-release",
            Group::SharedAcquire => "shared-acquire",
            Group::SharedRelease => "shared-release",
            Group::MultiAcquire => "multi-acquire",
            Group::MultiRelease => "multi-release",
        }
    }

    /// A name for `--only` that picks a pair of groups: `sem`, `shared` and
    /// `multi` (acquire and release, which the cycle ratios need together).
    pub fn family(self) -> Option<&'static str> {
        match self {
            Group::SemAcquire | Group::SemRelease => Some("sem"),
            Group::SharedAcquire | Group::SharedRelease => Some("shared"),
            Group::MultiAcquire | Group::MultiRelease => Some("multi"),
            _ => None,
        }
    }

    /// The locks each request takes or gives back.
    fn keys_per_request(self) -> u64 {
        match self {
            Group::MultiAcquire | Group::MultiRelease => 2,
            _ => 1,
        }
    }

    /// How many times the settings' keyspace its rows draw from. The MULTI
    /// acquire rows draw a token per request from the same range as the
    /// keys (`__rand_int__`), and `LOCK.MACQUIRE` answers an error (which
    /// stops `redis-benchmark`) when a token asks for a key it holds from
    /// another set: with 300,000 requests over 1,000,000 numbers that
    /// happens about once in ten runs, over a hundred times the range
    /// about once in a hundred thousand (both sides draw from it alike).
    pub fn keyspace_factor(self) -> u64 {
        match self {
            Group::MultiAcquire => 100,
            _ => 1,
        }
    }

    /// Its runs leave the keys as they found them (leases moved, values
    /// overwritten), so one preparation serves the whole phase.
    fn keeps_keys(self) -> bool {
        matches!(self, Group::Extend | Group::Guard)
    }
}

/// The keys a run needs in place before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Prep {
    /// An empty database (`FLUSHALL` before each run).
    Empty,
    /// Every `lk:` key of the range held with [`TOKEN`] by `LOCK.ACQUIRE`.
    HeldLocks,
    /// Every `sk:` key of the range set to [`TOKEN`] with a TTL, as the Lua
    /// recipe (or `SET NX PX`) leaves it.
    HeldStrings,
    /// Every `dk:` key of the range set to [`GUARDED_VALUE`], so that every
    /// guarded or plain write overwrites a key, as a job updating its
    /// resource does.
    Data,
    /// Every `sm:` key of the range a semaphore with two permits out, to
    /// [`TOKEN`] and [`OTHER_TOKEN`] (`SEM.ACQUIRE`).
    Semaphores,
    /// Every `zs:` key of the range a sorted set with those two permits, as
    /// the Lua semaphore leaves it.
    PermitSets,
    /// Every `rk:` key of the range held shared by those two tokens.
    ReadLocks,
    /// Every `hk:` key of the range a hash read-held once by each of them,
    /// with its lease, as the Lua read lock leaves it.
    ReadHashes,
    /// Every `ma:` and `mb:` key of the range held with [`TOKEN`]
    /// (`LOCK.MACQUIRE 2` of the pair with the same number).
    HeldLockPairs,
    /// Every `sa:` and `sb:` key of the range set to [`TOKEN`] with a TTL,
    /// as the Lua two-key acquire leaves them.
    HeldStringPairs,
}

#[derive(Clone, Debug, Serialize)]
pub struct Case {
    pub id: &'static str,
    /// What the row measures, in a few words.
    pub description: &'static str,
    pub group: Group,
    /// The command as `redis-benchmark` gets it (`__rand_int__` is a key).
    pub args: Vec<String>,
    pub prep: Prep,
    /// Needs `SET … IFEQ` (Valkey 8.1+).
    pub needs_ifeq: bool,
}

/// A ratio row: `native` against `baseline`, higher is better for native.
/// A side of several cases is a cycle (acquire, then release): its time per
/// cycle is the sum of its cases' times per request.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub title: &'static str,
    pub native: &'static [&'static str],
    pub baseline: &'static [&'static str],
    /// The issue's goal for the ratio at pipeline 16, if any.
    pub goal_p16: Option<f64>,
    /// Its goal on a server whose propagation has a reader (`+ AOF`,
    /// `+ replica`), where it differs.
    pub goal_p16_read: Option<f64>,
}

impl Comparison {
    /// A comparison of shared holders: semaphores (`SEM.*`) or readers
    /// (`… SHARED`).
    pub fn is_shared(&self) -> bool {
        self.native
            .iter()
            .any(|id| id.starts_with("sem.") || id.starts_with("shared."))
    }

    /// A comparison of multi-key locks (`LOCK.MACQUIRE`, `LOCK.MRELEASE`).
    pub fn is_multi(&self) -> bool {
        self.native.iter().any(|id| id.starts_with("multi."))
    }

    /// The goal at pipeline 16 on the server labelled `label`.
    pub fn goal_on(&self, label: &str) -> Option<f64> {
        let read = label.ends_with("+ AOF") || label.ends_with("+ replica");
        match self.goal_p16_read {
            Some(goal) if read => Some(goal),
            _ => self.goal_p16,
        }
    }
}

pub const COMPARISONS: [Comparison; 18] = [
    Comparison {
        title: "LOCK.ACQUIRE vs Lua acquire-with-fence",
        native: &["lock.acquire"],
        baseline: &["lua.acquire"],
        goal_p16: Some(1.8),
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.ACQUIRE TOKEN vs Lua acquire-with-fence",
        native: &["lock.acquire.token"],
        baseline: &["lua.acquire"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.ACQUIRE vs SET NX PX (no fence)",
        native: &["lock.acquire"],
        baseline: &["set.nx"],
        goal_p16: Some(0.95),
        goal_p16_read: Some(0.90),
    },
    Comparison {
        title: "LOCK.ACQUIRE TOKEN vs SET NX PX (no fence)",
        native: &["lock.acquire.token"],
        baseline: &["set.nx"],
        goal_p16: Some(0.95),
        goal_p16_read: Some(0.90),
    },
    Comparison {
        title: "LOCK.RELEASE vs Lua compare-and-delete",
        native: &["lock.release"],
        baseline: &["lua.release"],
        goal_p16: Some(1.3),
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.EXTEND vs Lua compare-and-pexpire",
        native: &["lock.extend"],
        baseline: &["lua.extend"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.EXTEND vs SET IFEQ PX (Valkey)",
        native: &["lock.extend"],
        baseline: &["set.ifeq"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.GUARD … SET vs Lua compare-and-set",
        native: &["lock.guard"],
        baseline: &["lua.guard"],
        goal_p16: Some(1.5),
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.GUARD … SET vs plain SET (no guard)",
        native: &["lock.guard"],
        baseline: &["set"],
        goal_p16: Some(0.75),
        goal_p16_read: None,
    },
    Comparison {
        title: "SEM.ACQUIRE vs Lua semaphore acquire (sorted set)",
        native: &["sem.acquire"],
        baseline: &["lua.sem.acquire"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "SEM.RELEASE vs Lua semaphore release (ZREM)",
        native: &["sem.release"],
        baseline: &["lua.sem.release"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "SEM.ACQUIRE + SEM.RELEASE vs the Lua semaphore (cycle)",
        native: &["sem.acquire", "sem.release"],
        baseline: &["lua.sem.acquire", "lua.sem.release"],
        goal_p16: Some(2.0),
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.ACQUIRE … SHARED vs Lua read lock (hash)",
        native: &["shared.acquire"],
        baseline: &["lua.read.acquire"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.RELEASE of a reader vs Lua read unlock",
        native: &["shared.release"],
        baseline: &["lua.read.release"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.ACQUIRE … SHARED + LOCK.RELEASE vs the Lua read lock (cycle)",
        native: &["shared.acquire", "shared.release"],
        baseline: &["lua.read.acquire", "lua.read.release"],
        goal_p16: Some(2.0),
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.MACQUIRE 2 vs Lua two-key acquire-with-fence",
        native: &["multi.acquire"],
        baseline: &["lua.multi.acquire"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.MRELEASE 2 vs Lua two-key compare-and-delete",
        native: &["multi.release"],
        baseline: &["lua.multi.release"],
        goal_p16: None,
        goal_p16_read: None,
    },
    Comparison {
        title: "LOCK.MACQUIRE 2 + LOCK.MRELEASE 2 vs the Lua two-key lock (cycle)",
        native: &["multi.acquire", "multi.release"],
        baseline: &["lua.multi.acquire", "lua.multi.release"],
        goal_p16: Some(1.5),
        goal_p16_read: None,
    },
];

/// The SHA1s of the Lua recipe's scripts, as `SCRIPT LOAD` gave them.
pub struct LoadedScripts {
    pub acquire: String,
    pub release: String,
    pub extend: String,
    pub guard: String,
    pub sem_acquire: String,
    pub sem_release: String,
    pub read_acquire: String,
    pub read_release: String,
    pub multi_acquire: String,
    pub multi_release: String,
}

impl LoadedScripts {
    pub fn load(conn: &mut redis::Connection) -> Result<LoadedScripts, String> {
        let mut load = |script: &str| -> Result<String, String> {
            query(conn, redis::cmd("SCRIPT").arg("LOAD").arg(script))
        };
        Ok(LoadedScripts {
            acquire: load(scripts::ACQUIRE)?,
            release: load(scripts::RELEASE)?,
            extend: load(scripts::EXTEND)?,
            guard: load(scripts::GUARD)?,
            sem_acquire: load(scripts::SEM_ACQUIRE)?,
            sem_release: load(scripts::SEM_RELEASE)?,
            read_acquire: load(scripts::READ_ACQUIRE)?,
            read_release: load(scripts::READ_RELEASE)?,
            multi_acquire: load(scripts::MULTI_ACQUIRE)?,
            multi_release: load(scripts::MULTI_RELEASE)?,
        })
    }
}

/// Every command measured, calling the Lua scripts by the SHA1s in `sha`.
///
/// The GUARD rows guard each write with one of the range's locks, all held
/// by [`TOKEN`], as jobs that each hold the lock of the resource they update:
/// a lock per resource, spread over the keyspace like every other row, not
/// one hot lock per client. `redis-benchmark` draws every `__rand_int__` of a
/// request on its own, so the lock and the data key of one request are not
/// the same number; the work is the same (a held lock looked up, then a data
/// key written, each in a large keyspace).
///
/// The SEM and SHARED acquire rows give each request a token of its own
/// ([`FRESH_TOKEN`]), so that each adds a holder (a key drawn twice gets a
/// second one), and so do the MULTI acquire rows (`LOCK.MACQUIRE` of a set
/// that one of its keys already holds under the same token, from another
/// set, is an error, which would stop `redis-benchmark`); their release rows run on keys held by [`TOKEN`] and
/// [`OTHER_TOKEN`], and release [`TOKEN`]'s hold.
#[rustfmt::skip] // a table: one case a row
pub fn cases(sha: &LoadedScripts) -> Vec<Case> {
    let lock = &format!("{LOCK_PREFIX}__rand_int__");
    let string = &format!("{STRING_PREFIX}__rand_int__");
    let data = &format!("{DATA_PREFIX}__rand_int__");
    let sem = &format!("{SEM_PREFIX}__rand_int__");
    let permits = &format!("{PERMITS_PREFIX}__rand_int__");
    let shared = &format!("{SHARED_PREFIX}__rand_int__");
    let read_hash = &format!("{READ_HASH_PREFIX}__rand_int__");
    let [multi_a, multi_b] = &MULTI_LOCK_PREFIXES.map(|p| format!("{p}__rand_int__"));
    let [string_a, string_b] = &MULTI_STRING_PREFIXES.map(|p| format!("{p}__rand_int__"));
    let limit = &SEM_LIMIT.to_string();
    let ttl = "30000";
    let held_ttl = &PREPARED_TTL_MS.to_string();
    let case = |id, description, group, prep, args: &[&str]| Case {
        id,
        description,
        group,
        args: args.iter().map(|s| s.to_string()).collect(),
        prep,
        needs_ifeq: args.contains(&"IFEQ"),
    };
    use Group::*;
    use Prep::*;
    vec![
        case("lock.acquire", "LOCK.ACQUIRE, server-drawn UUID token", Acquire, Empty,
            &["LOCK.ACQUIRE", lock, ttl]),
        case("lock.acquire.token", "LOCK.ACQUIRE with a 36-byte TOKEN", Acquire, Empty,
            &["LOCK.ACQUIRE", lock, ttl, "TOKEN", TOKEN]),
        case("lua.acquire", "Lua acquire-with-fence (EVALSHA), global fence key", Acquire, Empty,
            &["EVALSHA", &sha.acquire, "2", string, scripts::GLOBAL_FENCE_KEY, TOKEN, ttl]),
        case("set.nx", "SET NX PX (no fence, the ceiling)", Acquire, Empty,
            &["SET", string, TOKEN, "NX", "PX", ttl]),
        case("lock.extend", "LOCK.EXTEND by the holder", Extend, HeldLocks,
            &["LOCK.EXTEND", lock, TOKEN, held_ttl]),
        case("lua.extend", "Lua compare-and-pexpire by the holder", Extend, HeldStrings,
            &["EVALSHA", &sha.extend, "1", string, TOKEN, held_ttl]),
        case("set.ifeq", "SET IFEQ PX by the holder (Valkey 8.1 native)", Extend, HeldStrings,
            &["SET", string, TOKEN, "IFEQ", TOKEN, "PX", held_ttl]),
        case("lock.release", "LOCK.RELEASE by the holder", Release, HeldLocks,
            &["LOCK.RELEASE", lock, TOKEN]),
        case("lua.release", "Lua compare-and-delete by the holder", Release, HeldStrings,
            &["EVALSHA", &sha.release, "1", string, TOKEN]),
        case("lock.guard", "LOCK.GUARD … SET by the holder", Guard, HeldLocks,
            &["LOCK.GUARD", lock, TOKEN, "SET", data, GUARDED_VALUE]),
        case("lua.guard", "Lua compare-and-set by the holder", Guard, HeldStrings,
            &["EVALSHA", &sha.guard, "2", string, data, TOKEN, GUARDED_VALUE]),
        case("set", "plain SET, no guard (the ceiling)", Guard, Data,
            &["SET", data, GUARDED_VALUE]),
        case("sem.acquire", "SEM.ACQUIRE with a fresh 36-byte TOKEN", SemAcquire, Empty,
            &["SEM.ACQUIRE", sem, limit, ttl, "TOKEN", FRESH_TOKEN]),
        case("lua.sem.acquire", "Lua semaphore acquire (sorted set), fresh permit id",
            SemAcquire, Empty,
            &["EVALSHA", &sha.sem_acquire, "1", permits, FRESH_TOKEN, limit, ttl]),
        case("sem.release", "SEM.RELEASE by the holder", SemRelease, Semaphores,
            &["SEM.RELEASE", sem, TOKEN]),
        case("lua.sem.release", "Lua semaphore release (ZREM) by the holder", SemRelease,
            PermitSets, &["EVALSHA", &sha.sem_release, "1", permits, TOKEN]),
        case("shared.acquire", "LOCK.ACQUIRE … SHARED with a fresh 36-byte TOKEN",
            SharedAcquire, Empty,
            &["LOCK.ACQUIRE", shared, ttl, "TOKEN", FRESH_TOKEN, "SHARED"]),
        case("lua.read.acquire", "Lua read lock (hash), fresh token", SharedAcquire, Empty,
            &["EVALSHA", &sha.read_acquire, "1", read_hash, FRESH_TOKEN, ttl]),
        case("shared.release", "LOCK.RELEASE by a reader", SharedRelease, ReadLocks,
            &["LOCK.RELEASE", shared, TOKEN]),
        case("lua.read.release", "Lua read unlock by the reader", SharedRelease, ReadHashes,
            &["EVALSHA", &sha.read_release, "1", read_hash, TOKEN]),
        case("multi.acquire", "LOCK.MACQUIRE of 2 keys with a fresh 36-byte TOKEN", MultiAcquire,
            Empty, &["LOCK.MACQUIRE", "2", multi_a, multi_b, ttl, "TOKEN", FRESH_TOKEN]),
        case("lua.multi.acquire", "Lua two-key acquire-with-fence (EXISTS, SET NX PX, INCR)",
            MultiAcquire, Empty,
            &["EVALSHA", &sha.multi_acquire, "3", string_a, string_b, scripts::GLOBAL_FENCE_KEY,
                FRESH_TOKEN, ttl]),
        case("multi.release", "LOCK.MRELEASE of 2 keys by the holder", MultiRelease,
            HeldLockPairs, &["LOCK.MRELEASE", "2", multi_a, multi_b, TOKEN]),
        case("lua.multi.release", "Lua two-key compare-and-delete by the holder", MultiRelease,
            HeldStringPairs, &["EVALSHA", &sha.multi_release, "2", string_a, string_b, TOKEN]),
    ]
}

/// How the SEM and SHARED rows count the holders they added or removed.
enum HolderCount {
    /// A counter that grows by one per holder added or removed: an `INFO`
    /// field, or the calls of a command (`INFO commandstats` counts the
    /// commands scripts run), read before and after the run.
    Counter(&'static str, &'static str),
    /// The Lua semaphore's release runs `ZREM` alone, whose reply
    /// `redis-benchmark` does not show: after the run, every
    /// [`SAMPLE_EVERY`]th key of the range is checked for [`TOKEN`].
    SampledPermits,
}

/// One key in this many is checked by [`HolderCount::SampledPermits`].
pub const SAMPLE_EVERY: u64 = 100;

fn holder_count(case: &Case) -> HolderCount {
    match case.id {
        "lua.sem.acquire" => HolderCount::Counter("commandstats", "cmdstat_zadd"),
        // Each acquire, and each release whose token holds, runs HINCRBY once.
        "lua.read.acquire" | "lua.read.release" => {
            HolderCount::Counter("commandstats", "cmdstat_hincrby")
        }
        "lua.sem.release" => HolderCount::SampledPermits,
        "sem.release" | "shared.release" => HolderCount::Counter("lock", "lock_releases"),
        _ => HolderCount::Counter("lock", "lock_grants"),
    }
}

/// The counter of `count` now (0 for a sampled count).
fn read_counter(conn: &mut redis::Connection, count: &HolderCount) -> Result<u64, String> {
    let HolderCount::Counter(section, field) = count else {
        return Ok(0);
    };
    let value = info_field(conn, section, field)?.unwrap_or_default();
    // `cmdstat_zadd:calls=12,usec=…`, or a plain integer.
    let calls = value
        .strip_prefix("calls=")
        .map_or(value.as_str(), |rest| rest.split(',').next().unwrap_or(""));
    Ok(calls.parse().unwrap_or(0))
}

/// Holders the run added or removed: the counter's growth, or for the Lua
/// semaphore's release the sampled share of keys [`TOKEN`] left, times the
/// range.
fn holders_changed(
    conn: &mut redis::Connection,
    count: &HolderCount,
    before: u64,
    keyspace: u64,
) -> Result<f64, String> {
    if let HolderCount::Counter(..) = count {
        return Ok(read_counter(conn, count)?.saturating_sub(before) as f64);
    }
    let sampled: Vec<u64> = (0..keyspace).step_by(SAMPLE_EVERY as usize).collect();
    let mut pipe = redis::pipe();
    for &i in &sampled {
        pipe.cmd("ZSCORE")
            .arg(bench_key(PERMITS_PREFIX, i))
            .arg(TOKEN);
    }
    let scores: Vec<Option<f64>> = pipe.query(conn).map_err(|e| format!("ZSCORE: {e}"))?;
    let gone = scores.iter().filter(|s| s.is_none()).count();
    Ok(gone as f64 / sampled.len().max(1) as f64 * keyspace as f64)
}

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub rounds: usize,
    pub clients: usize,
    pub pipelines: Vec<usize>,
    /// Keys are drawn at random from this many.
    pub keyspace: u64,
    /// Requests per run, by pipeline depth: `(pipeline, requests)`.
    pub requests: Vec<(usize, u64)>,
}

impl Settings {
    pub fn requests_for(&self, pipeline: usize) -> u64 {
        self.requests
            .iter()
            .find(|(p, _)| *p == pipeline)
            .map_or(10_000, |(_, n)| *n)
    }
}

/// One `redis-benchmark` run.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub server: String,
    pub case: &'static str,
    pub pipeline: usize,
    pub round: usize,
    pub requests: u64,
    pub rps: f64,
    /// Server main-thread CPU time per request, in µs.
    pub cpu_us_per_op: f64,
    /// The share of requests that did the full job: new grants for ACQUIRE,
    /// new holders for the SEM and SHARED acquires, deletions for RELEASE,
    /// holders removed for the SEM and SHARED releases; EXTEND rows find every key held (1.0); GUARD
    /// rows, the requests that did not get an error reply (`LOST`).
    pub work_share: f64,
}

pub fn benchmark_command(settings: &Settings, pipeline: usize, case: &Case) -> Vec<String> {
    let command: Vec<&str> = case.args.iter().map(String::as_str).collect();
    let requests = settings.requests_for(pipeline);
    redis_benchmark(
        settings.clients,
        Some(pipeline),
        settings.keyspace * case.group.keyspace_factor(),
        requests,
        &command,
    )
}

/// A `redis-benchmark` run against `$PORT`: `clients` connections (each
/// with `pipeline` requests in flight), keys drawn from `keyspace`,
/// `requests` in all, CSV output; then the command.
pub fn redis_benchmark(
    clients: usize,
    pipeline: Option<usize>,
    keyspace: u64,
    requests: u64,
    command: &[&str],
) -> Vec<String> {
    let (clients, keyspace, requests) = (
        clients.to_string(),
        keyspace.to_string(),
        requests.to_string(),
    );
    let pipeline = pipeline.map(|p| p.to_string());
    let mut argv = vec![
        "redis-benchmark",
        "-h",
        "127.0.0.1",
        "-p",
        "$PORT",
        "-c",
        &clients,
    ];
    if let Some(pipeline) = &pipeline {
        argv.extend(["-P", pipeline]);
    }
    argv.extend(["-r", &keyspace, "-n", &requests, "--csv"]);
    argv.extend(command);
    argv.iter().map(|s| s.to_string()).collect()
}

/// Run every case on `server`, phase by phase (ACQUIRE, EXTEND, RELEASE,
/// GUARD); within a phase the commands alternate run by run, in reverse order
/// on odd rounds, so slow drifts of the machine hit all of them alike.
pub fn run(
    server: &Server,
    settings: &Settings,
    groups: &[Group],
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Case>, Vec<Sample>), String> {
    let mut conn = server.conn()?;
    let sha = LoadedScripts::load(&mut conn)?;
    let ifeq = supports_ifeq(&mut conn);
    let cases: Vec<Case> = cases(&sha)
        .into_iter()
        .filter(|c| (ifeq || !c.needs_ifeq) && groups.contains(&c.group))
        .collect();
    let mut samples = Vec::new();
    for &group in groups {
        let group_cases: Vec<&Case> = cases.iter().filter(|c| c.group == group).collect();
        let mut phase_keys = 0;
        if group.keeps_keys() {
            // Every case's keys in place at once, for the whole phase.
            flushall(&mut conn)?;
            let mut prepared = Vec::new();
            for case in &group_cases {
                if !prepared.contains(&case.prep) {
                    prepare(&mut conn, case.prep, settings.keyspace)?;
                    prepared.push(case.prep);
                }
            }
            phase_keys = dbsize(&mut conn)?;
        }
        for round in 0..settings.rounds {
            for &pipeline in &settings.pipelines {
                let mut order = group_cases.clone();
                if round % 2 == 1 {
                    order.reverse();
                }
                for case in order {
                    progress(&format!(
                        "{} round {}/{} P{pipeline} {}",
                        server.label,
                        round + 1,
                        settings.rounds,
                        case.id
                    ));
                    if !group.keeps_keys() {
                        flushall(&mut conn)?;
                        prepare(&mut conn, case.prep, settings.keyspace)?;
                    }
                    let keys_before = dbsize(&mut conn)?;
                    let errors_before = error_replies(&mut conn)?;
                    let holders = holder_count(case);
                    let counts_holders = matches!(
                        group,
                        Group::SemAcquire
                            | Group::SemRelease
                            | Group::SharedAcquire
                            | Group::SharedRelease
                    );
                    let holders_before = if counts_holders {
                        read_counter(&mut conn, &holders)?
                    } else {
                        0
                    };
                    let requests = settings.requests_for(pipeline);
                    let cpu_before = server.cpu_ns();
                    let rps = run_benchmark(server.port(), settings, pipeline, case)?;
                    let cpu_ns = server.cpu_ns().saturating_sub(cpu_before);
                    let keys_after = dbsize(&mut conn)?;
                    let errors = error_replies(&mut conn)?.saturating_sub(errors_before);
                    let work_share = match group {
                        Group::Acquire | Group::MultiAcquire => {
                            // The Lua recipe's fence key is not a lock; a
                            // multi-key grant takes two.
                            let fence_keys = u64::from(case.id.starts_with("lua."));
                            keys_after.saturating_sub(fence_keys) as f64
                                / (requests * group.keys_per_request()) as f64
                        }
                        Group::SemAcquire
                        | Group::SemRelease
                        | Group::SharedAcquire
                        | Group::SharedRelease => {
                            holders_changed(&mut conn, &holders, holders_before, settings.keyspace)?
                                / requests as f64
                        }
                        Group::Release | Group::MultiRelease => {
                            keys_before.saturating_sub(keys_after) as f64
                                / (requests * group.keys_per_request()) as f64
                        }
                        Group::Extend => {
                            if keys_after == keys_before && keys_before == phase_keys {
                                1.0
                            } else {
                                keys_after as f64 / keys_before.max(1) as f64
                            }
                        }
                        Group::Guard => 1.0 - errors as f64 / requests as f64,
                    };
                    samples.push(Sample {
                        server: server.label.clone(),
                        case: case.id,
                        pipeline,
                        round,
                        requests,
                        rps,
                        cpu_us_per_op: cpu_ns as f64 / 1000.0 / requests as f64,
                        work_share,
                    });
                }
            }
        }
    }
    flushall(&mut conn)?;
    Ok((cases, samples))
}

/// Error replies the server has sent since it started (`LOST` among them).
fn error_replies(conn: &mut redis::Connection) -> Result<u64, String> {
    Ok(info_int(conn, "stats", "total_error_replies")?.max(0) as u64)
}

/// Whether `SET` takes `IFEQ` here (Valkey 8.1 and later).
fn supports_ifeq(conn: &mut redis::Connection) -> bool {
    let _: Result<(), String> = query(conn, redis::cmd("SET").arg("bench:ifeq").arg("a"));
    let probe: Result<redis::Value, String> = query(
        conn,
        redis::cmd("SET")
            .arg("bench:ifeq")
            .arg("b")
            .arg("IFEQ")
            .arg("a"),
    );
    let _: Result<(), String> = query(conn, redis::cmd("DEL").arg("bench:ifeq"));
    probe.is_ok()
}

/// Put the keys `prep` asks for in place, over the whole key range.
pub fn prepare(conn: &mut redis::Connection, prep: Prep, keyspace: u64) -> Result<(), String> {
    match prep {
        Prep::Empty => Ok(()),
        Prep::HeldLocks => pipelined(
            conn,
            (0..keyspace).map(|i| {
                let mut cmd = redis::cmd("LOCK.ACQUIRE");
                cmd.arg(bench_key(LOCK_PREFIX, i))
                    .arg(PREPARED_TTL_MS)
                    .arg("TOKEN")
                    .arg(TOKEN);
                cmd
            }),
        ),
        Prep::HeldStrings => pipelined(
            conn,
            (0..keyspace).map(|i| {
                let mut cmd = redis::cmd("SET");
                cmd.arg(bench_key(STRING_PREFIX, i))
                    .arg(TOKEN)
                    .arg("PX")
                    .arg(PREPARED_TTL_MS);
                cmd
            }),
        ),
        Prep::Data => pipelined(
            conn,
            (0..keyspace).map(|i| {
                let mut cmd = redis::cmd("SET");
                cmd.arg(bench_key(DATA_PREFIX, i)).arg(GUARDED_VALUE);
                cmd
            }),
        ),
        Prep::Semaphores => pipelined(
            conn,
            (0..keyspace).flat_map(|i| {
                [TOKEN, OTHER_TOKEN].map(|token| {
                    let mut cmd = redis::cmd("SEM.ACQUIRE");
                    cmd.arg(bench_key(SEM_PREFIX, i))
                        .arg(SEM_LIMIT)
                        .arg(PREPARED_TTL_MS)
                        .arg("TOKEN")
                        .arg(token);
                    cmd
                })
            }),
        ),
        Prep::PermitSets => {
            let deadline_ms = unix_ms() + PREPARED_TTL_MS;
            pipelined(
                conn,
                (0..keyspace).map(|i| {
                    let mut cmd = redis::cmd("ZADD");
                    cmd.arg(bench_key(PERMITS_PREFIX, i))
                        .arg(deadline_ms)
                        .arg(TOKEN)
                        .arg(deadline_ms)
                        .arg(OTHER_TOKEN);
                    cmd
                }),
            )
        }
        Prep::ReadLocks => pipelined(
            conn,
            (0..keyspace).flat_map(|i| {
                [TOKEN, OTHER_TOKEN].map(|token| {
                    let mut cmd = redis::cmd("LOCK.ACQUIRE");
                    cmd.arg(bench_key(SHARED_PREFIX, i))
                        .arg(PREPARED_TTL_MS)
                        .arg("TOKEN")
                        .arg(token)
                        .arg("SHARED");
                    cmd
                })
            }),
        ),
        Prep::HeldLockPairs => pipelined(
            conn,
            (0..keyspace).map(|i| {
                let mut cmd = redis::cmd("LOCK.MACQUIRE");
                cmd.arg(2)
                    .arg(&MULTI_LOCK_PREFIXES.map(|p| bench_key(p, i))[..])
                    .arg(PREPARED_TTL_MS)
                    .arg("TOKEN")
                    .arg(TOKEN);
                cmd
            }),
        ),
        Prep::HeldStringPairs => pipelined(
            conn,
            (0..keyspace).flat_map(|i| {
                MULTI_STRING_PREFIXES.map(|p| {
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(bench_key(p, i))
                        .arg(TOKEN)
                        .arg("PX")
                        .arg(PREPARED_TTL_MS);
                    cmd
                })
            }),
        ),
        Prep::ReadHashes => pipelined(
            conn,
            (0..keyspace).flat_map(|i| {
                let key = bench_key(READ_HASH_PREFIX, i);
                let mut hset = redis::cmd("HSET");
                hset.arg(&key)
                    .arg("mode")
                    .arg("read")
                    .arg(TOKEN)
                    .arg(1)
                    .arg(OTHER_TOKEN)
                    .arg(1);
                let mut pexpire = redis::cmd("PEXPIRE");
                pexpire.arg(&key).arg(PREPARED_TTL_MS);
                [hset, pexpire]
            }),
        ),
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Run `redis-benchmark` once; its requests per second.
fn run_benchmark(
    port: u16,
    settings: &Settings,
    pipeline: usize,
    case: &Case,
) -> Result<f64, String> {
    let argv = benchmark_command(settings, pipeline, case);
    let stdout = run_against(Path::new(&argv[0]), &argv, port)?;
    parse_csv_rps(&stdout).ok_or_else(|| format!("no rps in redis-benchmark output: {stdout}"))
}

/// The `rps` column of `redis-benchmark --csv` (the line after the header).
fn parse_csv_rps(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .rfind(|line| !line.starts_with("\"test\"") && line.starts_with('"'))
        .and_then(|line| line.split("\",\"").nth(1))
        .and_then(|rps| rps.trim_matches('"').parse().ok())
}

/// Median of a case's samples at one pipeline on one server.
pub fn case_median(
    samples: &[Sample],
    server: &str,
    case: &str,
    pipeline: usize,
    value: impl Fn(&Sample) -> f64,
) -> Option<f64> {
    let values: Vec<f64> = samples
        .iter()
        .filter(|s| s.server == server && s.case == case && s.pipeline == pipeline)
        .map(value)
        .collect();
    median(&values)
}

/// Median over rounds of `native / baseline` computed within each round
/// (the pair ran back to back, so the machine's drift cancels). `value` is a
/// rate (requests per second, or per CPU second); a side of several cases
/// is a cycle, whose rate is one over the sum of its cases' times.
pub fn paired_ratio(
    samples: &[Sample],
    server: &str,
    comparison: &Comparison,
    pipeline: usize,
    value: impl Fn(&Sample) -> f64,
) -> Option<f64> {
    let rate = |cases: &[&str], round: usize| -> Option<f64> {
        let mut time = 0.0;
        for case in cases {
            let sample = samples.iter().find(|s| {
                s.server == server && s.case == *case && s.pipeline == pipeline && s.round == round
            })?;
            time += 1.0 / value(sample);
        }
        Some(1.0 / time)
    };
    let rounds = samples.iter().map(|s| s.round).max().map_or(0, |r| r + 1);
    let ratios: Vec<f64> = (0..rounds)
        .filter_map(|round| {
            Some(rate(comparison.native, round)? / rate(comparison.baseline, round)?)
        })
        .collect();
    median(&ratios)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cases_with_dummy_scripts() -> Vec<Case> {
        cases(&LoadedScripts {
            acquire: "sha-acquire".into(),
            release: "sha-release".into(),
            extend: "sha-extend".into(),
            guard: "sha-guard".into(),
            sem_acquire: "sha-sem-acquire".into(),
            sem_release: "sha-sem-release".into(),
            read_acquire: "sha-read-acquire".into(),
            read_release: "sha-read-release".into(),
            multi_acquire: "sha-multi-acquire".into(),
            multi_release: "sha-multi-release".into(),
        })
    }

    #[test]
    fn every_comparison_names_measured_cases_of_one_group() {
        let cases = cases_with_dummy_scripts();
        let group = |id: &str| cases.iter().find(|c| c.id == id).map(|c| c.group);
        for comparison in &COMPARISONS {
            assert_eq!(comparison.native.len(), comparison.baseline.len());
            for (native, baseline) in comparison.native.iter().zip(comparison.baseline) {
                assert!(group(native).is_some(), "{}", comparison.title);
                assert_eq!(group(native), group(baseline), "{}", comparison.title);
            }
        }
    }

    fn sample(case: &'static str, round: usize, rps: f64) -> Sample {
        Sample {
            server: "s".into(),
            case,
            pipeline: 16,
            round,
            requests: 1,
            rps,
            cpu_us_per_op: 1e6 / rps,
            work_share: 1.0,
        }
    }

    #[test]
    fn a_cycle_ratio_adds_the_times_of_its_steps() {
        let cycle = &COMPARISONS[11];
        assert_eq!(cycle.native, ["sem.acquire", "sem.release"]);
        // Native: 100k + 100k rps is 50k cycles/s; Lua: 50k + 25k is 16.7k.
        let samples = [
            sample("sem.acquire", 0, 100_000.0),
            sample("sem.release", 0, 100_000.0),
            sample("lua.sem.acquire", 0, 50_000.0),
            sample("lua.sem.release", 0, 25_000.0),
        ];
        let ratio = paired_ratio(&samples, "s", cycle, 16, |s| s.rps).unwrap();
        assert!((ratio - 3.0).abs() < 1e-9, "{ratio}");
        let cpu = paired_ratio(&samples, "s", cycle, 16, |s| 1.0 / s.cpu_us_per_op).unwrap();
        assert!((cpu - 3.0).abs() < 1e-9, "{cpu}");
        // A step missing from a round leaves the round out.
        assert_eq!(paired_ratio(&samples[1..], "s", cycle, 16, |s| s.rps), None);
    }

    #[test]
    fn guard_rows_write_the_same_keys_and_value() {
        let cases = cases_with_dummy_scripts();
        let guard: Vec<&Case> = cases.iter().filter(|c| c.group == Group::Guard).collect();
        assert_eq!(guard.len(), 3);
        for case in guard {
            assert!(
                case.args.contains(&"dk:__rand_int__".to_string()),
                "{}",
                case.id
            );
            assert_eq!(case.args.last().map(String::as_str), Some(GUARDED_VALUE));
        }
        let settings = Settings {
            rounds: 1,
            clients: 50,
            pipelines: vec![16],
            keyspace: 1000,
            requests: vec![(16, 300)],
        };
        let set = cases
            .iter()
            .find(|c| c.id == "set")
            .expect("the plain SET row");
        assert_eq!(
            benchmark_command(&settings, 16, set).join(" "),
            "redis-benchmark -h 127.0.0.1 -p $PORT -c 50 -P 16 -r 1000 -n 300 --csv \
             SET dk:__rand_int__ v"
        );
    }

    #[test]
    fn reads_rps_from_csv() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET x\",\"121901.66\",\"6.171\"\n";
        assert_eq!(parse_csv_rps(out), Some(121901.66));
    }
}
