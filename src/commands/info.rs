//! `LOCK.INFO key` → null when free; otherwise a map of `fence`, `ttl` (ms
//! left, -1 without expiry), `deadline` (unix ms, -1 without expiry),
//! `granted` (unix ms of the grant), `extends` (extensions since),
//! `waiters`, `mode` (`exclusive` or `shared`), `holders`, and `owner` (the
//! holder's label, when it gave one). For a key held in shared mode,
//! `fence` is the highest holder fence, `ttl` and `deadline` the latest
//! lease, `granted` and `extends` those of the holder with the highest
//! fence. `SEM.INFO key` → null, or a map of `limit`, `used`, `holders`,
//! `waiters`, `fence` (highest), `ttl` and `deadline` (latest lease). Never
//! a token.

use redis_lock_core::args::parse_info_as;
use redis_lock_core::errors::LockError;
use redis_lock_core::holders::Holders;
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
    parse_info_as(redis::args(args), arity)?;
    let key = LockKey::open_read(ctx, &args[1]);
    let now_ms = server::now_ms();
    let waiters = waiting::waiters(server::selected_db(ctx), &args[1]) as i64;
    let deadline = key.deadline();
    let ttl = deadline.map_or(-1, |d| (d - now_ms).max(0));
    match (key.held()?, family) {
        (Held::Free, _) => reply::null(ctx),
        (Held::Exclusive(lock), Family::Lock) => {
            let fields = [
                (c"fence", Field::Int(lock.fence as i64)),
                (c"ttl", Field::Int(ttl)),
                (c"deadline", Field::Int(deadline.unwrap_or(-1))),
                (c"granted", Field::Int(lock.granted_ms)),
                (c"extends", Field::Int(i64::from(lock.extends))),
                (c"waiters", Field::Int(waiters)),
                (c"mode", Field::Bytes(b"exclusive")),
                (c"holders", Field::Int(1)),
                (c"owner", Field::Bytes(lock.owner.get().unwrap_or_default())),
            ];
            // `owner` only when there is one.
            let shown = if lock.owner.get().is_some() { 9 } else { 8 };
            reply::map(ctx, &fields[..shown]);
        }
        (Held::Shared(h), Family::Lock) => shared_info(ctx, h, now_ms, waiters),
        (Held::Semaphore(h), Family::Semaphore) => sem_info(ctx, h, now_ms, waiters),
        _ => return Err(LockError::WrongType),
    }
    Ok(())
}

/// A key held in shared mode: its live readers, as a whole.
fn shared_info(ctx: &Context, h: &Holders, now_ms: i64, waiters: i64) {
    let Some(newest) = h.live(now_ms).max_by_key(|x| x.fence) else {
        return reply::null(ctx);
    };
    let deadline = h.live(now_ms).map(|x| x.deadline_ms).max().unwrap_or(-1);
    let fields = [
        (c"fence", Field::Int(newest.fence as i64)),
        (c"ttl", Field::Int((deadline - now_ms).max(0))),
        (c"deadline", Field::Int(deadline)),
        (c"granted", Field::Int(newest.granted_ms)),
        (c"extends", Field::Int(i64::from(newest.extends))),
        (c"waiters", Field::Int(waiters)),
        (c"mode", Field::Bytes(b"shared")),
        (c"holders", Field::Int(h.count_live(now_ms) as i64)),
    ];
    reply::map(ctx, &fields);
}

fn sem_info(ctx: &Context, h: &Holders, now_ms: i64, waiters: i64) {
    if h.count_live(now_ms) == 0 {
        return reply::null(ctx);
    }
    let deadline = h.live(now_ms).map(|x| x.deadline_ms).max().unwrap_or(-1);
    let fields = [
        (c"limit", Field::Int(i64::from(h.limit))),
        (c"used", Field::Int(h.used(now_ms) as i64)),
        (c"holders", Field::Int(h.count_live(now_ms) as i64)),
        (c"waiters", Field::Int(waiters)),
        (c"fence", Field::Int(h.max_fence(now_ms) as i64)),
        (c"ttl", Field::Int((deadline - now_ms).max(0))),
        (c"deadline", Field::Int(deadline)),
    ];
    reply::map(ctx, &fields);
}
