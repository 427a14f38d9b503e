//! Lease groups (`LOCK.LEASE`) in motion: a grant, a keepalive, a
//! revocation, and the timer that ends a lease that ran out, each ending
//! or moving the holds attached to it. What a lease is, and which holds are
//! attached to it, is `state/lease_registry.rs`.
//!
//! How a lease ends its holds:
//! - it runs out (its timer, on a master): each attached hold's deadline
//!   becomes the lease's, and the key is opened again, which expires it as
//!   Redis expires any lease that ran out (the `DEL` replicated, the
//!   `expired` event, the lock-delay, the hand-off to waiters); a hold of a
//!   key with several holders is expired by the module as its others are;
//! - `LOCK.LEASE END`, its holder's own end: each attached hold is released
//!   as its `LOCK.RELEASE` would release it (waiters served at once);
//! - `LOCK.LEASE REVOKE`, an operator's: the same, and each hold marked
//!   revoked (`state/revocations.rs`).
//!
//! Replicas and the AOF receive `LOCK.LEASESET` (the whole lease, its
//! deadline absolute) at every grant and keepalive, and `LOCK.LEASEDEL`
//! when it ends, after its holds' own effects. A replica keeps the same
//! leases, ends none of them itself, and arms the timer once promoted (the
//! server's cron, [`tick`]).
//!
//! Module-wide state (main thread only): the one lease timer, due when the
//! earliest lease runs out.

use std::cell::Cell;

use redis_lock_core::errors::LockError;
use redis_lock_core::group::{self, LeaseId, LEASE_ID_LEN};
use redis_lock_core::rules;
use redis_lock_core::token::UUID_LEN;
use redis_module::Context;

use crate::holds::{self, ReleasedBy};
use crate::redis::key::LockKey;
use crate::redis::timer::{self, DueId};
use crate::redis::{replicate, server};
use crate::state::lease_registry::{self, Attached};
use crate::state::metrics::{self, Counter};
use crate::state::{fence, revocations};
use crate::wait_queue;

thread_local! {
    /// The lease timer, and when it is due.
    static TIMER: Cell<Option<(DueId, i64)>> = const { Cell::new(None) };
}

/// How soon a timer that found writes paused looks again.
const RETRY_MS: i64 = 10;

/// The reason a revoked lease's holds are told of.
pub const LEASE_REVOKED: &[u8] = b"lease revoked";

/// `LOCK.LEASE GRANT ttl-ms [OWNER label]`: a new lease, numbered with a
/// fresh fence (so never twice), replicated. Returns its id.
pub fn grant(ctx: &Context, ttl_ms: i64, owner: Option<&[u8]>) -> Result<LeaseId, LockError> {
    let now_ms = server::now_ms();
    let deadline_ms = rules::deadline_ms(now_ms, ttl_ms)?;
    let number = fence::issue().ok_or(LockError::FenceExhausted)?;
    let id = LeaseId::draw();
    lease_registry::set(id, number, ttl_ms, deadline_ms, owner);
    replicate_set(ctx, number);
    metrics::count(Counter::LeasesGranted);
    arm(ctx);
    Ok(id)
}

/// Replicate lease `number`'s whole state.
fn replicate_set(ctx: &Context, number: u64) {
    let Some(state) = lease_registry::state(number) else {
        return;
    };
    let mut text = [0u8; LEASE_ID_LEN];
    replicate::lease_set(
        ctx,
        state.id.text(&mut text),
        number,
        state.ttl_ms,
        state.deadline_ms,
        state.owner.as_deref(),
    );
}

/// `LOCK.LEASE KEEPALIVE id`: the lease now ends its ttl from now, and so
/// does every hold attached to it, at the cost of one lease whatever their
/// number: only the keys whose horizon the lease is about to reach have
/// their TTL moved (`group::due`), about one per keepalive at most. `false`
/// when the lease is gone (one that ran out, its timer not yet come, ends
/// here).
pub fn keepalive(ctx: &Context, id: &LeaseId) -> Result<bool, LockError> {
    let Some(number) = lease_registry::number_of(id) else {
        return Ok(false);
    };
    let Some(state) = lease_registry::state(number) else {
        return Ok(false);
    };
    let now_ms = server::now_ms();
    if !group::is_live(state.deadline_ms, now_ms) {
        end(ctx, number, End::Expired);
        return Ok(false);
    }
    let deadline_ms = rules::deadline_ms(now_ms, state.ttl_ms)?;
    lease_registry::move_deadline(number, deadline_ms);
    replicate_set(ctx, number);
    while let Some((at, until)) = lease_registry::first_due(number, deadline_ms, state.ttl_ms) {
        let moved = in_db(ctx, at.db, || {
            let name = crate::redis::string(ctx, &at.key);
            let mut key = LockKey::open_write(ctx, &name);
            holds::move_horizon(ctx, &mut key, &name, at.fence, number, until)
        });
        match moved {
            true => {
                lease_registry::attached(at.db, &at.key, at.fence, number, until);
            }
            // Not there any more (a client renamed it, say).
            false => lease_registry::detached(at.db, &at.key, at.fence, number),
        }
    }
    metrics::count(Counter::Keepalives);
    Ok(true)
}

/// Run `body` with `ctx` in database `db`, and back in the one it was in
/// (a command's client keeps its database).
fn in_db<R>(ctx: &Context, db: i32, body: impl FnOnce() -> R) -> R {
    let was = server::selected_db(ctx);
    if was != db {
        server::select_db(ctx, db);
    }
    let result = body();
    if was != db {
        server::select_db(ctx, was);
    }
    result
}

