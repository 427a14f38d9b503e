//! Lease groups' state (`LOCK.LEASE`): the leases this server knows, and
//! the holds attached to each. What happens when one is granted, kept
//! alive, revoked or runs out is `leases.rs`; what the core decides about
//! them (the id, the key horizon) is `redis_lock_core::group`.
//!
//! Module-wide state, touched only here (main thread only, hence a
//! thread-local; nothing here calls into Redis but the RDB's reads and
//! writes): the leases by number (the public one `LOCK.INFO` shows) and by
//! id (the secret the client holds), each with its ttl, its deadline, its
//! label and its attached holds, by the key horizon each runs to; and all
//! leases' deadlines, earliest first.
//!
//! An attached hold is known here by its fence and its key (db and name):
//! fences never repeat, but one multi-key grant (`LOCK.MACQUIRE … LEASE`)
//! has one fence on each of its keys, each key a hold of its own, released,
//! expired or deleted on its own. Each path that adds or removes a leased
//! hold tells this file:
//! a grant, the master's effects ([`attached`]); an RDB load or a
//! `RESTORE` ([`loaded`], then, for `RESTORE`, [`take_copies`]); a release,
//! an expiry, a `DEL` or an overwrite ([`detached`]); a flush ([`flushed`]);
//! `SWAPDB` ([`swapped`]); `RENAME`, `MOVE` and `RESTORE … REPLACE`, whose
//! key leaves its old name (Redis unlinks it there: [`detached`]) and
//! arrives under its new one ([`arrived`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use redis_lock_core::decide::Attach;
use redis_lock_core::errors::LockError;
use redis_lock_core::group::{self, LeaseId};
use redis_lock_core::hold::{Hold, Holds, MyHold};

use crate::fence;

/// A hold attached to a lease: its fence and its key, by database (one
/// fence may name holds on several keys: a multi-key grant).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attached {
    pub fence: u64,
    pub db: i32,
    pub key: Box<[u8]>,
}

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

