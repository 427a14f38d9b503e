//! Blocking acquire: `LOCK.ACQUIRE … WAIT timeout-ms` queues a client per key,
//! in arrival order, and the server hands the lock to the head of the queue as
//! soon as the key is free.
//!
//! Module-wide state: the queues ([`WaitQueues`]) and, per key with waiters,
//! at most one timer. Everything here runs on Redis' main thread (commands,
//! timers, keyspace and server events, blocked-client callbacks), so the
//! state is a thread-local, and no borrow of it is ever held across a call
//! into Redis that could call back into the module.
//!
//! Who hands the key over, and when:
//! - `LOCK.RELEASE` of a key with waiters, inside the command ([`hand_off`]);
//! - expiry: a timer armed at the holder's deadline (re-armed when the lease
//!   was extended meanwhile);
//! - `DEL`, `UNLINK`, `RENAME` or eviction of a key with waiters, and
//!   `FLUSHALL`/`FLUSHDB`: a keyspace or server event arms a timer due now,
//!   because a key may not be written from inside an event. (The module does
//!   not listen to string events, which every `SET` would pay for: a key
//!   overwritten by `SET` fails its waiters when the timer armed at the old
//!   holder's deadline finds it.)
//! - a waiter that disconnects after being granted, before its reply: a timer
//!   due now gives the lock back and hands it on ([`reclaim`]).
//!
//! Every blocked client is unblocked exactly once, with
//! `RedisModule_UnblockClient`: with an [`Outcome`] (a grant, an error, or its
//! own timeout timer running out), or with nothing after a disconnect, once
//! it has left the queue.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::c_void;
use std::os::raw::{c_int, c_longlong};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{raw, Context, ContextFlags, RedisString};

use crate::errors::LockError;
use crate::grant::{draw_token, grant, UUID_LEN};
use crate::metrics::{self, Counter};
use crate::store::{self, LockKey};
use crate::waitqueue::{WaitQueues, WaiterId};
use crate::{config, effects, expiry, reply};

struct Waiter {
    blocked: *mut raw::RedisModuleBlockedClient,
    /// `None`: draw a UUIDv4 at grant time.
    token: Option<Box<[u8]>>,
    /// The lease starts at the grant, not at the request.
    ttl_ms: i64,
    /// `SESSION`: the waiting client's id, to bind the lock to once granted.
    session: Option<u64>,
    /// The ACL user the client waits as: its access to the key is checked
    /// again at the grant, since an operator may have revoked it meanwhile.
    user: Option<Box<[u8]>>,
    /// The module's own timer for `WAIT timeout-ms` (none for `WAIT 0`).
    /// Redis is not asked to time the client out: Redis 7.0 would then drop
    /// the reply of a waiter granted in the same instant (its timeout path
    /// skips the module's callback but still tears the client down), so every
    /// end of a wait goes through one path, [`unblock`].
    timeout: Option<u64>,
}

/// What a blocked client is unblocked with (its private data).
enum Outcome {
    Granted {
        db: i32,
        key: Box<[u8]>,
        token: Box<[u8]>,
        fence: u64,
    },
    Failed(LockError),
    /// `WAIT timeout-ms` ran out: reply null.
    TimedOut,
}

/// What a timer is for.
enum Wake {
    /// See whether `key` can be handed to its first waiter.
    HandOff { db: i32, key: Box<[u8]> },
    /// End the wait of this waiter (a [`WaiterId`]) if it is still queued.
    Timeout { waiter: WaiterId },
    /// Take the lock back from a waiter that disconnected after its grant.
    Reclaim {
        db: i32,
        key: Box<[u8]>,
        token: Box<[u8]>,
        fence: u64,
    },
}

/// Why a key is being handed over: for `INFO lock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The holder released it (RELEASE, or its SESSION connection closed).
    Release,
    /// A timer: the lease may have run out, or the key was deleted or
    /// flushed.
    Timer,
}

