//! The lease groups a server knows (`LOCK.LEASE`), and the holds attached
//! to each, as data: a registry the module keeps one of (`src/state/lease_registry.rs`,
//! its thread-local) and the unit tests below drive alone. Nothing here
//! reads a clock or calls Redis: times come in as arguments.
//!
//! An attached hold is known by its fence and its key (db and name):
//! fences never repeat, but one multi-key grant (`LOCK.MACQUIRE … LEASE`)
//! has one fence on each of its keys, each key a hold of its own, released,
//! expired or deleted on its own. Each path that adds or removes a leased
//! hold tells the registry: a grant, the master's effects
//! ([`Registry::attached`]); an RDB load or a `RESTORE`
//! ([`Registry::loaded`], then, for `RESTORE`, [`Registry::take_copies`]);
//! a release, an expiry, a `DEL` or an overwrite ([`Registry::detached`]);
//! a flush ([`Registry::flushed`]); `SWAPDB` ([`Registry::swapped`]);
//! `RENAME`, `MOVE` and `RESTORE … REPLACE`, whose key leaves its old name
//! (Redis unlinks it there: [`Registry::detached`]) and arrives under its
//! new one ([`Registry::arrived`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::decide::Attach;
use crate::errors::LockError;
use crate::group::{self, LeaseId};
use crate::hold::Holds;

/// A hold attached to a lease: its fence and its key, by database (one
/// fence may name holds on several keys: a multi-key grant).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attached {
    pub fence: u64,
    pub db: i32,
    pub key: Box<[u8]>,
}

#[derive(Debug)]
struct Lease {
    id: LeaseId,
    ttl_ms: i64,
    deadline_ms: i64,
    owner: Option<Box<[u8]>>,
    /// Attached holds by the horizon their key's TTL runs to, then fence
    /// and key: the first ones come due first.
    holds: BTreeSet<(i64, Attached)>,
    /// Each attached hold's horizon, by fence first (a grant's keys are
    /// together).
    horizons: BTreeMap<Attached, i64>,
}

#[derive(Debug, Default)]
pub struct Registry {
    leases: HashMap<u64, Lease>,
    numbers: HashMap<LeaseId, u64>,
    /// Every lease's deadline, then number.
    deadlines: BTreeSet<(i64, u64)>,
    /// The copies among the holds of the key loaded last ([`loaded`]), for
    /// its `restore` event ([`take_copies`]).
    copies: Option<(i32, Box<[u8]>, Vec<RestoredCopy>)>,
}

/// A hold loaded by `RESTORE` that is a copy of one its lease has under
/// another key (`group::restored_is_copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoredCopy {
    pub fence: u64,
    pub number: u64,
    /// The deadline its lease had when it was saved: its own from now on.
    pub lease_deadline_ms: i64,
}

/// A lease's own state, as `LOCK.LEASESET` replicates it.
pub struct LeaseState {
    pub id: LeaseId,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
    pub owner: Option<Box<[u8]>>,
}

/// A lease that ended, taken out of the registry with its holds.
pub struct Ended {
    pub id: LeaseId,
    pub deadline_ms: i64,
    /// Each attached hold.
    pub holds: Vec<Attached>,
}

/// What `LOCK.LEASE INFO` shows of a lease.
pub struct Shown {
    pub number: u64,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
    pub owner: Option<Box<[u8]>>,
    pub holds: usize,
    /// Up to `max_keys` of its keys, each with its database (in the order
    /// their TTLs come due).
    pub keys: Vec<(i32, Box<[u8]>)>,
}

impl Registry {
    /// Lease `number`'s own state.
    pub fn state(&self, number: u64) -> Option<LeaseState> {
        {
            let l = self.leases.get(&number)?;
            Some(LeaseState {
                id: l.id,
                ttl_ms: l.ttl_ms,
                deadline_ms: l.deadline_ms,
                owner: l.owner.clone(),
            })
        }
    }

    /// Lease `number` now ends at `deadline_ms` (a keepalive).
    pub fn move_deadline(&mut self, number: u64, deadline_ms: i64) {
        {
            if let Some(lease) = self.leases.get_mut(&number) {
                self.deadlines.remove(&(lease.deadline_ms, number));
                lease.deadline_ms = deadline_ms;
                self.deadlines.insert((deadline_ms, number));
            }
        }
    }

