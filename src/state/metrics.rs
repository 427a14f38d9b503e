//! Counters for `INFO lock` (what redis_exporter scrapes); the section
//! itself, with its gauges, is put together in `events.rs`.
//!
//! Counters count since the server started; they are per server, like
//! Redis' own (`INFO stats`), and a replica counts only what it does itself:
//! it grants, extends, releases and expires nothing (it applies its master's
//! effects), so its counters stay at 0; its gauges are its own.
//! Each is a relaxed atomic add: one instruction on the hot path, no lock.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One counter per line of `INFO lock`, in the order shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Every new holder: immediate grants and handoffs to waiters.
    Grants,
    /// ACQUIRE replied null: the key was held, or others queued for it.
    Refused,
    /// ACQUIRE renewed by its holder (same token, same fence).
    Renewals,
    /// Clients that blocked in a wait queue.
    Waits,
    /// Waiters that were granted the lock.
    GrantsAfterWait,
    /// Handoffs to a waiter at a release (RELEASE or a session's disconnect).
    HandoffsOnRelease,
    /// Handoffs to a waiter after the holder's lease ran out.
    HandoffsOnExpiry,
    /// Waiters whose `WAIT timeout-ms` ran out.
    WaitTimeouts,
    /// WAIT refused because the key's queue was full (`lock.max-waiters`).
    WaitsRefused,
    Releases,
    /// RELEASE with a token that does not hold the lock (or any more).
    StaleReleases,
    Extends,
    /// EXTEND with a token that does not hold the lock (or any more).
    StaleExtends,
    /// EXTEND (or renewal) refused by `lock.max-hold-ms` or `lock.max-extends`.
    ExtendsLimited,
    /// Leases that ran out while held: a holder was too slow or died.
    Expiries,
    /// Locks released because the acquiring connection closed (`SESSION`).
    SessionReleases,
    /// LOCK.GUARD calls whose token held the lock: the command ran.
    Guards,
    /// LOCK.GUARD calls refused with `LOST`: nothing ran.
    GuardsLost,
    /// Requests with `SYNC` that waited for their replicas.
    Syncs,
    /// Of those, the ones whose time ran out (answered `NOSYNC`).
    SyncTimeouts,
    /// Grants undone because their replicas did not hold them in time, or
    /// their client left while it waited.
    SyncsUndone,
    /// Lease groups granted (`LOCK.LEASE GRANT`).
    LeasesGranted,
    /// Lease groups that ran out (no `KEEPALIVE` in time): their holds
    /// ended as expiries.
    LeasesExpired,
    /// Lease groups revoked (`LOCK.LEASE REVOKE`).
    LeasesRevoked,
    /// Lease groups their holder ended (`LOCK.LEASE END`): their holds
    /// released, counted in `Releases` too.
    LeasesEnded,
    /// Holds taken away by `LOCK.REVOKE` or with a revoked lease group.
    Revocations,
    /// `LOCK.LEASE KEEPALIVE` of a live lease group.
    Keepalives,
    /// Multi-key requests granted (`LOCK.MACQUIRE`, directly or from the
    /// queue; each key counts in `Grants` too).
    MultiGrants,
}

const COUNTERS: [(Counter, &CStr); 28] = [
    (Counter::Grants, c"grants"),
    (Counter::Refused, c"refused"),
    (Counter::Renewals, c"renewals"),
    (Counter::Waits, c"waits"),
    (Counter::GrantsAfterWait, c"grants_after_wait"),
    (Counter::HandoffsOnRelease, c"handoffs_on_release"),
    (Counter::HandoffsOnExpiry, c"handoffs_on_expiry"),
    (Counter::WaitTimeouts, c"wait_timeouts"),
    (Counter::WaitsRefused, c"waits_refused"),
    (Counter::Releases, c"releases"),
    (Counter::StaleReleases, c"stale_releases"),
    (Counter::Extends, c"extends"),
    (Counter::StaleExtends, c"stale_extends"),
    (Counter::ExtendsLimited, c"extends_limited"),
    (Counter::Expiries, c"expiries"),
    (Counter::SessionReleases, c"session_releases"),
    (Counter::Guards, c"guards"),
    (Counter::GuardsLost, c"guards_lost"),
    (Counter::Syncs, c"syncs"),
    (Counter::SyncTimeouts, c"sync_timeouts"),
    (Counter::SyncsUndone, c"syncs_undone"),
    (Counter::LeasesGranted, c"leases_granted"),
    (Counter::LeasesExpired, c"leases_expired"),
    (Counter::LeasesRevoked, c"leases_revoked"),
    (Counter::LeasesEnded, c"leases_ended"),
    (Counter::Revocations, c"revocations"),
    (Counter::Keepalives, c"keepalives"),
    (Counter::MultiGrants, c"macquires"),
];

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
static VALUES: [AtomicU64; COUNTERS.len()] = [ZERO; COUNTERS.len()];

pub fn count(counter: Counter) {
    VALUES[counter as usize].fetch_add(1, Ordering::Relaxed);
}

pub fn get(counter: Counter) -> u64 {
    VALUES[counter as usize].load(Ordering::Relaxed)
}

/// Set when `maxmemory-policy` can evict lock keys (see
/// [`redis_lock_core::settings::policy_evicts_locks`]).
static EVICTION_RISK: AtomicBool = AtomicBool::new(false);

pub fn set_eviction_risk(at_risk: bool) {
    EVICTION_RISK.store(at_risk, Ordering::Relaxed);
}

pub fn eviction_risk() -> bool {
    EVICTION_RISK.load(Ordering::Relaxed)
}

/// Every counter with its `INFO lock` name, in the order shown.
pub fn counters() -> impl Iterator<Item = (&'static CStr, i64)> {
    COUNTERS
        .iter()
        .map(|(counter, name)| (*name, get(*counter) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_listed_in_enum_order() {
        for (i, (counter, _)) in COUNTERS.iter().enumerate() {
            assert_eq!(*counter as usize, i, "{counter:?}");
        }
        let names: std::collections::HashSet<&CStr> = COUNTERS.iter().map(|c| c.1).collect();
        assert_eq!(names.len(), COUNTERS.len());
    }

    #[test]
    fn count_adds_one_to_its_own_counter() {
        let before = (get(Counter::Expiries), get(Counter::Grants));
        count(Counter::Expiries);
        assert_eq!(get(Counter::Expiries), before.0 + 1);
        assert!(get(Counter::Grants) >= before.1);
    }
}
