//! The one hold model. A key holds holds: one exclusive hold (a lock), or up
//! to `lock.max-holders` shared ones (the readers of a lock in shared mode,
//! or the tokens holding a semaphore's permits). Each hold is a [`Hold`]:
//! its holder's token, its own fence and lease, its label and its permits.
//! [`Holds`] is what a key holds, as every caller asks about it: its
//! [`Kind`], the caller's own hold, the [`KeyState`] a decision needs, the
//! holder the observers follow. Two storages sit behind it, because most
//! keys are exclusive locks and a million of them must stay small: the
//! packed 32-byte [`StoredLock`](crate::lock::StoredLock) of one hold, and
//! the [`Holders`] list; nothing above the Redis layer tells them apart.

use std::borrow::Cow;
use std::ffi::CStr;

use crate::errors::LockError;

mod holders;
use crate::rules;
use crate::token::{StoredToken, UUID_LEN};
pub use holders::Holders;

/// One hold on a key. The lease deadline of an exclusive hold is also its
/// key's Redis TTL (which `PTTL` shows and Redis expires); `deadline_ms` is
/// the module's copy, written together with the TTL and kept equal when a
/// client changes the TTL, because a lock Redis removes must tell an expiry
/// from a delete after its TTL is gone. A key with several holds has the
/// latest of their deadlines as its TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub holder_token: StoredToken,
    pub fence: u64,
    /// When this holder was granted (unix ms): `lock.max-hold-ms` counts
    /// from here.
    pub granted_ms: i64,
    /// The lease deadline (unix ms); -1 if unknown (a lock loaded from the
    /// first RDB encoding) or without expiry (`PERSIST` of a lock).
    pub deadline_ms: i64,
    /// Extensions since the grant: `lock.max-extends` counts these.
    pub extends: u32,
    /// Permits held (`SEM.ACQUIRE … COUNT`); 1 for a lock or a reader.
    pub count: u32,
    /// The holder's public label (`OWNER`) and its lease group (`LEASE`),
    /// if any.
    pub tags: Tags,
}

impl Hold {
    /// A new holder: granted at `granted_ms`, not yet extended, one permit.
    pub fn granted(token: &[u8], fence: u64, granted_ms: i64, deadline_ms: i64) -> Self {
        Hold::new(token, fence, granted_ms, deadline_ms, 0)
    }

    pub fn new(token: &[u8], fence: u64, granted_ms: i64, deadline_ms: i64, extends: u32) -> Self {
        Hold {
            holder_token: StoredToken::new(token),
            fence,
            granted_ms,
            deadline_ms,
            extends,
            count: 1,
            tags: Tags::default(),
        }
    }

    /// The same hold, labelled `owner`.
    pub fn with_owner(mut self, owner: Option<&[u8]>) -> Self {
        self.tags.set_owner(owner);
        self
    }

    /// The same hold, attached to the lease group numbered `lease`.
    pub fn with_lease(mut self, lease: Option<u64>) -> Self {
        self.tags.set_lease(lease);
        self
    }

    /// The same hold, of `count` permits.
    pub fn with_count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// Whether `token` holds this: the one ownership check.
    pub fn held_by(&self, token: &[u8]) -> bool {
        self.holder_token.matches(token)
    }

    /// The holder's token as the client gave it; `buffer` holds a UUID's text.
    pub fn token<'a>(&'a self, buffer: &'a mut [u8; UUID_LEN]) -> &'a [u8] {
        self.holder_token.bytes(buffer)
    }

    /// The deadline, if the lease has one.
    pub fn deadline(&self) -> Option<i64> {
        (self.deadline_ms >= 0).then_some(self.deadline_ms)
    }

    /// Whether the lease still runs at `now_ms` (one without a deadline
    /// always does).
    pub fn is_live(&self, now_ms: i64) -> bool {
        self.deadline_ms < 0 || rules::is_live(self.deadline_ms, now_ms)
    }

    /// Bytes kept outside the hold itself.
    pub fn heap_len(&self) -> usize {
        self.holder_token.heap_len() + self.tags.heap_len()
    }

