//! redis-lock: native, fenced lock commands for Redis 7 and 8 and Valkey 8 and 9.
//!
//! This file is the table of contents: the module's commands and data type,
//! each a one-line wrapper over its own file in [`commands`]. The floors,
//! from the top (imports only go down; `make lint` checks it):
//! - entry points: [`commands`] (clients), [`events`] (the server),
//!   [`migration`] (Valkey 9's slot migrations) and [`startup`];
//! - [`lease_groups`]: lease groups (`LOCK.LEASE`) in motion (grant,
//!   keepalive, revocation, the timer that ends them);
//! - [`wait_queue`]: the wait queues, and in `wait_queue/handoff.rs` the
//!   one release-and-hand-off path;
//! - [`holds`]: the hold owner: grant, renew, release and expire any hold
//!   on 1..n keys, each with its effect, event and counter;
//! - clients that wait for something else: [`observers`] (a holder's
//!   change), [`sync`] (their replicas);
//! - [`state`]: module-wide state (settings, counters, fences, expiry
//!   notes, SESSION bindings, revocation marks, the lease-group registry);
//! - [`redis`]: every FFI call;
//! - the `redis-lock-core` crate: parsing, errors and every decision, with
//!   no Redis dependency.
//!
//! `docs/architecture.md` draws the floors and follows one request through
//! them.

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

pub mod commands;
pub mod events;
pub mod holds;
pub mod lease_groups;
pub mod migration;
pub mod observers;
pub mod redis;
pub mod startup;
pub mod state;
pub mod sync;
pub mod wait_queue;

use redis_module::{redis_module, Context, RedisString, Status};

use commands::{acquire, effects, extend, guard, info, lease_group, observe, queue, release};
use events::{on_expired, on_key_event};
use redis::command::{self, Keys, Spec};
use redis::datatype::{LOCK_TYPE, SEMAPHORE_TYPE, SHARED_TYPE};

