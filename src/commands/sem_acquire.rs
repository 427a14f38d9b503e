//! `SEM.ACQUIRE key limit ttl-ms [COUNT n] [TOKEN token] [WAIT timeout-ms]
//! [SESSION] [OWNER label]` → `[token, fence]`, or null when fewer than `n`
//! of the semaphore's `limit` permits are free (or others queued before the
//! caller). At most `limit` permits are out at once; each token's permits
//! have their own lease and fence. The key exists while it has holders. A
//! `limit` other than the one the key was created with is refused. With
//! `WAIT`, the caller queues, first in, first out across counts: a request
//! at the head that needs more permits than are free blocks smaller ones
//! behind it. The acquire itself is `LOCK.ACQUIRE`'s (`acquire.rs`).

use redis_lock_core::args::parse_sem_acquire;
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::Want;
use redis_module::{Context, RedisString};

use super::acquire::acquire;
use crate::config;
use crate::redis;

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_sem_acquire(redis::args(args), config::max_ttl_ms())?;
    let want = Want::Permits {
        limit: parsed.limit,
        count: parsed.count,
    };
    acquire(ctx, &args[1], &parsed.lock, want)
}
