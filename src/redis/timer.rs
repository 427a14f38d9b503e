//! The one timer helper: a typed payload, a Rust function to run it, and the
//! panic guard. Redis owns a timer until it fires or is stopped; the payload
//! is freed exactly once, either way.

use std::ffi::c_void;
use std::os::raw::c_int;

use redis_module::{raw, Context};

use super::guard::guarded;

pub type TimerId = u64;

struct Armed<T> {
    payload: T,
    fire: fn(&Context, T),
}

/// Run `fire(ctx, payload)` on the main thread in `delay_ms` (0: as soon as
/// the event loop comes round). Returns the timer's id, to [`stop`] it.
pub fn start<T: 'static>(
    ctx: &Context,
    delay_ms: i64,
    payload: T,
    fire: fn(&Context, T),
) -> TimerId {
    let data = Box::into_raw(Box::new(Armed { payload, fire })).cast::<c_void>();
    unsafe {
        match raw::RedisModule_CreateTimer {
            Some(create) => create(ctx.get_raw(), delay_ms.max(0), Some(on_timer::<T>), data),
            None => {
                drop(Box::from_raw(data.cast::<Armed<T>>()));
                0
            }
        }
    }
}

/// Stop a timer started with payload type `T` that has not fired yet, and
/// free its payload.
pub fn stop<T: 'static>(ctx: &Context, timer: TimerId) {
    let mut data: *mut c_void = std::ptr::null_mut();
    unsafe {
        if let Some(stop) = raw::RedisModule_StopTimer {
            if stop(ctx.get_raw(), timer, &mut data) == raw::Status::Ok as c_int && !data.is_null()
            {
                drop(Box::from_raw(data.cast::<Armed<T>>()));
            }
        }
    }
}

unsafe extern "C" fn on_timer<T: 'static>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let armed = Box::from_raw(data.cast::<Armed<T>>());
    let ctx = Context::new(ctx);
    guarded(|| (armed.fire)(&ctx, armed.payload));
}
