//! Server events, subscribed to in one place and passed up as one Rust
//! enum to the one handler the layer above registers.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use redis_module::{raw, Context};

use super::guard::guarded;
use super::replicate;

/// A server event the module acts on.
#[derive(Debug)]
pub enum ServerEvent<'a> {
    /// `FLUSHDB` (`Some(db)`) or `FLUSHALL` (`None`) finished.
    Flushed { db: Option<i32> },
    /// `SWAPDB a b` swapped two databases' contents.
    Swapped { a: i32, b: i32 },
    /// This node became a replica (`true`) or a master (`false`).
    RoleChanged { now_replica: bool },
    /// A client's connection closed.
    ClientClosed { client: u64 },
    /// `CONFIG SET` changed these settings.
    ConfigChanged { names: Vec<&'a CStr> },
    /// The server's cron ran (`hz` times a second).
    Cron,
    /// The event loop is about to sleep (once per turn): what the turn's
    /// reads brought (a replica's acknowledgement) can be answered now,
    /// before the replies are written.
    BeforeSleep,
}

pub type Handler = fn(&Context, ServerEvent);

static HANDLER: OnceLock<Handler> = OnceLock::new();

/// Subscribe to every event [`ServerEvent`] names, all passed to `handler`.
pub fn subscribe(ctx: &Context, handler: Handler) {
    let _ = HANDLER.set(handler);
    for id in [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_CLIENT_CHANGE,
        raw::REDISMODULE_EVENT_CONFIG,
        // For `replicate.rs` only: whether anything reads propagation.
        raw::REDISMODULE_EVENT_FORK_CHILD,
        raw::REDISMODULE_EVENT_CRON_LOOP,
        raw::REDISMODULE_EVENT_EVENTLOOP,
    ] {
        unsafe {
            if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
                subscribe(
                    ctx.get_raw(),
                    raw::RedisModuleEvent { id, dataver: 1 },
                    Some(on_event),
                );
            }
        }
    }
}

unsafe extern "C" fn on_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let Some(handler) = HANDLER.get() else {
        return;
    };
    let ctx = Context::new(ctx);
    guarded(|| {
        // A fork (a replica's sync, an AOF rewrite), a new role or a new
        // setting (`appendonly`) may bring a reader of propagation, before
        // the next command runs; the cron tells when none is left.
        match event.id {
            raw::REDISMODULE_EVENT_FORK_CHILD
            | raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED
            | raw::REDISMODULE_EVENT_CONFIG => replicate::may_be_read(),
            raw::REDISMODULE_EVENT_CRON_LOOP => replicate::recheck(&ctx),
            _ => {}
        }
        if let Some(event) = decode(event.id, subevent, data) {
            handler(&ctx, event);
        }
    });
}

/// The event as a Rust value; `None` for a sub-event the module ignores.
fn decode<'a>(id: u64, subevent: u64, data: *mut c_void) -> Option<ServerEvent<'a>> {
    match id {
        raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
            let info = unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref()? };
            Some(ServerEvent::Flushed {
                db: (info.dbnum >= 0).then_some(info.dbnum),
            })
        }
        raw::REDISMODULE_EVENT_SWAPDB => {
            let info = unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref()? };
            Some(ServerEvent::Swapped {
                a: info.dbnum_first,
                b: info.dbnum_second,
            })
        }
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => Some(ServerEvent::RoleChanged {
            now_replica: subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA,
        }),
        raw::REDISMODULE_EVENT_CLIENT_CHANGE
            if subevent == raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED =>
        {
            let info = unsafe { data.cast::<raw::RedisModuleClientInfo>().as_ref()? };
            Some(ServerEvent::ClientClosed { client: info.id })
        }
        raw::REDISMODULE_EVENT_CONFIG if subevent == raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE => {
            let change = unsafe { data.cast::<raw::RedisModuleConfigChange>().as_ref()? };
            let names = (0..change.num_changes as usize)
                .filter_map(|i| unsafe { change.config_names.add(i).as_ref() })
                .filter(|name| !name.is_null())
                .map(|name| unsafe { CStr::from_ptr(*name) })
                .collect();
            Some(ServerEvent::ConfigChanged { names })
        }
        raw::REDISMODULE_EVENT_CRON_LOOP => Some(ServerEvent::Cron),
        raw::REDISMODULE_EVENT_EVENTLOOP
            if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP =>
        {
            Some(ServerEvent::BeforeSleep)
        }
        _ => None,
    }
}
