//! redis-lock's core: the lock's rules and decisions, with no Redis
//! dependency, so that they are read, unit-tested, property-tested and
//! fuzzed without a server.
//!
//! - [`args`]: each command's arguments, parsed once into a typed struct;
//! - [`errors`]: every error reply, each beginning with its code;
//! - [`rules`]: the limits and the small rules (next fence, expiry, hold
//!   policy, lock-delay);
//! - [`decide`]: one decision per command and event, as a value the module
//!   executes;
//! - [`hold`]: the one hold model: a [`hold::Hold`], a key's
//!   [`hold::Holds`] over either storage, the kinds of holds and keys, the
//!   WRONGTYPE rule;
//! - [`lock`] and [`token`]: an exclusive lock's packed 32-byte value and
//!   its compact token;
//!   (its [`hold::Holders`] is the value of a key with several holders:
//!   shared locks, semaphores);
//! - [`waitqueue`]: the per-key FIFO of waiters, each waiting for 1..n keys,
//!   and which of them the hand-off serves;
//! - [`few`]: a list kept inline while it has one item (the one-key path
//!   of every command allocates nothing);
//! - [`settings`]: the module's settings as data;
//! - [`group`]: lease groups (`LOCK.LEASE`): the lease id, and how far
//!   ahead of its lease an attached key's TTL runs;
//! - [`sync`]: `SYNC`, a grant answered once replicas hold it: their
//!   acknowledged offsets, and when a wait ends;
//! - [`cluster`]: a key's hash slot, and where its waiters go when the key
//!   left this node in a reshard (`CLUSTER NODES` read as text);
//! - [`sim`] (feature `sim`): an in-memory lock table that executes the
//!   decisions, for the differential test and the fuzz targets.
//!
//! Imports go one way: `decide` uses `hold`, `rules` and `errors`; nothing
//! here uses `decide`.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable,
        clippy::todo
    )
)]

pub mod args;
pub mod cluster;
pub mod decide;
pub mod effect;
pub mod errors;
pub mod few;
pub mod group;
pub mod hold;
pub mod lock;
pub mod registry;
pub mod rules;
pub mod settings;
pub mod sync;
pub mod token;
pub mod waitqueue;

#[cfg(any(test, feature = "sim"))]
pub mod sim;
