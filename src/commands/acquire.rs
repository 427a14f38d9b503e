//! `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms]` → `[token, fence]`,
//! or null when the key is busy (another holder, or others queued before the
//! caller). With `WAIT`, a busy key queues the caller instead (see
//! [`crate::waiting`]).

use redis_module::{Context, ContextFlags, RedisString};

use crate::args::parse_acquire;
use crate::errors::LockError;
use crate::grant::{draw_token, grant, UUID_LEN};
use crate::rules::{self, AcquireDecision};
use crate::store::{self, LockKey};
use crate::{effects, reply, waiting};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_acquire(args)?;
    super::refuse_local_write_on_replica(ctx)?;
    let name = &args[1];
    let now_ms = store::now_ms();
    let deadline_ms = rules::deadline_ms(now_ms, parsed.ttl_ms)?;
    let db = store::selected_db(ctx);

    let mut key = LockKey::open_write(ctx, name);
    let held = key.lock()?;
    let mut holder = [0u8; UUID_LEN];
    let others_waiting = waiting::waiters(db, name.as_slice()) > 0;
    match rules::decide_acquire(
        held.map(|l| l.holder_token.bytes(&mut holder)),
        parsed.token,
        others_waiting,
    ) {
        AcquireDecision::Refuse => match parsed.wait_ms {
            Some(wait_ms) if can_block(ctx) => {
                let lease_end = if held.is_some() {
                    key.deadline()
                } else {
                    Some(now_ms)
                };
                drop(key);
                waiting::block(
                    ctx,
                    db,
                    name.as_slice(),
                    parsed.token,
                    parsed.ttl_ms,
                    wait_ms,
                )?;
                // Make sure someone hands the key over: at the holder's
                // deadline, or now if it is free and only queued for.
                if let Some(at) = lease_end {
                    waiting::wake_at(ctx, db, name.as_slice(), at);
                }
            }
            _ => reply::null(ctx),
        },
        AcquireDecision::Renew => {
            let fence = held.map_or(0, |l| l.fence);
            key.set_deadline(Some(deadline_ms));
            drop(key);
            effects::deadline_moved(ctx, name, deadline_ms);
            // A shorter lease brings the handoff to waiters forward.
            waiting::wake_at(ctx, db, name.as_slice(), deadline_ms);
            // Renew is only decided for a caller-supplied token.
            reply::grant(ctx, parsed.token.unwrap_or_default(), fence);
        }
        AcquireDecision::Grant => {
            let mut drawn = [0u8; UUID_LEN];
            let token = match parsed.token {
                Some(token) => token,
                None => draw_token(&mut drawn),
            };
            let fence = grant(ctx, &mut key, name, token, deadline_ms)?;
            reply::grant(ctx, token, fence);
        }
    }
    Ok(())
}

/// MULTI/EXEC, Lua and other contexts that must not block: there, WAIT
/// behaves as if absent.
fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING)
}
