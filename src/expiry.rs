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

/// What an unlink callback saw leave the keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// A lock whose lease (deadline in unix ms) had run out or was in its
    /// last millisecond.
    Lock { deadline_ms: i64 },
    /// A shared lock's or a semaphore's holders: `over` had run out (already
    /// counted), `last_ms` were in their last millisecond; `limit` tells a
    /// shared lock (0) from a semaphore.
    Holders {
        over: usize,
        last_ms: usize,
        limit: u32,
    },
}

struct Noted {
    db: i32,
    key: Box<[u8]>,
    removed: Removed,
    /// The lock-delay this note started, if it ends with the note.
    provisional_until: Option<i64>,
}

/// A key in a database.
type DbKey = (i32, Box<[u8]>);

thread_local! {
    static NOTED: RefCell<Option<Noted>> = const { RefCell::new(None) };
    static DELAYS: RefCell<HashMap<DbKey, i64>> = RefCell::new(HashMap::new());
}

/// Redis is removing `key` in `db`, a lease that may be expiring: note it
/// for the keyspace event that follows. `provisional_until`: the lock-delay
/// the caller started for it, to end with the note unless that event is
/// `expired`.
pub fn note_unlinked(db: i32, key: &[u8], removed: Removed, provisional_until: Option<i64>) {
    let noted = Noted {
        db,
        key: key.into(),
        removed,
        provisional_until,
    };
    NOTED.with(|n| *n.borrow_mut() = Some(noted));
}

/// What was just noted, if it was `key` in `db`: its lease ran out while
/// held. The note is used up either way; a note of another key is
/// forgotten ([`forget_note`]).
pub fn take_note(db: i32, key: &[u8]) -> Option<Removed> {
    let noted = NOTED.with(|n| n.borrow_mut().take())?;
    if noted.db == db && *noted.key == *key {
        Some(noted.removed)
    } else {
        end_provisional(&noted);
        None
    }
}

/// The noted lease was removed by something other than its expiry: its
/// provisional lock-delay ends.
pub fn forget_note() {
    if let Some(noted) = NOTED.with(|n| n.borrow_mut().take()) {
        end_provisional(&noted);
    }
}

fn end_provisional(noted: &Noted) {
    let Some(until) = noted.provisional_until else {
        return;
    };
    DELAYS.with(|d| {
        let mut delays = d.borrow_mut();
        let entry = (noted.db, noted.key.clone());
        if delays.get(&entry) == Some(&until) {
            delays.remove(&entry);
        }
    });
}

/// Nobody is granted `key` in `db` before `until_ms`.
pub fn delay(db: i32, key: &[u8], until_ms: i64, now_ms: i64) {
    DELAYS.with(|d| {
        let mut delays = d.borrow_mut();
        if delays.len() >= 1024 && delays.len().is_power_of_two() {
            delays.retain(|_, until| *until > now_ms);
        }
        delays.insert((db, key.into()), until_ms);
    });
}

/// When the lock-delay on `key` ends (unix ms), if one is in force now.
pub fn delayed_until(db: i32, key: &[u8], now_ms: i64) -> Option<i64> {
    DELAYS.with(|d| {
        let mut delays = d.borrow_mut();
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
    DELAYS.with(|d| match db {
        Some(db) => d.borrow_mut().retain(|(d, _), _| *d != db),
        None => d.borrow_mut().clear(),
    });
}

/// End the lock-delays of the keys for which `gone` is true (their slot
/// moved to another node), in every database.
pub fn forget_where(gone: impl Fn(&[u8]) -> bool) {
    DELAYS.with(|d| {
        let mut delays = d.borrow_mut();
        if !delays.is_empty() {
            delays.retain(|(_, key), _| !gone(key));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_claimed_once_and_only_for_its_key() {
        let lock = Removed::Lock { deadline_ms: 100 };
        note_unlinked(0, b"k", lock, None);
        assert_eq!(take_note(0, b"other"), None);
        assert_eq!(take_note(0, b"k"), None, "used up by the miss");
        note_unlinked(0, b"k", lock, None);
        assert_eq!(take_note(0, b"k"), Some(lock));
        assert_eq!(take_note(0, b"k"), None);
        note_unlinked(0, b"k", lock, None);
        forget_note();
        assert_eq!(take_note(0, b"k"), None);
    }

    #[test]
    fn a_provisional_delay_ends_with_its_note_unless_the_key_expired() {
        let lock = Removed::Lock { deadline_ms: 100 };
        // A DEL in the lease's last millisecond: no delay after all.
        delay(1, b"k", 101, 100);
        note_unlinked(1, b"k", lock, Some(101));
        forget_note();
        assert_eq!(delayed_until(1, b"k", 100), None);
        // The expiry of another key's note does not claim this one.
        delay(1, b"k", 101, 100);
        note_unlinked(1, b"k", lock, Some(101));
        assert_eq!(take_note(1, b"j"), None);
        assert_eq!(delayed_until(1, b"k", 100), None);
        // Its own `expired` event: the delay stays.
        delay(1, b"k", 101, 100);
        note_unlinked(1, b"k", lock, Some(101));
        assert_eq!(take_note(1, b"k"), Some(lock));
        assert_eq!(delayed_until(1, b"k", 100), Some(101));
        // A later delay on the key is not the note's to end.
        note_unlinked(1, b"k", lock, Some(101));
        delay(1, b"k", 400, 100);
        forget_note();
        assert_eq!(delayed_until(1, b"k", 100), Some(400));
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
