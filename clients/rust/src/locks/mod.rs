//! Locks on one Redis server or one Redis Cluster: the handle ([`Locks`]),
//! the request builder ([`LockRequest`]), the guard ([`Guard`]), and the
//! one acquire path that every lease on one node goes through (a lock, a
//! read lease, permits of a semaphore).

mod guard;
mod request;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::Value;
use tokio::time::Instant;

pub use guard::{Guard, Held};
pub(crate) use request::run_guarded;
pub use request::LockRequest;

use crate::commands::{info_cmd, new_token, queue_cmd, revoke_cmd, Extended, Kind, Wait};
use crate::conn::{LockConnection, Opener, SyncLane, WAIT_REPLY_SLACK};
use crate::error::{timed_out, Error, LostReason, Result};
use crate::info::{LockInfo, Waiter};
use crate::lease::{BoxFuture, Lease, Renew, Renewal, Term};
use crate::options::{check_owner, sent_ttl, LockOptions, ReplicaSync};
use crate::session::{is_no_lease, Attached, Session, Sessions};

/// A handle on the lock commands of one Redis server or one Redis Cluster.
/// Cheap to clone; clones share the connection.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{redis, Error, Locks};
///
/// # async fn demo() -> Result<(), Error> {
/// let locks = Locks::connect(redis::Client::open("redis://127.0.0.1:6379/")?).await?;
/// match locks.lock("billing").ttl(Duration::from_secs(10)).acquire().await {
///     Ok(guard) => {
///         println!("fence {}", guard.fence());
///         guard.release().await?;
///     }
///     Err(Error::NotAcquired) => println!("another worker holds it"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locks {
    conn: LockConnection,
    opener: Option<Opener>,
    options: LockOptions,
    /// The sessions of this connection (shared by the clones).
    sessions: Arc<Sessions>,
    /// Set once the server's module passed the version check (shared by
    /// the clones: one check per connection, not per command).
    module_checked: Arc<tokio::sync::OnceCell<()>>,
}

impl Locks {
    /// Connect to one server through a [`ConnectionManager`], which
    /// reconnects after a failure, so a guard's watchdog survives a dropped
    /// connection. Waiting acquires open their own connection from
    /// `client`.
    ///
    /// The manager has the `redis` crate's defaults (in redis 1.x: 1 s to
    /// connect, 500 ms for a reply). The lock commands are quick; a guarded
    /// command ([`Guard::guarded`]) that may run longer wants
    /// [`Locks::connect_with`] and a longer response timeout.
    pub async fn connect(client: redis::Client) -> Result<Locks> {
        Locks::connect_with(client, ConnectionManagerConfig::new()).await
    }

