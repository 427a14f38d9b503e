//! The module's settings, as Redis 7 module configs: `CONFIG GET/SET
//! lock.<name>` reads and changes them at run time, `lock.<name> <value>` in
//! redis.conf (or `--lock.<name>` on the command line) sets them at start,
//! and so do module arguments (`loadmodule … max-ttl-ms 60000`). Names,
//! defaults and bounds are data in the core (`settings.rs`).
//!
//! The values live in atomics that only Redis' main thread writes (through
//! `CONFIG SET`); commands read them once per call.

use std::sync::atomic::{AtomicI64, Ordering};

use redis_lock_core::rules::HoldPolicy;
use redis_lock_core::settings::{self, Setting, ALL};
use redis_module::{Context, RedisString};

use crate::redis;

static MAX_TTL_MS: AtomicI64 = AtomicI64::new(settings::MAX_TTL.default);
static MAX_HOLD_MS: AtomicI64 = AtomicI64::new(settings::MAX_HOLD.default);
static MAX_EXTENDS: AtomicI64 = AtomicI64::new(settings::MAX_EXTENDS.default);
static EXPIRY_DELAY_MS: AtomicI64 = AtomicI64::new(settings::EXPIRY_DELAY.default);
static MAX_WAITERS: AtomicI64 = AtomicI64::new(settings::MAX_WAITERS.default);
static MAX_HOLDERS: AtomicI64 = AtomicI64::new(settings::MAX_HOLDERS.default);
static MAX_KEYS: AtomicI64 = AtomicI64::new(settings::MAX_KEYS.default);

/// Each setting with the atomic that holds it, in the order of [`ALL`].
const VALUES: [(Setting, &AtomicI64); 7] = [
    (settings::MAX_TTL, &MAX_TTL_MS),
    (settings::MAX_HOLD, &MAX_HOLD_MS),
    (settings::MAX_EXTENDS, &MAX_EXTENDS),
    (settings::EXPIRY_DELAY, &EXPIRY_DELAY_MS),
    (settings::MAX_WAITERS, &MAX_WAITERS),
    (settings::MAX_HOLDERS, &MAX_HOLDERS),
    (settings::MAX_KEYS, &MAX_KEYS),
];

/// Register every setting with Redis, starting from the module arguments,
/// then let Redis apply what redis.conf or the command line set. An unknown
/// or bad module argument fails the load, with the reason.
pub fn register(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    let starting = settings::starting_values(&args)?;
    let mut table = Vec::with_capacity(ALL.len());
    for ((setting, variable), start) in VALUES.into_iter().zip(starting) {
        table.push((setting, variable, start));
    }
    redis::settings::register(ctx, &table)
}

pub fn max_ttl_ms() -> i64 {
    MAX_TTL_MS.load(Ordering::Relaxed)
}

pub fn hold_policy() -> HoldPolicy {
    HoldPolicy {
        max_hold_ms: MAX_HOLD_MS.load(Ordering::Relaxed),
        max_extends: u32::try_from(MAX_EXTENDS.load(Ordering::Relaxed)).unwrap_or(u32::MAX),
    }
}

pub fn expiry_delay_ms() -> i64 {
    EXPIRY_DELAY_MS.load(Ordering::Relaxed)
}

/// Holders of one shared lock or semaphore at once.
pub fn max_holders() -> usize {
    usize::try_from(MAX_HOLDERS.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

/// Keys of one multi-key request (`lock.max-keys`).
pub fn max_keys() -> usize {
    usize::try_from(MAX_KEYS.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

/// 0: no limit.
pub fn max_waiters() -> usize {
    usize::try_from(MAX_WAITERS.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_starts_at_its_default() {
        assert_eq!(max_ttl_ms(), settings::MAX_TTL.default);
        // VALUES lists every setting, in the order of ALL.
        assert_eq!(VALUES.map(|(setting, _)| setting), ALL);
        assert_eq!(hold_policy(), HoldPolicy::default());
        assert_eq!((expiry_delay_ms(), max_waiters()), (0, 0));
    }
}
