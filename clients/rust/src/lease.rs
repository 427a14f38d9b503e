//! The watchdog that keeps a lease alive, and the loss signal it raises.
//!
//! One task per held lease. It sleeps until a third of the ttl has passed
//! since the last successful acquire or extend was sent, then extends. It
//! marks the lease lost when the server refuses an extend, or when
//! `valid_until − safety margin` comes (on the monotonic clock) without a
//! successful extend; it retries failed extends until then, so a reconnect
//! of the connection manager in between is survived. It ends when the lease
//! is lost, released, or its guard is dropped. A guarded command answered
//! `LOST` marks the lease lost too ([`Lease::mark_lost`]); the watchdog then
//! stops before its next extend.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};

use crate::error::{LostReason, Result};

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one extend round gave.
pub(crate) enum Renewal {
    /// Extended; the lease is certain to last until `valid_until` (on the
    /// monotonic clock), counted from when the extend was sent.
    Extended { sent: Instant, valid_until: Instant },
    /// The server (or too many Redlock nodes) said the lease is gone.
    Refused,
    /// No answer to act on (connection error, timeout): try again.
    Failed,
}

/// A lease the watchdog can extend and release: one node or a Redlock set.
pub(crate) trait Renew: Send + Sync + 'static {
    fn renew(&self) -> BoxFuture<'_, Renewal>;
    /// `Ok(true)` when released (by a majority, for Redlock).
    fn release(&self) -> BoxFuture<'_, Result<bool>>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Held,
    Lost(LostReason),
    Released,
}

/// A cloneable handle on a lease's loss, for tasks that do the work while
/// the guard stays elsewhere.
///
/// ```no_run
/// # async fn demo(guard: redis_lock_client::Guard) {
/// let lost = guard.lost_signal();
/// let work = tokio::spawn(async move {
///     tokio::select! {
///         reason = lost.wait() => println!("stopped: {reason}"),
///         _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => println!("done"),
///     }
/// });
/// work.await.unwrap();
/// guard.release().await.unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct LostSignal {
    state: watch::Receiver<State>,
}

impl LostSignal {
    /// Resolves when the lease is lost, with the reason. After a release or
    /// a drop of the guard it never resolves (the lease was given up, not
    /// lost), so use it in a `select!` next to the work.
    pub fn wait(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut state = self.state.clone();
        async move {
            loop {
                if let State::Lost(reason) = *state.borrow_and_update() {
                    return reason;
                }
                if state.changed().await.is_err() {
                    // The watchdog is gone without a loss: never resolve.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Whether the lease has been lost by now.
    pub fn is_lost(&self) -> bool {
        matches!(*self.state.borrow(), State::Lost(_))
    }

    /// The reason, once lost.
    pub fn reason(&self) -> Option<LostReason> {
        match *self.state.borrow() {
            State::Lost(reason) => Some(reason),
            _ => None,
        }
    }
}

/// The part every guard shares: the watchdog's handles and the release.
pub(crate) struct Lease {
    renew: Arc<dyn Renew>,
    state: watch::Sender<State>,
    stop: Option<watch::Sender<()>>,
    release_timeout: Duration,
    released: bool,
}

impl Lease {
    /// Start the watchdog of a lease just acquired: the acquire was sent at
    /// `sent` and the lease lasts at least until `valid_until`.
    pub(crate) fn start(
        renew: Arc<dyn Renew>,
        ttl: Duration,
        margin: Duration,
        sent: Instant,
        valid_until: Instant,
        release_timeout: Duration,
    ) -> Lease {
        let (state, _) = watch::channel(State::Held);
        let (stop, stop_rx) = watch::channel(());
        tokio::spawn(watchdog(
            renew.clone(),
            state.clone(),
            stop_rx,
            Timing { ttl, margin },
            sent,
            valid_until,
        ));
        Lease {
            renew,
            state,
            stop: Some(stop),
            release_timeout,
            released: false,
        }
    }

    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal {
            state: self.state.subscribe(),
        }
    }

    /// Mark the lease lost, as the server said outside the watchdog (a
    /// guarded command answered `LOST`). The first loss keeps its reason.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        mark_lost(&self.state, reason);
    }

    /// Stop the watchdog, then release. The watchdog is stopped first so
    /// that no extend follows the release.
    pub(crate) async fn release(&mut self) -> Result<bool> {
        self.stop.take();
        self.released = true;
        self.state.send_if_modified(|s| {
            if *s == State::Held {
                *s = State::Released;
                true
            } else {
                false
            }
        });
        match tokio::time::timeout(self.release_timeout, self.renew.release()).await {
            Ok(result) => result,
            Err(_) => Err(crate::error::timed_out("release timed out")),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Dropping the stop sender ends the watchdog.
        self.stop.take();
        if self.released {
            return;
        }
        // Best effort: give the lock back now rather than at expiry. Without
        // a runtime (dropped outside one), the lease simply expires.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let renew = self.renew.clone();
            let timeout = self.release_timeout;
            runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, renew.release()).await;
            });
        }
    }
}

/// Held → lost, once: a later loss, or one after a release, changes nothing.
fn mark_lost(state: &watch::Sender<State>, reason: LostReason) {
    state.send_if_modified(|s| {
        if *s == State::Held {
            *s = State::Lost(reason);
            true
        } else {
            false
        }
    });
}

#[derive(Clone, Copy)]
struct Timing {
    ttl: Duration,
    margin: Duration,
}

impl Timing {
    /// Pause between failed extends: short enough for several tries before
    /// the deadline.
    fn retry_pause(&self) -> Duration {
        (self.ttl / 20).clamp(Duration::from_millis(5), Duration::from_millis(250))
    }
}

/// The watchdog loop. Every wait is raced against `stop` (guard released or
/// dropped) and against the loss deadline.
async fn watchdog(
    renew: Arc<dyn Renew>,
    state: watch::Sender<State>,
    mut stop: watch::Receiver<()>,
    timing: Timing,
    mut sent: Instant,
    mut valid_until: Instant,
) {
    let lose = |reason| mark_lost(&state, reason);
    loop {
        let lost_at = valid_until
            .checked_sub(timing.margin)
            .unwrap_or(valid_until);
        let next_extend = sent + timing.ttl / 3;
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = sleep_until(lost_at) => { lose(LostReason::Expired); return; }
            _ = sleep_until(next_extend) => {}
        }
        loop {
            // A guarded command may have been answered LOST meanwhile:
            // there is no lease left to extend.
            if *state.borrow() != State::Held {
                return;
            }
            let outcome = tokio::select! {
                biased;
                _ = stop.changed() => return,
                _ = sleep_until(lost_at) => { lose(LostReason::Expired); return; }
                outcome = renew.renew() => outcome,
            };
            match outcome {
                Renewal::Extended {
                    sent: s,
                    valid_until: v,
                } => {
                    sent = s;
                    valid_until = v.max(valid_until);
                    break;
                }
                Renewal::Refused => {
                    lose(LostReason::Refused);
                    return;
                }
                Renewal::Failed => {
                    tokio::select! {
                        biased;
                        _ = stop.changed() => return,
                        _ = sleep_until(lost_at) => { lose(LostReason::Expired); return; }
                        _ = sleep(timing.retry_pause()) => {}
                    }
                }
            }
        }
    }
}
