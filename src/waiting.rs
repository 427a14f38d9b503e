//! Blocking acquire: `LOCK.ACQUIRE … WAIT timeout-ms` queues a client per key,
//! in arrival order, and the server hands the lock to the head of the queue as
//! soon as the key is free. Also the one release-and-hand-off path
//! ([`release`]), used by RELEASE, a closed SESSION and a reclaim.
//!
//! Module-wide state, touched only here: the queues ([`WaitQueues`], from the
//! core) with, per key with waiters, at most one hand-off timer; and the
//! keys whose lease ran out while clients waited (for `INFO lock`).
//! Everything here runs on Redis' main thread (commands, timers, keyspace and
//! server events, blocked-client callbacks), so the state is a thread-local,
//! and no borrow of it is ever held across a call into Redis that could call
//! back into the module.
//!
//! Who hands the key over, and when:
//! - `LOCK.RELEASE` of a key with waiters, inside the command ([`release`]);
//! - expiry: a timer due at the first millisecond the holder's lease is
//!   over (re-armed earlier when the lease was shortened meanwhile), run as
//!   the server's clock reaches it (`timer::start_at`), not up to 2 ms later
//!   as a plain Redis timer would be. Opening the key there expires it
//!   through Redis (the `DEL` replicated, the `expired` event, the
//!   lock-delay), and the head is granted in the same call;
//! - `DEL`, `UNLINK`, `RENAME`, `MOVE` or eviction of a key with waiters, and
//!   `FLUSHALL`/`FLUSHDB`/`SWAPDB`: an event arms a timer due now
//!   ([`look_again`]), because a key may not be written from inside an event.
//!   (The module does not listen to string events, which every `SET` would
//!   pay for: a key overwritten by `SET` fails its waiters when the timer
//!   armed for the old holder's deadline finds it.)
//! - a SESSION connection that closed, and a waiter that disconnects after
//!   being granted, before its reply: a timer due now gives the lock back
//!   and hands it on.
//!
//! In cluster mode, a key with waiters that leaves by a `del` (`MIGRATE` in a
//! classic reshard), or that a hand-off from a timer finds free, is only
//! handed over here while this node serves its slot and does not migrate it
//! out; otherwise its waiters are redirected (`ASK`, `MOVED`) to the node
//! that has it now ([`redirect_if_elsewhere`]).
//!
//! What to do with a queue is the core's decision (`decide::serve`); this
//! file executes it. Every blocked client is unblocked exactly once (see
//! `redis/blocked.rs`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::CString;

use redis_lock_core::args::Sync;
use redis_lock_core::cluster;
use redis_lock_core::decide::{self, AcquireManyCase, ManyKey, Served};
use redis_lock_core::errors::LockError;
use redis_lock_core::few::Few;
use redis_lock_core::group::LeaseId;
use redis_lock_core::hold::{Event, KeyState, Kind, Want};
use redis_lock_core::rules;
use redis_lock_core::sync::Stands;
use redis_lock_core::token::{self, UUID_LEN};
use redis_lock_core::waitqueue::{WaitQueues, WaiterId};
use redis_module::{Context, RedisString};

use crate::lease::{self, Grantee, ReleasedBy};
use crate::metrics::{self, Counter};
use crate::redis::blocked::{self, BlockedId, Waits};
use crate::redis::key::LockKey;
use crate::redis::timer::{self, DueId, TimerId};
use crate::redis::{client, migration, replicate, reply, server};
use crate::sessions::{self, Bound};
use crate::sync::{self, Grant};
use crate::{config, expiry, groups, observers};

