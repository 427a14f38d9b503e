//! Leases that run out while held: counted (`INFO lock` `lock_expiries`),
//! announced (`lock.expired` keyspace event), and, with
//! `lock.expiry-delay-ms`, followed by a lock-delay during which nobody is
//! granted the key.
//!
//! How an expiry is told from a delete: Redis removes an expired key with the
//! same call as `DEL`, and then fires its `expired` keyspace event, by which
//! time the value is gone. So the data type's unlink callback
//! ([`on_unlink`]), which sees the value as Redis removes it, notes a lock
//! whose deadline has passed, and the `expired` event ([`on_expired`]) that
//! follows at once claims the note for the same key.
//!
//! Module-wide state (main thread only, hence thread-locals): that one note,
//! and the lock-delays in force, by db and key. A lock-delay is this server's
//! own knowledge: not replicated, not persisted (a failover or a restart ends
//! it early).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;

use redis_module::{raw, Context, NotifyEvent};

use crate::lock_type::Lock;
use crate::metrics::{self, Counter};
use crate::{config, effects, rules, store, waiting};

struct Expired {
    db: i32,
    key: Box<[u8]>,
    deadline_ms: i64,
}

/// A key in a database.
type DbKey = (i32, Box<[u8]>);

thread_local! {
    static NOTED: RefCell<Option<Expired>> = const { RefCell::new(None) };
    static DELAYS: RefCell<HashMap<DbKey, i64>> = RefCell::new(HashMap::new());
}

/// The `unlink2` callback of the lock type: Redis is removing a lock from
/// the keyspace (release, `DEL`, expiry, eviction, overwrite).
///
/// # Safety
/// Called by Redis with a valid key-option context and a lock value.
pub unsafe extern "C" fn on_unlink(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let Some(lock) = value.cast::<Lock>().as_ref() else {
        return;
    };
    if lock.deadline_ms < 0 || rules::is_live(lock.deadline_ms, store::now_ms()) {
        return;
    }
    let (Some(name_of), Some(db_of)) = (
        raw::RedisModule_GetKeyNameFromOptCtx,
        raw::RedisModule_GetDbIdFromOptCtx,
    ) else {
        return;
    };
    let name = name_of(ctx);
    if name.is_null() {
        return;
    }
    let Some(ptr_len) = raw::RedisModule_StringPtrLen else {
        return;
    };
    let mut len = 0usize;
    let bytes = ptr_len(name, &mut len);
    if bytes.is_null() {
        return;
    }
    let key = std::slice::from_raw_parts(bytes.cast::<u8>(), len);
    let expired = Expired {
        db: db_of(ctx),
        key: key.into(),
        deadline_ms: lock.deadline_ms,
    };
    NOTED.with(|n| *n.borrow_mut() = Some(expired));
}

/// Redis' `expired` keyspace event, for any key: if it is the lock just
/// noted by [`on_unlink`], its lease ran out while held.
pub fn on_expired(ctx: &Context, _class: NotifyEvent, _event: &str, key: &[u8]) {
    let Some(noted) = NOTED.with(|n| n.borrow_mut().take()) else {
        return;
    };
    let db = store::selected_db(ctx);
    if noted.db != db || *noted.key != *key {
        return;
    }
    metrics::count(Counter::Expiries);
    waiting::lease_expired(db, key);
    let name = ctx.create_string(key);
    effects::notify(ctx, c"lock.expired", &name);
    let delay = config::expiry_delay_ms();
    if delay > 0 {
        let until = rules::embargo_until(noted.deadline_ms, delay);
        if until > store::now_ms() {
            DELAYS.with(|d| {
                let mut delays = d.borrow_mut();
                if delays.len() >= 1024 && delays.len().is_power_of_two() {
                    let now = store::now_ms();
                    delays.retain(|_, until| *until > now);
                }
                delays.insert((db, noted.key), until);
            });
        }
    }
}

/// Any other keyspace event (`del`, `evicted`, …) means the lock just noted
/// was removed by something other than its expiry: forget the note, so that
/// a later `expired` event of another value at that name does not count.
pub fn forget_noted() {
    NOTED.with(|n| n.borrow_mut().take());
}

/// When the lock-delay on `key` ends (unix ms), if one is in force now.
pub fn delayed_until(db: i32, key: &[u8], now_ms: i64) -> Option<i64> {
    DELAYS.with(|d| {
        let mut delays = d.borrow_mut();
        if delays.is_empty() {
            return None;
        }
        let entry = (db, Box::<[u8]>::from(key));
        match delays.get(&entry) {
            Some(&until) if until > now_ms => Some(until),
            Some(_) => {
                delays.remove(&entry);
                None
            }
            None => None,
        }
    })
}

/// A flush ends every lock-delay in the flushed databases.
pub fn forget(db: Option<i32>) {
    DELAYS.with(|d| match db {
        Some(db) => d.borrow_mut().retain(|(d, _), _| *d != db),
        None => d.borrow_mut().clear(),
    });
}
