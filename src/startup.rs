//! What happens once, when Redis loads the module.

use std::ffi::CString;

use redis_module::{raw, Context, ContextFlags, ModuleOptions, RedisString, Status};

/// The oldest server the module runs on: it needs the 7.0 module API
/// (absolute expiry, RESP3 map replies, module configs).
const MIN_SERVER: (i32, i32, i32) = (7, 0, 0);

pub fn init(ctx: &Context, _args: &[RedisString]) -> Status {
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

    // A corrupt RESTORE payload must become an error reply, not a crash; and
    // only real changes should wake WATCH (see `effects`).
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );

    crate::commands::set_replica(ctx.get_flags().contains(ContextFlags::SLAVE));

    // Flushes free keys that clients wait for; a demotion ends every wait.
    crate::waiting::subscribe_server_events(ctx);

    // A panic is a bug. Commands catch it (see `commands::run`) so it never
    // unwinds into Redis; this hook makes sure it is in the server log.
    std::panic::set_hook(Box::new(|panic| {
        log_warning(&format!("redis-lock: panic: {panic}"))
    }));
    Status::Ok
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
