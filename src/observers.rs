//! `LOCK.OBSERVE key fence timeout-ms`: clients that wait for the holder of
//! a key to change (a grant, a hand-off, a release, an expiry, a revocation,
//! a delete, a flush), and are answered with the new holder, with no
//! polling (and, when the holder they saw was revoked, why).
//!
//! Module-wide state, touched only here: per key, the blocked observers,
//! each with the holder fence it last saw (0: free) and its timeout timer.
//! Main thread only, hence a thread-local; no borrow is held across a call
//! into Redis.
//!
//! Whoever changes a key calls [`changed`] once the change is made: the
//! lease owner (grant, release), `LOCK.SETSTATE` (a replica applying its
//! master's grant), and the keyspace and server events (`events.rs`). Each
//! observer whose fence differs from the key's holder now is unblocked once;
//! its reply reads the holder at reply time, so an observer woken by a
//! release that was followed by a hand-off in the same command sees the new
//! holder. A change that leaves the holder as it was (a renewal, a
//! `PEXPIRE`) wakes nobody.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis_lock_core::decide;
use redis_lock_core::rules;
use redis_lock_core::waitqueue::{WaitQueues, WaiterId};
use redis_module::{Context, RedisString};

use crate::redis::blocked::{self, BlockedId, Waits};
use crate::redis::key::LockKey;
use crate::redis::migration;
use crate::redis::reply::{self, Field};
use crate::redis::server;
use crate::redis::timer::{self, TimerId};
use crate::state::{lease_registry, revocations};

/// A key in a database.
type DbKey = (i32, Box<[u8]>);

struct Observer {
    /// The holder fence the observer last saw; 0 for "free".
    seen: u64,
    timeout: Option<TimerId>,
}

thread_local! {
    static OBSERVERS: RefCell<WaitQueues<Observer>> = RefCell::new(WaitQueues::new());
    /// Per observed key, the timer armed for when its lease is over, with
    /// the unix ms it is due at: Redis itself expires an untouched key only
    /// in its expiry cycle (every 100 ms or so), so the module looks at it
    /// then, which expires it and wakes its observers within milliseconds.
    static DEADLINES: RefCell<HashMap<DbKey, (TimerId, i64)>> = RefCell::new(HashMap::new());
}

/// How many observers there are, as [`OBSERVERS`] had them after its last
/// change: every grant, release and keyspace event asks whether anyone
/// observes ([`total`]), and a thread-local in a shared object costs a call
/// to find (and a check that it was initialised) where an atomic is one
/// load. Written only by [`with_observers`], the one way to the queues.
static TOTAL: AtomicUsize = AtomicUsize::new(0);

fn with_observers<T>(f: impl FnOnce(&mut WaitQueues<Observer>) -> T) -> T {
    OBSERVERS.with(|o| {
        let mut observers = o.borrow_mut();
        let result = f(&mut observers);
        TOTAL.store(observers.total(), Ordering::Relaxed);
        result
    })
}

/// Observers over all keys (`INFO lock`).
#[inline]
pub fn total() -> usize {
    TOTAL.load(Ordering::Relaxed)
}

/// The holder fence of `name` now: 0 when free (or not a lock); for a key
/// with several holders, the highest live one.
fn holder_fence(ctx: &Context, name: &RedisString) -> u64 {
    match LockKey::open_read(ctx, name).held() {
        Ok(holds) => holds.holder_fence(server::now_ms()),
        Err(_) => 0,
    }
}

/// Reply with the holder of `name` now: a map of `fence`, `ttl`, `owner`
/// (when it gave one), and `revoked` (the reason, when the holder the
/// observer saw, fence `seen`, was revoked), or null when the key is free.
pub fn reply_holder(ctx: &Context, name: &RedisString, seen: u64) {
    let key = LockKey::open_read(ctx, name);
    let now_ms = server::now_ms();
    let held = key.held();
    let Some(newest) = held.as_ref().ok().and_then(|holds| holds.newest(now_ms)) else {
        return reply::null(ctx);
    };
    // A hold attached to a lease group lives as long as its lease.
    let deadline = match newest.tags.lease() {
        Some(_) => lease_registry::shown_deadline(newest),
        None => key.deadline(),
    };
    let ttl = rules::ms_left(deadline, now_ms);
    let (fence, owner) = (newest.fence, newest.tags.owner());
    let revoked = match seen {
        0 => None,
        seen if seen == fence => None,
        seen => revocations::reason_of_fence(server::selected_db(ctx), name, seen, now_ms),
    };
    let mut fields = vec![
        (c"fence", Field::Int(fence as i64)),
        (c"ttl", Field::Int(ttl)),
    ];
    if let Some(owner) = owner {
        fields.push((c"owner", Field::Bytes(owner)));
    }
    if let Some(reason) = revoked.as_deref() {
        fields.push((c"revoked", Field::Bytes(reason)));
    }
    reply::map(ctx, &fields);
}

