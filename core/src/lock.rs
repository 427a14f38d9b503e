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
    /// The holder's public label (`OWNER`), if it gave one.
    pub owner: OwnerLabel,
}

/// A holder's public label: one pointer wide inside the lock, so a lock
/// without one (most) costs no more than before labels existed, and the lock
/// value stays in the same allocator size class.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerLabel(Option<Box<Box<[u8]>>>);

impl OwnerLabel {
    pub fn new(label: Option<&[u8]>) -> Self {
        OwnerLabel(label.map(|l| Box::new(Box::from(l))))
    }

    pub fn get(&self) -> Option<&[u8]> {
        self.0.as_deref().map(|l| &**l)
    }

    /// Bytes kept outside the lock value itself.
    pub fn heap_len(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |l| l.len() + std::mem::size_of::<Box<[u8]>>())
    }
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
            owner: OwnerLabel::default(),
        }
    }

    /// The same lock, labelled `owner`.
    pub fn with_owner(mut self, owner: Option<&[u8]>) -> Self {
        self.owner = OwnerLabel::new(owner);
        self
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

    #[test]
    fn a_label_costs_one_pointer_and_the_lock_stays_within_64_bytes() {
        let labelled = Lock::granted(b"me", 7, 1, 2).with_owner(Some(b"pod-7"));
        assert_eq!(labelled.owner.get(), Some(&b"pod-7"[..]));
        assert_eq!(Lock::granted(b"me", 7, 1, 2).owner.get(), None);
        assert_eq!(std::mem::size_of::<OwnerLabel>(), 8);
        assert!(std::mem::size_of::<Lock>() <= 64);
    }
}
