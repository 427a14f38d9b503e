//! The one way to ask for a lock: `locks.lock(key)`, shaped by the
//! builder's methods, then `.acquire()` for a guard or `.run(work)` for
//! the whole pattern (acquire, keep alive, stop the work on loss, release).

use std::future::Future;
use std::time::Duration;

use super::guard::{Guard, Held};
use super::{Locks, Spec};
use crate::commands::{Kind, Wait};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::options::{ReplicaSync, DEFAULT_TTL};

/// A request for a lock, from [`Locks::lock`]. Nothing is sent until
/// [`LockRequest::acquire`] or [`LockRequest::run`].
///
/// | Method | Default | |
/// | --- | --- | --- |
/// | [`ttl`](LockRequest::ttl) | [`DEFAULT_TTL`] (30 s) | the lease, kept alive by the session (or the watchdog) |
/// | [`wait`](LockRequest::wait) | no wait | wait up to this long in the server's FIFO queue |
/// | [`shared`](LockRequest::shared) | exclusive | a read lease beside other readers |
/// | [`owner`](LockRequest::owner) | the [`LockOptions`](crate::LockOptions)' label | a public label for `LOCK.INFO`/`LOCK.QUEUE` |
/// | [`sync`](LockRequest::sync) | none | granted only once that many replicas hold it |
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::Error;
///
/// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), Error> {
/// // Try once: Error::NotAcquired when someone else holds it.
/// let guard = locks.lock("billing").ttl(Duration::from_secs(10)).acquire().await?;
/// guard.release().await?;
///
/// // Wait up to 30 s in the server's queue: Error::TimedOut after.
/// let reader = locks
///     .lock("catalog")
///     .shared()
///     .wait(Duration::from_secs(30))
///     .acquire()
///     .await?;
/// reader.release().await?;
///
/// // Acquire, run, stop the work if the lease is lost, release.
/// let fence = locks
///     .lock("billing")
///     .run(|held| async move { held.fence })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a lock request does nothing until `.acquire().await` or `.run(work).await`"]
pub struct LockRequest {
    locks: Locks,
    spec: Spec,
    /// Why it cannot be sent (found when it was made).
    invalid: Option<&'static str>,
}

impl std::fmt::Debug for LockRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<_> = self
            .spec
            .set
            .iter()
            .map(|k| String::from_utf8_lossy(k))
            .collect();
        f.debug_struct("LockRequest")
            .field("key", &String::from_utf8_lossy(&self.spec.key))
            .field("set", &keys)
            .field("ttl", &self.spec.ttl)
            .field("wait", &self.spec.wait)
            .field("shared", &(self.spec.kind == Kind::Shared))
            .field("owner", &self.spec.owner)
            .field("sync", &self.spec.sync)
            .finish()
    }
}

impl LockRequest {
    pub(crate) fn new(locks: Locks, key: Vec<u8>) -> LockRequest {
        LockRequest::of_set(locks, key, Vec::new())
    }

    /// A request for several keys at once ([`Locks::lock_many`]): `keys`
    /// as given (two or more; one is a plain lock, none is refused at
    /// [`acquire`](LockRequest::acquire)).
    pub(crate) fn many(locks: Locks, mut keys: Vec<Vec<u8>>) -> LockRequest {
        let key = keys.first().cloned().unwrap_or_default();
        let invalid = keys
            .is_empty()
            .then_some("lock_many needs at least one key");
        if keys.len() < 2 {
            keys.clear();
        }
        LockRequest {
            invalid,
            ..LockRequest::of_set(locks, key, keys)
        }
    }

    fn of_set(locks: Locks, key: Vec<u8>, set: Vec<Vec<u8>>) -> LockRequest {
        LockRequest {
            locks,
            spec: Spec {
                key,
                set,
                kind: Kind::Exclusive,
                ttl: DEFAULT_TTL,
                wait: Wait::No,
                owner: None,
                sync: None,
            },
            invalid: None,
        }
    }

