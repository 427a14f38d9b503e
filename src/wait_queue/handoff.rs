//! The one release-and-hand-off path, and how the wait queue serves a key:
//! a holder's release ([`release`], [`handed_on`], [`revoke`]) runs the
//! key's hand-off in the same call, so the next grant replicates right
//! after the release and the key is never free while someone waits; a
//! timer runs the same [`hand_off`] when a lease ran out or a key changed.
//! Each head is served by [`serve`], one waiter of 1..n keys, as the core
//! decides (`decide::serve_waiter`); the queues and their timers are the
//! parent's (`wait_queue/mod.rs`).

use std::ffi::CString;

use redis_lock_core::args::Sync;
use redis_lock_core::decide::{self, AcquireManyCase, ManyKey, Served};
use redis_lock_core::errors::LockError;
use redis_lock_core::few::Few;
use redis_lock_core::hold::{Event, KeyState, Kind};
use redis_lock_core::sync::Stands;
use redis_lock_core::token::{self, UUID_LEN};
use redis_lock_core::waitqueue::WaiterId;
use redis_module::{Context, RedisString};

use crate::holds::{self, Grantee, ReleasedBy};
use crate::redis::blocked::{self, BlockedId};
use crate::redis::key::LockKey;
use crate::redis::{client, replicate, server};
use crate::state::metrics::{self, Counter};
use crate::state::sessions::{self};
use crate::state::{config, expiry, lease_registry};
use crate::sync::{self, Grant};

use super::{
    dismiss, look_again_at, redirect, redirect_if_elsewhere, waiters, wake_at, with_queues, Cause,
    Outcome, Queue, Serving, EXPIRED,
};

/// One hand-off of a key: why it runs, and what it found so far.
struct Turn {
    cause: Cause,
    /// Opening the key expired a lease that ran out (for `INFO lock`).
    expired: bool,
    /// Whether this node's slot map was read (once per hand-off, and only
    /// in cluster mode, for a key a timer finds free).
    slot_checked: bool,
}

/// What [`serve`] did with the waiter.
#[derive(PartialEq, Eq)]
enum Step {
    /// It left the queue (granted, renewed or failed): serve the next head.
    Left,
    /// It keeps its place: the hand-off is over for now.
    Stays,
}

