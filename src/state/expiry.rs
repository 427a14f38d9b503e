//! What the module remembers about leases that ran out while held: the note
//! that tells an expiry from a delete, and the lock-delays in force
//! (`lock.expiry-delay-ms`), during which nobody is granted the key.
//!
//! How an expiry is told from a delete: Redis removes an expired key with the
//! same call as `DEL`, and then fires its `expired` keyspace event, by which
//! time the value is gone. So the data types' unlink callbacks, which see
//! the value as Redis removes it, note a lease whose deadline has passed, or
//! is passing ([`note_unlinked`]), and the `expired` event that follows at
//! once claims the note for the same key ([`take_note`]); any other event
//! drops it ([`forget_note`]). The module's own deletes are never noted
//! (`redis/datatype.rs`). The handlers are in `events.rs`.
//!
//! A lease removed in its deadline's own millisecond is the one case that
//! the deadline leaves open: Redis 8's active expiry removes a key as that
//! millisecond begins, while a client's `DEL` in it is no expiry. Its note
//! is provisional: the lock-delay it started (at least to the end of that
//! millisecond, which the lease still owns) ends again if the event that
//! follows is not `expired`.
//!
//! Module-wide state (main thread only, hence thread-locals): that one note,
//! and the lock-delays, by db and key. Only this file touches them. A
//! lock-delay is this server's own knowledge: not replicated, not persisted
//! (a failover or a restart ends it early). It belongs to the database
//! number, as the wait queues do: the clients that the delay protects keep
//! using that database, so `SWAPDB` leaves delays where they are.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_lock_core::decide::Removal;
use redis_lock_core::hold::Kind;
use redis_lock_core::rules;

/// What an unlink callback saw leave the keyspace: a key of `kind` whose
/// holds' leases ran out (`expiries` of them), or were in their last
/// millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub kind: Kind,
    pub expiries: usize,
}

struct Noted {
    db: i32,
    key: Box<[u8]>,
    removed: Removed,
    /// When the unlink hook noted it (unix ms).
    noted_ms: i64,
    /// The lock-delay this note started, if it ends with the note.
    provisional: Option<Provisional>,
}

/// A lock-delay that ends with its note: it set the key's delay to `until`,
/// which was `before` (a delay already in force that ended sooner) or none.
#[derive(Clone, Copy)]
struct Provisional {
    until: i64,
    before: Option<i64>,
}

/// A key in a database.
type DbKey = (i32, Box<[u8]>);

thread_local! {
    static NOTED: RefCell<Option<Noted>> = const { RefCell::new(None) };
    static DELAYS: RefCell<HashMap<DbKey, i64>> = RefCell::new(HashMap::new());
}

/// Whether [`NOTED`] holds a note, and whether [`DELAYS`] holds any delay,
/// as each was after its last change: every ACQUIRE asks for the key's
/// lock-delay and every generic keyspace event drops the note, and almost
/// always there is none. A thread-local in a shared object costs a call to
/// find (and a check that it was initialised) where an atomic is one load.
/// Written only by [`with_note`] and [`with_delays`], the one way to each.
/// Unit tests run on several threads at once, each with its own
/// thread-locals but these flags shared, so they always look
/// ([`may_be_set`]).
static NOTE_PENDING: AtomicBool = AtomicBool::new(false);
static ANY_DELAY: AtomicBool = AtomicBool::new(false);

/// Whether `flag` says there may be something to look at.
#[inline]
fn may_be_set(flag: &AtomicBool) -> bool {
    cfg!(test) || flag.load(Ordering::Relaxed)
}

fn with_note<T>(f: impl FnOnce(&mut Option<Noted>) -> T) -> T {
    NOTED.with(|n| {
        let mut noted = n.borrow_mut();
        let result = f(&mut noted);
        NOTE_PENDING.store(noted.is_some(), Ordering::Relaxed);
        result
    })
}

fn with_delays<T>(f: impl FnOnce(&mut HashMap<DbKey, i64>) -> T) -> T {
    DELAYS.with(|d| {
        let mut delays = d.borrow_mut();
        let result = f(&mut delays);
        ANY_DELAY.store(!delays.is_empty(), Ordering::Relaxed);
        result
    })
}