    /// The lease's time to live (1 ms to [`MAX_TTL`](crate::MAX_TTL), sent
    /// as whole milliseconds). It is kept alive every ttl/3 while the guard
    /// lives (by the session of this ttl, or the guard's watchdog), so it
    /// bounds how long a crashed holder blocks the others, not how long the
    /// work may take. Holds of different ttls go to different sessions.
    /// Default: [`DEFAULT_TTL`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.spec.ttl = ttl;
        self
    }

    /// Wait up to `timeout` in the server's fair FIFO queue
    /// (`LOCK.ACQUIRE … WAIT`) when the lock is held: [`Error::TimedOut`]
    /// if it is not handed over in time. Zero means one try, as without
    /// it ([`Error::NotAcquired`]); at most 365 days.
    ///
    /// The wait runs on a connection of its own, opened for the call and
    /// closed after it (Redis serves one connection's commands in order:
    /// a blocked command would hold up every watchdog's extend behind it).
    /// Closing it is how a waiter leaves the queue: drop the future to stop
    /// waiting. After the grant, the lease is extended once on the shared
    /// connection, so that its deadline counts from a known send.
    pub fn wait(mut self, timeout: Duration) -> Self {
        self.spec.wait = if timeout.is_zero() {
            Wait::No
        } else {
            Wait::For(timeout)
        };
        self
    }

    /// Wait in the queue for as long as it takes (`WAIT 0`). Drop the
    /// future to stop waiting.
    pub fn wait_forever(mut self) -> Self {
        self.spec.wait = Wait::Forever;
        self
    }

    /// A read lease (`LOCK.ACQUIRE … SHARED`): granted beside any other
    /// shared holders, not while an exclusive holder has the key or anyone
    /// waits for it (a queued writer is not passed). Each reader has its
    /// own token, lease, fence and watchdog; [`Guard::guarded`] runs
    /// read-only commands only. The queue is one per key, in arrival order
    /// for both modes: readers next to each other at its head are granted
    /// together.
    pub fn shared(mut self) -> Self {
        self.spec.kind = Kind::Shared;
        self
    }

    /// The public label of this holder (1 to 128 bytes), instead of the
    /// [`LockOptions::owner`](crate::LockOptions::owner) of the `Locks`:
    /// `LOCK.INFO`, `LOCK.QUEUE` and `LOCK.OBSERVE` show it. A waiter's
    /// label becomes the holder's at the hand-off.
    pub fn owner(mut self, label: impl Into<String>) -> Self {
        self.spec.owner = Some(label.into());
        self
    }

    /// Answer the grant only once `replicas` replicas have acknowledged it
    /// (`SYNC replicas timeout-ms`), within `timeout`; when fewer did, the
    /// server undoes it as a release would, and the acquire fails with
    /// [`Error::NotReplicated`] (nothing is held, nothing to release).
    ///
    /// - The lease's extends (the watchdog's and [`Guard::extend`]) carry
    ///   the same sync, so the replicas keep up with the lease: one
    ///   answered `NOSYNC` is not counted (the lease's deadline stays where
    ///   the last replicated extend put it) and is tried again, and if none
    ///   is replicated before the deadline minus the safety margin the lease
    ///   is lost with [`LostReason::NotReplicated`](crate::LostReason::NotReplicated).
    /// - A synced request blocks its connection until the replicas
    ///   acknowledge (a few ms on Redis 7.2+ and Valkey, up to about a
    ///   second on Redis 7.0, whose replicas acknowledge once a second): the
    ///   guard keeps a connection of its own for them (as a wait does:
    ///   [`Locks::from_connection`] needs [`Locks::wait_client`]).
    /// - `timeout` must be shorter than the ttl less the safety margin
    ///   ([`Error::InvalidArgument`]); `replicas` is 0 to 1000 (0: no sync).
    ///
    /// With [`wait`](LockRequest::wait), the grant from the queue is
    /// answered once synced, and its pinning extend is synced too (if that
    /// one is not replicated, the grant is given back: `NotReplicated`).
    pub fn sync(mut self, replicas: u32, timeout: Duration) -> Self {
        self.spec.sync = Some(ReplicaSync::new(replicas, timeout));
        self
    }

    /// Take the lock: a [`Guard`] whose watchdog runs from the grant on.
    ///
    /// - [`Error::NotAcquired`]: held by someone else (or others wait), and
    ///   no wait was asked for.
    /// - [`Error::TimedOut`]: the wait ran out.
    /// - [`Error::NotReplicated`]: with [`sync`](LockRequest::sync), fewer
    ///   replicas acknowledged the grant in time; it was undone.
    /// - [`Error::Server`]: `WRONGTYPE` (the key is not a lock), `ERR this
    ///   token holds the lock in the other mode` (tokens are drawn anew
    ///   for each acquire, so only with tokens of your own), `LIMIT
    ///   lock.max-waiters …`, an unknown command (no module).
    /// - [`Error::Connection`]: no reply in time (before the deadline minus
    ///   the safety margin, or the wait plus 2 s); a release is sent in the
    ///   background in case the grant happened.
    /// - [`Error::InvalidArgument`]: a ttl, wait or owner out of range, or
    ///   a wait on a [`Locks::from_connection`] without
    ///   [`Locks::wait_client`].
    ///
    /// Dropping the future after the command was sent can leave a grant
    /// that nobody holds a guard for: it then lasts until its ttl ends.
    pub async fn acquire(self) -> Result<Guard> {
        if let Some(invalid) = self.invalid {
            return Err(Error::InvalidArgument(invalid));
        }
        let shared = self.spec.kind == Kind::Shared;
        let grant = self.locks.acquire_spec(&self.spec).await?;
        Ok(Guard::of(
            self.locks.connection().clone(),
            grant,
            shared,
            self.spec.sync,
        ))
    }

    /// Run `work` under the lock: acquire, keep the lease alive while
    /// `work` runs, release at the end (a failed release is not an error:
    /// the lease then expires by itself).
    ///
    /// - The errors of [`LockRequest::acquire`]: `work` does not run.
    /// - [`Error::Lost`] when the lease is lost while `work` runs: `work`'s
    ///   future is dropped at that point, so it stops at its next `.await`.
    ///   Anything it wrote before that must have been guarded by the fence.
    ///
    /// `work` gets a [`Held`] with the fence to pass to the storage and the
    /// loss signal.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::Error;
    ///
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), Error> {
    /// match locks
    ///     .lock("billing")
    ///     .ttl(Duration::from_secs(10))
    ///     .run(|held| async move {
    ///         // write to the ledger with held.fence
    ///         held.fence
    ///     })
    ///     .await
    /// {
    ///     Ok(fence) => println!("ran with fence {fence}"),
    ///     Err(Error::NotAcquired) => println!("another worker runs it"),
    ///     Err(Error::Lost(reason)) => println!("stopped: {reason}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire().await?;
        let (held, lease) = guard.into_parts();
        run_guarded(held, lease, work).await
    }
}

/// Run `work` until it ends or the lease is lost, then release.
pub(crate) async fn run_guarded<F, Fut, T>(held: Held, mut lease: Lease, work: F) -> Result<T>
where
    F: FnOnce(Held) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = held.lost.wait();
    let outcome = tokio::select! {
        biased;
        reason = lost => Err(Error::Lost(reason)),
        value = work(held) => Ok(value),
    };
    let _ = lease.release().await;
    outcome
}