/// Serve the waiter `id`, first in every queue it is in, of `name` (the key
/// whose hand-off this is) and of its other keys if it waits for several,
/// as the core decides (`decide::serve_waiter`): every key in one step
/// with one fence, or none. Its keys are opened (and expired) afresh, so
/// each head after a grant sees what the grant left.
fn serve(ctx: &Context, db: i32, name: &RedisString, id: WaiterId, turn: &mut Turn) -> Step {
    // Only reads of the waiter while the queues are borrowed.
    let Some((keys, ask)) = with_queues(|q| {
        let (_, keys) = q.keys_of(id)?;
        let waiter = q.get(id)?;
        let ask = (
            waiter.token.clone(),
            waiter.want,
            waiter.ttl_ms,
            waiter.lease,
            waiter.owner.clone(),
        );
        Some((keys.iter().cloned().collect::<Few<Box<[u8]>>>(), ask))
    }) else {
        return Step::Stays;
    };
    let (token, want, ttl_ms, lease_id, owner) = ask;
    let names: Few<RedisString> = keys
        .iter()
        .map(|key| match key.as_ref() == name.as_slice() {
            true => name.clone(),
            false => crate::redis::string(ctx, key),
        })
        .collect();
    let mut opened: Few<LockKey> = names
        .iter()
        .map(|name| {
            let mut key = LockKey::open_write(ctx, name);
            holds::expire(ctx, &mut key, name, server::now_ms());
            key
        })
        .collect();
    let now_ms = server::now_ms();
    let many: Few<ManyKey> = opened
        .iter()
        .zip(keys.iter())
        .map(|(key, name)| ManyKey {
            key: key_state(key, now_ms),
            mine: key
                .held()
                .ok()
                .and_then(|h| lease_registry::live_mine(&h, token.as_deref(), now_ms)),
            others_waiting: false,
            delayed_until_ms: expiry::delayed_until(db, name, now_ms),
        })
        .collect();
    // `LEASE id`: where its keys would run to. A lease that is gone fails
    // the waiter only when it could be granted (`NOLEASE`).
    let attach = lease_id.map(|id| lease_registry::attach_to(&id, now_ms));
    let case = AcquireManyCase {
        keys: &many,
        want,
        ttl_ms,
        now_ms,
        hold: config::hold_policy(),
        may_wait: true,
        max_holders: config::max_holders(),
        lease: attach.and_then(Result::ok),
        queued: true,
    };
    match decide::serve_waiter(&case) {
        Served::Wait { wake } => {
            drop(opened);
            for (i, at) in wake {
                if let Some(key) = keys.get(i) {
                    wake_at(ctx, db, key, at);
                }
            }
            Step::Stays
        }
        Served::Fail(error) => {
            drop(opened);
            leave(ctx, db, id, Outcome::Failed(error));
            Step::Left
        }
        Served::Held { fence } => {
            drop(opened);
            answer_holder(ctx, db, id, &keys, fence);
            Step::Left
        }
        Served::Renew { fence, renewals } => {
            let renewed = match token.as_deref() {
                Some(token) => opened
                    .iter_mut()
                    .zip(names.iter())
                    .zip(renewals.iter())
                    .try_for_each(|((key, name), renewal)| {
                        holds::renew(ctx, key, name, token, renewal, owner.as_deref())
                    }),
                None => Err(LockError::Internal),
            };
            drop(opened);
            // Decided renewable a moment ago, on keys still open: a refusal
            // is a bug, answered as the command answers it.
            if let Err(error) = renewed {
                leave(ctx, db, id, Outcome::Failed(error));
                return Step::Left;
            }
            for (key, renewal) in keys.iter().zip(renewals.iter()) {
                wake_at(ctx, db, key, renewal.wake_at_ms());
            }
            answer_holder(ctx, db, id, &keys, fence);
            Step::Left
        }
        Served::Grant { deadline_ms } => {
            // Keys that are not here, from a timer (a lease that ran out, a
            // delete, a lock-delay that ended): in cluster mode, not if this
            // node migrates the slot out or no longer serves it, or the lock
            // would be created beside the one the target holds (or hands
            // out) now. A release is checked by the server itself: it ran
            // here on a key that was here. (Every key of a waiter is in one
            // slot: Cluster refuses others with `CROSSSLOT`.)
            let free = many.iter().any(|k| k.key == KeyState::Free);
            if turn.cause == Cause::Timer && free && !turn.slot_checked {
                turn.slot_checked = true;
                if let Some(error) = redirect_if_elsewhere(ctx, name) {
                    drop(opened);
                    redirect(ctx, db, name, &error);
                    return Step::Stays;
                }
            }
            // Opening the key expired a lease that ran out, whose `expired`
            // event noted it: this hand-off is on expiry (kept until a
            // grant, past a lock-delay).
            let key: Box<[u8]> = name.as_slice().into();
            turn.expired |= EXPIRED.with(|e| e.borrow_mut().remove(&(db, key)));
            let granted = match attach {
                // Its turn came, its lease is gone: granted nothing.
                Some(Err(error)) => {
                    drop(opened);
                    leave(ctx, db, id, Outcome::Failed(error));
                    false
                }
                Some(Ok(attach)) => {
                    let deadline_ms = decide::grant_deadline(deadline_ms, Some(attach));
                    let lease = Some(attach.number);
                    grant(ctx, db, id, &mut opened, &names, deadline_ms, now_ms, lease)
                }
                None => grant(ctx, db, id, &mut opened, &names, deadline_ms, now_ms, None),
            };
            if granted {
                metrics::count(Counter::GrantsAfterWait);
                if names.len() > 1 {
                    metrics::count(Counter::MultiGrants);
                }
                if turn.cause == Cause::Release {
                    metrics::count(Counter::HandoffsOnRelease);
                } else if turn.expired {
                    metrics::count(Counter::HandoffsOnExpiry);
                }
            }
            Step::Left
        }
    }
}

/// Take the waiter `id` out of its queues and answer it; whoever waited
/// behind it on its other keys may be served now.
pub(super) fn leave(ctx: &Context, db: i32, id: WaiterId, outcome: Outcome) {
    if let Some((waiter, again)) = with_queues(|q| q.leave(id)) {
        dismiss(ctx, &waiter);
        blocked::unblock::<Queue>(id, outcome);
        look_again_at(ctx, db, &again);
    }
}

