//! A session's keeper: one task that keeps one server lease alive for
//! every hold attached to it, the way the watchdog keeps one lease
//! ([`crate::lease`]'s `watchdog.rs`), and reports to every hold's cell.
//!
//! The loop: sleep until a third of the ttl has passed since the last
//! successful grant or keepalive was sent, then keep alive
//! ([`Core::round`]). A lease nobody uses (no hold attached, no acquire in
//! flight) is not kept alive: it runs out, and the next hold gets a new
//! one. A failed keepalive (connection error, timeout, `NOPERM`) is tried
//! again after a pause, until the lease's deadline less the safety margin
//! comes on the monotonic clock: then every attached hold is lost at once
//! ([`LostReason::Expired`](crate::LostReason::Expired)). A keepalive
//! answered `0` ends the session ([`Core::ended_by_server`]). The task
//! ends with the session.
//!
//! Releases that got no answer (orphans) are sent again with each round;
//! when nothing else uses the session they are sent alone, a retry pause
//! apart, without a keepalive, until they are answered or the term ends.

use std::sync::Arc;

use tokio::time::{sleep, sleep_until};

use super::{Core, Round, Status};

pub(super) fn spawn(core: Arc<Core>) {
    tokio::spawn(run(core));
}

async fn run(core: Arc<Core>) {
    let mut wake = core.wake.subscribe();
    loop {
        wake.borrow_and_update();
        let (status, term, users, orphans) = core.snapshot();
        // Ending: the server said the lease is gone and its holds are
        // being asked why; the keeper only stays to end them at the term's
        // end should the answers never come.
        let keep = match status {
            Status::Live => users > 0,
            Status::Ending => false,
            Status::Ended(_) => return,
        };
        let orphans_alone = status == Status::Live && users == 0 && orphans > 0;
        tokio::select! {
            biased;
            _ = wake.changed() => continue,
            _ = sleep_until(term.lost_at()) => {
                if core.expire_if_due() { return; }
                continue;
            }
            _ = sleep_until(term.next_extend()), if keep => {}
            _ = sleep(term.retry_pause()), if orphans_alone => {
                core.orphans_round().await;
                continue;
            }
        }
        let outcome = tokio::select! {
            biased;
            _ = sleep_until(term.lost_at()) => {
                if core.expire_if_due() { return; }
                continue;
            }
            outcome = core.round() => outcome,
        };
        match outcome {
            // Ended, or ending in another task (an acquire's `NOLEASE`):
            // the loop's top tells.
            Round::Alive | Round::Ended => {}
            Round::Failed(_) => {
                tokio::select! {
                    biased;
                    _ = sleep_until(term.lost_at()) => {
                        if core.expire_if_due() { return; }
                    }
                    _ = sleep(term.retry_pause()) => {}
                }
            }
        }
    }
}
