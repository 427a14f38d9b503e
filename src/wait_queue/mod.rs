//! Blocking acquire: `LOCK.ACQUIRE … WAIT timeout-ms` (and `SEM.ACQUIRE`,
//! `LOCK.MACQUIRE`) queues a client on each of its 1..n keys, in arrival
//! order, and the server hands the keys to it as soon as it is first in each
//! queue and they fit. The release-and-hand-off path itself ([`release`],
//! used by RELEASE, a closed SESSION and a reclaim) is `handoff.rs`.
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
//! What to do with a queue is the core's decision (which head:
//! `WaitQueues::servable`; what to do with it: `decide::serve_waiter`; which
//! keys to look at again when one leaves: `WaitQueues::leave`); these files
//! execute it. Every blocked client is unblocked exactly once (see
//! `redis/blocked.rs`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::CString;

use redis_lock_core::args::Sync;
use redis_lock_core::cluster;
use redis_lock_core::errors::LockError;
use redis_lock_core::few::Few;
use redis_lock_core::group::LeaseId;
use redis_lock_core::hold::Want;
use redis_lock_core::rules;
use redis_lock_core::waitqueue::{WaitQueues, WaiterId};
use redis_module::{Context, RedisString};

use crate::holds::ReleasedBy;
use crate::observers;
use crate::redis::blocked::{self, BlockedId, Waits};
use crate::redis::timer::{self, DueId, TimerId};
use crate::redis::{client, migration, reply, server};
use crate::state::config;
use crate::state::metrics::{self, Counter};
use crate::state::sessions::Bound;
use crate::sync::{self, Grant};

mod handoff;

use handoff::{give_back, hand_off, leave, release_held};
pub use handoff::{handed_on, key_state, release, revoke, undo};

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
