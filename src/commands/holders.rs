//! `LOCK.SETHOLDER key token state` (limit, count, fence, deadline, grant
//! time, extensions and label packed, `redis_lock_core::effect`; or the text
//! form of earlier versions and AOF rewrites, `LOCK.SETHOLDER key limit count
//! token fence deadline-ms granted-ms extends [OWNER label]`) and
//! `LOCK.DELHOLDER key token`: one holder of a shared lock
//! (`limit` 0) or of a semaphore, added or updated, or taken out, as its
//! effect. The master replicates every change of a key with several holders
//! as these, and the AOF records them, with every value explicit; the key's
//! TTL follows its latest holder. Accepted only from the replication link
//! and from AOF loading, like `LOCK.SETSTATE`.

use redis_lock_core::args::{parse_release_as, parse_setholder};
use redis_lock_core::errors::LockError;
use redis_lock_core::holders::{Holder, Holders};
use redis_lock_core::lock::OwnerLabel;
use redis_module::{Context, RedisString};

use crate::redis::key::{Held, LockKey};
use crate::redis::{self, replicate, reply, server};
use crate::{fence, observers};

pub fn run_set(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if !server::is_replicated_or_loading(ctx) {
        return Err(LockError::HolderInternal);
    }
    let parsed = parse_setholder(redis::args(args))?;
    let name = &args[1];
    let mut holder = Holder::new(
        parsed.token,
        parsed.fence,
        parsed.granted_ms,
        parsed.deadline_ms,
        parsed.count,
    );
    holder.extends = parsed.extends;
    holder.owner = OwnerLabel::new(parsed.owner);

    let mut key = LockKey::open_write(ctx, name);
    let same_kind = match key.held()? {
        Held::Shared(h) | Held::Semaphore(h) => h.limit == parsed.limit,
        Held::Free | Held::Exclusive(_) => false,
    };
    if same_kind {
        if let Some(holders) = key.holders_mut() {
            holders.put(holder);
        }
        key.holders_changed();
    } else {
        // The master's state replaces whatever the key held.
        let mut holders = Holders::new(parsed.limit);
        holders.put(holder);
        key.store_holders(holders)?;
    }
    drop(key);
    fence::observe(parsed.fence);
    applied(ctx, name);
    Ok(())
}

pub fn run_del(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if !server::is_replicated_or_loading(ctx) {
        return Err(LockError::HolderInternal);
    }
    let parsed = parse_release_as(redis::args(args), LockError::ArityDelHolder)?;
    let name = &args[1];
    let mut key = LockKey::open_write(ctx, name);
    key.held()?;
    if let Some(holders) = key.holders_mut() {
        holders.remove(parsed.token);
        key.holders_changed();
    }
    drop(key);
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
