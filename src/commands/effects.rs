//! The effects a master sends its replicas and the AOF records, applied:
//! every change of a key's holds, with every value explicit, so a replica or
//! a replay reaches the master's state without reading a clock or drawing a
//! token.
//!
//! - `LOCK.SETSTATE key token state`: a lock's hold (its fence, deadline,
//!   grant time, extensions and label packed, `redis_lock_core::effect`), or
//!   the text form of earlier versions and of AOF rewrites, `LOCK.SETSTATE
//!   key token fence deadline-ms [granted-ms [extends [OWNER label]]]`. It
//!   replaces whatever the key held.
//! - `LOCK.SETHOLDER key token state` (the limit and count in front), or
//!   `LOCK.SETHOLDER key limit count token fence deadline-ms granted-ms
//!   extends [OWNER label]`: one hold of a shared lock (`limit` 0) or of a
//!   semaphore, added or updated beside the key's others of the same kind.
//! - `LOCK.DELHOLDER key token`: one hold taken out.
//! - `LOCK.LEASESET id number ttl-ms deadline-ms [OWNER label]`: a lease
//!   group's whole state (granted or kept alive); `LOCK.LEASEDEL id`: it
//!   ended (its holds went by their own effects first). A hold attached to
//!   one carries its number (`LEASE number` in the text forms).
//!
//! Each goes through the same [`LockKey::put`] and [`LockKey::take`] as the
//! grants and releases that sent them. They are accepted only from the
//! replication link and from AOF loading: a client that could call them
//! could forge a holder or push fences around.

use redis_lock_core::args::{
    parse_leasedel, parse_leaseset, parse_release_as, parse_setholder, parse_setstate,
};
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{Hold, Kind, Want};
use redis_module::{Context, RedisString};

use crate::observers;
use crate::redis::key::LockKey;
use crate::redis::{self, replicate, reply, server};
use crate::state::{fence, lease_registry};

pub fn run_setstate(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    internal(ctx, LockError::SetStateInternal)?;
    let parsed = parse_setstate(redis::args(args))?;
    let hold = Hold::new(
        parsed.token,
        parsed.fence,
        parsed.granted_ms.unwrap_or_else(server::now_ms),
        parsed.deadline_ms.unwrap_or(-1),
        parsed.extends,
    )
    .with_owner(parsed.owner)
    .with_lease(parsed.lease);
    apply(ctx, &args[1], Want::Exclusive, hold)
}

pub fn run_setholder(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    internal(ctx, LockError::HolderInternal)?;
    let parsed = parse_setholder(redis::args(args))?;
    let want = Want::of(Kind::of_limit(parsed.limit), parsed.count);
    let hold = Hold::new(
        parsed.token,
        parsed.fence,
        parsed.granted_ms,
        parsed.deadline_ms,
        parsed.extends,
    )
    .with_count(parsed.count)
    .with_owner(parsed.owner)
    .with_lease(parsed.lease);
    apply(ctx, &args[1], want, hold)
}

pub fn run_delholder(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    internal(ctx, LockError::HolderInternal)?;
    let parsed = parse_release_as(redis::args(args), LockError::ArityDelHolder)?;
    let name = &args[1];
    let mut key = LockKey::open_write(ctx, name);
    key.held()?;
    if let Some(taken) = key.take(parsed.token) {
        if let Some(number) = taken.lease {
            lease_registry::detached(server::selected_db(ctx), name, taken.fence, number);
        }
    }
    drop(key);
    applied(ctx, name);
    Ok(())
}

pub fn run_leaseset(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    internal(ctx, LockError::LeaseInternal)?;
    let parsed = parse_leaseset(redis::args(args))?;
    lease_registry::set(
        parsed.id,
        parsed.number,
        parsed.ttl_ms,
        parsed.deadline_ms,
        parsed.owner,
    );
    replicate::verbatim(ctx);
    reply::ok(ctx);
    Ok(())
}

pub fn run_leasedel(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    internal(ctx, LockError::LeaseInternal)?;
    let id = parse_leasedel(redis::args(args))?;
    lease_registry::apply_del(&id);
    replicate::verbatim(ctx);
    reply::ok(ctx);
    Ok(())
}

/// Only the replication link and AOF loading: `refused` for anyone else.
fn internal(ctx: &Context, refused: LockError) -> Result<(), LockError> {
    match server::is_replicated_or_loading(ctx) {
        true => Ok(()),
        false => Err(refused),
    }
}

/// The master's `hold` on `name`, as `want` holds it.
fn apply(ctx: &Context, name: &RedisString, want: Want, hold: Hold) -> Result<(), LockError> {
    let (fence, lease, deadline_ms) = (hold.fence, hold.tags.lease(), hold.deadline_ms);
    let mut key = LockKey::open_write(ctx, name);
    key.held()?;
    key.put(want, hold)?;
    drop(key);
    fence::observe(fence);
    if let Some(number) = lease {
        lease_registry::attached(server::selected_db(ctx), name, fence, number, deadline_ms);
    }
    applied(ctx, name);
    Ok(())
}

/// An effect from the master or the AOF is applied: pass it on as it came,
/// wake the key's observers, reply OK.
fn applied(ctx: &Context, name: &RedisString) {
    observers::changed_here(ctx, name);
    replicate::touched(ctx, name);
    replicate::verbatim(ctx);
    reply::ok(ctx);
}
