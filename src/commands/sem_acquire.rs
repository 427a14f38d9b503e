//! `SEM.ACQUIRE key limit ttl-ms [COUNT n] [TOKEN token] [WAIT timeout-ms]
//! [SESSION] [OWNER label]` → `[token, fence]`, or null when fewer than `n`
//! of the semaphore's `limit` permits are free (or others queued before the
//! caller). At most `limit` permits are out at once; each token's permits
//! have their own lease and fence. The key exists while it has holders. A
//! `limit` other than the one the key was created with is refused. With
//! `WAIT`, the caller queues, first in, first out across counts: a request
//! at the head that needs more permits than are free blocks smaller ones
//! behind it.

use redis_lock_core::args::parse_sem_acquire;
use redis_lock_core::decide::Want;
use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use super::acquire::{acquire_hold, session_of};
use crate::config;
use crate::redis::key::LockKey;
use crate::redis::{self};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_sem_acquire(redis::args(args), config::max_ttl_ms())?;
    super::refuse_local_write_on_replica(ctx)?;
    let session = session_of(ctx, parsed.lock.session)?;
    let name = &args[1];
    let key = LockKey::open_write(ctx, name);
    let want = Want::Permits {
        limit: parsed.limit,
        count: parsed.count,
    };
    acquire_hold(ctx, key, name, &parsed.lock, want, session)
}
