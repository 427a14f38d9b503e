//! One decision per command and event, as a value.
//!
//! Each function takes the whole situation (what the key holds, as a
//! [`KeyState`], the caller's own hold on it, now, whether others wait, a
//! lock-delay, the hold policy) and returns what to do. One decision covers
//! every kind of hold: an exclusive lock, a reader, a semaphore's permits.
//! The module executes exactly these values (its `commands/` and
//! `wait_queue/`); the unit and property tests here, the differential test
//! and the fuzz targets run the same functions without a server
//! ([`crate::sim`]).

use std::ffi::CStr;

use crate::args::ArgBytes;
use crate::errors::LockError;
use crate::few::Few;
use crate::hold::{Holds, KeyState, MyHold, Want};
use crate::rules::{self, HoldPolicy};

/// Everything an acquire depends on: `LOCK.ACQUIRE` in either mode and
/// `SEM.ACQUIRE`, of a key of any kind.
#[derive(Debug, Clone, Copy)]
pub struct AcquireCase {
    /// The key as it is now: opening it has already removed a lock whose
    /// lease ran out, and the holders whose leases ran out.
    pub key: KeyState,
    /// The caller's own live hold on the key, if its token has one.
    pub mine: Option<MyHold>,
    pub want: Want,
    pub ttl_ms: i64,
    pub now_ms: i64,
    /// Clients are queued for the key: a free key (or room on it) goes to
    /// the head of the queue, never to a newcomer (no barging).
    pub others_waiting: bool,
    /// A lock-delay after an expiry is in force until then (unix ms); only
    /// a free key can have one.
    pub delayed_until_ms: Option<i64>,
    pub hold: HoldPolicy,
    /// `WAIT` was given and the context may block (not MULTI, not a script).
    pub may_wait: bool,
    /// `lock.max-holders`.
    pub max_holders: usize,
    /// `LEASE id`: the lease group the hold is to be attached to, resolved.
    pub lease: Option<Attach>,
}

/// A hold to be attached to a lease group: the lease's number, and the
/// deadline its key's TTL runs to (`group::horizon` past the lease's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attach {
    pub number: u64,
    pub until_ms: i64,
}

/// What an acquire does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// Make the caller a holder with a new fence, until `deadline_ms`.
    Grant { deadline_ms: i64 },
    /// The caller already holds it as it asks: same fence, a new deadline.
    Renew(Renewal),
    /// The caller already holds it as it asks, through its lease group,
    /// which alone moves its deadline: reply its grant, change nothing.
    Held { fence: u64 },
    /// Queue the caller; the key must be looked at again at `wake_at_ms`
    /// (none: the holder's lease has no end, a release or delete will tell).
    Queue { wake_at_ms: Option<i64> },
    /// Reply null: busy, and the caller does not wait.
    Refuse,
}

/// A holder's lease moved on (EXTEND, or ACQUIRE by the holder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    pub fence: u64,
    pub deadline_ms: i64,
    pub extends: u32,
}

impl Renewal {
    /// When the key's queue must be looked at now: a shorter lease brings
    /// the hand-off forward.
    pub fn wake_at_ms(&self) -> i64 {
        rules::lease_over_at(self.deadline_ms)
    }
}

/// `LOCK.ACQUIRE` (exclusive or `SHARED`) and `SEM.ACQUIRE`. The same token
/// asking again as it holds renews its own lease; in another mode (or with
/// another `COUNT`) it is refused with an error: upgrades deadlock. An
/// `Err` is a refusal with that error (`LIMIT` from the hold policy, a ttl
/// that overflows the clock, a key of the other kind), with nothing
/// changed.
pub fn acquire(case: &AcquireCase) -> Result<Acquire, LockError> {
    // The common case first: a free key that nobody waits for.
    if case.key == KeyState::Free && !case.others_waiting && case.delayed_until_ms.is_none() {
        return grant(case);
    }
    let busy = |wake_at_ms: Option<i64>| {
        if case.may_wait {
            Acquire::Queue { wake_at_ms }
        } else {
            Acquire::Refuse
        }
    };
    let wrong_kind = matches!(
        (case.key, case.want),
        (KeyState::Semaphore { .. }, Want::Exclusive | Want::Shared)
            | (
                KeyState::Held { .. } | KeyState::Shared { .. },
                Want::Permits { .. }
            )
            | (KeyState::WrongType, _)
    );
    if wrong_kind {
        return Err(LockError::WrongType);
    }
    if let (KeyState::Semaphore { limit, .. }, Want::Permits { limit: wanted, .. }) =
        (case.key, case.want)
    {
        if limit != wanted {
            return Err(LockError::LimitMismatch);
        }
    }
    if let Some(mine) = case.mine {
        if mine.want != case.want {
            return Err(mismatch(mine.want, case.want));
        }
        if mine.lease != case.lease.map(|a| a.number) {
            return Err(LockError::LeaseMismatch);
        }
        if mine.lease.is_some() {
            return Ok(Acquire::Held { fence: mine.fence });
        }
        return renew(mine, case.ttl_ms, case.now_ms, case.hold).map(Acquire::Renew);
    }
    let holders = match case.key {
        KeyState::Shared { holders, .. } | KeyState::Semaphore { holders, .. } => holders,
        _ => 0,
    };
    if holders >= case.max_holders && case.want != Want::Exclusive {
        return Err(LockError::HoldersLimit);
    }
    if case.others_waiting {
        // No barging: the queue is served first; when it can next move is
        // the hand-off's business, which a timer already has in hand (a
        // free key's: now, or when its lock-delay ends).
        let wake = match case.key {
            KeyState::Free => Some(case.delayed_until_ms.unwrap_or(case.now_ms)),
            KeyState::Held { deadline_ms } => deadline_ms.map(rules::lease_over_at),
            KeyState::Shared { earliest_ms, .. } | KeyState::Semaphore { earliest_ms, .. } => {
                earliest_ms.map(rules::lease_over_at)
            }
            KeyState::WrongType => None,
        };
        return Ok(busy(wake));
    }
    match serve(case.key, case.want, case.delayed_until_ms, case.max_holders) {
        Serve::Grant => grant(case),
        // `mine` was handled above: `serve` never renews.
        Serve::Renew | Serve::Held => Err(LockError::Internal),
        Serve::WakeAt(at) => Ok(busy(Some(at))),
        Serve::Idle => Ok(busy(None)),
        Serve::FailAll(e) | Serve::FailHead(e) => Err(e),
    }
}

/// One key of a multi-key acquire (`LOCK.MACQUIRE`), as that key's own
/// acquire would see it ([`AcquireCase`]'s per-key fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManyKey {
    pub key: KeyState,
    pub mine: Option<MyHold>,
    /// Clients queued for this key ahead of the caller: for a new request,
    /// anyone; for a queued one being served, anyone older.
    pub others_waiting: bool,
    pub delayed_until_ms: Option<i64>,
}

/// Everything a multi-key acquire depends on: its keys, and what
/// [`AcquireCase`] says of the request.
#[derive(Debug, Clone, Copy)]
pub struct AcquireManyCase<'a> {
    pub keys: &'a [ManyKey],
    pub want: Want,
    pub ttl_ms: i64,
    pub now_ms: i64,
    pub hold: HoldPolicy,
    pub may_wait: bool,
    pub max_holders: usize,
    pub lease: Option<Attach>,
    /// A queued request being served (first in every key's queue): each
    /// key is decided as the hand-off decides a single-key waiter
    /// ([`serve_head`]), so that a key it cannot have yet (even one at
    /// `lock.max-holders`) keeps it waiting rather than failing it. `lease`
    /// is then the number of the lease it asked for even if that lease is
    /// gone (`until_ms` is only read for a grant, which the module refuses
    /// with `NOLEASE` when the lease is gone).
    pub queued: bool,
}

