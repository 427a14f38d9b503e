//! Typed errors: every way a lock call can end is its own variant, so a
//! caller never has to guess what a `false` or a `None` meant.

use std::fmt;

/// Why a held lease was lost. [`Guard::lost`](crate::Guard::lost) resolves
/// with one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// The server answered `LOCK.EXTEND` with `0`: the key expired, was
    /// deleted, or is held by another token. For Redlock: so many nodes
    /// refused that no majority can hold the lease.
    Refused,
    /// No extend succeeded before the lease's deadline minus the safety
    /// margin, on this client's monotonic clock: the network stalled, the
    /// server is down, or the connection is gone and did not come back in
    /// time.
    Expired,
    /// The server answered a guarded command
    /// ([`Guard::guarded`](crate::Guard::guarded), `LOCK.GUARD`) with
    /// `LOST`: the token no longer holds the lock (it expired, was released
    /// or deleted, or another token holds it), and the command did not run.
    NotHeld,
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
        }
    }
}

/// Everything a lock call can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held by someone else (or others wait for it), from a
    /// call that does not wait, such as [`Locks::with_lock`](crate::Locks::with_lock).
    NotAcquired,
    /// A waiting acquire's timeout passed before the lock was granted.
    TimedOut,
    /// The lease was lost: while the work of
    /// [`Locks::with_lock`](crate::Locks::with_lock) ran (the work was
    /// stopped), or before a guarded command
    /// ([`Guard::guarded`](crate::Guard::guarded), reason
    /// [`LostReason::NotHeld`]), which then did not run.
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
    /// `OOM`, or an unknown command if the module is not loaded).
    Server(redis::RedisError),
    /// An argument this client refuses before sending anything (a ttl out of
    /// range, a safety margin too large for the ttl, `acquire_wait` without
    /// a way to open a dedicated connection).
    InvalidArgument(&'static str),
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
            Error::Connection(e) => write!(f, "connection error: {e}"),
            Error::Server(e) => write!(f, "server error: {e}"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
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
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_cluster_error()
        {
            Error::Connection(e)
        } else {
            Error::Server(e)
        }
    }
}

/// The error of a reply that did not come in time.
pub(crate) fn timed_out(what: &'static str) -> Error {
    Error::Connection(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        what,
    )))
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