    /// The first hold of lease `number` whose key's horizon its deadline
    /// (`deadline_ms`, with ttls of `ttl_ms`) may reach before the next
    /// keepalive, and the horizon it moves to.
    pub fn first_due(&self, number: u64, deadline_ms: i64, ttl_ms: i64) -> Option<(Attached, i64)> {
        {
            let lease = self.leases.get(&number)?;
            let (horizon, at) = lease.holds.iter().next()?;
            group::due(*horizon, deadline_ms, ttl_ms).then(|| {
                let until = deadline_ms.saturating_add(group::horizon(ttl_ms, lease.holds.len()));
                (at.clone(), until)
            })
        }
    }

    /// Take lease `number` out, with its holds (it ends).
    pub fn take(&mut self, number: u64) -> Option<Ended> {
        {
            let lease = self.leases.remove(&number)?;
            self.numbers.remove(&lease.id);
            self.deadlines.remove(&(lease.deadline_ms, number));
            Some(Ended {
                id: lease.id,
                deadline_ms: lease.deadline_ms,
                holds: lease.holds.into_iter().map(|(_, at)| at).collect(),
            })
        }
    }

    /// When the earliest lease ends (unix ms), if any lease lives.
    pub fn earliest_deadline(&self) -> Option<i64> {
        self.deadlines.iter().next().map(|(d, _)| *d)
    }

    /// A lease that no longer runs at `now_ms`, if any.
    pub fn first_over(&self, now_ms: i64) -> Option<u64> {
        {
            self.deadlines
                .iter()
                .next()
                .filter(|(d, _)| !group::is_live(*d, now_ms))
                .map(|(_, n)| *n)
        }
    }

    /// Lease groups that live now (`INFO lock`).
    pub fn live(&self) -> usize {
        self.leases.len()
    }

    /// When the lease numbered `number` ends (unix ms), if it exists.
    pub fn deadline(&self, number: u64) -> Option<i64> {
        self.leases.get(&number).map(|l| l.deadline_ms)
    }

    /// The lease named by `id`, if it lives: its number.
    pub fn number_of(&self, id: &LeaseId) -> Option<u64> {
        self.numbers.get(id).copied()
    }

    /// `LEASE id` on an acquire: where a hold attached to the lease now runs
    /// to, or `NOLEASE` if it is gone (or never was, here).
    pub fn attach_to(&self, id: &LeaseId, now_ms: i64) -> Result<Attach, LockError> {
        {
            let number = *self.numbers.get(id).ok_or(LockError::NoLease)?;
            let lease = self.leases.get(&number).ok_or(LockError::NoLease)?;
            if !group::is_live(lease.deadline_ms, now_ms) {
                return Err(LockError::NoLease);
            }
            let until_ms = lease
                .deadline_ms
                .saturating_add(group::horizon(lease.ttl_ms, lease.holds.len() + 1));
            Ok(Attach { number, until_ms })
        }
    }

    /// A hold with `fence` on `key` in `db`, running to `horizon_ms`, is
    /// attached to lease `number` now (granted, applied from the master, loaded
    /// from an RDB). Whether that lease exists here.
    pub fn attached(
        &mut self,
        db: i32,
        key: &[u8],
        fence: u64,
        number: u64,
        horizon_ms: i64,
    ) -> bool {
        {
            let Some(lease) = self.leases.get_mut(&number) else {
                return false;
            };
            let at = Attached {
                fence,
                db,
                key: key.into(),
            };
            if let Some(old) = lease.horizons.insert(at.clone(), horizon_ms) {
                lease.holds.remove(&(old, at.clone()));
            }
            lease.holds.insert((horizon_ms, at));
            true
        }
    }

    /// The copies [`loaded`] found among the holds of `key` in `db`, the key
    /// that was just restored: forgotten here.
    pub fn take_copies(&mut self, db: i32, key: &[u8]) -> Vec<RestoredCopy> {
        match self.copies.take() {
            Some((d, k, copies)) if d == db && *k == *key => copies,
            _ => Vec::new(),
        }
    }

    /// `FLUSHDB`/`FLUSHALL` (`None`: every db): the holds there are gone.
    pub fn flushed(&mut self, db: Option<i32>) {
        {
            for lease in self.leases.values_mut() {
                let gone: Vec<(i64, Attached)> = lease
                    .holds
                    .iter()
                    .filter(|(_, at)| db.is_none_or(|db| at.db == db))
                    .cloned()
                    .collect();
                for entry in gone {
                    lease.horizons.remove(&entry.1);
                    lease.holds.remove(&entry);
                }
            }
        }
    }

    /// `SWAPDB a b`: the holds of each database are the other's now.
    pub fn swapped(&mut self, a: i32, b: i32) {
        {
            for lease in self.leases.values_mut() {
                let moved: Vec<(i64, Attached)> = lease
                    .holds
                    .iter()
                    .filter(|(_, at)| at.db == a || at.db == b)
                    .cloned()
                    .collect();
                for entry in &moved {
                    lease.horizons.remove(&entry.1);
                    lease.holds.remove(entry);
                }
                for (horizon, mut at) in moved {
                    at.db = if at.db == a { b } else { a };
                    lease.horizons.insert(at.clone(), horizon);
                    lease.holds.insert((horizon, at));
                }
            }
        }
    }