thread_local! {
    static QUEUES: RefCell<WaitQueues<Waiter>> = RefCell::new(WaitQueues::new());
    /// Keys with waiters whose lease ran out, until their handoff.
    static EXPIRED: RefCell<HashSet<(i32, Box<[u8]>)>> = RefCell::new(HashSet::new());
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

/// The lease on `key` ran out (see [`crate::expiry`]): if clients wait for
/// it, its handoff counts as a handoff on expiry.
pub fn lease_expired(db: i32, key: &[u8]) {
    if waiters(db, key) > 0 {
        EXPIRED.with(|e| e.borrow_mut().insert((db, key.into())));
    }
}

/// Block the calling client at the tail of `key`'s queue for at most
/// `wait_ms` (0: no limit). With `session` (its client id), the lock it is
/// granted is bound to its connection.
pub fn block(
    ctx: &Context,
    db: i32,
    key: &[u8],
    token: Option<&[u8]>,
    ttl_ms: i64,
    wait_ms: i64,
    session: Option<u64>,
) -> Result<(), LockError> {
    let max = config::max_waiters();
    if max > 0 && waiters(db, key) >= max {
        metrics::count(Counter::WaitsRefused);
        return Err(LockError::WaitersLimit);
    }
    let blocked = unsafe {
        match raw::RedisModule_BlockClient {
            Some(block) => block(
                ctx.get_raw(),
                Some(on_unblocked),
                None,
                Some(free_outcome),
                0 as c_longlong,
            ),
            None => std::ptr::null_mut(),
        }
    };
    if blocked.is_null() {
        return Err(LockError::Internal);
    }
    unsafe {
        if let Some(set) = raw::RedisModule_SetDisconnectCallback {
            set(blocked, Some(on_disconnect));
        }
    }
    let id = blocked as WaiterId;
    let timeout = (wait_ms > 0).then(|| start_timer(ctx, wait_ms, Wake::Timeout { waiter: id }));
    let waiter = Waiter {
        blocked,
        token: token.map(Into::into),
        ttl_ms,
        session,
        user: current_user(ctx),
        timeout,
    };
    with_queues(|q| q.push(db, key, id, waiter));
    metrics::count(Counter::Waits);
    Ok(())
}

/// Hand `key` to the head of its queue if the key is free; when a live lock
/// holds it, or a lock-delay is in force, make sure a timer looks again when
/// it ends. Only a master hands over; a replica receives the result.
pub fn hand_off(ctx: &Context, db: i32, key: &[u8], cause: Cause) {
    if waiters(db, key) == 0 || !ctx.get_flags().contains(ContextFlags::MASTER) {
        return;
    }
    let name = ctx.create_string(key);
    let mut lock_key = LockKey::open_write(ctx, &name);
    let held = match lock_key.lock() {
        Ok(held) => held.is_some(),
        Err(_) => {
            // Overwritten with another type: nobody can get it.
            drop(lock_key);
            fail_waiters_of(ctx, db, key, LockError::WaitWrongType);
            return;
        }
    };
    if held {
        if let Some(deadline) = lock_key.deadline() {
            drop(lock_key);
            wake_at(ctx, db, key, deadline);
        }
        return;
    }
    if let Some(until) = expiry::delayed_until(db, key, store::now_ms()) {
        drop(lock_key);
        wake_at(ctx, db, key, until - 1);
        return;
    }
    let expired = EXPIRED.with(|e| e.borrow_mut().remove(&(db, Box::<[u8]>::from(key))));
    loop {
        let Some((_, waiter)) = with_queues(|q| q.pop_front(db, key)) else {
            return;
        };
        dismiss(ctx, &waiter);
        if !may_access(ctx, waiter.user.as_deref(), &name) {
            unblock(waiter.blocked, Outcome::Failed(LockError::WaitNoPerm));
            continue;
        }
        let mut drawn = [0u8; UUID_LEN];
        let token: &[u8] = match &waiter.token {
            Some(token) => token,
            None => draw_token(&mut drawn),
        };
        let outcome = grant(
            ctx,
            &mut lock_key,
            &name,
            token,
            waiter.ttl_ms,
            waiter.session,
        );
        match outcome {
            Ok((fence, deadline)) => {
                effects::handed_off(ctx, &name);
                metrics::count(Counter::GrantsAfterWait);
                if cause == Cause::Release {
                    metrics::count(Counter::HandoffsOnRelease);
                } else if expired {
                    metrics::count(Counter::HandoffsOnExpiry);
                }
                unblock(
                    waiter.blocked,
                    Outcome::Granted {
                        db,
                        key: key.into(),
                        token: token.into(),
                        fence,
                    },
                );
                if waiters(db, key) > 0 {
                    drop(lock_key);
                    wake_at(ctx, db, key, deadline);
                }
                return;
            }
            // This waiter cannot be granted (fences exhausted): tell it, and
            // try the next one.
            Err(error) => unblock(waiter.blocked, Outcome::Failed(error)),
        }
    }
}

/// The name of the ACL user the calling client runs as.
fn current_user(ctx: &Context) -> Option<Box<[u8]>> {
    unsafe {
        let (Some(user_name), Some(ptr_len), Some(free)) = (
            raw::RedisModule_GetCurrentUserName,
            raw::RedisModule_StringPtrLen,
            raw::RedisModule_FreeString,
        ) else {
            return None;
        };
        let name = user_name(ctx.get_raw());
        if name.is_null() {
            return None;
        }
        let mut len = 0usize;
        let bytes = ptr_len(name, &mut len);
        let owned = (!bytes.is_null())
            .then(|| Box::from(std::slice::from_raw_parts(bytes.cast::<u8>(), len)));
        free(ctx.get_raw(), name);
        owned
    }
}

/// Whether `user` may still read and write `key`: an operator may have
/// changed its key patterns (`ACL SETUSER … resetkeys`) while it waited. A
/// user that no longer exists may not (Redis closes its clients anyway).
fn may_access(ctx: &Context, user: Option<&[u8]>, key: &RedisString) -> bool {
    let Some(user) = user else {
        return true;
    };
    let name = ctx.create_string(user);
    unsafe {
        let (Some(lookup), Some(check), Some(free)) = (
            raw::RedisModule_GetModuleUserFromUserName,
            raw::RedisModule_ACLCheckKeyPermissions,
            raw::RedisModule_FreeModuleUser,
        ) else {
            return true;
        };
        let acl_user = lookup(name.inner);
        if acl_user.is_null() {
            return false;
        }
        // Read (ACCESS) and write (UPDATE) access, as the command's own key
        // needs; Redis accepts only these operation flags here.
        let flags = raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;
        let allowed = check(acl_user, key.inner, flags as c_int) == raw::Status::Ok as c_int;
        free(acl_user);
        allowed
    }
}

/// Arm `key`'s timer to hand it over at `at_ms` (unix ms) at the latest.
/// A lease ends once the clock passes its deadline, so a deadline is
/// looked at 1 ms after it.
pub fn wake_at(ctx: &Context, db: i32, key: &[u8], deadline_ms: i64) {
    if waiters(db, key) == 0 {
        return;
    }
    let due = deadline_ms.saturating_add(1);
    let armed = with_queues(|q| q.timer(db, key));
    if armed.is_some_and(|(_, at)| at <= due) {
        return;
    }
    if let Some((timer, _)) = armed {
        stop_timer(ctx, timer);
    }
    let timer = start_timer(
        ctx,
        due - store::now_ms(),
        Wake::HandOff {
            db,
            key: key.into(),
        },
    );
    with_queues(|q| q.set_timer(db, key, Some((timer, due))));
}

/// A keyspace event (generic or evicted) on a key: if clients
/// wait for it, it may just have become free, so look at it now. Runs inside
/// the event, so it only arms a timer.
pub fn on_key_event(ctx: &Context, key: &[u8]) {
    if with_queues(|q| q.total()) == 0 {
        return;
    }
    let db = store::selected_db(ctx);
    wake_at(ctx, db, key, store::now_ms() - 1);
}

/// Server events: a flush frees every key; a demotion ends every wait.
pub fn subscribe_server_events(ctx: &Context) {
    for (id, callback) in [
        (
            raw::REDISMODULE_EVENT_FLUSHDB,
            on_flush as unsafe extern "C" fn(_, _, _, _),
        ),
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            on_role_changed,
        ),
    ] {
        unsafe {
            if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
                subscribe(
                    ctx.get_raw(),
                    raw::RedisModuleEvent { id, dataver: 1 },
                    Some(callback),
                );
            }
        }
    }
}

