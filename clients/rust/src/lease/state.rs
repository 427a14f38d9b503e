//! The facts of one lease, in one place: whether it is held, lost (and
//! why) or released, and its term (when the last successful acquire or
//! extend was sent, how long it lasts, the safety margin). Whoever keeps
//! the lease alive (its watchdog, or the session it is attached to) and
//! whoever extends it by hand report to a [`LeaseCell`]; everyone else
//! reads it, through a [`LostSignal`](super::LostSignal) or the guard.
//!
//! Times are on the monotonic clock (`tokio::time::Instant`, which is
//! `std::time::Instant` underneath and keeps counting while the process is
//! stopped), so "held" and "remaining" read from the clock stay true after
//! a pause, before any task has had a chance to run.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::LostReason;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    Lost(LostReason),
    Released,
}

/// One lease term: what the last successful acquire or extend bought.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Term {
    /// When that command was sent: the server started the lease later.
    pub(crate) sent: Instant,
    /// The lease lasts at least until then (`sent + ttl`; for Redlock,
    /// less the drift).
    pub(crate) valid_until: Instant,
    /// The ttl the next extend asks for.
    pub(crate) ttl: Duration,
    /// How long before `valid_until` the lease counts as lost.
    pub(crate) margin: Duration,
}

impl Term {
    /// When the loss is declared if no extend succeeds before.
    pub(crate) fn lost_at(&self) -> Instant {
        self.valid_until
            .checked_sub(self.margin)
            .unwrap_or(self.valid_until)
    }

    /// When the watchdog extends: a third of the ttl after the last send.
    pub(crate) fn next_extend(&self) -> Instant {
        self.sent + self.ttl / 3
    }

    /// Pause between failed extends: short enough for several tries before
    /// the deadline.
    pub(crate) fn retry_pause(&self) -> Duration {
        (self.ttl / 20).clamp(Duration::from_millis(5), Duration::from_millis(250))
    }
}

#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) status: Status,
    pub(crate) term: Term,
    /// The last extend was answered `NOSYNC`: not counted (the term stays
    /// the last replicated one's); the loss, if it comes, says so.
    pub(crate) unreplicated: bool,
}

impl View {
    /// What is left until the loss would be declared: zero once the server
    /// said the lease is gone or it was released. After a `LIMIT` the lease
    /// still runs to its deadline, so this still counts down.
    pub(crate) fn remaining(&self, now: Instant) -> Duration {
        match self.status {
            Status::Held | Status::Lost(LostReason::Limit) => {
                self.term.lost_at().saturating_duration_since(now)
            }
            _ => Duration::ZERO,
        }
    }

    /// Held, and the clock has not reached the loss.
    pub(crate) fn held(&self, now: Instant) -> bool {
        self.status == Status::Held && now < self.term.lost_at()
    }
}

/// Where a lease's facts live. Cheap to clone: clones share the facts.
#[derive(Clone)]
pub(crate) struct LeaseCell {
    view: Arc<watch::Sender<View>>,
}

impl LeaseCell {
    pub(crate) fn new(term: Term) -> LeaseCell {
        let (view, _) = watch::channel(View {
            status: Status::Held,
            term,
            unreplicated: false,
        });
        LeaseCell {
            view: Arc::new(view),
        }
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<View> {
        self.view.subscribe()
    }

    /// Held: neither lost nor released.
    pub(crate) fn is_held(&self) -> bool {
        self.view.borrow().status == Status::Held
    }

    pub(crate) fn view(&self) -> View {
        self.view.borrow().clone()
    }

    /// An extend sent at `term.sent` succeeded. A reply to an older send
    /// than the term in force changes nothing (a manual extend and the
    /// watchdog's may cross), nor does one after a loss or a release.
    pub(crate) fn extended(&self, term: Term) {
        self.view.send_if_modified(|view| {
            if view.status == Status::Held && term.sent >= view.term.sent {
                view.term = term;
                view.unreplicated = false;
                true
            } else {
                false
            }
        });
    }

    /// Held → lost, once: a later loss, or one after a release, changes
    /// nothing, and the first loss keeps its reason.
    pub(crate) fn lose(&self, reason: LostReason) {
        self.view.send_if_modified(|view| {
            if view.status == Status::Held {
                view.status = Status::Lost(reason);
                true
            } else {
                false
            }
        });
    }

    /// An extend was answered `NOSYNC`: it stands on the master only, so
    /// the term stays; a loss at its end is [`LostReason::NotReplicated`].
    pub(crate) fn unreplicated(&self) {
        self.view.send_if_modified(|view| {
            let changed = view.status == Status::Held && !view.unreplicated;
            view.unreplicated |= changed;
            changed
        });
    }

    /// Lost as [`LostReason::Expired`] (or [`LostReason::NotReplicated`],
    /// when the last extend was not replicated) if the term in force has
    /// reached its loss by now (an extend may have moved it since the
    /// caller looked). True when the lease is not held any more.
    pub(crate) fn expire_if_due(&self) -> bool {
        let now = Instant::now();
        self.view.send_if_modified(|view| {
            if view.status == Status::Held && now >= view.term.lost_at() {
                view.status = Status::Lost(if view.unreplicated {
                    LostReason::NotReplicated
                } else {
                    LostReason::Expired
                });
                true
            } else {
                false
            }
        });
        self.view().status != Status::Held
    }

    /// Held → released (the owner gave it back).
    pub(crate) fn released(&self) {
        self.view.send_if_modified(|view| {
            if view.status == Status::Held {
                view.status = Status::Released;
                true
            } else {
                false
            }
        });
    }
}
