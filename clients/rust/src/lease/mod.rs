//! One lease, whatever it holds (a lock, a read lease, permits, a Redlock
//! on N nodes): its facts ([`state`]), its keeper, the loss signal everyone
//! can wait on, a manual extend, and the release. The kinds differ only in
//! their [`Renew`]: which commands extend and release, on which nodes.
//!
//! Two keepers: the per-lease [`watchdog`] (an extend every ttl/3), or a
//! session (`crate::session`): one server lease (`LOCK.LEASE`) that many
//! holds are attached to, kept alive by one task that reports to every
//! attached hold's cell. The guards, the loss signals and the manual
//! extend are the same for both.

mod state;
mod watchdog;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

pub(crate) use state::{LeaseCell, Term};
use state::{Status, View};

use crate::error::{timed_out, Error, LostReason, Result};
use crate::options::{sent_ttl, LockOptions, ReplicaSync};

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one extend gave.
pub(crate) enum Renewal {
    /// Extended; the lease is certain to last until `valid_until` (on the
    /// monotonic clock), counted from when the extend was sent.
    Extended { sent: Instant, valid_until: Instant },
    /// The server (or too many Redlock nodes) said the lease is gone.
    Refused,
    /// The server's hold policy refused (`LIMIT`): the lease ends at its
    /// current deadline.
    Limit,
    /// The server answered `REVOKED <reason>`: the hold was taken away.
    Revoked(String),
    /// Extended on the master, but answered `NOSYNC`: fewer replicas than
    /// asked acknowledged it, so the lease's term stays; try again.
    NotReplicated { acked: u32, wanted: u32 },
    /// No answer to act on (connection error, timeout): try again.
    Failed(Error),
}

/// A lease that can be extended and released: one node or a Redlock set.
pub(crate) trait Renew: Send + Sync + 'static {
    /// Extend to `ttl` from now, with the lease's own sync (if any).
    fn renew(&self, ttl: Duration) -> BoxFuture<'_, Renewal>;
    /// Extend to `ttl` from now with `sync` instead (`None`: no `SYNC`).
    fn renew_with_sync(&self, ttl: Duration, sync: Option<ReplicaSync>) -> BoxFuture<'_, Renewal> {
        let _ = (ttl, sync);
        Box::pin(async {
            Renewal::Failed(Error::InvalidArgument(
                "a sync is for a lease on one server",
            ))
        })
    }
    /// `Ok(true)` when released (by a majority, for Redlock).
    fn release(&self) -> BoxFuture<'_, Result<bool>>;
    /// The release got no answer (a connection error, the release
    /// timeout): the hold may still be on the server. A hold in a session
    /// hands its release to the session, which sends it again with its
    /// rounds; a lease of its own is no longer extended and ends at its
    /// ttl, so there is nothing to do.
    fn orphaned(&self) {}
}

/// Whether a release's outcome is no answer: the hold may still be there.
fn unanswered(result: &Result<bool>) -> bool {
    matches!(result, Err(Error::Connection(_)))
}

