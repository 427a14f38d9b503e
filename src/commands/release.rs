//! `LOCK.RELEASE key token` → 1 when `token` held the key and the lock is now
//! gone (or handed to the first waiter); 0 otherwise, with nothing changed.

use redis_lock_core::args::parse_release;
use redis_lock_core::decide;
use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use crate::lease::ReleasedBy;
use crate::metrics::{self, Counter};
use crate::redis::key::LockKey;
use crate::redis::{self, reply, server};
use crate::waiting;

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_release(redis::args(args))?;
    super::refuse_local_write_on_replica(ctx)?;
    let name = &args[1];

    let key = LockKey::open_write(ctx, name);
    if !decide::release(key.lock()?, parsed.token) {
        metrics::count(Counter::StaleReleases);
        reply::integer(ctx, 0);
        return Ok(());
    }
    waiting::release(ctx, server::selected_db(ctx), key, name, ReleasedBy::Holder);
    reply::integer(ctx, 1);
    Ok(())
}
