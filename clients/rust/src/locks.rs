//! Locks on one Redis server or one Redis Cluster.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{Arg, Cmd, FromRedisValue};
use tokio::time::Instant;

use crate::conn::{LockConnection, Opener, WAIT_REPLY_SLACK};
use crate::error::{timed_out, Error, LostReason, Result};
use crate::lease::{BoxFuture, Lease, LostSignal, Renew, Renewal};
use crate::options::{sent_ttl, ttl_ms, LockOptions};

/// A handle on the lock commands of one Redis server or one Redis Cluster.
/// Cheap to clone; clones share the connection.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::Locks;
///
/// # async fn demo() -> Result<(), redis_lock_client::Error> {
/// let client = redis::Client::open("redis://127.0.0.1:6379/").unwrap();
/// let locks = Locks::connect(client).await?;
/// if let Some(guard) = locks.acquire("billing", Duration::from_secs(10)).await? {
///     println!("fence {}", guard.fence());
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locks {
    conn: LockConnection,
    opener: Option<Opener>,
    options: LockOptions,
}

impl Locks {
    /// Connect to one server through a [`ConnectionManager`](redis::aio::ConnectionManager),
    /// which reconnects after a failure, so a guard's watchdog survives a
    /// dropped connection. Waiting acquires open their own connection from
    /// `client`.
    pub async fn connect(client: redis::Client) -> Result<Locks> {
        let manager = redis::aio::ConnectionManager::new(client.clone()).await?;
        Ok(Locks {
            conn: manager.into(),
            opener: Some(Opener::Single(client)),
            options: LockOptions::default(),
        })
    }

    /// Connect to a Redis Cluster: each command goes to the master that owns
    /// its key's slot (and follows `MOVED`/`ASK`). Waiting acquires open
    /// their own cluster connection from `client`.
    pub async fn connect_cluster(client: ClusterClient) -> Result<Locks> {
        let conn = client.get_async_connection().await?;
        Ok(Locks {
            conn: conn.into(),
            opener: Some(Opener::Cluster(client)),
            options: LockOptions::default(),
        })
    }

    /// Use a connection you already have. [`Locks::acquire_wait`] then needs
    /// [`Locks::wait_client`] (a blocked command must not share a connection
    /// with the watchdogs' extends).
    pub fn from_connection(conn: impl Into<LockConnection>) -> Locks {
        Locks {
            conn: conn.into(),
            opener: None,
            options: LockOptions::default(),
        }
    }

    /// Where [`Locks::acquire_wait`] opens its dedicated connections.
    pub fn wait_client(mut self, client: redis::Client) -> Locks {
        self.opener = Some(Opener::Single(client));
        self
    }

