//! The module's settings: Redis 7 module configs, so `CONFIG GET/SET
//! lock.<name>` reads and changes them at run time, `lock.<name> <value>` in
//! redis.conf (or `--lock.<name>` on the command line) sets them at start,
//! and so do module arguments (`loadmodule … max-ttl-ms 60000`).
//!
//! Redis checks each value against the bounds given at registration and keeps
//! the old value when a new one is refused. The values live in atomics that
//! only Redis' main thread writes; commands read them once per call.

use std::sync::atomic::{AtomicI64, Ordering};

use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
use redis_module::{raw, Context, RedisString};

use crate::args::parse_i64;
use crate::rules::{self, HoldPolicy};

/// (name, default, min, max): the name without the `lock.` prefix.
pub type Setting = (&'static str, i64, i64, i64);

pub const MAX_TTL: Setting = (
    "max-ttl-ms",
    rules::DEFAULT_MAX_TTL_MS,
    1,
    rules::CEILING_MS,
);
pub const MAX_HOLD: Setting = ("max-hold-ms", 0, 0, rules::CEILING_MS);
pub const MAX_EXTENDS: Setting = ("max-extends", 0, 0, u32::MAX as i64);
pub const EXPIRY_DELAY: Setting = ("expiry-delay-ms", 0, 0, rules::CEILING_MS);
pub const MAX_WAITERS: Setting = ("max-waiters", 0, 0, u32::MAX as i64);

pub static MAX_TTL_MS: AtomicI64 = AtomicI64::new(MAX_TTL.1);
pub static MAX_HOLD_MS: AtomicI64 = AtomicI64::new(MAX_HOLD.1);
pub static MAX_EXTENDS_COUNT: AtomicI64 = AtomicI64::new(MAX_EXTENDS.1);
pub static EXPIRY_DELAY_MS: AtomicI64 = AtomicI64::new(EXPIRY_DELAY.1);
pub static MAX_WAITERS_COUNT: AtomicI64 = AtomicI64::new(MAX_WAITERS.1);

/// Every setting with the atomic that holds it.
const ALL: [(Setting, &AtomicI64); 5] = [
    (MAX_TTL, &MAX_TTL_MS),
    (MAX_HOLD, &MAX_HOLD_MS),
    (MAX_EXTENDS, &MAX_EXTENDS_COUNT),
    (EXPIRY_DELAY, &EXPIRY_DELAY_MS),
    (MAX_WAITERS, &MAX_WAITERS_COUNT),
];

/// Register every setting with Redis, starting from the module arguments,
/// then let Redis apply what redis.conf or the command line set. An unknown
/// or bad module argument fails the load, with the reason.
pub fn register(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    let starting = starting_values(&args)?;
    for ((setting, variable), start) in ALL.iter().zip(starting) {
        let (name, _, min, max) = *setting;
        register_i64_configuration(
            ctx,
            name,
            *variable,
            start,
            min,
            max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    let loaded = unsafe {
        raw::RedisModule_LoadConfigs.map_or(raw::Status::Ok as i32, |load| load(ctx.get_raw()))
    };
    if loaded == raw::Status::Ok as i32 {
        Ok(())
    } else {
        Err("a lock.* setting in the server's configuration was refused".into())
    }
}

/// The starting value of each setting in [`ALL`]: its default, or what the
/// module arguments (`name value` pairs) say.
fn starting_values(args: &[&[u8]]) -> Result<[i64; 5], String> {
    let mut values = ALL.map(|((_, default, _, _), _)| default);
    let mut pairs = args.chunks(2);
    for pair in pairs.by_ref() {
        let [name, value] = pair else {
            return Err("module arguments are name value pairs, e.g. max-ttl-ms 60000".into());
        };
        let name = String::from_utf8_lossy(name);
        let name = name.strip_prefix("lock.").unwrap_or(&name);
        let Some(i) = ALL.iter().position(|((n, ..), _)| *n == name) else {
            return Err(format!("unknown module argument '{name}'"));
        };
        let (_, _, min, max) = ALL[i].0;
        match parse_i64(value) {
            Some(v) if (min..=max).contains(&v) => values[i] = v,
            _ => return Err(format!("{name} must be an integer from {min} to {max}")),
        }
    }
    Ok(values)
}

pub fn max_ttl_ms() -> i64 {
    MAX_TTL_MS.load(Ordering::Relaxed)
}

pub fn hold_policy() -> HoldPolicy {
    HoldPolicy {
        max_hold_ms: MAX_HOLD_MS.load(Ordering::Relaxed),
        max_extends: u32::try_from(MAX_EXTENDS_COUNT.load(Ordering::Relaxed)).unwrap_or(u32::MAX),
    }
}

pub fn expiry_delay_ms() -> i64 {
    EXPIRY_DELAY_MS.load(Ordering::Relaxed)
}

/// 0: no limit.
pub fn max_waiters() -> usize {
    usize::try_from(MAX_WAITERS_COUNT.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

/// Whether a `maxmemory-policy` may evict lock keys. Every policy but
/// `noeviction` can: the `volatile-*` ones pick among keys with a TTL, and
/// every lock has one.
pub fn policy_evicts_locks(policy: &str) -> bool {
    !policy.eq_ignore_ascii_case("noeviction")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_keeps_locks() {
        assert!(!policy_evicts_locks("noeviction"));
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert!(policy_evicts_locks(policy), "{policy}");
        }
    }

    #[test]
    fn module_arguments_set_starting_values() {
        let defaults = starting_values(&[]).unwrap();
        assert_eq!(defaults, [86_400_000, 0, 0, 0, 0]);
        let set = starting_values(&[
            b"max-ttl-ms",
            b"60000",
            b"lock.expiry-delay-ms",
            b"500",
            b"max-waiters",
            b"10",
        ])
        .unwrap();
        assert_eq!(set, [60_000, 0, 0, 500, 10]);
        for bad in [
            vec![&b"max-ttl-ms"[..]],
            vec![&b"max-ttl-ms"[..], b"0"],
            vec![&b"max-ttl-ms"[..], b"ten"],
            vec![&b"max-hold-ms"[..], b"-1"],
            vec![&b"max-extends"[..], b"4294967296"],
            vec![&b"no-such-thing"[..], b"1"],
        ] {
            assert!(starting_values(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn defaults_are_within_their_bounds() {
        for (name, default, min, max) in [MAX_TTL, MAX_HOLD, MAX_EXTENDS, EXPIRY_DELAY, MAX_WAITERS]
        {
            assert!(min <= default && default <= max, "{name}");
        }
    }
}
