//! The lease owner: the one place that makes a holder, moves a holder's
//! deadline and takes a lock away, each with its effect replicated, its
//! keyspace event fired and its counter counted: for an exclusive lock
//! (`grant`, `renew`, `release`) and for one holder of a shared lock or a
//! semaphore (`grant_holder`, `renew_holder`, `release_holder`,
//! `expire_holders`).
//!
//! It calls nothing above it. It returns what happened (the fence, the
//! deadline) and the caller does the rest: binding a SESSION, arming the
//! queue's wake-up, handing the key on (`waiting.rs`).

use std::ffi::CStr;

use redis_lock_core::decide::Renewal;
use redis_lock_core::errors::LockError;
use redis_lock_core::holders::{Holder, Holders};
use redis_lock_core::lock::{Lock, OwnerLabel};
use redis_lock_core::token::UUID_LEN;
use redis_module::{Context, RedisString};

use crate::metrics::{self, Counter};
use crate::redis::key::LockKey;
use crate::redis::replicate::{self, HolderState, LockState};
use crate::{fence, observers};

/// Who is granted a lock, and for how long.
pub struct Grantee<'a> {
    pub token: &'a [u8],
    /// Its public label (`OWNER`), if any.
    pub owner: Option<&'a [u8]>,
    pub now_ms: i64,
    pub deadline_ms: i64,
}

/// Make `grantee` the holder of the free key `name` (open as `key`) until
/// its deadline, granted now, with a new fence; replicated as
/// `LOCK.SETSTATE` with every value explicit. Returns the fence.
pub fn grant(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    grantee: &Grantee,
) -> Result<u64, LockError> {
    let Grantee {
        token,
        owner,
        now_ms,
        deadline_ms,
    } = *grantee;
    let fence = fence::issue().ok_or(LockError::FenceExhausted)?;
    key.store(Lock::granted(token, fence, now_ms, deadline_ms).with_owner(owner))?;
    replicate::touched(ctx, name);
    replicate::lock_state(
        ctx,
        name,
        &LockState {
            token,
            fence,
            deadline_ms,
            granted_ms: now_ms,
            extends: 0,
            owner,
        },
    );
    replicate::notify(ctx, c"lock.acquired", name);
    metrics::count(Counter::Grants);
    observers::changed_here(ctx, name);
    Ok(fence)
}

/// The holder `token` of `name` keeps it until `renewal.deadline_ms`, with
/// `owner` as its new label if given: the whole state is replicated again,
/// since the extension count changed too. The caller counts it (an EXTEND,
/// or a renewing ACQUIRE) and brings the queue's wake-up forward if the
/// lease got shorter.
pub fn renew(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
    renewal: &Renewal,
    owner: Option<&[u8]>,
) -> Result<(), LockError> {
    let lock = key.renew(renewal.deadline_ms, renewal.extends, owner)?;
    let state = LockState {
        token,
        fence: renewal.fence,
        deadline_ms: renewal.deadline_ms,
        granted_ms: lock.granted_ms,
        extends: renewal.extends,
        owner: lock.owner.get(),
    };
    replicate::touched(ctx, name);
    replicate::lock_state(ctx, name, &state);
    replicate::notify(ctx, c"lock.extended", name);
    Ok(())
}

/// Who gave a lock back, for `INFO lock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleasedBy {
    /// `LOCK.RELEASE` by the holder.
    Holder,
    /// The holder's SESSION connection closed.
    Session,
    /// A waiter granted the lock disconnected before its reply.
    Reclaim,
}

/// The lock on `name` (open as `key`) is gone: deleted, replicated as `DEL`.
/// Handing it on is the caller's (`waiting::release`).
pub fn release(ctx: &Context, key: &mut LockKey, name: &RedisString, by: ReleasedBy) {
    key.delete();
    replicate::touched(ctx, name);
    replicate::notify(ctx, c"lock.released", name);
    replicate::del(ctx, name);
    observers::changed_here(ctx, name);
    match by {
        ReleasedBy::Holder => metrics::count(Counter::Releases),
        ReleasedBy::Session => metrics::count(Counter::SessionReleases),
        ReleasedBy::Reclaim => {}
    }
}

/// The keyspace events of a key with several holders: `lock.*` for a shared
/// lock, `sem.*` for a semaphore.
pub fn event(limit: u32, lock: &'static CStr, sem: &'static CStr) -> &'static CStr {
    if limit == 0 {
        lock
    } else {
        sem
    }
}

/// A new holder of a shared lock (`limit` 0) or of `count` of a semaphore's
/// `limit` permits.
pub struct HolderGrant<'a> {
    pub grantee: Grantee<'a>,
    pub limit: u32,
    pub count: u32,
}

