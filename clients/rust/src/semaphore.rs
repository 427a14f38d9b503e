//! Counting semaphores (`SEM.*`): at most `limit` permits out at once, each
//! holder with its own token, lease and fence, kept alive by the same
//! watchdog as a lock guard (`SEM.EXTEND`) and given back with
//! `SEM.RELEASE`.

use std::future::Future;
use std::time::Duration;

use crate::commands::{sem_info_cmd, Kind, Wait};
use crate::error::{Error, LostReason, Result};
use crate::info::SemaphoreInfo;
use crate::lease::{Lease, LostSignal};
use crate::locks::{run_guarded, Grant, Held, Locks, Spec};
use crate::options::{ReplicaSync, DEFAULT_TTL};
use crate::session::Session;

/// The largest limit the module accepts for a semaphore.
pub const MAX_LIMIT: u32 = 1_000_000;

/// A counting semaphore on one key: at most `limit` permits are out at once.
///
/// Every call on a key must give the same limit (the server refuses another
/// one with [`Error::Server`]). The server queues waiting requests in
/// arrival order across counts: a request at the head that needs more
/// permits than are free blocks the smaller ones behind it, so large
/// requests are not starved. An expired permit goes back to the pool, and
/// to the head of the queue, on the server's own clock.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{redis, Locks, Semaphore};
///
/// # async fn demo() -> Result<(), redis_lock_client::Error> {
/// let locks = Locks::connect(redis::Client::open("redis://127.0.0.1:6379/")?).await?;
/// // At most 4 renders at once, across every process that uses this key.
/// let renders = Semaphore::new(locks, "renders", 4);
/// let permit = renders
///     .permits(1)
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(30))
///     .acquire()
///     .await?;
/// tokio::select! {
///     reason = permit.lost() => println!("permit lost: {reason}"),
///     _ = render(permit.fence()) => {}
/// }
/// permit.release().await?;
/// # Ok(()) }
/// # async fn render(_fence: u64) {}
/// ```
#[derive(Clone)]
pub struct Semaphore {
    locks: Locks,
    key: Vec<u8>,
    limit: u32,
}

impl Semaphore {
    /// The semaphore `key` (any bytes) with `limit` permits (1 to
    /// [`MAX_LIMIT`], checked when an acquire is made). The watchdog
    /// options and owner label are those of `locks`.
    pub fn new(locks: Locks, key: impl AsRef<[u8]>, limit: u32) -> Semaphore {
        Semaphore {
            locks,
            key: key.as_ref().to_vec(),
            limit,
        }
    }

    /// The semaphore's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The number of permits.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// A request for `count` permits under one token (1 to the limit,
    /// checked when it is made), shaped like a [`LockRequest`](crate::LockRequest):
    /// [`PermitRequest::ttl`], [`PermitRequest::wait`],
    /// [`PermitRequest::owner`], then [`PermitRequest::acquire`] or
    /// [`PermitRequest::run`].
    pub fn permits(&self, count: u32) -> PermitRequest {
        PermitRequest {
            locks: self.locks.clone(),
            limit: self.limit,
            count,
            spec: Spec {
                key: self.key.clone(),
                set: Vec::new(),
                kind: Kind::Permits {
                    limit: self.limit,
                    count,
                },
                ttl: DEFAULT_TTL,
                wait: Wait::No,
                owner: None,
                sync: None,
            },
        }
    }

    /// The semaphore now (`SEM.INFO`), or `None` when nobody holds or waits
    /// for a permit. Its waiters: [`Locks::queue`].
    pub async fn info(&self) -> Result<Option<SemaphoreInfo>> {
        self.locks.ready().await?;
        let reply = self
            .locks
            .connection()
            .query(&sem_info_cmd(&self.key))
            .await?;
        SemaphoreInfo::of(reply)
    }
}

/// A request for permits, from [`Semaphore::permits`]. Nothing is sent
/// until [`PermitRequest::acquire`] or [`PermitRequest::run`].
#[derive(Clone)]
#[must_use = "a permit request does nothing until `.acquire().await` or `.run(work).await`"]
pub struct PermitRequest {
    locks: Locks,
    limit: u32,
    count: u32,
    spec: Spec,
}

impl std::fmt::Debug for PermitRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitRequest")
            .field("key", &String::from_utf8_lossy(&self.spec.key))
            .field("limit", &self.limit)
            .field("count", &self.count)
            .field("ttl", &self.spec.ttl)
            .field("wait", &self.spec.wait)
            .field("sync", &self.spec.sync)
            .finish()
    }
}

