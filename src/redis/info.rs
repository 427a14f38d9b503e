//! The module's `INFO` section: Redis asks, the layer above says what the
//! fields are (registered once at load).

use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::OnceLock;

use redis_module::{raw, Context};

use super::guard::guarded;

/// The section's fields, in order: name (Redis prefixes the module's name,
/// `lock_grants`) and value.
pub type Fields = fn() -> Vec<(&'static CStr, i64)>;

static FIELDS: OnceLock<Fields> = OnceLock::new();

/// Make `fields` the module's `INFO` section (in place of the crate's
/// default callback, which the module macro registers first).
pub fn register(ctx: &Context, fields: Fields) {
    let _ = FIELDS.set(fields);
    unsafe {
        if let Some(register) = raw::RedisModule_RegisterInfoFunc {
            register(ctx.get_raw(), Some(on_info));
        }
    }
}

unsafe extern "C" fn on_info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    let Some(fields) = FIELDS.get() else {
        return;
    };
    let Some(fields) = guarded(fields) else {
        return;
    };
    let (Some(section), Some(field)) = (
        raw::RedisModule_InfoAddSection,
        raw::RedisModule_InfoAddFieldLongLong,
    ) else {
        return;
    };
    // "": the module's default section, named after it (`INFO lock`).
    section(ctx, c"".as_ptr());
    for (name, value) in fields {
        field(ctx, name.as_ptr(), value);
    }
}