/// A queued client. Its [`WaiterId`] is its blocked-client id.
struct Waiter {
    /// `None`: draw a UUIDv4 at grant time.
    token: Option<Box<[u8]>>,
    /// The lease starts at the grant, not at the request.
    ttl_ms: i64,
    /// `SESSION`: the waiting client's id, to bind the lock to once granted.
    session: Option<u64>,
    /// The ACL user the client waits as: its access to the key is checked
    /// again at the grant, since an operator may have revoked it meanwhile.
    user: Option<Box<[u8]>>,
    /// The timer of `WAIT timeout-ms` (none for `WAIT 0`).
    timeout: Option<TimerId>,
    /// `OWNER label`: recorded at queue time, the holder's label once granted.
    owner: Option<Box<[u8]>>,
    /// The waiting client's id (`CLIENT KILL ID` removes a stuck waiter).
    client: u64,
    /// What it waits for: the lock, a read lease, or permits.
    want: Want,
    /// `SYNC`: answered only once that many replicas hold its grant.
    sync: Option<Sync>,
    /// `LEASE id`: its grant is attached to this lease group, if it still
    /// lives then (else the waiter is failed with `NOLEASE`).
    lease: Option<LeaseId>,
    /// When it queued, and when its wait ends (unix ms; none for `WAIT 0`).
    queued_ms: i64,
    ends_ms: Option<i64>,
}

/// What a blocked client is unblocked with.
enum Outcome {
    /// Granted its key, or every key of a multi-key request, with one
    /// fence: given back if it leaves before the reply.
    Granted(Grant),
    Failed(LockError),
    /// `WAIT timeout-ms` ran out: reply null.
    TimedOut,
    /// The key's slot moved, or is moving, to another node (`CLUSTER
    /// MIGRATESLOTS`, or `MIGRATE` in a classic reshard): reply this error
    /// (`MOVED …`, `ASK …`); or granted with `SYNC`, its replicas did not
    /// hold it in time (`NOSYNC …`, the grant undone).
    Redirected(CString),
}

/// What a timer is for.
enum Wake {
    /// See whether `key` can be handed to its first waiter.
    HandOff { db: i32, key: Box<[u8]> },
    /// End the wait of this waiter if it is still queued.
    Timeout { waiter: WaiterId },
    /// Take the lock back (every key of it) from a waiter that
    /// disconnected after its grant.
    Reclaim(Grant),
    /// Release the SESSION locks of a connection that closed.
    SessionClosed(Vec<Bound>),
}

/// Why a key is being handed over: for `INFO lock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    /// The holder released it (RELEASE, its SESSION closed, a reclaim).
    Release,
    /// A timer: the lease may have run out, or the key was deleted,
    /// flushed, moved or swapped away.
    Timer,
}

/// How soon a timer that found writes paused looks again.
const PAUSED_RETRY_MS: i64 = 10;

thread_local! {
    static QUEUES: RefCell<WaitQueues<Waiter>> = RefCell::new(WaitQueues::new());
    /// Keys with waiters whose lease ran out, until their hand-off.
    static EXPIRED: RefCell<HashSet<(i32, Box<[u8]>)>> = RefCell::new(HashSet::new());
    /// The key [`hand_off`] is serving now: what happens to it meanwhile (its
    /// own expiry, as the hand-off opens it) needs no second look.
    static SERVING: RefCell<Option<(i32, Vec<u8>)>> = const { RefCell::new(None) };
}

/// While alive, `hand_off` serves this key.
struct Serving;

impl Serving {
    fn start(db: i32, key: &[u8]) -> Serving {
        SERVING.with(|s| *s.borrow_mut() = Some((db, key.to_vec())));
        Serving
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        SERVING.with(|s| s.borrow_mut().take());
    }
}

fn is_serving(db: i32, key: &[u8]) -> bool {
    SERVING.with(|s| {
        s.borrow()
            .as_ref()
            .is_some_and(|(d, k)| *d == db && k.as_slice() == key)
    })
}

fn with_queues<T>(f: impl FnOnce(&mut WaitQueues<Waiter>) -> T) -> T {
    QUEUES.with(|q| f(&mut q.borrow_mut()))
}

/// Clients waiting for `key` in `db`. Cheap when nobody waits anywhere.
pub fn waiters(db: i32, key: &[u8]) -> usize {
    with_queues(|q| q.len(db, key))
}

/// Clients waiting, over all keys.
pub fn total_waiters() -> usize {
    with_queues(|q| q.total())
}

