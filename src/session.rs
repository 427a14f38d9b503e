//! `LOCK.ACQUIRE … SESSION`: a lock bound to the connection that acquired it,
//! released as soon as that connection closes (and still at its TTL, should
//! that come first).
//!
//! Module-wide state: per client id, the locks it holds with SESSION, each
//! as (db, key, fence). An entry is only a hint: a disconnect releases a key
//! only if it still holds that very fence, so entries for locks that were
//! released, expired or handed on since are harmless and pruned lazily. Main
//! thread only (commands, server events, timers), hence a thread-local.
//!
//! Not carried anywhere: the binding is this server's knowledge of its own
//! connections. A replica promoted by a failover, or a server restarted from
//! its RDB or AOF, does not know it, and the lock falls back to its TTL.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{raw, Context, ContextFlags};

use crate::metrics::{self, Counter};
use crate::store::{self, LockKey};
use crate::{effects, waiting};

struct Bound {
    db: i32,
    key: Box<[u8]>,
    fence: u64,
}

thread_local! {
    static SESSIONS: RefCell<HashMap<u64, Vec<Bound>>> = RefCell::new(HashMap::new());
}

/// The id of the client running the command.
pub fn client_id(ctx: &Context) -> u64 {
    unsafe { raw::RedisModule_GetClientId.map_or(0, |f| f(ctx.get_raw())) }
}

/// Bind the lock `key` (with `fence`) in `db` to `client`'s connection.
pub fn bind(ctx: &Context, client: u64, db: i32, key: &[u8], fence: u64) {
    let needs_pruning = SESSIONS.with(|s| {
        let mut sessions = s.borrow_mut();
        let bound = sessions.entry(client).or_default();
        if bound
            .iter()
            .any(|b| b.db == db && b.fence == fence && *b.key == *key)
        {
            return false;
        }
        bound.push(Bound {
            db,
            key: key.into(),
            fence,
        });
        bound.len() >= 16 && bound.len().is_power_of_two()
    });
    if needs_pruning {
        prune(ctx, client);
    }
}

/// Drop the entries of `client` whose lock is gone or has another holder, so
/// that a long-lived connection taking many SESSION locks stays small.
fn prune(ctx: &Context, client: u64) {
    let Some(bound) = SESSIONS.with(|s| s.borrow_mut().remove(&client)) else {
        return;
    };
    let here = store::selected_db(ctx);
    let kept: Vec<Bound> = bound
        .into_iter()
        .filter(|b| {
            store::select_db(ctx, b.db);
            let name = ctx.create_string(&*b.key);
            matches!(LockKey::open_read(ctx, &name).lock(), Ok(Some(l)) if l.fence == b.fence)
        })
        .collect();
    store::select_db(ctx, here);
    if !kept.is_empty() {
        SESSIONS.with(|s| s.borrow_mut().insert(client, kept));
    }
}

pub fn subscribe_server_events(ctx: &Context) {
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(
                ctx.get_raw(),
                raw::RedisModuleEvent {
                    id: raw::REDISMODULE_EVENT_CLIENT_CHANGE,
                    dataver: 1,
                },
                Some(on_client_change),
            );
        }
    }
}

/// A connection closed: if it holds SESSION locks, release them from a timer
/// due now (the client is being freed; the keyspace is not written from
/// inside that).
unsafe extern "C" fn on_client_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if subevent != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED || data.is_null() {
            return;
        }
        if SESSIONS.with(|s| s.borrow().is_empty()) {
            return;
        }
        let client = unsafe { (*data.cast::<raw::RedisModuleClientInfo>()).id };
        let Some(bound) = SESSIONS.with(|s| s.borrow_mut().remove(&client)) else {
            return;
        };
        let data = Box::into_raw(Box::new(bound)).cast::<c_void>();
        unsafe {
            match raw::RedisModule_CreateTimer {
                Some(create) => {
                    create(ctx, 0, Some(on_release_timer), data);
                }
                None => drop(Box::from_raw(data.cast::<Vec<Bound>>())),
            }
        }
    }));
}

/// How soon a release that found writes paused tries again.
const PAUSED_RETRY_MS: i64 = 10;

unsafe extern "C" fn on_release_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if store::writes_paused() {
        // Not now (see `store::writes_paused`): the same releases, later.
        if let Some(create) = raw::RedisModule_CreateTimer {
            create(ctx, PAUSED_RETRY_MS, Some(on_release_timer), data);
            return;
        }
    }
    let bound = Box::from_raw(data.cast::<Vec<Bound>>());
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let ctx = Context::new(ctx);
        if !ctx.get_flags().contains(ContextFlags::MASTER) {
            return;
        }
        for b in bound.iter() {
            release_if_held(&ctx, b);
        }
    }));
}

/// Release `b.key` if it still holds `b.fence`, as `LOCK.RELEASE` would:
/// replicated as `DEL`, then handed to the first waiter.
fn release_if_held(ctx: &Context, b: &Bound) {
    store::select_db(ctx, b.db);
    let name = ctx.create_string(&*b.key);
    let mut key = LockKey::open_write(ctx, &name);
    if !matches!(key.lock(), Ok(Some(l)) if l.fence == b.fence) {
        return;
    }
    key.delete();
    drop(key);
    effects::released(ctx, &name);
    metrics::count(Counter::SessionReleases);
    if waiting::waiters(b.db, &b.key) > 0 {
        waiting::hand_off(ctx, b.db, &b.key, waiting::Cause::Release);
    }
}
