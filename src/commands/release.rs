//! `LOCK.RELEASE key token` → 1 when `token` held the key and the lock is now
//! gone; 0 otherwise, with nothing changed.

use redis_module::{Context, RedisString};

use crate::args::parse_release;
use crate::errors::LockError;
use crate::rules;
use crate::store::LockKey;
use crate::{effects, reply};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_release(args)?;
    let name = &args[1];

    let key = LockKey::open_write(ctx, name);
    let held = key.lock()?;
    if rules::is_holder(held.map(|l| &*l.holder_token), parsed.token) {
        key.delete();
        effects::released(ctx, name);
        reply::integer(ctx, 1);
    } else {
        reply::integer(ctx, 0);
    }
    Ok(())
}
