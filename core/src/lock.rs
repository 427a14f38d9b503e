//! The value of an exclusive lock's key: its one [`Hold`] in 32 bytes, as
//! the module keeps it in Redis' keyspace; no Redis types here (the data
//! type's callbacks are in the module's `redis/datatype.rs`).

use std::borrow::Cow;
use std::num::NonZeroU64;

use crate::hold::{Hold, Tags};
use crate::token::StoredToken;

/// A lock as its key's value keeps it: 32 bytes, one allocation of the
/// smallest size class that holds a lock, for the common lock: a UUID token
/// (or one of up to 15 bytes), no label, fewer than 2,048 extensions, a
/// deadline from 2020 to 2089 less than 70 minutes after the grant. Any
/// other lock is kept whole, behind a pointer ([`Hold`], 64 bytes more).
/// Nothing is lost either way: [`StoredLock::get`] gives back exactly the
/// [`Hold`] it was made from (a lock's hold is always of one permit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredLock {
    Packed {
        /// The UUID's 16 bytes; or a short token's bytes, its length last.
        token: [u8; 16],
        /// `fence << 11 | extends`.
        fence_extends: u64,
        /// `(deadline - EPOCH) << 23 | (deadline - granted) << 1 | short`;
        /// never 0 (the deadline is after the epoch), which is what lets
        /// the pointer of `Whole` share these 32 bytes (Rust's niche).
        times: NonZeroU64,
    },
    Whole(Box<Hold>),
}

/// 2020-01-01 in unix ms: packed deadlines count from here.
const EPOCH_MS: i64 = 1_577_836_800_000;
const EXTENDS_BITS: u32 = 11;
const SINCE_BITS: u32 = 22;
const DEADLINE_BITS: u32 = 41;
const SHORT_MAX: usize = 15;

impl StoredLock {
    pub fn new(lock: Hold) -> Self {
        Self::pack(&lock).unwrap_or_else(|| StoredLock::Whole(Box::new(lock)))
    }

    fn pack(lock: &Hold) -> Option<Self> {
        if !lock.tags.is_empty()
            || lock.count != 1
            || lock.extends >= 1 << EXTENDS_BITS
            || lock.fence >= 1 << (64 - EXTENDS_BITS)
        {
            return None;
        }
        let deadline = lock.deadline_ms.checked_sub(EPOCH_MS)?;
        let since = lock.deadline_ms.checked_sub(lock.granted_ms)?;
        if deadline <= 0 || deadline >= 1 << DEADLINE_BITS || !(0..1 << SINCE_BITS).contains(&since)
        {
            return None;
        }
        let (token, short) = match &lock.holder_token {
            StoredToken::Uuid(raw) => (*raw, 0),
            StoredToken::Inline { len, bytes } if usize::from(*len) <= SHORT_MAX => {
                let mut token = [0u8; 16];
                token[..SHORT_MAX].copy_from_slice(&bytes[..SHORT_MAX]);
                token[SHORT_MAX] = *len;
                (token, 1)
            }
            _ => return None,
        };
        let times = (deadline as u64) << (SINCE_BITS + 1) | (since as u64) << 1 | short;
        Some(StoredLock::Packed {
            token,
            fence_extends: lock.fence << EXTENDS_BITS | u64::from(lock.extends),
            times: NonZeroU64::new(times)?,
        })
    }