impl PermitRequest {
    /// The permits' lease, kept alive by the watchdog (`SEM.EXTEND` every
    /// ttl/3). Default: [`DEFAULT_TTL`](crate::DEFAULT_TTL).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.spec.ttl = ttl;
        self
    }

    /// Wait up to `timeout` in the server's queue (`SEM.ACQUIRE … WAIT`),
    /// on a connection of its own, as
    /// [`LockRequest::wait`](crate::LockRequest::wait) does:
    /// [`Error::TimedOut`] after. Zero means one try.
    pub fn wait(mut self, timeout: Duration) -> Self {
        self.spec.wait = if timeout.is_zero() {
            Wait::No
        } else {
            Wait::For(timeout)
        };
        self
    }

    /// The public label of this holder (1 to 128 bytes), instead of the
    /// options' label.
    pub fn owner(mut self, label: impl Into<String>) -> Self {
        self.spec.owner = Some(label.into());
        self
    }

    /// Grant the permits only once `replicas` replicas hold them
    /// (`SEM.ACQUIRE … SYNC`), as [`LockRequest::sync`](crate::LockRequest::sync)
    /// does for a lock: the permits' extends carry the same sync.
    pub fn sync(mut self, replicas: u32, timeout: Duration) -> Self {
        self.spec.sync = Some(ReplicaSync::new(replicas, timeout));
        self
    }

    /// Take the permits: a [`Permit`] whose watchdog runs from the grant on.
    /// [`Error::NotAcquired`] when fewer than `count` are free or others
    /// wait (and no wait was asked for), [`Error::TimedOut`] when the wait
    /// ran out, [`Error::InvalidArgument`] for a count of 0 or above the
    /// limit, or a limit of 0 or above [`MAX_LIMIT`]; otherwise as
    /// [`LockRequest::acquire`](crate::LockRequest::acquire).
    pub async fn acquire(self) -> Result<Permit> {
        if !(1..=MAX_LIMIT).contains(&self.limit) {
            return Err(Error::InvalidArgument(
                "a semaphore's limit must be 1 to 1000000",
            ));
        }
        if !(1..=self.limit).contains(&self.count) {
            return Err(Error::InvalidArgument(
                "the count must be 1 to the semaphore's limit",
            ));
        }
        let grant = self.locks.acquire_spec(&self.spec).await?;
        Ok(Permit::of(grant, self.count))
    }

    /// Run `work` holding the permits, as
    /// [`LockRequest::run`](crate::LockRequest::run) runs it under a lock:
    /// `work` does not run if they are not acquired, is stopped
    /// ([`Error::Lost`]) if they are lost, and they are released at the end.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(renders: redis_lock_client::Semaphore) -> Result<(), redis_lock_client::Error> {
    /// let fence = renders
    ///     .permits(1)
    ///     .ttl(Duration::from_secs(10))
    ///     .run(|held| async move {
    ///         // one of at most `limit` renders running now
    ///         held.fence
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let permit = self.acquire().await?;
        let held = Held {
            fence: permit.fence,
            lost: permit.lease.lost_signal(),
        };
        run_guarded(held, permit.lease, work).await
    }
}

/// Held permits of a [`Semaphore`], kept alive while the permit lives by
/// their session (as a [`Guard`](crate::Guard) is) or their watchdog
/// (`SEM.EXTEND` every ttl/3).
///
/// - [`Permit::lost`] resolves when the lease is lost (an extend was
///   refused: the key was deleted or the permits expired; the hold policy
///   refused; or no extend succeeded before the deadline minus the safety
///   margin). From then on another holder may have them: stop the work.
/// - [`Permit::release`] gives every permit of this token back
///   (`SEM.RELEASE`), handing them to the head of the queue.
/// - Dropping it stops the watchdog and releases in the background, as
///   dropping a [`Guard`](crate::Guard) does: keep it bound.
#[must_use = "dropping a permit releases it: bind it (`let permit = …`) for as long as the work runs"]
pub struct Permit {
    key: Vec<u8>,
    token: String,
    fence: u64,
    count: u32,
    lease: Lease,
    session: Option<Session>,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("fence", &self.fence)
            .field("count", &self.count)
            .field("lost", &self.lease.lost_signal().reason())
            .finish()
    }
}

impl Permit {
    fn of(grant: Grant, count: u32) -> Permit {
        Permit {
            key: grant.key,
            token: grant.token,
            fence: grant.fence,
            count,
            lease: grant.lease,
            session: grant.session,
        }
    }

    /// The session these permits are attached to; see
    /// [`Guard::session`](crate::Guard::session).
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// The semaphore's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The token that holds the permits (random, chosen by this client).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fence of this grant: larger than every fence the server issued
    /// before, for any key.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// How many permits this token holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Resolves when the lease is lost; see [`Guard::lost`](crate::Guard::lost).
    /// Never resolves once the permit is released.
    pub async fn lost(&self) -> LostReason {
        self.lease.lost_signal().wait().await
    }

    /// A cloneable loss signal for other tasks.
    pub fn lost_signal(&self) -> LostSignal {
        self.lease.lost_signal()
    }

    /// Whether the loss has been signalled by now.
    pub fn is_lost(&self) -> bool {
        self.lease.lost_signal().is_lost()
    }

    /// See [`Guard::held`](crate::Guard::held).
    pub fn held(&self) -> bool {
        self.lease.lost_signal().held()
    }

    /// See [`Guard::remaining`](crate::Guard::remaining).
    pub fn remaining(&self) -> Duration {
        self.lease.lost_signal().remaining()
    }

    /// See [`Guard::deadline`](crate::Guard::deadline).
    pub fn deadline(&self) -> std::time::Instant {
        self.lease.lost_signal().deadline()
    }

    /// Extend the permits' lease now (`SEM.EXTEND`, with the permits'
    /// sync if any); see [`Guard::extend`](crate::Guard::extend).
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        self.lease.extend(ttl, None).await
    }

    /// [`Permit::extend`] with `sync` instead of the permits' own; see
    /// [`Guard::extend_synced`](crate::Guard::extend_synced).
    pub async fn extend_synced(&self, ttl: Duration, sync: ReplicaSync) -> Result<()> {
        self.lease.extend(ttl, Some(sync)).await
    }

    /// Stop the watchdog and release every permit of this token:
    /// `Ok(true)` released, `Ok(false)` the server no longer had them
    /// (expired or deleted), an error if the server could not be asked.
    pub async fn release(mut self) -> Result<bool> {
        self.lease.release().await
    }
}
