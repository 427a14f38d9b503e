//! Multi-key locks: one grant over several keys, all or none.
//! - `LOCK.MACQUIRE numkeys key [key ...] ttl-ms [TOKEN token] [WAIT
//!   timeout-ms] [SHARED] [OWNER label] [SESSION] [SYNC n timeout-ms]
//!   [LEASE id]` → `[token, fence]` when every key was granted to `token`
//!   in one step, with one fence and one deadline; null when any key is
//!   busy (or the wait ran out). With `WAIT` the request queues on every
//!   key, holding none (`waiting.rs`). `LEASE` attaches every key to the
//!   lease group, each key a hold of its own there (`groups.rs`); `SYNC`
//!   answers once that many replicas hold every key, else `NOSYNC` with the
//!   grant undone on every key.
//! - `LOCK.MRELEASE numkeys key [key ...] token` → how many keys it
//!   released (each handed on as `LOCK.RELEASE` would).
//! - `LOCK.MEXTEND numkeys key [key ...] token ttl-ms [SYNC n timeout-ms]`
//!   → 1 when `token` held every key (all extended), else 0 and nothing
//!   changed.
//!
//! Each key is then a hold like any other: `LOCK.RELEASE`, `EXTEND`,
//! `GUARD` and `INFO` work on it alone, and its lease ends on its own. The
//! keys are declared through `getkeys-api` (`redis/command.rs`), so Cluster
//! refuses keys of several slots (`CROSSSLOT`) and ACL key patterns see
//! every key. Every decision is the core's (`decide::acquire_many`,
//! `decide::extend_many`); everything is checked on every key before any
//! key changes.

use redis_lock_core::args::{parse_macquire, parse_mextend, parse_mrelease};
use redis_lock_core::decide::{self, AcquireMany, AcquireManyCase, Extend, ManyKey};
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{self, Family, Want};
use redis_lock_core::token::{self, UUID_LEN};
use redis_module::{Context, RedisString};

use redis_lock_core::sync::Stands;

use crate::lease::{self, Grantee, ReleasedBy};
use crate::metrics::{self, Counter};
use crate::redis::command::report_numkeys;
use crate::redis::key::LockKey;
use crate::redis::{self, reply, server};
use crate::sync::{self, Answer, Grant};
use crate::waiting::{self, WaitRequest};
use crate::{config, expiry, fence, groups, sessions};

