//! What happens once, when Redis loads the module.

use redis_module::{Context, ModuleOptions, RedisString, Status};

use crate::redis::{datatype, events, guard, info, server};
use crate::{config, events as handlers};

/// The oldest server the module runs on: it needs the 7.0 module API
/// (absolute expiry, RESP3 map replies, module configs).
const MIN_SERVER: (i32, i32, i32) = (7, 0, 0);

pub fn init(ctx: &Context, args: &[RedisString]) -> Status {
    match server::version(ctx) {
        Ok(v) if is_supported(v) => {}
        Ok(v) => {
            server::log_warning(&format!(
                "redis-lock needs Redis {}.{}.{} or newer; this server is {}.{}.{}: not loading",
                MIN_SERVER.0, MIN_SERVER.1, MIN_SERVER.2, v.0, v.1, v.2
            ));
            return Status::Err;
        }
        Err(e) => {
            server::log_warning(&format!(
                "redis-lock could not read the server version ({e}): not loading"
            ));
            return Status::Err;
        }
    }

    if let Err(reason) = config::register(ctx, args) {
        server::log_warning(&format!("redis-lock: {reason}: not loading"));
        return Status::Err;
    }

    datatype::set_hooks(handlers::TYPE_HOOKS);
    info::register(ctx, handlers::info_fields);

    // A corrupt RESTORE payload must become an error reply, not a crash; and
    // only real changes should wake WATCH (see `redis/replicate.rs`).
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );

    server::set_replica(server::read_role(ctx));

    // Flushes and swaps change keys that clients wait for, a demotion ends
    // every wait, a closed connection releases its SESSION locks, and a new
    // eviction policy is checked.
    events::subscribe(ctx, handlers::on_server_event);
    // Eviction can drop a live lock: say so now and whenever the policy changes.
    handlers::check_eviction_policy(ctx);

    // A panic is a bug. Every entry point catches it (`redis/guard.rs`) so it
    // never unwinds into Redis; this hook makes sure it is in the server log.
    guard::install_panic_hook();
    Status::Ok
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
