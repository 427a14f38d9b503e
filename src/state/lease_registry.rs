//! Lease groups' state (`LOCK.LEASE`): this server's one registry
//! (`redis_lock_core::registry::Registry`, where the rules of what is
//! attached where live, with their unit tests), kept here for the module.
//! What happens when a lease is granted, kept alive, revoked or runs out is
//! `lease_groups.rs`; what the core decides about leases (the id, the key
//! horizon) is `redis_lock_core::group`.
//!
//! Module-wide state, touched only here (main thread only, hence a
//! thread-local; nothing here calls into Redis): the registry. Each
//! function is the registry's method of the same name, but for the two
//! that read a key's holds ([`live_mine`], [`shown_deadline`]) and the
//! ones that keep fences above lease numbers ([`set`], [`replace_all`]).

use std::cell::RefCell;

use redis_lock_core::decide::Attach;
use redis_lock_core::errors::LockError;
use redis_lock_core::group::{self, LeaseId};
use redis_lock_core::hold::{Hold, Holds, MyHold};
use redis_lock_core::registry::Registry;
pub use redis_lock_core::registry::{Attached, Ended, LeaseState, RestoredCopy, Shown};

use crate::state::fence;

thread_local! {
    static LEASES: RefCell<Registry> = RefCell::new(Registry::default());
}

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    LEASES.with(|l| f(&mut l.borrow_mut()))
}

/// `token`'s live hold on a key: a hold attached to a lease group that ran
/// out is nobody's, even in the instant before the lease's timer ends it.
pub fn live_mine(holds: &Holds, token: Option<&[u8]>, now_ms: i64) -> Option<MyHold> {
    holds
        .mine(token, now_ms)
        .filter(|mine| mine.lease.is_none_or(|n| is_live(n, now_ms)))
}

/// The key's holders at `now_ms`: live holds, but for those attached to a
/// lease group that ran out (nobody's, as in [`live_mine`]).
pub fn count_live(holds: &Holds, now_ms: i64) -> usize {
    holds
        .live(now_ms)
        .filter(|hold| hold.tags.lease().is_none_or(|n| is_live(n, now_ms)))
        .count()
}

/// When `hold` ends, as replies show it (`group::shown_deadline`).
pub fn shown_deadline(hold: &Hold) -> Option<i64> {
    let lease = hold.tags.lease().and_then(deadline);
    group::shown_deadline(hold.deadline(), lease)
}

/// Add or update a lease (a grant, the master's `LOCK.LEASESET`, an RDB);
/// fences stay above its number (lease numbers are fences).
pub fn set(id: LeaseId, number: u64, ttl_ms: i64, deadline_ms: i64, owner: Option<&[u8]>) {
    with(|r| r.set(id, number, ttl_ms, deadline_ms, owner));
    fence::observe(number);
}

/// The leases are these now (a full load); fences stay above their numbers.
pub fn replace_all(leases: Vec<(u64, LeaseState)>) {
    for (number, _) in &leases {
        fence::observe(*number);
    }
    with(|r| r.replace_all(leases));
}

pub fn state(number: u64) -> Option<LeaseState> {
    with(|r| r.state(number))
}

pub fn move_deadline(number: u64, deadline_ms: i64) {
    with(|r| r.move_deadline(number, deadline_ms))
}

pub fn first_due(number: u64, deadline_ms: i64, ttl_ms: i64) -> Option<(Attached, i64)> {
    with(|r| r.first_due(number, deadline_ms, ttl_ms))
}

pub fn take(number: u64) -> Option<Ended> {
    with(|r| r.take(number))
}

pub fn earliest_deadline() -> Option<i64> {
    with(|r| r.earliest_deadline())
}

pub fn first_over(now_ms: i64) -> Option<u64> {
    with(|r| r.first_over(now_ms))
}

/// Lease groups that live now (`INFO lock`).
pub fn live() -> usize {
    with(|r| r.live())
}

pub fn is_live(number: u64, now_ms: i64) -> bool {
    with(|r| r.is_live(number, now_ms))
}

pub fn deadline(number: u64) -> Option<i64> {
    with(|r| r.deadline(number))
}

pub fn number_of(id: &LeaseId) -> Option<u64> {
    with(|r| r.number_of(id))
}

pub fn attach_to(id: &LeaseId, now_ms: i64) -> Result<Attach, LockError> {
    with(|r| r.attach_to(id, now_ms))
}

pub fn attached(db: i32, key: &[u8], fence: u64, number: u64, horizon_ms: i64) -> bool {
    with(|r| r.attached(db, key, fence, number, horizon_ms))
}

pub fn loaded(
    db: i32,
    key: &[u8],
    fence: u64,
    number: u64,
    horizon_ms: i64,
    lease_deadline_ms: i64,
    whole: bool,
) -> bool {
    with(|r| r.loaded(db, key, fence, number, horizon_ms, lease_deadline_ms, whole))
}

pub fn take_copies(db: i32, key: &[u8]) -> Vec<RestoredCopy> {
    with(|r| r.take_copies(db, key))
}

pub fn arrived(db: i32, key: &[u8], holds: &Holds) {
    with(|r| r.arrived(db, key, holds))
}

pub fn detached(db: i32, key: &[u8], fence: u64, number: u64) {
    with(|r| r.detached(db, key, fence, number))
}

pub fn detached_unlinked(key: Option<(i32, &[u8])>, fence: u64, number: u64) {
    with(|r| r.detached_unlinked(key, fence, number))
}

pub fn flushed(db: Option<i32>) {
    with(|r| r.flushed(db))
}

pub fn swapped(a: i32, b: i32) {
    with(|r| r.swapped(a, b))
}

pub fn shown(id: &LeaseId, max_keys: usize) -> Option<Shown> {
    with(|r| r.shown(id, max_keys))
}

pub fn apply_del(id: &LeaseId) {
    with(|r| r.apply_del(id))
}

pub fn all() -> Vec<(u64, LeaseState)> {
    with(|r| r.all())
}