    /// Whether a hold read from an RDB payload is whole: a grant time, and
    /// a deadline or none (-1).
    pub fn is_whole(&self) -> bool {
        self.granted_ms >= 0 && self.deadline_ms >= -1
    }
}

/// What a few holds carry besides their lease: a public label (`OWNER`) and
/// the number of the lease group they are attached to (`LEASE`). One pointer
/// wide inside the hold, so a hold with neither (most) costs no more than
/// before labels and lease groups existed, and a lock's value stays in the
/// same allocator size class.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tags(Option<Box<TagValues>>);

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct TagValues {
    owner: Option<Box<[u8]>>,
    lease: Option<u64>,
}

impl Tags {
    /// The holder's label.
    pub fn owner(&self) -> Option<&[u8]> {
        self.0.as_ref()?.owner.as_deref()
    }

    /// The number of the lease group the hold is attached to.
    pub fn lease(&self) -> Option<u64> {
        self.0.as_ref()?.lease
    }

    pub fn set_owner(&mut self, owner: Option<&[u8]>) {
        self.change(|t| t.owner = owner.map(Box::from));
    }

    pub fn set_lease(&mut self, lease: Option<u64>) {
        self.change(|t| t.lease = lease);
    }

    fn change(&mut self, change: impl FnOnce(&mut TagValues)) {
        let mut values = self.0.take().map_or_else(TagValues::default, |b| *b);
        change(&mut values);
        if values.owner.is_some() || values.lease.is_some() {
            self.0 = Some(Box::new(values));
        }
    }

    /// Whether there is anything: a hold with tags is kept whole.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Bytes kept outside the hold itself.
    pub fn heap_len(&self) -> usize {
        self.0.as_ref().map_or(0, |t| {
            std::mem::size_of::<TagValues>() + t.owner.as_ref().map_or(0, |o| o.len())
        })
    }
}

/// What a request (a caller or a queued waiter) wants of a key, and how a
/// holder holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// The lock, alone (`LOCK.ACQUIRE`).
    Exclusive,
    /// A read lease beside other readers (`LOCK.ACQUIRE … SHARED`).
    Shared,
    /// `count` of a semaphore's `limit` permits (`SEM.ACQUIRE`).
    Permits { limit: u32, count: u32 },
}

impl Want {
    /// The kind of key a grant of this makes.
    pub fn kind(self) -> Kind {
        match self {
            Want::Exclusive => Kind::Exclusive,
            Want::Shared => Kind::Shared,
            Want::Permits { limit, .. } => Kind::Semaphore { limit },
        }
    }

    /// Permits of one hold of this: 1, or the semaphore's `count`.
    pub fn count(self) -> u32 {
        match self {
            Want::Permits { count, .. } => count,
            _ => 1,
        }
    }

    /// Which commands ask for this: `SEM.*` for permits, `LOCK.*` else.
    pub fn family(self) -> Family {
        match self {
            Want::Permits { .. } => Family::Semaphore,
            _ => Family::Lock,
        }
    }

    /// Its name in `LOCK.QUEUE`'s `mode`.
    pub fn mode(self) -> &'static [u8] {
        match self {
            Want::Exclusive => b"exclusive",
            Want::Shared => b"shared",
            Want::Permits { .. } => b"permits",
        }
    }

    /// How a hold of `count` permits holds a key of kind `kind`.
    pub fn of(kind: Kind, count: u32) -> Want {
        match kind {
            Kind::Exclusive => Want::Exclusive,
            Kind::Shared => Want::Shared,
            Kind::Semaphore { limit } => Want::Permits { limit, count },
        }
    }
}

/// What a key that holds anything is: an exclusive lock, a lock held in
/// shared mode, or a semaphore of `limit` permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exclusive,
    Shared,
    Semaphore { limit: u32 },
}

impl Kind {
    /// The several-holders kind of a stored `limit` (0: a shared lock).
    pub fn of_limit(limit: u32) -> Kind {
        if limit == 0 {
            Kind::Shared
        } else {
            Kind::Semaphore { limit }
        }
    }

