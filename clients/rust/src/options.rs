//! Tuning knobs shared by [`Locks`](crate::Locks) and
//! [`Redlock`](crate::Redlock): how holds are kept alive (a session or a
//! watchdog), the safety margin, and the owner label.

use std::time::Duration;

use crate::error::{Error, Result};

/// The largest ttl the module accepts: 24 hours (its default
/// `lock.max-ttl-ms`).
pub const MAX_TTL: Duration = Duration::from_millis(86_400_000);

/// The ttl of a [`LockRequest`](crate::LockRequest) (and of a
/// [`PermitRequest`](crate::PermitRequest)) that does not set one: 30 s.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The longest wait the module accepts: 365 days.
pub const MAX_WAIT: Duration = Duration::from_millis(31_536_000_000);

/// The longest owner label the module accepts, in bytes.
pub const MAX_OWNER_LEN: usize = 128;

/// The most replicas a [`ReplicaSync`] may wait for (the module's bound).
pub const MAX_SYNC_REPLICAS: u32 = 1000;

/// `SYNC numreplicas timeout-ms`: a request answered only once `replicas`
/// replicas have acknowledged what it did (a grant, an extension, a guarded
/// command), and [`Error::NotReplicated`] when fewer did within `timeout`
/// (a grant is then undone by the server).
///
/// `replicas` is 0 to [`MAX_SYNC_REPLICAS`] (0: no `SYNC`, as the server
/// takes it); `timeout` is sent in whole milliseconds, 1 ms to 365 days.
/// Checked when a request is made ([`Error::InvalidArgument`]).
///
/// ```
/// use std::time::Duration;
/// use redis_lock_client::ReplicaSync;
///
/// let one_replica = ReplicaSync::new(1, Duration::from_secs(2));
/// assert_eq!(one_replica.replicas(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaSync {
    replicas: u32,
    timeout: Duration,
}

impl ReplicaSync {
    /// Wait for `replicas` replicas, at most `timeout`.
    pub fn new(replicas: u32, timeout: Duration) -> ReplicaSync {
        ReplicaSync { replicas, timeout }
    }

    /// How many replicas must acknowledge.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long the server waits for them.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The sync to send, checked: `None` for 0 replicas (no `SYNC`).
    pub(crate) fn checked(sync: Option<ReplicaSync>) -> Result<Option<ReplicaSync>> {
        let Some(sync) = sync else {
            return Ok(None);
        };
        if sync.replicas > MAX_SYNC_REPLICAS {
            return Err(Error::InvalidArgument(
                "a sync's replicas must be 0 to 1000",
            ));
        }
        if sync.timeout < Duration::from_millis(1) || sync.timeout > MAX_WAIT {
            return Err(Error::InvalidArgument(
                "a sync's timeout must be 1 ms to 365 days",
            ));
        }
        Ok((sync.replicas > 0).then_some(sync))
    }

    /// The timeout as the whole milliseconds sent.
    pub(crate) fn timeout_ms(&self) -> u64 {
        self.timeout.as_millis() as u64
    }

    /// A sync must be answered before the lease it is about would be taken
    /// as lost (`ttl` less `margin`): an answer that came later would be of
    /// a lease already given up.
    pub(crate) fn check_fits(
        sync: Option<ReplicaSync>,
        ttl: Duration,
        margin: Duration,
    ) -> Result<()> {
        match sync {
            Some(sync) if sync.timeout >= ttl.saturating_sub(margin) => {
                Err(Error::InvalidArgument(
                    "a sync's timeout must be shorter than the ttl less the safety margin",
                ))
            }
            _ => Ok(()),
        }
    }
}

/// How the holds taken through a [`Locks`](crate::Locks) are kept alive:
/// [`LockOptions::keepalive`].
///
/// - [`KeepAlive::Session`]: every hold is attached to the client's
///   session, one server lease (`LOCK.LEASE GRANT`) per connection (per
///   node in a cluster) and per ttl, kept alive by one task with one
///   `LOCK.LEASE KEEPALIVE` every ttl/3, whatever the number of holds.
/// - [`KeepAlive::Watchdog`]: each hold has its own watchdog, a
///   `LOCK.EXTEND` (or `SEM.EXTEND`) every ttl/3: what this client did
///   before sessions, and what a server without `LOCK.LEASE` needs.
/// - [`KeepAlive::Auto`] (the default): a session where the server has
///   `LOCK.LEASE`, else the watchdog. The first hold asks for the session's
///   lease; an unknown command (a module without lease groups) or `NOPERM`
///   (an ACL user without `LOCK.LEASE`, or in a cluster without `CLUSTER
///   SLOTS`) makes this `Locks` (and its clones) use the watchdog from then
///   on, without asking again.
///
/// Whatever the mode, a hold taken with a sync
/// ([`LockRequest::sync`](crate::LockRequest::sync)) keeps its own
/// watchdog (its extends carry the sync; a keepalive cannot), and so does a
/// [`Redlock`](crate::Redlock) guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeepAlive {
    /// A session where the server supports it, else the watchdog.
    #[default]
    Auto,
    /// Always a session: an acquire fails ([`Error::Server`]) where the
    /// server has no `LOCK.LEASE`.
    Session,
    /// One watchdog per hold.
    Watchdog,
}

