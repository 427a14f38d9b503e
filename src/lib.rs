//! redis-lock: native, fenced lock commands for Redis 7 and 8 and Valkey 8 and 9.
//!
//! This file is the table of contents: the module's commands and data type,
//! each a one-line wrapper over its own file in [`commands`]. The floors,
//! from the top (imports only go down; `make lint` checks it):
//! - entry points: [`commands`] (clients), [`events`] (the server),
//!   [`migration`] (Valkey 9's slot migrations) and [`startup`];
//! - flows: [`waiting`] (queues, hand-off, the one release path), then
//!   [`lease`] (grant, renew, release of one key);
//! - module-wide state: [`sessions`], [`observers`], [`expiry`], [`fence`],
//!   [`metrics`], [`config`];
//! - [`redis`]: every FFI call;
//! - the `redis-lock-core` crate: parsing, errors and every decision, with
//!   no Redis dependency.
//!
//! `docs/architecture.md` draws the floors and follows one request through
//! them.

pub mod commands;
pub mod config;
pub mod events;
pub mod expiry;
pub mod fence;
pub mod lease;
pub mod metrics;
pub mod migration;
pub mod observers;
pub mod redis;
pub mod sessions;
pub mod startup;
pub mod waiting;

use redis_module::{redis_module, Context, RedisResult, RedisString};

use commands::{
    acquire, extend, guard, holders, info, observe, queue, release, run, sem_acquire, setstate,
};
use events::{on_expired, on_key_event};
use redis::datatype::LOCK_TYPE;
use redis::holders_type::{SEMAPHORE_TYPE, SHARED_TYPE};
use startup::init;

fn lock_acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, acquire::run)
}

fn lock_extend(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, extend::run)
}

fn lock_release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, release::run)
}

fn lock_guard(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, guard::run)
}

fn lock_info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, info::run)
}

fn lock_observe(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, observe::run)
}

fn lock_queue(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, queue::run)
}

fn lock_setholder(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, holders::run_set)
}

fn lock_delholder(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, holders::run_del)
}

fn sem_acquire_cmd(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, sem_acquire::run)
}

fn sem_extend(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, extend::run_sem)
}

fn sem_release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, release::run_sem)
}

fn sem_info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, info::run_sem)
}

fn lock_setstate(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, args, setstate::run)
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

// Each command declares its key as first 1, last 1, step 1 (cluster routing,
// ACL key patterns). RELEASE has no deny-oom, so a lock can always be given
// back under maxmemory. GUARD reports the guarded command's keys too
// (getkeys-api), and has neither deny-oom (a guarded read works under
// maxmemory; a guarded write is refused as the bare write would be) nor
// fast (the guarded command may be slow). ACQUIRE (with WAIT) and OBSERVE
// block like BLPOP, so they are `blocking`, which tells clients and proxies
// to wait longer; in MULTI and scripts they answer at once all the same.
// The 7th field (mandatory ACL categories) must stay "" on Redis 7.0; the
// optional 8th is not used: `startup.rs` sets each command's categories
// (COMMAND_CATEGORIES), with `@lock` where the server has it.
redis_module! {
    name: "lock",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LOCK_TYPE, SHARED_TYPE, SEMAPHORE_TYPE],
    init: init,
    commands: [
        ["lock.acquire", lock_acquire, "write deny-oom fast blocking", 1, 1, 1, ""],
        ["lock.extend", lock_extend, "write deny-oom fast", 1, 1, 1, ""],
        ["lock.release", lock_release, "write fast", 1, 1, 1, ""],
        ["lock.info", lock_info, "readonly fast", 1, 1, 1, ""],
        ["lock.guard", lock_guard, "write getkeys-api", 1, 1, 1, ""],
        ["lock.queue", lock_queue, "readonly fast", 1, 1, 1, ""],
        ["lock.observe", lock_observe, "readonly blocking", 1, 1, 1, ""],
        ["lock.setstate", lock_setstate, "write fast", 1, 1, 1, ""],
        ["lock.setholder", lock_setholder, "write fast", 1, 1, 1, ""],
        ["lock.delholder", lock_delholder, "write fast", 1, 1, 1, ""],
        ["sem.acquire", sem_acquire_cmd, "write deny-oom fast blocking", 1, 1, 1, ""],
        ["sem.extend", sem_extend, "write deny-oom fast", 1, 1, 1, ""],
        ["sem.release", sem_release, "write fast", 1, 1, 1, ""],
        ["sem.info", sem_info, "readonly fast", 1, 1, 1, ""],
    ],
    event_handlers: [
        [@GENERIC @EVICTED: on_key_event],
        [@EXPIRED: on_expired],
    ],
}