    /// The `limit` a key with several holders stores: 0 for a shared lock,
    /// none for an exclusive one.
    pub fn limit(self) -> Option<u32> {
        match self {
            Kind::Exclusive => None,
            Kind::Shared => Some(0),
            Kind::Semaphore { limit } => Some(limit),
        }
    }

    /// The keyspace event for `event` on a key of this kind: `lock.*`, or
    /// `sem.*` for a semaphore.
    pub fn event(self, event: Event) -> &'static CStr {
        let semaphore = matches!(self, Kind::Semaphore { .. });
        match (event, semaphore) {
            (Event::Acquired, false) => c"lock.acquired",
            (Event::Acquired, true) => c"sem.acquired",
            (Event::Extended, false) => c"lock.extended",
            (Event::Extended, true) => c"sem.extended",
            (Event::Released, false) => c"lock.released",
            (Event::Released, true) => c"sem.released",
            (Event::Expired, false) => c"lock.expired",
            (Event::Expired, true) => c"sem.expired",
            (Event::Handoff, false) => c"lock.handoff",
            (Event::Handoff, true) => c"sem.handoff",
            (Event::Revoked, false) => c"lock.revoked",
            (Event::Revoked, true) => c"sem.revoked",
        }
    }
}

/// What happened to a hold, for its keyspace event ([`Kind::event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Acquired,
    Extended,
    Released,
    Expired,
    Handoff,
    /// Taken away by `LOCK.REVOKE` or `LOCK.LEASE REVOKE`.
    Revoked,
}

/// Which commands touch a key: `LOCK.*` (exclusive and shared locks) or
/// `SEM.*` (semaphores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Lock,
    Semaphore,
}

/// The WRONGTYPE rule: whether a command of `family` may touch a key of
/// `kind` (none: free, which every family may). `LOCK.QUEUE` and
/// `LOCK.OBSERVE` touch every kind and do not ask.
pub fn admits(family: Family, kind: Option<Kind>) -> Result<(), LockError> {
    match (family, kind) {
        (_, None)
        | (Family::Lock, Some(Kind::Exclusive | Kind::Shared))
        | (Family::Semaphore, Some(Kind::Semaphore { .. })) => Ok(()),
        _ => Err(LockError::WrongType),
    }
}

/// A key with waiters, as a hand-off finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    Free,
    /// A live exclusive lock, with the deadline of its key's TTL (none: no
    /// expiry).
    Held {
        deadline_ms: Option<i64>,
    },
    /// Readers, the earliest of whose leases ends then (none: no reader).
    Shared {
        earliest_ms: Option<i64>,
        holders: usize,
    },
    /// A semaphore with `used` of `limit` permits out, by `holders` tokens.
    Semaphore {
        limit: u32,
        used: u64,
        holders: usize,
        earliest_ms: Option<i64>,
    },
    /// Overwritten with another type.
    WrongType,
}

/// The caller's token already holds the key: how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MyHold {
    pub want: Want,
    pub fence: u64,
    pub granted_ms: i64,
    pub extends: u32,
    /// The lease group it is attached to (`LEASE`), if any: its life is
    /// the lease's, which an extension does not move.
    pub lease: Option<u64>,
}

