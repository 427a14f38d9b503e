//! `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION]` →
//! `[token, fence]`, or null when the key is busy (another holder, others
//! queued before the caller, or a lock-delay after an expiry). With `WAIT`, a
//! busy key queues the caller instead (see [`crate::waiting`]); with
//! `SESSION`, the lock is also released when the connection closes (see
//! [`crate::session`]).

use redis_module::{Context, ContextFlags, RedisString};

use crate::args::parse_acquire;
use crate::errors::LockError;
use crate::grant::{draw_token, extend_lease, grant, UUID_LEN};
use crate::metrics::{self, Counter};
use crate::rules::{self, AcquireDecision};
use crate::store::{self, LockKey};
use crate::{config, expiry, reply, session, waiting};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_acquire(args)?;
    super::refuse_local_write_on_replica(ctx)?;
    rules::check_ttl_limit(parsed.ttl_ms, config::max_ttl_ms())?;
    let name = &args[1];
    let db = store::selected_db(ctx);
    let session = match parsed.session {
        // Inside a script the client is the script engine's, which never
        // disconnects: a binding to it would be a lie.
        true if ctx.get_flags().contains(ContextFlags::LUA) => {
            return Err(LockError::SessionInScript)
        }
        true => Some(session::client_id(ctx)),
        false => None,
    };

    let mut key = LockKey::open_write(ctx, name);
    let held = key.lock()?;
    let mut holder = [0u8; UUID_LEN];
    let others_waiting = waiting::waiters(db, name.as_slice()) > 0;
    // Looked up after opening the key: opening expires a lease that ran out,
    // which is what starts a lock-delay.
    let now_ms = store::now_ms();
    let delayed = match held {
        None => expiry::delayed_until(db, name.as_slice(), now_ms),
        Some(_) => None,
    };
    match rules::decide_acquire(
        held.map(|l| l.holder_token.bytes(&mut holder)),
        parsed.token,
        others_waiting || delayed.is_some(),
    ) {
        AcquireDecision::Refuse => match parsed.wait_ms {
            Some(wait_ms) if can_block(ctx) => {
                // Make sure someone hands the key over: at the holder's
                // deadline, when the lock-delay ends, or now if the key is
                // free and only queued for.
                let lease_end = match held {
                    Some(_) => key.deadline(),
                    None => Some(delayed.map_or(now_ms, |until| until - 1)),
                };
                drop(key);
                waiting::block(
                    ctx,
                    db,
                    name.as_slice(),
                    parsed.token,
                    parsed.ttl_ms,
                    wait_ms,
                    session,
                )?;
                if let Some(at) = lease_end {
                    waiting::wake_at(ctx, db, name.as_slice(), at);
                }
            }
            _ => {
                metrics::count(Counter::Refused);
                reply::null(ctx);
            }
        },
        AcquireDecision::Renew => {
            // Renew is only decided for a caller-supplied token.
            let token = parsed.token.unwrap_or_default();
            let fence = extend_lease(ctx, &mut key, name, token, parsed.ttl_ms)?;
            drop(key);
            metrics::count(Counter::Renewals);
            if let Some(client) = session {
                session::bind(ctx, client, db, name.as_slice(), fence);
            }
            reply::grant(ctx, token, fence);
        }
        AcquireDecision::Grant => {
            let mut drawn = [0u8; UUID_LEN];
            let token = match parsed.token {
                Some(token) => token,
                None => draw_token(&mut drawn),
            };
            let (fence, _) = grant(ctx, &mut key, name, token, parsed.ttl_ms, session)?;
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
