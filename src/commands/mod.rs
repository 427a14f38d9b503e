//! One file per command. Each does four things, in order: parse (everything
//! that can be refused is refused before the keyspace is touched), decide (by
//! calling [`crate::rules`]), apply, then replicate the effect and reply.

pub mod acquire;
pub mod extend;
pub mod info;
pub mod release;
pub mod setstate;

use std::panic::{catch_unwind, AssertUnwindSafe};

use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

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

/// Whether this server is a replica now: set at load and by the role-change
/// server event, so the write commands pay nothing to check it on a master.
static IS_REPLICA: AtomicBool = AtomicBool::new(false);

pub fn set_replica(is_replica: bool) {
    IS_REPLICA.store(is_replica, Ordering::Relaxed);
}

/// Lock writes on a replica come only from its master. Redis already refuses
/// them on a read-only replica; this also covers `replica-read-only no`, where
/// a local grant or release would diverge from the master.
pub fn refuse_local_write_on_replica(ctx: &Context) -> Result<(), LockError> {
    if IS_REPLICA.load(Ordering::Relaxed)
        && !ctx
            .get_flags()
            .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
    {
        return Err(LockError::ReadOnlyReplica);
    }
    Ok(())
}