    /// [`Locks::connect`] with the connection manager's configuration
    /// (timeouts, reconnect back-off).
    pub async fn connect_with(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> Result<Locks> {
        let manager = ConnectionManager::new_with_config(client.clone(), config).await?;
        let locks = Locks::on(manager.into(), Some(Opener::Single(client)));
        locks.ready().await?;
        Ok(locks)
    }

    /// Connect to a Redis Cluster: each command goes to the master that owns
    /// its key's slot (and follows `MOVED`/`ASK`). Waiting acquires open
    /// their own cluster connection from `client`, so a response timeout
    /// set on it must be longer than the waits.
    pub async fn connect_cluster(client: ClusterClient) -> Result<Locks> {
        let conn = client.get_async_connection().await?;
        let locks = Locks::on(conn.into(), Some(Opener::Cluster(Box::new(client))));
        locks.ready().await?;
        Ok(locks)
    }

    /// Use a connection you already have. A waiting request
    /// ([`LockRequest::wait`]) then needs [`Locks::wait_client`] (a
    /// blocked command must not share a connection with the watchdogs'
    /// extends).
    pub fn from_connection(conn: impl Into<LockConnection>) -> Locks {
        Locks::on(conn.into(), None)
    }

    fn on(conn: LockConnection, opener: Option<Opener>) -> Locks {
        Locks {
            sessions: Arc::new(Sessions::new(conn.clone())),
            conn,
            opener,
            options: LockOptions::default(),
            module_checked: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// The module version check ([`crate::version`]), the first time only:
    /// [`Error::ModuleVersion`] when the server's `lock` module is older
    /// than this client needs or not loaded. A failed check is not
    /// remembered (the next command checks again).
    pub(crate) async fn ready(&self) -> Result<()> {
        self.module_checked
            .get_or_try_init(|| crate::version::check(&self.conn))
            .await
            .map(|_| ())
    }

    /// Where waiting requests open their dedicated connections.
    pub fn wait_client(mut self, client: redis::Client) -> Locks {
        self.opener = Some(Opener::Single(client));
        self
    }

    /// Replace the options: how holds are kept alive (a session or a
    /// watchdog each: [`KeepAlive`](crate::KeepAlive)), the safety margin,
    /// the release timeout and the default owner label. The clones made
    /// before keep theirs; all of them share this connection's sessions.
    pub fn with_options(mut self, options: LockOptions) -> Locks {
        self.options = options;
        self
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// A request for the lock `key` (any bytes: `&str`, `String`,
    /// `&[u8]`, `Vec<u8>`), to shape with [`LockRequest::ttl`],
    /// [`LockRequest::wait`], [`LockRequest::shared`] and
    /// [`LockRequest::owner`], then [`LockRequest::acquire`] or
    /// [`LockRequest::run`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), redis_lock_client::Error> {
    /// let guard = locks
    ///     .lock("billing")
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(30))
    ///     .owner("worker-3")
    ///     .acquire()
    ///     .await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, key: impl AsRef<[u8]>) -> LockRequest {
        LockRequest::new(self.clone(), key.as_ref().to_vec())
    }

    /// A request for several locks taken in one step, all or nothing
    /// (`LOCK.MACQUIRE`, issue 28): every key is granted to one token with
    /// one fence and one deadline, or none is. Shape it as
    /// [`Locks::lock`]'s ([`ttl`](LockRequest::ttl),
    /// [`wait`](LockRequest::wait), [`shared`](LockRequest::shared),
    /// [`owner`](LockRequest::owner)), then
    /// [`acquire`](LockRequest::acquire) for one [`Guard`] over the whole
    /// set, or [`run`](LockRequest::run).
    ///
    /// - A wait queues fairly on every key and holds none while it waits,
    ///   so two requests for overlapping sets, in any order, cannot
    ///   deadlock.
    /// - The guard keeps all of them alive together, as one lock's: in its
    ///   session (`LOCK.MACQUIRE … LEASE id`: each key a hold of the
    ///   session's lease, which the session counts per key), or by a
    ///   watchdog of its own, one `LOCK.MEXTEND` every ttl/3 for the whole
    ///   set. It signals the loss when any key is lost (`LOCK.MEXTEND` is
    ///   all or nothing: it replies 0 and changes nothing unless the token
    ///   still holds every key; a session finds a key gone at its next
    ///   keepalive), and releases them all (`LOCK.MRELEASE`; `Ok(true)`
    ///   when every key was released). [`Guard::guarded`] checks the first
    ///   key (the one [`Guard::key`] returns); [`Guard::keys`] lists them
    ///   all.
    /// - [`sync`](LockRequest::sync) applies to the whole set: the grant is
    ///   answered once the replicas hold every key, and undone on every key
    ///   otherwise.
    /// - In a Redis Cluster every key must hash to one slot: give them one
    ///   hash tag (`{order:42}:stock`, `{order:42}:payment`).
    /// - One key is a plain lock (`LOCK.ACQUIRE`); none is
    ///   [`Error::InvalidArgument`] at acquire.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), redis_lock_client::Error> {
    /// let guard = locks
    ///     .lock_many(["{order:42}:stock", "{order:42}:payment"])
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(30))
    ///     .acquire()
    ///     .await?;
    /// // One fence for the whole set.
    /// println!("fence {}", guard.fence());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_many<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) -> LockRequest {
        let keys = keys.into_iter().map(|k| k.as_ref().to_vec()).collect();
        LockRequest::many(self.clone(), keys)
    }

    /// The lock `key` now (`LOCK.INFO`): `None` when nobody holds it.
    /// [`Error::Server`] with code `WRONGTYPE` for a key of another type
    /// (a semaphore's too: see [`Semaphore::info`](crate::Semaphore::info)).
    pub async fn info(&self, key: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        self.ready().await?;
        let reply = self.conn.query(&info_cmd(key.as_ref())).await?;
        LockInfo::of(reply)
    }

