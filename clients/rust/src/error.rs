//! Typed errors: every way a lock call can end is its own variant, so a
//! caller never has to guess what a `false` or a `None` meant.

use std::fmt;

/// Why a held lease was lost. [`Guard::lost`](crate::Guard::lost) resolves
/// with one of these.
///
/// Not `Copy`: [`LostReason::Revoked`] carries the reason an operator
/// gave. Clone it where a copy is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The server answered an extend with `0`, or `WRONGTYPE`: the key
    /// expired, was deleted, is held by another token, or was overwritten
    /// with another type. For Redlock: so many nodes refused that no
    /// majority can hold the lease.
    Refused,
    /// No extend succeeded before the lease's deadline minus the safety
    /// margin, on this client's monotonic clock: the network stalled, the
    /// server is down, the process was paused, or the connection is gone
    /// and did not come back in time.
    Expired,
    /// The server answered a guarded command
    /// ([`Guard::guarded`](crate::Guard::guarded), `LOCK.GUARD`) with
    /// `LOST`: the token no longer holds the lock (it expired, was released
    /// or deleted, or another token holds it), and the command did not run.
    NotHeld,
    /// The server's hold policy (`lock.max-hold-ms`, `lock.max-extends`)
    /// answered an extend with `LIMIT`: the lease will not be extended
    /// again. It still holds on the server until its current deadline
    /// ([`Guard::remaining`](crate::Guard::remaining) says how long, less
    /// the safety margin), so the work can wind down within it; the
    /// watchdog stops at once and the loss is signalled at once, so that
    /// nobody works on past the deadline believing the watchdog keeps it.
    Limit,
    /// A lease acquired with a [`ReplicaSync`](crate::ReplicaSync): its
    /// extends went on being answered `NOSYNC` (fewer replicas than asked
    /// acknowledged them) until the deadline that the last replicated
    /// extend set, minus the safety margin. The master may still hold it;
    /// a failover to a replica would not.
    NotReplicated,
    /// The hold was taken away on the server: an operator's `LOCK.REVOKE
    /// key [REASON text]` ([`Locks::revoke`](crate::Locks::revoke)), or
    /// the revocation of the session lease it was attached to
    /// (`LOCK.LEASE REVOKE`, the reason `lease revoked`). The server said
    /// so: an extend, a guarded command or the session's check was
    /// answered `REVOKED <reason>`. The string is the reason as the server
    /// sent it (bytes outside printable ASCII as `\xNN`); the lock may
    /// already be someone else's.
    Revoked(String),
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Refused => f.write_str("the server refused to extend the lease"),
            LostReason::Expired => f.write_str(
                "no extend succeeded before the lease's deadline (minus the safety margin)",
            ),
            LostReason::NotHeld => f.write_str(
                "the server refused a guarded command: the token no longer holds the lock",
            ),
            LostReason::Limit => f.write_str(
                "the server's hold limit refused to extend the lease: it ends at its current deadline",
            ),
            LostReason::NotReplicated => f.write_str(
                "the lease's extends were not acknowledged by enough replicas before its deadline",
            ),
            LostReason::Revoked(reason) => write!(f, "the hold was revoked: {reason}"),
        }
    }
}