/// `LOCK.OBSERVE`: reply now if the holder differs from `seen` (or the
/// caller may not block), else block until it changes or `timeout_ms`
/// passes (0: no limit).
pub fn observe(ctx: &Context, name: &RedisString, seen: u64, timeout_ms: i64) {
    let now = holder_fence(ctx, name);
    if decide::holder_changed(seen, now) || !server::can_block(ctx) {
        return reply_holder(ctx, name, seen);
    }
    let Some(id) = blocked::block::<Observers>(ctx) else {
        return reply_holder(ctx, name, seen);
    };
    let db = server::selected_db(ctx);
    let timeout = (timeout_ms > 0).then(|| {
        let payload: Timeout = (id, name.as_slice().into());
        timer::start(ctx, timeout_ms, payload, on_timeout)
    });
    with_observers(|o| o.push(db, &[name.as_slice()], id, Observer { seen, timeout }));
    watch_deadline(ctx, db, name);
}

/// Make sure `name` is looked at when its (earliest) lease is over.
fn watch_deadline(ctx: &Context, db: i32, name: &RedisString) {
    let key = LockKey::open_read(ctx, name);
    let deadline = match key.held() {
        Ok(holds) => holds.earliest_deadline(server::now_ms()),
        Err(_) => None,
    };
    drop(key);
    let Some(deadline) = deadline else {
        return;
    };
    let due = decide::observe_at(deadline);
    let entry = (db, Box::<[u8]>::from(name.as_slice()));
    let armed = DEADLINES.with(|d| d.borrow().get(&entry).copied());
    if armed.is_some_and(|(_, at)| at <= due) {
        return;
    }
    if let Some((timer, _)) = armed {
        timer::stop::<DbKey>(ctx, timer);
    }
    let timer = timer::start(ctx, due - server::now_ms(), entry.clone(), on_deadline);
    DEADLINES.with(|d| d.borrow_mut().insert(entry, (timer, due)));
}

/// An observed key's lease is over: open it for writing (on a master that
/// expires it, and its `expired` event wakes the observers), look at it,
/// and watch its next deadline if observers remain.
fn on_deadline(ctx: &Context, (db, key): DbKey) {
    DEADLINES.with(|d| d.borrow_mut().remove(&(db, key.clone())));
    if with_observers(|o| o.len(db, &key)) == 0 {
        return;
    }
    server::select_db(ctx, db);
    let name = crate::redis::string(ctx, &key);
    // On a master, opening the key expires a lease that ran out, and the
    // `expired` event tells observers (after the hand-off when clients
    // wait, see `events.rs`): telling them here as well could answer
    // "free" in the instant before that hand-off. A key free already was
    // told of by its own event. Shared holders run out one by one inside
    // the key, so those keys (and a replica's, which waits for its
    // master's effects) are looked at here.
    let told_by_event = server::is_master(ctx)
        && !server::writes_paused()
        && LockKey::open_write(ctx, &name)
            .held()
            .is_ok_and(|holds| holds.is_free());
    if !told_by_event {
        changed(ctx, db, &name);
    }
    if with_observers(|o| o.len(db, &key)) > 0 {
        watch_deadline(ctx, db, &name);
    }
}

/// [`changed`] for the context's selected db, which is only asked for when
/// someone observes (the hot path of every grant and release calls this).
#[inline]
pub fn changed_here(ctx: &Context, name: &RedisString) {
    if total() > 0 {
        changed(ctx, server::selected_db(ctx), name);
    }
}