/// What a key holds, over either storage.
#[derive(Debug, Clone)]
pub enum Holds<'a> {
    Free,
    /// An exclusive lock: one hold (unpacked from its 32 bytes, or
    /// borrowed when kept whole).
    One(Cow<'a, Hold>),
    /// A lock in shared mode, or a semaphore (by its limit).
    Many(&'a Holders),
}

impl<'a> Holds<'a> {
    /// Whether the key holds nothing.
    pub fn is_free(&self) -> bool {
        matches!(self, Holds::Free)
    }

    /// What kind of key it is; `None` when free.
    pub fn kind(&self) -> Option<Kind> {
        match self {
            Holds::Free => None,
            Holds::One(_) => Some(Kind::Exclusive),
            Holds::Many(h) => Some(Kind::of_limit(h.limit)),
        }
    }

    /// Every hold, live or not.
    pub fn all(&self) -> impl Iterator<Item = &Hold> {
        let (one, many) = match self {
            Holds::Free => (None, None),
            Holds::One(hold) => (Some(&**hold), None),
            Holds::Many(h) => (None, Some(h.list.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The holds whose lease runs at `now_ms`.
    pub fn live(&self, now_ms: i64) -> impl Iterator<Item = &Hold> {
        self.all().filter(move |h| h.is_live(now_ms))
    }

    /// The live hold of `token`.
    pub fn of(&self, token: &[u8], now_ms: i64) -> Option<&Hold> {
        match self {
            Holds::Free => None,
            // A lock's lease that ran out is gone from the keyspace already
            // (Redis expires the key as it is opened on a master).
            Holds::One(hold) => hold.held_by(token).then_some(&**hold),
            Holds::Many(h) => h.find(token, now_ms),
        }
    }

    /// The live hold that `token` (none: a token the server will draw) has
    /// on the key, as the decisions take it.
    pub fn mine(&self, token: Option<&[u8]>, now_ms: i64) -> Option<MyHold> {
        let hold = self.of(token?, now_ms)?;
        Some(MyHold {
            want: Want::of(self.kind()?, hold.count),
            fence: hold.fence,
            granted_ms: hold.granted_ms,
            extends: hold.extends,
            lease: hold.tags.lease(),
        })
    }

    /// The hold with `fence` (and `token`, when given), live or not: the
    /// one a SESSION binding or a reclaimed grant means, if it is still
    /// there.
    pub fn bound(&self, fence: u64, token: Option<&[u8]>) -> Option<&Hold> {
        self.all()
            .find(|h| h.fence == fence && token.is_none_or(|t| h.held_by(t)))
    }

    /// The key as the core's decisions see it at `now_ms`.
    pub fn state(&self, now_ms: i64) -> KeyState {
        match self {
            Holds::Free => KeyState::Free,
            Holds::One(hold) => KeyState::Held {
                deadline_ms: hold.deadline(),
            },
            Holds::Many(h) if h.limit == 0 => KeyState::Shared {
                earliest_ms: h.earliest_deadline(now_ms),
                holders: h.count_live(now_ms),
            },
            Holds::Many(h) => KeyState::Semaphore {
                limit: h.limit,
                used: h.used(now_ms),
                holders: h.count_live(now_ms),
                earliest_ms: h.earliest_deadline(now_ms),
            },
        }
    }

    /// Live holds.
    pub fn count_live(&self, now_ms: i64) -> usize {
        self.live(now_ms).count()
    }

    /// The live hold with the highest fence: the one `LOCK.OBSERVE` and
    /// `LOCK.INFO` show for a key with several.
    pub fn newest(&self, now_ms: i64) -> Option<&Hold> {
        self.live(now_ms).max_by_key(|h| h.fence)
    }

    /// The fence observers compare: the newest live hold's, 0 when free.
    pub fn holder_fence(&self, now_ms: i64) -> u64 {
        self.newest(now_ms).map_or(0, |h| h.fence)
    }

    /// The latest deadline of a live hold (none: no live hold, or one
    /// without expiry).
    pub fn latest_deadline(&self, now_ms: i64) -> Option<i64> {
        self.live(now_ms).map(|h| h.deadline()).max().flatten()
    }

    /// The earliest deadline of a live hold: when the key can next change
    /// by itself.
    pub fn earliest_deadline(&self, now_ms: i64) -> Option<i64> {
        self.live(now_ms).filter_map(Hold::deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_by_its_token_only() {
        let hold = Hold::granted(b"me", 7, 1_000, 2_000);
        assert!(hold.held_by(b"me"));
        assert!(!hold.held_by(b"m"));
        assert!(!hold.held_by(b"me "));
        assert_eq!(hold.token(&mut [0u8; UUID_LEN]), b"me");
        assert_eq!((hold.extends, hold.deadline()), (0, Some(2_000)));
        assert_eq!(Hold::granted(b"x", 1, 0, -1).deadline(), None);
        assert!(Hold::granted(b"x", 1, 0, -1).is_live(i64::MAX));
    }

    #[test]
    fn a_label_costs_one_pointer_and_a_hold_stays_within_64_bytes() {
        let labelled = Hold::granted(b"me", 7, 1, 2).with_owner(Some(b"pod-7"));
        assert_eq!(labelled.tags.owner(), Some(&b"pod-7"[..]));
        assert_eq!(labelled.tags.lease(), None);
        assert_eq!(Hold::granted(b"me", 7, 1, 2).tags.owner(), None);
        assert_eq!(std::mem::size_of::<Tags>(), 8);
        let leased = labelled.with_lease(Some(9)).with_owner(None);
        assert_eq!((leased.tags.owner(), leased.tags.lease()), (None, Some(9)));
        assert!(leased.with_lease(None).tags.is_empty());
        assert!(std::mem::size_of::<Hold>() <= 64);
    }

    #[test]
    fn the_wrongtype_rule_keeps_families_to_their_kinds() {
        use Family::*;
        let semaphore = Kind::Semaphore { limit: 3 };
        for kind in [None, Some(Kind::Exclusive), Some(Kind::Shared)] {
            assert_eq!(admits(Lock, kind), Ok(()));
        }
        assert_eq!(admits(Lock, Some(semaphore)), Err(LockError::WrongType));
        assert_eq!(admits(Semaphore, None), Ok(()));
        assert_eq!(admits(Semaphore, Some(semaphore)), Ok(()));
        for kind in [Kind::Exclusive, Kind::Shared] {
            assert_eq!(admits(Semaphore, Some(kind)), Err(LockError::WrongType));
        }
    }

    #[test]
    fn one_view_over_both_storages() {
        let lock = Hold::granted(b"a", 9, 0, 100).with_owner(Some(b"pod"));
        let one = Holds::One(Cow::Owned(lock));
        assert_eq!(one.kind(), Some(Kind::Exclusive));
        assert_eq!(
            one.mine(Some(b"a"), 50),
            Some(MyHold {
                want: Want::Exclusive,
                fence: 9,
                granted_ms: 0,
                extends: 0,
                lease: None,
            })
        );
        assert_eq!(one.mine(Some(b"b"), 50), None);
        assert_eq!(one.mine(None, 50), None);
        assert_eq!(
            one.state(50),
            KeyState::Held {
                deadline_ms: Some(100)
            }
        );
        assert_eq!(one.holder_fence(50), 9);
        assert!(one.bound(9, Some(b"a")).is_some());
        assert!(one.bound(9, Some(b"b")).is_none());
        assert!(one.bound(8, None).is_none());

        let mut sem = Holders::new(5);
        sem.put(Hold::granted(b"x", 1, 0, 100).with_count(3));
        sem.put(Hold::granted(b"y", 2, 0, 200).with_count(1));
        let many = Holds::Many(&sem);
        assert_eq!(many.kind(), Some(Kind::Semaphore { limit: 5 }));
        assert_eq!(
            many.mine(Some(b"x"), 50).map(|m| m.want),
            Some(Want::Permits { limit: 5, count: 3 })
        );
        assert_eq!(many.mine(Some(b"x"), 101), None, "its lease ran out");
        assert_eq!(
            many.state(150),
            KeyState::Semaphore {
                limit: 5,
                used: 1,
                holders: 1,
                earliest_ms: Some(200)
            }
        );
        assert_eq!((many.holder_fence(50), many.holder_fence(150)), (2, 2));
        assert_eq!(many.latest_deadline(50), Some(200));
        assert_eq!(many.earliest_deadline(50), Some(100));
        assert!(many.bound(1, None).is_some(), "live or not");

        let readers = Holders::new(0);
        assert_eq!(Holds::Many(&readers).kind(), Some(Kind::Shared));
        assert_eq!(Holds::Free.state(0), KeyState::Free);
        assert_eq!(Holds::Free.holder_fence(0), 0);
    }

    #[test]
    fn events_are_named_by_kind() {
        assert_eq!(Kind::Exclusive.event(Event::Acquired), c"lock.acquired");
        assert_eq!(Kind::Shared.event(Event::Expired), c"lock.expired");
        assert_eq!(
            Kind::Semaphore { limit: 2 }.event(Event::Handoff),
            c"sem.handoff"
        );
    }
}