impl AcquireManyCase<'_> {
    /// One key of the request, as that key's own acquire sees it.
    #[inline]
    fn of_key(&self, key: &ManyKey, may_wait: bool) -> AcquireCase {
        AcquireCase {
            key: key.key,
            mine: key.mine,
            want: self.want,
            ttl_ms: self.ttl_ms,
            now_ms: self.now_ms,
            others_waiting: key.others_waiting,
            delayed_until_ms: key.delayed_until_ms,
            hold: self.hold,
            may_wait,
            max_holders: self.max_holders,
            lease: self.lease,
        }
    }
}

/// What an acquire of 1..n keys does: all keys or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireMany {
    /// Make the caller a holder of every key, with one new fence (the
    /// next one, above every fence any of the keys has had), until
    /// `deadline_ms`.
    Grant { deadline_ms: i64 },
    /// The caller holds every key, all with `fence` (its own earlier
    /// grant): each lease renewed, in key order.
    Renew { fence: u64, renewals: Few<Renewal> },
    /// As `Renew`, held through a lease group: reply the grant.
    Held { fence: u64 },
    /// Queue the caller on every key; look at key `i` again at its time
    /// (keys with no time are looked at when they change).
    Queue { wake: Few<(usize, i64)> },
    /// Reply null: some key is busy, and the caller does not wait.
    Refuse,
}

/// `LOCK.ACQUIRE`, `SEM.ACQUIRE` and `LOCK.MACQUIRE`, for 1..n keys: each
/// key is decided as it would be alone ([`acquire`]), and the request is
/// granted only when every key would be granted; an error on any key
/// (`WRONGTYPE`, a limit) refuses the whole request, whatever the other
/// keys say. A token that holds every key with one fence renews them all
/// (an idempotent retry); one that holds only some, or with several
/// fences, is refused ([`LockError::PartialHold`]): a fence must be the
/// same on every key. The same function serves a queued request once it is
/// first in every key's queue (`queued`: each key decided as the hand-off
/// decides it, [`serve_head`]; `Queue` then means "not yet"), through
/// [`serve_waiter`]. One key allocates nothing.
pub fn acquire_many(case: &AcquireManyCase) -> Result<AcquireMany, LockError> {
    if let ([key], false) = (case.keys, case.queued) {
        return acquire_one(case, key);
    }
    let mut renewals = Few::new();
    let mut held = None;
    let mut deadline = None;
    let mut wake = Few::new();
    let mut busy = false;
    let mut odd = false;
    for (i, key) in case.keys.iter().enumerate() {
        let single = case.of_key(key, true);
        let decision = match case.queued {
            true => serve_queued(&single)?,
            false => acquire(&single)?,
        };
        match decision {
            Acquire::Grant { deadline_ms } => deadline = Some(deadline_ms),
            Acquire::Renew(renewal) => renewals.push(renewal),
            Acquire::Held { fence } => held = Some(fence),
            Acquire::Queue { wake_at_ms } => {
                busy = true;
                // Only a caller that waits is woken: a refusal allocates
                // nothing.
                if let (Some(at), true) = (wake_at_ms, case.may_wait) {
                    wake.push((i, at));
                }
            }
            Acquire::Refuse => odd = true,
        }
    }
    let mut mine = case.keys.iter().map(|k| k.mine.map(|m| m.fence));
    if let Some(Some(fence)) = mine.next() {
        if !mine.all(|f| f == Some(fence)) {
            return Err(LockError::PartialHold);
        }
        return match held {
            Some(_) => Ok(AcquireMany::Held { fence }),
            None if renewals.len() == case.keys.len() => Ok(AcquireMany::Renew { fence, renewals }),
            None => Err(LockError::Internal),
        };
    }
    if case.keys.iter().any(|k| k.mine.is_some()) {
        return Err(LockError::PartialHold);
    }
    if odd || held.is_some() || !renewals.is_empty() {
        return Err(LockError::Internal);
    }
    match (busy, deadline) {
        (false, Some(deadline_ms)) => Ok(AcquireMany::Grant { deadline_ms }),
        (false, None) => Err(LockError::Internal),
        (true, _) if case.may_wait => Ok(AcquireMany::Queue { wake }),
        (true, _) => Ok(AcquireMany::Refuse),
    }
}

/// [`acquire_many`] of one key that is not queued: the key's own
/// [`acquire`], put as the answer for all keys (the same answer the loop
/// gives, without it: the hot path of every `LOCK.ACQUIRE`).
#[inline]
fn acquire_one(case: &AcquireManyCase, key: &ManyKey) -> Result<AcquireMany, LockError> {
    let decided = acquire(&case.of_key(key, case.may_wait))?;
    Ok(match decided {
        Acquire::Grant { deadline_ms } => AcquireMany::Grant { deadline_ms },
        Acquire::Renew(renewal) => AcquireMany::Renew {
            fence: renewal.fence,
            renewals: Few::One([renewal]),
        },
        Acquire::Held { fence } => AcquireMany::Held { fence },
        Acquire::Queue { wake_at_ms } => AcquireMany::Queue {
            wake: wake_at_ms.map_or(Few::Zero, |at| Few::One([(0, at)])),
        },
        Acquire::Refuse => AcquireMany::Refuse,
    })
}

/// What the hand-off does with a waiter that is first in every queue it is
/// in ([`crate::waitqueue::WaitQueues::servable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// Grant it every key, with one new fence, until `deadline_ms`.
    Grant { deadline_ms: i64 },
    /// Its token holds every key as it asks: renew each, answer the grant.
    Renew { fence: u64, renewals: Few<Renewal> },
    /// As `Renew`, held through its lease group: answer the grant.
    Held { fence: u64 },
    /// It can never have them as it asks: fail it with this error.
    Fail(LockError),
    /// Not yet: it keeps its place; look at key `i` again at its time.
    Wait { wake: Few<(usize, i64)> },
}

/// The hand-off's decision for a waiter of 1..n keys that is first in each
/// of its keys' queues: [`acquire_many`] with `queued`, as the waiter's own
/// answer (a key of another type is `WAIT`'s `WRONGTYPE`). A waiter of one
/// key and of many are served by this one rule.
pub fn serve_waiter(case: &AcquireManyCase) -> Served {
    let case = AcquireManyCase {
        queued: true,
        may_wait: true,
        ..*case
    };
    match acquire_many(&case) {
        Ok(AcquireMany::Grant { deadline_ms }) => Served::Grant { deadline_ms },
        Ok(AcquireMany::Renew { fence, renewals }) => Served::Renew { fence, renewals },
        Ok(AcquireMany::Held { fence }) => Served::Held { fence },
        Ok(AcquireMany::Queue { wake }) => Served::Wait { wake },
        Ok(AcquireMany::Refuse) => Served::Wait { wake: Few::new() },
        Err(LockError::WrongType) => Served::Fail(LockError::WaitWrongType),
        Err(error) => Served::Fail(error),
    }
}

/// One key of a queued multi-key request, as the hand-off serves a
/// single-key waiter ([`serve_head`]), put as an acquire's decision.
fn serve_queued(case: &AcquireCase) -> Result<Acquire, LockError> {
    let head = (case.want, case.lease.map(|a| a.number));
    let served = serve_head(
        case.key,
        head,
        case.mine,
        case.delayed_until_ms,
        case.max_holders,
    );
    match (served, case.mine) {
        (Serve::Grant, _) => grant(case),
        (Serve::Renew, Some(mine)) => {
            renew(mine, case.ttl_ms, case.now_ms, case.hold).map(Acquire::Renew)
        }
        (Serve::Held, Some(mine)) => Ok(Acquire::Held { fence: mine.fence }),
        (Serve::Renew | Serve::Held, None) => Err(LockError::Internal),
        (Serve::WakeAt(at), _) => Ok(Acquire::Queue {
            wake_at_ms: Some(at),
        }),
        (Serve::Idle, _) => Ok(Acquire::Queue { wake_at_ms: None }),
        (Serve::FailAll(error) | Serve::FailHead(error), _) => Err(error),
    }
}