/// `name` in `db` (the context's selected db) may have a new holder: wake
/// every observer that saw another one. Cheap when nobody observes.
pub fn changed(ctx: &Context, db: i32, name: &RedisString) {
    if total() == 0 || with_observers(|o| o.len(db, name)) == 0 {
        return;
    }
    let now = holder_fence(ctx, name);
    // A key that left because its slot moved to another node (Valkey's
    // atomic slot migration; on a replica of the source, which hears of it
    // only as its master's `DEL`) is not free: redirect its observers.
    let moved = if now == 0 {
        migration::moved_from_here(ctx, name.as_slice())
    } else {
        None
    };
    let stale: Vec<(WaiterId, Option<TimerId>, u64)> = with_observers(|o| {
        o.waiters_with_ids(db, name)
            .filter(|(_, w)| decide::holder_changed(w.seen, now))
            .map(|(id, w)| (id, w.timeout, w.seen))
            .collect()
    });
    for (id, timeout, seen) in stale {
        with_observers(|o| o.remove(id));
        if let Some(timer) = timeout {
            timer::stop::<Timeout>(ctx, timer);
        }
        let key = name.as_slice().into();
        let moved = moved.clone();
        blocked::unblock::<Observers>(id, Look { key, moved, seen });
    }
}

/// Every key of `db` (`None`: every db) may have changed at once (a flush,
/// `SWAPDB`, a demotion): look at each observed key there.
pub fn changed_in(ctx: &Context, db: Option<i32>) {
    for (db, key) in with_observers(|o| o.keys_with_waiters(db)) {
        server::select_db(ctx, db);
        changed(ctx, db, &crate::redis::string(ctx, &key));
    }
}

/// The keys for which `redirect` gives an error are another node's now
/// (their slot moved: Valkey's atomic slot migration): answer each of their
/// observers, in every database, with that error, and stop their timers.
/// Returns how many observers were answered.
pub fn moved_away(ctx: &Context, redirect_of: &mut dyn FnMut(&[u8]) -> Option<CString>) -> usize {
    let mut answered = 0;
    for (db, key) in with_observers(|o| o.keys_with_waiters(None)) {
        if let Some(error) = redirect_of(&key) {
            answered += redirect(ctx, db, &key, &error);
        }
    }
    answered
}

/// Answer every observer of `key` in `db` with `error` (a redirect: its slot
/// is another node's now), and stop their timers. Returns how many observers
/// were answered.
pub fn redirect(ctx: &Context, db: i32, key: &[u8], error: &CString) -> usize {
    if total() == 0 {
        return 0;
    }
    let entry = (db, Box::<[u8]>::from(key));
    if let Some((timer, _)) = DEADLINES.with(|d| d.borrow_mut().remove(&entry)) {
        timer::stop::<DbKey>(ctx, timer);
    }
    let ids: Vec<WaiterId> =
        with_observers(|o| o.waiters_with_ids(db, key).map(|(id, _)| id).collect());
    let mut answered = 0;
    for id in ids {
        if let Some(observer) = with_observers(|o| o.remove(id)) {
            if let Some(timer) = observer.timeout {
                timer::stop::<Timeout>(ctx, timer);
            }
            let moved = Some(error.clone());
            blocked::unblock::<Observers>(
                id,
                Look {
                    key: key.into(),
                    moved,
                    seen: observer.seen,
                },
            );
            answered += 1;
        }
    }
    answered
}

/// Whether clients observe `key` in `db`. Cheap when nobody observes.
pub fn observing(db: i32, key: &[u8]) -> bool {
    total() > 0 && with_observers(|o| o.len(db, key)) > 0
}

/// A timeout timer's payload: the observer and its key.
type Timeout = (BlockedId, Box<[u8]>);

/// `timeout-ms` passed with no change: reply with the holder as it is.
fn on_timeout(_ctx: &Context, (id, key): Timeout) {
    if let Some(observer) = with_observers(|o| o.remove(id)) {
        let seen = observer.seen;
        blocked::unblock::<Observers>(
            id,
            Look {
                key,
                moved: None,
                seen,
            },
        );
    }
}

/// What an observer is unblocked with: look at this key now, or, when its
/// slot moved to another node, reply this error (`MOVED …`).
pub struct Look {
    key: Box<[u8]>,
    moved: Option<CString>,
    /// The holder fence the observer saw.
    seen: u64,
}

struct Observers;

impl Waits for Observers {
    type Outcome = Look;

    fn reply(ctx: &Context, look: &Look) {
        match &look.moved {
            Some(error) => reply::error_text(ctx, error),
            None => reply_holder(ctx, &crate::redis::string(ctx, &look.key), look.seen),
        }
    }

    fn disconnected(ctx: &Context, client: BlockedId, _outcome: Option<&Look>) {
        if let Some(observer) = with_observers(|o| o.remove(client)) {
            if let Some(timer) = observer.timeout {
                timer::stop::<Timeout>(ctx, timer);
            }
            blocked::unblock_without_reply(client);
        }
    }
}
