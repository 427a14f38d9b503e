//! The lease owner: the one place that makes a holder, moves a holder's
//! deadline and takes a hold away, each with its effect replicated, its
//! keyspace event fired and its counter counted, for a hold of any kind
//! (an exclusive lock, a reader, a semaphore's permits: the kind is data,
//! a [`Want`]).
//!
//! It calls nothing above it. It returns what happened (the fence, whether
//! the key went) and the caller does the rest: binding a SESSION, arming
//! the queue's wake-up, handing the key on (`waiting.rs`).

use redis_lock_core::decide::Renewal;
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{Event, Hold, Kind, Want};
use redis_lock_core::token::UUID_LEN;
use redis_module::{Context, RedisString};

use crate::metrics::{self, Counter};
use crate::redis::key::LockKey;
use crate::redis::replicate::{self, HoldState};
use crate::{fence, observers};

/// Who is granted a hold, and for how long.
pub struct Grantee<'a> {
    pub token: &'a [u8],
    /// Its public label (`OWNER`), if any.
    pub owner: Option<&'a [u8]>,
    pub now_ms: i64,
    pub deadline_ms: i64,
}

/// Make `grantee` a holder of `name` (open as `key`: free, or held in the
/// same kind, as the caller decided) as `want` says, until its deadline,
/// granted now, with a new fence; replicated with every value explicit
/// (`LOCK.SETSTATE` for a lock, `LOCK.SETHOLDER` for one of several).
/// Returns the fence.
pub fn grant(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    grantee: &Grantee,
    want: Want,
) -> Result<u64, LockError> {
    let Grantee {
        token,
        owner,
        now_ms,
        deadline_ms,
    } = *grantee;
    let fence = fence::issue().ok_or(LockError::FenceExhausted)?;
    let hold = Hold::granted(token, fence, now_ms, deadline_ms)
        .with_count(want.count())
        .with_owner(owner);
    key.put(want, hold)?;
    let kind = want.kind();
    replicate::touched(ctx, name);
    replicate::hold(
        ctx,
        name,
        kind,
        &HoldState {
            token,
            count: want.count(),
            fence,
            deadline_ms,
            granted_ms: now_ms,
            extends: 0,
            owner,
        },
    );
    replicate::notify(ctx, kind.event(Event::Acquired), name);
    metrics::count(Counter::Grants);
    observers::changed_here(ctx, name);
    Ok(fence)
}

/// The holder `token` of `name` keeps its hold until `renewal.deadline_ms`,
/// with `owner` as its new label if given; another holder's lease does not
/// move. The whole state is replicated again, since the extension count
/// changed too. The caller counts it (an EXTEND, or a renewing ACQUIRE) and
/// brings the queue's wake-up forward if the lease got shorter.
pub fn renew(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
    renewal: &Renewal,
    owner: Option<&[u8]>,
) -> Result<(), LockError> {
    let (kind, hold) = key.renew(token, renewal.deadline_ms, renewal.extends, owner)?;
    let state = HoldState {
        token,
        count: hold.count,
        fence: renewal.fence,
        deadline_ms: renewal.deadline_ms,
        granted_ms: hold.granted_ms,
        extends: renewal.extends,
        owner: hold.owner.get(),
    };
    replicate::touched(ctx, name);
    replicate::hold(ctx, name, kind, &state);
    replicate::notify(ctx, kind.event(Event::Extended), name);
    Ok(())
}

/// Who gave a hold back, for `INFO lock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleasedBy {
    /// `LOCK.RELEASE` / `SEM.RELEASE` by the holder.
    Holder,
    /// The holder's SESSION connection closed.
    Session,
    /// A waiter granted the key disconnected before its reply.
    Reclaim,
    /// A grant whose replicas did not hold it in time (`SYNC`), or whose
    /// client left while it waited for them (`sync.rs` counts it).
    Undone,
}

/// `token`'s hold on `name` (open as `key`, of `kind`) is gone: replicated
/// as `LOCK.DELHOLDER`, or `DEL` when the key went with it. Handing the
/// freed place on is the caller's (`waiting::release`).
pub fn release(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    kind: Kind,
    token: &[u8],
    by: ReleasedBy,
) {
    let Some(gone) = key.take(token) else {
        return;
    };
    replicate::touched(ctx, name);
    replicate::notify(ctx, kind.event(Event::Released), name);
    if gone {
        replicate::del(ctx, name);
    } else {
        replicate::del_holder(ctx, name, token);
    }
    observers::changed_here(ctx, name);
    match by {
        ReleasedBy::Holder => metrics::count(Counter::Releases),
        ReleasedBy::Session => metrics::count(Counter::SessionReleases),
        ReleasedBy::Reclaim | ReleasedBy::Undone => {}
    }
}

/// Take out of `name` (a key with several holders) the holds whose lease
/// ran out by `now_ms` (a master does this when it opens the key, and on
/// the hand-off timer), each replicated as `LOCK.DELHOLDER` (`DEL` for the
/// last), counted and announced as an expiry. Returns how many.
pub fn expire(ctx: &Context, key: &mut LockKey, name: &RedisString, now_ms: i64) -> usize {
    let Some((kind, expired, gone)) = key.expire(now_ms) else {
        return 0;
    };
    replicate::touched(ctx, name);
    for (i, hold) in expired.iter().enumerate() {
        let mut buffer = [0u8; UUID_LEN];
        if gone && i + 1 == expired.len() {
            replicate::del(ctx, name);
        } else {
            replicate::del_holder(ctx, name, hold.token(&mut buffer));
        }
        metrics::count(Counter::Expiries);
        replicate::notify(ctx, kind.event(Event::Expired), name);
    }
    observers::changed_here(ctx, name);
    expired.len()
}

/// Put the TTL of `name` (open as `key`), a key with several holders, back
/// to its latest holder's deadline if a client moved it, replicated as
/// `PEXPIREAT`.
pub fn follow_latest_holder(ctx: &Context, key: &mut LockKey, name: &RedisString) {
    if let Some(latest) = key.follow_latest() {
        replicate::touched(ctx, name);
        replicate::expire_at(ctx, name, latest);
    }
}