    /// The lease named by `id`, as `LOCK.LEASE INFO` shows it, if it lives.
    pub fn shown(&self, id: &LeaseId, max_keys: usize) -> Option<Shown> {
        {
            let number = *self.numbers.get(id)?;
            let lease = self.leases.get(&number)?;
            let mut keys: Vec<(i32, Box<[u8]>)> = Vec::new();
            for (_, at) in &lease.holds {
                if keys.len() >= max_keys {
                    break;
                }
                if !keys.iter().any(|(db, key)| *db == at.db && *key == at.key) {
                    keys.push((at.db, at.key.clone()));
                }
            }
            Some(Shown {
                number,
                ttl_ms: lease.ttl_ms,
                deadline_ms: lease.deadline_ms,
                owner: lease.owner.clone(),
                holds: lease.holds.len(),
                keys,
            })
        }
    }

    /// The master's `LOCK.LEASEDEL id`: the lease is gone (its holds went by
    /// their own effects).
    pub fn apply_del(&mut self, id: &LeaseId) {
        {
            if let Some(number) = self.numbers.remove(id) {
                if let Some(lease) = self.leases.remove(&number) {
                    self.deadlines.remove(&(lease.deadline_ms, number));
                }
            }
        }
    }

    /// Whether the lease numbered `number` still runs at `now_ms`. A hold
    /// attached to a lease that does not is held by nobody, even in the
    /// instant before the lease's timer ends it.
    pub fn is_live(&self, number: u64, now_ms: i64) -> bool {
        self.deadline(number)
            .is_some_and(|d| group::is_live(d, now_ms))
    }

    /// Add or update a lease (a grant, the master's `LOCK.LEASESET`, an RDB),
    /// keeping its attached holds. (The caller keeps fences above `number`:
    /// lease numbers are fences.)
    pub fn set(
        &mut self,
        id: LeaseId,
        number: u64,
        ttl_ms: i64,
        deadline_ms: i64,
        owner: Option<&[u8]>,
    ) {
        if let Some(lease) = self.leases.get_mut(&number) {
            self.deadlines.remove(&(lease.deadline_ms, number));
            lease.ttl_ms = ttl_ms;
            lease.deadline_ms = deadline_ms;
            lease.owner = owner.map(Box::from);
        } else {
            // A number belongs to one id: an id seen under another number
            // (an inconsistent stream) loses its old lease's entry.
            if let Some(old) = self.numbers.insert(id, number) {
                if let Some(lease) = self.leases.remove(&old) {
                    self.deadlines.remove(&(lease.deadline_ms, old));
                }
            }
            self.leases.insert(
                number,
                Lease {
                    id,
                    ttl_ms,
                    deadline_ms,
                    owner: owner.map(Box::from),
                    holds: BTreeSet::new(),
                    horizons: BTreeMap::new(),
                },
            );
        }
        self.deadlines.insert((deadline_ms, number));
    }

    /// A hold with `fence` on `key` in `db`, of lease `number`, is loaded, its
    /// key running to `horizon_ms`; saved when its lease ended at
    /// `lease_deadline_ms`. Whether that lease exists here. Loaded with a whole
    /// dataset (`whole`: an RDB, the AOF, a full sync), it is attached now: no
    /// event follows. Loaded by `RESTORE`, it is attached by the `restore`
    /// event that follows once the server has stored the key ([`Registry::arrived`];
    /// a key the server drops, its TTL past, is never attached). A copy
    /// ([`group::restored_is_copy`]) is noted for that event
    /// ([`Registry::take_copies`]), which detaches it; in a whole dataset it
    /// cannot be told from a multi-key grant's keys (loaded one by one, each
    /// but the first looks like a copy of the first), and only a `RESTORE`
    /// replayed from the AOF has an event to detach it.
    #[allow(clippy::too_many_arguments)]
    pub fn loaded(
        &mut self,
        db: i32,
        key: &[u8],
        fence: u64,
        number: u64,
        horizon_ms: i64,
        lease_deadline_ms: i64,
        whole: bool,
    ) -> bool {
        if self
            .copies
            .as_ref()
            .is_some_and(|(d, k, _)| *d != db || **k != *key)
        {
            self.copies = None;
        }
        let Some(lease) = self.leases.get(&number) else {
            return false;
        };
        let from = Attached {
            fence,
            db: i32::MIN,
            key: Box::default(),
        };
        let same_grant = lease
            .horizons
            .range(from..)
            .map(|(at, _)| at)
            .take_while(|at| at.fence == fence);
        let (mut here, mut elsewhere) = (false, false);
        for at in same_grant {
            if at.db == db && *at.key == *key {
                here = true;
            } else {
                elsewhere = true;
            }
            if here && elsewhere {
                break;
            }
        }
        let copy = group::restored_is_copy(elsewhere, here);
        // The verdict replaces any earlier one on the same hold of this key
        // (a `RESTORE` the server refused after the load, whose event never
        // came).
        if let Some((_, _, copies)) = self.copies.as_mut() {
            copies.retain(|c| c.fence != fence || c.number != number);
        }
        if copy {
            let (_, _, copies) = self
                .copies
                .get_or_insert_with(|| (db, key.into(), Vec::new()));
            copies.push(RestoredCopy {
                fence,
                number,
                lease_deadline_ms,
            });
        }
        if whole {
            self.attached(db, key, fence, number, horizon_ms);
        }
        true
    }

