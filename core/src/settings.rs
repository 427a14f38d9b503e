//! The module's settings as data: their names, defaults and bounds, the
//! module arguments that set their starting values, and what the eviction
//! policy means for locks. The module registers them with Redis
//! (`src/state/config.rs`) and reads them once per command.

use crate::args::parse_i64;
use crate::rules;

/// A setting: its name (without the `lock.` prefix), its default and its
/// bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    pub default: i64,
    pub min: i64,
    pub max: i64,
}

const fn setting(name: &'static str, default: i64, min: i64, max: i64) -> Setting {
    Setting {
        name,
        default,
        min,
        max,
    }
}

pub const MAX_TTL: Setting = setting(
    "max-ttl-ms",
    rules::DEFAULT_MAX_TTL_MS,
    1,
    rules::CEILING_MS,
);
pub const MAX_HOLD: Setting = setting("max-hold-ms", 0, 0, rules::CEILING_MS);
pub const MAX_EXTENDS: Setting = setting("max-extends", 0, 0, u32::MAX as i64);
pub const EXPIRY_DELAY: Setting = setting("expiry-delay-ms", 0, 0, rules::CEILING_MS);
pub const MAX_WAITERS: Setting = setting("max-waiters", 0, 0, u32::MAX as i64);
/// Holders of one shared lock or semaphore at once (`LIMIT` past it), so
/// one key cannot grow without end.
pub const MAX_HOLDERS: Setting = setting("max-holders", 1000, 1, 1_000_000);
/// Keys of one multi-key request (`LOCK.MACQUIRE`, `LOCK.MRELEASE`,
/// `LOCK.MEXTEND`) at most: one request stays a bounded amount of work.
pub const MAX_KEYS: Setting = setting("max-keys", 64, 1, 100_000);

/// Every setting, in the order [`starting_values`] returns them.
pub const ALL: [Setting; 7] = [
    MAX_TTL,
    MAX_HOLD,
    MAX_EXTENDS,
    EXPIRY_DELAY,
    MAX_WAITERS,
    MAX_HOLDERS,
    MAX_KEYS,
];

/// The starting value of each setting in [`ALL`]: its default, or what the
/// module arguments (`name value` pairs, `lock.` prefix optional) say. An
/// unknown name or a bad value is an error that says which.
pub fn starting_values(args: &[&[u8]]) -> Result<[i64; 7], String> {
    let mut values = ALL.map(|setting| setting.default);
    for pair in args.chunks(2) {
        let [name, value] = pair else {
            return Err("module arguments are name value pairs, e.g. max-ttl-ms 60000".into());
        };
        let name = String::from_utf8_lossy(name);
        let name = name.strip_prefix("lock.").unwrap_or(&name);
        let Some(i) = ALL.iter().position(|setting| setting.name == name) else {
            return Err(format!("unknown module argument '{name}'"));
        };
        let Setting { min, max, .. } = ALL[i];
        match parse_i64(value) {
            Some(v) if (min..=max).contains(&v) => values[i] = v,
            _ => return Err(format!("{name} must be an integer from {min} to {max}")),
        }
    }
    Ok(values)
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
        assert_eq!(defaults, [86_400_000, 0, 0, 0, 0, 1000, 64]);
        let set = starting_values(&[
            b"max-ttl-ms",
            b"60000",
            b"lock.expiry-delay-ms",
            b"500",
            b"max-waiters",
            b"10",
        ])
        .unwrap();
        assert_eq!(set, [60_000, 0, 0, 500, 10, 1000, 64]);
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
        for Setting {
            name,
            default,
            min,
            max,
        } in ALL
        {
            assert!(min <= default && default <= max, "{name}");
        }
    }
}