    /// The lock, as it was stored.
    pub fn get(&self) -> Cow<'_, Hold> {
        match self {
            StoredLock::Whole(lock) => Cow::Borrowed(lock),
            StoredLock::Packed {
                token,
                fence_extends,
                times,
            } => {
                let times = times.get();
                let deadline_ms = (times >> (SINCE_BITS + 1)) as i64 + EPOCH_MS;
                let since = ((times >> 1) & ((1 << SINCE_BITS) - 1)) as i64;
                let holder_token = if times & 1 == 0 {
                    StoredToken::Uuid(*token)
                } else {
                    let len = usize::from(token[SHORT_MAX]).min(SHORT_MAX);
                    StoredToken::new(&token[..len])
                };
                Cow::Owned(Hold {
                    fence: fence_extends >> EXTENDS_BITS,
                    granted_ms: deadline_ms - since,
                    deadline_ms,
                    extends: (fence_extends & ((1 << EXTENDS_BITS) - 1)) as u32,
                    holder_token,
                    count: 1,
                    tags: Tags::default(),
                })
            }
        }
    }

    /// Change the lock in place (a renewal, a deadline a client moved): a
    /// whole one stays whole, a packed one is packed again if it still can.
    pub fn update(&mut self, change: impl FnOnce(&mut Hold)) {
        match self {
            StoredLock::Whole(lock) => change(lock),
            StoredLock::Packed { .. } => {
                let mut lock = self.get().into_owned();
                change(&mut lock);
                *self = StoredLock::new(lock);
            }
        }
    }

    /// Bytes kept outside these 32.
    pub fn heap_len(&self) -> usize {
        match self {
            StoredLock::Packed { .. } => 0,
            StoredLock::Whole(lock) => std::mem::size_of::<Hold>() + lock.heap_len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock of now: granted at `NOW`, for 30 s.
    const NOW: i64 = 1_764_601_200_000;

    fn stored(lock: &Hold) -> StoredLock {
        StoredLock::new(lock.clone())
    }

    #[test]
    fn the_common_lock_is_packed_in_32_bytes_and_comes_back_whole() {
        assert_eq!(std::mem::size_of::<StoredLock>(), 32);
        let uuid = b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c6";
        for lock in [
            Hold::granted(uuid, 1_764_601_200_123_456, NOW, NOW + 30_000),
            Hold::granted(b"worker-1", 7, NOW, NOW + 3_600_000),
            Hold::granted(b"fifteen-bytes!!", 7, NOW, NOW),
            Hold::new(uuid, crate::rules::MAX_FENCE, NOW, NOW + 60_000, 2_047),
        ] {
            let packed = stored(&lock);
            assert!(matches!(packed, StoredLock::Packed { .. }), "{lock:?}");
            assert_eq!(*packed.get(), lock);
            assert_eq!(packed.heap_len(), 0);
        }
    }

    #[test]
    fn any_other_lock_is_kept_whole() {
        let uuid = b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c6";
        for lock in [
            Hold::granted(uuid, 7, NOW, NOW + 30_000).with_owner(Some(b"pod-7")),
            Hold::granted(b"sixteen-bytes!!!", 7, NOW, NOW + 30_000),
            Hold::granted(&[b'x'; 300], 7, NOW, NOW + 30_000),
            Hold::new(uuid, 7, NOW, NOW + 30_000, 2_048),
            // 70 minutes or more since the grant, a deadline before 2020 or
            // none, a deadline before the grant (a client's PEXPIRE).
            Hold::granted(uuid, 7, NOW, NOW + (1 << 22)),
            Hold::granted(uuid, 7, 0, 1_000),
            Hold::granted(uuid, 7, NOW, -1),
            Hold::granted(uuid, 7, NOW, NOW - 1),
            Hold::granted(uuid, 7, NOW, NOW + 30_000).with_count(2),
        ] {
            let whole = stored(&lock);
            assert!(matches!(whole, StoredLock::Whole(_)), "{lock:?}");
            assert_eq!(*whole.get(), lock);
            assert!(whole.heap_len() >= std::mem::size_of::<Hold>());
        }
    }

    #[test]
    fn an_update_repacks_a_packed_lock_and_keeps_a_whole_one_whole() {
        let uuid = b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c6";
        let mut kept = StoredLock::new(Hold::granted(uuid, 7, NOW, NOW + 30_000));
        kept.update(|l| (l.deadline_ms, l.extends) = (NOW + 60_000, 1));
        assert!(matches!(kept, StoredLock::Packed { .. }));
        assert_eq!(kept.get().extends, 1);
        assert_eq!(kept.get().deadline_ms, NOW + 60_000);
        assert_eq!(kept.get().granted_ms, NOW);
        // Held for 70 minutes: no longer packs.
        kept.update(|l| l.deadline_ms = NOW + (1 << 22));
        assert!(matches!(kept, StoredLock::Whole(_)));
        kept.update(|l| l.deadline_ms = NOW + 1);
        assert!(matches!(kept, StoredLock::Whole(_)));
        assert_eq!(*kept.get(), Hold::new(uuid, 7, NOW, NOW + 1, 1));
    }

    proptest::proptest! {
        #[test]
        fn every_lock_comes_back_exactly(
            token in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..=40),
            uuid in proptest::prelude::any::<[u8; 16]>(),
            use_uuid in proptest::prelude::any::<bool>(),
            fence in 1..=crate::rules::MAX_FENCE,
            granted in -1i64..=5_000_000_000_000,
            since in -10i64..=5_000_000,
            extends in proptest::prelude::any::<u32>(),
            owner in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..=8)),
        ) {
            let token = if use_uuid {
                uuid::Uuid::from_bytes(uuid).hyphenated().to_string().into_bytes()
            } else {
                token
            };
            let lock = Hold::new(&token, fence, granted, granted.saturating_add(since), extends)
                .with_owner(owner.as_deref());
            let kept = stored(&lock);
            proptest::prop_assert_eq!(&*kept.get(), &lock);
        }
    }
}
