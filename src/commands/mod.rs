//! One file per command. Each does four things, in order: parse (everything
//! that can be refused is refused before the keyspace is touched), decide (by
//! calling the core's `decide`), apply (through `holds.rs` and
//! `wait_queue/`), then reply.

pub mod acquire;
pub mod effects;
pub mod extend;
pub mod guard;
pub mod info;
pub mod lease_group;
pub mod observe;
pub mod queue;
pub mod release;

use std::ffi::CString;

use redis_lock_core::args::Sync;
use redis_lock_core::errors::LockError;
use redis_lock_core::few::Few;
use redis_module::{Context, RedisString};

use redis_lock_core::sync::Stands;

use crate::holds;
use crate::redis::key::LockKey;
use crate::redis::{client, reply, server};
use crate::state::metrics::{self, Counter};
use crate::state::revocations;
use crate::sync::{self, Answer};

/// `token`'s live hold on a key (see `lease_registry::live_mine`).
pub use crate::state::lease_registry::live_mine;

/// The `REVOKED <reason>` error for `token` on `name`, if its hold there
/// was revoked and would still run.
fn revoked(ctx: &Context, name: &RedisString, token: &[u8], now_ms: i64) -> Option<CString> {
    revocations::of(server::selected_db(ctx), name, token, now_ms)
}

/// `SYNC` waits for replicas, which MULTI/EXEC and scripts cannot: refused
/// there before anything changes.
fn may_sync(ctx: &Context, sync: Option<Sync>) -> Result<(), LockError> {
    match sync {
        Some(_) if !server::can_block(ctx) => Err(LockError::SyncCannotWait),
        _ => Ok(()),
    }
}

/// Open `name` for a write command, and read the clock: after opening,
/// since opening a lock whose lease ran out expires it (which starts a
/// lock-delay). The holds of a key with several whose lease ran out are
/// taken out too (Redis expires only the whole key), each replicated and
/// counted as an expiry.
fn open_write(ctx: &Context, name: &RedisString) -> (LockKey, i64) {
    let mut key = LockKey::open_write(ctx, name);
    let now_ms = server::now_ms();
    if key.is_list() {
        holds::expire(ctx, &mut key, name, now_ms);
    }
    (key, now_ms)
}

/// [`open_write`] each key of `names`, in order, and the clock read after
/// the last (`names` is never empty): one key is kept inline (no
/// allocation).
fn open_each(ctx: &Context, names: &[RedisString]) -> (Few<LockKey>, i64) {
    let mut opened = Few::with_capacity(names.len());
    let mut now_ms = 0;
    for name in names {
        let (key, now) = open_write(ctx, name);
        opened.push(key);
        now_ms = now;
    }
    (opened, now_ms)
}

/// Lock writes on a replica come only from its master. Redis already refuses
/// them on a read-only replica; this also covers `replica-read-only no`, where
/// a local grant or release would diverge from the master.
fn refuse_local_write_on_replica(ctx: &Context) -> Result<(), LockError> {
    if server::is_replica() && !server::is_replicated_or_loading(ctx) {
        return Err(LockError::ReadOnlyReplica);
    }
    Ok(())
}

/// `SESSION`: the calling client's id. Inside a script the client is the
/// script engine's, which never disconnects: a binding to it would be a lie.
fn session_of(ctx: &Context, session: bool) -> Result<Option<u64>, LockError> {
    match session {
        true if server::in_script(ctx) => Err(LockError::SessionInScript),
        true => Ok(Some(client::id(ctx))),
        false => Ok(None),
    }
}

/// The holder's extension stands: count it and reply 1, with `SYNC` once
/// its replicas hold it.
fn extended(ctx: &Context, sync: Option<redis_lock_core::args::Sync>) -> Result<(), LockError> {
    metrics::count(Counter::Extends);
    match sync {
        Some(sync) => {
            let answer = Answer::Integer(1);
            sync::block(ctx, sync, answer, Stands::Extension, None)
        }
        None => {
            reply::integer(ctx, 1);
            Ok(())
        }
    }
}