/// Every command, one row each: its name, its flags, its ACL categories
/// (`+ @lock`: also in the module's own category, where the server has one),
/// and its body. Each command's key is argument 1 (first 1, last 1, step 1:
/// Cluster routing, ACL key patterns); GUARD reports the guarded command's
/// keys too (`getkeys-api`); `LOCK.LEASE` (a container: `LOCK.LEASE GRANT`
/// and its siblings) and the lease effects touch no key of their own. Each
/// is entered through `redis/command.rs`, which lends the body the
/// arguments as the server holds them, and replies its error or a panic.
///
/// RELEASE has no deny-oom, so a lock can always be given back under
/// maxmemory (nor have `LOCK.LEASE END`, `LOCK.LEASE REVOKE` or
/// `LOCK.REVOKE`). GUARD has
/// neither deny-oom (a guarded read works under maxmemory; a guarded write
/// is refused as the bare write would be) nor fast (the guarded command may
/// be slow). The multi-key commands (`LOCK.MACQUIRE`, `MEXTEND`,
/// `MRELEASE`) are O(numkeys), so neither fast nor `@fast`: `@slow`, as
/// Redis' own `DEL` and `MSET`, and as `LOCK.REVOKE` (O(holders)) here.
/// ACQUIRE (with WAIT), MACQUIRE and OBSERVE block like BLPOP, so they are
/// `blocking`, which tells clients and proxies to wait longer; in MULTI and
/// scripts they answer at once all the same. The categories follow Redis'
/// own: each command in `@read` or `@write`, `@fast` or `@slow`; taking
/// another client's hold away (`LOCK.REVOKE`, `LOCK.LEASE REVOKE`) is
/// `@dangerous` and `@admin`, like `CLIENT KILL`, so that `+@lock
/// -@dangerous` is a worker's rights, ending its own lease included
/// (`LOCK.LEASE END`, O(holds): `@slow`); `LOCK.LEASE HELP` is as Redis'
/// own containers' `HELP` (`@slow`, neither read nor write); the internal effects (`SETSTATE`,
/// `SETHOLDER`, `DELHOLDER`, `LEASESET`, `LEASEDEL`) are `@dangerous` like
/// `RESTORE`, which can forge a key's state the same way, and not in `@lock`.
#[rustfmt::skip]
const COMMANDS: &[Spec] = &[
    //   name               flags                             categories                    @lock  body
    spec(c"lock.acquire",   c"write deny-oom fast blocking",  "write fast blocking",        true,  acquire::run),
    spec(c"lock.extend",    c"write deny-oom fast",           "write fast",                 true,  extend::run),
    spec(c"lock.release",   c"write fast",                    "write fast",                 true,  release::run),
    spec(c"lock.info",      c"readonly fast",                 "read fast",                  true,  info::run),
    spec(c"lock.guard",     c"write getkeys-api",             "write slow",                 true,  guard::run),
    spec(c"lock.guard_ro",  c"readonly getkeys-api",          "read slow",                  true,  guard::run_ro),
    spec(c"lock.queue",     c"readonly fast",                 "read fast",                  true,  queue::run),
    spec(c"lock.observe",   c"readonly blocking",             "read slow blocking",         true,  observe::run),
    many(c"lock.macquire",  c"write deny-oom blocking getkeys-api", "write slow blocking",   true,  acquire::run_many),
    many(c"lock.mextend",   c"write deny-oom getkeys-api",    "write slow",                 true,  extend::run_many),
    many(c"lock.mrelease",  c"write getkeys-api",             "write slow",                 true,  release::run_many),
    spec(c"lock.revoke",    c"write",                         "write slow dangerous admin", true,  lease_group::run_revoke),
    spec(c"sem.acquire",    c"write deny-oom fast blocking",  "write fast blocking",        true,  acquire::run_sem),
    spec(c"sem.extend",     c"write deny-oom fast",           "write fast",                 true,  extend::run_sem),
    spec(c"sem.release",    c"write fast",                    "write fast",                 true,  release::run_sem),
    spec(c"sem.info",       c"readonly fast",                 "read fast",                  true,  info::run_sem),
    spec(c"lock.setstate",  c"write fast",                    "write fast dangerous",       false, effects::run_setstate),
    spec(c"lock.setholder", c"write fast",                    "write fast dangerous",       false, effects::run_setholder),
    spec(c"lock.delholder", c"write fast",                    "write fast dangerous",       false, effects::run_delholder),
    keyless(c"lock.leaseset", c"write fast",                  "write fast dangerous",       false, effects::run_leaseset),
    keyless(c"lock.leasedel", c"write fast",                  "write fast dangerous",       false, effects::run_leasedel),
    container(c"lock.lease"),
    sub(c"grant",           c"write deny-oom fast",           "write fast",                 true,  lease_group::run_grant),
    sub(c"keepalive",       c"write deny-oom fast",           "write fast",                 true,  lease_group::run_keepalive),
    sub(c"end",             c"write",                         "write slow",                 true,  lease_group::run_end_lease),
    sub(c"revoke",          c"write",                         "write slow dangerous admin", true,  lease_group::run_revoke_lease),
    sub(c"info",            c"readonly fast",                 "read fast",                  true,  lease_group::run_lease_info),
    sub(c"help",            c"allow-loading allow-stale",     "slow",                       true,  lease_group::run_lease_help),
];

/// A command whose key is argument 1.
const fn spec(
    name: &'static std::ffi::CStr,
    flags: &'static std::ffi::CStr,
    categories: &'static str,
    in_lock_category: bool,
    body: command::Body,
) -> Spec {
    Spec {
        name,
        parent: None,
        keys: Keys::First,
        flags,
        categories,
        in_lock_category,
        body: Some(body),
    }
}

/// A command whose keys are `numkeys key [key ...]` from argument 1.
const fn many(
    name: &'static std::ffi::CStr,
    flags: &'static std::ffi::CStr,
    categories: &'static str,
    in_lock_category: bool,
    body: command::Body,
) -> Spec {
    Spec {
        keys: Keys::Numkeys,
        ..spec(name, flags, categories, in_lock_category, body)
    }
}