    /// The clients waiting for `key` (`LOCK.QUEUE … COUNT count`), in queue
    /// order, at most `count` (1 to 1000) of them; empty when nobody waits.
    /// Works for a lock and for a semaphore.
    pub async fn queue(&self, key: impl AsRef<[u8]>, count: usize) -> Result<Vec<Waiter>> {
        let cmd = queue_cmd(key.as_ref(), count)?;
        self.ready().await?;
        let reply: Vec<std::collections::HashMap<String, Value>> = self.conn.query(&cmd).await?;
        reply.into_iter().map(Waiter::of).collect()
    }

    /// Take a lock back (`LOCK.REVOKE key REASON reason`), for operators:
    /// every current hold of `key` (the lock, each reader, each semaphore
    /// holder) ends as a release would end it, the waiters are served at
    /// once, and the reply is how many holds ended (0 when it was free).
    /// Each revoked holder learns it: its extend and its guarded commands
    /// are answered `REVOKED <reason>` (its loss signal fires with
    /// [`LostReason::Revoked`](crate::LostReason::Revoked) and the reason;
    /// a holder in a session learns it at its session's next keepalive),
    /// and nothing it sends through `LOCK.GUARD` lands any more.
    ///
    /// `reason` is 1 to 128 bytes (any bytes; [`Error::InvalidArgument`]
    /// otherwise). `LOCK.REVOKE` is in the ACL categories `@dangerous` and
    /// `@admin`: a worker's user (`+@lock -@dangerous`, or only the lock
    /// commands it uses; on Redis 7.0, which gives a module command no
    /// category, `-lock.revoke` by name) gets `NOPERM`
    /// ([`Error::Server`]), so revoking is for an operator's user.
    ///
    /// ```no_run
    /// # async fn demo(admin: redis_lock_client::Locks) -> Result<(), redis_lock_client::Error> {
    /// let ended = admin.revoke("billing", "stuck since 03:00, ticket OPS-1234").await?;
    /// println!("{ended} hold(s) taken back");
    /// # Ok(()) }
    /// ```
    pub async fn revoke(&self, key: impl AsRef<[u8]>, reason: impl AsRef<[u8]>) -> Result<u64> {
        let cmd = revoke_cmd(key.as_ref(), reason.as_ref())?;
        self.ready().await?;
        Ok(self.conn.query(&cmd).await?)
    }