/// A queued client as `LOCK.QUEUE` shows it: never its token.
pub struct Queued {
    pub owner: Option<Box<[u8]>>,
    /// The lease it asked for.
    pub ttl_ms: i64,
    pub queued_ms: i64,
    /// When its wait ends (none: `WAIT 0`).
    pub ends_ms: Option<i64>,
    pub client: u64,
    /// What it waits for.
    pub want: Want,
    /// How many keys it waits for (`LOCK.MACQUIRE`: all of them at once).
    pub keys: usize,
}

/// The first `count` clients waiting for `key`, from the head.
pub fn queued(db: i32, key: &[u8], count: usize) -> Vec<Queued> {
    with_queues(|q| {
        q.waiters_with_ids(db, key)
            .take(count)
            .map(|(id, w)| Queued {
                owner: w.owner.clone(),
                ttl_ms: w.ttl_ms,
                queued_ms: w.queued_ms,
                ends_ms: w.ends_ms,
                client: w.client,
                want: w.want,
                keys: q.keys_of(id).map_or(1, |(_, keys)| keys.len()),
            })
            .collect()
    })
}

/// The lease on `key` ran out: if clients wait for it, its hand-off counts
/// as a hand-off on expiry.
pub fn lease_expired(db: i32, key: &[u8]) {
    if waiters(db, key) > 0 {
        EXPIRED.with(|e| e.borrow_mut().insert((db, key.into())));
    }
}

/// What a caller that waits asked for.
pub struct WaitRequest<'a> {
    pub token: Option<&'a [u8]>,
    pub ttl_ms: i64,
    /// 0: no limit.
    pub wait_ms: i64,
    /// `SESSION`: the caller's client id.
    pub session: Option<u64>,
    pub owner: Option<&'a [u8]>,
    pub want: Want,
    pub sync: Option<Sync>,
    pub lease: Option<LeaseId>,
}

/// Block the calling client as a waiter for `request`, unless the longest
/// queue it joins already holds `lock.max-waiters` (`queued`); its timeout
/// timer is armed. The caller pushes it on its queue (or queues).
fn block_waiter(
    ctx: &Context,
    request: &WaitRequest,
    queued: usize,
) -> Result<(BlockedId, Waiter), LockError> {
    let max = config::max_waiters();
    if max > 0 && queued >= max {
        metrics::count(Counter::WaitsRefused);
        return Err(LockError::WaitersLimit);
    }
    let id = blocked::block::<Queue>(ctx).ok_or(LockError::Internal)?;
    let timeout = (request.wait_ms > 0)
        .then(|| timer::start(ctx, request.wait_ms, Wake::Timeout { waiter: id }, on_wake));
    let queued_ms = server::now_ms();
    let waiter = Waiter {
        token: request.token.map(Into::into),
        ttl_ms: request.ttl_ms,
        session: request.session,
        user: client::user(ctx),
        timeout,
        owner: request.owner.map(Into::into),
        client: client::id(ctx),
        want: request.want,
        sync: request.sync,
        lease: request.lease,
        queued_ms,
        ends_ms: rules::wait_ends(queued_ms, request.wait_ms),
    };
    Ok((id, waiter))
}