/// Everything a lock call can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held by someone else (or others wait for it), and the
    /// request did not wait ([`LockRequest::wait`](crate::LockRequest::wait)
    /// not given, or zero). For Redlock: refusals alone kept a majority out
    /// of reach.
    NotAcquired,
    /// A waiting acquire's timeout passed before the lock was granted.
    TimedOut,
    /// The lease was lost: while the work of
    /// [`LockRequest::run`](crate::LockRequest::run) ran (the work was
    /// stopped), before a guarded command
    /// ([`Guard::guarded`](crate::Guard::guarded), reason
    /// [`LostReason::NotHeld`], or [`LostReason::Revoked`] when it was
    /// taken away), which then did not run, or when an explicit
    /// [`Guard::extend`](crate::Guard::extend) was refused
    /// ([`LostReason::Refused`], [`LostReason::Limit`],
    /// [`LostReason::Revoked`]).
    Lost(LostReason),
    /// Redlock: connection errors or timeouts on some nodes kept a majority
    /// out of reach (had those nodes answered, the lock might have been
    /// granted). The counts are those of the last attempt.
    NoQuorum {
        /// Nodes that granted (or extended, or released).
        granted: usize,
        /// Nodes that answered no.
        refused: usize,
        /// Nodes that failed or did not answer in time.
        failed: usize,
    },
    /// The connection failed, was refused, or a reply did not come in time.
    /// The command may or may not have been applied.
    Connection(redis::RedisError),
    /// The server answered with an error (`WRONGTYPE`, `ERR …`, `READONLY`,
    /// `OOM`, `LIMIT lock.max-waiters …`, or an unknown command if the
    /// module is not loaded), or a reply this client cannot read.
    Server(redis::RedisError),
    /// A request made with a [`ReplicaSync`](crate::ReplicaSync) was
    /// answered `NOSYNC`: fewer than `wanted` replicas acknowledged it
    /// within the sync's timeout (`acked` did).
    ///
    /// - From an acquire: not acquired, and nothing is held (`undone`): the
    ///   server undid the grant as a release would (after a wait, the
    ///   client gave the grant back when its pinning extend was not
    ///   replicated). Nothing to release.
    /// - From an extend: the extension stands on the master but not on
    ///   enough replicas, so the lease's deadline is not moved (it stays
    ///   where the last replicated extend put it); the lease is not lost.
    /// - From a guarded command: it ran on the master (its reply is lost),
    ///   and may not be on enough replicas.
    NotReplicated {
        /// Replicas that acknowledged in time.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
        /// Whether nothing is held because of it (an acquire).
        undone: bool,
    },
    /// An argument this client refuses before sending anything (a ttl out of
    /// range, a safety margin too large for the ttl, a wait without a way
    /// to open a dedicated connection).
    InvalidArgument(&'static str),
    /// The server's `lock` module is older than this client needs, or not
    /// loaded (`MODULE LIST`, checked once per [`Locks`](crate::Locks): at
    /// connect, or at the first command of one made from a connection). A
    /// client x.y.* needs the module x.y.0 or newer: upgrade the module
    /// (or load it), or use a client as old as the module.
    ModuleVersion {
        /// The module's `ver` (major·10000 + minor·100 + patch; builds
        /// before 0.4.0 report 1), `None` when no `lock` module is loaded.
        found: Option<u32>,
        /// The oldest `ver` this client works with
        /// ([`REQUIRED_MODULE_VERSION`](crate::REQUIRED_MODULE_VERSION)).
        required: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotAcquired => f.write_str("the lock is held by someone else"),
            Error::TimedOut => f.write_str("timed out waiting for the lock"),
            Error::Lost(reason) => write!(f, "the lease was lost: {reason}"),
            Error::NoQuorum {
                granted,
                refused,
                failed,
            } => write!(
                f,
                "no majority: {granted} granted, {refused} refused, {failed} failed or timed out"
            ),
            Error::NotReplicated {
                acked,
                wanted,
                undone,
            } => write!(
                f,
                "not replicated: {acked} of {wanted} replicas acknowledged in time; {}",
                if *undone {
                    "not acquired (the grant was undone)"
                } else {
                    "it stands on the master only"
                }
            ),
            Error::Connection(e) => write!(f, "connection error: {e}"),
            Error::Server(e) => write!(f, "server error: {e}"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::ModuleVersion { found, required } => {
                let needed = dotted(*required);
                let client = env!("CARGO_PKG_VERSION");
                match found {
                    Some(ver) => write!(
                        f,
                        "the server's lock module is {} but redis-lock-client {client} needs \
                         the module {needed} or newer: upgrade the module on the server, or use \
                         a client as old as the module",
                        shown(*ver)
                    ),
                    None => write!(
                        f,
                        "the server has no lock module loaded (not in MODULE LIST), and \
                         redis-lock-client {client} needs the module {needed} or newer: load it \
                         (redis-server --loadmodule /path/to/libredis_lock.so)"
                    ),
                }
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connection(e) | Error::Server(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        if e.code() == Some("NOSYNC") {
            return not_replicated(&e);
        }
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_cluster_error()
            || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        {
            Error::Connection(e)
        } else {
            Error::Server(e)
        }
    }
}

/// A `NOSYNC <acked> of <wanted> replicas acknowledged; <what stands>`
/// error reply, read.
fn not_replicated(e: &redis::RedisError) -> Error {
    let detail = e.detail().unwrap_or("");
    let words: Vec<&str> = detail.split(' ').collect();
    let number = |at: usize| words.get(at).and_then(|w| w.parse().ok()).unwrap_or(0);
    Error::NotReplicated {
        acked: number(0),
        wanted: number(2),
        undone: detail.ends_with("the grant was undone"),
    }
}

/// The error of a reply that did not come in time.
pub(crate) fn timed_out(what: &'static str) -> Error {
    Error::Connection(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        what,
    )))
}

/// The error of a reply this client cannot read: a field missing or of
/// the wrong type.
pub(crate) fn unexpected_reply(what: &'static str, field: &str) -> Error {
    Error::Server(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        what,
        field.to_string(),
    )))
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `ver` as the module numbers it, written as a version: 400 is `0.4.0`,
/// and anything below 400 (builds before 0.4.0 all said 1) is older than
/// `0.4.0`, whatever it was.
pub(crate) fn shown(ver: u32) -> String {
    if ver < 400 {
        return format!("older than 0.4.0 (ver {ver})");
    }
    format!("{} (ver {ver})", dotted(ver))
}

/// `ver` as major.minor.patch.
fn dotted(ver: u32) -> String {
    format!("{}.{}.{}", ver / 10000, ver / 100 % 100, ver % 100)
}
