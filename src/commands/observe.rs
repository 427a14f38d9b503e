//! `LOCK.OBSERVE key fence timeout-ms` → the holder of `key` as a map of
//! `fence`, `ttl` and `owner` (when it gave one), or null when free: at once
//! if that is not the holder the caller last saw (`fence`; 0 for free),
//! otherwise once it changes, or when `timeout-ms` passes (0: no limit),
//! like `BLPOP`. In MULTI and scripts it answers at once. See `observers.rs`.

use redis_lock_core::args::parse_observe;
use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use crate::observers;
use crate::redis;
use crate::redis::key::LockKey;

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_observe(redis::args(args))?;
    // A key of another type is refused, as every lock command refuses it.
    LockKey::open_read(ctx, &args[1]).held()?;
    observers::observe(ctx, &args[1], parsed.fence, parsed.timeout_ms);
    Ok(())
}
