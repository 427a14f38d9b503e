//! Registering the module's settings as Redis 7 module configs, so `CONFIG
//! GET/SET lock.<name>` reads and changes them, and then letting Redis apply
//! what redis.conf or the command line set. Redis checks each value against
//! the bounds given here and keeps the old value when a new one is refused.

use std::sync::atomic::AtomicI64;

use redis_lock_core::settings::Setting;
use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
use redis_module::{raw, Context};

/// Register each setting with the atomic that holds it and its starting
/// value, then load the server's configuration into them.
pub fn register(
    ctx: &Context,
    settings: &[(Setting, &'static AtomicI64, i64)],
) -> Result<(), String> {
    for (setting, variable, start) in settings {
        register_i64_configuration(
            ctx,
            setting.name,
            *variable,
            *start,
            setting.min,
            setting.max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    let loaded = unsafe {
        raw::RedisModule_LoadConfigs.map_or(raw::Status::Ok as i32, |load| load(ctx.get_raw()))
    };
    if loaded == raw::Status::Ok as i32 {
        Ok(())
    } else {
        Err("a lock.* setting in the server's configuration was refused".into())
    }
}
