//! The storage of a key with several holds at once: a read/write lock in
//! shared mode (`LOCK.ACQUIRE … SHARED`) and a counting semaphore (`SEM.*`).
//! Each [`Hold`] has its own token, lease, fence, label and permits; one
//! holder's extension or expiry never changes another's lease. No Redis
//! types here: the module stores a [`Holders`] as the value of its
//! `redisshrd` and `redissema` types, and the key's TTL is the latest
//! holder's deadline. Callers read it through [`crate::hold::Holds`].

use crate::hold::Hold;

/// The holds of one key. `limit` is a semaphore's number of permits, 0 for
/// a shared lock (any number of readers, up to `lock.max-holders`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holders {
    pub limit: u32,
    pub list: Vec<Hold>,
}

impl Holders {
    pub fn new(limit: u32) -> Self {
        Holders {
            limit,
            list: Vec::new(),
        }
    }

    /// The live holder that `token` is, if any.
    pub fn find(&self, token: &[u8], now_ms: i64) -> Option<&Hold> {
        self.list
            .iter()
            .find(|h| h.is_live(now_ms) && h.held_by(token))
    }

    pub fn find_mut(&mut self, token: &[u8]) -> Option<&mut Hold> {
        self.list.iter_mut().find(|h| h.held_by(token))
    }

    /// The holder with `fence`, live or not (a SESSION's binding).
    pub fn by_fence(&self, fence: u64) -> Option<&Hold> {
        self.list.iter().find(|h| h.fence == fence)
    }

    pub fn live(&self, now_ms: i64) -> impl Iterator<Item = &Hold> {
        self.list.iter().filter(move |h| h.is_live(now_ms))
    }

    /// Live holders.
    pub fn count_live(&self, now_ms: i64) -> usize {
        self.live(now_ms).count()
    }

    /// Permits out (readers, for a shared lock), counting live holders only.
    pub fn used(&self, now_ms: i64) -> u64 {
        self.live(now_ms).map(|h| u64::from(h.count)).sum()
    }

    /// The highest fence of a live holder (0: none).
    pub fn max_fence(&self, now_ms: i64) -> u64 {
        self.live(now_ms).map(|h| h.fence).max().unwrap_or(0)
    }

    /// The latest deadline of any holder: the key's TTL.
    pub fn latest_deadline(&self) -> Option<i64> {
        self.list.iter().map(|h| h.deadline_ms).max()
    }

    /// The earliest deadline of a live holder: when permits can next come
    /// free by themselves.
    pub fn earliest_deadline(&self, now_ms: i64) -> Option<i64> {
        self.live(now_ms).map(|h| h.deadline_ms).min()
    }

    /// Take out the holders whose lease ran out by `now_ms`.
    pub fn take_expired(&mut self, now_ms: i64) -> Vec<Hold> {
        if self.list.iter().all(|h| h.is_live(now_ms)) {
            return Vec::new();
        }
        let (live, expired) = self.list.drain(..).partition(|h| h.is_live(now_ms));
        self.list = live;
        expired
    }

    /// Take out `token`'s holder.
    pub fn remove(&mut self, token: &[u8]) -> Option<Hold> {
        let at = self.list.iter().position(|h| h.held_by(token))?;
        Some(self.list.remove(at))
    }

    /// Put `holder` in, replacing the one with its token.
    pub fn put(&mut self, holder: Hold) {
        // Equal tokens are stored alike (a canonical UUID always as its 16
        // bytes), so the stored forms compare as the tokens do.
        match self
            .list
            .iter_mut()
            .find(|h| h.holder_token == holder.holder_token)
        {
            Some(existing) => *existing = holder,
            None => {
                // Most keys have one holder: room for exactly one at first.
                if self.list.capacity() == 0 {
                    self.list.reserve_exact(1);
                }
                self.list.push(holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_expire_one_by_one_and_the_key_lives_as_long_as_the_latest() {
        let mut h = Holders::new(3);
        h.put(Hold::granted(b"a", 10, 0, 100));
        h.put(Hold::granted(b"b", 11, 0, 200).with_count(2));
        assert_eq!((h.used(50), h.max_fence(50)), (3, 11));
        assert_eq!(h.latest_deadline(), Some(200));
        assert_eq!(h.earliest_deadline(50), Some(100));
        assert_eq!(h.find(b"a", 100).map(|x| x.fence), Some(10));
        assert_eq!(h.find(b"a", 101), None, "expired at its own deadline");
        assert_eq!(h.used(150), 2);
        let gone = h.take_expired(150);
        assert_eq!(gone.len(), 1);
        assert_eq!(h.list.len(), 1);
        assert!(h.take_expired(150).is_empty());
        // Replacing keeps one entry per token.
        let mut renewed = Hold::granted(b"b", 11, 0, 900).with_count(2);
        renewed.extends = 1;
        h.put(renewed);
        assert_eq!((h.list.len(), h.latest_deadline()), (1, Some(900)));
        assert_eq!(h.remove(b"b").map(|x| x.extends), Some(1));
        assert_eq!(h.remove(b"b"), None);
        assert_eq!(h.latest_deadline(), None);
    }
}
