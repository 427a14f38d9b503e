//! `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION]
//! [OWNER label]` →
//! `[token, fence]`, or null when the key is busy (another holder, others
//! queued before the caller, or a lock-delay after an expiry). With `WAIT`, a
//! busy key queues the caller instead (see `waiting.rs`); with `SESSION`,
//! the lock is also released when the connection closes (see `sessions.rs`).

use redis_lock_core::args::parse_acquire;
use redis_lock_core::decide::{self, Acquire, AcquireCase};
use redis_lock_core::errors::LockError;
use redis_lock_core::token::{self, UUID_LEN};
use redis_module::{Context, RedisString};

use crate::lease::{self, Grantee};
use crate::metrics::{self, Counter};
use crate::redis::key::LockKey;
use crate::redis::{self, client, reply, server};
use crate::waiting::{self, WaitRequest};
use crate::{config, expiry, sessions};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_acquire(redis::args(args), config::max_ttl_ms())?;
    super::refuse_local_write_on_replica(ctx)?;
    let session = match parsed.session {
        // Inside a script the client is the script engine's, which never
        // disconnects: a binding to it would be a lie.
        true if server::in_script(ctx) => return Err(LockError::SessionInScript),
        true => Some(client::id(ctx)),
        false => None,
    };
    let name = &args[1];
    let db = server::selected_db(ctx);
    let may_wait = parsed.wait_ms.is_some() && server::can_block(ctx);

    let mut key = LockKey::open_write(ctx, name);
    let holder = key.lock()?;
    // Read after opening the key: opening expires a lease that ran out,
    // which is what starts a lock-delay.
    let now_ms = server::now_ms();
    let decision = decide::acquire(&AcquireCase {
        holder,
        holder_deadline_ms: match holder {
            Some(_) if may_wait => key.deadline(),
            _ => None,
        },
        token: parsed.token,
        ttl_ms: parsed.ttl_ms,
        now_ms,
        others_waiting: waiting::waiters(db, name) > 0,
        delayed_until_ms: match holder {
            None => expiry::delayed_until(db, name, now_ms),
            Some(_) => None,
        },
        hold: config::hold_policy(),
        may_wait,
    });
    let decision = match decision {
        Ok(decision) => decision,
        Err(error) => {
            if matches!(error, LockError::HoldLimit | LockError::ExtendLimit) {
                metrics::count(Counter::ExtendsLimited);
            }
            return Err(error);
        }
    };
    match decision {
        Acquire::Refuse => {
            metrics::count(Counter::Refused);
            reply::null(ctx);
        }
        Acquire::Queue { wake_at_ms } => {
            drop(key);
            let request = WaitRequest {
                token: parsed.token,
                ttl_ms: parsed.ttl_ms,
                wait_ms: parsed.wait_ms.unwrap_or(0),
                session,
                owner: parsed.owner,
            };
            waiting::enqueue(ctx, db, name, &request, wake_at_ms)?;
        }
        Acquire::Renew(renewal) => {
            // Renew is only decided for a caller-supplied token.
            let token = parsed.token.unwrap_or_default();
            lease::renew(ctx, &mut key, name, token, &renewal, parsed.owner)?;
            drop(key);
            metrics::count(Counter::Renewals);
            waiting::wake_at(ctx, db, name, renewal.wake_at_ms());
            if let Some(client) = session {
                sessions::bind(ctx, client, db, name, renewal.fence);
            }
            reply::grant(ctx, token, renewal.fence);
        }
        Acquire::Grant { deadline_ms } => {
            let mut drawn = [0u8; UUID_LEN];
            let token = match parsed.token {
                Some(token) => token,
                None => token::draw(&mut drawn),
            };
            let grantee = Grantee {
                token,
                owner: parsed.owner,
                now_ms,
                deadline_ms,
            };
            let fence = lease::grant(ctx, &mut key, name, &grantee)?;
            drop(key);
            if let Some(client) = session {
                sessions::bind(ctx, client, db, name, fence);
            }
            reply::grant(ctx, token, fence);
        }
    }
    Ok(())
}
