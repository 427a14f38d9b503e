//! A held lock ([`Guard`]) and what the work of
//! [`LockRequest::run`](crate::LockRequest::run) gets ([`Held`]).

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue};

use super::{Grant, NO_LANE};
use crate::commands::{guard_cmd, revoked_reason, REVOKED};
use crate::conn::{LockConnection, SyncLane, WAIT_REPLY_SLACK};
use crate::error::{Error, LostReason, Result};
use crate::lease::{Lease, LostSignal};
use crate::options::ReplicaSync;
use crate::session::Session;

/// What the work inside [`LockRequest::run`](crate::LockRequest::run) gets.
#[derive(Clone, Debug)]
pub struct Held {
    /// The fence of this lease: pass it to the storage with every write, and
    /// have the storage refuse a fence lower than one it has seen.
    pub fence: u64,
    /// Resolves if the lease is lost (the work is also stopped then); its
    /// [`held`](LostSignal::held) and [`remaining`](LostSignal::remaining)
    /// read the clock.
    pub lost: LostSignal,
}

/// A held lock, kept alive while the guard lives: by its
/// [`Session`] (one keepalive every ttl/3 for all of the session's holds:
/// [`Guard::session`]), or by a watchdog of its own (an extend every
/// ttl/3: [`KeepAlive::Watchdog`](crate::KeepAlive::Watchdog), a sync, a
/// server without `LOCK.LEASE`).
///
/// - [`Guard::lost`] resolves when the lease is lost; the watchdog then
///   stops, and so must the work. [`Guard::held`] and
///   [`Guard::remaining`] read the clock, so they are right even before
///   the watchdog has run (after a pause of the process).
/// - [`Guard::release`] gives it back: `Ok(true)` released, `Ok(false)` the
///   server no longer had this lease.
/// - [`Guard::guarded`] runs a command only while the lease is live, in the
///   same atomic step as the server's check.
/// - [`Guard::extend`] extends it now, with a new ttl that the watchdog
///   keeps from then on.
/// - Dropping the guard stops the watchdog and releases in the background
///   (when a tokio runtime is there to run it); the lease expires anyway.
///   So keep it bound for as long as the work runs: `let _ = …` or an
///   unbound `….acquire().await?;` releases at once.
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), redis_lock_client::Error> {
/// locks.lock("billing").acquire().await?; // the guard is dropped, the lock released
/// # Ok(()) }
/// ```
#[must_use = "dropping a guard releases the lock: bind it (`let guard = …`) for as long as the work runs"]
pub struct Guard {
    conn: LockConnection,
    key: Vec<u8>,
    /// A multi-key guard's keys (`key` is the first); empty for one key.
    set: Vec<Vec<u8>>,
    token: String,
    fence: u64,
    shared: bool,
    lease: Lease,
    /// The sync of the acquire, which its extends carry.
    sync: Option<ReplicaSync>,
    /// The connection of its own for synced requests.
    lane: Option<Arc<SyncLane>>,
    /// The session that keeps it alive (`None`: its own watchdog).
    session: Option<Session>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("keys", &self.set.len().max(1))
            .field("fence", &self.fence)
            .field("shared", &self.shared)
            .field("lost", &self.lease.lost_signal().reason())
            .finish()
    }
}

impl Guard {
    pub(crate) fn of(
        conn: LockConnection,
        grant: Grant,
        shared: bool,
        sync: Option<ReplicaSync>,
    ) -> Guard {
        Guard {
            conn,
            key: grant.key,
            set: grant.set,
            token: grant.token,
            fence: grant.fence,
            shared,
            lease: grant.lease,
            sync: sync.filter(|sync| sync.replicas() > 0),
            lane: grant.lane,
            session: grant.session,
        }
    }

    /// The session this hold is attached to, which keeps it alive with one
    /// keepalive for all of its holds ([`KeepAlive`](crate::KeepAlive));
    /// `None` when the hold has its own watchdog (watchdog mode, a server
    /// without `LOCK.LEASE`, a sync).
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// The locked key, as given; for a guard of several keys
    /// ([`Locks::lock_many`](crate::Locks::lock_many)), the first of them.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Every key this guard holds, in the order given: one for a lock,
    /// the whole set for [`Locks::lock_many`](crate::Locks::lock_many)
    /// (one token, one fence, one deadline for all of them).
    pub fn keys(&self) -> Vec<&[u8]> {
        if self.set.is_empty() {
            vec![&self.key]
        } else {
            self.set.iter().map(Vec::as_slice).collect()
        }
    }