/// A command with no key.
const fn keyless(
    name: &'static std::ffi::CStr,
    flags: &'static std::ffi::CStr,
    categories: &'static str,
    in_lock_category: bool,
    body: command::Body,
) -> Spec {
    Spec {
        keys: Keys::None,
        ..spec(name, flags, categories, in_lock_category, body)
    }
}

/// A container: `LOCK.LEASE`, whose subcommands follow it in the table.
const fn container(name: &'static std::ffi::CStr) -> Spec {
    Spec {
        name,
        parent: None,
        keys: Keys::None,
        flags: c"",
        categories: "",
        in_lock_category: false,
        body: None,
    }
}

/// A subcommand of `LOCK.LEASE`, with no key.
const fn sub(
    name: &'static std::ffi::CStr,
    flags: &'static std::ffi::CStr,
    categories: &'static str,
    in_lock_category: bool,
    body: command::Body,
) -> Spec {
    Spec {
        parent: Some(c"lock.lease"),
        keys: Keys::None,
        ..spec(name, flags, categories, in_lock_category, body)
    }
}

/// Create the commands, then everything else (`startup.rs`).
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    if let Err(e) = command::create_all(ctx, COMMANDS) {
        ctx.log_warning(&format!("redis-lock: {e}: not loading"));
        return Status::Err;
    }
    startup::init(ctx, args, COMMANDS)
}

#[cfg(test)]
mod tests {
    use super::COMMANDS;

    #[test]
    fn every_client_command_is_in_lock_and_the_internal_ones_are_not() {
        let internal = [
            c"lock.setstate",
            c"lock.setholder",
            c"lock.delholder",
            c"lock.leaseset",
            c"lock.leasedel",
        ];
        for spec in COMMANDS.iter().filter(|spec| spec.body.is_some()) {
            let name = spec.name;
            assert_eq!(spec.in_lock_category, !internal.contains(&name), "{name:?}");
            let words: Vec<&str> = spec.categories.split(' ').collect();
            // `HELP` touches no data, as Redis' own.
            assert!(
                words.contains(&"read") != words.contains(&"write") || name == c"help",
                "{name:?}: read or write"
            );
            assert!(
                words.contains(&"fast") != words.contains(&"slow"),
                "{name:?}: fast or slow"
            );
            // The categories say what the flags say.
            let flags = spec.flags.to_string_lossy();
            assert_eq!(
                words.contains(&"write"),
                flags.contains("write"),
                "{name:?}"
            );
            assert_eq!(
                words.contains(&"blocking"),
                flags.contains("blocking"),
                "{name:?}"
            );
        }
    }
}

// Redis' allocator inside the server; the system one where no server runs
// (unit tests, and a build without the default feature `redis-allocator`),
// because Redis' aborts there.
#[cfg(all(not(test), feature = "redis-allocator"))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(all(not(test), feature = "redis-allocator"))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(any(test, not(feature = "redis-allocator")))]
type Allocator = std::alloc::System;
#[cfg(any(test, not(feature = "redis-allocator")))]
const ALLOCATOR: Allocator = std::alloc::System;

/// The module's version as `MODULE LIST` reports it (`ver`):
/// major·10000 + minor·100 + patch of this crate's version, so that a
/// client can refuse a server whose module is older than the one it needs.
pub const MODULE_VERSION: i32 = {
    const fn number(text: &str) -> i32 {
        let bytes = text.as_bytes();
        let (mut i, mut n) = (0, 0);
        while i < bytes.len() {
            n = n * 10 + (bytes[i] - b'0') as i32;
            i += 1;
        }
        n
    }
    number(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + number(env!("CARGO_PKG_VERSION_PATCH"))
};

redis_module! {
    name: "lock",
    version: MODULE_VERSION,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE, SHARED_TYPE, SEMAPHORE_TYPE],
    init: init,
    event_handlers: [
        [@GENERIC @EVICTED: on_key_event],
        [@EXPIRED: on_expired],
    ],
}
