//! One file per command. Each does four things, in order: parse (everything
//! that can be refused is refused before the keyspace is touched), decide (by
//! calling [`crate::rules`]), apply, then replicate the effect and reply.

pub mod acquire;
pub mod extend;
pub mod info;
pub mod release;
pub mod setstate;

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use crate::args::ArgBytes;
use crate::errors::LockError;
use crate::reply;

impl ArgBytes for RedisString {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A command body: it replies itself on success; an `Err` is replied here.
pub type Command = fn(&Context, &[RedisString]) -> Result<(), LockError>;

/// Run a command so that nothing escapes into Redis: its error becomes the
/// reply, and a panic (a bug) becomes `ERR internal error` instead of
/// aborting the server (the panic hook has already logged it).
pub fn run(ctx: &Context, args: Vec<RedisString>, command: Command) -> RedisResult {
    match catch_unwind(AssertUnwindSafe(|| command(ctx, &args))) {
        Ok(Ok(())) => {}
        Ok(Err(error)) => reply::error(ctx, error),
        Err(_) => reply::error(ctx, LockError::Internal),
    }
    Ok(RedisValue::NoReply)
}
