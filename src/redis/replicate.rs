//! What goes to replicas and the AOF, to `WATCH`ers and to keyspace-event
//! subscribers. Which effect a state change sends is `holds.rs`'s choice;
//! this file only sends it.

use std::ffi::CStr;
use std::os::raw::c_char;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, Ordering};

use redis_lock_core::effect::{self, Permits, State};
use redis_lock_core::hold::Kind;
use redis_module::{raw, Context, RedisString};

use super::server;

/// Whether anything reads what this node propagates (see
/// [`server::propagation_is_read`]): `true` until the first check, and set
/// again at once by whatever can add a reader, before that reader can see
/// one write: a fork (a replica's full sync, an AOF rewrite, also a plain
/// `BGSAVE`), a role change, `CONFIG SET appendonly`. Only [`recheck`], once
/// a second, sets it back to `false`. A replica's partial resync needs the
/// backlog, which only a full sync (a fork) or being a replica creates.
static READ: AtomicBool = AtomicBool::new(true);
/// When [`recheck`] last read the server's state (unix ms).
static CHECKED_MS: AtomicI64 = AtomicI64::new(0);
/// The context of the client command that runs now, if any: only its own
/// effects may be left unbuilt (see [`unread`]).
static COMMAND: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(null_mut());
/// Effects not built because nothing would have read them (`INFO lock`).
static UNBUILT: AtomicU64 = AtomicU64::new(0);

/// Run the client command `body` with `ctx` as the command context: its
/// effects are left unbuilt while nothing reads propagation.
#[inline(always)]
pub fn in_command<R>(ctx: &Context, body: impl FnOnce() -> R) -> R {
    let outer = COMMAND.swap(ctx.get_raw(), Ordering::Relaxed);
    let result = body();
    COMMAND.store(outer, Ordering::Relaxed);
    result
}

/// Something may read propagation from now on (see [`READ`]).
pub fn may_be_read() {
    READ.store(true, Ordering::Relaxed);
}

/// Read the server's state again if the last check is a second old: called
/// from the server's cron.
pub fn recheck(ctx: &Context) {
    let now_ms = server::now_ms();
    if now_ms - CHECKED_MS.load(Ordering::Relaxed) < 1_000 {
        return;
    }
    CHECKED_MS.store(now_ms, Ordering::Relaxed);
    READ.store(server::propagation_is_read(ctx), Ordering::Relaxed);
}

/// Whether anything read propagation at the last check (or may since).
pub fn is_read() -> bool {
    READ.load(Ordering::Relaxed)
}

/// How many effects were left unbuilt.
pub fn unbuilt() -> u64 {
    UNBUILT.load(Ordering::Relaxed)
}

/// Whether the effect `ctx` would send now has no reader, so that building
/// it (a command lookup and an argument vector, about a third of an
/// ACQUIRE's instructions) can be skipped. Only in the client command's own
/// context: a timer or an event handler has no command to stand in for the
/// effect in [`count_only`].
fn unread(ctx: &Context) -> bool {
    !READ.load(Ordering::Relaxed) && COMMAND.load(Ordering::Relaxed) == ctx.get_raw()
}

/// An effect nothing reads still counts as a change for the `save` points
/// (`rdb_changes_since_last_save`): `RedisModule_ReplicateVerbatim` counts
/// it, and, with no AOF and no replica, propagates nothing (the server
/// checks for readers before it copies anything).
fn count_only(ctx: &Context) {
    UNBUILT.fetch_add(1, Ordering::Relaxed);
    unsafe {
        if let Some(count) = raw::RedisModule_ReplicateVerbatim {
            count(ctx.get_raw());
        }
    }
}

/// A hold's whole state, as it is replicated.
pub struct HoldState<'a> {
    pub token: &'a [u8],
    /// Permits held (1 for a lock or a reader).
    pub count: u32,
    pub fence: u64,
    pub deadline_ms: i64,
    pub granted_ms: i64,
    pub extends: u32,
    pub owner: Option<&'a [u8]>,
    /// The number of the lease group it is attached to.
    pub lease: Option<u64>,
}

/// A hold on a key of `kind`, with every value explicit and packed into one
/// argument (`redis_lock_core::effect`): `LOCK.SETSTATE key token state` for
/// a lock, `LOCK.SETHOLDER key token state` (its limit and count in front)
/// for one of several holders. The server copies and formats each argument
/// for every reader, so three fewer arguments is what each grant saves while
/// anything reads.
pub fn hold(ctx: &Context, key: &RedisString, kind: Kind, hold: &HoldState) {
    if unread(ctx) {
        return count_only(ctx);
    }
    let permits = kind.limit().map(|limit| Permits {
        limit,
        count: hold.count,
    });
    let state = effect::pack(
        permits,
        &State {
            fence: hold.fence,
            deadline_ms: hold.deadline_ms,
            granted_ms: hold.granted_ms,
            extends: hold.extends,
            owner: hold.owner,
            lease: hold.lease,
        },
    );
    let command = match permits {
        None => c"LOCK.SETSTATE",
        Some(_) => c"LOCK.SETHOLDER",
    };
    send_packed(ctx, command, key, hold.token, state.bytes());
}

