//! `LOCK.INFO key` → null when free; otherwise a map of `fence`, `ttl` (ms
//! left, -1 without expiry), `deadline` (unix ms, -1 without expiry),
//! `granted` (unix ms of the grant), `extends` (extensions since),
//! `waiters`, and `owner` (the holder's label, when it gave one). It never
//! shows the token.

use redis_lock_core::args::parse_info;
use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use crate::redis::key::LockKey;
use crate::redis::reply::{self, Field};
use crate::redis::{self, server};
use crate::waiting;

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    parse_info(redis::args(args))?;
    let key = LockKey::open_read(ctx, &args[1]);
    let Some(lock) = key.lock()? else {
        reply::null(ctx);
        return Ok(());
    };
    let deadline = key.deadline();
    let ttl = deadline.map_or(-1, |d| (d - server::now_ms()).max(0));
    let waiters = waiting::waiters(server::selected_db(ctx), &args[1]) as i64;
    let fields = [
        (c"fence", Field::Int(lock.fence as i64)),
        (c"ttl", Field::Int(ttl)),
        (c"deadline", Field::Int(deadline.unwrap_or(-1))),
        (c"granted", Field::Int(lock.granted_ms)),
        (c"extends", Field::Int(i64::from(lock.extends))),
        (c"waiters", Field::Int(waiters)),
        (c"owner", Field::Bytes(lock.owner.get().unwrap_or_default())),
    ];
    // `owner` only when there is one: the first six fields are as before.
    let shown = if lock.owner.get().is_some() { 7 } else { 6 };
    reply::map(ctx, &fields[..shown]);
    Ok(())
}