/// `LOCK.EXTEND`, `SEM.EXTEND` and `LOCK.MEXTEND`, for 1..n keys: every
/// key's lease moves, or none. `mine` is the caller's live hold on each
/// key; `None` (reply 0, nothing changed) when it lacks one; a key held
/// through a lease group is not moved (its lease moves it). One key
/// allocates nothing.
pub fn extend_many(
    mine: &[Option<MyHold>],
    ttl_ms: i64,
    now_ms: i64,
    hold: HoldPolicy,
) -> Result<Option<Few<Extend>>, LockError> {
    let mut extended = Few::with_capacity(mine.len());
    for hold_of_key in mine {
        match extend(*hold_of_key, ttl_ms, now_ms, hold)? {
            Extend::NotHolder => return Ok(None),
            done => extended.push(done),
        }
    }
    Ok(Some(extended))
}

/// A grant to the caller: until its ttl from now, or, attached to a lease
/// group, until the horizon its key runs to (the ttl must be valid all the
/// same).
fn grant(case: &AcquireCase) -> Result<Acquire, LockError> {
    let deadline_ms = rules::deadline_ms(case.now_ms, case.ttl_ms)?;
    Ok(Acquire::Grant {
        deadline_ms: grant_deadline(deadline_ms, case.lease),
    })
}

/// The deadline of a hold granted with `deadline_ms` from its ttl, attached
/// to `lease` if any: the lease's key horizon instead, which `ttl-ms` does
/// not shorten (the lease alone ends the hold).
pub fn grant_deadline(deadline_ms: i64, lease: Option<Attach>) -> i64 {
    lease.map_or(deadline_ms, |a| a.until_ms)
}

/// What `LOCK.EXTEND` (and `SEM.EXTEND`) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extend {
    Renewed(Renewal),
    /// The token holds the key through its lease group, which alone moves
    /// its deadline (`LOCK.LEASE KEEPALIVE`): reply 1, change nothing.
    Leased,
    /// The token holds nothing on the key: reply 0.
    NotHolder,
}

/// `LOCK.EXTEND` / `SEM.EXTEND`: only a holder extends its own lease (`mine`
/// is the caller's live hold, if its token has one), within the hold
/// policy; another holder's lease does not move.
pub fn extend(
    mine: Option<MyHold>,
    ttl_ms: i64,
    now_ms: i64,
    hold: HoldPolicy,
) -> Result<Extend, LockError> {
    match mine {
        Some(mine) if mine.lease.is_some() => Ok(Extend::Leased),
        Some(mine) => renew(mine, ttl_ms, now_ms, hold).map(Extend::Renewed),
        None => Ok(Extend::NotHolder),
    }
}

/// A holder's own lease, `ttl_ms` from now, if the hold policy allows it;
/// an extension past the policy is refused whole, so the holder learns of
/// the limit while it still holds the key.
pub fn renew(
    mine: MyHold,
    ttl_ms: i64,
    now_ms: i64,
    hold: HoldPolicy,
) -> Result<Renewal, LockError> {
    let deadline_ms = rules::deadline_ms(now_ms, ttl_ms)?;
    rules::check_extend(mine.granted_ms, mine.extends, deadline_ms, hold)?;
    Ok(Renewal {
        fence: mine.fence,
        deadline_ms,
        extends: mine.extends.saturating_add(1).min(rules::MAX_EXTENDS),
    })
}

/// `LOCK.RELEASE` / `SEM.RELEASE`: whether the caller (`mine`, its live
/// hold) may give a hold back (then it goes, and the queue is served);
/// otherwise reply 0.
pub fn release(mine: Option<MyHold>) -> bool {
    mine.is_some()
}

/// What a hand-off does with a key's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// Grant the key to the head of the queue (then ask again for the next).
    Grant,
    /// The head's token already holds the key, as the head asks for it (two
    /// waiters with one token, granted one after the other): renew that
    /// hold (same fence), as a direct `ACQUIRE` by the holder would.
    Renew,
    /// As [`Serve::Renew`], of a hold that lives as long as its lease
    /// group: answer the head with its grant, change nothing.
    Held,
    /// Not yet: look again at this time (unix ms).
    WakeAt(i64),
    /// Held without expiry: a release or delete will tell.
    Idle,
    /// Nobody can get the key: fail every waiter with this error.
    FailAll(LockError),
    /// The head can never get this key as it is: fail it, serve the next.
    FailHead(LockError),
}

/// A hand-off: the head of the queue is served as soon as it fits, in
/// arrival order: a free key (past any lock-delay) to anyone; readers beside
/// readers; permits while enough are free. A head that does not fit blocks
/// everyone behind it (no writer and no large request starves).
pub fn serve(
    key: KeyState,
    head: Want,
    delayed_until_ms: Option<i64>,
    max_holders: usize,
) -> Serve {
    let wake = |earliest: Option<i64>| {
        earliest.map_or(Serve::Idle, |d| Serve::WakeAt(rules::lease_over_at(d)))
    };
    match (key, head) {
        (KeyState::WrongType, _) => Serve::FailAll(LockError::WaitWrongType),
        (KeyState::Free, _) => match delayed_until_ms {
            Some(until) => Serve::WakeAt(until),
            None => Serve::Grant,
        },
        (KeyState::Held { .. }, Want::Permits { .. })
        | (KeyState::Shared { .. }, Want::Permits { .. })
        | (KeyState::Semaphore { .. }, Want::Exclusive | Want::Shared) => {
            Serve::FailHead(LockError::WaitWrongType)
        }
        (KeyState::Held { deadline_ms }, _) => wake(deadline_ms),
        (KeyState::Shared { holders, .. }, Want::Shared) if holders < max_holders => Serve::Grant,
        (KeyState::Shared { earliest_ms, .. }, _) => wake(earliest_ms),
        (
            KeyState::Semaphore {
                limit,
                used,
                holders,
                earliest_ms,
            },
            Want::Permits {
                limit: wanted,
                count,
            },
        ) => {
            if wanted != limit {
                Serve::FailHead(LockError::LimitMismatch)
            } else if used + u64::from(count) <= u64::from(limit) && holders < max_holders {
                Serve::Grant
            } else {
                wake(earliest_ms)
            }
        }
    }
}

/// A hand-off's decision for the head of the queue, whose token may
/// already hold the key (`mine`): then it is renewed if it asks for the same
/// hold, and fails (`ModeConflict`, `CountMismatch`) if it asks for another,
/// exactly as a direct `ACQUIRE` with that token would; otherwise
/// [`serve`].
pub fn serve_head(
    key: KeyState,
    head: (Want, Option<u64>),
    mine: Option<MyHold>,
    delayed_until_ms: Option<i64>,
    max_holders: usize,
) -> Serve {
    let (head, head_lease) = head;
    match mine {
        Some(mine) if mine.want == head && mine.lease != head_lease => {
            Serve::FailHead(LockError::LeaseMismatch)
        }
        Some(mine) if mine.want == head && mine.lease.is_some() => Serve::Held,
        Some(mine) if mine.want == head => Serve::Renew,
        Some(mine) => Serve::FailHead(mismatch(mine.want, head)),
        None => serve(key, head, delayed_until_ms, max_holders),
    }
}

/// The error for a token that holds a key as `held` and asks for `wanted`.
fn mismatch(held: Want, wanted: Want) -> LockError {
    match (held, wanted) {
        (Want::Permits { .. }, Want::Permits { .. }) => LockError::CountMismatch,
        _ => LockError::ModeConflict,
    }
}

/// What a removal of a lease by the server (not by this module) at `now_ms`
/// can be, by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlinked {
    /// The lease had run out: an expiry, or the delete of a dead lease.
    Over,
    /// During the lease's last millisecond. Redis 7.0 and Valkey expire a
    /// key only once `now` passes its expiry time, but Redis 8's active
    /// expiry cycle removes it when `now` reaches it (`now >= when`): there
    /// this is an expiry that cut the lease's last millisecond. A client's
    /// `DEL` in that millisecond looks the same; the keyspace event that
    /// follows tells them apart (`expired`, or anything else).
    LastMillisecond,
    /// A live lease, deleted or overwritten.
    Live,
}