/// Grant every key of `names` (open as `opened`, each free or with room,
/// as decided) to the waiter `id`, with one fence, attached to lease group
/// `lease` if any, then answer it (with `SYNC`, once its replicas hold
/// every key, else undone on every key). A waiter whose ACL access to a
/// key was revoked meanwhile is failed instead, with nothing granted.
/// Whether it was granted.
#[allow(clippy::too_many_arguments)]
fn grant(
    ctx: &Context,
    db: i32,
    id: WaiterId,
    opened: &mut [LockKey],
    names: &[RedisString],
    deadline_ms: i64,
    now_ms: i64,
    lease: Option<u64>,
) -> bool {
    let Some((waiter, again)) = with_queues(|q| q.leave(id)) else {
        return false;
    };
    dismiss(ctx, &waiter);
    let mut drawn = [0u8; UUID_LEN];
    let token: &[u8] = match &waiter.token {
        Some(token) => token,
        None => token::draw(&mut drawn),
    };
    let grantee = Grantee {
        token,
        owner: waiter.owner.as_deref(),
        now_ms,
        deadline_ms,
        lease,
    };
    let may_access = names
        .iter()
        .all(|name| client::may_access(ctx, waiter.user.as_deref(), name));
    let granted = match may_access {
        true => holds::grant(ctx, opened, names, &grantee, waiter.want),
        false => Err(LockError::WaitNoPerm),
    };
    let fence = match granted {
        Ok(fence) => fence,
        Err(error) => {
            blocked::unblock::<Queue>(id, Outcome::Failed(error));
            look_again_at(ctx, db, &again);
            return false;
        }
    };
    for name in names {
        if let Some(client) = waiter.session {
            sessions::bind(ctx, client, db, name, fence);
        }
        replicate::notify(ctx, waiter.want.kind().event(Event::Handoff), name);
    }
    let keys: Few<&[u8]> = names.iter().map(|name| name.as_slice()).collect();
    let grant = Grant::new(db, &keys, token, fence);
    answer(ctx, id, waiter.sync, grant, Stands::Undone);
    // Readers queued behind it on its other keys may fit beside it.
    look_again_at(ctx, db, &again);
    true
}

/// The one release-and-hand-off path: `token`'s hold on `name` (open as
/// `key`, of `kind`, checked by the caller) goes, replicated as `DEL` (or
/// `LOCK.DELHOLDER`, while others hold the key), then the freed place goes to
/// the head of the queue as soon as it fits, within the same call, so the
/// next grant replicates right after the release and the key is never free
/// while someone waits.
pub fn release(
    ctx: &Context,
    db: i32,
    mut key: LockKey,
    name: &RedisString,
    kind: Kind,
    token: &[u8],
    by: ReleasedBy,
) {
    holds::release(ctx, &mut key, name, kind, token, by);
    drop(key);
    hand_off(ctx, db, name, Cause::Release);
}

/// Serve `name`'s queue after its holder's release (`holds::release`,
/// made by the caller, who closed the key since): `LOCK.MRELEASE` releases
/// every key it gives back before it hands any on, because a hand-off may
/// open and change another of its keys (a multi-key waiter's) while the
/// command still has that key open.
pub fn handed_on(ctx: &Context, db: i32, name: &RedisString) {
    hand_off(ctx, db, name, Cause::Release);
}

/// `LOCK.REVOKE`: the holds of `tokens` on `name` (open as `key`, of
/// `kind`) go, each as a release would take it, then the queue is served
/// once, as after a release.
pub fn revoke(
    ctx: &Context,
    db: i32,
    mut key: LockKey,
    name: &RedisString,
    kind: Kind,
    tokens: &[&[u8]],
) {
    for token in tokens {
        holds::release(ctx, &mut key, name, kind, token, ReleasedBy::Revoked);
    }
    drop(key);
    hand_off(ctx, db, name, Cause::Release);
}

/// `key` as the core's decisions see it at `now_ms`.
pub fn key_state(key: &LockKey, now_ms: i64) -> KeyState {
    match key.held() {
        Ok(holds) => holds.state(now_ms),
        Err(_) => KeyState::WrongType,
    }
}

/// Serve `key`'s queue as the core decides, head after head, in arrival
/// order: each head is served ([`serve`]) once it is first in every queue
/// it is in (`WaitQueues::servable`), granted as soon as it fits (several
/// readers, or several permit requests, in one go); a head that does not
/// fit makes the queue look again when it can next fit. Only a master
/// hands over; a replica receives the result.
pub(super) fn hand_off(ctx: &Context, db: i32, name: &RedisString, cause: Cause) {
    let key = name.as_slice();
    if waiters(db, key) == 0 || !server::is_master(ctx) {
        return;
    }
    // Every event about the key until this returns comes before a look at
    // it below (each head reads the key afresh).
    let _serving = Serving::start(db, key);
    let mut turn = Turn {
        cause,
        expired: false,
        slot_checked: false,
    };
    while let Some(head) = with_queues(|q| q.servable(db, key)) {
        if serve(ctx, db, name, head, &mut turn) == Step::Stays {
            return;
        }
    }
}