#[derive(Default)]
struct Registry {
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

thread_local! {
    static LEASES: RefCell<Registry> = RefCell::new(Registry::default());
}

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    LEASES.with(|l| f(&mut l.borrow_mut()))
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

/// `token`'s live hold on a key: a hold attached to a lease group that ran
/// out is nobody's, even in the instant before the lease's timer ends it.
pub fn live_mine(holds: &Holds, token: Option<&[u8]>, now_ms: i64) -> Option<MyHold> {
    holds
        .mine(token, now_ms)
        .filter(|mine| mine.lease.is_none_or(|n| is_live(n, now_ms)))
}

/// Lease `number`'s own state.
pub fn state(number: u64) -> Option<LeaseState> {
    with(|r| {
        let l = r.leases.get(&number)?;
        Some(LeaseState {
            id: l.id,
            ttl_ms: l.ttl_ms,
            deadline_ms: l.deadline_ms,
            owner: l.owner.clone(),
        })
    })
}

/// Lease `number` now ends at `deadline_ms` (a keepalive).
pub fn move_deadline(number: u64, deadline_ms: i64) {
    with(|r| {
        if let Some(lease) = r.leases.get_mut(&number) {
            r.deadlines.remove(&(lease.deadline_ms, number));
            lease.deadline_ms = deadline_ms;
            r.deadlines.insert((deadline_ms, number));
        }
    });
}

/// The first hold of lease `number` whose key's horizon its deadline
/// (`deadline_ms`, with ttls of `ttl_ms`) may reach before the next
/// keepalive, and the horizon it moves to.
pub fn first_due(number: u64, deadline_ms: i64, ttl_ms: i64) -> Option<(Attached, i64)> {
    with(|r| {
        let lease = r.leases.get(&number)?;
        let (horizon, at) = lease.holds.iter().next()?;
        group::due(*horizon, deadline_ms, ttl_ms).then(|| {
            let until = deadline_ms.saturating_add(group::horizon(ttl_ms, lease.holds.len()));
            (at.clone(), until)
        })
    })
}

/// Take lease `number` out, with its holds (it ends).
pub fn take(number: u64) -> Option<Ended> {
    with(|r| {
        let lease = r.leases.remove(&number)?;
        r.numbers.remove(&lease.id);
        r.deadlines.remove(&(lease.deadline_ms, number));
        Some(Ended {
            id: lease.id,
            deadline_ms: lease.deadline_ms,
            holds: lease.holds.into_iter().map(|(_, at)| at).collect(),
        })
    })
}

/// When the earliest lease ends (unix ms), if any lease lives.
pub fn earliest_deadline() -> Option<i64> {
    with(|r| r.deadlines.iter().next().map(|(d, _)| *d))
}

/// A lease that no longer runs at `now_ms`, if any.
pub fn first_over(now_ms: i64) -> Option<u64> {
    with(|r| {
        r.deadlines
            .iter()
            .next()
            .filter(|(d, _)| !group::is_live(*d, now_ms))
            .map(|(_, n)| *n)
    })
}

/// Lease groups that live now (`INFO lock`).
pub fn live() -> usize {
    with(|r| r.leases.len())
}

/// Whether the lease numbered `number` still runs at `now_ms`. A hold
/// attached to a lease that does not is held by nobody, even in the instant
/// before the lease's timer ends it.
pub fn is_live(number: u64, now_ms: i64) -> bool {
    deadline(number).is_some_and(|d| group::is_live(d, now_ms))
}

/// When `hold` ends, as replies show it (`group::shown_deadline`).
pub fn shown_deadline(hold: &Hold) -> Option<i64> {
    let lease = hold.tags.lease().and_then(deadline);
    group::shown_deadline(hold.deadline(), lease)
}

/// When the lease numbered `number` ends (unix ms), if it exists.
pub fn deadline(number: u64) -> Option<i64> {
    with(|r| r.leases.get(&number).map(|l| l.deadline_ms))
}

/// Add or update a lease (a grant, the master's `LOCK.LEASESET`, an RDB),
/// keeping its attached holds.
pub fn set(id: LeaseId, number: u64, ttl_ms: i64, deadline_ms: i64, owner: Option<&[u8]>) {
    with(|r| {
        if let Some(lease) = r.leases.get_mut(&number) {
            r.deadlines.remove(&(lease.deadline_ms, number));
            lease.ttl_ms = ttl_ms;
            lease.deadline_ms = deadline_ms;
            lease.owner = owner.map(Box::from);
        } else {
            // A number belongs to one id: an id seen under another number
            // (an inconsistent stream) loses its old lease's entry.
            if let Some(old) = r.numbers.insert(id, number) {
                if let Some(lease) = r.leases.remove(&old) {
                    r.deadlines.remove(&(lease.deadline_ms, old));
                }
            }
            r.leases.insert(
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
        r.deadlines.insert((deadline_ms, number));
    });
    fence::observe(number);
}

/// The lease named by `id`, if it lives: its number.
pub fn number_of(id: &LeaseId) -> Option<u64> {
    with(|r| r.numbers.get(id).copied())
}

/// `LEASE id` on an acquire: where a hold attached to the lease now runs
/// to, or `NOLEASE` if it is gone (or never was, here).
pub fn attach_to(id: &LeaseId, now_ms: i64) -> Result<Attach, LockError> {
    with(|r| {
        let number = *r.numbers.get(id).ok_or(LockError::NoLease)?;
        let lease = r.leases.get(&number).ok_or(LockError::NoLease)?;
        if !group::is_live(lease.deadline_ms, now_ms) {
            return Err(LockError::NoLease);
        }
        let until_ms = lease
            .deadline_ms
            .saturating_add(group::horizon(lease.ttl_ms, lease.holds.len() + 1));
        Ok(Attach { number, until_ms })
    })
}

/// A hold with `fence` on `key` in `db`, running to `horizon_ms`, is
/// attached to lease `number` now (granted, applied from the master, loaded
/// from an RDB). Whether that lease exists here.
pub fn attached(db: i32, key: &[u8], fence: u64, number: u64, horizon_ms: i64) -> bool {
    with(|r| {
        let Some(lease) = r.leases.get_mut(&number) else {
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
    })
}

/// A hold with `fence` on `key` in `db`, of lease `number`, is loaded, its
/// key running to `horizon_ms`; saved when its lease ended at
/// `lease_deadline_ms`. Whether that lease exists here. Loaded with a whole
/// dataset (`whole`: an RDB, the AOF, a full sync), it is attached now: no
/// event follows. Loaded by `RESTORE`, it is attached by the `restore`
/// event that follows once the server has stored the key ([`arrived`]; a
/// key the server drops, its TTL past, is never attached). A copy
/// (`group::restored_is_copy`) is noted for that event ([`take_copies`]),
/// which detaches it; in a whole dataset it cannot be told from a
/// multi-key grant's keys (loaded one by one, each but the first looks like
/// a copy of the first), and only a `RESTORE` replayed from the AOF has an
/// event to detach it.
pub fn loaded(
    db: i32,
    key: &[u8],
    fence: u64,
    number: u64,
    horizon_ms: i64,
    lease_deadline_ms: i64,
    whole: bool,
) -> bool {
    let copy = with(|r| {
        if r.copies
            .as_ref()
            .is_some_and(|(d, k, _)| *d != db || **k != *key)
        {
            r.copies = None;
        }
        let lease = r.leases.get(&number)?;
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
        Some(group::restored_is_copy(elsewhere, here))
    });
    let Some(copy) = copy else {
        return false;
    };
    // The verdict replaces any earlier one on the same hold of this key
    // (a `RESTORE` the server refused after the load, whose event never
    // came).
    with(|r| {
        if let Some((_, _, copies)) = r.copies.as_mut() {
            copies.retain(|c| c.fence != fence || c.number != number);
        }
        if copy {
            let (_, _, copies) = r.copies.get_or_insert_with(|| (db, key.into(), Vec::new()));
            copies.push(RestoredCopy {
                fence,
                number,
                lease_deadline_ms,
            });
        }
    });
    if whole {
        attached(db, key, fence, number, horizon_ms);
    }
    true
}

/// The copies [`loaded`] found among the holds of `key` in `db`, the key
/// that was just restored: forgotten here.
pub fn take_copies(db: i32, key: &[u8]) -> Vec<RestoredCopy> {
    with(|r| match r.copies.take() {
        Some((d, k, copies)) if d == db && *k == *key => copies,
        _ => Vec::new(),
    })
}

/// Every hold of `key` in `db` (`holds`) that names a lease group is
/// attached to it there, running to its deadline: the key arrived under
/// this name (`RENAME`, `MOVE`, `RESTORE`), and Redis unlinked it from its
/// old one, which detached it. Holds of a lease that is gone stay as they
/// are (nobody's).
pub fn arrived(db: i32, key: &[u8], holds: &Holds) {
    for hold in holds.all() {
        if let Some(number) = hold.tags.lease() {
            attached(db, key, hold.fence, number, hold.deadline_ms);
        }
    }
}

/// The hold with `fence` on `key` in `db`, attached to lease `number`, is
/// gone (released, expired, revoked, deleted); the other keys of its grant
/// stay attached.
pub fn detached(db: i32, key: &[u8], fence: u64, number: u64) {
    let at = Attached {
        fence,
        db,
        key: key.into(),
    };
    with(|r| {
        if let Some(lease) = r.leases.get_mut(&number) {
            if let Some(horizon) = lease.horizons.remove(&at) {
                lease.holds.remove(&(horizon, at));
            }
        }
    });
}

/// A hold attached to lease `number` left the keyspace by Redis' hand
/// (`DEL`, an overwrite, an eviction; a replica applying its master's
/// `DEL`): [`detached`]. `None` when the server could not name the key (it
/// always can from 7.0): every hold with that fence goes, which is only
/// wrong for a multi-key grant, whose other keys then end by their own TTL.
pub fn detached_unlinked(key: Option<(i32, &[u8])>, fence: u64, number: u64) {
    if let Some((db, key)) = key {
        return detached(db, key, fence, number);
    }
    with(|r| {
        if let Some(lease) = r.leases.get_mut(&number) {
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
    });
}

/// `FLUSHDB`/`FLUSHALL` (`None`: every db): the holds there are gone.
pub fn flushed(db: Option<i32>) {
    with(|r| {
        for lease in r.leases.values_mut() {
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
    });
}

/// `SWAPDB a b`: the holds of each database are the other's now.
pub fn swapped(a: i32, b: i32) {
    with(|r| {
        for lease in r.leases.values_mut() {
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
    });
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

/// The lease named by `id`, as `LOCK.LEASE INFO` shows it, if it lives.
pub fn shown(id: &LeaseId, max_keys: usize) -> Option<Shown> {
    with(|r| {
        let number = *r.numbers.get(id)?;
        let lease = r.leases.get(&number)?;
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
    })
}

/// The master's `LOCK.LEASEDEL id`: the lease is gone (its holds went by
/// their own effects).
pub fn apply_del(id: &LeaseId) {
    with(|r| {
        if let Some(number) = r.numbers.remove(id) {
            if let Some(lease) = r.leases.remove(&number) {
                r.deadlines.remove(&(lease.deadline_ms, number));
            }
        }
    });
}

/// Every lease: its number and state (an RDB's aux field saves them).
pub fn all() -> Vec<(u64, LeaseState)> {
    let numbers: Vec<u64> = with(|r| r.leases.keys().copied().collect());
    numbers
        .into_iter()
        .filter_map(|n| state(n).map(|s| (n, s)))
        .collect()
}

/// This server's leases are these now (a full load replaces the dataset);
/// their holds attach as the keyspace loads.
pub fn replace_all(leases: Vec<(u64, LeaseState)>) {
    with(|r| {
        r.leases.clear();
        r.numbers.clear();
        r.deadlines.clear();
    });
    for (number, lease) in leases {
        set(
            lease.id,
            number,
            lease.ttl_ms,
            lease.deadline_ms,
            lease.owner.as_deref(),
        );
    }
}