    /// The sessions this connection (and its clones) has granted, one per
    /// node and ttl, each the latest of its kind (it may have ended: the
    /// next hold then gets a new one). Empty in watchdog mode.
    pub fn sessions(&self) -> Vec<Session> {
        self.sessions.sessions()
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

    /// The one acquire path: one try, or a wait in the server's queue.
    /// [`Error::NotAcquired`] when one try found the key held,
    /// [`Error::TimedOut`] when the wait ran out,
    /// [`Error::NotReplicated`] when a synced grant was undone. The hold is
    /// attached to the session of its node and ttl (a sync, or no session:
    /// its own watchdog runs from the grant on).
    pub(crate) async fn acquire_spec(&self, spec: &Spec) -> Result<Grant> {
        let ttl = sent_ttl(spec.ttl)?;
        let margin = self.options.margin_for(ttl)?;
        let owner = match &spec.owner {
            Some(owner) => Some(check_owner(owner)?),
            None => self.options.owner_label()?,
        };
        let sync = ReplicaSync::checked(spec.sync)?;
        ReplicaSync::check_fits(sync, ttl, margin)?;
        self.ready().await?;
        let how = How {
            ttl,
            margin,
            owner,
            sync,
        };
        let session = match sync {
            // A keepalive carries no sync: a synced hold keeps its watchdog.
            Some(_) => None,
            None => {
                self.sessions
                    .session_for(&spec.key, ttl, margin, &self.options)
                    .await?
            }
        };
        match (spec.wait, session) {
            (_, Some(session)) => self.acquire_in_session(spec, &how, session).await,
            (Wait::No, None) => self.acquire_once(spec, &how).await,
            (wait, None) => self.acquire_queued(spec, wait, &how).await,
        }
    }

    /// Acquire attached to `session` (`LEASE id`): one try, or a wait in
    /// the server's queue on a connection of its own (the session's keeper
    /// keeps the lease alive meanwhile). No pinning extend after a wait:
    /// the hold lives as long as the lease, whose term this client counts
    /// from its keepalives.
    ///
    /// Once, the lease may turn out gone: `NOLEASE` (it expired or was
    /// revoked; in a cluster, the key may be another node's), or a grant
    /// whose session ended before the reply came (given back). Then the
    /// session is renewed (its other holds are lost, if its lease is gone)
    /// and the acquire tried again, with what is left of the wait.
    async fn acquire_in_session(
        &self,
        spec: &Spec,
        how: &How<'_>,
        mut session: Session,
    ) -> Result<Grant> {
        let end = match spec.wait {
            Wait::For(wait) => Some(Instant::now() + wait),
            _ => None,
        };
        let mut retried = false;
        loop {
            let token = new_token();
            match self.acquire_with(spec, how, &session, &token, end).await {
                Ok(fence) => {
                    let probe = spec
                        .kind
                        .extend_cmd(&spec.key, &spec.set, &token, how.ttl, None)?;
                    match session.attach(probe.clone(), spec.set.len().max(1)) {
                        Ok(attached) => {
                            return Ok(
                                self.grant_attached(spec, token, fence, session, probe, attached)
                            )
                        }
                        Err(reason) => {
                            // Granted, but the session ended before the
                            // reply: the hold went (or goes) with it.
                            self.release_in_background(spec, &token);
                            if retried {
                                return Err(Error::Lost(reason));
                            }
                        }
                    }
                }
                Err(e) if is_no_lease(&e) && !retried => {
                    self.sessions.no_lease(&session, &spec.key).await;
                }
                Err(e) => return Err(e),
            }
            retried = true;
            match self
                .sessions
                .session_for(&spec.key, how.ttl, how.margin, &self.options)
                .await?
            {
                Some(next) => session = next,
                // Cannot happen after a grant (the server has leases), but
                // a watchdog serves as well.
                None => {
                    return match spec.wait {
                        Wait::No => self.acquire_once(spec, how).await,
                        wait => self.acquire_queued(spec, wait, how).await,
                    }
                }
            }
        }
    }

    /// One acquire with `session`'s lease: the fence, or why not. A wait
    /// runs on a connection of its own until `end` (`None`: no limit).
    async fn acquire_with(
        &self,
        spec: &Spec,
        how: &How<'_>,
        session: &Session,
        token: &str,
        end: Option<Instant>,
    ) -> Result<u64> {
        let _pending = session.pending();
        let lease = Some(session.id());
        if spec.wait == Wait::No {
            let cmd = spec.kind.acquire_cmd(
                &spec.key,
                &spec.set,
                how.ttl,
                token,
                Wait::No,
                how.owner,
                None,
                lease,
            )?;
            let reply = tokio::time::timeout(
                how.ttl - how.margin,
                self.conn.query::<Option<(Vec<u8>, u64)>>(&cmd),
            )
            .await;
            return match reply {
                Ok(Ok(Some((_, fence)))) => Ok(fence),
                Ok(Ok(None)) => Err(Error::NotAcquired),
                Ok(Err(e)) => {
                    let e = Error::from(e);
                    if matches!(e, Error::Connection(_)) {
                        self.release_in_background(spec, token);
                    }
                    Err(e)
                }
                Err(_) => {
                    self.release_in_background(spec, token);
                    Err(timed_out(
                        "no reply to the acquire before the lease would end",
                    ))
                }
            };
        }
        let opener = self.opener()?;
        let left = end.map(|end| end.saturating_duration_since(Instant::now()));
        // WAIT 0 would mean "no limit" to the server.
        if left.is_some_and(|left| left < Duration::from_millis(1)) {
            return Err(Error::TimedOut);
        }
        let wait = left.map_or(Wait::Forever, Wait::For);
        let cmd = spec.kind.acquire_cmd(
            &spec.key, &spec.set, how.ttl, token, wait, how.owner, None, lease,
        )?;
        let query = async {
            let dedicated = opener.open().await?;
            dedicated.query::<Option<(Vec<u8>, u64)>>(&cmd).await
        };
        let waited = match left {
            Some(left) => tokio::time::timeout(left + WAIT_REPLY_SLACK, query).await,
            None => Ok(query.await),
        };
        match waited {
            Ok(Ok(Some((_, fence)))) => Ok(fence),
            Ok(Ok(None)) => Err(Error::TimedOut),
            Ok(Err(e)) => {
                let e = Error::from(e);
                if matches!(e, Error::Connection(_)) {
                    self.release_in_background(spec, token);
                }
                Err(e)
            }
            Err(_) => {
                self.release_in_background(spec, token);
                Err(timed_out(
                    "no reply to the waiting acquire within its timeout",
                ))
            }
        }
    }

    /// A hold just granted and attached to `session`: no watchdog, the
    /// session keeps it.
    fn grant_attached(
        &self,
        spec: &Spec,
        token: String,
        fence: u64,
        session: Session,
        probe: redis::Cmd,
        attached: Attached,
    ) -> Grant {
        let lane = self.opener.clone().map(|o| Arc::new(SyncLane::new(o)));
        let renew = Arc::new(SessionHold {
            hold: SingleLease {
                conn: self.conn.clone(),
                lane: lane.clone(),
                sync: None,
                kind: spec.kind,
                key: spec.key.clone(),
                set: spec.set.clone(),
                token: token.clone(),
            },
            session: session.clone(),
            probe,
        });
        Grant {
            key: spec.key.clone(),
            set: spec.set.clone(),
            token,
            fence,
            lease: Lease::attached(
                renew,
                attached.cell,
                Box::new(attached.detach),
                &self.options,
            ),
            lane,
            session: Some(session),
        }
    }

    /// One try, without waiting. The reply must come before the lease's
    /// deadline minus the safety margin; otherwise this gives up with
    /// [`Error::Connection`] and releases in the background, in case the
    /// grant happened. Dropping this future after the command was sent can
    /// leave a grant nobody holds a guard for: it then lasts until its ttl
    /// runs out (a synced one waiting for its replicas is undone by the
    /// server when its connection closes).
    ///
    /// A synced acquire blocks its connection until the replicas
    /// acknowledge: it goes on a connection of its own, which the lease
    /// then keeps for its synced extends.
    async fn acquire_once(&self, spec: &Spec, how: &How<'_>) -> Result<Grant> {
        let token = new_token();
        let cmd = spec.kind.acquire_cmd(
            &spec.key,
            &spec.set,
            how.ttl,
            &token,
            Wait::No,
            how.owner,
            how.sync,
            None,
        )?;
        let limit = how.ttl - how.margin;
        let lane = match how.sync {
            Some(_) => Some(Arc::new(SyncLane::new(self.opener()?))),
            None => None,
        };
        let sent = Instant::now();
        let reply = match &lane {
            Some(lane) => lane.query::<Option<(Vec<u8>, u64)>>(&cmd, limit).await,
            None => match tokio::time::timeout(limit, self.conn.query(&cmd)).await {
                Ok(reply) => reply.map_err(Error::from),
                Err(_) => Err(timed_out(
                    "no reply to the acquire before the lease would end",
                )),
            },
        };
        match reply {
            Ok(Some((_, fence))) => Ok(self.grant(spec, how, token, fence, sent, lane)),
            Ok(None) => Err(Error::NotAcquired),
            // Undone by the server: nothing to give back.
            Err(e @ Error::NotReplicated { .. }) => Err(e),
            Err(e) => {
                if matches!(e, Error::Connection(_)) {
                    self.release_in_background(spec, &token);
                }
                Err(e)
            }
        }
    }

    /// Wait in the server's fair FIFO queue (`… WAIT ms`, or `WAIT 0` for
    /// no limit) on a connection of its own, opened for this call and
    /// closed after it: Redis serves a connection's commands in order, so a
    /// blocked command on the shared connection would hold up every other
    /// guard's extends behind it. Closing the connection is also how a
    /// waiter leaves the queue early: drop this future and the server
    /// forgets the waiter.
    ///
    /// The grant may happen any time between sending and the reply, so the
    /// lease is then extended once on the shared connection: the watchdog's
    /// deadline counts from that extend. Should the grant have expired
    /// already (a reply delayed by more than the ttl), this waits again.
    ///
    /// With a sync, the grant is answered once the replicas hold it, and
    /// the pinning extend carries the sync too (on the wait's connection,
    /// which the lease then keeps for its synced extends): a replica
    /// without it would end the lease earlier than this client counts. If
    /// that extend is not replicated the grant is given back, and the
    /// error is [`Error::NotReplicated`].
    async fn acquire_queued(&self, spec: &Spec, wait: Wait, how: &How<'_>) -> Result<Grant> {
        let opener = self.opener()?;
        let token = new_token();
        let end = match wait {
            Wait::For(wait) => Some(Instant::now() + wait),
            _ => None,
        };
        let synced = how.sync.map_or(Duration::ZERO, |sync| sync.timeout());
        loop {
            let left = end.map(|end| end.saturating_duration_since(Instant::now()));
            // WAIT 0 would mean "no limit" to the server.
            if left.is_some_and(|left| left < Duration::from_millis(1)) {
                return Err(Error::TimedOut);
            }
            let wait = left.map_or(Wait::Forever, Wait::For);
            let cmd = spec.kind.acquire_cmd(
                &spec.key, &spec.set, how.ttl, &token, wait, how.owner, how.sync, None,
            )?;
            let query = async {
                let dedicated = opener.open().await?;
                let reply = dedicated.query::<Option<(Vec<u8>, u64)>>(&cmd).await?;
                Ok::<_, redis::RedisError>((dedicated, reply))
            };
            let waited = match left {
                Some(left) => tokio::time::timeout(left + synced + WAIT_REPLY_SLACK, query).await,
                None => Ok(query.await),
            };
            let (dedicated, fence) = match waited {
                Ok(Ok((dedicated, Some((_, fence))))) => (dedicated, fence),
                Ok(Ok((_, None))) => return Err(Error::TimedOut),
                Ok(Err(e)) => {
                    let e = Error::from(e);
                    if matches!(e, Error::Connection(_)) {
                        self.release_in_background(spec, &token);
                    }
                    // NOSYNC: undone by the server, nothing to give back.
                    return Err(e);
                }
                Err(_) => {
                    self.release_in_background(spec, &token);
                    return Err(timed_out(
                        "no reply to the waiting acquire within its timeout",
                    ));
                }
            };
            // Pin the deadline down: extend now, and count from this send.
            let lane = how
                .sync
                .map(|_| Arc::new(SyncLane::with(opener.clone(), dedicated)));
            let sent = Instant::now();
            let extend = spec
                .kind
                .extend_cmd(&spec.key, &spec.set, &token, how.ttl, how.sync)?;
            let limit = how.ttl - how.margin;
            let reply = match &lane {
                Some(lane) => lane.query::<i64>(&extend, limit).await,
                None => match tokio::time::timeout(limit, self.conn.query::<i64>(&extend)).await {
                    Ok(reply) => reply.map_err(Error::from),
                    Err(_) => Err(timed_out("no reply to the extend after a waited grant")),
                },
            };
            match Extended::of_result(reply) {
                Extended::Yes => {
                    return Ok(self.grant(spec, how, token, fence, sent, lane));
                }
                Extended::NotHeld => continue,
                // Taken away by an operator as soon as granted: nothing
                // to give back.
                Extended::Revoked(reason) => return Err(Error::Lost(LostReason::Revoked(reason))),
                Extended::Limit(e) => {
                    // Granted moments ago: only a lock.max-hold-ms barely
                    // above the ttl refuses this first extend, and without
                    // it the deadline of the grant is unknown. Give it back.
                    self.release_in_background(spec, &token);
                    return Err(Error::Server(e));
                }
                Extended::NotReplicated { acked, wanted } => {
                    // The replicas hold the grant with a deadline this
                    // client cannot know: give it back.
                    self.release_in_background(spec, &token);
                    return Err(Error::NotReplicated {
                        acked,
                        wanted,
                        undone: true,
                    });
                }
                Extended::Failed(e) => {
                    self.release_in_background(spec, &token);
                    return Err(e);
                }
            }
        }
    }

    /// Start the watchdog of a lease just granted. `lane` is the
    /// connection of its own a synced lease's extends go on; a lease
    /// without a sync gets one that opens when a synced request needs it.
    fn grant(
        &self,
        spec: &Spec,
        how: &How<'_>,
        token: String,
        fence: u64,
        sent: Instant,
        lane: Option<Arc<SyncLane>>,
    ) -> Grant {
        let lane = lane.or_else(|| self.opener.clone().map(|o| Arc::new(SyncLane::new(o))));
        let renew = Arc::new(SingleLease {
            conn: self.conn.clone(),
            lane: lane.clone(),
            sync: how.sync,
            kind: spec.kind,
            key: spec.key.clone(),
            set: spec.set.clone(),
            token: token.clone(),
        });
        let term = Term {
            sent,
            valid_until: sent + how.ttl,
            ttl: how.ttl,
            margin: how.margin,
        };
        Grant {
            key: spec.key.clone(),
            set: spec.set.clone(),
            token,
            fence,
            lease: Lease::start(renew, term, &self.options, how.sync),
            lane,
            session: None,
        }
    }

    /// A release whose outcome nobody waits for: after an acquire whose
    /// reply was lost, the grant may have happened.
    fn release_in_background(&self, spec: &Spec, token: &str) {
        let conn = self.conn.clone();
        let cmd = spec.kind.release_cmd(&spec.key, &spec.set, token);
        let timeout = self.options.release_timeout;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, conn.query::<i64>(&cmd)).await;
        });
    }
}