unsafe extern "C" fn on_flush(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guarded(|| {
        if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END || data.is_null() {
            return;
        }
        let flushed = unsafe { &*data.cast::<raw::RedisModuleFlushInfo>() };
        let db = (flushed.dbnum >= 0).then_some(flushed.dbnum);
        expiry::forget(db);
        let ctx = Context::new(ctx);
        for (db, key) in with_queues(|q| q.keys_with_waiters(db)) {
            store::select_db(&ctx, db);
            wake_at(&ctx, db, &key, store::now_ms() - 1);
        }
    });
}

unsafe extern "C" fn on_role_changed(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guarded(|| {
        let now_replica = subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA;
        crate::commands::set_replica(now_replica);
        if !now_replica {
            return;
        }
        let ctx = Context::new(ctx);
        let (waiters, timers) = with_queues(|q| q.drain());
        EXPIRED.with(|e| e.borrow_mut().clear());
        for timer in timers {
            stop_timer(&ctx, timer);
        }
        for waiter in waiters {
            dismiss(&ctx, &waiter);
            unblock(waiter.blocked, Outcome::Failed(LockError::WaitDemoted));
        }
    });
}

fn fail_waiters_of(ctx: &Context, db: i32, key: &[u8], error: LockError) {
    while let Some((_, waiter)) = with_queues(|q| q.pop_front(db, key)) {
        dismiss(ctx, &waiter);
        unblock(waiter.blocked, Outcome::Failed(error));
    }
}

