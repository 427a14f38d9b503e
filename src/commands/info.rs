//! `LOCK.INFO key [HOLDS n]` → null when free; otherwise a map of `fence`,
//! `ttl` (ms left, -1 without expiry), `deadline` (unix ms, -1 without
//! expiry), `granted` (unix ms of the grant), `extends` (extensions since),
//! `waiters`, `mode` (`exclusive` or `shared`), `holders`, and `owner` (the
//! holder's label, when it gave one). For a key held in shared mode,
//! `fence` is the highest holder fence, `ttl` and `deadline` the latest
//! lease, `granted`, `extends` and `owner` those of the holder with the
//! highest fence. `SEM.INFO key [HOLDS n]` → null, or a map of `limit`,
//! `used`, `holders`, `waiters`, `fence` (highest), `ttl` and `deadline`
//! (latest lease). With `HOLDS n`, the map ends with `holds`: the first `n`
//! holders, oldest grant first, each with its own fence, ttl, grant time,
//! extensions, permits and label. A hold attached to a lease group shows
//! its lease's deadline and `lease`, the group's public number; a newest
//! grant that still waits for its replicas (`SYNC`) adds `syncing` 1.
//! Never a token, never a lease's id.

use std::ffi::CStr;

use redis_lock_core::args::parse_info_as;
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{self, Family, Hold, Holds, Kind};
use redis_lock_core::rules;
use redis_module::{Context, RedisString};

use crate::redis::key::LockKey;
use crate::redis::reply::{self, Field};
use crate::redis::{self, server};
use crate::state::lease_registry;
use crate::{sync, wait_queue};

/// The latest shown deadline of a live hold.
fn latest(holds: &Holds, now_ms: i64) -> Option<i64> {
    holds
        .live(now_ms)
        .map(lease_registry::shown_deadline)
        .max()
        .flatten()
}

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    info(ctx, args, Family::Lock)
}

pub fn run_sem(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    info(ctx, args, Family::Semaphore)
}

fn info(ctx: &Context, args: &[RedisString], family: Family) -> Result<(), LockError> {
    let arity = match family {
        Family::Lock => LockError::ArityInfo,
        Family::Semaphore => LockError::AritySemInfo,
    };
    let parsed = parse_info_as(redis::args(args), arity)?;
    let key = LockKey::open_read(ctx, &args[1]);
    let holds = key.held()?;
    hold::admits(family, holds.kind())?;
    let now_ms = server::now_ms();
    let Some(newest) = holds.newest(now_ms) else {
        reply::null(ctx);
        return Ok(());
    };
    let waiters = wait_queue::waiters(server::selected_db(ctx), &args[1]) as i64;
    let listed = parsed
        .holds
        .map_or_else(Vec::new, |n| listing(&holds, now_ms, n));
    let mut fields: Vec<(&'static CStr, Field)> = Vec::with_capacity(12);
    match holds.kind() {
        Some(Kind::Semaphore { limit }) => {
            let deadline = latest(&holds, now_ms).unwrap_or(-1);
            fields.extend([
                (c"limit", Field::Int(i64::from(limit))),
                (c"used", Field::Int(used(&holds, now_ms))),
                (c"holders", Field::Int(holds.count_live(now_ms) as i64)),
                (c"waiters", Field::Int(waiters)),
                (c"fence", Field::Int(newest.fence as i64)),
                (c"ttl", Field::Int(rules::ms_left(Some(deadline), now_ms))),
                (c"deadline", Field::Int(deadline)),
            ]);
        }
        kind => {
            // A lock's TTL is its key's; readers' is the latest lease.
            let deadline = match kind {
                Some(Kind::Exclusive) if newest.tags.lease().is_none() => key.deadline(),
                _ => latest(&holds, now_ms),
            };
            let ttl = rules::ms_left(deadline, now_ms);
            let mode: &[u8] = match kind {
                Some(Kind::Shared) => b"shared",
                _ => b"exclusive",
            };
            fields.extend([
                (c"fence", Field::Int(newest.fence as i64)),
                (c"ttl", Field::Int(ttl)),
                (c"deadline", Field::Int(deadline.unwrap_or(-1))),
                (c"granted", Field::Int(newest.granted_ms)),
                (c"extends", Field::Int(i64::from(newest.extends))),
                (c"waiters", Field::Int(waiters)),
                (c"mode", Field::Bytes(mode)),
                (c"holders", Field::Int(holds.count_live(now_ms) as i64)),
            ]);
            // `owner` only when there is one: the newest holder's, as
            // `LOCK.OBSERVE` shows it.
            if let Some(owner) = newest.tags.owner() {
                fields.push((c"owner", Field::Bytes(owner)));
            }
        }
    }
    // `lease`: the public number of the newest holder's lease group, if it
    // is attached to one (never the lease's id).
    if let Some(number) = newest.tags.lease() {
        fields.push((c"lease", Field::Int(number as i64)));
    }
    // `syncing`: the newest grant still waits for its replicas (`SYNC`),
    // its client not told yet; it may still be undone.
    if sync::syncing(newest.fence) {
        fields.push((c"syncing", Field::Int(1)));
    }
    if parsed.holds.is_some() {
        fields.push((c"holds", Field::Maps(&listed)));
    }
    reply::map(ctx, &fields);
    Ok(())
}

/// Permits out (readers, for a shared lock), of live holds.
fn used(holds: &Holds, now_ms: i64) -> i64 {
    holds.live(now_ms).map(|h| i64::from(h.count)).sum()
}

type Fields<'a> = Vec<(&'static CStr, Field<'a>)>;

/// The first `count` live holds, oldest grant (lowest fence) first, each a
/// map of `fence`, `ttl`, `granted`, `extends`, `count` (a semaphore's
/// permits) and `owner` (when it gave one). Never a token.
fn listing<'a>(holds: &'a Holds, now_ms: i64, count: usize) -> Vec<Fields<'a>> {
    let semaphore = matches!(holds.kind(), Some(Kind::Semaphore { .. }));
    let mut live: Vec<&Hold> = holds.live(now_ms).collect();
    live.sort_unstable_by_key(|h| h.fence);
    live.into_iter()
        .take(count)
        .map(|h| {
            let ttl = rules::ms_left(lease_registry::shown_deadline(h), now_ms);
            let mut fields = vec![
                (c"fence", Field::Int(h.fence as i64)),
                (c"ttl", Field::Int(ttl)),
                (c"granted", Field::Int(h.granted_ms)),
                (c"extends", Field::Int(i64::from(h.extends))),
            ];
            if semaphore {
                fields.push((c"count", Field::Int(i64::from(h.count))));
            }
            if let Some(owner) = h.tags.owner() {
                fields.push((c"owner", Field::Bytes(owner)));
            }
            if let Some(number) = h.tags.lease() {
                fields.push((c"lease", Field::Int(number as i64)));
            }
            fields
        })
        .collect()
}
