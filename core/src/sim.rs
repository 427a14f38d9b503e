//! An in-memory lock table that executes the core's decisions, with the
//! clock passed in: the same parsers and the same [`crate::decide`]
//! functions the module runs, over a plain map instead of Redis' keyspace.
//! The differential test runs it beside a real server, the fuzz targets and
//! the property tests below run it alone. It is not a second copy of the
//! rules: it only stores what the decisions say. (Feature `sim`; never in
//! the module.)

use std::borrow::Cow;
use std::collections::HashMap;

use crate::args::{parse_acquire, parse_extend, parse_release};
use crate::decide::{self, Acquire, AcquireCase, Extend};
use crate::errors::LockError;
use crate::hold::{Hold, Holds, MyHold, Want};
use crate::rules::{self, HoldPolicy};

/// Keys to locks, plus the module-wide fence high-water mark, which outlives
/// every key.
#[derive(Debug, Clone)]
pub struct LockTable {
    locks: HashMap<Vec<u8>, Hold>,
    pub high_water: u64,
    pub max_ttl_ms: i64,
    pub hold: HoldPolicy,
}

impl Default for LockTable {
    fn default() -> Self {
        Self {
            locks: HashMap::new(),
            high_water: 0,
            max_ttl_ms: rules::DEFAULT_MAX_TTL_MS,
            hold: HoldPolicy::default(),
        }
    }
}

