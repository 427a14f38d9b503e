//! `LOCK.ACQUIRE … SESSION`: which locks each connection holds with
//! SESSION, so that they are released as soon as it closes (and still at
//! their TTL, should that come first). The release itself is `wait_queue/handoff.rs`'s
//! one release-and-hand-off path; the disconnect arrives in `events.rs`.
//!
//! Module-wide state: per client id, the locks it holds with SESSION, each
//! as (db, key, fence). Only this file touches it. An entry is only a hint:
//! a disconnect releases a key only if it still holds that very fence, so
//! entries for locks that were released, expired or handed on since are
//! harmless and pruned lazily. Main thread only (commands, server events,
//! timers), hence a thread-local.
//!
//! Not carried anywhere: the binding is this server's knowledge of its own
//! connections. A replica promoted by a failover, or a server restarted from
//! its RDB or AOF, does not know it, and the lock falls back to its TTL.

use std::cell::RefCell;
use std::collections::HashMap;

use redis_module::Context;

use crate::redis::key::LockKey;
use crate::redis::server;

/// A lock bound to a connection.
pub struct Bound {
    pub db: i32,
    pub key: Box<[u8]>,
    pub fence: u64,
}

thread_local! {
    static SESSIONS: RefCell<HashMap<u64, Vec<Bound>>> = RefCell::new(HashMap::new());
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

/// The locks bound to `client`, whose connection closed: taken out.
pub fn take(client: u64) -> Option<Vec<Bound>> {
    SESSIONS.with(|s| {
        let mut sessions = s.borrow_mut();
        if sessions.is_empty() {
            return None;
        }
        sessions.remove(&client)
    })
}

/// Drop the entries of `client` whose lock is gone or has another holder, so
/// that a long-lived connection taking many SESSION locks stays small.
fn prune(ctx: &Context, client: u64) {
    let Some(bound) = take(client) else {
        return;
    };
    let here = server::selected_db(ctx);
    let kept: Vec<Bound> = bound
        .into_iter()
        .filter(|b| {
            server::select_db(ctx, b.db);
            let name = crate::redis::string(ctx, &b.key);
            match LockKey::open_read(ctx, &name).held() {
                Ok(holds) => holds.bound(b.fence, None).is_some(),
                Err(_) => false,
            }
        })
        .collect();
    server::select_db(ctx, here);
    if !kept.is_empty() {
        SESSIONS.with(|s| s.borrow_mut().insert(client, kept));
    }
}