    /// Replace the watchdog options.
    pub fn with_options(mut self, options: LockOptions) -> Locks {
        self.options = options;
        self
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    pub(crate) fn connection(&self) -> &LockConnection {
        &self.conn
    }

    /// Where blocking commands get a connection of their own.
    pub(crate) fn opener(&self) -> Result<Opener> {
        self.opener.clone().ok_or(Error::InvalidArgument(
            "a blocking command needs a dedicated connection: use Locks::connect, \
             Locks::connect_cluster or Locks::wait_client",
        ))
    }

    /// Try once, without waiting. `Ok(Some(guard))` when granted (the
    /// watchdog runs from then on), `Ok(None)` when someone else holds the
    /// lock or others wait for it.
    ///
    /// The reply must come before the lease's deadline minus the safety
    /// margin; otherwise this gives up with [`Error::Connection`] and
    /// releases in the background, in case the grant happened.
    /// Dropping this future after the command was sent can leave a grant
    /// nobody holds a guard for: it then lasts until its ttl runs out.
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Guard>> {
        let grant = self.acquire_once(key, ttl, Kind::Exclusive).await?;
        Ok(grant.map(|grant| self.guard(grant, false)))
    }

    /// Try once, without waiting, for a read lease (`LOCK.ACQUIRE … SHARED`):
    /// granted beside any other shared holders, refused (`Ok(None)`) while
    /// an exclusive holder has the key or anyone waits for it (a queued
    /// writer is not passed). Each shared holder has its own token, lease
    /// and fence; its watchdog, loss signal and release act on this holder
    /// alone. [`Guard::guarded`] runs read-only commands only.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), redis_lock_client::Error> {
    /// let reader = locks.acquire_shared("catalog", Duration::from_secs(10)).await?;
    /// let other = locks.acquire_shared("catalog", Duration::from_secs(10)).await?;
    /// assert!(reader.is_some() && other.is_some(), "readers hold the key together");
    /// // A writer is refused until both readers are gone.
    /// assert!(locks.acquire("catalog", Duration::from_secs(10)).await?.is_none());
    /// # Ok(()) }
    /// ```
    ///
    /// The same token never asks in both modes: a token that holds the key
    /// exclusively and asks for a shared lease (or the reverse) gets
    /// [`Error::Server`] (`ERR this token holds the lock in the other
    /// mode`); this client draws a new token for every acquire, so that
    /// only happens with tokens of your own.
    pub async fn acquire_shared(&self, key: &str, ttl: Duration) -> Result<Option<Guard>> {
        let grant = self.acquire_once(key, ttl, Kind::Shared).await?;
        Ok(grant.map(|grant| self.guard(grant, true)))
    }

    /// One acquire of any kind, without waiting; the lease's watchdog runs
    /// from the grant on.
    pub(crate) async fn acquire_once(
        &self,
        key: &str,
        ttl: Duration,
        kind: Kind,
    ) -> Result<Option<Grant>> {
        let ttl = sent_ttl(ttl)?;
        let margin = self.options.margin_for(ttl)?;
        let owner = self.options.owner_label()?;
        let token = new_token();
        let sent = Instant::now();
        let cmd = kind.acquire_cmd(key, ttl, &token, None, owner)?;
        let reply = tokio::time::timeout(
            ttl - margin,
            self.conn.query::<Option<(Vec<u8>, u64)>>(&cmd),
        )
        .await;
        let reply = match reply {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                let e = Error::from(e);
                if matches!(e, Error::Connection(_)) {
                    self.release_in_background(kind, key, &token);
                }
                return Err(e);
            }
            Err(_) => {
                self.release_in_background(kind, key, &token);
                return Err(timed_out(
                    "no reply to the acquire before the lease would end",
                ));
            }
        };
        Ok(reply.map(|(_, fence)| self.grant(kind, key, token, fence, ttl, margin, sent)))
    }

