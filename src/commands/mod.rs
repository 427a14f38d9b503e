//! One file per command. Each does four things, in order: parse (everything
//! that can be refused is refused before the keyspace is touched), decide (by
//! calling the core's `decide`), apply (through `lease.rs` and
//! `waiting.rs`), then reply.

pub mod acquire;
pub mod extend;
pub mod guard;
pub mod holders;
pub mod info;
pub mod observe;
pub mod queue;
pub mod release;
pub mod sem_acquire;
pub mod setstate;

use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use crate::redis::guard::guarded;
use crate::redis::{replicate, reply, server};

/// Which family of commands a shared body serves: `LOCK.*` (exclusive and
/// shared locks) or `SEM.*` (semaphores); each refuses the other's keys with
/// `WRONGTYPE`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Lock,
    Semaphore,
}

/// A command body: it replies itself on success; an `Err` is replied here.
pub type Command = fn(&Context, &[RedisString]) -> Result<(), LockError>;

/// Run a command so that nothing escapes into Redis: its error becomes the
/// reply, and a panic (a bug) becomes `ERR internal error` instead of
/// aborting the server (the panic hook has already logged it).
pub fn run(ctx: &Context, args: &[RedisString], command: Command) {
    // Its effects may be left unbuilt while nothing reads them (`replicate.rs`).
    match replicate::in_command(ctx, || guarded(|| command(ctx, args))) {
        Some(Ok(())) => {}
        Some(Err(error)) => reply::error(ctx, error),
        None => reply::error(ctx, LockError::Internal),
    }
}

/// Lock writes on a replica come only from its master. Redis already refuses
/// them on a read-only replica; this also covers `replica-read-only no`, where
/// a local grant or release would diverge from the master.
fn refuse_local_write_on_replica(ctx: &Context) -> Result<(), LockError> {
    if server::is_replica() && !server::is_replicated_or_loading(ctx) {
        return Err(LockError::ReadOnlyReplica);
    }
    Ok(())
}