    /// The token that holds the lock (random, chosen by this client). It is
    /// the secret that extends, releases and guards: keep it out of logs.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fence: larger than every fence the server issued before for any
    /// key. Give it to the storage, which refuses writes with a fence below
    /// the highest it has seen for the resource.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Whether this is a shared (read) lease
    /// ([`LockRequest::shared`](crate::LockRequest::shared)).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The sync its grant was answered with and its extends carry
    /// ([`LockRequest::sync`](crate::LockRequest::sync)), if any.
    pub fn sync(&self) -> Option<ReplicaSync> {
        self.sync
    }

    /// Resolves when the lease is lost: an extend was refused (the key was
    /// deleted, expired, overwritten or taken over:
    /// [`LostReason::Refused`]), the hold policy refused an extend
    /// ([`LostReason::Limit`]), a guarded command was answered `LOST`
    /// ([`LostReason::NotHeld`]), an operator took it back
    /// ([`LostReason::Revoked`] with the reason), or no extend (no keepalive
    /// of its session) succeeded before the deadline minus the safety
    /// margin ([`LostReason::Expired`]: server down, network stalled). It
    /// fires before the deadline passes on this client's monotonic clock.
    /// Never resolves once the guard is released.
    ///
    /// A hold in a session is lost with its session (every hold of it at
    /// once: a keepalive answered `0`, an acquire `NOLEASE`, or no
    /// keepalive in time), or alone, found by the session's check at its
    /// next keepalive (the server counts fewer holds than the client:
    /// a `DEL`, an overwrite, a `LOCK.REVOKE`, …), or by its own guarded
    /// command or extend.
    pub async fn lost(&self) -> LostReason {
        self.lease.lost_signal().wait().await
    }

    /// A cloneable loss signal for other tasks.
    pub fn lost_signal(&self) -> LostSignal {
        self.lease.lost_signal()
    }

    /// Whether the loss has been signalled by now. [`Guard::held`] also
    /// reads the clock.
    pub fn is_lost(&self) -> bool {
        self.lease.lost_signal().is_lost()
    }

    /// Whether the lease may be counted on right now: not lost, and its
    /// deadline less the safety margin not reached on the monotonic clock.
    /// False at once after a pause of the process that outlasted the
    /// lease, before the watchdog has noticed.
    pub fn held(&self) -> bool {
        self.lease.lost_signal().held()
    }

    /// How long the lease may still be counted on (until its deadline less
    /// the safety margin, on the monotonic clock); zero once the server
    /// said it is gone. After [`LostReason::Limit`] it keeps counting
    /// down to the end the server still grants.
    pub fn remaining(&self) -> Duration {
        self.lease.lost_signal().remaining()
    }

    /// The lease's deadline as this client counts it (the send of the last
    /// successful acquire or extend, plus its ttl): never later than the
    /// server's.
    pub fn deadline(&self) -> std::time::Instant {
        self.lease.lost_signal().deadline()
    }

