//! Per-key FIFO queues of clients waiting for a lock (`LOCK.ACQUIRE … WAIT`),
//! with no Redis types: the module keys its waiters by blocked-client id,
//! the unit tests use plain values.
//!
//! A key is `(db, name)`. Looking a key up never allocates, so the hot path
//! (an ACQUIRE asking whether anyone waits) stays cheap; only a key that gets
//! its first waiter copies its name.
//!
//! A key's queue is ordered by arrival number, so a waiter that leaves from
//! anywhere in it (a timeout, a disconnect) is found by its number in
//! O(log n), not by a scan of everyone ahead of it. Waiters are behind a
//! pointer: the map's nodes stay small, so a key with one waiter costs no
//! more than it did as a list.
//!
//! A multi-key request (`LOCK.MACQUIRE … WAIT`) is one waiter queued on
//! each of its keys ([`WaitQueues::push`]), the same entry shared by
//! every queue, with one arrival number. Arrival numbers are global (one
//! counter for all keys), so they order any two waiters, on one key or not:
//! the oldest waiter of all is first in each of its keys' queues, and so can
//! only be kept waiting by the keys' holders, never by another waiter. That
//! is why serving a key's head once it is first everywhere
//! ([`WaitQueues::is_first_everywhere`]) never deadlocks (the property test
//! in `sim.rs` plays it out).

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Caller-chosen, unique among live waiters (the module uses the blocked
/// client's address).
pub type WaiterId = u64;

#[derive(Debug)]
struct KeyQueue<W> {
    /// By arrival number: the first entry is the head. A multi-key
    /// waiter's entry is shared with its other keys' queues.
    waiters: BTreeMap<u64, (WaiterId, Rc<W>)>,
    /// The timer armed for this key, with the unix ms it is due at.
    timer: Option<(u64, i64)>,
}

/// Where a waiter is queued: one key, or several (a multi-key request).
#[derive(Debug)]
enum Keys {
    One(Box<[u8]>),
    Many(Box<[Box<[u8]>]>),
}

impl Keys {
    fn as_slice(&self) -> &[Box<[u8]>] {
        match self {
            Keys::One(key) => std::slice::from_ref(key),
            Keys::Many(keys) => keys,
        }
    }
}

#[derive(Debug)]
struct Place {
    db: i32,
    keys: Keys,
    arrival: u64,
}

#[derive(Debug)]
pub struct WaitQueues<W> {
    by_db: HashMap<i32, HashMap<Box<[u8]>, KeyQueue<W>>>,
    /// Where each waiter is queued, and its arrival number there, to remove
    /// it on timeout or disconnect.
    index: HashMap<WaiterId, Place>,
    /// The arrival number of the next waiter, on any key.
    next: u64,
}

impl<W> Default for WaitQueues<W> {
    fn default() -> Self {
        Self {
            by_db: HashMap::new(),
            index: HashMap::new(),
            next: 0,
        }
    }
}

impl<W> WaitQueues<W> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Waiters on all keys.
    pub fn total(&self) -> usize {
        self.index.len()
    }

    /// Waiters on one key.
    pub fn len(&self, db: i32, key: &[u8]) -> usize {
        if self.index.is_empty() {
            return 0;
        }
        self.queue(db, key).map_or(0, |q| q.waiters.len())
    }

    pub fn is_queued(&self, id: WaiterId) -> bool {
        self.index.contains_key(&id)
    }

    /// Add a waiter at the tail of the queue of every key of `keys`
    /// (distinct, at least one), with one arrival number: a request for one
    /// key, or a multi-key request, which is one waiter in several queues.
    pub fn push(&mut self, db: i32, keys: &[&[u8]], id: WaiterId, waiter: W) {
        let arrival = self.arrive();
        let waiter = Rc::new(waiter);
        for key in keys {
            self.queue_mut(db, key)
                .waiters
                .insert(arrival, (id, Rc::clone(&waiter)));
        }
        let keys = match keys {
            [one] => Keys::One((*one).into()),
            many => Keys::Many(many.iter().map(|k| Box::<[u8]>::from(*k)).collect()),
        };
        self.index.insert(id, Place { db, keys, arrival });
    }

    fn arrive(&mut self) -> u64 {
        let arrival = self.next;
        self.next += 1;
        arrival
    }

    fn queue_mut(&mut self, db: i32, key: &[u8]) -> &mut KeyQueue<W> {
        self.by_db
            .entry(db)
            .or_default()
            .entry(key.into())
            .or_insert_with(|| KeyQueue {
                waiters: BTreeMap::new(),
                timer: None,
            })
    }

    /// Take the head of `key`'s queue (out of every queue it is in).
    pub fn pop_front(&mut self, db: i32, key: &[u8]) -> Option<(WaiterId, W)> {
        let id = self.head(db, key)?;
        self.remove(id).map(|waiter| (id, waiter))
    }

    /// The id of the head of `key`'s queue.
    pub fn head(&self, db: i32, key: &[u8]) -> Option<WaiterId> {
        let queue = self.queue(db, key)?;
        queue.waiters.first_key_value().map(|(_, (id, _))| *id)
    }

    /// Take a waiter out of its queues, wherever it is (and forget a key if
    /// that left it idle).
    pub fn remove(&mut self, id: WaiterId) -> Option<W> {
        self.leave(id).map(|(waiter, _)| waiter)
    }

    /// As [`WaitQueues::remove`], with the keys whose queues must be served
    /// again now that it left, by whatever way (served, failed, timed out,
    /// gone): every key of a waiter of several keys, which kept its place
    /// first in queues whose keys may be free, held for it while it waited
    /// for the others; none for a waiter of one key, which only ever waits
    /// while that key is busy (and whose key's change is looked at anyway).
    pub fn leave(&mut self, id: WaiterId) -> Option<(W, Vec<Box<[u8]>>)> {
        let place = self.index.remove(&id)?;
        let mut taken = None;
        for key in place.keys.as_slice() {
            let entry = self
                .by_db
                .get_mut(&place.db)
                .and_then(|keys| keys.get_mut(key))
                .and_then(|queue| queue.waiters.remove(&place.arrival));
            if let Some((_, waiter)) = entry {
                taken = Some(waiter);
            }
            self.forget_if_idle(place.db, key);
        }
        let again = match place.keys {
            Keys::One(_) => Vec::new(),
            Keys::Many(keys) => keys.into_vec(),
        };
        // Every queue's share of it is gone: this is the last.
        Rc::try_unwrap(taken?).ok().map(|waiter| (waiter, again))
    }

    /// The waiter the hand-off of `key` serves now: the head of its queue,
    /// if it is first in every queue it is in (a multi-key request needs
    /// all its keys at once). Arrival numbers are global, so the oldest
    /// waiter of all is always servable: serving only such heads never
    /// deadlocks. `None`: nobody waits, or the head waits for someone older
    /// on another of its keys, whose own hand-off serves it.
    pub fn servable(&self, db: i32, key: &[u8]) -> Option<WaiterId> {
        self.head(db, key)
            .filter(|id| self.is_first_everywhere(*id))
    }

    /// The db and the keys a waiter is queued on (several for a multi-key
    /// request).
    pub fn keys_of(&self, id: WaiterId) -> Option<(i32, &[Box<[u8]>])> {
        self.index
            .get(&id)
            .map(|place| (place.db, place.keys.as_slice()))
    }

    /// A queued waiter, by id.
    pub fn get(&self, id: WaiterId) -> Option<&W> {
        let place = self.index.get(&id)?;
        let key = place.keys.as_slice().first()?;
        let queue = self.queue(place.db, key)?;
        queue.waiters.get(&place.arrival).map(|(_, w)| &**w)
    }

    /// Whether a waiter is first in every queue it is in: only then may it
    /// be served (a multi-key request needs all its keys at once), and
    /// nobody older waits for any of its keys.
    pub fn is_first_everywhere(&self, id: WaiterId) -> bool {
        let Some(place) = self.index.get(&id) else {
            return false;
        };
        place
            .keys
            .as_slice()
            .iter()
            .all(|key| self.head(place.db, key) == Some(id))
    }

    /// `key`'s waiters, from the head.
    pub fn waiters(&self, db: i32, key: &[u8]) -> impl Iterator<Item = &W> {
        self.queue(db, key)
            .into_iter()
            .flat_map(|q| q.waiters.values().map(|(_, w)| &**w))
    }

    /// `key`'s waiters with their ids, from the head.
    pub fn waiters_with_ids(&self, db: i32, key: &[u8]) -> impl Iterator<Item = (WaiterId, &W)> {
        self.queue(db, key)
            .into_iter()
            .flat_map(|q| q.waiters.values().map(|(id, w)| (*id, &**w)))
    }

    /// The timer armed for `key`, if any: `(timer id, due unix ms)`.
    pub fn timer(&self, db: i32, key: &[u8]) -> Option<(u64, i64)> {
        self.queue(db, key)?.timer
    }

    /// Record the timer armed for `key` (or none). Ignored when the key has no
    /// queue entry.
    pub fn set_timer(&mut self, db: i32, key: &[u8], timer: Option<(u64, i64)>) {
        if let Some(queue) = self.by_db.get_mut(&db).and_then(|k| k.get_mut(key)) {
            queue.timer = timer;
        }
    }

    /// Forget `key` if nobody waits on it and no timer is armed for it.
    pub fn forget_if_idle(&mut self, db: i32, key: &[u8]) {
        if let Some(keys) = self.by_db.get_mut(&db) {
            if keys
                .get(key)
                .is_some_and(|q| q.waiters.is_empty() && q.timer.is_none())
            {
                keys.remove(key);
            }
            if keys.is_empty() {
                self.by_db.remove(&db);
            }
        }
    }

    /// The keys that have waiters in `db` (every db when `db` is `None`).
    pub fn keys_with_waiters(&self, db: Option<i32>) -> Vec<(i32, Box<[u8]>)> {
        self.by_db
            .iter()
            .filter(|(d, _)| db.is_none_or(|want| want == **d))
            .flat_map(|(d, keys)| {
                keys.iter()
                    .filter(|(_, q)| !q.waiters.is_empty())
                    .map(move |(k, _)| (*d, k.clone()))
            })
            .collect()
    }

    /// Take every waiter of every key, and every armed timer.
    pub fn drain(&mut self) -> (Vec<(WaiterId, W)>, Vec<u64>) {
        let mut shares = Vec::new();
        let mut timers = Vec::new();
        for (_, keys) in self.by_db.drain() {
            for (_, queue) in keys {
                shares.extend(queue.waiters.into_values());
                timers.extend(queue.timer.map(|(t, _)| t));
            }
        }
        self.index.clear();
        // A multi-key waiter is in several queues: taken once, with its
        // last share.
        let waiters = shares
            .into_iter()
            .filter_map(|(id, w)| Rc::try_unwrap(w).ok().map(|w| (id, w)))
            .collect();
        (waiters, timers)
    }

    fn queue(&self, db: i32, key: &[u8]) -> Option<&KeyQueue<W>> {
        self.by_db.get(&db)?.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_come_out_in_arrival_order_per_key() {
        let mut q = WaitQueues::new();
        for id in 1..=5 {
            q.push(0, &[&b"k"[..]], id, id * 10);
        }
        q.push(0, &[&b"other"[..]], 99, 990);
        q.push(1, &[&b"k"[..]], 7, 70);
        assert_eq!(
            (q.len(0, b"k"), q.len(0, b"other"), q.len(1, b"k")),
            (5, 1, 1)
        );
        assert_eq!(q.total(), 7);
        let listed: Vec<u64> = q.waiters(0, b"k").copied().collect();
        let ids: Vec<u64> = q.waiters_with_ids(0, b"k").map(|(id, _)| id).collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 5]);
        assert_eq!(listed, vec![10, 20, 30, 40, 50]);
        assert_eq!(q.waiters(0, b"none").count(), 0);
        let order: Vec<u64> =
            std::iter::from_fn(|| q.pop_front(0, b"k").map(|(id, _)| id)).collect();
        assert_eq!(order, vec![1, 2, 3, 4, 5]);
        assert_eq!(q.len(0, b"k"), 0);
        assert_eq!(q.total(), 2);
    }

    #[test]
    fn a_waiter_leaves_from_the_middle_and_the_order_holds() {
        let mut q = WaitQueues::new();
        for id in 1..=4 {
            q.push(0, &[&b"k"[..]], id, ());
        }
        assert_eq!(q.remove(2), Some(()));
        assert_eq!(q.remove(2), None);
        assert!(!q.is_queued(2) && q.is_queued(3));
        assert_eq!(q.pop_front(0, b"k").map(|w| w.0), Some(1));
        assert_eq!(q.pop_front(0, b"k").map(|w| w.0), Some(3));
        assert_eq!(q.len(0, b"k"), 1);
    }

    /// 50,000 waiters leave one queue last come first, as a crowd that
    /// disconnects might: found by a scan from the head, that is 1.25
    /// billion steps (seconds even in a release build); by arrival number,
    /// well under a second in a debug build on a busy machine.
    #[test]
    fn waiters_leave_a_long_queue_from_its_tail_one_by_one() {
        let mut q = WaitQueues::new();
        let n = 50_000;
        for id in 0..n {
            q.push(0, &[&b"k"[..]], id, [id; 16]);
        }
        // (No timing here: the machine is noisy. The scale benchmark
        // measures the cost of leaving from the head and from the tail.)
        for id in (n / 2..n).rev() {
            assert_eq!(q.remove(id), Some([id; 16]));
            assert_eq!(q.len(0, b"k"), id as usize);
        }
        for id in (0..n / 2).rev() {
            assert!(q.remove(id).is_some());
        }
        assert_eq!((q.total(), q.len(0, b"k")), (0, 0));
        assert!(q.keys_with_waiters(None).is_empty());
    }

    #[test]
    fn arrival_order_holds_after_the_queue_empties_and_fills_again() {
        let mut q = WaitQueues::new();
        q.push(0, &[&b"k"[..]], 1, ());
        q.push(0, &[&b"k"[..]], 2, ());
        assert_eq!(q.remove(1), Some(()));
        assert_eq!(q.pop_front(0, b"k").map(|w| w.0), Some(2));
        q.forget_if_idle(0, b"k");
        for id in [3, 4, 5] {
            q.push(0, &[&b"k"[..]], id, ());
        }
        assert_eq!(q.remove(4), Some(()));
        let ids: Vec<u64> = q.waiters_with_ids(0, b"k").map(|(id, _)| id).collect();
        assert_eq!(ids, vec![3, 5]);
    }

    #[test]
    fn idle_keys_are_forgotten_but_not_while_a_timer_is_armed() {
        let mut q: WaitQueues<()> = WaitQueues::new();
        q.push(0, &[&b"k"[..]], 1, ());
        q.set_timer(0, b"k", Some((42, 1_000)));
        q.pop_front(0, b"k");
        q.forget_if_idle(0, b"k");
        assert_eq!(q.timer(0, b"k"), Some((42, 1_000)));
        q.set_timer(0, b"k", None);
        q.forget_if_idle(0, b"k");
        assert_eq!(q.timer(0, b"k"), None);
        assert!(q.keys_with_waiters(None).is_empty());
    }

    #[test]
    fn keys_with_waiters_by_db_and_drain() {
        let mut q = WaitQueues::new();
        q.push(0, &[&b"a"[..]], 1, 'a');
        q.push(2, &[&b"b"[..]], 2, 'b');
        q.set_timer(2, b"b", Some((5, 10)));
        assert_eq!(q.keys_with_waiters(Some(2)), vec![(2, b"b"[..].into())]);
        assert_eq!(q.keys_with_waiters(None).len(), 2);
        let (mut waiters, timers) = q.drain();
        waiters.sort();
        assert_eq!((waiters, timers), (vec![(1, 'a'), (2, 'b')], vec![5]));
        assert_eq!(q.total(), 0);
    }

    use proptest::prelude::*;

    proptest! {
        /// Against a plain list of (key, id) in arrival order: every pop
        /// returns the earliest waiter still queued for that key, whatever
        /// left from the middle before it, and the counts always agree.
        #[test]
        fn fifo_per_key_under_any_mix_of_arrivals_departures_and_grants(
            ops in proptest::collection::vec((0u8..3, 0u8..3, 0u64..40), 1..300)
        ) {
            let mut queues = WaitQueues::new();
            let mut arrivals: Vec<(u8, u64)> = Vec::new();
            let mut next_id = 1u64;
            for (op, key, pick) in ops {
                let name = [key];
                match op {
                    0 => {
                        queues.push(0, &[&name], next_id, next_id);
                        arrivals.push((key, next_id));
                        next_id += 1;
                    }
                    1 => {
                        let id = pick % next_id;
                        let expected = arrivals.iter().position(|(_, w)| *w == id);
                        prop_assert_eq!(queues.remove(id).is_some(), expected.is_some());
                        if let Some(at) = expected {
                            arrivals.remove(at);
                        }
                    }
                    _ => {
                        let expected = arrivals.iter().position(|(k, _)| *k == key);
                        let got = queues.pop_front(0, &name).map(|(id, _)| id);
                        prop_assert_eq!(got, expected.map(|at| arrivals.remove(at).1));
                    }
                }
                for k in 0u8..3 {
                    let want = arrivals.iter().filter(|(a, _)| *a == k).count();
                    prop_assert_eq!(queues.len(0, &[k]), want);
                }
                prop_assert_eq!(queues.total(), arrivals.len());
            }
        }
    }
}