impl LockTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The live lock on `key` at `now_ms`; an expired one is dropped, as Redis
    /// drops an expired key when it is looked up.
    pub fn live(&mut self, key: &[u8], now_ms: i64) -> Option<&Hold> {
        let expired = self
            .locks
            .get(key)
            .is_some_and(|l| !rules::is_live(l.deadline_ms, now_ms));
        if expired {
            self.locks.remove(key);
        }
        self.locks.get(key)
    }

    /// The key's holds as the decisions see them (an expired lease gone).
    fn holds(&mut self, key: &[u8], now_ms: i64) -> Holds<'_> {
        self.live(key, now_ms)
            .map_or(Holds::Free, |hold| Holds::One(Cow::Borrowed(hold)))
    }

    fn mine(&mut self, key: &[u8], token: &[u8], now_ms: i64) -> Option<MyHold> {
        self.holds(key, now_ms).mine(Some(token), now_ms)
    }

    /// `LOCK.ACQUIRE key ttl TOKEN token`: `Ok(Some(fence))` when granted or
    /// renewed, `Ok(None)` when refused.
    pub fn acquire(
        &mut self,
        key: &[u8],
        ttl_ms: i64,
        token: &[u8],
        now_ms: i64,
        now_us: u64,
    ) -> Result<Option<u64>, LockError> {
        let ttl = ttl_ms.to_string();
        let args: [&[u8]; 5] = [b"LOCK.ACQUIRE", key, ttl.as_bytes(), b"TOKEN", token];
        let parsed = parse_acquire(&args, self.max_ttl_ms)?;
        let holds = self.holds(key, now_ms);
        let decision = decide::acquire(&AcquireCase {
            key: holds.state(now_ms),
            mine: holds.mine(parsed.token, now_ms),
            want: Want::Exclusive,
            ttl_ms: parsed.ttl_ms,
            now_ms,
            others_waiting: false,
            delayed_until_ms: None,
            hold: self.hold,
            may_wait: false,
            max_holders: 1,
            lease: None,
        })?;
        match decision {
            Acquire::Refuse | Acquire::Queue { .. } => Ok(None),
            // The simulator attaches no hold to a lease group.
            Acquire::Held { .. } => Err(LockError::Internal),
            Acquire::Renew(renewal) => {
                let lock = self.locks.get_mut(key).ok_or(LockError::Internal)?;
                lock.deadline_ms = renewal.deadline_ms;
                lock.extends = renewal.extends;
                Ok(Some(renewal.fence))
            }
            Acquire::Grant { deadline_ms } => {
                let fence =
                    rules::next_fence(self.high_water, now_us).ok_or(LockError::FenceExhausted)?;
                self.high_water = fence;
                let lock = Hold::granted(token, fence, now_ms, deadline_ms);
                self.locks.insert(key.to_vec(), lock);
                Ok(Some(fence))
            }
        }
    }

    /// `LOCK.EXTEND key token ttl`: whether it extended.
    pub fn extend(
        &mut self,
        key: &[u8],
        token: &[u8],
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool, LockError> {
        let ttl = ttl_ms.to_string();
        let args: [&[u8]; 4] = [b"LOCK.EXTEND", key, token, ttl.as_bytes()];
        let parsed = parse_extend(&args, self.max_ttl_ms)?;
        let mine = self.mine(key, parsed.token, now_ms);
        match decide::extend(mine, parsed.ttl_ms, now_ms, self.hold)? {
            Extend::NotHolder => Ok(false),
            Extend::Leased => Err(LockError::Internal),
            Extend::Renewed(renewal) => {
                let lock = self.locks.get_mut(key).ok_or(LockError::Internal)?;
                lock.deadline_ms = renewal.deadline_ms;
                lock.extends = renewal.extends;
                Ok(true)
            }
        }
    }

    /// `LOCK.RELEASE key token`: whether it released.
    pub fn release(&mut self, key: &[u8], token: &[u8], now_ms: i64) -> Result<bool, LockError> {
        let args: [&[u8]; 3] = [b"LOCK.RELEASE", key, token];
        let parsed = parse_release(&args)?;
        let released = decide::release(self.mine(key, parsed.token, now_ms));
        if released {
            self.locks.remove(key);
        }
        Ok(released)
    }

    /// `DEL` / `UNLINK` of the key: the lock goes, the fence history stays.
    pub fn delete(&mut self, key: &[u8]) {
        self.locks.remove(key);
    }

    /// `FLUSHALL`: every lock goes, the fence history stays.
    pub fn flush(&mut self) {
        self.locks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire {
            key: u8,
            token: u8,
            ttl: i64,
        },
        Extend {
            key: u8,
            token: u8,
            ttl: i64,
        },
        Release {
            key: u8,
            token: u8,
        },
        Delete {
            key: u8,
        },
        Flush,
        /// Time passes; the wall clock may also step back (`clock_step` < 0).
        Sleep {
            ms: i64,
            clock_step_us: i64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3, 0u8..3, 1i64..50).prop_map(|(key, token, ttl)| Op::Acquire { key, token, ttl }),
            2 => (0u8..3, 0u8..3, 1i64..50).prop_map(|(key, token, ttl)| Op::Extend { key, token, ttl }),
            2 => (0u8..3, 0u8..3).prop_map(|(key, token)| Op::Release { key, token }),
            1 => (0u8..3).prop_map(|key| Op::Delete { key }),
            1 => Just(Op::Flush),
            3 => (0i64..40, -2_000i64..2_000).prop_map(|(ms, clock_step_us)| Op::Sleep { ms, clock_step_us }),
        ]
    }

    fn key(k: u8) -> [u8; 1] {
        [b'k' + k]
    }
    fn token(t: u8) -> [u8; 2] {
        [b't', b'0' + t]
    }

    proptest! {
        /// Fences only grow, across keys, releases, deletes, flushes and clock
        /// steps; a renewal returns the holder's own fence; a foreign token
        /// never releases or extends; a key never has two holders.
        #[test]
        fn rules_hold_over_any_history(ops in proptest::collection::vec(op(), 1..200)) {
            let mut table = LockTable::new();
            let mut now_ms: i64 = 1_000;
            let mut now_us: i64 = 1_000_000;
            let mut last_grant: u64 = 0;
            for op in ops {
                match op {
                    Op::Acquire { key: k, token: t, ttl } => {
                        let before = table.live(&key(k), now_ms).cloned();
                        let got = table.acquire(&key(k), ttl, &token(t), now_ms, now_us.max(0) as u64).unwrap();
                        match (&before, got) {
                            (None, Some(f)) => {
                                prop_assert!(f > last_grant, "fence {f} after {last_grant}");
                                last_grant = f;
                            }
                            (Some(b), Some(f)) => {
                                prop_assert!(b.held_by(&token(t)));
                                prop_assert_eq!(f, b.fence);
                            }
                            (Some(b), None) => prop_assert!(!b.held_by(&token(t))),
                            (None, None) => prop_assert!(false, "free key refused"),
                        }
                    }
                    Op::Extend { key: k, token: t, ttl } => {
                        let before = table.live(&key(k), now_ms).cloned();
                        let ok = table.extend(&key(k), &token(t), ttl, now_ms).unwrap();
                        let owner = before.as_ref().is_some_and(|b| b.held_by(&token(t)));
                        prop_assert_eq!(ok, owner);
                        let after = table.live(&key(k), now_ms).cloned();
                        if !owner {
                            prop_assert_eq!(before, after);
                        } else {
                            prop_assert_eq!(after.map(|a| a.deadline_ms), Some(now_ms + ttl));
                        }
                    }
                    Op::Release { key: k, token: t } => {
                        let before = table.live(&key(k), now_ms).cloned();
                        let ok = table.release(&key(k), &token(t), now_ms).unwrap();
                        let owner = before.as_ref().is_some_and(|b| b.held_by(&token(t)));
                        prop_assert_eq!(ok, owner);
                        let after = table.live(&key(k), now_ms).cloned();
                        if owner { prop_assert!(after.is_none()); } else { prop_assert_eq!(before, after); }
                    }
                    Op::Delete { key: k } => table.delete(&key(k)),
                    Op::Flush => table.flush(),
                    Op::Sleep { ms, clock_step_us } => {
                        now_ms += ms;
                        now_us += ms * 1_000 + clock_step_us;
                    }
                }
                prop_assert!(table.high_water >= last_grant);
            }
        }

        #[test]
        fn a_lease_ends_exactly_after_its_deadline(ttl in 1i64..10_000, start in 0i64..1_000_000) {
            let mut table = LockTable::new();
            table.acquire(b"k", ttl, b"a", start, 1).unwrap();
            prop_assert!(table.acquire(b"k", ttl, b"b", start + ttl, 2).unwrap().is_none());
            prop_assert!(table.acquire(b"k", ttl, b"b", start + ttl + 1, 3).unwrap().is_some());
        }
    }

    #[test]
    fn bad_input_changes_nothing() {
        let mut table = LockTable::new();
        table.acquire(b"k", 100, b"a", 0, 10).unwrap();
        let before = table.clone();
        assert_eq!(
            table.acquire(b"k", 0, b"a", 0, 11),
            Err(LockError::TtlNotPositive)
        );
        assert_eq!(
            table.acquire(b"k", rules::DEFAULT_MAX_TTL_MS + 1, b"a", 0, 11),
            Err(LockError::TtlTooLarge)
        );
        assert_eq!(
            table.acquire(b"j", 100, b"", 0, 11),
            Err(LockError::TokenLength)
        );
        assert_eq!(
            table.extend(b"k", b"a", -1, 0),
            Err(LockError::TtlNotPositive)
        );
        assert_eq!(table.release(b"k", b"", 0), Err(LockError::TokenLength));
        assert_eq!(table.locks, before.locks);
        assert_eq!(table.high_water, before.high_water);
    }
}
