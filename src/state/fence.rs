//! The fence high-water mark: the one piece of module-wide state.
//!
//! It is the largest fence this server has issued or seen. It outlives every
//! key, so a released, expired, deleted or flushed lock does not take the fence
//! history with it. Who may touch it:
//! - a grant on the master raises it to the fence it issues ([`issue`]);
//! - a replicated or AOF-replayed grant (`LOCK.SETSTATE`), a `RESTORE`d lock
//!   (also `MIGRATE`), and the RDB aux field (full loads, replica sync) all raise
//!   it to what they carry ([`observe`]); nothing ever lowers it;
//! - the RDB aux field saves it ([`high_water`]).
//!
//! Commands, RDB callbacks and aux callbacks all run on Redis' main thread,
//! under the GIL; the atomic only makes that sharing safe to express.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_lock_core::rules;

use crate::redis::server;

static HIGH_WATER: AtomicU64 = AtomicU64::new(0);

pub fn high_water() -> u64 {
    HIGH_WATER.load(Ordering::Relaxed)
}

/// Raise the high-water mark to `fence` if it is larger.
pub fn observe(fence: u64) {
    HIGH_WATER.fetch_max(fence, Ordering::Relaxed);
}

/// Take the next fence for a grant, or `None` when fences are exhausted.
pub fn issue() -> Option<u64> {
    let fence = rules::next_fence(high_water(), server::wall_clock_us())?;
    HIGH_WATER.store(fence, Ordering::Relaxed);
    Some(fence)
}
