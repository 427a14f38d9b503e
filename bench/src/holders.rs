//! Memory per holder of a shared key: a read lock with N readers and a
//! semaphore with N permits out, each holder with its own token, against
//! the Lua recipes' hash and sorted set. What one more holder costs is the
//! growth of a key from one holder to N, over N − 1.

use serde::Serialize;

use crate::scripts;
use crate::server::{bench_key, flushall, info_int, pipelined, query, Server};

/// Leases long enough that nothing expires while memory is read.
const TTL_MS: u64 = 3_600_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Shape {
    /// `LOCK.ACQUIRE key ttl TOKEN t SHARED`, a reader per token.
    SharedLock,
    /// The Lua read lock (`scripts::READ_ACQUIRE`): a hash field per reader.
    LuaReadLock,
    /// `SEM.ACQUIRE key limit ttl TOKEN t`, a permit per token.
    Semaphore,
    /// The Lua semaphore (`scripts::SEM_ACQUIRE`): a sorted-set member per
    /// permit.
    LuaSemaphore,
}

impl Shape {
    pub const ALL: [Shape; 4] = [
        Shape::SharedLock,
        Shape::LuaReadLock,
        Shape::Semaphore,
        Shape::LuaSemaphore,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Shape::SharedLock => "LOCK.ACQUIRE … SHARED (module)",
            Shape::LuaReadLock => "Lua read lock (hash)",
            Shape::Semaphore => "SEM.ACQUIRE (module)",
            Shape::LuaSemaphore => "Lua semaphore (sorted set)",
        }
    }

    /// The command that adds holder `h` to key `k`, as sent.
    pub fn command_text(self) -> &'static str {
        match self {
            Shape::SharedLock => "LOCK.ACQUIRE rk:<12 digits> 3600000 TOKEN <36-byte token> SHARED",
            Shape::LuaReadLock => "EVALSHA <read acquire> 1 hk:<12 digits> <36-byte token> 3600000",
            Shape::Semaphore => "SEM.ACQUIRE sm:<12 digits> <limit> 3600000 TOKEN <36-byte token>",
            Shape::LuaSemaphore => {
                "EVALSHA <semaphore acquire> 1 zs:<12 digits> <36-byte token> <limit> 3600000"
            }
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Shape::SharedLock => "rk:",
            Shape::LuaReadLock => "hk:",
            Shape::Semaphore => "sm:",
            Shape::LuaSemaphore => "zs:",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Holders per key, one measurement each; the first should be 1.
    pub holders_per_key: Vec<u64>,
    /// Holders in all, per measurement: keys = this / holders per key.
    pub holders: u64,
}

/// `keys` keys with `holders_per_key` holders each.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub server: String,
    pub shape: Shape,
    pub holders_per_key: u64,
    pub keys: u64,
    pub used_memory_delta: i64,
    /// `MEMORY USAGE … SAMPLES 0` of one of the keys.
    pub key_bytes: i64,
}

impl Run {
    pub fn bytes_per_key(&self) -> f64 {
        self.used_memory_delta as f64 / self.keys as f64
    }
}

/// What one more holder costs a key: from the one-holder run to this one.
pub fn bytes_per_extra_holder(one: &Run, many: &Run) -> Option<f64> {
    (many.holders_per_key > one.holders_per_key).then(|| {
        (many.bytes_per_key() - one.bytes_per_key())
            / (many.holders_per_key - one.holders_per_key) as f64
    })
}

/// A 36-byte token unique to holder `h` of key `k`, shaped like a UUID.
fn token(k: u64, h: u64) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", h & 0xffff_ffff, k)
}

struct Shas {
    read_acquire: String,
    sem_acquire: String,
}

fn add_holders(
    conn: &mut redis::Connection,
    shape: Shape,
    shas: &Shas,
    keys: u64,
    per_key: u64,
    limit: u64,
) -> Result<(), String> {
    pipelined(
        conn,
        (0..per_key)
            .flat_map(|h| (0..keys).map(move |k| (k, h)))
            .map(|(k, h)| {
                let key = bench_key(shape.prefix(), k);
                let token = token(k, h);
                let mut cmd;
                match shape {
                    Shape::SharedLock => {
                        cmd = redis::cmd("LOCK.ACQUIRE");
                        cmd.arg(key)
                            .arg(TTL_MS)
                            .arg("TOKEN")
                            .arg(token)
                            .arg("SHARED");
                    }
                    Shape::Semaphore => {
                        cmd = redis::cmd("SEM.ACQUIRE");
                        cmd.arg(key).arg(limit).arg(TTL_MS).arg("TOKEN").arg(token);
                    }
                    Shape::LuaReadLock => {
                        cmd = redis::cmd("EVALSHA");
                        cmd.arg(&shas.read_acquire)
                            .arg(1)
                            .arg(key)
                            .arg(token)
                            .arg(TTL_MS);
                    }
                    Shape::LuaSemaphore => {
                        cmd = redis::cmd("EVALSHA");
                        cmd.arg(&shas.sem_acquire)
                            .arg(1)
                            .arg(key)
                            .arg(token)
                            .arg(limit)
                            .arg(TTL_MS);
                    }
                }
                cmd
            }),
    )
}