/// `command key token state`.
fn send_packed(ctx: &Context, command: &CStr, key: &RedisString, token: &[u8], state: &[u8]) {
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                command.as_ptr(),
                c"sbb".as_ptr(),
                key.inner,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                state.as_ptr().cast::<c_char>(),
                state.len(),
            );
        }
    }
}

/// `DEL key`.
pub fn del(ctx: &Context, key: &RedisString) {
    if unread(ctx) {
        return count_only(ctx);
    }
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(ctx.get_raw(), c"DEL".as_ptr(), c"s".as_ptr(), key.inner);
        }
    }
}

/// `PEXPIREAT key at-ms`: a key's TTL put back by the module (a key with
/// several holders follows its latest one).
pub fn expire_at(ctx: &Context, key: &RedisString, at_ms: i64) {
    if unread(ctx) {
        return count_only(ctx);
    }
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                c"PEXPIREAT".as_ptr(),
                c"sl".as_ptr(),
                key.inner,
                at_ms as std::os::raw::c_longlong,
            );
        }
    }
}

/// `LOCK.LEASESET id number ttl-ms deadline-ms [OWNER label]`: a lease
/// group's whole state (granted, or kept alive), its deadline absolute.
pub fn lease_set(
    ctx: &Context,
    id: &[u8],
    number: u64,
    ttl_ms: i64,
    deadline_ms: i64,
    owner: Option<&[u8]>,
) {
    if unread(ctx) {
        return count_only(ctx);
    }
    let (id_ptr, id_len) = (id.as_ptr().cast::<c_char>(), id.len());
    let (number, ttl, deadline) = (
        number as std::os::raw::c_longlong,
        ttl_ms as std::os::raw::c_longlong,
        deadline_ms as std::os::raw::c_longlong,
    );
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            let command = c"LOCK.LEASESET".as_ptr();
            match owner {
                None => replicate(
                    ctx.get_raw(),
                    command,
                    c"blll".as_ptr(),
                    id_ptr,
                    id_len,
                    number,
                    ttl,
                    deadline,
                ),
                Some(owner) => replicate(
                    ctx.get_raw(),
                    command,
                    c"blllcb".as_ptr(),
                    id_ptr,
                    id_len,
                    number,
                    ttl,
                    deadline,
                    c"OWNER".as_ptr(),
                    owner.as_ptr().cast::<c_char>(),
                    owner.len(),
                ),
            };
        }
    }
}

/// `LOCK.LEASEDEL id`: a lease group is gone (expired or revoked; its holds
/// went by their own effects before this).
pub fn lease_del(ctx: &Context, id: &[u8]) {
    if unread(ctx) {
        return count_only(ctx);
    }
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                c"LOCK.LEASEDEL".as_ptr(),
                c"b".as_ptr(),
                id.as_ptr().cast::<c_char>(),
                id.len(),
            );
        }
    }
}

/// The command as it came (an effect received from the master or read from
/// the AOF), to this node's AOF and its own replicas.
pub fn verbatim(ctx: &Context) {
    ctx.replicate_verbatim();
}

/// A module keyspace event (`notify-keyspace-events` flag `d`).
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    unsafe {
        // Most servers have keyspace events off: then skip Redis' own walk
        // over every module's keyspace subscriptions.
        let enabled = raw::RedisModule_GetNotifyKeyspaceEvents.map_or(-1, |f| f());
        if enabled & raw::REDISMODULE_NOTIFY_MODULE == 0 {
            return;
        }
        if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
            notify(
                ctx.get_raw(),
                raw::REDISMODULE_NOTIFY_MODULE,
                event.as_ptr(),
                key.inner,
            );
        }
    }
}

/// Wake `WATCH`: the module turns off Redis' implicit signal on every key
/// opened for writing, so only real changes abort a watcher's transaction.
pub fn touched(ctx: &Context, key: &RedisString) {
    unsafe {
        if let Some(signal) = raw::RedisModule_SignalModifiedKey {
            signal(ctx.get_raw(), key.inner);
        }
    }
}

/// `LOCK.DELHOLDER key token`: one holder is gone (released or expired);
/// the key's other holders stay.
pub fn del_holder(ctx: &Context, key: &RedisString, token: &[u8]) {
    if unread(ctx) {
        return count_only(ctx);
    }
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                c"LOCK.DELHOLDER".as_ptr(),
                c"sb".as_ptr(),
                key.inner,
                token.as_ptr().cast::<c_char>(),
                token.len(),
            );
        }
    }
}
