//! Every extension, of one key or many, one path:
//! - `LOCK.EXTEND key token ttl-ms [SYNC numreplicas timeout-ms]` (and
//!   `SEM.EXTEND`, the same for a semaphore's permits) → 1 when `token`
//!   holds the key and its lease now ends `ttl-ms` from now; 0 otherwise,
//!   with nothing changed.
//! - `LOCK.MEXTEND numkeys key [key ...] token ttl-ms [SYNC n timeout-ms]`
//!   ([`run_many`]) → 1 when `token` held every key (all extended), else 0
//!   and nothing changed.
//!
//! A `LIMIT` error when `lock.max-hold-ms` or `lock.max-extends` forbids the
//! extension (every lease is left as it was). Of a key with several
//! holders, only `token`'s lease moves. A hold attached to a lease group
//! (`LEASE`) lives as long as its lease: 1, and nothing moves. A token
//! whose hold was revoked gets `REVOKED <reason>` instead of 0
//! (`LOCK.REVOKE`).

use redis_lock_core::args::{parse_extend_as, parse_mextend, ExtendArgs};
use redis_lock_core::decide::{self, Extend};
use redis_lock_core::errors::LockError;
use redis_lock_core::few::Few;
use redis_lock_core::hold::{self, Family};
use redis_module::{Context, RedisString};

use crate::redis::command::report_numkeys;
use crate::redis::{self, reply, server};
use crate::state::config;
use crate::state::metrics::{self, Counter};
use crate::sync;
use crate::{holds, wait_queue};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_extend_as(
        redis::args(args),
        config::max_ttl_ms(),
        LockError::ArityExtend,
    )?;
    extend(ctx, std::slice::from_ref(&args[1]), &parsed, Family::Lock)
}

pub fn run_sem(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let arity = LockError::AritySemExtend;
    let parsed = parse_extend_as(redis::args(args), config::max_ttl_ms(), arity)?;
    extend(
        ctx,
        std::slice::from_ref(&args[1]),
        &parsed,
        Family::Semaphore,
    )
}

/// `LOCK.MEXTEND`: its keys, then the extension every hold takes.
pub fn run_many(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if ctx.is_keys_position_request() {
        report_numkeys(ctx, args);
        return Ok(());
    }
    let parsed = parse_mextend(redis::args(args), config::max_keys(), config::max_ttl_ms())?;
    extend(
        ctx,
        &args[parsed.keys.clone()],
        &parsed.extend,
        Family::Lock,
    )
}

/// `token`'s hold on every key of `names` moves to `ttl-ms` from now, or
/// none does.
fn extend(
    ctx: &Context,
    names: &[RedisString],
    parsed: &ExtendArgs,
    family: Family,
) -> Result<(), LockError> {
    super::refuse_local_write_on_replica(ctx)?;
    super::may_sync(ctx, parsed.sync)?;
    let (mut opened, now_ms) = super::open_each(ctx, names);
    let mut mine = Few::with_capacity(names.len());
    for key in &opened {
        let holds = key.held()?;
        // A free key is no semaphore's any more (it goes with its last
        // holder): 0 below, as for a lock, not WRONGTYPE.
        hold::admits(family, holds.kind())?;
        mine.push(super::live_mine(&holds, Some(parsed.token), now_ms));
    }
    let extended = match decide::extend_many(&mine, parsed.ttl_ms, now_ms, config::hold_policy()) {
        Ok(Some(extended)) => extended,
        Ok(None) => {
            drop(opened);
            metrics::count(Counter::StaleExtends);
            // The first key the token does not hold says why: revoked, or
            // simply not (any more) its.
            let lost = names.iter().zip(&mine).find(|(_, m)| m.is_none());
            let revoked =
                lost.and_then(|(name, _)| super::revoked(ctx, name, parsed.token, now_ms));
            match revoked {
                Some(revoked) => reply::error_text(ctx, &revoked),
                None => reply::integer(ctx, 0),
            }
            return Ok(());
        }
        Err(error) => {
            if error.is_hold_limit() {
                metrics::count(Counter::ExtendsLimited);
            }
            return Err(error);
        }
    };
    for (((key, name), done), mine) in opened.iter_mut().zip(names).zip(&extended).zip(&mine) {
        match (done, mine) {
            (Extend::Renewed(renewal), _) => {
                holds::renew(ctx, key, name, parsed.token, renewal, None)?;
            }
            // Kept by its lease group: nothing moves, but it is answered
            // as held.
            (Extend::Leased, Some(mine)) => sync::confirm(mine.fence),
            _ => {}
        }
    }
    drop(opened);
    let db = server::selected_db(ctx);
    for (name, done) in names.iter().zip(&extended) {
        // A shorter lease brings the hand-off to waiters forward.
        if let Extend::Renewed(renewal) = done {
            wait_queue::wake_at(ctx, db, name, renewal.wake_at_ms());
        }
    }
    super::extended(ctx, parsed.sync)
}