/// What to acquire: every lease on one node is one of these.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) key: Vec<u8>,
    /// Several keys taken in one step (`LOCK.MACQUIRE`, issue 28): the
    /// whole set, of which `key` is the first (it routes the session and
    /// the guarded commands); empty for one key.
    pub(crate) set: Vec<Vec<u8>>,
    pub(crate) kind: Kind,
    pub(crate) ttl: Duration,
    pub(crate) wait: Wait,
    /// The owner label; `None`: the options' label, if any.
    pub(crate) owner: Option<String>,
    /// Answer the grant (and extend the lease) only once that many
    /// replicas hold it.
    pub(crate) sync: Option<ReplicaSync>,
}

/// A [`Spec`]'s arguments, checked.
struct How<'a> {
    ttl: Duration,
    margin: Duration,
    owner: Option<&'a str>,
    /// `None` also for a sync of 0 replicas.
    sync: Option<ReplicaSync>,
}

/// A lease just granted, before it is wrapped in the guard of its kind.
pub(crate) struct Grant {
    pub(crate) key: Vec<u8>,
    /// A multi-key hold's set (empty for one key).
    pub(crate) set: Vec<Vec<u8>>,
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) lease: Lease,
    /// Where its synced requests go (`None`: no way to open a connection
    /// of its own, as from [`Locks::from_connection`]).
    pub(crate) lane: Option<Arc<SyncLane>>,
    /// The session it is attached to (`None`: its own watchdog).
    pub(crate) session: Option<Session>,
}

