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

/// Multi-key requests in the wait queues: random arrivals (single and
/// multi-key, exclusive and shared, waiting or not), releases, timeouts of
/// waiters and expiries, served by the rule the module runs
/// (`wait_queue/`): a key's head is served when it is first in each of its
/// keys' queues, by [`decide::acquire_many`], all keys or none; a key is
/// looked at when it frees (a release, an expiry), when a multi-key waiter
/// leaves, and after a multi-key grant (its other keys).
#[cfg(test)]
mod multi_key_queues {
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    use proptest::prelude::*;

    use crate::decide::{self, AcquireMany, AcquireManyCase, ManyKey, Served};
    use crate::hold::{KeyState, Want};
    use crate::rules::{self, HoldPolicy};
    use crate::waitqueue::{WaitQueues, WaiterId};

    const KEYS: u8 = 4;
    const MAX_TTL: i64 = 50;
    const MAX_TICK: i64 = 20;

    #[derive(Debug, Clone)]
    enum Op {
        /// Keys (a bit set of `KEYS` bits, at least one), shared, ttl, waits.
        Arrive(u8, bool, i64, bool),
        /// Release the holder picked by this number.
        Release(usize),
        /// A waiter picked by this number times out.
        Leave(usize),
        Tick(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u8..(1 << KEYS), any::<bool>(), 1..=MAX_TTL, prop::bool::weighted(0.8))
                .prop_map(|(k, s, t, w)| Op::Arrive(k, s, t, w)),
            1 => any::<usize>().prop_map(Op::Release),
            1 => any::<usize>().prop_map(Op::Leave),
            2 => (1..=MAX_TICK).prop_map(Op::Tick),
        ]
    }

    struct Request {
        keys: Vec<u8>,
        want: Want,
        ttl_ms: i64,
        arrived_ms: i64,
        /// Waiters queued, on any key, when it arrived: only they (and the
        /// holders then) may be served before it.
        older: usize,
    }

    #[derive(Default)]
    struct World {
        now_ms: i64,
        /// Per key: request id -> (want, deadline).
        holders: BTreeMap<u8, BTreeMap<WaiterId, (Want, i64)>>,
        queues: WaitQueues<Request>,
        requests: HashMap<WaiterId, ()>,
        next_id: WaiterId,
        /// Errors found: a broken rule, with what broke it.
        broken: Vec<String>,
        granted: usize,
    }

    impl World {
        fn state(&self, key: u8) -> KeyState {
            let Some(holders) = self.holders.get(&key).filter(|h| !h.is_empty()) else {
                return KeyState::Free;
            };
            let earliest = holders.values().map(|(_, d)| *d).min();
            if holders.values().any(|(w, _)| *w == Want::Exclusive) {
                if holders.len() > 1 {
                    return KeyState::WrongType; // never: checked below
                }
                KeyState::Held {
                    deadline_ms: earliest,
                }
            } else {
                KeyState::Shared {
                    earliest_ms: earliest,
                    holders: holders.len(),
                }
            }
        }

        fn case<'a>(
            &self,
            keys: &'a [ManyKey],
            want: Want,
            ttl_ms: i64,
            wait: bool,
            queued: bool,
        ) -> AcquireManyCase<'a> {
            AcquireManyCase {
                keys,
                want,
                ttl_ms,
                now_ms: self.now_ms,
                hold: HoldPolicy::default(),
                may_wait: wait,
                max_holders: 1000,
                lease: None,
                queued,
            }
        }

        fn grant(&mut self, id: WaiterId, keys: &[u8], want: Want, deadline_ms: i64) {
            for key in keys {
                let holders = self.holders.entry(*key).or_default();
                let exclusive =
                    want == Want::Exclusive || holders.values().any(|(w, _)| *w == Want::Exclusive);
                if exclusive && !holders.is_empty() {
                    self.broken
                        .push(format!("key {key} granted beside another holder"));
                }
                holders.insert(id, (want, deadline_ms));
            }
            self.granted += 1;
        }

        fn arrive(&mut self, bits: u8, shared: bool, ttl_ms: i64, wait: bool) {
            let keys: Vec<u8> = (0..KEYS).filter(|k| bits & (1 << k) != 0).collect();
            let want = if shared {
                Want::Shared
            } else {
                Want::Exclusive
            };
            let id = self.next_id;
            self.next_id += 1;
            let deadline_ms = rules::deadline_ms(self.now_ms, ttl_ms).unwrap_or(i64::MAX);
            let many: Vec<ManyKey> = keys
                .iter()
                .map(|k| ManyKey {
                    key: self.state(*k),
                    mine: None,
                    others_waiting: self.queues.len(0, &[*k]) > 0,
                    delayed_until_ms: None,
                })
                .collect();
            match decide::acquire_many(&self.case(&many, want, ttl_ms, wait, false)) {
                Ok(AcquireMany::Grant { deadline_ms: d }) => {
                    if d != deadline_ms {
                        self.broken.push("deadline".into());
                    }
                    self.grant(id, &keys, want, d)
                }
                Ok(AcquireMany::Queue { .. }) => self.queue(id, keys, want, ttl_ms),
                Ok(AcquireMany::Refuse) => {}
                other => self.broken.push(format!("acquire: {other:?}")),
            }
        }

        fn queue(&mut self, id: WaiterId, keys: Vec<u8>, want: Want, ttl_ms: i64) {
            let request = Request {
                keys: keys.clone(),
                want,
                ttl_ms,
                arrived_ms: self.now_ms,
                older: self.queues.total(),
            };
            let names: Vec<[u8; 1]> = keys.iter().map(|k| [*k]).collect();
            let names: Vec<&[u8]> = names.iter().map(|k| &k[..]).collect();
            self.queues.push(0, &names, id, request);
            self.requests.insert(id, ());
        }

        /// The module's hand-off of `key`, and of the keys it leads to, by
        /// the core's serving rule, as `wait_queue/` runs it: the head that
        /// is first in every queue it is in (`servable`), decided by
        /// `serve_waiter`, and the keys to look at again once it leaves
        /// (`leave`).
        fn serve(&mut self, first: u8) {
            let mut todo = vec![first];
            while let Some(key) = todo.pop() {
                while let Some(head) = self.queues.servable(0, &[key]) {
                    let Some(request) = self.queues.get(head) else {
                        break;
                    };
                    let (keys, want, ttl_ms) = (request.keys.clone(), request.want, request.ttl_ms);
                    let many: Vec<ManyKey> = keys
                        .iter()
                        .map(|k| ManyKey {
                            key: self.state(*k),
                            mine: None,
                            others_waiting: false,
                            delayed_until_ms: None,
                        })
                        .collect();
                    match decide::serve_waiter(&self.case(&many, want, ttl_ms, true, true)) {
                        Served::Grant { deadline_ms } => {
                            let Some((request, again)) = self.queues.leave(head) else {
                                break;
                            };
                            let waited = self.now_ms - request.arrived_ms;
                            let bound = (request.older as i64 + 1) * (MAX_TTL + MAX_TICK + 1);
                            if waited > bound {
                                self.broken.push(format!(
                                    "waited {waited} ms behind {} older waiters (bound {bound})",
                                    request.older
                                ));
                            }
                            self.grant(head, &keys, want, deadline_ms);
                            self.requests.remove(&head);
                            todo.extend(again.iter().filter_map(|k| k.first().copied()));
                        }
                        Served::Wait { .. } => break,
                        other => {
                            self.broken.push(format!("serve: {other:?}"));
                            break;
                        }
                    }
                }
            }
        }

        fn release(&mut self, pick: usize) {
            let all: Vec<(u8, WaiterId)> = self
                .holders
                .iter()
                .flat_map(|(k, h)| h.keys().map(move |id| (*k, *id)))
                .collect();
            if all.is_empty() {
                return;
            }
            // A holder gives back every key it holds (`LOCK.MRELEASE`).
            let (_, id) = all[pick % all.len()];
            let freed: Vec<u8> = self
                .holders
                .iter_mut()
                .filter_map(|(k, h)| h.remove(&id).map(|_| *k))
                .collect();
            for key in freed {
                self.serve(key);
            }
        }

        fn leave(&mut self, pick: usize) {
            let ids: BTreeSet<WaiterId> = self.requests.keys().copied().collect();
            let Some(id) = ids.iter().nth(pick % ids.len().max(1)).copied() else {
                return;
            };
            let Some((_, again)) = self.queues.leave(id) else {
                return;
            };
            self.requests.remove(&id);
            for key in again {
                if let Some(key) = key.first() {
                    self.serve(*key);
                }
            }
        }

        fn tick(&mut self, dt: i64) {
            self.now_ms += dt;
            let now_ms = self.now_ms;
            let mut freed = Vec::new();
            for (key, holders) in self.holders.iter_mut() {
                let before = holders.len();
                holders.retain(|_, (_, deadline)| rules::is_live(*deadline, now_ms));
                if holders.len() != before {
                    freed.push(*key);
                }
            }
            for key in freed {
                self.serve(key);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// No deadlock, no starvation, no barging: every waiter is granted
        /// within one lease (and one tick) per waiter older than it, plus
        /// one for the holders at its arrival; and once arrivals stop and
        /// time runs, every queue empties.
        #[test]
        fn multi_key_waiters_are_served_in_bounded_time(ops in proptest::collection::vec(op(), 1..300)) {
            let mut world = World::default();
            for op in ops {
                match op {
                    Op::Arrive(keys, shared, ttl, wait) => world.arrive(keys, shared, ttl, wait),
                    Op::Release(pick) => world.release(pick),
                    Op::Leave(pick) => world.leave(pick),
                    Op::Tick(dt) => world.tick(dt),
                }
                prop_assert!(world.broken.is_empty(), "{:?}", world.broken);
            }
            // Each lease's time grants at least the oldest waiter.
            let (mut rounds, queued) = (0, world.requests.len() as i64);
            while world.queues.total() > 0 {
                let bound = (queued + 1) * ((MAX_TTL + MAX_TICK) / MAX_TICK + 1);
                prop_assert!(rounds <= bound, "stuck: {} waiting", world.queues.total());
                world.tick(MAX_TICK);
                rounds += 1;
            }
            prop_assert!(world.broken.is_empty(), "{:?}", world.broken);
        }
    }

    /// Two requests for overlapping keys in opposite orders, both behind a
    /// holder: both are granted, one after the other (no deadlock).
    #[test]
    fn opposite_orders_do_not_deadlock() {
        let mut world = World::default();
        world.arrive(0b011, false, 10, false); // id 0 holds 0 and 1
        world.arrive(0b011, false, 10, true); // id 1 waits for 0, 1
        world.arrive(0b011, false, 10, true); // id 2: the same set
        world.arrive(0b001, false, 10, true); // id 3: key 0 alone, last
        assert_eq!(world.queues.total(), 3);
        world.release(0);
        assert_eq!(
            world.holders[&0].keys().copied().collect::<Vec<_>>(),
            vec![1]
        );
        world.release(0);
        assert_eq!(
            world.holders[&1].keys().copied().collect::<Vec<_>>(),
            vec![2]
        );
        world.release(0);
        assert_eq!(
            world.holders[&0].keys().copied().collect::<Vec<_>>(),
            vec![3]
        );
        assert!(world.broken.is_empty(), "{:?}", world.broken);
    }
}

