//! `LOCK.EXTEND key token ttl-ms [SYNC numreplicas timeout-ms]` (and
//! `SEM.EXTEND`, the same for a
//! semaphore's permits) → 1 when `token` holds the key and its lease now ends
//! `ttl-ms` from now; 0 otherwise, with nothing changed. A `LIMIT` error when
//! `lock.max-hold-ms` or `lock.max-extends` forbids the extension (the lease
//! is left as it was). Of a key with several holders, only `token`'s lease
//! moves. A hold attached to a lease group (`LEASE`) lives as long as its
//! lease: 1, and nothing moves. A token whose hold was revoked gets
//! `REVOKED <reason>` instead of 0 (`LOCK.REVOKE`).

use redis_lock_core::args::parse_extend_as;
use redis_lock_core::decide::{self, Extend};
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{self, Family};
use redis_module::{Context, RedisString};

use crate::metrics::{self, Counter};
use crate::redis::{self, reply, server};
use crate::sync;
use crate::{config, lease, waiting};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    extend(ctx, args, Family::Lock)
}

pub fn run_sem(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    extend(ctx, args, Family::Semaphore)
}

fn extend(ctx: &Context, args: &[RedisString], family: Family) -> Result<(), LockError> {
    let arity = match family {
        Family::Lock => LockError::ArityExtend,
        Family::Semaphore => LockError::AritySemExtend,
    };
    let parsed = parse_extend_as(redis::args(args), config::max_ttl_ms(), arity)?;
    super::refuse_local_write_on_replica(ctx)?;
    super::may_sync(ctx, parsed.sync)?;
    let name = &args[1];
    let (mut key, now_ms) = super::open_write(ctx, name);
    let holds = key.held()?;
    // A free key is no semaphore's any more (it goes with its last holder):
    // 0 below, as for a lock, not WRONGTYPE.
    hold::admits(family, holds.kind())?;
    let mine = super::live_mine(&holds, Some(parsed.token), now_ms);
    drop(holds);
    let fence = mine.map(|m| m.fence);
    match decide::extend(mine, parsed.ttl_ms, now_ms, config::hold_policy()) {
        Ok(Extend::NotHolder) => {
            metrics::count(Counter::StaleExtends);
            match super::revoked(ctx, name, parsed.token, now_ms) {
                Some(revoked) => reply::error_text(ctx, &revoked),
                None => reply::integer(ctx, 0),
            }
        }
        Ok(Extend::Leased) => {
            // Its lease group keeps it alive: nothing to move, but it is
            // answered as held.
            drop(key);
            if let Some(fence) = fence {
                sync::confirm(fence);
            }
            super::extended(ctx, parsed.sync)?;
        }
        Ok(Extend::Renewed(renewal)) => {
            lease::renew(ctx, &mut key, name, parsed.token, &renewal, None)?;
            drop(key);
            // A shorter lease brings the hand-off to waiters forward.
            waiting::wake_at(ctx, server::selected_db(ctx), name, renewal.wake_at_ms());
            super::extended(ctx, parsed.sync)?;
        }
        Err(error) if error.is_hold_limit() => {
            metrics::count(Counter::ExtendsLimited);
            return Err(error);
        }
        Err(error) => return Err(error),
    }
    Ok(())
}
