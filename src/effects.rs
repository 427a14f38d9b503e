//! What a state change sends to replicas and the AOF, and to `WATCH`ers.
//!
//! Every change goes out as its effect, with explicit values: the token, the
//! fence and the absolute deadline. A replica or an AOF replay never draws a
//! token or reads its clock to decide state, so it always ends up with the
//! master's state.

use std::ffi::CStr;
use std::os::raw::c_char;

use redis_module::{raw, Context, RedisString};

/// A lock's whole state: `LOCK.SETSTATE key token fence deadline-ms
/// granted-ms [extends]`, with `extends` left out when it is 0 (every
/// grant), which saves building one more argument on the hot path.
pub struct LockState<'a> {
    pub token: &'a [u8],
    pub fence: u64,
    pub deadline_ms: i64,
    pub granted_ms: i64,
    pub extends: u32,
}

/// A new holder. Also fires the `lock.acquired` keyspace event.
pub fn granted(ctx: &Context, key: &RedisString, state: &LockState) {
    touched(ctx, key);
    replicate_state(ctx, key, state);
    notify(ctx, c"lock.acquired", key);
}

/// The same holder, a new deadline (EXTEND, or ACQUIRE renewing): the whole
/// state again, since the extension count changed too. Fires `lock.extended`.
pub fn extended(ctx: &Context, key: &RedisString, state: &LockState) {
    touched(ctx, key);
    replicate_state(ctx, key, state);
    notify(ctx, c"lock.extended", key);
}

/// Numbers go out as text formatted here (`b` buffers): Redis' own `l`
/// conversion costs more per call, and this runs on every grant.
fn replicate_state(ctx: &Context, key: &RedisString, state: &LockState) {
    let mut fence = itoa::Buffer::new();
    let fence = fence.format(state.fence);
    let mut deadline = itoa::Buffer::new();
    let deadline = deadline.format(state.deadline_ms);
    let mut granted = itoa::Buffer::new();
    let granted = granted.format(state.granted_ms);
    let mut extends = itoa::Buffer::new();
    let extends = extends.format(state.extends);
    let format = if state.extends == 0 {
        c"sbbbb"
    } else {
        c"sbbbbb"
    };
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            // With the shorter format, Redis does not read the last pair.
            replicate(
                ctx.get_raw(),
                c"LOCK.SETSTATE".as_ptr(),
                format.as_ptr(),
                key.inner,
                state.token.as_ptr().cast::<c_char>(),
                state.token.len(),
                fence.as_ptr().cast::<c_char>(),
                fence.len(),
                deadline.as_ptr().cast::<c_char>(),
                deadline.len(),
                granted.as_ptr().cast::<c_char>(),
                granted.len(),
                extends.as_ptr().cast::<c_char>(),
                extends.len(),
            );
        }
    }
}

/// The lock is gone: `DEL key`. Fires `lock.released`.
pub fn released(ctx: &Context, key: &RedisString) {
    touched(ctx, key);
    notify(ctx, c"lock.released", key);
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(ctx.get_raw(), c"DEL".as_ptr(), c"s".as_ptr(), key.inner);
        }
    }
}

/// An effect received from the master or read from the AOF: pass it on as it
/// came (to this node's AOF and its own replicas).
pub fn applied_verbatim(ctx: &Context, key: &RedisString) {
    touched(ctx, key);
    ctx.replicate_verbatim();
}

/// The lock went to the first waiter (after its `lock.acquired`).
pub fn handed_off(ctx: &Context, key: &RedisString) {
    notify(ctx, c"lock.handoff", key);
}

/// A module keyspace event (`notify-keyspace-events` flag `d`). Only the
/// master's own changes fire them: a replica applies `LOCK.SETSTATE`
/// silently.
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
fn touched(ctx: &Context, key: &RedisString) {
    unsafe {
        if let Some(signal) = raw::RedisModule_SignalModifiedKey {
            signal(ctx.get_raw(), key.inner);
        }
    }
}
