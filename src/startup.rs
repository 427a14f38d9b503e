//! What happens once, when Redis loads the module.

use std::ffi::{c_void, CStr, CString};

use redis_module::{raw, Context, ContextFlags, ModuleOptions, RedisString, RedisValue, Status};

/// The oldest server the module runs on: it needs the 7.0 module API
/// (absolute expiry, RESP3 map replies, module configs).
const MIN_SERVER: (i32, i32, i32) = (7, 0, 0);

pub fn init(ctx: &Context, args: &[RedisString]) -> Status {
    match ctx.get_redis_version() {
        Ok(v) if is_supported((v.major, v.minor, v.patch)) => {}
        Ok(v) => {
            ctx.log_warning(&format!(
                "redis-lock needs Redis {}.{}.{} or newer; this server is {}.{}.{}: not loading",
                MIN_SERVER.0, MIN_SERVER.1, MIN_SERVER.2, v.major, v.minor, v.patch
            ));
            return Status::Err;
        }
        Err(e) => {
            ctx.log_warning(&format!(
                "redis-lock could not read the server version ({e}): not loading"
            ));
            return Status::Err;
        }
    }

    if let Err(reason) = crate::config::register(ctx, args) {
        ctx.log_warning(&format!("redis-lock: {reason}: not loading"));
        return Status::Err;
    }

    crate::metrics::register_info(ctx);

    // A corrupt RESTORE payload must become an error reply, not a crash; and
    // only real changes should wake WATCH (see `effects`).
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );

    crate::commands::set_replica(ctx.get_flags().contains(ContextFlags::SLAVE));

    // Flushes free keys that clients wait for; a demotion ends every wait.
    crate::waiting::subscribe_server_events(ctx);
    // A closed connection releases its SESSION locks.
    crate::session::subscribe_server_events(ctx);
    // Eviction can drop a live lock: say so now and whenever the policy changes.
    check_eviction_policy(ctx);
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(
                ctx.get_raw(),
                raw::RedisModuleEvent {
                    id: raw::REDISMODULE_EVENT_CONFIG,
                    dataver: 1,
                },
                Some(on_config_change),
            );
        }
    }

    // A panic is a bug. Commands catch it (see `commands::run`) so it never
    // unwinds into Redis; this hook makes sure it is in the server log.
    std::panic::set_hook(Box::new(|panic| {
        log_warning(&format!("redis-lock: panic: {panic}"))
    }));
    Status::Ok
}

/// Warn, and flag it in `INFO lock`, when `maxmemory-policy` can evict lock
/// keys: an evicted lock is free at once, before its lease ran out, so two
/// clients can hold it. The module still grants (refusing would turn memory
/// pressure into a lock outage the operator did not ask for); the operator
/// is told, in the log and in `lock_eviction_risk`.
fn check_eviction_policy(ctx: &Context) {
    let policy = match ctx.call("CONFIG", &["GET", "maxmemory-policy"]) {
        Ok(RedisValue::Array(values)) => match values.get(1) {
            Some(RedisValue::SimpleString(s)) | Some(RedisValue::BulkString(s)) => s.clone(),
            Some(RedisValue::BulkRedisString(s)) => s.to_string_lossy(),
            _ => return,
        },
        _ => return,
    };
    let at_risk = crate::config::policy_evicts_locks(&policy);
    crate::metrics::set_eviction_risk(at_risk);
    if at_risk {
        log_warning(&format!(
            "redis-lock: maxmemory-policy is {policy}: under memory pressure Redis may evict \
             lock keys before their lease ends, and then two clients can hold the same lock. \
             Use maxmemory-policy noeviction on a lock server."
        ));
    }
}

unsafe extern "C" fn on_config_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        if subevent != raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE || data.is_null() {
            return;
        }
        let change = unsafe { &*data.cast::<raw::RedisModuleConfigChange>() };
        let names = (0..change.num_changes as usize)
            .filter_map(|i| unsafe { change.config_names.add(i).as_ref() })
            .filter(|name| !name.is_null())
            .map(|name| unsafe { CStr::from_ptr(*name) });
        if names
            .into_iter()
            .any(|name| name.to_bytes().eq_ignore_ascii_case(b"maxmemory-policy"))
        {
            check_eviction_policy(&Context::new(ctx));
        }
    });
}

/// Write `message` to the server log as it is: passed as an argument to a
/// `%s` format (never as the format itself, so a `%` in a key name cannot
/// crash the server), with any NUL byte replaced.
fn log_warning(message: &str) {
    let Ok(text) = CString::new(message.replace('\0', "\\0")) else {
        return;
    };
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(
                std::ptr::null_mut(),
                c"warning".as_ptr(),
                c"%s".as_ptr(),
                text.as_ptr(),
            );
        }
    }
}

/// Whether a server version (major, minor, patch) can run the module.
fn is_supported(version: (i32, i32, i32)) -> bool {
    version >= MIN_SERVER
}

#[cfg(test)]
mod tests {
    use super::is_supported;

    #[test]
    fn refuses_servers_older_than_7_0() {
        assert!(!is_supported((6, 2, 14)));
        assert!(!is_supported((6, 99, 99)));
        assert!(is_supported((7, 0, 0)));
        assert!(is_supported((7, 0, 15)));
        // Valkey 8 reports the Redis-compatible version 7.2.4.
        assert!(is_supported((7, 2, 4)));
        assert!(is_supported((8, 4, 0)));
    }
}
