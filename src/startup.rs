//! What happens once, when Redis loads the module.

use redis_module::{logging, Context, ModuleOptions, RedisString, Status};

/// The oldest server the module runs on: it needs the 7.0 module API
/// (absolute expiry, RESP3 map replies, module configs).
const MIN_SERVER: (i32, i32, i32) = (7, 0, 0);

pub fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    match ctx.get_redis_version() {
        Ok(v) if (v.major, v.minor, v.patch) >= MIN_SERVER => {}
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

    // A panic is a bug. Commands catch it (see `commands::run`) so it never
    // unwinds into Redis; this hook makes sure it is in the server log.
    std::panic::set_hook(Box::new(|panic| {
        logging::log_warning(format!("redis-lock: panic: {panic}"));
    }));
    Status::Ok
}
