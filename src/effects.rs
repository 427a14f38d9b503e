//! What a state change sends to replicas and the AOF, and to `WATCH`ers.
//!
//! Every change goes out as its effect, with explicit values: the token, the
//! fence and the absolute deadline. A replica or an AOF replay never draws a
//! token or reads its clock to decide state, so it always ends up with the
//! master's state.

use std::os::raw::c_char;

use redis_module::{raw, Context, RedisString};

/// A new holder: `LOCK.SETSTATE key token fence deadline-ms`.
///
/// Numbers go out as text formatted here (`b` buffers): Redis' own `l`
/// conversion costs more per call, and this runs on every grant.
pub fn granted(ctx: &Context, key: &RedisString, token: &[u8], fence: u64, deadline_ms: i64) {
    touched(ctx, key);
    let mut fence_text = itoa::Buffer::new();
    let fence_text = fence_text.format(fence);
    let mut deadline_text = itoa::Buffer::new();
    let deadline_text = deadline_text.format(deadline_ms);
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                c"LOCK.SETSTATE".as_ptr(),
                c"sbbb".as_ptr(),
                key.inner,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                fence_text.as_ptr().cast::<c_char>(),
                fence_text.len(),
                deadline_text.as_ptr().cast::<c_char>(),
                deadline_text.len(),
            );
        }
    }
}

/// The same holder, a new deadline: `PEXPIREAT key deadline-ms`.
pub fn deadline_moved(ctx: &Context, key: &RedisString, deadline_ms: i64) {
    touched(ctx, key);
    let mut deadline_text = itoa::Buffer::new();
    let deadline_text = deadline_text.format(deadline_ms);
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx.get_raw(),
                c"PEXPIREAT".as_ptr(),
                c"sb".as_ptr(),
                key.inner,
                deadline_text.as_ptr().cast::<c_char>(),
                deadline_text.len(),
            );
        }
    }
}

/// The lock is gone: `DEL key`.
pub fn released(ctx: &Context, key: &RedisString) {
    touched(ctx, key);
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

/// Wake `WATCH`: the module turns off Redis' implicit signal on every key
/// opened for writing, so only real changes abort a watcher's transaction.
fn touched(ctx: &Context, key: &RedisString) {
    unsafe {
        if let Some(signal) = raw::RedisModule_SignalModifiedKey {
            signal(ctx.get_raw(), key.inner);
        }
    }
}