/// How a lease ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// It ran out: its holds expire, as a lease that ran out does.
    Expired,
    /// `LOCK.LEASE REVOKE`: its holds are released and marked revoked.
    Revoked,
    /// `LOCK.LEASE END`: its holds are released, as their holder's own
    /// releases.
    Released,
}

/// `LOCK.LEASE REVOKE id`: the lease ends now, and every hold attached to
/// it is released as `LOCK.RELEASE` would release it (waiters served at
/// once), marked revoked with the reason `lease revoked`. How many holds
/// ended (0 when the lease is gone).
pub fn revoke(ctx: &Context, id: &LeaseId) -> usize {
    match lease_registry::number_of(id) {
        Some(number) => end(ctx, number, End::Revoked),
        None => 0,
    }
}

/// `LOCK.LEASE END id`: the lease's holder ends it now, and every hold
/// attached to it is released as its `LOCK.RELEASE` would release it
/// (waiters served at once, no revoked mark: the old token is told `0` and
/// `LOST`, as after its own release). How many holds ended (0 when the
/// lease is gone).
pub fn end_own(ctx: &Context, id: &LeaseId) -> usize {
    match lease_registry::number_of(id) {
        Some(number) => end(ctx, number, End::Released),
        None => 0,
    }
}

/// End lease `number` and its holds, then replicate `LOCK.LEASEDEL`. How
/// many holds ended.
fn end(ctx: &Context, number: u64, how: End) -> usize {
    let Some(ended) = lease_registry::take(number) else {
        return 0;
    };
    let mut count = 0;
    // Each key of a multi-key grant is a hold of its own: ended, counted
    // and handed on to its waiters one by one.
    for at in &ended.holds {
        count += in_db(ctx, at.db, || {
            end_hold(ctx, at, number, ended.deadline_ms, how)
        });
    }
    let mut text = [0u8; LEASE_ID_LEN];
    replicate::lease_del(ctx, ended.id.text(&mut text));
    metrics::count(match how {
        End::Expired => Counter::LeasesExpired,
        End::Revoked => Counter::LeasesRevoked,
        End::Released => Counter::LeasesEnded,
    });
    count
}

/// End the hold `at` (attached to lease `number`, which ended at
/// `deadline_ms`), if it is still there. 1 if it was.
fn end_hold(ctx: &Context, at: &Attached, number: u64, deadline_ms: i64, how: End) -> usize {
    let fence = at.fence;
    let name = crate::redis::string(ctx, &at.key);
    let mut key = LockKey::open_write(ctx, &name);
    let mut buffer = [0u8; UUID_LEN];
    let found = match key.held() {
        Ok(holds) => holds
            .bound(fence, None)
            .filter(|h| h.tags.lease() == Some(number))
            .map(|h| (holds.kind(), h.token(&mut buffer).to_vec())),
        Err(_) => None,
    };
    let Some((Some(kind), token)) = found else {
        return 0;
    };
    match how {
        End::Revoked => {
            revocations::mark(at.db, &at.key, &token, fence, deadline_ms, LEASE_REVOKED);
            wait_queue::release(ctx, at.db, key, &name, kind, &token, ReleasedBy::Revoked);
        }
        End::Released => {
            wait_queue::release(ctx, at.db, key, &name, kind, &token, ReleasedBy::Holder);
        }
        End::Expired => {
            // The hold ends where its lease did; opening the key again
            // expires it as any lease that ran out (Redis, for a lock; the
            // module, for one of several holders).
            if key.end_lease(fence, deadline_ms).is_none() {
                return 0;
            }
            drop(key);
            let mut key = LockKey::open_write(ctx, &name);
            holds::expire(ctx, &mut key, &name, server::now_ms());
            drop(key);
            wait_queue::look_again(ctx, at.db, &at.key);
        }
    }
    1
}

/// Make sure the lease timer is due when the earliest lease runs out (the
/// first millisecond after its deadline). A timer due sooner stays: it
/// finds nothing over and arms again.
pub fn arm(ctx: &Context) {
    let Some(earliest) = lease_registry::earliest_deadline() else {
        return;
    };
    let due = rules::lease_over_at(earliest);
    let armed = TIMER.with(Cell::get);
    if armed.is_some_and(|(_, at)| at <= due) {
        return;
    }
    if let Some((timer, _)) = armed {
        timer::stop_at::<()>(ctx, timer);
    }
    let timer = timer::start_at(ctx, due, (), on_timer);
    TIMER.with(|t| t.set(Some((timer, due))));
}

/// The lease timer: on a master, every lease that ran out ends, its holds
/// expiring; then the timer is armed for the next. A replica waits for its
/// master's effects; a pause of writes is waited out.
fn on_timer(ctx: &Context, (): ()) {
    TIMER.with(|t| t.set(None));
    if !server::is_master(ctx) {
        return;
    }
    if server::writes_paused() {
        let due = server::now_ms() + RETRY_MS;
        let timer = timer::start_at(ctx, due, (), on_timer);
        TIMER.with(|t| t.set(Some((timer, due))));
        return;
    }
    let now_ms = server::now_ms();
    while let Some(number) = lease_registry::first_over(now_ms) {
        end(ctx, number, End::Expired);
    }
    arm(ctx);
}

/// From the server's cron: a master with leases and no lease timer (after a
/// load, a promotion) arms one.
pub fn tick(ctx: &Context) {
    if TIMER.with(Cell::get).is_none() && lease_registry::live() > 0 && server::is_master(ctx) {
        arm(ctx);
    }
}

/// This node became a replica: its master ends leases from now on.
pub fn demoted(ctx: &Context) {
    if let Some((timer, _)) = TIMER.with(Cell::take) {
        timer::stop_at::<()>(ctx, timer);
    }
}
