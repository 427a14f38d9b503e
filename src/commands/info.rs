//! `LOCK.INFO key` → null when free; otherwise a map of `fence`, `ttl` (ms
//! left, -1 without expiry), `deadline` (unix ms, -1 without expiry),
//! `granted` (unix ms of the grant), `extends` (extensions since) and
//! `waiters`. It never shows the token.

use redis_lock_core::args::parse_info;
use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use crate::redis::key::LockKey;
use crate::redis::{self, reply, server};
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
    reply::integer_map(
        ctx,
        &[
            (c"fence", lock.fence as i64),
            (c"ttl", ttl),
            (c"deadline", deadline.unwrap_or(-1)),
            (c"granted", lock.granted_ms),
            (c"extends", i64::from(lock.extends)),
            (
                c"waiters",
                waiting::waiters(server::selected_db(ctx), &args[1]) as i64,
            ),
        ],
    );
    Ok(())
}