/// Redis is removing `key` in `db`, a key of `kind` whose leases may be
/// expiring, at `now_ms`: note it for the keyspace event that follows, and
/// keep the key from everyone until the removal's delay, if it has one (a
/// provisional delay ends with the note unless the event is `expired`: a
/// removal in the lease's last millisecond, which a client's `DEL` could
/// have made). A note still pending is forgotten first: Redis fires each
/// removal's event before the next removal (`RENAME` and `MSET` unlink two
/// keys before their events, and neither of those is an expiry).
pub fn note_unlinked(db: i32, key: &[u8], kind: Kind, removal: Removal, now_ms: i64) {
    let removed = Removed {
        kind,
        expiries: removal.expiries,
    };
    let (delay_until, provisional) = (removal.delay_until_ms, removal.provisional);
    forget_note();
    let mut started = None;
    if let Some(until) = delay_until {
        let before = delayed_until(db, key, now_ms);
        if before.is_none_or(|before| before < until) {
            delay(db, key, until, now_ms);
            started = provisional.then_some(Provisional { until, before });
        }
    }
    let noted = Noted {
        db,
        key: key.into(),
        removed,
        noted_ms: now_ms,
        provisional: started,
    };
    with_note(|n| *n = Some(noted));
}

/// How long a note waits for its event. Redis fires a removal's event in
/// the same call as the removal, microseconds later, but the server's
/// thread can be descheduled in between: on a loaded 2-core machine the
/// integration suite, with a 1 ms bound, once counted 99 expiries of 100
/// (nothing else drops a note of a lease that ran out), so that expiry went
/// uncounted and unannounced. A note that outlives
/// this is one whose event never came: an overwrite by `SET` and the like,
/// whose events the module does not hear (a later generic event of any
/// key, `del`, `rename` and the like, drops it sooner: `events.rs`).
const NOTE_LIFETIME_MS: i64 = 1000;

/// What was just noted, if it was `key` in `db`: its lease ran out while
/// held. The note is used up either way. A note of another key, or one
/// older than [`NOTE_LIFETIME_MS`], is forgotten ([`forget_note`]).
pub fn take_note(db: i32, key: &[u8], now_ms: i64) -> Option<Removed> {
    let noted = with_note(Option::take)?;
    let fresh = rules::within(noted.noted_ms, NOTE_LIFETIME_MS, now_ms);
    if fresh && noted.db == db && *noted.key == *key {
        Some(noted.removed)
    } else {
        end_provisional(&noted);
        None
    }
}

/// The noted lease was removed by something other than its expiry: its
/// provisional lock-delay ends.
#[inline]
pub fn forget_note() {
    if !may_be_set(&NOTE_PENDING) {
        return;
    }
    if let Some(noted) = with_note(Option::take) {
        end_provisional(&noted);
    }
}

/// Undo the delay a note started, unless a later one replaced it since.
fn end_provisional(noted: &Noted) {
    let Some(Provisional { until, before }) = noted.provisional else {
        return;
    };
    with_delays(|delays| {
        let entry = (noted.db, noted.key.clone());
        if delays.get(&entry) == Some(&until) {
            match before {
                Some(before) => delays.insert(entry, before),
                None => delays.remove(&entry),
            };
        }
    });
}

/// Nobody is granted `key` in `db` before `until_ms` (a delay in force that
/// ends later stays).
pub fn delay(db: i32, key: &[u8], until_ms: i64, now_ms: i64) {
    with_delays(|delays| {
        if delays.len() >= 1024 && delays.len().is_power_of_two() {
            delays.retain(|_, until| *until > now_ms);
        }
        let until = delays.entry((db, key.into())).or_insert(until_ms);
        *until = (*until).max(until_ms);
    });
}

/// When the lock-delay on `key` ends (unix ms), if one is in force now.
#[inline]
pub fn delayed_until(db: i32, key: &[u8], now_ms: i64) -> Option<i64> {
    if !may_be_set(&ANY_DELAY) {
        return None;
    }
    with_delays(|delays| {
        if delays.is_empty() {
            return None;
        }
        let entry = (db, Box::<[u8]>::from(key));
        match delays.get(&entry) {
            Some(&until) if until > now_ms => Some(until),
            Some(_) => {
                delays.remove(&entry);
                None
            }
            None => None,
        }
    })
}