/// Block the calling client at the tail of the queue of every key of
/// `names` at once (one key for `LOCK.ACQUIRE … WAIT`; several for
/// `LOCK.MACQUIRE … WAIT`, holding none of them meanwhile), and look at key
/// `names[i]` again at each `(i, at)` of `wake` (the core's `Queue`). It is
/// served once it is first in each of those queues and every key fits
/// ([`serve`]).
pub fn enqueue(
    ctx: &Context,
    db: i32,
    names: &[RedisString],
    request: &WaitRequest,
    wake: &[(usize, i64)],
) -> Result<(), LockError> {
    let longest = names
        .iter()
        .map(|name| waiters(db, name))
        .max()
        .unwrap_or(0);
    let (id, waiter) = block_waiter(ctx, request, longest)?;
    let keys: Few<&[u8]> = names.iter().map(|name| name.as_slice()).collect();
    with_queues(|q| q.push(db, &keys, id, waiter));
    metrics::count(Counter::Waits);
    for (i, at) in wake {
        if let Some(key) = keys.get(*i) {
            wake_at(ctx, db, key, *at);
        }
    }
    Ok(())
}

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
            lease::expire(ctx, &mut key, name, server::now_ms());
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
                .and_then(|h| groups::live_mine(&h, token.as_deref(), now_ms)),
            others_waiting: false,
            delayed_until_ms: expiry::delayed_until(db, name, now_ms),
        })
        .collect();
    // `LEASE id`: where its keys would run to. A lease that is gone fails
    // the waiter only when it could be granted (`NOLEASE`).
    let attach = lease_id.map(|id| groups::attach_to(&id, now_ms));
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
                        lease::renew(ctx, key, name, token, renewal, owner.as_deref())
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
fn leave(ctx: &Context, db: i32, id: WaiterId, outcome: Outcome) {
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
        true => lease::grant(ctx, opened, names, &grantee, waiter.want),
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
    lease::release(ctx, &mut key, name, kind, token, by);
    drop(key);
    hand_off(ctx, db, name, Cause::Release);
}