/// How Redis' removal of a lease with this deadline counts (see
/// [`Unlinked`]).
pub fn unlinked(deadline_ms: i64, now_ms: i64) -> Unlinked {
    if deadline_ms < 0 {
        Unlinked::Live
    } else if !rules::is_live(deadline_ms, now_ms) {
        Unlinked::Over
    } else if now_ms == deadline_ms {
        Unlinked::LastMillisecond
    } else {
        Unlinked::Live
    }
}

/// After an expiry at `deadline_ms`: until when nobody is granted the key,
/// if that is still ahead. That is `lock.expiry-delay-ms` after the
/// deadline, and at least to the end of the deadline's millisecond: a lease
/// holds through it, even where Redis removed the key as it began.
pub fn lock_delay(deadline_ms: i64, delay_ms: i64, now_ms: i64) -> Option<i64> {
    let until =
        rules::embargo_until(deadline_ms, delay_ms.max(0)).max(rules::lease_over_at(deadline_ms));
    (until > now_ms).then_some(until)
}

/// What Redis' removal of a key's holds (not by this module: an expiry, a
/// `DEL`, an overwrite) means, decided as the key leaves, while its value
/// can still be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removal {
    /// Holds whose lease had run out, or was in its last millisecond: each
    /// is an expiry if Redis' `expired` event follows.
    pub expiries: usize,
    /// Nobody is granted the key before then: the lock-delay after a lock's
    /// expiry (`lock.expiry-delay-ms`, `delay_ms`), and at least the end of
    /// a lease's last millisecond, which the lease still owns.
    pub delay_until_ms: Option<i64>,
    /// The delay ends again unless the event is `expired`: a client's `DEL`
    /// in the lease's last millisecond looks the same as Redis 8's expiry.
    pub provisional: bool,
}

/// The [`Removal`] of `holds` at `now_ms`; none when no lease had run out
/// (a `DEL` of live holds: not an expiry). A replica's keys leave by its
/// master's `DEL`; it starts no delay. A key with several holders starts
/// no `lock.expiry-delay-ms`: only its leases' last millisecond is kept.
pub fn removed(holds: &Holds, now_ms: i64, delay_ms: i64, replica: bool) -> Option<Removal> {
    let mut expiries = 0;
    let mut last_ms = None;
    let mut over_at = None;
    for hold in holds.all() {
        match unlinked(hold.deadline_ms, now_ms) {
            Unlinked::Over => {
                expiries += 1;
                over_at = Some(hold.deadline_ms);
            }
            Unlinked::LastMillisecond => {
                expiries += 1;
                last_ms = Some(hold.deadline_ms);
            }
            Unlinked::Live => {}
        }
    }
    if expiries == 0 {
        return None;
    }
    let exclusive = matches!(holds, Holds::One(_));
    let delay_until_ms = match (replica, exclusive) {
        (true, _) => None,
        (false, true) => last_ms
            .or(over_at)
            .and_then(|deadline| lock_delay(deadline, delay_ms, now_ms)),
        (false, false) => last_ms.and_then(|deadline| lock_delay(deadline, 0, now_ms)),
    };
    Some(Removal {
        expiries,
        delay_until_ms,
        provisional: !exclusive || last_ms.is_some(),
    })
}

/// `LOCK.OBSERVE`: when to look at an observed key whose earliest lease
/// ends at `deadline_ms`: one ms after the lease is over, so that a
/// waiter's hand-off, due as it ends, runs first, and observers see the
/// next holder rather than the instant the key was free between the two.
pub fn observe_at(deadline_ms: i64) -> i64 {
    rules::lease_over_at(deadline_ms).saturating_add(1)
}

/// `LOCK.OBSERVE`: whether the holder (by fence; 0 for free) differs from
/// the one the observer last saw, so that it is answered now.
pub fn holder_changed(seen_fence: u64, holder_fence: u64) -> bool {
    seen_fence != holder_fence
}

/// `LOCK.GUARD`: whether the caller (`mine`, its live hold) may run the
/// guarded command, and whether that command may only read (a reader of a
/// key held in shared mode); anyone else is `LOST`, telling a free key
/// (`holders` 0) from one another token holds. A guarded command renews
/// nothing and takes no fence.
pub fn guard(mine: Option<MyHold>, holders: usize) -> Result<bool, LockError> {
    match mine {
        Some(MyHold {
            want: Want::Exclusive,
            ..
        }) => Ok(false),
        Some(MyHold {
            want: Want::Shared, ..
        }) => Ok(true),
        Some(_) => Err(LockError::WrongType),
        None if holders > 0 => Err(LockError::LostOther),
        None => Err(LockError::LostFree),
    }
}

/// What the server says of a command, as `LOCK.GUARD` needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommandFlags {
    /// `blocking`: it may block the client (`BLPOP`, `WAIT`, `XREAD` …).
    pub blocking: bool,
    /// `noscript`: Redis refuses it in scripts (`MULTI`, `EXEC`, `WATCH`,
    /// `SUBSCRIBE`, …, and the script commands themselves).
    pub noscript: bool,
    /// `readonly`: it never writes (`GET`, `LRANGE`, …).
    pub readonly: bool,
}

/// `LOCK.GUARD … SYNC`: whether the reply waits for replicas, after the
/// guarded command ran (its flags, and whether it replied an error). A
/// command that failed, or that never writes (not a script, which may),
/// replicated nothing: its own reply goes back at once.
pub fn guard_sync_waits(flags: Option<CommandFlags>, run: &GuardedRun, failed: bool) -> bool {
    let reads_only = flags.is_some_and(|f| f.readonly) && run.script_mode;
    !failed && !reads_only
}

/// How a guarded command is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardedRun {
    /// Run it in script mode, as a script would (refusing what scripts may
    /// not do, and writes without enough good replicas). Off for `EVAL`,
    /// `EVALSHA` and `FCALL`, which are themselves not allowed in scripts
    /// but run a script of their own under one check.
    pub script_mode: bool,
    /// The read-only twin of a script command (`EVAL` → `EVAL_RO`,
    /// `EVALSHA` → `EVALSHA_RO`, `FCALL` → `FCALL_RO`), which a reader's
    /// guard runs instead: the server's refusal of write commands (`RM_Call`'s
    /// `W`) looks at a command's own flags, and the script commands are not
    /// flagged `write`, whatever their script does. The twin refuses every
    /// write the script tries, and a script that declares writes.
    pub read_only_twin: Option<&'static CStr>,
}

impl GuardedRun {
    /// The name to run for a caller that may only read (a reader of a
    /// shared lock, or `LOCK.GUARD_RO`): the read-only twin of a script
    /// command, else the command's own.
    pub fn name_for_reader(&self) -> Option<&'static CStr> {
        self.read_only_twin
    }
}

/// Script commands: allowed in `LOCK.GUARD`, although Redis flags them
/// `noscript`, so that several keys change under one check; each with its
/// read-only twin (none: it is read-only itself).
const SCRIPT_COMMANDS: [(&[u8], Option<&CStr>); 6] = [
    (b"eval", Some(c"EVAL_RO")),
    (b"evalsha", Some(c"EVALSHA_RO")),
    (b"eval_ro", None),
    (b"evalsha_ro", None),
    (b"fcall", Some(c"FCALL_RO")),
    (b"fcall_ro", None),
];

/// Whether the command `name` with these arguments blocks. The server flags
/// `XREAD` and `XREADGROUP` `blocking`, but only their `BLOCK` form blocks
/// (an option before `STREAMS`); every other command flagged `blocking`
/// blocks.
fn blocks<A: ArgBytes>(name: &[u8], flags: CommandFlags, args: &[A]) -> bool {
    if !flags.blocking {
        return false;
    }
    if !name.eq_ignore_ascii_case(b"xread") && !name.eq_ignore_ascii_case(b"xreadgroup") {
        return true;
    }
    args.iter()
        .map(ArgBytes::bytes)
        .take_while(|a| !a.eq_ignore_ascii_case(b"streams"))
        .any(|a| a.eq_ignore_ascii_case(b"block"))
}

