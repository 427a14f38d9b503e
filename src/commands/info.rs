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
//! extensions, permits and label. Never a token.

use redis_lock_core::args::parse_info_as;
use redis_lock_core::errors::LockError;
use std::ffi::CStr;

use redis_lock_core::holders::{Holder, Holders};
use redis_module::{Context, RedisString};

use super::Family;
use crate::redis::key::{Held, LockKey};
use crate::redis::reply::{self, Field};
use crate::redis::{self, server};
use crate::waiting;

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
    let now_ms = server::now_ms();
    let waiters = waiting::waiters(server::selected_db(ctx), &args[1]) as i64;
    let deadline = key.deadline();
    let ttl = deadline.map_or(-1, |d| (d - now_ms).max(0));
    match (key.held()?, family) {
        (Held::Free, _) => reply::null(ctx),
        (Held::Exclusive(lock), Family::Lock) => {
            let mut fields = vec![
                (c"fence", Field::Int(lock.fence as i64)),
                (c"ttl", Field::Int(ttl)),
                (c"deadline", Field::Int(deadline.unwrap_or(-1))),
                (c"granted", Field::Int(lock.granted_ms)),
                (c"extends", Field::Int(i64::from(lock.extends))),
                (c"waiters", Field::Int(waiters)),
                (c"mode", Field::Bytes(b"exclusive")),
                (c"holders", Field::Int(1)),
            ];
            // `owner` only when there is one.
            let owner = lock.owner.get();
            if let Some(owner) = owner {
                fields.push((c"owner", Field::Bytes(owner)));
            }
            // With `HOLDS`, its one hold, listed as a key with several holders
            // lists each of them.
            let one = [hold(
                lock.fence,
                ttl,
                lock.granted_ms,
                lock.extends,
                None,
                owner,
            )];
            if parsed.holds.is_some() {
                fields.push((c"holds", Field::Maps(&one)));
            }
            reply::map(ctx, &fields);
        }
        (Held::Shared(h), Family::Lock) => shared_info(ctx, h, now_ms, waiters, parsed.holds),
        (Held::Semaphore(h), Family::Semaphore) => sem_info(ctx, h, now_ms, waiters, parsed.holds),
        _ => return Err(LockError::WrongType),
    }
    Ok(())
}

type Fields<'a> = Vec<(&'static CStr, Field<'a>)>;

/// One hold as `HOLDS` lists it: `fence`, `ttl`, `granted`, `extends`,
/// `count` (a semaphore's permits) and `owner` (when it gave one). Never a
/// token.
fn hold(
    fence: u64,
    ttl: i64,
    granted_ms: i64,
    extends: u32,
    count: Option<u32>,
    owner: Option<&[u8]>,
) -> Fields<'_> {
    let mut fields = vec![
        (c"fence", Field::Int(fence as i64)),
        (c"ttl", Field::Int(ttl)),
        (c"granted", Field::Int(granted_ms)),
        (c"extends", Field::Int(i64::from(extends))),
    ];
    if let Some(count) = count {
        fields.push((c"count", Field::Int(i64::from(count))));
    }
    if let Some(owner) = owner {
        fields.push((c"owner", Field::Bytes(owner)));
    }
    fields
}

/// The first `count` live holds of `h`, oldest grant (lowest fence) first.
fn holds(h: &Holders, now_ms: i64, count: usize) -> Vec<Fields<'_>> {
    let mut live: Vec<&Holder> = h.live(now_ms).collect();
    live.sort_unstable_by_key(|x| x.fence);
    live.into_iter()
        .take(count)
        .map(|x| {
            let permits = (h.limit > 0).then_some(x.count);
            let ttl = (x.deadline_ms - now_ms).max(0);
            hold(
                x.fence,
                ttl,
                x.granted_ms,
                x.extends,
                permits,
                x.owner.get(),
            )
        })
        .collect()
}

/// A key held in shared mode: its live readers, as a whole, then each.
fn shared_info(ctx: &Context, h: &Holders, now_ms: i64, waiters: i64, listed: Option<usize>) {
    let Some(newest) = h.live(now_ms).max_by_key(|x| x.fence) else {
        return reply::null(ctx);
    };
    let deadline = h.live(now_ms).map(|x| x.deadline_ms).max().unwrap_or(-1);
    let listed = holds(h, now_ms, listed.unwrap_or(0));
    let mut fields = vec![
        (c"fence", Field::Int(newest.fence as i64)),
        (c"ttl", Field::Int((deadline - now_ms).max(0))),
        (c"deadline", Field::Int(deadline)),
        (c"granted", Field::Int(newest.granted_ms)),
        (c"extends", Field::Int(i64::from(newest.extends))),
        (c"waiters", Field::Int(waiters)),
        (c"mode", Field::Bytes(b"shared")),
        (c"holders", Field::Int(h.count_live(now_ms) as i64)),
    ];
    // The newest reader's label, as `LOCK.OBSERVE` shows it.
    if let Some(owner) = newest.owner.get() {
        fields.push((c"owner", Field::Bytes(owner)));
    }
    if !listed.is_empty() {
        fields.push((c"holds", Field::Maps(&listed)));
    }
    reply::map(ctx, &fields);
}

fn sem_info(ctx: &Context, h: &Holders, now_ms: i64, waiters: i64, listed: Option<usize>) {
    if h.count_live(now_ms) == 0 {
        return reply::null(ctx);
    }
    let deadline = h.live(now_ms).map(|x| x.deadline_ms).max().unwrap_or(-1);
    let listed = holds(h, now_ms, listed.unwrap_or(0));
    let mut fields = vec![
        (c"limit", Field::Int(i64::from(h.limit))),
        (c"used", Field::Int(h.used(now_ms) as i64)),
        (c"holders", Field::Int(h.count_live(now_ms) as i64)),
        (c"waiters", Field::Int(waiters)),
        (c"fence", Field::Int(h.max_fence(now_ms) as i64)),
        (c"ttl", Field::Int((deadline - now_ms).max(0))),
        (c"deadline", Field::Int(deadline)),
    ];
    if !listed.is_empty() {
        fields.push((c"holds", Field::Maps(&listed)));
    }
    reply::map(ctx, &fields);
}
