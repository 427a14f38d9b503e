//! The storage of a key with several holds at once: a read/write lock in
//! shared mode (`LOCK.ACQUIRE … SHARED`) and a counting semaphore (`SEM.*`).
//! Each [`Hold`] has its own token, lease, fence, label and permits; one
//! holder's extension or expiry never changes another's lease. No Redis
//! types here: the module stores a [`Holders`] as the value of its
//! `redisshrd` and `redissema` types, and the key's TTL is the latest
//! holder's deadline. Callers read it through [`super::Holds`].

use super::{Hold, Kind};

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

    /// The kind of key these holds make: a shared lock (limit 0) or a
    /// semaphore of `limit` permits.
    pub fn kind(&self) -> Kind {
        Kind::of_limit(self.limit)
    }

    /// Whether holds loaded from an RDB payload for a key of `kind` are
    /// whole: the limit the kind's (0 for a shared lock, at least 1 for a
    /// semaphore), at least one hold, `n` of them with distinct tokens, each
    /// with a deadline and a grant time, one permit per reader and at least
    /// one per permit holder, no more permits than the limit.
    pub fn is_whole(&self, kind: Kind, n: u64) -> bool {
        let shared = self.limit == 0;
        let fits = match kind {
            Kind::Shared => shared,
            Kind::Semaphore { .. } => !shared,
            Kind::Exclusive => false,
        };
        let holds_fit = self.list.iter().all(|h| {
            let count_fits = if shared { h.count == 1 } else { h.count >= 1 };
            h.deadline_ms >= 0 && h.granted_ms >= 0 && count_fits
        });
        let used: u64 = self.list.iter().map(|h| u64::from(h.count)).sum();
        fits && holds_fit
            && n > 0
            && self.list.len() as u64 == n
            && (shared || used <= u64::from(self.limit))
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
        assert_eq!(h.used(50), 3);
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

    #[test]
    fn loaded_holds_are_whole_only_as_their_kind_says() {
        let shared = Kind::Shared;
        let sem = Kind::Semaphore { limit: 3 };
        let mut readers = Holders::new(0);
        readers.put(Hold::granted(b"a", 1, 0, 100));
        readers.put(Hold::granted(b"b", 2, 0, 100));
        assert!(readers.is_whole(shared, 2));
        assert!(
            !readers.is_whole(sem, 2),
            "a shared lock in a semaphore's type"
        );
        assert!(!readers.is_whole(shared, 3), "a token given twice");
        assert!(!Holders::new(0).is_whole(shared, 0), "no holder");
        let mut permits = Holders::new(3);
        permits.put(Hold::granted(b"a", 1, 0, 100).with_count(2));
        assert!(permits.is_whole(sem, 1));
        assert!(!permits.is_whole(shared, 1));
        permits.put(Hold::granted(b"b", 2, 0, 100).with_count(2));
        assert!(!permits.is_whole(sem, 2), "more permits than the limit");
        let mut odd = Holders::new(0);
        odd.put(Hold::granted(b"a", 1, 0, 100).with_count(2));
        assert!(!odd.is_whole(shared, 1), "a reader holds one permit");
        let mut undated = Holders::new(0);
        undated.put(Hold::granted(b"a", 1, 0, -1));
        assert!(!undated.is_whole(shared, 1), "every holder has a deadline");
    }
}
