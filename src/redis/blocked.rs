//! Blocked clients: a client blocked with [`block`] is unblocked exactly
//! once, by [`unblock`] with an outcome (then Redis calls
//! [`Waits::reply`]), or by [`unblock_without_reply`] after its connection
//! closed. The layer above says what an outcome is and what a disconnect
//! means by implementing [`Waits`].
//!
//! Redis is not asked to time a client out: Redis 7.0 would then drop the
//! reply of a client unblocked in the same instant (its timeout path skips
//! the module's callback but still tears the client down), so the module
//! times its waits itself.

use std::ffi::c_void;
use std::os::raw::{c_int, c_longlong};

use redis_module::{raw, Context};

use super::guard::guarded;

/// A blocked client, by the address Redis gave it: unique while it is
/// blocked.
pub type BlockedId = u64;

pub trait Waits: 'static {
    /// What a client is unblocked with.
    type Outcome: 'static;
    /// Reply to the client with its outcome.
    fn reply(ctx: &Context, outcome: &Self::Outcome);
    /// The client's connection closed while it was blocked; `outcome` is
    /// what it had been unblocked with, if it already was.
    fn disconnected(ctx: &Context, client: BlockedId, outcome: Option<&Self::Outcome>);
}

/// Block the calling client; `None` if Redis refused.
pub fn block<W: Waits>(ctx: &Context) -> Option<BlockedId> {
    let blocked = unsafe {
        raw::RedisModule_BlockClient?(
            ctx.get_raw(),
            Some(on_reply::<W>),
            None,
            Some(free_outcome::<W>),
            0 as c_longlong,
        )
    };
    if blocked.is_null() {
        return None;
    }
    unsafe {
        if let Some(set) = raw::RedisModule_SetDisconnectCallback {
            set(blocked, Some(on_disconnect::<W>));
        }
    }
    Some(blocked as BlockedId)
}

/// Unblock `client` with `outcome`: Redis replies through [`Waits::reply`].
pub fn unblock<W: Waits>(client: BlockedId, outcome: W::Outcome) {
    let data = Box::into_raw(Box::new(outcome)).cast::<c_void>();
    unsafe {
        match raw::RedisModule_UnblockClient {
            Some(unblock) => {
                unblock(client as *mut raw::RedisModuleBlockedClient, data);
            }
            None => drop(Box::from_raw(data.cast::<W::Outcome>())),
        }
    }
}

/// Unblock a client whose connection is gone: nothing to reply.
pub fn unblock_without_reply(client: BlockedId) {
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock(
                client as *mut raw::RedisModuleBlockedClient,
                std::ptr::null_mut(),
            );
        }
    }
}

fn outcome_of<'a, W: Waits>(ctx: &Context) -> Option<&'a W::Outcome> {
    unsafe {
        let data = raw::RedisModule_GetBlockedClientPrivateData
            .map_or(std::ptr::null_mut(), |f| f(ctx.get_raw()));
        data.cast::<W::Outcome>().as_ref()
    }
}

unsafe extern "C" fn on_reply<W: Waits>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Context::new(ctx);
    guarded(|| {
        if let Some(outcome) = outcome_of::<W>(&ctx) {
            W::reply(&ctx, outcome);
        }
    });
    raw::Status::Ok as c_int
}

unsafe extern "C" fn on_disconnect<W: Waits>(
    ctx: *mut raw::RedisModuleCtx,
    blocked: *mut raw::RedisModuleBlockedClient,
) {
    let ctx = Context::new(ctx);
    guarded(|| W::disconnected(&ctx, blocked as BlockedId, outcome_of::<W>(&ctx)));
}

unsafe extern "C" fn free_outcome<W: Waits>(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        drop(Box::from_raw(data.cast::<W::Outcome>()));
    }
}