/// `SYNC`: grants waiting for their replicas, acknowledgements, timeouts,
/// undo, the same token on a second connection, and clients that leave,
/// run by the rule the module runs ([`crate::sync::Waiting`]). The
/// property: no reply that told a token it holds a key is followed by that
/// hold's removal by anything but release or expiry (the simulator has no
/// revocation or lease groups). An undo removes only a hold that is still
/// its grant's (the same fence), as the module's does.
#[cfg(test)]
mod sync_undo {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::LockTable;
    use crate::args::Sync;
    use crate::sync::{Stands, Waiting};

    const KEYS: u8 = 2;
    const CONNS: u8 = 3;
    const TOKENS: u8 = 2;

    #[derive(Debug, Clone)]
    enum Op {
        /// `LOCK.ACQUIRE key ttl TOKEN token [SYNC 1 timeout]` on a
        /// connection with no request waiting.
        Acquire {
            conn: u8,
            key: u8,
            token: u8,
            ttl: i64,
            sync: Option<i64>,
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
        /// The replica acknowledges everything sent so far.
        Ack,
        /// The connection closes (or is killed) while its request waits.
        Leave {
            conn: u8,
        },
        Tick {
            ms: i64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..CONNS, 0..KEYS, 0..TOKENS, 1i64..60, prop::option::of(1i64..30))
                .prop_map(|(conn, key, token, ttl, sync)| Op::Acquire { conn, key, token, ttl, sync }),
            2 => (0..KEYS, 0..TOKENS, 1i64..60).prop_map(|(key, token, ttl)| Op::Extend { key, token, ttl }),
            1 => (0..KEYS, 0..TOKENS).prop_map(|(key, token)| Op::Release { key, token }),
            2 => Just(Op::Ack),
            2 => (0..CONNS).prop_map(|conn| Op::Leave { conn }),
            3 => (0i64..20).prop_map(|ms| Op::Tick { ms }),
        ]
    }

