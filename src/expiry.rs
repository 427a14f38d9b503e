//! What the module remembers about leases that ran out while held: the note
//! that tells an expiry from a delete, and the lock-delays in force
//! (`lock.expiry-delay-ms`), during which nobody is granted the key.
//!
//! How an expiry is told from a delete: Redis removes an expired key with the
//! same call as `DEL`, and then fires its `expired` keyspace event, by which
//! time the value is gone. So the data type's unlink callback, which sees the
//! value as Redis removes it, notes a lock whose deadline has passed
//! ([`note_unlinked`]), and the `expired` event that follows at once claims
//! the note for the same key ([`take_note`]); any other event drops it
//! ([`forget_note`]). The handlers are in `events.rs`.
//!
//! Module-wide state (main thread only, hence thread-locals): that one note,
//! and the lock-delays, by db and key. Only this file touches them. A
//! lock-delay is this server's own knowledge: not replicated, not persisted
//! (a failover or a restart ends it early). It belongs to the database
//! number, as the wait queues do: the clients that the delay protects keep
//! using that database, so `SWAPDB` leaves delays where they are.

use std::cell::RefCell;
use std::collections::HashMap;

use redis_lock_core::decide;

struct Noted {
    db: i32,
    key: Box<[u8]>,
    deadline_ms: i64,
}

/// A key in a database.
type DbKey = (i32, Box<[u8]>);

thread_local! {
    static NOTED: RefCell<Option<Noted>> = const { RefCell::new(None) };
    static DELAYS: RefCell<HashMap<DbKey, i64>> = RefCell::new(HashMap::new());
}

/// Redis is removing a lock whose deadline was `deadline_ms`: note it if
/// that is an expiry.
pub fn note_unlinked(db: i32, key: &[u8], deadline_ms: i64, now_ms: i64) {
    if !decide::is_expiry(deadline_ms, now_ms) {
        return;
    }
    let noted = Noted {
        db,
        key: key.into(),
        deadline_ms,
    };
    NOTED.with(|n| *n.borrow_mut() = Some(noted));
}

/// The deadline of the lock just noted, if it was `key` in `db`: its lease
/// ran out while held. The note is used up either way.
pub fn take_note(db: i32, key: &[u8]) -> Option<i64> {
    let noted = NOTED.with(|n| n.borrow_mut().take())?;
    (noted.db == db && *noted.key == *key).then_some(noted.deadline_ms)
}

/// The noted lock was removed by something other than its expiry.
pub fn forget_note() {
    NOTED.with(|n| n.borrow_mut().take());
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
        note_unlinked(0, b"k", 100, 101);
        assert_eq!(take_note(0, b"other"), None);
        assert_eq!(take_note(0, b"k"), None, "used up by the miss");
        note_unlinked(0, b"k", 100, 101);
        assert_eq!(take_note(0, b"k"), Some(100));
        note_unlinked(0, b"k", 100, 100);
        assert_eq!(take_note(0, b"k"), None, "not past its deadline");
        note_unlinked(0, b"k", 100, 101);
        forget_note();
        assert_eq!(take_note(0, b"k"), None);
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
