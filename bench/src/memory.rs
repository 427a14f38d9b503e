//! Memory per held lock: `MEMORY USAGE` of one lock, and the `used_memory`
//! growth for many, against the Lua recipe's string key plus fence key.

use serde::Serialize;

use crate::scripts;
use crate::server::{bench_key, flushall, info_int, pipelined, query, Server};

/// Leases long enough that nothing expires while memory is read.
const TTL_MS: u64 = 3_600_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Variant {
    /// `LOCK.ACQUIRE key ttl` (the server draws a 36-byte UUID token).
    Module,
    /// The Lua recipe with one fence key per lock (`<key>:fence`), which
    /// stays after the lock is gone.
    LuaPerLockFence,
    /// The Lua recipe with one global fence key for every lock.
    LuaGlobalFence,
}

impl Variant {
    pub const ALL: [Variant; 3] = [
        Variant::Module,
        Variant::LuaPerLockFence,
        Variant::LuaGlobalFence,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Variant::Module => "LOCK.ACQUIRE (module)",
            Variant::LuaPerLockFence => "Lua recipe, fence key per lock",
            Variant::LuaGlobalFence => "Lua recipe, one global fence key",
        }
    }

    /// The command that takes lock `index`, as sent.
    pub fn command_text(self) -> &'static str {
        match self {
            Variant::Module => "LOCK.ACQUIRE lk:<12 digits> 3600000",
            Variant::LuaPerLockFence => {
                "EVALSHA <acquire> 2 sk:<12 digits> sk:<12 digits>:fence <36-byte token> 3600000"
            }
            Variant::LuaGlobalFence => {
                "EVALSHA <acquire> 2 sk:<12 digits> lock:fence <36-byte token> 3600000"
            }
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct OneLock {
    pub server: String,
    pub variant: Variant,
    pub label: &'static str,
    /// `MEMORY USAGE` of the lock key.
    pub lock_key_bytes: i64,
    /// `MEMORY USAGE` of its fence key (the global one is shared by all).
    pub fence_key_bytes: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Bulk {
    pub server: String,
    pub variant: Variant,
    pub label: &'static str,
    pub locks: u64,
    pub used_memory_delta: i64,
    pub bytes_per_lock: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryResults {
    pub one_lock: Vec<OneLock>,
    pub bulk: Vec<Bulk>,
}

/// A 36-byte token unique to `index`, shaped like a UUID.
fn token(index: u64) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", index & 0xffff_ffff, index)
}

fn take_locks(
    conn: &mut redis::Connection,
    variant: Variant,
    acquire_sha: &str,
    count: u64,
) -> Result<(), String> {
    pipelined(
        conn,
        (0..count).map(|i| {
            let mut cmd;
            match variant {
                Variant::Module => {
                    cmd = redis::cmd("LOCK.ACQUIRE");
                    cmd.arg(bench_key("lk:", i)).arg(TTL_MS);
                }
                Variant::LuaPerLockFence | Variant::LuaGlobalFence => {
                    let key = bench_key("sk:", i);
                    let fence_key = if variant == Variant::LuaPerLockFence {
                        format!("{key}:fence")
                    } else {
                        scripts::GLOBAL_FENCE_KEY.to_string()
                    };
                    cmd = redis::cmd("EVALSHA");
                    cmd.arg(acquire_sha)
                        .arg(2)
                        .arg(&key)
                        .arg(fence_key)
                        .arg(token(i))
                        .arg(TTL_MS);
                }
            }
            cmd
        }),
    )
}

fn memory_usage(conn: &mut redis::Connection, key: &str) -> Result<i64, String> {
    let bytes: Option<i64> = query(
        conn,
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0),
    )?;
    bytes.ok_or_else(|| format!("MEMORY USAGE {key}: no such key"))
}

pub fn run(
    server: &Server,
    counts: &[u64],
    progress: &mut dyn FnMut(&str),
) -> Result<MemoryResults, String> {
    let mut conn = server.conn()?;
    let acquire_sha: String = query(
        &mut conn,
        redis::cmd("SCRIPT").arg("LOAD").arg(scripts::ACQUIRE),
    )?;
    let mut results = MemoryResults {
        one_lock: Vec::new(),
        bulk: Vec::new(),
    };
    for variant in Variant::ALL {
        flushall(&mut conn)?;
        take_locks(&mut conn, variant, &acquire_sha, 1)?;
        let (lock_key, fence_key) = match variant {
            Variant::Module => (bench_key("lk:", 0), None),
            Variant::LuaPerLockFence => {
                let key = bench_key("sk:", 0);
                let fence = format!("{key}:fence");
                (key, Some(fence))
            }
            Variant::LuaGlobalFence => (
                bench_key("sk:", 0),
                Some(scripts::GLOBAL_FENCE_KEY.to_string()),
            ),
        };
        results.one_lock.push(OneLock {
            server: server.label.clone(),
            variant,
            label: variant.label(),
            lock_key_bytes: memory_usage(&mut conn, &lock_key)?,
            fence_key_bytes: fence_key.map(|k| memory_usage(&mut conn, &k)).transpose()?,
        });
    }
    for &count in counts {
        for variant in Variant::ALL {
            progress(&format!(
                "{} {count} locks: {}",
                server.label,
                variant.label()
            ));
            flushall(&mut conn)?;
            let before = info_int(&mut conn, "memory", "used_memory")?;
            take_locks(&mut conn, variant, &acquire_sha, count)?;
            let after = info_int(&mut conn, "memory", "used_memory")?;
            results.bulk.push(Bulk {
                server: server.label.clone(),
                variant,
                label: variant.label(),
                locks: count,
                used_memory_delta: after - before,
                bytes_per_lock: (after - before) as f64 / count as f64,
            });
        }
    }
    flushall(&mut conn)?;
    Ok(results)
}