pub fn run_acquire(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if ctx.is_keys_position_request() {
        report_numkeys(ctx, args);
        return Ok(());
    }
    let parsed = parse_macquire(redis::args(args), config::max_keys(), config::max_ttl_ms())?;
    let lock = &parsed.lock;
    super::refuse_local_write_on_replica(ctx)?;
    super::may_sync(ctx, lock.sync)?;
    let session = super::session_of(ctx, lock.session)?;
    let want = if lock.shared {
        Want::Shared
    } else {
        Want::Exclusive
    };
    let names = &args[parsed.keys.clone()];
    let db = server::selected_db(ctx);
    let mut opened: Vec<LockKey> = Vec::with_capacity(names.len());
    for name in names {
        opened.push(super::open_write(ctx, name).0);
    }
    let now_ms = server::now_ms();
    let mut many = Vec::with_capacity(names.len());
    for (key, name) in opened.iter().zip(names) {
        let holds = key.held()?;
        hold::admits(want.family(), holds.kind())?;
        let state = holds.state(now_ms);
        many.push(ManyKey {
            key: state,
            mine: super::live_mine(&holds, lock.token, now_ms),
            others_waiting: waiting::waiters(db, name) > 0,
            delayed_until_ms: expiry::delayed_until(db, name, now_ms),
        });
    }
    // `LEASE id`: a lease that is gone (or another server's) grants nothing.
    let lease = match &lock.lease {
        Some(id) => Some(groups::attach_to(id, now_ms)?),
        None => None,
    };
    let case = AcquireManyCase {
        keys: &many,
        want,
        ttl_ms: lock.ttl_ms,
        now_ms,
        hold: config::hold_policy(),
        may_wait: lock.wait_ms.is_some() && server::can_block(ctx),
        max_holders: config::max_holders(),
        lease,
        queued: false,
    };
    let decision = match decide::acquire_many(&case) {
        Ok(decision) => decision,
        Err(error) => {
            if error.is_hold_limit() {
                metrics::count(Counter::ExtendsLimited);
            }
            return Err(error);
        }
    };
    let granted = |fence: u64, token: &[u8]| {
        let keys: Vec<&[u8]> = names.iter().map(|name| name.as_slice()).collect();
        Grant::new(db, &keys, token, fence)
    };
    match decision {
        AcquireMany::Refuse => {
            metrics::count(Counter::Refused);
            reply::null(ctx);
        }
        AcquireMany::Queue { wake } => {
            drop(opened);
            let request = WaitRequest {
                token: lock.token,
                ttl_ms: lock.ttl_ms,
                wait_ms: lock.wait_ms.unwrap_or(0),
                session,
                owner: lock.owner,
                want,
                sync: lock.sync,
                lease: lock.lease,
            };
            waiting::enqueue_many(ctx, db, names, &request, &wake)?;
        }
        AcquireMany::Held { fence } => {
            // Held through its lease group, which alone moves it: its
            // grant, nothing moved.
            drop(opened);
            sync::confirm(fence);
            metrics::count(Counter::Renewals);
            bind(ctx, session, db, names, fence);
            let token = lock.token.unwrap_or_default();
            answer(
                ctx,
                lock.sync,
                token,
                fence,
                || granted(fence, token),
                Stands::Extension,
            )?;
        }
        AcquireMany::Renew { fence, renewals } => {
            // Renew is only decided for a caller-supplied token.
            let token = lock.token.unwrap_or_default();
            for ((key, name), renewal) in opened.iter_mut().zip(names).zip(&renewals) {
                lease::renew(ctx, key, name, token, renewal, lock.owner)?;
            }
            drop(opened);
            metrics::count(Counter::Renewals);
            for (name, renewal) in names.iter().zip(&renewals) {
                waiting::wake_at(ctx, db, name, renewal.wake_at_ms());
            }
            bind(ctx, session, db, names, fence);
            // A renewal is an extension: it stands whatever the replicas.
            answer(
                ctx,
                lock.sync,
                token,
                fence,
                || granted(fence, token),
                Stands::Extension,
            )?;
        }
        AcquireMany::Grant { deadline_ms } => {
            let mut drawn = [0u8; UUID_LEN];
            let token = match lock.token {
                Some(token) => token,
                None => token::draw(&mut drawn),
            };
            // One fence for every key: issued once, it is above every
            // fence any of them has had.
            let fence = fence::issue().ok_or(LockError::FenceExhausted)?;
            let grantee = Grantee {
                token,
                owner: lock.owner,
                now_ms,
                deadline_ms,
                lease: lease.map(|a| a.number),
            };
            lease::grant_each(ctx, &mut opened, names, &grantee, want, fence)?;
            drop(opened);
            metrics::count(Counter::MultiGrants);
            bind(ctx, session, db, names, fence);
            answer(
                ctx,
                lock.sync,
                token,
                fence,
                || granted(fence, token),
                Stands::Undone,
            )?;
        }
    }
    Ok(())
}

/// Reply `[token, fence]` now, or with `SYNC` once that many replicas hold
/// the grant (`stands`: a new grant is undone, on every key, if they do not
/// in time). The grant's copy of every key name (`grant`) is made only for
/// `SYNC`, which keeps it until it is answered; a new grant that cannot wait
/// is never answered, so never held: it goes back on every key.
fn answer(
    ctx: &Context,
    sync: Option<redis_lock_core::args::Sync>,
    token: &[u8],
    fence: u64,
    grant: impl FnOnce() -> Grant,
    stands: Stands,
) -> Result<(), LockError> {
    let Some(sync) = sync else {
        reply::grant(ctx, token, fence);
        return Ok(());
    };
    let grant = grant();
    let answer = Answer::Grant {
        token: token.into(),
        fence,
    };
    sync::block(ctx, sync, answer, stands, Some(grant))
}

