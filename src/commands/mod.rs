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
use redis_module::Context;

use crate::redis::server;

/// Which family of commands a shared body serves: `LOCK.*` (exclusive and
/// shared locks) or `SEM.*` (semaphores); each refuses the other's keys with
/// `WRONGTYPE`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Lock,
    Semaphore,
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
