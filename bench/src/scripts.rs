//! The Lua recipe that users run today instead of the module: the scripts the
//! benchmarks compare against, exactly as sent to the server.

/// Acquire with a fence: `KEYS[1]` the lock, `KEYS[2]` the fence counter
/// (one global key, or one per lock), `ARGV[1]` the token, `ARGV[2]` the TTL
/// in ms. Replies `[token, fence]`, or null when the key is taken, like
/// `LOCK.ACQUIRE`.
pub const ACQUIRE: &str = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
return {ARGV[1], redis.call('INCR', KEYS[2])} end return false";

/// Compare-and-delete: 1 when `ARGV[1]` held `KEYS[1]`, else 0.
pub const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
return redis.call('DEL', KEYS[1]) else return 0 end";

/// Compare-and-pexpire: 1 when `ARGV[1]` holds `KEYS[1]` (its lease now ends
/// `ARGV[2]` ms from now), else 0.
pub const EXTEND: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";

/// Compare-and-set, the recipe's guarded write: `KEYS[1]` the lock,
/// `KEYS[2]` the data key, `ARGV[1]` the token, `ARGV[2]` the value. Writes and
/// replies `SET`'s OK when `ARGV[1]` holds `KEYS[1]`, else the error `LOST`,
/// like `LOCK.GUARD lock token SET data value`.
pub const GUARD: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
return redis.call('SET', KEYS[2], ARGV[2]) else return redis.error_reply('LOST') end";

/// Several locks at once with one fence, all or nothing (issue 28's
/// alternative to `LOCK.MACQUIRE`): `KEYS[1..n-1]` the locks, `KEYS[n]` the
/// fence counter, `ARGV[1]` the token, `ARGV[2]` the TTL in ms. Refuses
/// (null) when any lock is taken, else takes every one with `SET NX PX` and
/// replies `[token, fence]`, like `LOCK.MACQUIRE`.
pub const MULTI_ACQUIRE: &str = "for i = 1, #KEYS - 1 do \
if redis.call('EXISTS', KEYS[i]) == 1 then return false end end \
for i = 1, #KEYS - 1 do redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2]) end \
return {ARGV[1], redis.call('INCR', KEYS[#KEYS])}";

/// Compare-and-delete of several locks: the number of `KEYS` that `ARGV[1]`
/// held (each deleted), like `LOCK.MRELEASE`.
pub const MULTI_RELEASE: &str = "local n = 0 for i = 1, #KEYS do \
if redis.call('GET', KEYS[i]) == ARGV[1] then n = n + redis.call('DEL', KEYS[i]) end end \
return n";

/// The single global fence counter of the recipe's global-fence variant.
pub const GLOBAL_FENCE_KEY: &str = "lock:fence";

/// python-redis-lock's UNLOCK (4.x), the release of the BLPOP-signal recipe:
/// `KEYS = {lock, signal}`, `ARGV = {token, signal-expire-ms}`. When `ARGV[1]`
/// holds the lock, it leaves one element in the signal list (for at most
/// `signal-expire-ms`, so a waiter that is not yet in `BLPOP` still finds it),
/// deletes the lock and replies 0; otherwise it replies 1.
pub const SIGNAL_UNLOCK: &str = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 1 else \
redis.call('DEL', KEYS[2]) redis.call('LPUSH', KEYS[2], 1) \
redis.call('PEXPIRE', KEYS[2], ARGV[2]) redis.call('DEL', KEYS[1]) return 0 end";

/// A semaphore with leased permits, the way Redisson's
/// RPermitExpirableSemaphore keeps one: a sorted set of permit ids scored by
/// their lease's deadline. `KEYS[1]` the set, `ARGV[1]` the permit id (drawn
/// by the client), `ARGV[2]` the limit, `ARGV[3]` the lease in ms. Drops the
/// expired permits, counts the rest and, below the limit, adds this one;
/// replies the permit id, or null at the limit. The time is the server's
/// (`TIME`; Redisson sends the client's). No fence, and the set itself never
/// expires.
pub const SEM_ACQUIRE: &str = "local now = redis.call('TIME') \
now = now[1] * 1000 + math.floor(now[2] / 1000) \
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) \
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then \
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1]) return ARGV[1] end return false";

/// The semaphore's release: 1 when permit `ARGV[1]` was out, else 0 (the set
/// goes with its last member).
pub const SEM_RELEASE: &str = "return redis.call('ZREM', KEYS[1], ARGV[1])";

/// A read lock the way Redisson's RReadWriteLock keeps one: a hash with the
/// `mode` and a hold count per reader. `KEYS[1]` the lock, `ARGV[1]` the
/// reader's token, `ARGV[2]` the lease in ms. Replies the reader's hold
/// count, or null while a writer holds the key. One lease for the whole key,
/// which each new reader sets (Redisson takes the longer of the two, and
/// keeps a timeout key per hold besides): the cheaper form. No fence.
pub const READ_ACQUIRE: &str = "local mode = redis.call('HGET', KEYS[1], 'mode') \
if mode == false then redis.call('HSET', KEYS[1], 'mode', 'read') \
elseif mode ~= 'read' then return false end \
local holds = redis.call('HINCRBY', KEYS[1], ARGV[1], 1) \
redis.call('PEXPIRE', KEYS[1], ARGV[2]) return holds";

/// The read lock's release: 1 when `ARGV[1]` held `KEYS[1]` (one hold less,
/// the key deleted with its last reader), else 0.
pub const READ_RELEASE: &str = "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end \
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end \
if redis.call('HLEN', KEYS[1]) == 1 then redis.call('DEL', KEYS[1]) end return 1";

/// Every script by name, for the record of a run.
pub const ALL: [(&str, &str); 11] = [
    ("acquire", ACQUIRE),
    ("release", RELEASE),
    ("extend", EXTEND),
    ("guard", GUARD),
    ("signal_unlock", SIGNAL_UNLOCK),
    ("sem_acquire", SEM_ACQUIRE),
    ("sem_release", SEM_RELEASE),
    ("read_acquire", READ_ACQUIRE),
    ("read_release", READ_RELEASE),
    ("multi_acquire", MULTI_ACQUIRE),
    ("multi_release", MULTI_RELEASE),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// `make bench-profile` sends the same scripts as `lock-bench`.
    #[test]
    fn profile_sh_sends_the_same_scripts() {
        let profile = include_str!("../profile.sh");
        for (name, script) in [
            ("acquire_lua", ACQUIRE),
            ("release_lua", RELEASE),
            ("extend_lua", EXTEND),
            ("guard_lua", GUARD),
            ("sem_acquire_lua", SEM_ACQUIRE),
            ("sem_release_lua", SEM_RELEASE),
            ("read_acquire_lua", READ_ACQUIRE),
            ("read_release_lua", READ_RELEASE),
        ] {
            assert!(
                profile.contains(&format!("\n{name}=\"{script}\"\n")),
                "bench/profile.sh's {name} is not scripts.rs's"
            );
        }
    }
}