/// `SESSION`: every key goes when the connection closes.
fn bind(ctx: &Context, session: Option<u64>, db: i32, names: &[RedisString], fence: u64) {
    if let Some(client) = session {
        for name in names {
            sessions::bind(ctx, client, db, name, fence);
        }
    }
}

pub fn run_release(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if ctx.is_keys_position_request() {
        report_numkeys(ctx, args);
        return Ok(());
    }
    let parsed = parse_mrelease(redis::args(args), config::max_keys())?;
    super::refuse_local_write_on_replica(ctx)?;
    let names = &args[parsed.keys.clone()];
    let db = server::selected_db(ctx);
    // Every key is checked (a key of another type refuses the whole
    // request) before any is released.
    let mut held = Vec::with_capacity(names.len());
    for name in names {
        let (key, now_ms) = super::open_write(ctx, name);
        let holds = key.held()?;
        hold::admits(Family::Lock, holds.kind())?;
        let kind = holds.kind();
        let mine = super::live_mine(&holds, Some(parsed.token), now_ms);
        drop(holds);
        held.push((key, kind.filter(|_| decide::release(mine))));
    }
    // Every key is released before any is handed on: a hand-off may serve
    // a multi-key waiter, which opens (and may change: expire a reader
    // whose lease ran out since, grant) another of these keys, still open
    // here with the value it had when it was looked up.
    let mut released = Vec::with_capacity(held.len());
    for ((mut key, kind), name) in held.into_iter().zip(names) {
        match kind {
            Some(kind) => {
                lease::release(ctx, &mut key, name, kind, parsed.token, ReleasedBy::Holder);
                released.push(name);
            }
            None => metrics::count(Counter::StaleReleases),
        }
    }
    for name in &released {
        waiting::handed_on(ctx, db, name);
    }
    reply::integer(ctx, released.len() as i64);
    Ok(())
}

pub fn run_extend(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if ctx.is_keys_position_request() {
        report_numkeys(ctx, args);
        return Ok(());
    }
    let parsed = parse_mextend(redis::args(args), config::max_keys(), config::max_ttl_ms())?;
    let extend = &parsed.extend;
    super::refuse_local_write_on_replica(ctx)?;
    super::may_sync(ctx, extend.sync)?;
    let names = &args[parsed.keys.clone()];
    let db = server::selected_db(ctx);
    let mut opened = Vec::with_capacity(names.len());
    let mut mine = Vec::with_capacity(names.len());
    for name in names {
        opened.push(super::open_write(ctx, name).0);
    }
    let now_ms = server::now_ms();
    for key in &opened {
        let holds = key.held()?;
        hold::admits(Family::Lock, holds.kind())?;
        mine.push(super::live_mine(&holds, Some(extend.token), now_ms));
    }
    let decided = decide::extend_many(&mine, extend.ttl_ms, now_ms, config::hold_policy());
    let extended = match decided {
        Ok(Some(extended)) => extended,
        Ok(None) => {
            metrics::count(Counter::StaleExtends);
            reply::integer(ctx, 0);
            return Ok(());
        }
        Err(error) if error.is_hold_limit() => {
            metrics::count(Counter::ExtendsLimited);
            return Err(error);
        }
        Err(error) => return Err(error),
    };
    for (((key, name), done), mine) in opened.iter_mut().zip(names).zip(&extended).zip(&mine) {
        match (done, mine) {
            (Extend::Renewed(renewal), _) => {
                lease::renew(ctx, key, name, extend.token, renewal, None)?;
            }
            // Kept by its lease group: nothing moves, but it is answered
            // as held.
            (Extend::Leased, Some(mine)) => sync::confirm(mine.fence),
            _ => {}
        }
    }
    drop(opened);
    for (name, done) in names.iter().zip(&extended) {
        if let Extend::Renewed(renewal) = done {
            waiting::wake_at(ctx, db, name, renewal.wake_at_ms());
        }
    }
    super::extended(ctx, extend.sync)
}
