//! `LOCK.SETSTATE key token state` (the fence, deadline, grant time,
//! extensions and label packed, `redis_lock_core::effect`), or the text form
//! of earlier versions and of AOF rewrites, `LOCK.SETSTATE key token fence
//! deadline-ms [granted-ms [extends [OWNER label]]]`: a grant or an extension
//! as its effect.
//!
//! The master replicates every grant as this command, and the AOF records it,
//! with every value explicit, so a replica or a replay reaches the same state
//! without reading a clock or drawing a token. It is accepted only from the
//! replication link and from AOF loading: a client that could call it could
//! forge a holder or push fences around.

use redis_lock_core::args::parse_setstate;
use redis_lock_core::errors::LockError;
use redis_lock_core::lock::Lock;
use redis_module::{Context, RedisString};

use crate::redis::key::LockKey;
use crate::redis::{self, replicate, reply, server};
use crate::{fence, observers};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if !server::is_replicated_or_loading(ctx) {
        return Err(LockError::SetStateInternal);
    }
    let parsed = parse_setstate(redis::args(args))?;
    let name = &args[1];

    let mut key = LockKey::open_write(ctx, name);
    // The master's state replaces whatever lock the key held.
    key.held()?;
    key.store(
        Lock::new(
            parsed.token,
            parsed.fence,
            parsed.granted_ms.unwrap_or_else(server::now_ms),
            parsed.deadline_ms.unwrap_or(-1),
            parsed.extends,
        )
        .with_owner(parsed.owner),
    )?;
    fence::observe(parsed.fence);
    drop(key);
    observers::changed_here(ctx, name);
    replicate::touched(ctx, name);
    replicate::verbatim(ctx);
    reply::ok(ctx);
    Ok(())
}
