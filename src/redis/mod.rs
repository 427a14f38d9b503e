//! The Redis layer: every call into the server's module API is made here,
//! and nothing here decides anything about locks. Above it, the module's
//! state and flows (`holds.rs`, `wait_queue/`, …) and the commands say what
//! to do; below it, only the core crate (for the `Lock` value and the error
//! codes).
//!
//! Callbacks that Redis makes into the module (timers, blocked clients,
//! server events, the data type) arrive here first, inside the one
//! [`guard::guarded`] panic guard, and are passed up as Rust values to a
//! function the layer above registered: the layer never imports upward.

pub mod acl;
pub mod blocked;
pub mod call;
pub mod client;
pub mod command;
pub mod datatype;
pub mod events;
pub mod guard;
pub mod info;
pub mod kept_reply;
pub mod key;
pub mod migration;
pub mod replicate;
pub mod reply;
pub mod server;
pub mod settings;
pub mod timer;

use redis_lock_core::args::ArgBytes;
use redis_module::{Context, RedisString};

/// A Redis string with exactly these bytes: binary-safe, for key names and
/// any other client bytes (NUL, `\r\n`, high bytes). `Context::create_string`
/// goes through a C string and panics on a NUL byte; `clippy.toml` forbids it.
pub fn string(ctx: &Context, bytes: &[u8]) -> RedisString {
    RedisString::create_from_slice(ctx.get_raw(), bytes)
}

/// A command argument, for the core's parsers.
#[repr(transparent)]
pub struct Arg(RedisString);

impl ArgBytes for Arg {
    fn bytes(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// The command's arguments as [`Arg`]s, without copying them.
pub fn args(args: &[RedisString]) -> &[Arg] {
    // SAFETY: `Arg` is a `repr(transparent)` wrapper of `RedisString`, so a
    // slice of one is laid out as a slice of the other.
    unsafe { std::slice::from_raw_parts(args.as_ptr().cast::<Arg>(), args.len()) }
}