/// Add `grant`'s holder to `name` (open as `key`: free, or already held in
/// the same kind, as the caller decided), with a new fence; replicated as
/// `LOCK.SETHOLDER`. Returns the fence.
pub fn grant_holder(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    grant: &HolderGrant,
) -> Result<u64, LockError> {
    let g = &grant.grantee;
    let fence = fence::issue().ok_or(LockError::FenceExhausted)?;
    let mut holder = Holder::new(g.token, fence, g.now_ms, g.deadline_ms, grant.count);
    holder.owner = OwnerLabel::new(g.owner);
    match key.holders_mut() {
        Some(holders) => {
            holders.put(holder);
            key.holders_changed();
        }
        None => {
            let mut holders = Holders::new(grant.limit);
            holders.put(holder);
            key.store_holders(holders)?;
        }
    }
    replicate::touched(ctx, name);
    replicate::holder(
        ctx,
        name,
        &HolderState {
            limit: grant.limit,
            count: grant.count,
            token: g.token,
            fence,
            deadline_ms: g.deadline_ms,
            granted_ms: g.now_ms,
            extends: 0,
            owner: g.owner,
        },
    );
    replicate::notify(
        ctx,
        event(grant.limit, c"lock.acquired", c"sem.acquired"),
        name,
    );
    metrics::count(Counter::Grants);
    observers::changed_here(ctx, name);
    Ok(fence)
}

/// The holder `token` of `name` keeps its lease until `renewal.deadline_ms`
/// (with `owner` as its new label if given); the others' leases do not move.
pub fn renew_holder(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
    renewal: &Renewal,
    owner: Option<&[u8]>,
) -> Result<(), LockError> {
    let holders = key.holders_mut().ok_or(LockError::Internal)?;
    let limit = holders.limit;
    let holder = holders.find_mut(token).ok_or(LockError::Internal)?;
    holder.deadline_ms = renewal.deadline_ms;
    holder.extends = renewal.extends;
    if owner.is_some() {
        holder.owner = OwnerLabel::new(owner);
    }
    let (count, granted_ms) = (holder.count, holder.granted_ms);
    let label = holder.owner.clone();
    key.holders_changed();
    replicate::touched(ctx, name);
    replicate::holder(
        ctx,
        name,
        &HolderState {
            limit,
            count,
            token,
            fence: renewal.fence,
            deadline_ms: renewal.deadline_ms,
            granted_ms,
            extends: renewal.extends,
            owner: label.get(),
        },
    );
    replicate::notify(ctx, event(limit, c"lock.extended", c"sem.extended"), name);
    Ok(())
}

/// Take `token`'s holder out of `name`: replicated as `LOCK.DELHOLDER`, or
/// as `DEL` when it was the last one (the key is gone). Handing the freed
/// place on is the caller's (`waiting::release`).
pub fn release_holder(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
    by: ReleasedBy,
) {
    let Some(holders) = key.holders_mut() else {
        return;
    };
    let limit = holders.limit;
    if holders.remove(token).is_none() {
        return;
    }
    let last = holders.list.is_empty();
    let latest = holders.latest_deadline();
    // The key's TTL follows the latest lease: set again only if it differs
    // (the key goes with its last holder), which a replica's and the AOF's
    // `LOCK.DELHOLDER` also make sure of.
    if last || key.deadline() != latest {
        key.holders_changed();
    }
    replicate::touched(ctx, name);
    replicate::notify(ctx, event(limit, c"lock.released", c"sem.released"), name);
    if last {
        replicate::del(ctx, name);
    } else {
        replicate::del_holder(ctx, name, token);
    }
    observers::changed_here(ctx, name);
    match by {
        ReleasedBy::Holder => metrics::count(Counter::Releases),
        ReleasedBy::Session => metrics::count(Counter::SessionReleases),
        ReleasedBy::Reclaim => {}
    }
}

/// Put the TTL of `name` (open as `key`), a key with several holders, back
/// to its latest holder's deadline if a client moved it, replicated as
/// `PEXPIREAT`.
pub fn follow_latest_holder(ctx: &Context, key: &mut LockKey, name: &RedisString) {
    let Some(latest) = key.holders_mut().and_then(|h| h.latest_deadline()) else {
        return;
    };
    if key.deadline() == Some(latest) {
        return;
    }
    key.holders_changed();
    replicate::touched(ctx, name);
    replicate::expire_at(ctx, name, latest);
}

/// Take out of `name` the holders whose lease ran out by `now_ms` (a master
/// does this when it opens the key, and on the hand-off timer), each
/// replicated as `LOCK.DELHOLDER` (`DEL` for the last), counted and
/// announced as an expiry. Returns how many.
pub fn expire_holders(ctx: &Context, key: &mut LockKey, name: &RedisString, now_ms: i64) -> usize {
    let Some(holders) = key.holders_mut() else {
        return 0;
    };
    let limit = holders.limit;
    let expired = holders.take_expired(now_ms);
    if expired.is_empty() {
        return 0;
    }
    let last = holders.list.is_empty();
    key.holders_changed();
    replicate::touched(ctx, name);
    for (i, h) in expired.iter().enumerate() {
        let mut buffer = [0u8; UUID_LEN];
        if last && i + 1 == expired.len() {
            replicate::del(ctx, name);
        } else {
            replicate::del_holder(ctx, name, h.token(&mut buffer));
        }
        metrics::count(Counter::Expiries);
        replicate::notify(ctx, event(limit, c"lock.expired", c"sem.expired"), name);
    }
    observers::changed_here(ctx, name);
    expired.len()
}