    /// A request waiting for its replica.
    #[derive(Debug)]
    struct Request {
        conn: u8,
        key: [u8; 1],
        token: [u8; 2],
        fence: u64,
    }

    /// How the world treats a token's renewals and extensions while a
    /// grant waits: as the module does (they confirm the hold), or as it
    /// did before (they do not): the second shows that the check fails.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Rule {
        Confirm,
        Ignore,
    }

    struct World {
        table: LockTable,
        waiting: Waiting<Request>,
        rule: Rule,
        now_ms: i64,
        now_us: u64,
        /// The master's replication offset, and the replica's acknowledged
        /// one.
        offset: i64,
        acked: i64,
        /// The connections with a request waiting.
        conns: HashSet<u8>,
        /// (key, fence) of the holds a reply told a token it holds.
        confirmed: HashSet<([u8; 1], u64)>,
        broken: Vec<String>,
    }

    fn key(k: u8) -> [u8; 1] {
        [b'k' + k]
    }
    fn token(t: u8) -> [u8; 2] {
        [b't', b'0' + t]
    }

    impl World {
        fn new(rule: Rule) -> Self {
            World {
                table: LockTable::new(),
                waiting: Waiting::new(),
                rule,
                now_ms: 1_000,
                now_us: 1_000_000,
                offset: 0,
                acked: 0,
                conns: HashSet::new(),
                confirmed: HashSet::new(),
                broken: Vec::new(),
            }
        }

        /// A reply tells `token` it holds `key`'s hold with `fence`.
        fn told(&mut self, key: [u8; 1], fence: u64) {
            self.confirmed.insert((key, fence));
        }

        /// Another request answered the token as the holder.
        fn renewed(&mut self, key: [u8; 1], fence: u64) {
            if self.rule == Rule::Confirm {
                self.waiting.confirm(fence);
            }
            self.told(key, fence);
        }

        /// The module's undo: if no reply confirmed it, the hold goes when
        /// it is still that grant's.
        fn undo(&mut self, request: &Request) {
            if !self.waiting.undo(request.fence) {
                return;
            }
            let now_ms = self.now_ms;
            let still = self
                .table
                .live(&request.key, now_ms)
                .is_some_and(|h| h.fence == request.fence && h.held_by(&request.token));
            if still {
                if self.confirmed.contains(&(request.key, request.fence)) {
                    self.broken.push(format!(
                        "undo took {:?} fence {}, which a reply had confirmed",
                        request.key, request.fence
                    ));
                }
                self.table.delete(&request.key);
                self.offset += 1;
            }
        }

        fn look(&mut self) {
            let (finished, _) = self
                .waiting
                .look(self.offset, &[self.acked], self.now_ms, true);
            for done in finished {
                self.conns.remove(&done.request.conn);
                match done.synced {
                    Ok(()) => {
                        // Its own reply: the client is told it holds it.
                        self.waiting.confirm(done.request.fence);
                        self.told(done.request.key, done.request.fence);
                    }
                    Err(_) if done.undo => self.undo(&done.request),
                    Err(_) => {}
                }
            }
        }

        fn step(&mut self, op: Op) {
            match op {
                Op::Acquire {
                    conn,
                    key: k,
                    token: t,
                    ttl,
                    sync,
                } => {
                    if self.conns.contains(&conn) {
                        return;
                    }
                    let (key, token) = (key(k), token(t));
                    let before = self.table.live(&key, self.now_ms).cloned();
                    let got = self
                        .table
                        .acquire(&key, ttl, &token, self.now_ms, self.now_us)
                        .unwrap_or(None);
                    let Some(fence) = got else { return };
                    self.offset += 1;
                    let renewal = before.is_some_and(|b| b.held_by(&token));
                    let stands = if renewal {
                        self.renewed(key, fence);
                        Stands::Extension
                    } else {
                        Stands::Undone
                    };
                    match sync {
                        Some(timeout) => {
                            let request = Request {
                                conn,
                                key,
                                token,
                                fence,
                            };
                            let sync = Sync {
                                replicas: 1,
                                timeout_ms: timeout,
                            };
                            self.waiting
                                .push(request, sync, self.now_ms, stands, Some(fence));
                            self.conns.insert(conn);
                        }
                        None => self.told(key, fence),
                    }
                }
                Op::Extend {
                    key: k,
                    token: t,
                    ttl,
                } => {
                    let (key, token) = (key(k), token(t));
                    if self.table.extend(&key, &token, ttl, self.now_ms) == Ok(true) {
                        self.offset += 1;
                        let fence = self.table.live(&key, self.now_ms).map(|h| h.fence);
                        if let Some(fence) = fence {
                            self.renewed(key, fence);
                        }
                    }
                }
                Op::Release { key: k, token: t } => {
                    let (key, token) = (key(k), token(t));
                    let fence = self.table.live(&key, self.now_ms).map(|h| h.fence);
                    if self.table.release(&key, &token, self.now_ms) == Ok(true) {
                        self.offset += 1;
                        if let Some(fence) = fence {
                            self.confirmed.remove(&(key, fence));
                        }
                    }
                }
                Op::Ack => self.acked = self.offset,
                Op::Leave { conn } => {
                    if let Some((request, undo)) = self.waiting.leave(|r| r.conn == conn) {
                        self.conns.remove(&conn);
                        if undo {
                            self.undo(&request);
                        }
                    }
                }
                Op::Tick { ms } => {
                    self.now_ms += ms;
                    self.now_us += ms as u64 * 1_000;
                }
            }
            // Expired holds leave the record (an expiry is a lawful end).
            for k in 0..KEYS {
                let key = key(k);
                let live = self.table.live(&key, self.now_ms).map(|h| h.fence);
                self.confirmed.retain(|&(c, f)| c != key || Some(f) == live);
            }
            self.look();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Nothing a reply confirmed is undone, whatever the order of
        /// grants, retries on other connections, acknowledgements,
        /// timeouts and clients leaving; and every wait ends.
        #[test]
        fn no_undo_takes_a_confirmed_hold(ops in proptest::collection::vec(op(), 1..200)) {
            let mut world = World::new(Rule::Confirm);
            for op in ops {
                world.step(op);
                prop_assert!(world.broken.is_empty(), "{:?}", world.broken);
            }
            world.step(Op::Tick { ms: 100 });
            prop_assert!(world.waiting.is_empty());
            prop_assert!(world.broken.is_empty(), "{:?}", world.broken);
        }
    }

    /// The defect this closes, as the simulator sees it: a grant waits, its
    /// token's retry on a second connection is answered as the holder, then
    /// the first request's wait runs out (or its client leaves). Under the
    /// old rule (a renewal confirms nothing) the undo takes the confirmed
    /// hold; under the module's, it stands.
    #[test]
    fn a_retry_confirms_the_hold_an_undo_would_have_taken() {
        for leave in [false, true] {
            for rule in [Rule::Ignore, Rule::Confirm] {
                let mut world = World::new(rule);
                world.step(Op::Acquire {
                    conn: 0,
                    key: 0,
                    token: 0,
                    ttl: 50,
                    sync: Some(10),
                });
                world.step(Op::Acquire {
                    conn: 1,
                    key: 0,
                    token: 0,
                    ttl: 50,
                    sync: None,
                });
                if leave {
                    world.step(Op::Leave { conn: 0 });
                } else {
                    world.step(Op::Tick { ms: 10 });
                }
                let expected = match rule {
                    Rule::Ignore => 1,
                    Rule::Confirm => 0,
                };
                assert_eq!(
                    world.broken.len(),
                    expected,
                    "leave {leave}: {:?}",
                    world.broken
                );
                let held = world.table.live(&key(0), world.now_ms).is_some();
                assert_eq!(held, rule == Rule::Confirm, "leave {leave}");
            }
        }
    }

    /// An unconfirmed grant is still undone; an acknowledged one is kept.
    #[test]
    fn only_what_no_reply_confirmed_is_undone() {
        let mut world = World::new(Rule::Confirm);
        world.step(Op::Acquire {
            conn: 0,
            key: 0,
            token: 0,
            ttl: 50,
            sync: Some(10),
        });
        world.step(Op::Tick { ms: 10 });
        assert!(world.table.live(&key(0), world.now_ms).is_none(), "undone");
        world.step(Op::Acquire {
            conn: 0,
            key: 1,
            token: 0,
            ttl: 50,
            sync: Some(10),
        });
        world.step(Op::Ack);
        assert!(world.waiting.is_empty(), "acknowledged");
        world.step(Op::Leave { conn: 0 });
        assert!(world.table.live(&key(1), world.now_ms).is_some(), "kept");
        assert!(world.broken.is_empty(), "{:?}", world.broken);
    }
}
