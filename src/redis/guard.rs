//! The one panic guard. A Rust panic that unwinds into Redis aborts the
//! server (redismodule-rs #439), so every `extern "C"` callback and every
//! command runs its body through [`guarded`]; the hook installed at load
//! ([`install_panic_hook`]) has written the panic to the server log by then.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::server;

/// Run `f`, stopping a panic (a bug) here: `None` if it panicked.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

/// Log every panic through Redis' log (as a warning) before it is caught.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|panic| {
        server::log_warning(&format!("redis-lock: panic: {panic}"))
    }));
}