    /// Wait in the server's fair FIFO queue (`LOCK.ACQUIRE … WAIT`) until the
    /// lock is handed to this client or `timeout` passes
    /// ([`Error::TimedOut`]).
    ///
    /// The blocked command runs on a connection of its own, opened for this
    /// call and closed after it: Redis serves a connection's commands in
    /// order, so a blocked command on the shared connection would hold up
    /// every other guard's extends behind it and make their leases look
    /// lost. Closing the connection is also how a waiter leaves the queue
    /// early: drop this future and the server forgets the waiter.
    ///
    /// The grant may happen any time between sending and the reply, so the
    /// lease is then extended once on the shared connection before the guard
    /// is returned: the watchdog's deadline counts from that extend. Should
    /// the grant have expired already (a reply delayed by more than the
    /// ttl), this goes back to waiting.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), redis_lock_client::Error> {
    /// let guard = locks
    ///     .acquire_wait("billing", Duration::from_secs(10), Duration::from_secs(30))
    ///     .await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_wait(&self, key: &str, ttl: Duration, timeout: Duration) -> Result<Guard> {
        let owner = self.options.owner_label()?;
        self.lock_queued(key, ttl, Some(timeout), owner, false)
            .await
    }

    /// [`Locks::acquire_shared`], waiting up to `timeout` in the server's
    /// queue as [`Locks::acquire_wait`] does. The queue is one per key, in
    /// arrival order for both modes: the shared requests next to each other
    /// at its head are granted together, and a queued exclusive request
    /// keeps later shared ones waiting behind it (writers are not starved).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), redis_lock_client::Error> {
    /// let reader = locks
    ///     .acquire_shared_wait("catalog", Duration::from_secs(10), Duration::from_secs(30))
    ///     .await?;
    /// println!("reading with fence {}", reader.fence());
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_shared_wait(
        &self,
        key: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Guard> {
        let owner = self.options.owner_label()?;
        self.lock_queued(key, ttl, Some(timeout), owner, true).await
    }

    /// A waiting lock acquire with `owner` as the label, and no limit on the
    /// wait when `timeout` is `None`, as a guard.
    pub(crate) async fn lock_queued(
        &self,
        key: &str,
        ttl: Duration,
        timeout: Option<Duration>,
        owner: Option<&str>,
        shared: bool,
    ) -> Result<Guard> {
        let kind = if shared {
            Kind::Shared
        } else {
            Kind::Exclusive
        };
        let grant = self.acquire_queued(key, ttl, timeout, owner, kind).await?;
        Ok(self.guard(grant, shared))
    }

    /// [`Locks::acquire_wait`] for any kind, with `owner` as the label, and
    /// no limit on the wait when `timeout` is `None` (`WAIT 0`: the
    /// dedicated connection then waits as long as the server does).
    pub(crate) async fn acquire_queued(
        &self,
        key: &str,
        ttl: Duration,
        timeout: Option<Duration>,
        owner: Option<&str>,
        kind: Kind,
    ) -> Result<Grant> {
        let ttl = sent_ttl(ttl)?;
        let margin = self.options.margin_for(ttl)?;
        let opener = self.opener()?;
        let token = new_token();
        let end = timeout.map(|timeout| Instant::now() + timeout);
        loop {
            let left = end.map(|end| end.saturating_duration_since(Instant::now()));
            // WAIT 0 would mean "no limit" to the server.
            if left.is_some_and(|left| left < Duration::from_millis(1)) {
                return Err(Error::TimedOut);
            }
            let wait = left.unwrap_or(Duration::ZERO);
            let cmd = kind.acquire_cmd(key, ttl, &token, Some(wait), owner)?;
            let query = async {
                let dedicated = opener.open().await?;
                dedicated.query::<Option<(Vec<u8>, u64)>>(&cmd).await
            };
            let waited = match left {
                Some(left) => tokio::time::timeout(left + WAIT_REPLY_SLACK, query).await,
                None => Ok(query.await),
            };
            let fence = match waited {
                Ok(Ok(Some((_, fence)))) => fence,
                Ok(Ok(None)) => return Err(Error::TimedOut),
                Ok(Err(e)) => {
                    let e = Error::from(e);
                    if matches!(e, Error::Connection(_)) {
                        self.release_in_background(kind, key, &token);
                    }
                    return Err(e);
                }
                Err(_) => {
                    self.release_in_background(kind, key, &token);
                    return Err(timed_out(
                        "no reply to the waiting acquire within its timeout",
                    ));
                }
            };
            // Pin the deadline down: extend now, and count from this send.
            let sent = Instant::now();
            let extend = kind.extend_cmd(key, &token, ttl)?;
            match tokio::time::timeout(ttl - margin, self.conn.query::<i64>(&extend)).await {
                Ok(Ok(1)) => return Ok(self.grant(kind, key, token, fence, ttl, margin, sent)),
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => {
                    self.release_in_background(kind, key, &token);
                    return Err(e.into());
                }
                Err(_) => {
                    self.release_in_background(kind, key, &token);
                    return Err(timed_out("no reply to the extend after a waited grant"));
                }
            }
        }
    }

    /// Run `work` under the lock if it is free now: acquire (without
    /// waiting), keep the lease alive while `work` runs, release at the end.
    ///
    /// - [`Error::NotAcquired`] when someone else holds the lock: `work`
    ///   does not run.
    /// - [`Error::Lost`] when the lease is lost while `work` runs: `work`'s
    ///   future is dropped at that point, so it stops at its next `.await`.
    ///   Anything it wrote before that must have been guarded by the fence.
    ///
    /// `work` gets a [`Held`] with the fence to pass to the storage and a
    /// loss signal. A failed release after the work is not an error: the
    /// lease then expires by itself.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), redis_lock_client::Error> {
    /// let total = locks
    ///     .with_lock("billing", Duration::from_secs(10), |held| async move {
    ///         // write to the ledger with held.fence
    ///         held.fence
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, key: &str, ttl: Duration, work: F) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire(key, ttl).await?.ok_or(Error::NotAcquired)?;
        run_guarded(guard.held(), guard.lease, work).await
    }

    /// [`Locks::with_lock`] with a read lease ([`Locks::acquire_shared`]):
    /// `work` runs beside other readers, and not while a writer holds or
    /// waits for the key ([`Error::NotAcquired`]).
    pub async fn with_shared_lock<F, Fut, T>(&self, key: &str, ttl: Duration, work: F) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self
            .acquire_shared(key, ttl)
            .await?
            .ok_or(Error::NotAcquired)?;
        run_guarded(guard.held(), guard.lease, work).await
    }

    /// [`Locks::with_lock`], but waiting up to `timeout` in the server's
    /// queue ([`Error::TimedOut`] if the lock is not handed over in time).
    pub async fn with_lock_wait<F, Fut, T>(
        &self,
        key: &str,
        ttl: Duration,
        timeout: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire_wait(key, ttl, timeout).await?;
        run_guarded(guard.held(), guard.lease, work).await
    }

    /// Start the watchdog of a lease just granted.
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &self,
        kind: Kind,
        key: &str,
        token: String,
        fence: u64,
        ttl: Duration,
        margin: Duration,
        sent: Instant,
    ) -> Grant {
        let renew = Arc::new(SingleLease {
            conn: self.conn.clone(),
            kind,
            key: key.to_string(),
            token: token.clone(),
            ttl,
        });
        let lease = Lease::start(
            renew,
            ttl,
            margin,
            sent,
            sent + ttl,
            self.options.release_timeout,
        );
        Grant {
            key: key.to_string(),
            token,
            fence,
            lease,
        }
    }

    fn guard(&self, grant: Grant, shared: bool) -> Guard {
        Guard {
            conn: self.conn.clone(),
            key: grant.key,
            token: grant.token,
            fence: grant.fence,
            shared,
            lease: grant.lease,
        }
    }

    /// A release whose outcome nobody waits for: after an acquire whose
    /// reply was lost, the grant may have happened.
    fn release_in_background(&self, kind: Kind, key: &str, token: &str) {
        let conn = self.conn.clone();
        let cmd = kind.release_cmd(key, token);
        let timeout = self.options.release_timeout;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, conn.query::<i64>(&cmd)).await;
        });
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