    /// Every hold of `key` in `db` (`holds`) that names a lease group is
    /// attached to it there, running to its deadline: the key arrived under
    /// this name (`RENAME`, `MOVE`, `RESTORE`), and Redis unlinked it from its
    /// old one, which detached it. Holds of a lease that is gone stay as they
    /// are (nobody's).
    pub fn arrived(&mut self, db: i32, key: &[u8], holds: &Holds) {
        for hold in holds.all() {
            if let Some(number) = hold.tags.lease() {
                self.attached(db, key, hold.fence, number, hold.deadline_ms);
            }
        }
    }

    /// The hold with `fence` on `key` in `db`, attached to lease `number`, is
    /// gone (released, expired, revoked, deleted); the other keys of its grant
    /// stay attached.
    pub fn detached(&mut self, db: i32, key: &[u8], fence: u64, number: u64) {
        let at = Attached {
            fence,
            db,
            key: key.into(),
        };
        if let Some(lease) = self.leases.get_mut(&number) {
            if let Some(horizon) = lease.horizons.remove(&at) {
                lease.holds.remove(&(horizon, at));
            }
        }
    }

    /// A hold attached to lease `number` left the keyspace by Redis' hand
    /// (`DEL`, an overwrite, an eviction; a replica applying its master's
    /// `DEL`): [`Registry::detached`]. `None` when the server could not name
    /// the key (it always can from 7.0): every hold with that fence goes, which
    /// is only wrong for a multi-key grant, whose other keys then end by their
    /// own TTL.
    pub fn detached_unlinked(&mut self, key: Option<(i32, &[u8])>, fence: u64, number: u64) {
        if let Some((db, key)) = key {
            return self.detached(db, key, fence, number);
        }
        if let Some(lease) = self.leases.get_mut(&number) {
            let gone: Vec<Attached> = lease
                .horizons
                .keys()
                .filter(|at| at.fence == fence)
                .cloned()
                .collect();
            for at in gone {
                if let Some(horizon) = lease.horizons.remove(&at) {
                    lease.holds.remove(&(horizon, at));
                }
            }
        }
    }

    /// Every lease: its number and state (an RDB's aux field saves them).
    pub fn all(&self) -> Vec<(u64, LeaseState)> {
        self.leases
            .keys()
            .filter_map(|&n| self.state(n).map(|s| (n, s)))
            .collect()
    }

