//! Revoked holds (`LOCK.REVOKE`, `LOCK.LEASE REVOKE`): the old holder's
//! token gets a distinct answer until its hold would have ended anyway, so
//! that it learns the key was taken from it, and why, not only that it
//! lost it: `LOCK.EXTEND` and `LOCK.GUARD` reply `REVOKED <reason>`
//! (`LOCK.RELEASE` replies 0, as for any token that holds nothing).
//!
//! Module-wide state (main thread only, hence a thread-local): per key, the
//! revoked holds' tokens, fences, reasons and the end of their marks. This
//! server's own knowledge, like a lock-delay: not replicated, not persisted
//! (after a failover or a restart the old token is answered `0`/`LOST`, as
//! for any hold it lost). A mark costs its token, its reason and its key;
//! marks that ran out are dropped as new ones come, and a key keeps at most
//! [`MAX_PER_KEY`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

/// The most marks one key keeps (the oldest goes first).
const MAX_PER_KEY: usize = 64;

/// A key in a database.
type DbKey = (i32, Box<[u8]>);

struct Mark {
    token: Box<[u8]>,
    fence: u64,
    /// Until when (unix ms) the old token is told of it.
    until_ms: i64,
    reason: Box<[u8]>,
}

thread_local! {
    static MARKS: RefCell<HashMap<DbKey, Vec<Mark>>> = RefCell::new(HashMap::new());
}

/// The default reason, when `LOCK.REVOKE` gives none.
pub const NO_REASON: &[u8] = b"revoked by an operator";

/// The hold of `token` (with `fence`) on `key` in `db` was revoked with
/// `reason`; it would have ended at `until_ms`.
pub fn mark(db: i32, key: &[u8], token: &[u8], fence: u64, until_ms: i64, reason: &[u8]) {
    MARKS.with(|m| {
        let mut marks = m.borrow_mut();
        if marks.len() >= 1024 && marks.len().is_power_of_two() {
            let now_ms = crate::redis::server::now_ms();
            marks.retain(|_, list| {
                list.retain(|mark| mark.until_ms >= now_ms);
                !list.is_empty()
            });
        }
        let list = marks.entry((db, key.into())).or_default();
        if list.len() >= MAX_PER_KEY {
            list.remove(0);
        }
        list.push(Mark {
            token: token.into(),
            fence,
            until_ms,
            reason: reason.into(),
        });
    });
}

/// If `token`'s hold on `key` in `db` was revoked and its mark still runs
/// at `now_ms`: the error that tells it so, `REVOKED <reason>` (the reason
/// escaped onto one line).
pub fn of(db: i32, key: &[u8], token: &[u8], now_ms: i64) -> Option<CString> {
    MARKS.with(|m| {
        let mut marks = m.borrow_mut();
        if marks.is_empty() {
            return None;
        }
        let entry = (db, Box::<[u8]>::from(key));
        let list = marks.get_mut(&entry)?;
        list.retain(|mark| mark.until_ms >= now_ms);
        let reason = list
            .iter()
            .rev()
            .find(|mark| *mark.token == *token)
            .map(|mark| error_text(&mark.reason));
        if list.is_empty() {
            marks.remove(&entry);
        }
        reason
    })
}

/// The reason of the newest live revocation of the hold with `fence` on
/// `key` in `db`, if it was revoked (`LOCK.OBSERVE`).
pub fn reason_of_fence(db: i32, key: &[u8], fence: u64, now_ms: i64) -> Option<Box<[u8]>> {
    MARKS.with(|m| {
        let marks = m.borrow();
        let list = marks.get(&(db, Box::<[u8]>::from(key)))?;
        list.iter()
            .rev()
            .find(|mark| mark.fence == fence && mark.until_ms >= now_ms)
            .map(|mark| mark.reason.clone())
    })
}

/// A flush forgets the marks of the flushed databases (`None`: all).
pub fn forget(db: Option<i32>) {
    MARKS.with(|m| match db {
        Some(db) => m.borrow_mut().retain(|(d, _), _| *d != db),
        None => m.borrow_mut().clear(),
    });
}

/// `REVOKED <reason>`, one line: bytes outside printable ASCII written as
/// `\xNN` (an error reply cannot hold `\r`, `\n` or NUL).
fn error_text(reason: &[u8]) -> CString {
    let mut text = b"REVOKED ".to_vec();
    for &byte in reason {
        if (0x20..0x7f).contains(&byte) && byte != b'\\' {
            text.push(byte);
        } else {
            text.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
        }
    }
    // No NUL is left in `text`.
    CString::new(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_printable_line() {
        assert_eq!(error_text(b"stuck job").to_bytes(), b"REVOKED stuck job");
        assert_eq!(
            error_text(b"a\r\nb\0\xff\\").to_bytes(),
            b"REVOKED a\\x0d\\x0ab\\x00\\xff\\x5c"
        );
    }

    #[test]
    fn a_mark_answers_its_token_until_it_runs_out() {
        mark(0, b"k", b"t", 7, 100, b"why");
        assert_eq!(
            of(0, b"k", b"t", 50).map(|e| e.into_bytes()),
            Some(b"REVOKED why".to_vec())
        );
        assert_eq!(of(0, b"k", b"u", 50), None);
        assert_eq!(of(1, b"k", b"t", 50), None);
        assert_eq!(
            reason_of_fence(0, b"k", 7, 50).as_deref(),
            Some(&b"why"[..])
        );
        assert_eq!(of(0, b"k", b"t", 101), None);
        assert_eq!(reason_of_fence(0, b"k", 7, 50), None);
    }
}
