//! The lease owner: the one place that makes a holder, moves a holder's
//! deadline and takes a hold away, each with its effect replicated, its
//! keyspace event fired and its counter counted, for a hold of any kind
//! (an exclusive lock, a reader, a semaphore's permits: the kind is data,
//! a [`Want`]).
//!
//! It calls nothing above it. It returns what happened (the fence, whether
//! the key went) and the caller does the rest: binding a SESSION, arming
//! the queue's wake-up, handing the key on (`wait_queue/`).

use redis_lock_core::decide::Renewal;
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{Event, Hold, Kind, Want};
use redis_lock_core::token::UUID_LEN;
use redis_module::{Context, RedisString};

use crate::redis::key::LockKey;
use crate::redis::replicate::{self, HoldState};
use crate::redis::server;
use crate::state::metrics::{self, Counter};
use crate::state::{fence, lease_registry};
use crate::{observers, sync};

/// Who is granted a hold, and for how long.
pub struct Grantee<'a> {
    pub token: &'a [u8],
    /// Its public label (`OWNER`), if any.
    pub owner: Option<&'a [u8]>,
    pub now_ms: i64,
    /// Its own deadline, or, attached to a lease group, its key's horizon.
    pub deadline_ms: i64,
    /// The lease group it is attached to (`LEASE`): its number.
    pub lease: Option<u64>,
}

/// Make `grantee` a holder of every key of `names` (open as `keys`: each
/// free, or held in the same kind, as the caller decided) as `want` says,
/// until its deadline, granted now, with one new fence for them all (issued
/// once, above every fence any of them has had); replicated with every
/// value explicit (`LOCK.SETSTATE` for a lock, `LOCK.SETHOLDER` for one of
/// several). All or nothing: a key that refuses (a bug: each was decided
/// grantable on keys still open) takes back the keys granted before it, and
/// the error is returned. The one grant for one key or many, by a command
/// or the queue. Returns the fence.
pub fn grant(
    ctx: &Context,
    keys: &mut [LockKey],
    names: &[RedisString],
    grantee: &Grantee,
    want: Want,
) -> Result<u64, LockError> {
    let fence = fence::issue().ok_or(LockError::FenceExhausted)?;
    for (i, (key, name)) in keys.iter_mut().zip(names).enumerate() {
        if let Err(error) = grant_with_fence(ctx, key, name, grantee, want, fence) {
            for (key, name) in keys.iter_mut().zip(names).take(i) {
                release(
                    ctx,
                    key,
                    name,
                    want.kind(),
                    grantee.token,
                    ReleasedBy::Undone,
                );
            }
            return Err(error);
        }
    }
    Ok(fence)
}

/// One key of [`grant`], with the fence already issued.
fn grant_with_fence(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    grantee: &Grantee,
    want: Want,
    fence: u64,
) -> Result<(), LockError> {
    let Grantee {
        token,
        owner,
        now_ms,
        deadline_ms,
        lease,
    } = *grantee;
    let hold = Hold::granted(token, fence, now_ms, deadline_ms)
        .with_count(want.count())
        .with_owner(owner)
        .with_lease(lease);
    key.put(want, hold)?;
    if let Some(number) = lease {
        lease_registry::attached(server::selected_db(ctx), name, fence, number, deadline_ms);
    }
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
            lease,
        },
    );
    replicate::notify(ctx, kind.event(Event::Acquired), name);
    metrics::count(Counter::Grants);
    observers::changed_here(ctx, name);
    Ok(())
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
        owner: hold.tags.owner(),
        lease: hold.tags.lease(),
    };
    replicate::touched(ctx, name);
    replicate::hold(ctx, name, kind, &state);
    replicate::notify(ctx, kind.event(Event::Extended), name);
    // Its token is answered as the holder: no undo of its grant may take
    // it now.
    sync::confirm(renewal.fence);
    Ok(())
}

/// The hold with `fence` on `name` (open as `key`), attached to lease group
/// `number`, runs to `until_ms` now: its key's horizon moved as its lease
/// was kept alive (`lease_groups.rs`). Replicated; no event (nothing a client
/// sees changed: the hold lives as long as its lease, as before). Whether
/// the hold was there.
pub fn move_horizon(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    fence: u64,
    number: u64,
    until_ms: i64,
) -> bool {
    let mut buffer = [0u8; UUID_LEN];
    let (token, extends) = match key.held() {
        Ok(holds) => match holds.bound(fence, None) {
            Some(hold) if hold.tags.lease() == Some(number) => {
                (hold.token(&mut buffer).to_vec(), hold.extends)
            }
            _ => return false,
        },
        Err(_) => return false,
    };
    let Ok((kind, hold)) = key
        .renew(&token, until_ms, extends, None)
        .map(|(kind, hold)| {
            (
                kind,
                (hold.count, hold.granted_ms, hold.extends, hold.tags.clone()),
            )
        })
    else {
        return false;
    };
    let (count, granted_ms, extends, tags) = hold;
    let state = HoldState {
        token: &token,
        count,
        fence,
        deadline_ms: until_ms,
        granted_ms,
        extends,
        owner: tags.owner(),
        lease: tags.lease(),
    };
    replicate::hold(ctx, name, kind, &state);
    true
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
    /// Taken away: `LOCK.REVOKE`, or its lease group revoked.
    Revoked,
}

/// `token`'s hold on `name` (open as `key`, of `kind`) is gone: replicated
/// as `LOCK.DELHOLDER`, or `DEL` when the key went with it. Handing the
/// freed place on is the caller's (`wait_queue::release`).
pub fn release(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    kind: Kind,
    token: &[u8],
    by: ReleasedBy,
) {
    let Some(taken) = key.take(token) else {
        return;
    };
    if let Some(number) = taken.lease {
        lease_registry::detached(server::selected_db(ctx), name, taken.fence, number);
    }
    let event = match by {
        ReleasedBy::Revoked => Event::Revoked,
        _ => Event::Released,
    };
    replicate::touched(ctx, name);
    replicate::notify(ctx, kind.event(event), name);
    if taken.gone {
        replicate::del(ctx, name);
    } else {
        replicate::del_holder(ctx, name, token);
    }
    observers::changed_here(ctx, name);
    match by {
        ReleasedBy::Holder => metrics::count(Counter::Releases),
        ReleasedBy::Session => metrics::count(Counter::SessionReleases),
        ReleasedBy::Revoked => metrics::count(Counter::Revocations),
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
        if let Some(number) = hold.tags.lease() {
            lease_registry::detached(server::selected_db(ctx), name, hold.fence, number);
        }
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
