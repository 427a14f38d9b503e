//! The per-lease keeper: one task that extends one lease every ttl/3 and
//! reports each outcome to the lease's [`LeaseCell`].
//!
//! The other keeper is a session (`crate::session`): one task for many
//! leases attached to one server lease group, reporting to each lease's
//! cell the same way ([`LeaseCell::extended`], [`LeaseCell::lose`],
//! [`LeaseCell::expire_if_due`]). This one serves the holds that are not
//! attached to a session ([`KeepAlive::Watchdog`](crate::KeepAlive::Watchdog),
//! a server without `LOCK.LEASE`, a sync, Redlock).
//!
//! The loop, for one lease: sleep until a third of the ttl has passed since
//! the last successful acquire or extend was sent, then extend. A refused
//! extend (`0`, `WRONGTYPE`) is a loss ([`LostReason::Refused`]), and so are
//! a `LIMIT` ([`LostReason::Limit`]) and a `REVOKED <reason>`
//! ([`LostReason::Revoked`]): no extend will be tried again. A
//! failed one (connection error, timeout, `OOM`) is tried again after a
//! pause, so a reconnect in between is survived, until `valid_until −
//! margin` comes on the monotonic clock ([`LostReason::Expired`]). So is
//! one answered `NOSYNC` (a lease acquired with a sync: the extension is
//! on the master only, and the term stays the last replicated one's); a
//! loss after it is [`LostReason::NotReplicated`]. Every
//! wait is raced against `stop` (the guard released or dropped), against
//! that deadline, and against a change of the term (a manual extend).

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::{sleep, sleep_until};

use super::state::{LeaseCell, Status};
use super::{Renew, Renewal};
use crate::error::LostReason;

/// Start the watchdog of the lease in `cell`; it ends when the lease is
/// lost or released, or when `stop`'s sender is dropped.
pub(crate) fn spawn(renew: Arc<dyn Renew>, cell: LeaseCell, stop: watch::Receiver<()>) {
    tokio::spawn(run(renew, cell, stop));
}

async fn run(renew: Arc<dyn Renew>, cell: LeaseCell, mut stop: watch::Receiver<()>) {
    let mut changes = cell.subscribe();
    loop {
        let view = changes.borrow_and_update().clone();
        if view.status != Status::Held {
            return;
        }
        let term = view.term;
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = changes.changed() => continue,
            _ = sleep_until(term.lost_at()) => {
                if cell.expire_if_due() { return; }
                continue;
            }
            _ = sleep_until(term.next_extend()) => {}
        }
        let outcome = tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = sleep_until(term.lost_at()) => {
                if cell.expire_if_due() { return; }
                continue;
            }
            outcome = renew.renew(term.ttl) => outcome,
        };
        if matches!(outcome, Renewal::NotReplicated { .. }) {
            cell.unreplicated();
        }
        match outcome {
            Renewal::Extended { sent, valid_until } => cell.extended(super::state::Term {
                sent,
                valid_until,
                ..term
            }),
            Renewal::Refused => return cell.lose(LostReason::Refused),
            Renewal::Limit => return cell.lose(LostReason::Limit),
            Renewal::Revoked(reason) => return cell.lose(LostReason::Revoked(reason)),
            // Extended on the master only: not counted; tried again, and a
            // loss at the term's end says why.
            Renewal::NotReplicated { .. } | Renewal::Failed(_) => {
                // The next round starts at once (its extend time has
                // passed), after this pause.
                tokio::select! {
                    biased;
                    _ = stop.changed() => return,
                    _ = sleep_until(term.lost_at()) => {
                        if cell.expire_if_due() { return; }
                    }
                    _ = sleep(term.retry_pause()) => {}
                }
            }
        }
    }
}
