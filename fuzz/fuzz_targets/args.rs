//! Every argument parser on arbitrary argument vectors: no panic, every
//! accepted value is within its documented range and survives a round trip
//! through its canonical spelling, every refusal is a coded error, and
//! integers are read exactly as Redis' `string2ll` reads them.
//!
//! The input is one argument per line (`LOCK.ACQUIRE\nk\n30000\nTOKEN\nme`),
//! so the committed seeds read as commands; an input that begins with a NUL
//! byte is read instead as length-prefixed arguments (a length byte, then
//! that many bytes), so that any byte, a newline included, can stand in any
//! argument: keys, tokens, labels and command names are binary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_lock_core::args::{
    numkeys_range, parse_acquire, parse_extend, parse_guard, parse_i64, parse_info, parse_macquire,
    parse_mextend, parse_mrelease, parse_observe, parse_queue, parse_release, parse_setstate,
    GUARDED_COMMAND, MAX_QUEUE_COUNT,
};
use redis_lock_core::decide::{guarded_command, CommandFlags};
use redis_lock_core::errors::LockError;
use redis_lock_core::rules::{
    DEFAULT_MAX_TTL_MS, MAX_FENCE, MAX_OWNER_LEN, MAX_TOKEN_LEN, MAX_WAIT_MS,
};

fn coded(e: LockError) {
    let text = e.as_str();
    let code = text.split(' ').next().unwrap_or("");
    assert!(
        !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()),
        "error without a code: {text:?}"
    );
}

/// The arguments `data` spells (see the file's comment).
fn split(data: &[u8]) -> Vec<&[u8]> {
    let Some((&0, mut rest)) = data.split_first() else {
        return data.split(|&b| b == b'\n').collect();
    };
    let mut args = Vec::new();
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        args.push(&tail[..len]);
        rest = &tail[len..];
    }
    args
}