    /// Extend the lease now to `ttl` from this send (`LOCK.EXTEND`), and
    /// make `ttl` the one the watchdog extends with from then on (longer or
    /// shorter than before; the safety margin follows the options' rule).
    ///
    /// A hold in a session lives as long as its session's lease: this keeps
    /// the session alive now (`LOCK.LEASE KEEPALIVE`, for all its holds)
    /// and asks the server whether this hold still holds (its
    /// `LOCK.EXTEND`, which moves nothing). `ttl` must then be the
    /// session's ([`Error::InvalidArgument`] otherwise: a hold that needs a
    /// ttl of its own takes [`KeepAlive::Watchdog`](crate::KeepAlive::Watchdog)).
    ///
    /// - `Ok(())`: extended.
    /// - [`Error::Lost`]`(`[`LostReason::Refused`]`)`: the token no longer
    ///   holds the lock; the loss is signalled.
    /// - [`Error::Lost`]`(`[`LostReason::Limit`]`)`: the hold policy
    ///   refuses; the lease ends at its current deadline
    ///   ([`Guard::remaining`]), the loss is signalled and the watchdog
    ///   stops.
    /// - [`Error::Lost`]`(`[`LostReason::Revoked`]`)`: an operator took it
    ///   back (`LOCK.REVOKE`, or its session's lease revoked); the loss is
    ///   signalled.
    /// - [`Error::NotReplicated`]: a guard acquired with a
    ///   [`sync`](crate::LockRequest::sync), whose extend (which carries the
    ///   same sync) fewer replicas acknowledged in time: the extension
    ///   stands on the master, but the deadline this client counts stays
    ///   where the last replicated extend put it. Not a loss.
    /// - [`Error::Lost`] with the earlier reason if the loss was signalled
    ///   before; [`Error::Connection`] if no reply came (before the current
    ///   deadline less the margin); [`Error::InvalidArgument`] for a ttl out
    ///   of range.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        self.lease.extend(ttl, None).await
    }

    /// [`Guard::extend`] with `sync` instead of the guard's own sync for
    /// this extend (a sync of 0 replicas: none), on the guard's connection
    /// of its own for synced requests. [`Error::NotReplicated`] as for
    /// `extend`; `sync`'s timeout must be shorter than `ttl` less the
    /// safety margin.
    pub async fn extend_synced(&self, ttl: Duration, sync: ReplicaSync) -> Result<()> {
        self.lease.extend(ttl, Some(sync)).await
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
    /// - [`Error::Lost`]`(`[`LostReason::Revoked`]`)` when the server
    ///   answered `REVOKED <reason>`: an operator took the lock back
    ///   (`LOCK.REVOKE`, or the session's lease revoked); `cmd` did not
    ///   run, and the lease is marked lost with the reason.
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
    /// use redis_lock_client::{redis, Error, LostReason};
    ///
    /// # async fn demo(locks: redis_lock_client::Locks) -> Result<(), Error> {
    /// let guard = locks.lock("{billing}:nightly").acquire().await?;
    /// // Written only while this guard holds the lock.
    /// let total: i64 = guard
    ///     .guarded(redis::cmd("INCRBY").arg("{billing}:total").arg(1200))
    ///     .await?;
    /// match guard
    ///     .guarded::<()>(redis::cmd("SET").arg("{billing}:last-customer").arg("acme"))
    ///     .await
    /// {
    ///     Ok(()) => println!("total {total}"),
    ///     // Nothing was written, and guard.lost() has fired.
    ///     Err(Error::Lost(LostReason::NotHeld)) => return Ok(()),
    ///     Err(e) => return Err(e),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn guarded<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let guarded = guard_cmd(&self.key, &self.token, cmd, None)?;
        match self.conn.query(&guarded).await {
            Ok(reply) => Ok(reply),
            Err(e) => Err(self.refused(e.into())),
        }
    }

    /// [`Guard::guarded`], answered only once `sync`'s replicas hold the
    /// command's effect (`LOCK.GUARD key token SYNC n ms cmd…`). A guarded
    /// write is your data, not the lease: the guard's own sync does not
    /// apply here, only this one.
    ///
    /// - [`Error::NotReplicated`]: the command ran on the master (its reply
    ///   is lost), but fewer replicas than asked acknowledged it in time.
    ///   The lease is kept.
    /// - [`Error::Lost`], [`Error::Server`]: as for `guarded`.
    /// - [`Error::Connection`]: no reply within the sync's timeout plus 2 s
    ///   (the command may or may not have run).
    ///
    /// It runs on the guard's connection of its own for synced requests
    /// (it blocks its connection until the replicas acknowledge).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{redis, Error, ReplicaSync};
    ///
    /// # async fn demo(guard: redis_lock_client::Guard) -> Result<(), Error> {
    /// let one_replica = ReplicaSync::new(1, Duration::from_secs(1));
    /// match guard
    ///     .guarded_synced::<i64>(redis::cmd("INCRBY").arg("{billing}:total").arg(1200), one_replica)
    ///     .await
    /// {
    ///     Ok(total) => println!("total {total}, on a replica too"),
    ///     Err(Error::NotReplicated { .. }) => println!("written on the master only"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn guarded_synced<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        sync: ReplicaSync,
    ) -> Result<T> {
        let guarded = guard_cmd(&self.key, &self.token, cmd, Some(sync))?;
        let Some(sync) = ReplicaSync::checked(Some(sync))? else {
            return self.guarded(cmd).await;
        };
        let lane = self.lane.as_ref().ok_or(Error::InvalidArgument(NO_LANE))?;
        let reply = lane
            .query::<T>(&guarded, sync.timeout() + WAIT_REPLY_SLACK)
            .await;
        reply.map_err(|e| self.refused(e))
    }

    /// A guarded command's error: `LOST` (the token no longer holds the
    /// lock) and `REVOKED <reason>` (it was taken away) are a loss, marked
    /// on the lease; anything else is the command's own.
    fn refused(&self, e: Error) -> Error {
        let reason = match &e {
            Error::Server(e) if e.code() == Some("LOST") => LostReason::NotHeld,
            Error::Server(e) if e.code() == Some(REVOKED) => LostReason::Revoked(revoked_reason(e)),
            _ => return e,
        };
        // The loss signal keeps its first reason (the keeper may have
        // declared one already); the error is this reply's.
        self.lease.mark_lost(reason.clone());
        Error::Lost(reason)
    }

    /// Stop the watchdog and release: `Ok(true)` released, `Ok(false)` the
    /// server no longer had this lease (it expired, was deleted, or went to
    /// someone else), an error if the server could not be asked.
    pub async fn release(mut self) -> Result<bool> {
        self.lease.release().await
    }

    /// What the work of `run` gets, and the lease to release after it.
    pub(crate) fn into_parts(self) -> (Held, Lease) {
        let held = Held {
            fence: self.fence,
            lost: self.lease.lost_signal(),
        };
        (held, self.lease)
    }
}