/// The holders a key has, by its own account (`LOCK.INFO`/`SEM.INFO`
/// `holders`, `HLEN` less the mode field, `ZCARD`).
fn holders_of(conn: &mut redis::Connection, shape: Shape, key: &str) -> Result<i64, String> {
    let count = |fields: Option<std::collections::HashMap<String, redis::Value>>| match fields
        .and_then(|mut f| f.remove("holders"))
    {
        Some(redis::Value::Int(n)) => n,
        _ => 0,
    };
    Ok(match shape {
        Shape::SharedLock => count(query(conn, redis::cmd("LOCK.INFO").arg(key))?),
        Shape::Semaphore => count(query(conn, redis::cmd("SEM.INFO").arg(key))?),
        Shape::LuaReadLock => query::<i64>(conn, redis::cmd("HLEN").arg(key))? - 1,
        Shape::LuaSemaphore => query(conn, redis::cmd("ZCARD").arg(key))?,
    })
}

pub fn run(
    server: &Server,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Run>, String> {
    let mut conn = server.conn()?;
    let mut load = |script: &str| -> Result<String, String> {
        query(&mut conn, redis::cmd("SCRIPT").arg("LOAD").arg(script))
    };
    let shas = Shas {
        read_acquire: load(scripts::READ_ACQUIRE)?,
        sem_acquire: load(scripts::SEM_ACQUIRE)?,
    };
    let most = settings.holders_per_key.iter().copied().max().unwrap_or(1);
    // Room for every holder: the bound on holders per key, and the limit.
    query::<()>(
        &mut conn,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("lock.max-holders")
            .arg(most.max(1000)),
    )?;
    let mut runs = Vec::new();
    for &per_key in &settings.holders_per_key {
        let keys = (settings.holders / per_key).max(1);
        for shape in Shape::ALL {
            progress(&format!(
                "{}: {} keys × {per_key} holders, {}",
                server.label,
                keys,
                shape.label()
            ));
            flushall(&mut conn)?;
            let before = info_int(&mut conn, "memory", "used_memory")?;
            add_holders(&mut conn, shape, &shas, keys, per_key, most)?;
            let after = info_int(&mut conn, "memory", "used_memory")?;
            let key = bench_key(shape.prefix(), 0);
            let holders = holders_of(&mut conn, shape, &key)?;
            if holders != per_key as i64 {
                return Err(format!(
                    "{}: {key} has {holders} holders, not {per_key}",
                    shape.label()
                ));
            }
            let key_bytes: Option<i64> = query(
                &mut conn,
                redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(&key)
                    .arg("SAMPLES")
                    .arg(0),
            )?;
            runs.push(Run {
                server: server.label.clone(),
                shape,
                holders_per_key: per_key,
                keys,
                used_memory_delta: after - before,
                key_bytes: key_bytes.unwrap_or(0),
            });
        }
    }
    flushall(&mut conn)?;
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(holders_per_key: u64, keys: u64, used_memory_delta: i64) -> Run {
        Run {
            server: "s".into(),
            shape: Shape::Semaphore,
            holders_per_key,
            keys,
            used_memory_delta,
            key_bytes: 0,
        }
    }

    #[test]
    fn an_extra_holder_is_the_growth_of_a_key_over_its_new_holders() {
        // 1,000 keys of one holder at 200 B; 10 keys of 100 holders at 5,150 B.
        let one = run(1, 1000, 200_000);
        let many = run(100, 10, 51_500);
        assert_eq!(bytes_per_extra_holder(&one, &many), Some(50.0));
        assert_eq!(bytes_per_extra_holder(&one, &one), None);
    }

    #[test]
    fn tokens_are_36_bytes_and_distinct() {
        assert_eq!(token(7, 3).len(), 36);
        assert_ne!(token(7, 3), token(3, 7));
    }
}