/// A waiter leaves its queue other than by timing out: stop its timeout.
fn dismiss(ctx: &Context, waiter: &Waiter) {
    if let Some(timer) = waiter.timeout {
        stop_timer(ctx, timer);
    }
}

/// A waiter that disconnected between its grant and its reply would strand
/// the lock: give it back if it still holds it, and hand it on.
fn reclaim(ctx: &Context, db: i32, key: &[u8], token: &[u8], fence: u64) {
    if !ctx.get_flags().contains(ContextFlags::MASTER) {
        return;
    }
    store::select_db(ctx, db);
    let name = ctx.create_string(key);
    let mut lock_key = LockKey::open_write(ctx, &name);
    let still_held = matches!(
        lock_key.lock(),
        Ok(Some(lock)) if lock.fence == fence
            && lock.holder_token.bytes(&mut [0u8; UUID_LEN]) == token
    );
    if still_held {
        lock_key.delete();
        drop(lock_key);
        effects::released(ctx, &name);
        hand_off(ctx, db, key, Cause::Release);
    }
}

fn unblock(blocked: *mut raw::RedisModuleBlockedClient, outcome: Outcome) {
    let data = Box::into_raw(Box::new(outcome)).cast::<c_void>();
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock(blocked, data);
        }
    }
}

/// The blocked client's reply, once [`unblock`] gave it an outcome.
unsafe extern "C" fn on_unblocked(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guarded(|| reply_outcome(&Context::new(ctx)));
    raw::Status::Ok as c_int
}

/// Reply with the outcome the client was unblocked with; false if it has none.
fn reply_outcome(ctx: &Context) -> bool {
    let data = unsafe {
        raw::RedisModule_GetBlockedClientPrivateData
            .map_or(std::ptr::null_mut(), |f| f(ctx.get_raw()))
    };
    match unsafe { data.cast::<Outcome>().as_ref() } {
        Some(Outcome::Granted { token, fence, .. }) => reply::grant(ctx, token, *fence),
        Some(Outcome::Failed(error)) => reply::error(ctx, *error),
        Some(Outcome::TimedOut) => reply::null(ctx),
        None => return false,
    }
    true
}

