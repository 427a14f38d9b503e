//! The value of a lock key, as the module keeps it in Redis' keyspace and
//! writes it to RDB files; no Redis types here (the data type's callbacks
//! are in the module's `redis/datatype.rs`).

use crate::token::{StoredToken, UUID_LEN};

/// A held lock. The lease deadline is the key's own Redis TTL, which `PTTL`
/// shows and Redis expires; `deadline_ms` is the module's copy of it, written
/// together with the TTL (`redis/key.rs`) and kept equal when a client
/// changes the TTL, because a lock Redis removes must tell an expiry from a
/// delete after its TTL is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub fence: u64,
    /// When this holder was granted the lock (unix ms): `lock.max-hold-ms`
    /// counts from here.
    pub granted_ms: i64,
    /// The lease deadline (unix ms); -1 if unknown (a lock loaded from the
    /// first RDB encoding) or without expiry (`PERSIST`).
    pub deadline_ms: i64,
    /// Extensions since the grant: `lock.max-extends` counts these.
    pub extends: u32,
    pub holder_token: StoredToken,
}

impl Lock {
    /// A new holder: granted at `granted_ms`, not yet extended.
    pub fn granted(token: &[u8], fence: u64, granted_ms: i64, deadline_ms: i64) -> Self {
        Lock::new(token, fence, granted_ms, deadline_ms, 0)
    }

    pub fn new(token: &[u8], fence: u64, granted_ms: i64, deadline_ms: i64, extends: u32) -> Self {
        Lock {
            fence,
            granted_ms,
            deadline_ms,
            extends,
            holder_token: StoredToken::new(token),
        }
    }

    /// Whether `token` holds this lock: the one ownership check.
    pub fn held_by(&self, token: &[u8]) -> bool {
        self.holder_token.matches(token)
    }

    /// The holder's token as the client gave it; `buffer` holds a UUID's text.
    pub fn token<'a>(&'a self, buffer: &'a mut [u8; UUID_LEN]) -> &'a [u8] {
        self.holder_token.bytes(buffer)
    }

    /// The deadline, if the lock has one.
    pub fn deadline(&self) -> Option<i64> {
        (self.deadline_ms >= 0).then_some(self.deadline_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_by_its_token_only() {
        let lock = Lock::granted(b"me", 7, 1_000, 2_000);
        assert!(lock.held_by(b"me"));
        assert!(!lock.held_by(b"m"));
        assert!(!lock.held_by(b"me "));
        assert_eq!(lock.token(&mut [0u8; UUID_LEN]), b"me");
        assert_eq!((lock.extends, lock.deadline()), (0, Some(2_000)));
        assert_eq!(Lock::granted(b"x", 1, 0, -1).deadline(), None);
    }
}