/// Answer a granted (or renewed) waiter: now, or with `SYNC` once its
/// replicas hold the grant (a new grant is undone if they do not in time).
/// A new grant may be given back until its reply goes out (the client may
/// leave first), unless a reply to its token confirms it before.
fn answer(ctx: &Context, id: BlockedId, sync_args: Option<Sync>, grant: Grant, stands: Stands) {
    if !stands.undoes() {
        // A renewal, or a grant kept by its lease group: its token is
        // answered as the holder, so no undo of its grant may take it now.
        sync::confirm(grant.fence);
    }
    let Some(sync_args) = sync_args else {
        if stands.undoes() {
            sync::granted(grant.fence);
        }
        return blocked::unblock::<Queue>(id, Outcome::Granted(grant));
    };
    let pending = sync::Pending {
        client: id,
        answer: sync::Answer::Grant {
            token: grant.token.clone(),
            fence: grant.fence,
        },
        grant: Some(grant),
        answer_by: answer_queued,
    };
    sync::wait(ctx, sync_args, stands, pending);
}

/// Answer a queued client about its grant: `[token, fence]` (given back if
/// it leaves before the reply, unless confirmed since), or the `NOSYNC`
/// error.
fn answer_queued(id: BlockedId, result: Result<sync::Answer, CString>, grant: Option<Grant>) {
    let outcome = match (result, grant) {
        (Ok(_), Some(grant)) => Outcome::Granted(grant),
        (Ok(_), None) => Outcome::Failed(LockError::Internal),
        (Err(text), _) => Outcome::Redirected(text),
    };
    blocked::unblock::<Queue>(id, outcome);
}

/// Undo a grant whose replicas did not hold it in time (or whose client
/// left while it waited for them): each of its keys released as a release
/// would, if that hold is still there, and handed on. A master only.
/// Registered at load with `sync.rs`, which decides when.
pub fn undo(ctx: &Context, grant: &Grant) {
    give_back(ctx, grant, ReleasedBy::Undone);
}

/// Release every key of `grant` whose hold is still that grant's, each
/// handed on. A master only.
pub(super) fn give_back(ctx: &Context, grant: &Grant, by: ReleasedBy) {
    if !server::is_master(ctx) {
        return;
    }
    let token = Some(&*grant.token);
    for key in &grant.keys {
        release_held(ctx, grant.db, key, grant.fence, token, by);
    }
}

/// Answer a waiter whose token holds every key of `keys` (renewed, or kept
/// by its lease group) with its grant at `fence`, as a renewal: bound to
/// its SESSION, with `SYNC` waited for as for an extension.
fn answer_holder(ctx: &Context, db: i32, id: WaiterId, keys: &[Box<[u8]>], fence: u64) {
    let Some((waiter, again)) = with_queues(|q| q.leave(id)) else {
        return;
    };
    dismiss(ctx, &waiter);
    match waiter.token.as_deref() {
        Some(token) => {
            metrics::count(Counter::Renewals);
            if let Some(client) = waiter.session {
                for key in keys {
                    sessions::bind(ctx, client, db, key, fence);
                }
            }
            let grant = Grant::new(db, keys, token, fence);
            answer(ctx, id, waiter.sync, grant, Stands::Extension);
        }
        None => blocked::unblock::<Queue>(id, Outcome::Failed(LockError::Internal)),
    }
    look_again_at(ctx, db, &again);
}

/// Release the hold on `key` in `db` with `fence` (and `token`, when given)
/// if it is still there, through [`release`].
pub(super) fn release_held(
    ctx: &Context,
    db: i32,
    key: &[u8],
    fence: u64,
    token: Option<&[u8]>,
    by: ReleasedBy,
) {
    server::select_db(ctx, db);
    let name = crate::redis::string(ctx, key);
    let lock_key = LockKey::open_write(ctx, &name);
    let mut buffer = [0u8; UUID_LEN];
    let bound = match lock_key.held() {
        Ok(holds) => holds
            .bound(fence, token)
            .map(|hold| (holds.kind(), hold.token(&mut buffer).to_vec())),
        Err(_) => None,
    };
    if let Some((Some(kind), token)) = bound {
        release(ctx, db, lock_key, &name, kind, &token, by);
    }
}