/// The waiting connection closed: leave the queue; if it was granted in the
/// meantime, take the lock back.
unsafe extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    blocked: *mut raw::RedisModuleBlockedClient,
) {
    guarded(|| {
        let ctx = Context::new(ctx);
        let data = unsafe {
            raw::RedisModule_GetBlockedClientPrivateData
                .map_or(std::ptr::null_mut(), |f| f(ctx.get_raw()))
        };
        if let Some(Outcome::Granted {
            db,
            key,
            token,
            fence,
        }) = unsafe { data.cast::<Outcome>().as_ref() }
        {
            start_timer(
                &ctx,
                0,
                Wake::Reclaim {
                    db: *db,
                    key: key.clone(),
                    token: token.clone(),
                    fence: *fence,
                },
            );
            return;
        }
        if let Some(waiter) = with_queues(|q| q.remove(blocked as WaiterId)) {
            dismiss(&ctx, &waiter);
            unsafe {
                if let Some(unblock) = raw::RedisModule_UnblockClient {
                    unblock(blocked, std::ptr::null_mut());
                }
            }
        }
    });
}

unsafe extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        drop(Box::from_raw(data.cast::<Outcome>()));
    }
}

fn start_timer(ctx: &Context, delay_ms: i64, wake: Wake) -> u64 {
    let data = Box::into_raw(Box::new(wake)).cast::<c_void>();
    unsafe {
        match raw::RedisModule_CreateTimer {
            Some(create) => create(ctx.get_raw(), delay_ms.max(0), Some(on_timer), data),
            None => {
                drop(Box::from_raw(data.cast::<Wake>()));
                0
            }
        }
    }
}

fn stop_timer(ctx: &Context, timer: u64) {
    let mut data: *mut c_void = std::ptr::null_mut();
    unsafe {
        if let Some(stop) = raw::RedisModule_StopTimer {
            if stop(ctx.get_raw(), timer, &mut data) == raw::Status::Ok as c_int && !data.is_null()
            {
                drop(Box::from_raw(data.cast::<Wake>()));
            }
        }
    }
}

/// How soon a timer that found writes paused looks again.
const PAUSED_RETRY_MS: i64 = 10;

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let wake = Box::from_raw(data.cast::<Wake>());
    guarded(|| {
        let ctx = Context::new(ctx);
        match *wake {
            Wake::HandOff { db, key } if store::writes_paused() => {
                with_queues(|q| q.set_timer(db, &key, None));
                if waiters(db, &key) > 0 {
                    wake_at(&ctx, db, &key, store::now_ms() + PAUSED_RETRY_MS - 1);
                } else {
                    with_queues(|q| q.forget_if_idle(db, &key));
                    EXPIRED.with(|e| e.borrow_mut().remove(&(db, key)));
                }
            }
            reclaim @ Wake::Reclaim { .. } if store::writes_paused() => {
                start_timer(&ctx, PAUSED_RETRY_MS, reclaim);
            }
            Wake::HandOff { db, key } => {
                with_queues(|q| q.set_timer(db, &key, None));
                store::select_db(&ctx, db);
                hand_off(&ctx, db, &key, Cause::Timer);
                with_queues(|q| q.forget_if_idle(db, &key));
                // Its waiters may all have left before the lease ran out.
                if waiters(db, &key) == 0 {
                    EXPIRED.with(|e| e.borrow_mut().remove(&(db, key)));
                }
            }
            Wake::Timeout { waiter } => {
                if let Some(waiter) = with_queues(|q| q.remove(waiter)) {
                    metrics::count(Counter::WaitTimeouts);
                    unblock(waiter.blocked, Outcome::TimedOut);
                }
            }
            Wake::Reclaim {
                db,
                key,
                token,
                fence,
            } => reclaim(&ctx, db, &key, &token, fence),
        }
    });
}

/// Run a callback so that a panic (a bug) is logged by the hook and stops
/// here, never unwinding into Redis.
fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}
