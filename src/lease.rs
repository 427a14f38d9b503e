//! The lease owner: the one place that makes a holder, moves a holder's
//! deadline and takes a lock away, each with its effect replicated, its
//! keyspace event fired and its counter counted.
//!
//! It calls nothing above it. It returns what happened (the fence, the
//! deadline) and the caller does the rest: binding a SESSION, arming the
//! queue's wake-up, handing the key on (`waiting.rs`).

use redis_lock_core::decide::Renewal;
use redis_lock_core::errors::LockError;
use redis_lock_core::lock::Lock;
use redis_module::{Context, RedisString};

use crate::metrics::{self, Counter};
use crate::redis::key::LockKey;
use crate::redis::replicate::{self, LockState};
use crate::redis::server;
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
    observers::changed(ctx, server::selected_db(ctx), name);
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
    observers::changed(ctx, server::selected_db(ctx), name);
    match by {
        ReleasedBy::Holder => metrics::count(Counter::Releases),
        ReleasedBy::Session => metrics::count(Counter::SessionReleases),
        ReleasedBy::Reclaim => {}
    }
}