/// A flush ends every lock-delay in the flushed databases (`None`: all).
pub fn forget(db: Option<i32>) {
    with_delays(|delays| match db {
        Some(db) => delays.retain(|(d, _), _| *d != db),
        None => delays.clear(),
    });
}

/// End the lock-delays of the keys for which `gone` is true (their slot
/// moved to another node), in every database.
pub fn forget_where(gone: impl Fn(&[u8]) -> bool) {
    with_delays(|delays| {
        if !delays.is_empty() {
            delays.retain(|(_, key), _| !gone(key));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock's removal, as `decide::removed` gives it.
    fn note(db: i32, key: &[u8], delay_until_ms: Option<i64>, provisional: bool, now_ms: i64) {
        let removal = Removal {
            expiries: 1,
            delay_until_ms,
            provisional,
        };
        note_unlinked(db, key, Kind::Exclusive, removal, now_ms);
    }

    #[test]
    fn a_note_is_claimed_once_and_only_for_its_key() {
        let lock = Removed {
            kind: Kind::Exclusive,
            expiries: 1,
        };
        note(0, b"k", None, false, 101);
        assert_eq!(take_note(0, b"other", 101), None);
        assert_eq!(take_note(0, b"k", 101), None, "used up by the miss");
        note(0, b"k", None, false, 101);
        assert_eq!(take_note(0, b"k", 102), Some(lock));
        assert_eq!(take_note(0, b"k", 102), None);
        note(0, b"k", None, false, 101);
        forget_note();
        assert_eq!(take_note(0, b"k", 101), None);
        // The server's thread descheduled between a removal and its event.
        note(0, b"k", None, false, 101);
        assert_eq!(take_note(0, b"k", 101 + NOTE_LIFETIME_MS), Some(lock));
        note(0, b"k", None, false, 101);
        assert_eq!(
            take_note(0, b"k", 102 + NOTE_LIFETIME_MS),
            None,
            "stale: its event never came"
        );
    }

    #[test]
    fn a_provisional_delay_ends_with_its_note_unless_the_key_expired() {
        let lock = Removed {
            kind: Kind::Exclusive,
            expiries: 1,
        };
        // A DEL in the lease's last millisecond: no delay after all.
        note(1, b"k", Some(101), true, 100);
        assert_eq!(delayed_until(1, b"k", 100), Some(101));
        forget_note();
        assert_eq!(delayed_until(1, b"k", 100), None);
        // The next removal (RENAME unlinks two keys before their events)
        // ends the pending one's.
        note(1, b"k", Some(101), true, 100);
        note(1, b"j", None, false, 100);
        assert_eq!(delayed_until(1, b"k", 100), None);
        forget_note();
        // Its own `expired` event: the delay stays.
        note(1, b"k", Some(101), true, 100);
        assert_eq!(take_note(1, b"k", 100), Some(lock));
        assert_eq!(delayed_until(1, b"k", 100), Some(101));
        forget(Some(1));
        // A longer delay already in force is neither shortened nor ended.
        delay(1, b"k", 400, 100);
        note(1, b"k", Some(101), true, 100);
        assert_eq!(delayed_until(1, b"k", 100), Some(400));
        forget_note();
        assert_eq!(delayed_until(1, b"k", 100), Some(400));
        // A shorter one comes back when the provisional one ends.
        delay(1, b"j", 100, 99);
        note(1, b"j", Some(150), true, 99);
        assert_eq!(delayed_until(1, b"j", 99), Some(150));
        forget_note();
        assert_eq!(delayed_until(1, b"j", 99), Some(100));
        forget(Some(1));
    }

    #[test]
    fn a_delay_holds_until_its_end_and_a_flush_ends_it() {
        delay(3, b"k", 500, 0);
        assert_eq!(delayed_until(3, b"k", 499), Some(500));
        assert_eq!(delayed_until(2, b"k", 499), None);
        assert_eq!(delayed_until(3, b"k", 500), None);
        delay(3, b"k", 500, 0);
        forget(Some(3));
        assert_eq!(delayed_until(3, b"k", 0), None);
    }
}
