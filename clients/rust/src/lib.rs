//! An async Rust client for the [redis-lock] module's `LOCK.*` commands.
//!
//! - [`Locks`]: locks on one server or one Redis Cluster. A [`Guard`] keeps
//!   its lease alive with a watchdog (an extend every ttl/3) and tells you
//!   when the lease is lost ([`Guard::lost`]) *before* its deadline passes on
//!   this client's monotonic clock, with a safety margin
//!   ([`LockOptions::safety_margin`]).
//! - [`Guard::guarded`]: a command that runs only while the lease is live on
//!   the server (`LOCK.GUARD`), with its own typed reply, or
//!   [`Error::Lost`] and nothing run.
//! - Read/write locks: [`Locks::acquire_shared`] takes a read lease beside
//!   other readers (`LOCK.ACQUIRE … SHARED`), with its own token, fence and
//!   watchdog; an exclusive [`Locks::acquire`] excludes everyone.
//! - [`Semaphore`]: at most `limit` permits out at once (`SEM.*`); a
//!   [`Permit`] has the same watchdog, loss signal and release as a guard.
//! - [`Election`]: leader election on one key. Candidates wait in the
//!   server's queue ([`Election::campaign`]) and lead with a
//!   [`Leadership`] (the same watchdog and loss signal); followers learn
//!   each change of leader from [`Observer::next`] (`LOCK.OBSERVE`), with
//!   no polling. See docs/leader-election.md.
//! - [`Redlock`]: one lock across N independent masters (or clusters), with
//!   per-node fences, a combined fence, and the same watchdog.
//! - [`Error`]: not acquired, timed out, lost, connection and server errors
//!   are distinct variants.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{Error, Locks};
//!
//! # async fn demo() -> Result<(), Error> {
//! let client = redis::Client::open("redis://127.0.0.1:6379/").unwrap();
//! let locks = Locks::connect(client).await?;
//!
//! // Exactly one of the workers that try this at once runs the job.
//! match locks
//!     .with_lock("billing", Duration::from_secs(10), |held| async move {
//!         // every write carries held.fence; the storage refuses older fences
//!         held.fence
//!     })
//!     .await
//! {
//!     Ok(fence) => println!("ran the job with fence {fence}"),
//!     Err(Error::NotAcquired) => println!("another worker runs it"),
//!     Err(Error::Lost(reason)) => println!("stopped: {reason}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
//!
//! # Connections
//!
//! [`Locks::connect`] uses a [`ConnectionManager`](redis::aio::ConnectionManager)
//! so that the watchdog survives a reconnect; [`Locks::connect_cluster`] a
//! cluster connection that routes each command by its key;
//! [`Locks::from_connection`] whatever connection you pass. Waiting acquires
//! ([`Locks::acquire_wait`]) block a connection on the server, so they open
//! a dedicated one each, and so do [`Election::campaign`] and each
//! [`Observer`].
//!
//! [redis-lock]: ../../README.md
#![deny(missing_docs)]

mod conn;
mod election;
mod error;
mod lease;
mod locks;
mod options;
mod redlock;
mod semaphore;

pub use conn::LockConnection;
pub use election::{Election, Leader, Leadership, Observer, OBSERVE_TIMEOUT};
pub use error::{Error, LostReason, Result};
pub use lease::LostSignal;
pub use locks::{Guard, Held, Locks};
pub use options::{LockOptions, MAX_OWNER_LEN, MAX_TTL};
pub use redlock::{FenceCheck, Redlock, RedlockGuard, RedlockOptions};
pub use semaphore::{Permit, Semaphore, SemaphoreInfo, MAX_LIMIT};
