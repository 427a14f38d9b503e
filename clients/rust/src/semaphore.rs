//! Counting semaphores (`SEM.*`): at most `limit` permits out at once, each
//! holder with its own token, lease and fence, kept alive by the same
//! watchdog as a lock guard (`SEM.EXTEND`) and given back with
//! `SEM.RELEASE`.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use redis::Value;

use crate::error::{Error, LostReason, Result};
use crate::lease::{Lease, LostSignal};
use crate::locks::{run_guarded, Grant, Held, Kind, Locks};

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
/// use redis_lock_client::{Locks, Semaphore};
///
/// # async fn demo() -> Result<(), redis_lock_client::Error> {
/// let client = redis::Client::open("redis://127.0.0.1:6379/").unwrap();
/// let locks = Locks::connect(client).await?;
/// // At most 4 renders at once, across every process that uses this key.
/// let renders = Semaphore::new(locks, "renders", 4);
/// let permit = renders
///     .acquire_wait(1, Duration::from_secs(10), Duration::from_secs(30))
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
    key: String,
    limit: u32,
}

impl Semaphore {
    /// The semaphore `key` with `limit` permits (1 to [`MAX_LIMIT`], checked
    /// when an acquire is made). The watchdog options and owner label are
    /// those of `locks`.
    pub fn new(locks: Locks, key: impl Into<String>, limit: u32) -> Semaphore {
        Semaphore {
            locks,
            key: key.into(),
            limit,
        }
    }

    /// The semaphore's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The number of permits.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Try once, without waiting, for `count` permits under one token, each
    /// leased for `ttl`. `Ok(Some(permit))` when granted (the watchdog runs
    /// from then on), `Ok(None)` when fewer than `count` are free or others
    /// wait. [`Error::InvalidArgument`] for a count of 0 or above the limit.
    ///
    /// As for [`Locks::acquire`], the reply must come before the lease's
    /// deadline minus the safety margin; otherwise this gives up with
    /// [`Error::Connection`] and releases in the background.
    pub async fn acquire(&self, count: u32, ttl: Duration) -> Result<Option<Permit>> {
        let kind = self.kind(count)?;
        let grant = self.locks.acquire_once(&self.key, ttl, kind).await?;
        Ok(grant.map(|grant| Permit::of(grant, count)))
    }

    /// Wait in the server's queue (`SEM.ACQUIRE … WAIT`) until `count`
    /// permits are handed to this client or `timeout` passes
    /// ([`Error::TimedOut`]), on a connection of its own, as
    /// [`Locks::acquire_wait`] does (drop the future to leave the queue).
    pub async fn acquire_wait(
        &self,
        count: u32,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Permit> {
        let kind = self.kind(count)?;
        let owner = self.locks.options().owner_label()?;
        let grant = self
            .locks
            .acquire_queued(&self.key, ttl, Some(timeout), owner, kind)
            .await?;
        Ok(Permit::of(grant, count))
    }

    /// Run `work` holding `count` permits if they are free now, as
    /// [`Locks::with_lock`] runs it under a lock: [`Error::NotAcquired`]
    /// when they are not (and `work` does not run), [`Error::Lost`] when the
    /// permits are lost while `work` runs (it is stopped), released at the
    /// end.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(renders: redis_lock_client::Semaphore) -> Result<(), redis_lock_client::Error> {
    /// let fence = renders
    ///     .with_permits(1, Duration::from_secs(10), |held| async move {
    ///         // one of at most `limit` renders running now
    ///         held.fence
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_permits<F, Fut, T>(&self, count: u32, ttl: Duration, work: F) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let permit = self.acquire(count, ttl).await?.ok_or(Error::NotAcquired)?;
        let held = Held {
            fence: permit.fence,
            lost: permit.lease.lost_signal(),
        };
        run_guarded(held, permit.lease, work).await
    }

    /// The semaphore now (`SEM.INFO`), or `None` when nobody holds or waits
    /// for a permit.
    pub async fn info(&self) -> Result<Option<SemaphoreInfo>> {
        let mut cmd = redis::cmd("SEM.INFO");
        cmd.arg(&self.key);
        let reply: Option<HashMap<String, Value>> = self.locks.connection().query(&cmd).await?;
        reply.map(SemaphoreInfo::of).transpose()
    }

    fn kind(&self, count: u32) -> Result<Kind> {
        if !(1..=MAX_LIMIT).contains(&self.limit) {
            return Err(Error::InvalidArgument(
                "a semaphore's limit must be 1 to 1000000",
            ));
        }
        if !(1..=self.limit).contains(&count) {
            return Err(Error::InvalidArgument(
                "the count must be 1 to the semaphore's limit",
            ));
        }
        Ok(Kind::Permits {
            limit: self.limit,
            count,
        })
    }
}

/// A semaphore as `SEM.INFO` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The number of permits.
    pub limit: u32,
    /// Permits out now.
    pub used: u32,
    /// Tokens that hold permits.
    pub holders: u32,
    /// Requests in the queue.
    pub waiters: u32,
    /// The highest holder fence.
    pub fence: u64,
    /// What is left of the latest lease; `None` without a TTL.
    pub ttl: Option<Duration>,
}

impl SemaphoreInfo {
    fn of(fields: HashMap<String, Value>) -> Result<SemaphoreInfo> {
        let int = |name: &'static str| match fields.get(name) {
            Some(Value::Int(n)) => Ok(*n),
            _ => Err(unexpected(name)),
        };
        let count = |name| u32::try_from(int(name)?).map_err(|_| unexpected(name));
        Ok(SemaphoreInfo {
            limit: count("limit")?,
            used: count("used")?,
            holders: count("holders")?,
            waiters: count("waiters")?,
            fence: u64::try_from(int("fence")?).map_err(|_| unexpected("fence"))?,
            ttl: u64::try_from(int("ttl")?).ok().map(Duration::from_millis),
        })
    }
}

fn unexpected(field: &'static str) -> Error {
    Error::Server(redis::RedisError::from((
        redis::ErrorKind::TypeError,
        "unexpected reply to SEM.INFO: a field is missing or of the wrong type",
        field.to_string(),
    )))
}

/// Held permits of a [`Semaphore`]. The watchdog extends their lease
/// (`SEM.EXTEND`) every ttl/3 while the permit lives.
///
/// - [`Permit::lost`] resolves when the lease is lost (an extend was
///   refused: the key was deleted or the permits expired; or no extend
///   succeeded before the deadline minus the safety margin). From then on
///   another holder may have them: stop the work.
/// - [`Permit::release`] gives every permit of this token back
///   (`SEM.RELEASE`), handing them to the head of the queue.
/// - Dropping it stops the watchdog and releases in the background, as
///   dropping a [`Guard`](crate::Guard) does.
pub struct Permit {
    key: String,
    token: String,
    fence: u64,
    count: u32,
    lease: Lease,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("key", &self.key)
            .field("fence", &self.fence)
            .field("count", &self.count)
            .field("lost", &self.lease.lost_signal().is_lost())
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
        }
    }

    /// The semaphore's key.
    pub fn key(&self) -> &str {
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

    /// Whether the lease has been lost by now.
    pub fn is_lost(&self) -> bool {
        self.lease.lost_signal().is_lost()
    }

    /// Stop the watchdog and release every permit of this token:
    /// `Ok(true)` released, `Ok(false)` the server no longer had them
    /// (expired or deleted), an error if the server could not be asked.
    pub async fn release(mut self) -> Result<bool> {
        self.lease.release().await
    }
}
