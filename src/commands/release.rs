//! Every release, of one key or many, one path:
//! - `LOCK.RELEASE key token` (and `SEM.RELEASE`, for a semaphore's
//!   permits) → 1 when `token` held the key and its hold is now gone (the
//!   key handed to the first waiter that fits); 0 otherwise, with nothing
//!   changed. Of a key with several holders, only `token`'s hold goes.
//! - `LOCK.MRELEASE numkeys key [key ...] token` ([`run_many`]) → how many
//!   keys it released, each handed on as `LOCK.RELEASE` would.

use redis_lock_core::args::{parse_mrelease, parse_release_as};
use redis_lock_core::decide;
use redis_lock_core::errors::LockError;
use redis_lock_core::few::Few;
use redis_lock_core::hold::{self, Family};
use redis_module::{Context, RedisString};

use crate::holds::{self, ReleasedBy};
use crate::redis::command::report_numkeys;
use crate::redis::{self, reply, server};
use crate::state::config;
use crate::state::metrics::{self, Counter};
use crate::wait_queue;

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_release_as(redis::args(args), LockError::ArityRelease)?;
    release(
        ctx,
        std::slice::from_ref(&args[1]),
        parsed.token,
        Family::Lock,
    )
}

pub fn run_sem(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_release_as(redis::args(args), LockError::AritySemRelease)?;
    release(
        ctx,
        std::slice::from_ref(&args[1]),
        parsed.token,
        Family::Semaphore,
    )
}

/// `LOCK.MRELEASE`: its keys, then the release every hold takes.
pub fn run_many(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if ctx.is_keys_position_request() {
        report_numkeys(ctx, args);
        return Ok(());
    }
    let parsed = parse_mrelease(redis::args(args), config::max_keys())?;
    release(ctx, &args[parsed.keys.clone()], parsed.token, Family::Lock)
}

/// `token`'s hold on each key of `names` goes, where it has one; reply how
/// many went.
fn release(
    ctx: &Context,
    names: &[RedisString],
    token: &[u8],
    family: Family,
) -> Result<(), LockError> {
    super::refuse_local_write_on_replica(ctx)?;
    // Every key is checked (a key of another type refuses the whole
    // request) before any is released.
    let mut held = Few::with_capacity(names.len());
    for name in names {
        let (key, now_ms) = super::open_write(ctx, name);
        let holds = key.held()?;
        // A free key is no semaphore's any more (it goes with its last
        // holder): 0 below, as for a lock, not WRONGTYPE.
        hold::admits(family, holds.kind())?;
        let kind = holds.kind();
        let mine = super::live_mine(&holds, Some(token), now_ms);
        drop(holds);
        held.push((key, kind.filter(|_| decide::release(mine))));
    }
    // Every key is released before any is handed on: a hand-off may serve
    // a multi-key waiter, which opens (and may change: expire a reader
    // whose lease ran out since, grant) another of these keys, still open
    // here with the value it had when it was looked up.
    let mut released = Few::with_capacity(names.len());
    for ((mut key, kind), name) in held.into_iter().zip(names) {
        match kind {
            Some(kind) => {
                holds::release(ctx, &mut key, name, kind, token, ReleasedBy::Holder);
                released.push(name);
            }
            None => metrics::count(Counter::StaleReleases),
        }
    }
    if !released.is_empty() {
        let db = server::selected_db(ctx);
        for name in &released {
            wait_queue::handed_on(ctx, db, name);
        }
    }
    reply::integer(ctx, released.len() as i64);
    Ok(())
}
