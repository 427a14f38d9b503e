//! `LOCK.SETSTATE key token fence deadline-ms [granted-ms extends]`: a
//! grant or an extension as its effect.
//!
//! The master replicates every grant as this command, and the AOF records it,
//! with every value explicit, so a replica or a replay reaches the same state
//! without reading a clock or drawing a token. It is accepted only from the
//! replication link and from AOF loading: a client that could call it could
//! forge a holder or push fences around.

use redis_module::{Context, ContextFlags, RedisString};

use crate::args::parse_setstate;
use crate::errors::LockError;
use crate::lock_type::Lock;
use crate::store::{self, LockKey};
use crate::{effects, fence, reply};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let flags = ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(LockError::SetStateInternal);
    }
    let parsed = parse_setstate(args)?;
    let name = &args[1];

    let mut key = LockKey::open_write(ctx, name);
    key.lock()?;
    key.set(Lock::new(
        parsed.token,
        parsed.fence,
        parsed.granted_ms.unwrap_or_else(store::now_ms),
        parsed.deadline_ms.unwrap_or(-1),
        parsed.extends,
    ))?;
    key.set_deadline(parsed.deadline_ms);
    fence::observe(parsed.fence);
    effects::applied_verbatim(ctx, name);
    reply::ok(ctx);
    Ok(())
}