/// What the work inside [`Locks::with_lock`] gets.
#[derive(Clone)]
pub struct Held {
    /// The fence of this lease: pass it to the storage with every write, and
    /// have the storage refuse a fence lower than one it has seen.
    pub fence: u64,
    /// Resolves if the lease is lost (the work is also stopped then).
    pub lost: LostSignal,
}

/// A held lock. The watchdog extends it every ttl/3 while the guard lives.
///
/// - [`Guard::lost`] resolves when the lease is lost; the watchdog then
///   stops, and so must the work.
/// - [`Guard::release`] gives it back: `Ok(true)` released, `Ok(false)` the
///   server no longer had this lease.
/// - [`Guard::guarded`] runs a command only while the lease is live, in the
///   same atomic step as the server's check.
/// - Dropping the guard stops the watchdog and releases in the background
///   (when a tokio runtime is there to run it); the lease expires anyway.
pub struct Guard {
    conn: LockConnection,
    key: String,
    token: String,
    fence: u64,
    shared: bool,
    lease: Lease,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("key", &self.key)
            .field("fence", &self.fence)
            .field("shared", &self.shared)
            .field("lost", &self.lease.lost_signal().is_lost())
            .finish()
    }
}

impl Guard {
    /// The locked key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The token that holds the lock (random, chosen by this client).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fence: larger than every fence the server issued before for any
    /// key. Give it to the storage, which refuses writes with a fence below
    /// the highest it has seen for the resource.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Whether this is a shared (read) lease, from
    /// [`Locks::acquire_shared`] or [`Locks::acquire_shared_wait`].
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Resolves when the lease is lost: an extend was refused (the key was
    /// deleted, expired or taken over), a guarded command was answered
    /// `LOST`, or no extend succeeded before the deadline minus the safety
    /// margin (server down, network stalled). It fires before the deadline
    /// passes on this client's monotonic clock. Never resolves once the
    /// guard is released.
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

    /// Run `cmd` on the server only if this lease is still live there, in
    /// the same atomic step as the check (`LOCK.GUARD key token cmd…`), and
    /// return its reply, converted like [`redis::Cmd::query_async`] would.
    ///
    /// - [`Error::Lost`]`(`[`LostReason::NotHeld`]`)` when the server
    ///   answered `LOST`: the token no longer holds the lock (expired,
    ///   released, deleted or taken over), and `cmd` did not run. The lease
    ///   is marked lost as well, so [`Guard::lost`] and every
    ///   [`LostSignal`] fire and the watchdog stops.
    /// - [`Error::Server`] when the command's own reply is an error
    ///   (`WRONGTYPE`, …) or the server refuses to guard it (`ERR … not
    ///   allowed in LOCK.GUARD`: blocking, transaction, pub/sub and lock
    ///   commands, and any command that may write when this is a shared
    ///   guard), or the lock key holds another type. The lease is not
    ///   marked lost for these.
    /// - [`Error::Connection`] when the reply did not come: the command may
    ///   or may not have run.
    ///
    /// The command runs as the connection's ACL user and renews nothing;
    /// the watchdog keeps extending the lease as before. In a cluster, the
    /// command's keys must share the lock key's slot (a hash tag, such as
    /// `{billing}` in both), since `LOCK.GUARD` is routed by the lock key.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{Error, LostReason};
    ///
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), Error> {
    /// let guard = locks
    ///     .acquire("{billing}:nightly", Duration::from_secs(10))
    ///     .await?
    ///     .expect("free");
    /// // Written only while this guard holds the lock.
    /// let total: i64 = guard
    ///     .guarded(redis::cmd("INCRBY").arg("{billing}:total").arg(1200))
    ///     .await?;
    /// let last: Option<String> = guard
    ///     .guarded(redis::cmd("GET").arg("{billing}:last-customer"))
    ///     .await?;
    /// match guard
    ///     .guarded::<()>(redis::cmd("SET").arg("{billing}:last-customer").arg("acme"))
    ///     .await
    /// {
    ///     Ok(()) => println!("total {total}, last {last:?}"),
    ///     // Nothing was written, and guard.lost() has fired.
    ///     Err(Error::Lost(LostReason::NotHeld)) => return Ok(()),
    ///     Err(e) => return Err(e),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn guarded<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let guarded = guard_cmd(&self.key, &self.token, cmd)?;
        match self.conn.query(&guarded).await {
            Ok(reply) => Ok(reply),
            Err(e) if e.code() == Some("LOST") => {
                self.lease.mark_lost(LostReason::NotHeld);
                Err(Error::Lost(LostReason::NotHeld))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Stop the watchdog and release: `Ok(true)` released, `Ok(false)` the
    /// server no longer had this lease (it expired, was deleted, or went to
    /// someone else), an error if the server could not be asked.
    pub async fn release(mut self) -> Result<bool> {
        self.lease.release().await
    }

    fn held(&self) -> Held {
        Held {
            fence: self.fence,
            lost: self.lease.lost_signal(),
        }
    }
}

/// A lease just granted, before it is wrapped in the guard of its kind.
pub(crate) struct Grant {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) lease: Lease,
}

/// What a lease holds on one node, and so which commands take, extend and
/// give it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `LOCK.ACQUIRE`: the key alone.
    Exclusive,
    /// `LOCK.ACQUIRE … SHARED`: a read lease beside other readers.
    Shared,
    /// `SEM.ACQUIRE key limit ttl COUNT count`: permits of a semaphore.
    Permits { limit: u32, count: u32 },
}

impl Kind {
    pub(crate) fn acquire_cmd(
        self,
        key: &str,
        ttl: Duration,
        token: &str,
        wait: Option<Duration>,
        owner: Option<&str>,
    ) -> Result<Cmd> {
        match self {
            Kind::Exclusive => acquire_cmd(key, ttl, token, wait, owner),
            Kind::Shared => {
                let mut cmd = acquire_cmd(key, ttl, token, wait, owner)?;
                cmd.arg("SHARED");
                Ok(cmd)
            }
            Kind::Permits { limit, count } => {
                let mut cmd = redis::cmd("SEM.ACQUIRE");
                cmd.arg(key)
                    .arg(limit)
                    .arg(ttl_ms(ttl)?)
                    .arg("COUNT")
                    .arg(count)
                    .arg("TOKEN")
                    .arg(token);
                if let Some(wait) = wait {
                    cmd.arg("WAIT").arg(wait.as_millis() as u64);
                }
                if let Some(owner) = owner {
                    cmd.arg("OWNER").arg(owner);
                }
                Ok(cmd)
            }
        }
    }