    /// The leases are these now (a full load replaces the dataset); their
    /// holds attach as the keyspace loads.
    pub fn replace_all(&mut self, leases: Vec<(u64, LeaseState)>) {
        self.leases.clear();
        self.numbers.clear();
        self.deadlines.clear();
        for (number, lease) in leases {
            self.set(
                lease.id,
                number,
                lease.ttl_ms,
                lease.deadline_ms,
                lease.owner.as_deref(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::LEASE_ID_BYTES;

    fn id(n: u8) -> LeaseId {
        LeaseId([n; LEASE_ID_BYTES])
    }

    fn keys_of(registry: &Registry, lease: u8) -> Vec<(i32, Box<[u8]>)> {
        registry
            .shown(&id(lease), 100)
            .map(|s| s.keys)
            .unwrap_or_default()
    }

    #[test]
    fn a_hold_attaches_to_a_live_lease_and_detaches_by_its_key() {
        let mut r = Registry::default();
        assert_eq!(r.attach_to(&id(1), 0), Err(LockError::NoLease));
        r.set(id(1), 7, 1_000, 5_000, Some(b"worker"));
        let attach = r.attach_to(&id(1), 4_000).unwrap();
        assert_eq!(attach.number, 7);
        assert!(attach.until_ms > 5_000, "the key runs past the lease");
        assert_eq!(r.attach_to(&id(1), 5_001), Err(LockError::NoLease), "over");
        assert!(r.attached(0, b"a", 11, 7, attach.until_ms));
        assert!(r.attached(0, b"b\0\r\n", 11, 7, attach.until_ms));
        assert!(!r.attached(0, b"c", 12, 8, 0), "no such lease");
        assert_eq!(r.shown(&id(1), 100).unwrap().holds, 2);
        r.detached(0, b"a", 11, 7);
        assert_eq!(keys_of(&r, 1), vec![(0, Box::from(&b"b\0\r\n"[..]))]);
        // Unnamed (no key): every hold of that fence goes.
        r.detached_unlinked(None, 11, 7);
        assert_eq!(r.shown(&id(1), 100).unwrap().holds, 0);
    }

    #[test]
    fn leases_end_in_deadline_order_and_take_their_holds() {
        let mut r = Registry::default();
        r.set(id(1), 1, 1_000, 9_000, None);
        r.set(id(2), 2, 1_000, 3_000, None);
        r.attached(0, b"k", 5, 2, 4_000);
        assert_eq!(r.earliest_deadline(), Some(3_000));
        assert_eq!(r.first_over(3_000), None, "live through its deadline");
        assert_eq!(r.first_over(3_001), Some(2));
        r.move_deadline(2, 10_000);
        assert_eq!(r.first_over(9_001), Some(1), "moved past the other");
        let ended = r.take(2).unwrap();
        assert_eq!(ended.holds.len(), 1);
        assert_eq!(r.number_of(&id(2)), None);
        assert_eq!(r.live(), 1);
        assert!(r.is_live(1, 9_000) && !r.is_live(1, 9_001));
    }

    #[test]
    fn flush_and_swapdb_move_or_drop_the_holds_of_their_databases() {
        let mut r = Registry::default();
        r.set(id(1), 1, 1_000, 9_000, None);
        r.attached(0, b"a", 5, 1, 10_000);
        r.attached(1, b"b", 6, 1, 10_000);
        r.attached(2, b"c", 7, 1, 10_000);
        r.swapped(0, 1);
        let mut keys = keys_of(&r, 1);
        keys.sort();
        assert_eq!(
            keys,
            vec![
                (0, Box::from(&b"b"[..])),
                (1, Box::from(&b"a"[..])),
                (2, Box::from(&b"c"[..]))
            ]
        );
        r.flushed(Some(2));
        assert_eq!(r.shown(&id(1), 100).unwrap().holds, 2);
        r.flushed(None);
        assert_eq!(r.shown(&id(1), 100).unwrap().holds, 0);
    }

    #[test]
    fn a_restored_hold_its_lease_has_under_another_key_is_a_copy() {
        let mut r = Registry::default();
        r.set(id(1), 1, 1_000, 9_000, None);
        r.attached(0, b"original", 5, 1, 10_000);
        // RESTORE of its DUMP under another name: a copy, noted for the
        // restore event, not attached.
        assert!(r.loaded(0, b"copy", 5, 1, 10_000, 9_000, false));
        let copies = r.take_copies(0, b"copy");
        assert_eq!(copies.len(), 1);
        assert_eq!(copies[0].lease_deadline_ms, 9_000);
        assert!(r.take_copies(0, b"copy").is_empty(), "taken once");
        // Over itself (RESTORE … REPLACE): the same hold.
        assert!(r.loaded(0, b"original", 5, 1, 10_000, 9_000, false));
        assert!(r.take_copies(0, b"original").is_empty());
        // A lease this server does not know: not loaded here.
        assert!(!r.loaded(0, b"x", 6, 2, 10_000, 9_000, true));
    }

    #[test]
    fn a_full_load_replaces_every_lease_and_an_id_keeps_one_number() {
        let mut r = Registry::default();
        r.set(id(1), 1, 1_000, 9_000, None);
        r.set(id(1), 3, 1_000, 9_000, None);
        assert_eq!(r.number_of(&id(1)), Some(3), "an id has one number");
        assert_eq!(r.live(), 1);
        let saved = r.all();
        r.set(id(2), 4, 1_000, 9_000, None);
        r.replace_all(saved);
        assert_eq!(r.live(), 1);
        assert_eq!(r.state(3).map(|s| s.id), Some(id(1)));
        assert_eq!(r.number_of(&id(2)), None);
        r.apply_del(&id(1));
        assert_eq!(r.live(), 0);
    }
}