fuzz_target!(|data: &[u8]| {
    let args: Vec<&[u8]> = split(data);

    for a in &args {
        // string2ll: accepted exactly when the bytes are the canonical
        // decimal spelling of an i64.
        match parse_i64(a) {
            Some(v) => assert_eq!(v.to_string().as_bytes(), *a),
            None => assert!(std::str::from_utf8(a)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .map_or(true, |v| v.to_string().as_bytes() != *a)),
        }
    }

    match parse_acquire(&args, DEFAULT_MAX_TTL_MS) {
        Ok(p) => {
            // The configured maximum (lock.max-ttl-ms) is passed in.
            assert!((1..=DEFAULT_MAX_TTL_MS).contains(&p.ttl_ms));
            if let Some(t) = p.token {
                assert!((1..=MAX_TOKEN_LEN).contains(&t.len()));
            }
            if let Some(w) = p.wait_ms {
                assert!((0..=MAX_WAIT_MS).contains(&w));
            }
            let ttl = p.ttl_ms.to_string();
            let wait = p.wait_ms.map(|w| w.to_string());
            let mut canonical: Vec<&[u8]> = vec![args[0], args[1], ttl.as_bytes()];
            if let Some(t) = p.token {
                canonical.extend([&b"token"[..], t]);
            }
            if let Some(w) = &wait {
                canonical.extend([&b"WAIT"[..], w.as_bytes()]);
            }
            if p.session {
                canonical.push(&b"session"[..]);
            }
            if let Some(o) = p.owner {
                assert!((1..=MAX_OWNER_LEN).contains(&o.len()));
                canonical.extend([&b"Owner"[..], o]);
            }
            if p.shared {
                canonical.push(&b"Shared"[..]);
            }
            let sync = p.sync.map(|s| (s.replicas.to_string(), s.timeout_ms.to_string()));
            if let Some((n, t)) = &sync {
                canonical.extend([&b"sync"[..], n.as_bytes(), t.as_bytes()]);
            }
            let mut lease_text = [0u8; 32];
            if let Some(id) = p.lease {
                // A lease id is 32 lowercase hex digits and reads back as itself.
                canonical.extend([&b"LEASE"[..], &*id.text(&mut lease_text)]);
            }
            assert_eq!(parse_acquire(&canonical, DEFAULT_MAX_TTL_MS), Ok(p));
        }
        Err(e) => coded(e),
    }
    match parse_extend(&args, DEFAULT_MAX_TTL_MS) {
        Ok(p) => {
            assert_eq!(args.len(), 4);
            assert!((1..=DEFAULT_MAX_TTL_MS).contains(&p.ttl_ms));
            assert!((1..=MAX_TOKEN_LEN).contains(&p.token.len()));
        }
        Err(e) => coded(e),
    }
    // Multi-key commands: keys within the arguments, distinct, at most
    // max-keys; the options as LOCK.ACQUIRE's; GETKEYS' range agrees.
    for max_keys in [3usize, 64] {
        let check_keys = |keys: &std::ops::Range<usize>| {
            assert!(keys.start == 2 && keys.end <= args.len() && keys.len() <= max_keys);
            assert_eq!(numkeys_range(&args).map(|r| r.end >= keys.end), Some(true));
            let mut seen: Vec<&[u8]> = args[keys.clone()].to_vec();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), keys.len(), "duplicate keys accepted");
        };
        match parse_macquire(&args, max_keys, DEFAULT_MAX_TTL_MS) {
            Ok(p) => {
                check_keys(&p.keys);
                assert!((1..=DEFAULT_MAX_TTL_MS).contains(&p.lock.ttl_ms));
            }
            Err(e) => coded(e),
        }
        match parse_mrelease(&args, max_keys) {
            Ok(p) => {
                check_keys(&p.keys);
                assert_eq!(p.keys.end + 1, args.len());
            }
            Err(e) => coded(e),
        }
        match parse_mextend(&args, max_keys, DEFAULT_MAX_TTL_MS) {
            Ok(p) => check_keys(&p.keys),
            Err(e) => coded(e),
        }
    }

    match parse_release(&args) {
        Ok(p) => assert!((1..=MAX_TOKEN_LEN).contains(&p.token.len())),
        Err(e) => coded(e),
    }
    // Lease groups and revocation: ids read back as themselves, reasons
    // and labels stay within their bounds.
    match redis_lock_core::args::parse_lease_grant(&args, DEFAULT_MAX_TTL_MS) {
        Ok(p) => {
            assert!((1..=DEFAULT_MAX_TTL_MS).contains(&p.ttl_ms));
            assert!(p.owner.map_or(true, |o| (1..=MAX_OWNER_LEN).contains(&o.len())));
        }
        Err(e) => coded(e),
    }
    match redis_lock_core::args::parse_lease_id(&args) {
        Ok(id) => {
            let mut text = [0u8; 32];
            assert_eq!(id.text(&mut text), args[2]);
        }
        Err(e) => coded(e),
    }
    match redis_lock_core::args::parse_revoke(&args) {
        Ok(reason) => assert!(reason.map_or(true, |r| (1..=128).contains(&r.len()))),
        Err(e) => coded(e),
    }
    match redis_lock_core::args::parse_leaseset(&args) {
        Ok(p) => assert!(p.number >= 1 && p.ttl_ms >= 1 && p.deadline_ms >= 0),
        Err(e) => coded(e),
    }
    match parse_info(&args) {
        Ok(p) => assert!((2..=4).contains(&args.len()) && p.holds.map_or(true, |n| (1..=1000).contains(&n))),
        Err(e) => coded(e),
    }
    match parse_setstate(&args) {
        Ok(p) => {
            assert!((1..=MAX_FENCE).contains(&p.fence));
            assert!(p.deadline_ms.map_or(true, |d| d >= 0));
            assert!((1..=MAX_TOKEN_LEN).contains(&p.token.len()));
            assert!(p.owner.map_or(true, |o| (1..=MAX_OWNER_LEN).contains(&o.len())));
        }
        Err(e) => coded(e),
    }
    match parse_guard(&args) {
        Ok(p) => {
            assert!(args.len() >= 4);
            assert!((1..=MAX_TOKEN_LEN).contains(&p.token.len()));
            // The guarded command, with every kind of flags the server may
            // report: a name with a NUL byte never runs, a lock command
            // never runs, and a script's read-only twin is a script command.
            let (name, rest) = (args[GUARDED_COMMAND], &args[GUARDED_COMMAND + 1..]);
            for flags in [None, Some(CommandFlags::default()), Some(CommandFlags { blocking: true, noscript: false, readonly: false }), Some(CommandFlags { blocking: false, noscript: true, readonly: false })] {
                for in_script in [false, true] {
                    match guarded_command(name, rest, flags, in_script) {
                        Ok(run) => {
                            assert!(!name.contains(&0));
                            assert!(!name.to_ascii_lowercase().starts_with(b"lock.") || name.len() == 5);
                            if let Some(twin) = run.read_only_twin {
                                assert!(twin.to_bytes().ends_with(b"_RO"));
                                assert!(!run.script_mode);
                            }
                        }
                        Err(e) => coded(e),
                    }
                }
            }
        }
        Err(e) => coded(e),
    }
    match parse_queue(&args) {
        Ok(p) => assert!((1..=MAX_QUEUE_COUNT).contains(&p.count)),
        Err(e) => coded(e),
    }
    match parse_observe(&args) {
        Ok(p) => {
            assert_eq!(args.len(), 4);
            assert!(p.fence <= MAX_FENCE);
            assert!((0..=MAX_WAIT_MS).contains(&p.timeout_ms));
        }
        Err(e) => coded(e),
    }
});