    pub(crate) fn extend_cmd(self, key: &str, token: &str, ttl: Duration) -> Result<Cmd> {
        match self {
            Kind::Exclusive | Kind::Shared => extend_cmd(key, token, ttl),
            Kind::Permits { .. } => {
                let mut cmd = redis::cmd("SEM.EXTEND");
                cmd.arg(key).arg(token).arg(ttl_ms(ttl)?);
                Ok(cmd)
            }
        }
    }

    pub(crate) fn release_cmd(self, key: &str, token: &str) -> Cmd {
        match self {
            Kind::Exclusive | Kind::Shared => release_cmd(key, token),
            Kind::Permits { .. } => {
                let mut cmd = redis::cmd("SEM.RELEASE");
                cmd.arg(key).arg(token);
                cmd
            }
        }
    }
}

/// One node's lease, as the watchdog sees it.
struct SingleLease {
    conn: LockConnection,
    kind: Kind,
    key: String,
    token: String,
    ttl: Duration,
}

impl Renew for SingleLease {
    fn renew(&self) -> BoxFuture<'_, Renewal> {
        Box::pin(async move {
            let Ok(cmd) = self.kind.extend_cmd(&self.key, &self.token, self.ttl) else {
                return Renewal::Refused;
            };
            let sent = Instant::now();
            match self.conn.query::<i64>(&cmd).await {
                Ok(1) => Renewal::Extended {
                    sent,
                    valid_until: sent + self.ttl,
                },
                Ok(_) => Renewal::Refused,
                // The key now holds another type: not our lock any more.
                Err(e) if e.code() == Some("WRONGTYPE") => Renewal::Refused,
                // Connection errors, and server errors that may pass (OOM,
                // LOADING, TRYAGAIN): try again until the deadline.
                Err(_) => Renewal::Failed,
            }
        })
    }