/// Serve `name`'s queue after its holder's release (`lease::release`,
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
        lease::release(ctx, &mut key, name, kind, token, ReleasedBy::Revoked);
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
fn hand_off(ctx: &Context, db: i32, name: &RedisString, cause: Cause) {
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
fn give_back(ctx: &Context, grant: &Grant, by: ReleasedBy) {
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

/// Make sure `key`'s queue is served at `at_ms` (unix ms) at the latest:
/// keep an armed timer that is due sooner, else re-arm. The timer runs as
/// the server's clock reaches `at_ms` (`timer::start_at`).
pub fn wake_at(ctx: &Context, db: i32, key: &[u8], at_ms: i64) {
    if waiters(db, key) == 0 {
        return;
    }
    let armed = with_queues(|q| q.timer(db, key));
    if armed.is_some_and(|(_, due)| due <= at_ms) {
        return;
    }
    if let Some((timer, _)) = armed {
        timer::stop_at::<Wake>(ctx, timer);
    }
    let wake = Wake::HandOff {
        db,
        key: key.into(),
    };
    let timer: DueId = timer::start_at(ctx, at_ms, wake, on_wake);
    with_queues(|q| q.set_timer(db, key, Some((timer, at_ms))));
}

/// `key` may just have become free (an event: deleted, renamed, moved,
/// evicted, expired): if clients wait for it, serve them from a timer due
/// now; not when this is the hand-off itself, about to look at it.
pub fn look_again(ctx: &Context, db: i32, key: &[u8]) {
    if total_waiters() == 0 || is_serving(db, key) {
        return;
    }
    wake_at(ctx, db, key, server::now_ms());
}

/// Every key of `db` (`None`: of every db) may have changed at once (a
/// flush, `SWAPDB`): serve every queue there from a timer due now.
pub fn look_again_in(ctx: &Context, db: Option<i32>) {
    for (db, key) in with_queues(|q| q.keys_with_waiters(db)) {
        server::select_db(ctx, db);
        wake_at(ctx, db, &key, server::now_ms());
    }
}

/// This node became a replica: end every wait (a replica grants nothing).
pub fn demoted(ctx: &Context) {
    let (waiters, timers) = with_queues(|q| q.drain());
    EXPIRED.with(|e| e.borrow_mut().clear());
    for timer in timers {
        timer::stop_at::<Wake>(ctx, timer);
    }
    for (id, waiter) in waiters {
        dismiss(ctx, &waiter);
        blocked::unblock::<Queue>(id, Outcome::Failed(LockError::WaitDemoted));
    }
}

/// A connection that held SESSION locks closed: release them from a timer
/// due now (the client is being freed; the keyspace is not written from
/// inside that).
pub fn session_closed(ctx: &Context, bound: Vec<Bound>) {
    timer::start(ctx, 0, Wake::SessionClosed(bound), on_wake);
}

/// In cluster mode, for a key that clients wait for and that is not on this
/// node (it left by a `del`, or a hand-off from a timer finds it free): the
/// redirect its waiters get instead of a grant here, if this node migrates
/// the key's slot out (`ASK` to the target, which has the key now, or will
/// create it) or no longer serves it (`MOVED` to the owner), as this node's
/// `CLUSTER NODES` shows it (`cluster::redirect_for_absent`). `None`: hand it
/// over here; always outside cluster mode, where nothing is read.
pub fn redirect_if_elsewhere(ctx: &Context, key: &[u8]) -> Option<CString> {
    if !migration::in_cluster(ctx) {
        return None;
    }
    let nodes = migration::cluster_nodes(ctx)?;
    let error = cluster::redirect_for_absent(&nodes, key)?;
    CString::new(error).ok()
}

/// Answer every client that waits for `key` in `db` (waiters, then
/// observers) with `error`, a redirect from [`redirect_if_elsewhere`], and
/// log it once. Returns how many were answered.
pub fn redirect(ctx: &Context, db: i32, key: &[u8], error: &CString) -> usize {
    let waiting = if waiters(db, key) > 0 {
        redirect_waiters_of(ctx, db, key.into(), error)
    } else {
        0
    };
    let observing = observers::redirect(ctx, db, key, error);
    if waiting + observing > 0 {
        server::log_notice(&format!(
            "redis-lock: a key of slot {} that clients waited for is another node's now: \
             {waiting} waiting and {observing} observing clients answered with {}",
            cluster::key_slot(key),
            error.to_string_lossy()
        ));
    }
    waiting + observing
}

/// The keys for which `redirect` gives an error are another node's now
/// (their slot moved: Valkey's atomic slot migration): answer each of their
/// waiters, in every database, with that error, and stop their hand-off
/// timers. Returns how many waiters were answered.
pub fn moved_away(ctx: &Context, redirect: &mut dyn FnMut(&[u8]) -> Option<CString>) -> usize {
    let mut answered = 0;
    for (db, key) in with_queues(|q| q.keys_with_waiters(None)) {
        if let Some(error) = redirect(&key) {
            answered += redirect_waiters_of(ctx, db, key, &error);
        }
    }
    answered
}

/// Answer every waiter of `key` in `db` with `error` (a redirect), stop its
/// hand-off timer, forget the queue. Returns how many were answered.
fn redirect_waiters_of(ctx: &Context, db: i32, key: Box<[u8]>, error: &CString) -> usize {
    let mut answered = 0;
    if let Some((timer, _)) = with_queues(|q| q.timer(db, &key)) {
        timer::stop_at::<Wake>(ctx, timer);
        with_queues(|q| q.set_timer(db, &key, None));
    }
    while let Some(id) = with_queues(|q| q.head(db, &key)) {
        leave(ctx, db, id, Outcome::Redirected(error.clone()));
        answered += 1;
    }
    forget_idle(db, key);
    answered
}

/// A waiter leaves its queue other than by timing out: stop its timeout.
fn dismiss(ctx: &Context, waiter: &Waiter) {
    if let Some(timer) = waiter.timeout {
        timer::stop::<Wake>(ctx, timer);
    }
}

fn on_wake(ctx: &Context, wake: Wake) {
    if server::writes_paused() {
        // Not now (see `server::writes_paused`): the same work, later.
        match wake {
            Wake::HandOff { db, key } => {
                with_queues(|q| q.set_timer(db, &key, None));
                if waiters(db, &key) > 0 {
                    wake_at(ctx, db, &key, server::now_ms() + PAUSED_RETRY_MS);
                } else {
                    forget_idle(db, key);
                }
            }
            // A timeout only replies: it needs no write.
            Wake::Timeout { waiter } => time_out(ctx, waiter),
            later => {
                timer::start(ctx, PAUSED_RETRY_MS, later, on_wake);
            }
        }
        return;
    }
    match wake {
        Wake::HandOff { db, key } => {
            with_queues(|q| q.set_timer(db, &key, None));
            server::select_db(ctx, db);
            // Not here if this node no longer serves the key's slot (a slot
            // migration whose end this node was not told of: see
            // `migration.rs`): its waiters go to the node that does. A
            // release or an ACQUIRE ran on this node, so the server checked
            // the slot then; a timer is not checked by anyone else.
            if let Some(error) = migration::moved_from_here(ctx, &key) {
                let name = crate::redis::string(ctx, &key);
                redirect_waiters_of(ctx, db, key, &error);
                observers::changed_here(ctx, &name);
                return;
            }
            let name = crate::redis::string(ctx, &key);
            hand_off(ctx, db, &name, Cause::Timer);
            // The key's observers were not told of an expiry or a delete
            // while clients waited: tell them now, with the key handed over.
            observers::changed_here(ctx, &name);
            // Its waiters may all have left before the lease ran out.
            if waiters(db, &key) == 0 {
                forget_idle(db, key);
            }
        }
        Wake::Timeout { waiter } => time_out(ctx, waiter),
        // Unless a reply to its token confirmed it meanwhile.
        Wake::Reclaim(grant) => {
            if sync::take_unconfirmed(grant.fence) {
                give_back(ctx, &grant, ReleasedBy::Reclaim);
            }
        }
        Wake::SessionClosed(bound) => {
            if !server::is_master(ctx) {
                return;
            }
            for b in &bound {
                release_held(ctx, b.db, &b.key, b.fence, None, ReleasedBy::Session);
            }
        }
    }
}

fn forget_idle(db: i32, key: Box<[u8]>) {
    with_queues(|q| q.forget_if_idle(db, &key));
    EXPIRED.with(|e| e.borrow_mut().remove(&(db, key)));
}

fn time_out(ctx: &Context, waiter: WaiterId) {
    let Some(db) = with_queues(|q| q.keys_of(waiter).map(|(db, _)| db)) else {
        return;
    };
    if let Some((_, again)) = with_queues(|q| q.leave(waiter)) {
        metrics::count(Counter::WaitTimeouts);
        blocked::unblock::<Queue>(waiter, Outcome::TimedOut);
        look_again_at(ctx, db, &again);
    }
}

/// Serve again the queues of `keys` in `db`: those a waiter that left
/// named (`WaitQueues::leave`: the keys of a multi-key waiter).
fn look_again_at(ctx: &Context, db: i32, keys: &[Box<[u8]>]) {
    for key in keys {
        look_again(ctx, db, key);
    }
}

/// Release the hold on `key` in `db` with `fence` (and `token`, when given)
/// if it is still there, through [`release`].
fn release_held(
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

/// The queue's blocked clients: how they are answered, and what their
/// disconnect means.
struct Queue;

impl Waits for Queue {
    type Outcome = Outcome;

    fn reply(ctx: &Context, outcome: &Outcome) {
        match outcome {
            Outcome::Granted(grant) => {
                sync::confirm(grant.fence);
                reply::grant(ctx, &grant.token, grant.fence)
            }
            Outcome::Failed(error) => reply::error(ctx, *error),
            Outcome::TimedOut => reply::null(ctx),
            Outcome::Redirected(error) => reply::error_text(ctx, error),
        }
    }

    /// Leave the queue; if the client was granted in the meantime, take the
    /// lock back from a timer (the client is being freed).
    fn disconnected(ctx: &Context, client: BlockedId, outcome: Option<&Outcome>) {
        if let Some(Outcome::Granted(grant)) = outcome {
            timer::start(ctx, 0, Wake::Reclaim(grant.clone()), on_wake);
            return;
        }
        let db = with_queues(|q| q.keys_of(client).map(|(db, _)| db));
        if let Some((db, (waiter, again))) = db.zip(with_queues(|q| q.leave(client))) {
            dismiss(ctx, &waiter);
            blocked::unblock_without_reply(client);
            look_again_at(ctx, db, &again);
            return;
        }
        // Granted with SYNC, waiting for its replicas: it leaves, and its
        // grant goes back.
        sync::client_gone(ctx, client);
    }
}
