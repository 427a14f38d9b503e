//! An async Rust client (tokio) for the redis-lock module's `LOCK.*` and
//! `SEM.*` commands: locks that are fenced, kept alive and watched.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{redis, Error, Locks};
//!
//! # async fn demo() -> Result<(), Error> {
//! let locks = Locks::connect(redis::Client::open("redis://127.0.0.1:6379/")?).await?;
//! match locks.lock("billing").ttl(Duration::from_secs(10)).acquire().await {
//!     Ok(guard) => {
//!         tokio::select! {
//!             reason = guard.lost() => eprintln!("lost the lock ({reason}): stopping"),
//!             _ = run_billing(guard.fence()) => {}
//!         }
//!         guard.release().await?;
//!     }
//!     Err(Error::NotAcquired) => println!("another worker runs it"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! # async fn run_billing(_fence: u64) {}
//! ```
//!
//! - [`Locks`]: locks on one server or one Redis Cluster. [`Locks::lock`]
//!   starts a [`LockRequest`]: [`ttl`](LockRequest::ttl),
//!   [`wait`](LockRequest::wait) in the server's fair queue,
//!   [`shared`](LockRequest::shared) for a read lease,
//!   [`owner`](LockRequest::owner), then [`acquire`](LockRequest::acquire)
//!   for a [`Guard`] or [`run`](LockRequest::run) for the whole pattern.
//!   Keys are any bytes (`&str`, `&[u8]`, `Vec<u8>`, …).
//! - A [`Guard`] is kept alive by its [`Session`]: one server lease
//!   (`LOCK.LEASE`) per connection (per node in a cluster) and ttl, with
//!   one keepalive every ttl/3 for every hold attached to it, whatever
//!   their number; or, in [`KeepAlive::Watchdog`] mode (and where the
//!   server has no `LOCK.LEASE`), by a watchdog of its own (an extend every
//!   ttl/3). It tells you when the lease is lost ([`Guard::lost`], with a
//!   [`LostReason`], [`LostReason::Revoked`] when an operator took it
//!   back: [`Locks::revoke`]) *before* its deadline passes on this
//!   client's monotonic clock, with a safety margin
//!   ([`LockOptions::safety_margin`]). [`Guard::held`] and
//!   [`Guard::remaining`] read that clock; [`Guard::extend`] extends by
//!   hand. [`Guard::guarded`] runs a command only while the lease is live
//!   on the server (`LOCK.GUARD`).
//! - [`Locks::info`] and [`Locks::queue`]: the holder and the waiters, typed.
//! - [`Semaphore`]: at most `limit` permits out at once (`SEM.*`); a
//!   [`Permit`] is kept alive, signals its loss and is released as a guard.
//! - [`Election`]: leader election on one key, with no polling
//!   ([`Election::campaign`], [`Observer::next`]).
//! - [`Redlock`]: one lock across N independent masters (or clusters), with
//!   per-node fences, a combined fence, and a watchdog (never a session).
//! - [`LockRequest::sync`] (and [`PermitRequest::sync`], [`Election::sync`],
//!   [`Guard::guarded_synced`]): the module's `SYNC`, a grant answered only
//!   once that many replicas hold it, undone otherwise
//!   ([`Error::NotReplicated`]).
//! - [`Error`]: not acquired, timed out, lost, not replicated, connection
//!   and server errors are distinct variants.
//!
//! # Versions
//!
//! A client x.y.* needs the module x.y.0 or newer (this one,
//! [`CLIENT_VERSION`], needs [`REQUIRED_MODULE_VERSION`]). Each [`Locks`]
//! checks once, with `MODULE LIST` (at connect, or at the first command
//! of one made from a connection, within [`MODULE_CHECK_TIMEOUT`]), and
//! fails with [`Error::ModuleVersion`] when the server's `lock` module is
//! older or not loaded. A user whose ACL refuses `MODULE LIST` is not
//! checked.
//!
//! # The `redis` crate
//!
//! The connections, commands and errors of this API are those of the
//! `redis` crate version this one depends on, re-exported as
//! [`redis_lock_client::redis`](redis): use it (or the same version) to
//! build clients and commands, so that there is one copy of its types.
//!
//! # Connections
//!
//! [`Locks::connect`] uses a [`ConnectionManager`](redis::aio::ConnectionManager)
//! so that sessions and watchdogs survive a reconnect; [`Locks::connect_cluster`] a
//! cluster connection that routes each command by its key;
//! [`Locks::from_connection`] whatever connection you pass. Waiting requests
//! block a connection on the server, so they open a dedicated one each, and
//! so do [`Election::campaign`] and each [`Observer`].
#![deny(missing_docs)]

mod commands;
mod conn;
mod election;
mod error;
mod info;
mod lease;
mod locks;
mod options;
mod redlock;
mod semaphore;
mod session;
mod version;

/// The `redis` crate this client is built on: its types are the ones the
/// API takes and returns.
pub use redis;

pub use conn::LockConnection;
pub use election::{Election, Leader, Leadership, Observer, OBSERVE_TIMEOUT};
pub use error::{Error, LostReason, Result};
pub use info::{LockInfo, LockMode, SemaphoreInfo, Waiter, WaiterMode};
pub use lease::LostSignal;
pub use locks::{Guard, Held, LockRequest, Locks};
pub use options::{
    KeepAlive, LockOptions, ReplicaSync, DEFAULT_TTL, MAX_OWNER_LEN, MAX_SYNC_REPLICAS, MAX_TTL,
    MAX_WAIT,
};
pub use redlock::{FenceCheck, Redlock, RedlockGuard, RedlockOptions};
pub use semaphore::{Permit, PermitRequest, Semaphore, MAX_LIMIT};
pub use session::Session;
pub use version::{CLIENT_VERSION, MODULE_CHECK_TIMEOUT, REQUIRED_MODULE_VERSION};