    fn release(&self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            let n: i64 = self
                .conn
                .query(&self.kind.release_cmd(&self.key, &self.token))
                .await?;
            Ok(n == 1)
        })
    }
}

/// A fresh random token: the client picks it so that it can release after a
/// lost reply, and so that Redlock can use one token on every node.
pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub(crate) fn acquire_cmd(
    key: &str,
    ttl: Duration,
    token: &str,
    wait: Option<Duration>,
    owner: Option<&str>,
) -> Result<Cmd> {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(ttl_ms(ttl)?).arg("TOKEN").arg(token);
    if let Some(wait) = wait {
        cmd.arg("WAIT").arg(wait.as_millis() as u64);
    }
    if let Some(owner) = owner {
        cmd.arg("OWNER").arg(owner);
    }
    Ok(cmd)
}

pub(crate) fn extend_cmd(key: &str, token: &str, ttl: Duration) -> Result<Cmd> {
    let mut cmd = redis::cmd("LOCK.EXTEND");
    cmd.arg(key).arg(token).arg(ttl_ms(ttl)?);
    Ok(cmd)
}

/// `LOCK.GUARD key token` followed by `cmd`'s name and arguments.
pub(crate) fn guard_cmd(key: &str, token: &str, cmd: &Cmd) -> Result<Cmd> {
    if cmd.args_iter().len() == 0 {
        return Err(Error::InvalidArgument("guarded needs a command to run"));
    }
    let mut guarded = redis::cmd("LOCK.GUARD");
    guarded.arg(key).arg(token);
    for arg in cmd.args_iter() {
        match arg {
            Arg::Simple(bytes) => guarded.arg(bytes),
            Arg::Cursor => {
                return Err(Error::InvalidArgument(
                    "a cursor argument (Cmd::cursor_arg) cannot be guarded: pass the cursor as a plain argument",
                ))
            }
        };
    }
    Ok(guarded)
}

pub(crate) fn release_cmd(key: &str, token: &str) -> Cmd {
    let mut cmd = redis::cmd("LOCK.RELEASE");
    cmd.arg(key).arg(token);
    cmd
}