/// How a guard is kept alive (a session or its watchdog), its safety
/// margin, and the owner label the acquires carry.
///
/// ```
/// use std::time::Duration;
/// use redis_lock_client::{KeepAlive, LockOptions};
///
/// let options = LockOptions::default()
///     .safety_margin(Duration::from_millis(200))
///     .release_timeout(Duration::from_secs(1))
///     .owner("billing-worker-3")
///     .keepalive(KeepAlive::Auto);
/// ```
#[derive(Debug, Clone)]
pub struct LockOptions {
    pub(crate) safety_margin: Option<Duration>,
    pub(crate) release_timeout: Duration,
    pub(crate) owner: Option<String>,
    pub(crate) keepalive: KeepAlive,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            safety_margin: None,
            release_timeout: Duration::from_secs(2),
            owner: None,
            keepalive: KeepAlive::Auto,
        }
    }
}

impl LockOptions {
    /// How long before the lease's deadline [`Guard::lost`](crate::Guard::lost)
    /// fires when no extend has succeeded. The deadline is counted on this
    /// client's monotonic clock from the moment the acquire or the last
    /// successful extend was *sent*, so it is never later than the server's.
    /// The margin covers the time your code needs to notice the loss and stop
    /// touching the resource, and a server clock that runs faster than this
    /// client's (Redis expires keys by its own clock). Default: a tenth of the ttl. It must be less
    /// than half of the ttl, so that the extends (every ttl/3) have room.
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// Bound on a release (explicit, or the best-effort one on drop).
    /// Default: 2 s.
    pub fn release_timeout(mut self, timeout: Duration) -> Self {
        self.release_timeout = timeout;
        self
    }

    /// A public label sent with every acquire (`OWNER label`): a host name,
    /// a pod, a job id. `LOCK.INFO`, `LOCK.QUEUE` and `LOCK.OBSERVE` show it
    /// (the token stays secret); a waiter's label becomes the holder's at
    /// the hand-off. 1 to 128 bytes, checked when an acquire is made
    /// ([`Error::InvalidArgument`]). Default: none.
    pub fn owner(mut self, label: impl Into<String>) -> Self {
        self.owner = Some(label.into());
        self
    }

    /// How holds are kept alive: a session (one server lease and one
    /// keepalive for all of them), a watchdog each, or a session where the
    /// server supports it ([`KeepAlive`]). Default: [`KeepAlive::Auto`].
    pub fn keepalive(mut self, mode: KeepAlive) -> Self {
        self.keepalive = mode;
        self
    }

    /// The keepalive mode in force.
    pub fn keepalive_mode(&self) -> KeepAlive {
        self.keepalive
    }

    /// The owner label, checked.
    pub(crate) fn owner_label(&self) -> Result<Option<&str>> {
        self.owner.as_deref().map(check_owner).transpose()
    }

    /// The margin for this ttl, checked.
    pub(crate) fn margin_for(&self, ttl: Duration) -> Result<Duration> {
        let margin = self.safety_margin.unwrap_or(ttl / 10);
        if margin >= ttl / 2 {
            return Err(Error::InvalidArgument(
                "the safety margin must be less than half of the ttl",
            ));
        }
        Ok(margin)
    }
}

/// An owner label within the module's range (1 to 128 bytes).
pub(crate) fn check_owner(label: &str) -> Result<&str> {
    if label.is_empty() || label.len() > MAX_OWNER_LEN {
        return Err(Error::InvalidArgument(
            "the owner label must be 1 to 128 bytes",
        ));
    }
    Ok(label)
}

/// The ttl as the whole milliseconds the module takes, checked against its
/// range (1 ms to 24 h).
pub(crate) fn ttl_ms(ttl: Duration) -> Result<u64> {
    if ttl < Duration::from_millis(1) || ttl > MAX_TTL {
        return Err(Error::InvalidArgument("the ttl must be 1 ms to 24 hours"));
    }
    Ok(ttl.as_millis() as u64)
}

/// A wait within the module's range (up to 365 days), as whole
/// milliseconds; at least 1 (the server's `WAIT 0` means "no limit").
pub(crate) fn wait_ms(wait: Duration) -> Result<u64> {
    if wait > MAX_WAIT {
        return Err(Error::InvalidArgument("a wait must be at most 365 days"));
    }
    Ok((wait.as_millis() as u64).max(1))
}

/// The ttl as sent: whole milliseconds, so the client's deadline never runs
/// past the server's because of a fraction the server did not see.
pub(crate) fn sent_ttl(ttl: Duration) -> Result<Duration> {
    Ok(Duration::from_millis(ttl_ms(ttl)?))
}