/// Whether `LOCK.GUARD` may run the command `name args…` (any case), whose
/// flags the server reported (`None`: the server does not know it; it will
/// say so itself). Refused: a name with a NUL byte (no command has one, and
/// the server reads a command's name up to its first NUL: `SET\0x` would
/// run `SET`), the module's own commands, commands that block, and commands
/// Redis refuses in scripts (transactions, `WATCH`, pub/sub subscriptions,
/// …), except the script commands, which are refused only when
/// `LOCK.GUARD` itself runs in a script (`in_script`): a script cannot
/// start another (Redis asserts).
pub fn guarded_command<A: ArgBytes>(
    name: &[u8],
    args: &[A],
    flags: Option<CommandFlags>,
    in_script: bool,
) -> Result<GuardedRun, LockError> {
    if name.contains(&0) {
        return Err(LockError::GuardUnknownCommand);
    }
    let starts = |prefix: &[u8]| {
        name.len() > prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix)
    };
    if starts(b"lock.") || starts(b"sem.") {
        return Err(LockError::GuardLockCommand);
    }
    let flags = flags.unwrap_or_default();
    if blocks(name, flags, args) {
        return Err(LockError::GuardBlocking);
    }
    let script = SCRIPT_COMMANDS
        .iter()
        .find(|(s, _)| name.eq_ignore_ascii_case(s));
    if script.is_some() && in_script {
        return Err(LockError::GuardScriptInScript);
    }
    if flags.noscript && script.is_none() {
        return Err(LockError::GuardNoScript);
    }
    Ok(GuardedRun {
        script_mode: script.is_none(),
        read_only_twin: script.and_then(|(_, twin)| *twin),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::Hold;
    use std::borrow::Cow;

    const NOW: i64 = 1_000_000;

    /// An exclusive acquire of a key that `holder` holds (or none), by
    /// `token`, as the module builds it from the key.
    fn case(holder: Option<&Hold>, token: Option<&[u8]>) -> AcquireCase {
        let holds = holder.map_or(Holds::Free, |h| Holds::One(Cow::Borrowed(h)));
        AcquireCase {
            key: holds.state(NOW),
            mine: holds.mine(token, NOW),
            want: Want::Exclusive,
            ttl_ms: 100,
            now_ms: NOW,
            others_waiting: false,
            delayed_until_ms: None,
            hold: HoldPolicy::default(),
            may_wait: false,
            max_holders: 1000,
            lease: None,
        }
    }

    fn held_by(token: &[u8]) -> Hold {
        Hold::granted(token, 42, NOW - 10, NOW + 50)
    }

    /// `extend` by `token` of the exclusive `holder`.
    fn extend_of(
        holder: Option<&Hold>,
        token: &[u8],
        ttl_ms: i64,
        hold: HoldPolicy,
    ) -> Result<Extend, LockError> {
        let holds = holder.map_or(Holds::Free, |h| Holds::One(Cow::Borrowed(h)));
        extend(holds.mine(Some(token), NOW), ttl_ms, NOW, hold)
    }

    fn mine_of(holder: Option<&Hold>, token: &[u8]) -> Option<MyHold> {
        holder
            .map_or(Holds::Free, |h| Holds::One(Cow::Borrowed(h)))
            .mine(Some(token), NOW)
    }

    #[test]
    fn free_key_is_granted_own_token_renews_foreign_token_is_refused() {
        let grant = Ok(Acquire::Grant {
            deadline_ms: NOW + 100,
        });
        assert_eq!(acquire(&case(None, Some(b"a"))), grant);
        assert_eq!(acquire(&case(None, None)), grant);
        let a = held_by(b"a");
        assert_eq!(
            acquire(&case(Some(&a), Some(b"a"))),
            Ok(Acquire::Renew(Renewal {
                fence: 42,
                deadline_ms: NOW + 100,
                extends: 1
            }))
        );
        for other in [&b"b"[..], b"a ", b""] {
            assert_eq!(acquire(&case(Some(&a), Some(other))), Ok(Acquire::Refuse));
        }
        assert_eq!(acquire(&case(Some(&a), None)), Ok(Acquire::Refuse));
    }

    #[test]
    fn a_free_key_with_waiters_is_not_granted_to_a_newcomer_but_the_holder_renews() {
        let a = held_by(b"a");
        fn waiting(c: AcquireCase) -> AcquireCase {
            AcquireCase {
                others_waiting: true,
                ..c
            }
        }
        assert_eq!(
            acquire(&waiting(case(None, Some(b"a")))),
            Ok(Acquire::Refuse)
        );
        assert_eq!(acquire(&waiting(case(None, None))), Ok(Acquire::Refuse));
        assert!(matches!(
            acquire(&waiting(case(Some(&a), Some(b"a")))),
            Ok(Acquire::Renew(_))
        ));
        assert_eq!(
            acquire(&waiting(case(Some(&a), Some(b"b")))),
            Ok(Acquire::Refuse)
        );
    }

    #[test]
    fn a_waiting_caller_is_queued_with_the_time_the_key_can_next_be_free() {
        let a = held_by(b"a");
        fn wait(c: AcquireCase) -> AcquireCase {
            AcquireCase {
                may_wait: true,
                ..c
            }
        }
        // Held: one ms after the holder's deadline.
        assert_eq!(
            acquire(&wait(case(Some(&a), Some(b"b")))),
            Ok(Acquire::Queue {
                wake_at_ms: Some(NOW + 51)
            })
        );
        // Held with no expiry: nothing to arm.
        let persisted = AcquireCase {
            key: KeyState::Held { deadline_ms: None },
            ..wait(case(Some(&a), Some(b"b")))
        };
        assert_eq!(acquire(&persisted), Ok(Acquire::Queue { wake_at_ms: None }));
        // Free but queued for: the queue is served now.
        let queued = AcquireCase {
            others_waiting: true,
            ..wait(case(None, None))
        };
        assert_eq!(
            acquire(&queued),
            Ok(Acquire::Queue {
                wake_at_ms: Some(NOW)
            })
        );
        // Free in a lock-delay: when it ends, whether or not others wait.
        let delayed = AcquireCase {
            delayed_until_ms: Some(NOW + 7),
            ..wait(case(None, None))
        };
        assert_eq!(
            acquire(&delayed),
            Ok(Acquire::Queue {
                wake_at_ms: Some(NOW + 7)
            })
        );
        assert_eq!(
            acquire(&AcquireCase {
                may_wait: false,
                ..delayed
            }),
            Ok(Acquire::Refuse)
        );
        // A free key is granted, WAIT or not.
        assert!(matches!(
            acquire(&wait(case(None, None))),
            Ok(Acquire::Grant { .. })
        ));
    }

    #[test]
    fn renewal_and_extension_follow_the_hold_policy() {
        let a = Hold::new(b"a", 9, NOW - 1_000, NOW + 10, 2);
        let policy = HoldPolicy {
            max_hold_ms: 1_500,
            max_extends: 3,
        };
        assert_eq!(
            extend_of(Some(&a), b"a", 400, policy),
            Ok(Extend::Renewed(Renewal {
                fence: 9,
                deadline_ms: NOW + 400,
                extends: 3
            }))
        );
        assert_eq!(
            extend_of(Some(&a), b"a", 501, policy),
            Err(LockError::HoldLimit)
        );
        let worn = Hold::new(b"a", 9, NOW, NOW + 10, 3);
        assert_eq!(
            extend_of(Some(&worn), b"a", 1, policy),
            Err(LockError::ExtendLimit)
        );
        let renew = AcquireCase {
            hold: policy,
            ttl_ms: 501,
            ..case(Some(&a), Some(b"a"))
        };
        assert_eq!(acquire(&renew), Err(LockError::HoldLimit));
        // Not the holder: 0, whatever the policy says.
        assert_eq!(
            extend_of(Some(&worn), b"b", 1, policy),
            Ok(Extend::NotHolder)
        );
        assert_eq!(extend_of(None, b"a", 1, policy), Ok(Extend::NotHolder));
        assert_eq!(
            extend_of(Some(&a), b"a", i64::MAX, HoldPolicy::default()),
            Err(LockError::TtlOverflow)
        );
    }

    #[test]
    fn only_the_holder_releases() {
        let a = held_by(b"a");
        assert!(release(mine_of(Some(&a), b"a")));
        assert!(!release(mine_of(Some(&a), b"b")));
        assert!(!release(mine_of(None, b"a")));
    }

    #[test]
    fn a_queue_is_served_only_when_the_key_is_free_and_past_its_lock_delay() {
        let x = Want::Exclusive;
        assert_eq!(serve(KeyState::Free, x, None, 10), Serve::Grant);
        assert_eq!(serve(KeyState::Free, x, Some(500), 10), Serve::WakeAt(500));
        assert_eq!(
            serve(
                KeyState::Held {
                    deadline_ms: Some(99)
                },
                x,
                None,
                10
            ),
            Serve::WakeAt(100)
        );
        assert_eq!(
            serve(KeyState::Held { deadline_ms: None }, x, Some(5), 10),
            Serve::Idle
        );
        assert_eq!(
            serve(KeyState::WrongType, x, None, 10),
            Serve::FailAll(LockError::WaitWrongType)
        );
    }

    fn shared(holders: usize, earliest: i64) -> KeyState {
        KeyState::Shared {
            earliest_ms: Some(earliest),
            holders,
        }
    }

    fn sem(limit: u32, used: u64, holders: usize) -> KeyState {
        KeyState::Semaphore {
            limit,
            used,
            holders,
            earliest_ms: Some(70),
        }
    }

    #[test]
    fn readers_join_readers_and_a_writer_waits_for_the_last_of_them() {
        assert_eq!(serve(shared(3, 50), Want::Shared, None, 10), Serve::Grant);
        assert_eq!(
            serve(shared(10, 50), Want::Shared, None, 10),
            Serve::WakeAt(51)
        );
        assert_eq!(
            serve(shared(3, 50), Want::Exclusive, None, 10),
            Serve::WakeAt(51)
        );
        let writer = KeyState::Held {
            deadline_ms: Some(80),
        };
        assert_eq!(serve(writer, Want::Shared, None, 10), Serve::WakeAt(81));
        assert_eq!(
            serve(
                shared(1, 50),
                Want::Permits { limit: 2, count: 1 },
                None,
                10
            ),
            Serve::FailHead(LockError::WaitWrongType)
        );
    }

    #[test]
    fn permits_are_granted_while_enough_are_free_and_a_big_request_blocks_small_ones() {
        let want = |count| Want::Permits { limit: 5, count };
        assert_eq!(serve(sem(5, 2, 2), want(3), None, 10), Serve::Grant);
        assert_eq!(serve(sem(5, 3, 2), want(3), None, 10), Serve::WakeAt(71));
        assert_eq!(serve(sem(5, 4, 10), want(1), None, 10), Serve::WakeAt(71));
        assert_eq!(
            serve(sem(4, 0, 0), want(1), None, 10),
            Serve::FailHead(LockError::LimitMismatch)
        );
        assert_eq!(
            serve(sem(5, 0, 0), Want::Exclusive, None, 10),
            Serve::FailHead(LockError::WaitWrongType)
        );
    }

    #[test]
    fn a_head_whose_token_holds_the_key_is_renewed_or_told_of_the_mismatch() {
        let permits = |count| Want::Permits { limit: 3, count };
        let mine = |want| {
            Some(MyHold {
                want,
                fence: 7,
                granted_ms: 0,
                extends: 0,
                lease: None,
            })
        };
        // Even with no room left: the renewal takes none.
        assert_eq!(
            serve_head(sem(3, 3, 2), (permits(1), None), mine(permits(1)), None, 10),
            Serve::Renew
        );
        assert_eq!(
            serve_head(sem(3, 1, 1), (permits(2), None), mine(permits(1)), None, 10),
            Serve::FailHead(LockError::CountMismatch)
        );
        assert_eq!(
            serve_head(
                shared(2, 50),
                (Want::Shared, None),
                mine(Want::Shared),
                None,
                2
            ),
            Serve::Renew
        );
        let writer = KeyState::Held {
            deadline_ms: Some(80),
        };
        assert_eq!(
            serve_head(
                writer,
                (Want::Exclusive, None),
                mine(Want::Exclusive),
                None,
                10
            ),
            Serve::Renew
        );
        assert_eq!(
            serve_head(
                shared(1, 50),
                (Want::Exclusive, None),
                mine(Want::Shared),
                None,
                10
            ),
            Serve::FailHead(LockError::ModeConflict)
        );
        // No hold of its own: as `serve`.
        assert_eq!(
            serve_head(sem(3, 1, 1), (permits(2), None), None, None, 10),
            Serve::Grant
        );
    }

    fn shared_case(key: KeyState, want: Want) -> AcquireCase {
        AcquireCase {
            key,
            mine: None,
            want,
            ttl_ms: 100,
            now_ms: NOW,
            others_waiting: false,
            hold: HoldPolicy::default(),
            may_wait: false,
            max_holders: 3,
            lease: None,
            delayed_until_ms: None,
        }
    }

    #[test]
    fn a_shared_or_permit_request_waits_out_a_lock_delay_on_a_free_key() {
        for want in [Want::Shared, Want::Permits { limit: 2, count: 1 }] {
            let delayed = AcquireCase {
                delayed_until_ms: Some(NOW + 7),
                ..shared_case(KeyState::Free, want)
            };
            assert_eq!(acquire(&delayed), Ok(Acquire::Refuse));
            let waits = AcquireCase {
                may_wait: true,
                ..delayed
            };
            assert_eq!(
                acquire(&waits),
                Ok(Acquire::Queue {
                    wake_at_ms: Some(NOW + 7)
                })
            );
        }
    }

    #[test]
    fn shared_and_semaphore_acquire_grant_renew_refuse_and_limit() {
        let grant = Ok(Acquire::Grant {
            deadline_ms: NOW + 100,
        });
        assert_eq!(acquire(&shared_case(KeyState::Free, Want::Shared)), grant);
        assert_eq!(acquire(&shared_case(shared(2, 5), Want::Shared)), grant);
        assert_eq!(
            acquire(&shared_case(shared(3, 5), Want::Shared)),
            Err(LockError::HoldersLimit)
        );
        assert_eq!(
            acquire(&shared_case(shared(1, NOW + 5), Want::Exclusive)),
            Ok(Acquire::Refuse)
        );
        let queued = AcquireCase {
            may_wait: true,
            ..shared_case(shared(1, NOW + 5), Want::Exclusive)
        };
        assert_eq!(
            acquire(&queued),
            Ok(Acquire::Queue {
                wake_at_ms: Some(NOW + 6)
            })
        );
        // No barging: a reader behind a queued writer waits too.
        let behind_writer = AcquireCase {
            others_waiting: true,
            ..shared_case(shared(1, NOW + 5), Want::Shared)
        };
        assert_eq!(acquire(&behind_writer), Ok(Acquire::Refuse));
        // Renew in the same mode; refuse a change of mode or of COUNT.
        let mine = MyHold {
            want: Want::Shared,
            fence: 9,
            granted_ms: NOW - 5,
            extends: 0,
            lease: None,
        };
        let renew = AcquireCase {
            mine: Some(mine),
            ..shared_case(shared(1, NOW + 5), Want::Shared)
        };
        assert_eq!(
            acquire(&renew),
            Ok(Acquire::Renew(Renewal {
                fence: 9,
                deadline_ms: NOW + 100,
                extends: 1
            }))
        );
        let upgrade = AcquireCase {
            want: Want::Exclusive,
            ..renew
        };
        assert_eq!(acquire(&upgrade), Err(LockError::ModeConflict));
        let permits = |count| Want::Permits { limit: 5, count };
        let other_count = AcquireCase {
            key: sem(5, 2, 1),
            mine: Some(MyHold {
                want: permits(2),
                ..mine
            }),
            ..shared_case(sem(5, 2, 1), permits(1))
        };
        assert_eq!(acquire(&other_count), Err(LockError::CountMismatch));
        assert_eq!(acquire(&shared_case(sem(5, 2, 1), permits(3))), grant);
        assert_eq!(
            acquire(&shared_case(sem(5, 3, 1), permits(3))),
            Ok(Acquire::Refuse)
        );
        assert_eq!(
            acquire(&shared_case(sem(4, 0, 0), permits(1))),
            Err(LockError::LimitMismatch)
        );
        // Kinds do not mix.
        assert_eq!(
            acquire(&shared_case(sem(5, 0, 0), Want::Shared)),
            Err(LockError::WrongType)
        );
        assert_eq!(
            acquire(&shared_case(shared(1, 5), permits(1))),
            Err(LockError::WrongType)
        );
    }

    #[test]
    fn an_expiry_is_a_removal_after_the_deadline_and_starts_the_lock_delay() {
        assert_ne!(unlinked(100, 100), Unlinked::Over);
        assert_eq!(unlinked(100, 101), Unlinked::Over);
        assert_eq!(lock_delay(100, 0, 101), None);
        assert_eq!(lock_delay(100, 50, 101), Some(150));
        assert_eq!(lock_delay(100, 50, 150), None);
        assert_eq!(lock_delay(100, -5, 101), None);
        // Removed as its last millisecond began (Redis 8's active expiry):
        // nobody has the key before that millisecond ends, delay or not.
        assert_eq!(lock_delay(100, 0, 100), Some(101));
        assert_eq!(lock_delay(100, 50, 100), Some(150));
        assert_eq!(unlinked(100, 99), Unlinked::Live);
        assert_eq!(unlinked(100, 100), Unlinked::LastMillisecond);
        assert_eq!(unlinked(100, 101), Unlinked::Over);
        assert_eq!(unlinked(-1, 101), Unlinked::Live);
        assert_eq!(rules::deadline_ms(5, 10), Ok(15));
        assert_eq!(rules::deadline_ms(i64::MAX, 1), Err(LockError::TtlOverflow));
    }

    #[test]
    fn a_removal_counts_the_expired_holds_and_keeps_the_key_for_the_lock_delay() {
        let lock = Hold::granted(b"a", 1, 0, 100);
        let one = Holds::One(Cow::Borrowed(&lock));
        let removal = |expiries, delay_until_ms, provisional| {
            Some(Removal {
                expiries,
                delay_until_ms,
                provisional,
            })
        };
        // In its last millisecond (Redis 8): to its end, provisionally.
        assert_eq!(removed(&one, 100, 0, false), removal(1, Some(101), true));
        assert_eq!(removed(&one, 101, 50, false), removal(1, Some(150), false));
        assert_eq!(removed(&one, 151, 50, false), removal(1, None, false));
        assert_eq!(removed(&one, 99, 50, false), None, "a DEL of a live lock");
        assert_eq!(removed(&one, 101, 50, true), removal(1, None, false));
        let persisted = Hold::granted(b"a", 1, 0, -1);
        assert_eq!(
            removed(&Holds::One(Cow::Borrowed(&persisted)), 101, 0, false),
            None
        );
        // Readers: each counted; only a last millisecond keeps the key.
        let mut readers = crate::hold::Holders::new(0);
        for (token, fence, deadline) in [(b"r1", 1, 100), (b"r2", 2, 200), (b"r3", 3, 300)] {
            readers.put(Hold::granted(token, fence, 0, deadline));
        }
        let many = Holds::Many(&readers);
        assert_eq!(removed(&many, 200, 50, false), removal(2, Some(201), true));
        assert_eq!(removed(&many, 150, 50, false), removal(1, None, true));
        assert_eq!(removed(&many, 50, 50, false), None);
        assert_eq!(observe_at(100), 102);
    }

    #[test]
    fn an_observer_is_answered_when_the_holder_is_not_the_one_it_saw() {
        assert!(!holder_changed(0, 0));
        assert!(!holder_changed(42, 42));
        assert!(holder_changed(0, 42));
        assert!(holder_changed(42, 0));
        assert!(holder_changed(42, 43));
    }

    #[test]
    fn a_reader_may_guard_reads_only_and_others_are_lost() {
        let reader = MyHold {
            want: Want::Shared,
            fence: 1,
            granted_ms: 0,
            extends: 0,
            lease: None,
        };
        assert_eq!(guard(Some(reader), 2), Ok(true));
        assert_eq!(guard(None, 2), Err(LockError::LostOther));
        assert_eq!(guard(None, 0), Err(LockError::LostFree));
    }

    #[test]
    fn only_the_holder_may_guard_a_command() {
        let a = held_by(b"a");
        assert_eq!(guard(mine_of(Some(&a), b"a"), 1), Ok(false));
        assert_eq!(guard(mine_of(Some(&a), b"b"), 1), Err(LockError::LostOther));
        assert_eq!(guard(mine_of(None, b"a"), 0), Err(LockError::LostFree));
    }

    #[test]
    fn guarded_commands_exclude_blocking_transactions_and_lock_commands() {
        const NO_ARGS: [&[u8]; 0] = [];
        let plain = Some(CommandFlags::default());
        let run = Ok(GuardedRun {
            script_mode: true,
            read_only_twin: None,
        });
        assert_eq!(guarded_command(b"SET", &NO_ARGS, plain, false), run);
        assert_eq!(guarded_command(b"get", &NO_ARGS, plain, false), run);
        // Unknown to the server: it answers for itself.
        assert_eq!(guarded_command(b"NOSUCH", &NO_ARGS, None, false), run);
        // ... but a NUL byte would make the server run another command.
        for name in [&b"SET\0"[..], b"\0", b"S\0ET", b"EVAL\0"] {
            assert_eq!(
                guarded_command(name, &NO_ARGS, None, false),
                Err(LockError::GuardUnknownCommand)
            );
        }
        let blocking = Some(CommandFlags {
            blocking: true,
            noscript: false,
            readonly: false,
        });
        assert_eq!(
            guarded_command(b"BLPOP", &NO_ARGS, blocking, false),
            Err(LockError::GuardBlocking)
        );
        let noscript = Some(CommandFlags {
            blocking: false,
            noscript: true,
            readonly: false,
        });
        for name in [&b"MULTI"[..], b"exec", b"WATCH", b"SUBSCRIBE"] {
            assert_eq!(
                guarded_command(name, &NO_ARGS, noscript, false),
                Err(LockError::GuardNoScript)
            );
        }
        for (name, twin) in [
            (&b"EVALSHA"[..], Some(c"EVALSHA_RO")),
            (b"eval", Some(c"EVAL_RO")),
            (b"FCALL", Some(c"FCALL_RO")),
            (b"fcall_ro", None),
            (b"EVAL_RO", None),
        ] {
            assert_eq!(
                guarded_command(name, &NO_ARGS, noscript, false),
                Ok(GuardedRun {
                    script_mode: false,
                    read_only_twin: twin
                })
            );
        }
        for name in [&b"LOCK.RELEASE"[..], b"lock.guard", b"SEM.ACQUIRE"] {
            assert_eq!(
                guarded_command(name, &NO_ARGS, plain, false),
                Err(LockError::GuardLockCommand)
            );
        }
        // Not from a script: a script cannot start another.
        assert_eq!(
            guarded_command(b"EVALSHA", &NO_ARGS, noscript, true),
            Err(LockError::GuardScriptInScript)
        );
        assert_eq!(guarded_command(b"SET", &NO_ARGS, plain, true), run);
        // A key-like name is not a lock command.
        assert_eq!(guarded_command(b"lock", &NO_ARGS, plain, false), run);
    }

    #[test]
    fn only_the_block_form_of_xread_blocks() {
        let blocking = Some(CommandFlags {
            blocking: true,
            noscript: false,
            readonly: false,
        });
        let run = Ok(GuardedRun {
            script_mode: true,
            read_only_twin: None,
        });
        let reads: [&[&[u8]]; 3] = [
            &[b"STREAMS", b"s", b"0"],
            &[b"COUNT", b"5", b"STREAMS", b"block", b"0"],
            &[b"count", b"1", b"streams", b"s", b"BLOCK"],
        ];
        for args in reads {
            assert_eq!(guarded_command(b"XREAD", args, blocking, false), run);
        }
        let group: &[&[u8]] = &[b"GROUP", b"g", b"c", b"STREAMS", b"s", b">"];
        assert_eq!(guarded_command(b"xreadgroup", group, blocking, false), run);
        let blocked: [&[&[u8]]; 2] = [
            &[b"BLOCK", b"0", b"STREAMS", b"s", b"$"],
            &[b"COUNT", b"1", b"block", b"10", b"STREAMS", b"s", b"$"],
        ];
        for args in blocked {
            assert_eq!(
                guarded_command(b"XREAD", args, blocking, false),
                Err(LockError::GuardBlocking)
            );
        }
        let group_blocked: &[&[u8]] =
            &[b"GROUP", b"g", b"c", b"BLOCK", b"5", b"STREAMS", b"s", b">"];
        assert_eq!(
            guarded_command(b"XREADGROUP", group_blocked, blocking, false),
            Err(LockError::GuardBlocking)
        );
        // Any other blocking command blocks whatever its arguments.
        let args: &[&[u8]] = &[b"list", b"0"];
        assert_eq!(
            guarded_command(b"BLPOP", args, blocking, false),
            Err(LockError::GuardBlocking)
        );
    }

    #[test]
    fn a_leased_hold_lives_as_its_lease_says_and_keeps_its_lease() {
        let leased = MyHold {
            want: Want::Exclusive,
            fence: 4,
            granted_ms: 0,
            extends: 0,
            lease: Some(9),
        };
        let attach = Attach {
            number: 9,
            until_ms: 1_000_000,
        };
        let case = AcquireCase {
            key: KeyState::Free,
            mine: None,
            want: Want::Exclusive,
            ttl_ms: 100,
            now_ms: 50,
            others_waiting: false,
            delayed_until_ms: None,
            hold: HoldPolicy::default(),
            may_wait: false,
            max_holders: 10,
            lease: Some(attach),
        };
        // Granted until the key's horizon, not the ttl.
        assert_eq!(
            acquire(&case),
            Ok(Acquire::Grant {
                deadline_ms: 1_000_000
            })
        );
        // The ttl must be valid all the same.
        let overflow = AcquireCase {
            ttl_ms: i64::MAX,
            ..case
        };
        assert!(acquire(&overflow).is_err());
        // Asked again under the same lease: its grant, nothing moves.
        let held = KeyState::Held {
            deadline_ms: Some(1_000_000),
        };
        let again = AcquireCase {
            key: held,
            mine: Some(leased),
            ..case
        };
        assert_eq!(acquire(&again), Ok(Acquire::Held { fence: 4 }));
        // Under another lease, or none: refused.
        let other = AcquireCase {
            lease: None,
            ..again
        };
        assert_eq!(acquire(&other), Err(LockError::LeaseMismatch));
        // EXTEND of a leased hold: 1, and nothing moves.
        assert_eq!(
            extend(Some(leased), 100, 50, HoldPolicy::default()),
            Ok(Extend::Leased)
        );
        // A waiter with the holder's token: answered, or told of the mismatch.
        assert_eq!(
            serve_head(held, (Want::Exclusive, Some(9)), Some(leased), None, 10),
            Serve::Held
        );
        assert_eq!(
            serve_head(held, (Want::Exclusive, None), Some(leased), None, 10),
            Serve::FailHead(LockError::LeaseMismatch)
        );
        assert_eq!(grant_deadline(70, None), 70);
        assert_eq!(grant_deadline(70, Some(attach)), 1_000_000);
    }

    #[test]
    fn a_guarded_sync_waits_only_for_a_command_that_may_have_written() {
        let plain = GuardedRun {
            script_mode: true,
            read_only_twin: None,
        };
        let script = GuardedRun {
            script_mode: false,
            read_only_twin: Some(c"EVAL_RO"),
        };
        let reads = Some(CommandFlags {
            readonly: true,
            ..CommandFlags::default()
        });
        assert!(guard_sync_waits(None, &plain, false));
        assert!(guard_sync_waits(
            Some(CommandFlags::default()),
            &plain,
            false
        ));
        assert!(!guard_sync_waits(reads, &plain, false));
        assert!(!guard_sync_waits(None, &plain, true));
        // A script may write whatever its command's flags say.
        assert!(guard_sync_waits(reads, &script, false));
    }

    /// A multi-key case over `keys`, shared, as a new request (`queued`
    /// false) or a queued one being served.
    fn many_case(keys: &[ManyKey], queued: bool, lease: Option<Attach>) -> AcquireManyCase<'_> {
        AcquireManyCase {
            keys,
            want: Want::Shared,
            ttl_ms: 100,
            now_ms: NOW,
            hold: HoldPolicy::default(),
            may_wait: true,
            max_holders: 2,
            lease,
            queued,
        }
    }

    fn key(state: KeyState, mine: Option<MyHold>) -> ManyKey {
        ManyKey {
            key: state,
            mine,
            others_waiting: false,
            delayed_until_ms: None,
        }
    }

    #[test]
    fn a_queued_multi_key_request_waits_at_max_holders_as_a_single_key_waiter_does() {
        let full = KeyState::Shared {
            earliest_ms: Some(NOW + 50),
            holders: 2,
        };
        let keys = [key(KeyState::Free, None), key(full, None)];
        // A new request is refused as LOCK.ACQUIRE … SHARED WAIT is.
        assert_eq!(
            acquire_many(&many_case(&keys, false, None)),
            Err(LockError::HoldersLimit)
        );
        assert_eq!(
            serve(full, Want::Shared, None, 2),
            Serve::WakeAt(rules::lease_over_at(NOW + 50))
        );
        // Queued, it waits for a reader to leave, as a single-key waiter.
        assert_eq!(
            acquire_many(&many_case(&keys, true, None)),
            Ok(AcquireMany::Queue {
                wake: [(1, rules::lease_over_at(NOW + 50))].into_iter().collect()
            })
        );
        let room = KeyState::Shared {
            earliest_ms: Some(NOW + 50),
            holders: 1,
        };
        let keys = [key(KeyState::Free, None), key(room, None)];
        assert_eq!(
            acquire_many(&many_case(&keys, true, None)),
            Ok(AcquireMany::Grant {
                deadline_ms: NOW + 100
            })
        );
    }

    #[test]
    fn a_queued_multi_key_request_with_a_lease_is_held_renewed_or_refused_as_one() {
        let attach = Attach {
            number: 7,
            until_ms: NOW + 9_000,
        };
        let mine = |lease| MyHold {
            want: Want::Shared,
            fence: 42,
            granted_ms: NOW - 10,
            extends: 0,
            lease,
        };
        let state = KeyState::Shared {
            earliest_ms: Some(NOW + 9_000),
            holders: 1,
        };
        let held = [
            key(state, Some(mine(Some(7)))),
            key(state, Some(mine(Some(7)))),
        ];
        for queued in [false, true] {
            assert_eq!(
                acquire_many(&many_case(&held, queued, Some(attach))),
                Ok(AcquireMany::Held { fence: 42 })
            );
            // Under another lease, or none: the same error as LOCK.ACQUIRE.
            assert_eq!(
                acquire_many(&many_case(&held, queued, None)),
                Err(LockError::LeaseMismatch)
            );
        }
        let free = [key(KeyState::Free, None), key(KeyState::Free, None)];
        assert_eq!(
            acquire_many(&many_case(&free, true, Some(attach))),
            Ok(AcquireMany::Grant {
                deadline_ms: NOW + 9_000
            })
        );
    }
}