/// One node's lease, as the watchdog sees it.
struct SingleLease {
    conn: LockConnection,
    /// The connection of its own for synced extends.
    lane: Option<Arc<SyncLane>>,
    /// The sync its extends carry, if any.
    sync: Option<ReplicaSync>,
    kind: Kind,
    key: Vec<u8>,
    /// The whole set of a multi-key hold (`key` is its first); empty for
    /// one key.
    set: Vec<Vec<u8>>,
    token: String,
}

impl SingleLease {
    /// Extend to `ttl`, with `sync` (checked) if any: then on the lane, as
    /// it blocks its connection until the replicas acknowledge.
    async fn extend(&self, ttl: Duration, sync: Option<ReplicaSync>) -> Renewal {
        let cmd = match self
            .kind
            .extend_cmd(&self.key, &self.set, &self.token, ttl, sync)
        {
            Ok(cmd) => cmd,
            Err(e) => return Renewal::Failed(e),
        };
        let sent = Instant::now();
        let reply = match (sync, &self.lane) {
            (None, _) => self.conn.query::<i64>(&cmd).await.map_err(Error::from),
            (Some(sync), Some(lane)) => {
                lane.query::<i64>(&cmd, sync.timeout() + WAIT_REPLY_SLACK)
                    .await
            }
            (Some(_), None) => Err(Error::InvalidArgument(NO_LANE)),
        };
        match Extended::of_result(reply) {
            Extended::Yes => Renewal::Extended {
                sent,
                valid_until: sent + ttl,
            },
            Extended::NotHeld => Renewal::Refused,
            Extended::Limit(_) => Renewal::Limit,
            Extended::Revoked(reason) => Renewal::Revoked(reason),
            Extended::NotReplicated { acked, wanted } => Renewal::NotReplicated { acked, wanted },
            Extended::Failed(e) => Renewal::Failed(e),
        }
    }
}