/// A cloneable handle on a lease's state, for tasks that do the work while
/// the guard stays elsewhere: the loss, and the time left.
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
    view: watch::Receiver<View>,
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal")
            .field("lost", &self.reason())
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl LostSignal {
    /// Resolves when the lease is lost, with the reason. After a release or
    /// a drop of the guard it never resolves (the lease was given up, not
    /// lost), so use it in a `select!` next to the work.
    pub fn wait(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut view = self.view.clone();
        async move {
            loop {
                if let Status::Lost(reason) = &view.borrow_and_update().status {
                    return reason.clone();
                }
                if view.changed().await.is_err() {
                    // Every keeper and the guard are gone without a loss:
                    // never resolve.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Whether the lease has been lost by now, as signalled. See also
    /// [`LostSignal::held`], which reads the clock.
    pub fn is_lost(&self) -> bool {
        matches!(self.view.borrow().status, Status::Lost(_))
    }

    /// The reason, once lost.
    pub fn reason(&self) -> Option<LostReason> {
        match &self.view.borrow().status {
            Status::Lost(reason) => Some(reason.clone()),
            _ => None,
        }
    }

    /// Whether the lease may be counted on right now: not lost, not
    /// released, and the deadline less the safety margin not reached on
    /// the monotonic clock. Read from the clock, not from the watchdog, so
    /// it is false at once after a pause of the process (a stop, a long GC
    /// or swap) that outlasted the lease, before the watchdog has run.
    pub fn held(&self) -> bool {
        self.view.borrow().held(Instant::now())
    }

    /// How long the lease may still be counted on: until its deadline less
    /// the safety margin, on the monotonic clock; zero once released, or
    /// lost because the server said so. After a [`LostReason::Limit`] it
    /// keeps counting down: the server holds the lease until its deadline.
    pub fn remaining(&self) -> Duration {
        self.view.borrow().remaining(Instant::now())
    }

    /// The lease's deadline as this client counts it: the send of the last
    /// successful acquire or extend plus its ttl (for Redlock, less the
    /// drift). Never later than the server's deadline.
    pub fn deadline(&self) -> std::time::Instant {
        self.view.borrow().term.valid_until.into_std()
    }
}

/// The part every guard shares: the lease's facts, its keeper, the manual
/// extend and the release.
pub(crate) struct Lease {
    renew: Arc<dyn Renew>,
    cell: LeaseCell,
    /// Dropping it stops keeping this lease alive: the watchdog's stop
    /// sender, or the hold's attachment to its session.
    keeper: Option<Box<dyn Send + Sync>>,
    /// The safety margin's rule and the release timeout.
    options: LockOptions,
    /// The sync its extends carry (the acquire's), if any.
    sync: Option<ReplicaSync>,
    released: bool,
}

impl Lease {
    /// Start keeping a lease just acquired: `term` is what the grant bought;
    /// `sync` is what `renew`'s extends carry.
    pub(crate) fn start(
        renew: Arc<dyn Renew>,
        term: Term,
        options: &LockOptions,
        sync: Option<ReplicaSync>,
    ) -> Lease {
        let cell = LeaseCell::new(term);
        let (stop, stop_rx) = watch::channel(());
        watchdog::spawn(renew.clone(), cell.clone(), stop_rx);
        Lease {
            renew,
            cell,
            keeper: Some(Box::new(stop)),
            options: options.clone(),
            sync,
            released: false,
        }
    }

    /// A lease kept alive by a session: `cell` is the one the session
    /// reports to, and dropping `attachment` detaches the hold from it.
    pub(crate) fn attached(
        renew: Arc<dyn Renew>,
        cell: LeaseCell,
        attachment: Box<dyn Send + Sync>,
        options: &LockOptions,
    ) -> Lease {
        Lease {
            renew,
            cell,
            keeper: Some(attachment),
            options: options.clone(),
            sync: None,
            released: false,
        }
    }

    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal {
            view: self.cell.subscribe(),
        }
    }

    /// Mark the lease lost, as the server said outside the keeper (a
    /// guarded command answered `LOST`). The first loss keeps its reason.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        self.cell.lose(reason);
    }

    /// Extend now to `ttl` from the send; the keeper then extends with this
    /// ttl, and the safety margin follows it (the options' rule). The reply
    /// must come before the current term's loss; a refusal or a `LIMIT` is
    /// a loss, signalled as the keeper would. `sync` replaces the lease's
    /// own for this extend (a sync of 0 replicas: none). A `NOSYNC` leaves
    /// the term as it was: [`Error::NotReplicated`].
    pub(crate) async fn extend(&self, ttl: Duration, sync: Option<ReplicaSync>) -> Result<()> {
        let ttl = sent_ttl(ttl)?;
        let margin = self.options.margin_for(ttl)?;
        let once = sync
            .map(|sync| ReplicaSync::checked(Some(sync)))
            .transpose()?;
        ReplicaSync::check_fits(once.unwrap_or(self.sync), ttl, margin)?;
        let view = self.cell.view();
        match view.status {
            Status::Held => {}
            Status::Lost(reason) => return Err(Error::Lost(reason)),
            Status::Released => {
                return Err(Error::InvalidArgument("the lease was released"));
            }
        }
        let renewal = match once {
            Some(sync) => self.renew.renew_with_sync(ttl, sync),
            None => self.renew.renew(ttl),
        };
        let outcome = tokio::time::timeout_at(view.term.lost_at(), renewal).await;
        match outcome {
            Ok(Renewal::Extended { sent, valid_until }) => {
                self.cell.extended(Term {
                    sent,
                    valid_until,
                    ttl,
                    margin,
                });
                Ok(())
            }
            Ok(Renewal::Refused) => self.lost(LostReason::Refused),
            Ok(Renewal::Limit) => self.lost(LostReason::Limit),
            Ok(Renewal::Revoked(reason)) => self.lost(LostReason::Revoked(reason)),
            Ok(Renewal::NotReplicated { acked, wanted }) => {
                self.cell.unreplicated();
                Err(Error::NotReplicated {
                    acked,
                    wanted,
                    undone: false,
                })
            }
            Ok(Renewal::Failed(e)) => Err(e),
            Err(_) => {
                self.cell.expire_if_due();
                Err(timed_out("no reply to the extend before the lease's end"))
            }
        }
    }

    fn lost(&self, reason: LostReason) -> Result<()> {
        self.cell.lose(reason.clone());
        Err(Error::Lost(self.lost_signal().reason().unwrap_or(reason)))
    }

    /// Stop the keeper, then release. The keeper is stopped first so that
    /// no extend follows the release. Sent whatever the state: a lease
    /// lost to a `LIMIT` (or believed lost) may still be held.
    pub(crate) async fn release(&mut self) -> Result<bool> {
        self.keeper.take();
        self.released = true;
        self.cell.released();
        let result =
            match tokio::time::timeout(self.options.release_timeout, self.renew.release()).await {
                Ok(result) => result,
                Err(_) => Err(timed_out("release timed out")),
            };
        if unanswered(&result) {
            self.renew.orphaned();
        }
        result
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Dropping the keeper's handle ends the watchdog (or detaches the
        // hold from its session).
        self.keeper.take();
        if self.released {
            return;
        }
        self.cell.released();
        // Best effort: give the lock back now rather than at expiry. Without
        // a runtime (dropped outside one), the lease simply expires.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let renew = self.renew.clone();
            let timeout = self.options.release_timeout;
            runtime.spawn(async move {
                let result = tokio::time::timeout(timeout, renew.release())
                    .await
                    .unwrap_or_else(|_| Err(timed_out("release timed out")));
                if unanswered(&result) {
                    renew.orphaned();
                }
            });
        }
    }
}
