//! The pure lock model ([`redis_lock_core::sim::LockTable`], which runs
//! the core's parsers and decisions as the module does) under arbitrary histories: any
//! TTL, token, key and clock, including clocks that jump back or sit at the
//! fence limit. Fences of grants only grow and stay within 2^53 - 1, a renewal
//! keeps the holder's fence, only the holder extends or releases, and a
//! refused or failed command changes nothing.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use redis_lock_core::sim::LockTable;
use redis_lock_core::rules::MAX_FENCE;

#[derive(Debug, Arbitrary)]
enum Op {
    Acquire {
        key: u8,
        token: Vec<u8>,
        ttl: i64,
    },
    Extend {
        key: u8,
        token: Vec<u8>,
        ttl: i64,
    },
    Release {
        key: u8,
        token: Vec<u8>,
    },
    Delete {
        key: u8,
    },
    Flush,
    /// Time passes (or steps back), by any amount.
    Clock {
        ms: i64,
        us: u64,
    },
}

fuzz_target!(|input: (i64, u64, Vec<Op>)| {
    let (mut now_ms, mut now_us, ops) = input;
    let mut table = LockTable::new();
    let mut last_grant = 0u64;
    for op in ops {
        let hw = table.high_water;
        match op {
            Op::Acquire { key, token, ttl } => {
                let k = [key % 4];
                let before = table.live(&k, now_ms).cloned();
                match table.acquire(&k, ttl, &token, now_ms, now_us) {
                    Ok(Some(fence)) => match &before {
                        None => {
                            assert!(fence > last_grant && fence <= MAX_FENCE);
                            assert_eq!(table.high_water, fence);
                            last_grant = fence;
                        }
                        Some(b) => {
                            assert!(b.held_by(&token));
                            assert_eq!(b.fence, fence);
                        }
                    },
                    Ok(None) => {
                        let b = before.clone().expect("a free key is never refused");
                        assert!(!b.held_by(&token));
                        assert_eq!(table.live(&k, now_ms).cloned(), before);
                    }
                    Err(_) => {
                        assert_eq!(table.live(&k, now_ms).cloned(), before);
                        assert_eq!(table.high_water, hw);
                    }
                }
            }
            Op::Extend { key, token, ttl } => {
                let k = [key % 4];
                let before = table.live(&k, now_ms).cloned();
                let holder = before.as_ref().is_some_and(|b| b.held_by(&token));
                match table.extend(&k, &token, ttl, now_ms) {
                    Ok(true) => {
                        assert!(holder);
                        let after = table.live(&k, now_ms).cloned();
                        assert_eq!(after.map(|a| a.deadline_ms), Some(now_ms + ttl));
                    }
                    Ok(false) | Err(_) => {
                        assert!(!holder || table.extend(&k, &token, ttl, now_ms).is_err());
                        assert_eq!(table.live(&k, now_ms).cloned(), before);
                    }
                }
            }
            Op::Release { key, token } => {
                let k = [key % 4];
                let before = table.live(&k, now_ms).cloned();
                let holder = before.as_ref().is_some_and(|b| b.held_by(&token));
                match table.release(&k, &token, now_ms) {
                    Ok(true) => {
                        assert!(holder);
                        assert!(table.live(&k, now_ms).is_none());
                    }
                    Ok(false) | Err(_) => {
                        assert!(!holder);
                        assert_eq!(table.live(&k, now_ms).cloned(), before);
                    }
                }
            }
            Op::Delete { key } => table.delete(&[key % 4]),
            Op::Flush => table.flush(),
            Op::Clock { ms, us } => {
                now_ms = now_ms.wrapping_add(ms);
                now_us = us;
            }
        }
        assert!(table.high_water >= hw, "the high-water mark went back");
        assert!(table.high_water >= last_grant);
    }
});