/// Why a synced request cannot be sent.
pub(crate) const NO_LANE: &str = "a synced request needs a connection of its own: use \
    Locks::connect, Locks::connect_cluster or Locks::wait_client";

impl Renew for SingleLease {
    fn renew(&self, ttl: Duration) -> BoxFuture<'_, Renewal> {
        Box::pin(self.extend(ttl, self.sync))
    }

    fn renew_with_sync(&self, ttl: Duration, sync: Option<ReplicaSync>) -> BoxFuture<'_, Renewal> {
        Box::pin(self.extend(ttl, sync))
    }

    fn release(&self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            match self.conn.query::<i64>(&self.release_cmd()).await {
                // A set is released when every one of its keys was.
                Ok(n) => Ok(n == self.set.len().max(1) as i64),
                // The key holds another type now: the lease is already gone.
                Err(e) if e.code() == Some("WRONGTYPE") => Ok(false),
                Err(e) => Err(e.into()),
            }
        })
    }
}

impl SingleLease {
    fn release_cmd(&self) -> redis::Cmd {
        self.kind.release_cmd(&self.key, &self.set, &self.token)
    }
}

/// A hold attached to a session, as its guard's manual extend and release
/// see it: the session keeps it alive, the hold's own commands release it.
struct SessionHold {
    hold: SingleLease,
    session: Session,
    /// Its extend, which moves nothing for an attached hold and says
    /// whether it still holds (or why not).
    probe: redis::Cmd,
}

