//! `LOCK.RELEASE key token` (and `SEM.RELEASE`, for a semaphore's permits)
//! → 1 when `token` held the key and its hold is now gone (the key handed to
//! the first waiter that fits); 0 otherwise, with nothing changed. Of a key
//! with several holders, only `token`'s hold goes.

use redis_lock_core::args::parse_release_as;
use redis_lock_core::decide;
use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use super::Family;
use crate::lease::ReleasedBy;
use crate::metrics::{self, Counter};
use crate::redis::key::{Held, LockKey};
use crate::redis::{self, reply, server};
use crate::{lease, waiting};

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
    let db = server::selected_db(ctx);

    let mut key = LockKey::open_write(ctx, name);
    let held = match key.held()? {
        // A free key is no semaphore's any more (it goes with its last
        // holder): 0 below, as for a lock, not WRONGTYPE.
        Held::Exclusive(_) | Held::Shared(_) if family == Family::Semaphore => {
            return Err(LockError::WrongType)
        }
        Held::Semaphore(_) if family == Family::Lock => return Err(LockError::WrongType),
        Held::Shared(_) | Held::Semaphore(_) => {
            let now_ms = server::now_ms();
            if server::is_master(ctx) {
                lease::expire_holders(ctx, &mut key, name, now_ms);
            }
            let holds = match key.held()? {
                Held::Shared(h) | Held::Semaphore(h) => h.find(parsed.token, now_ms).is_some(),
                _ => false,
            };
            if holds {
                waiting::release_holder(ctx, db, key, name, parsed.token, ReleasedBy::Holder);
                reply::integer(ctx, 1);
                return Ok(());
            }
            false
        }
        Held::Free => false,
        Held::Exclusive(lock) => decide::release(Some(&lock), parsed.token),
    };
    if !held {
        metrics::count(Counter::StaleReleases);
        reply::integer(ctx, 0);
        return Ok(());
    }
    waiting::release(ctx, db, key, name, ReleasedBy::Holder);
    reply::integer(ctx, 1);
    Ok(())
}
