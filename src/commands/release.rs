//! `LOCK.RELEASE key token` (and `SEM.RELEASE`, for a semaphore's permits)
//! → 1 when `token` held the key and its hold is now gone (the key handed to
//! the first waiter that fits); 0 otherwise, with nothing changed. Of a key
//! with several holders, only `token`'s hold goes.

use redis_lock_core::args::parse_release_as;
use redis_lock_core::decide;
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{self, Family};
use redis_module::{Context, RedisString};

use crate::lease::ReleasedBy;
use crate::metrics::{self, Counter};
use crate::redis::{self, reply, server};
use crate::waiting;

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    release(ctx, args, Family::Lock)
}

pub fn run_sem(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    release(ctx, args, Family::Semaphore)
}

fn release(ctx: &Context, args: &[RedisString], family: Family) -> Result<(), LockError> {
    let arity = match family {
        Family::Lock => LockError::ArityRelease,
        Family::Semaphore => LockError::AritySemRelease,
    };
    let parsed = parse_release_as(redis::args(args), arity)?;
    super::refuse_local_write_on_replica(ctx)?;
    let name = &args[1];
    let (key, now_ms) = super::open_write(ctx, name);
    let holds = key.held()?;
    // A free key is no semaphore's any more (it goes with its last holder):
    // 0 below, as for a lock, not WRONGTYPE.
    hold::admits(family, holds.kind())?;
    let kind = holds.kind();
    let mine = super::live_mine(&holds, Some(parsed.token), now_ms);
    drop(holds);
    match kind {
        Some(kind) if decide::release(mine) => {
            let db = server::selected_db(ctx);
            waiting::release(ctx, db, key, name, kind, parsed.token, ReleasedBy::Holder);
            reply::integer(ctx, 1);
        }
        _ => {
            metrics::count(Counter::StaleReleases);
            reply::integer(ctx, 0);
        }
    }
    Ok(())
}