impl SessionHold {
    /// Keep the session alive now, then ask the hold: the session's new
    /// term, if the hold is still there.
    async fn renew_now(&self, ttl: Duration) -> Renewal {
        if ttl != self.session.ttl() {
            return Renewal::Failed(Error::InvalidArgument(
                "a hold in a session lives as long as its session's lease: extend it with the \
                 session's ttl (KeepAlive::Watchdog gives each hold a ttl of its own)",
            ));
        }
        let term = match self.session.keepalive_now().await {
            Ok(term) => term,
            // Lost with the session, for the reason its cell now has.
            Err(Error::Lost(_)) => return Renewal::Refused,
            Err(e) => return Renewal::Failed(e),
        };
        match self.session.probe(&self.probe).await {
            Extended::Yes => Renewal::Extended {
                sent: term.sent,
                valid_until: term.valid_until,
            },
            Extended::NotHeld => Renewal::Refused,
            Extended::Limit(_) => Renewal::Limit,
            Extended::Revoked(reason) => Renewal::Revoked(reason),
            Extended::NotReplicated { acked, wanted } => Renewal::NotReplicated { acked, wanted },
            Extended::Failed(e) => Renewal::Failed(e),
        }
    }
}

impl Renew for SessionHold {
    fn renew(&self, ttl: Duration) -> BoxFuture<'_, Renewal> {
        Box::pin(self.renew_now(ttl))
    }

    fn renew_with_sync(
        &self,
        _ttl: Duration,
        _sync: Option<ReplicaSync>,
    ) -> BoxFuture<'_, Renewal> {
        Box::pin(async {
            Renewal::Failed(Error::InvalidArgument(
                "a hold in a session is kept alive by its session's keepalives, which carry no \
                 sync: acquire it with a sync (it then keeps its own watchdog)",
            ))
        })
    }

    fn release(&self) -> BoxFuture<'_, Result<bool>> {
        self.hold.release()
    }

    fn orphaned(&self) {
        self.session
            .orphan(self.hold.release_cmd(), self.hold.set.len().max(1));
    }
}
