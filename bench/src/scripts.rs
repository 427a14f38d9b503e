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
