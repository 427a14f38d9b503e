//! `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION]
//! [OWNER label] [SHARED]` →
//! `[token, fence]`, or null when the key is busy (another holder, others
//! queued before the caller, or a lock-delay after an expiry). With `WAIT`, a
//! busy key queues the caller instead (see `waiting.rs`); with `SESSION`,
//! the lock is also released when the connection closes (see `sessions.rs`).

use redis_lock_core::args::{parse_acquire, AcquireArgs};
use redis_lock_core::decide::{self, Acquire, AcquireCase, KeyState, SharedCase, Want};
use redis_lock_core::errors::LockError;
use redis_lock_core::token::{self, UUID_LEN};
use redis_module::{Context, RedisString};

use crate::lease::{self, Grantee, HolderGrant};
use crate::metrics::{self, Counter};
use crate::redis::key::{Held, LockKey};
use crate::redis::{self, client, reply, server};
use crate::waiting::{self, WaitRequest};
use crate::{config, expiry, sessions};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_acquire(redis::args(args), config::max_ttl_ms())?;
    super::refuse_local_write_on_replica(ctx)?;
    let session = session_of(ctx, parsed.session)?;
    let name = &args[1];
    let db = server::selected_db(ctx);
    let may_wait = parsed.wait_ms.is_some() && server::can_block(ctx);

    let key = LockKey::open_write(ctx, name);
    let holder = match key.held()? {
        Held::Free if !parsed.shared => None,
        Held::Exclusive(lock) if !parsed.shared => Some(lock),
        // Shared mode, or a key held in shared mode: several holders.
        _ => {
            let want = if parsed.shared {
                Want::Shared
            } else {
                Want::Exclusive
            };
            return acquire_hold(ctx, key, name, &parsed, want, session);
        }
    };
    // Read after opening the key: opening expires a lease that ran out,
    // which is what starts a lock-delay.
    let now_ms = server::now_ms();
    let holder = holder.as_deref();
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
    let caller = Caller {
        parsed: &parsed,
        want: Want::Exclusive,
        session,
        db,
        now_ms,
    };
    apply(ctx, key, name, &caller, decision)
}

/// `SESSION`: the calling client's id. Inside a script the client is the
/// script engine's, which never disconnects: a binding to it would be a lie.
pub(super) fn session_of(ctx: &Context, session: bool) -> Result<Option<u64>, LockError> {
    match session {
        true if server::in_script(ctx) => Err(LockError::SessionInScript),
        true => Ok(Some(client::id(ctx))),
        false => Ok(None),
    }
}

/// `LOCK.ACQUIRE … SHARED`, `SEM.ACQUIRE`, and `LOCK.ACQUIRE` of a key held
/// in shared mode: the caller wants `want` of `name` (open as `key`).
pub(super) fn acquire_hold(
    ctx: &Context,
    mut key: LockKey,
    name: &RedisString,
    parsed: &AcquireArgs,
    want: Want,
    session: Option<u64>,
) -> Result<(), LockError> {
    let db = server::selected_db(ctx);
    let now_ms = server::now_ms();
    if server::is_master(ctx) {
        lease::expire_holders(ctx, &mut key, name, now_ms);
    }
    let state = waiting::key_state(&key, now_ms);
    let mine = key.held()?.hold_of(parsed.token, now_ms);
    let decision = decide::acquire_shared(&SharedCase {
        key: state,
        mine,
        want,
        token: parsed.token,
        ttl_ms: parsed.ttl_ms,
        now_ms,
        others_waiting: waiting::waiters(db, name) > 0,
        hold: config::hold_policy(),
        may_wait: parsed.wait_ms.is_some() && server::can_block(ctx),
        max_holders: config::max_holders(),
        // A lock-delay keeps everyone off the key, readers and permits too.
        delayed_until_ms: match state {
            KeyState::Free => expiry::delayed_until(db, name, now_ms),
            _ => None,
        },
    });
    let caller = Caller {
        parsed,
        want,
        session,
        db,
        now_ms,
    };
    apply(ctx, key, name, &caller, decision)
}

/// Who asks, and for what.
struct Caller<'a> {
    parsed: &'a AcquireArgs<'a>,
    want: Want,
    session: Option<u64>,
    db: i32,
    now_ms: i64,
}

/// Execute the core's decision for `caller` on `name` (open as `key`): the
/// one place an ACQUIRE (exclusive, shared or of permits) replies, queues,
/// renews or grants.
fn apply(
    ctx: &Context,
    mut key: LockKey,
    name: &RedisString,
    caller: &Caller,
    decision: Result<Acquire, LockError>,
) -> Result<(), LockError> {
    let (parsed, db) = (caller.parsed, caller.db);
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
                session: caller.session,
                owner: parsed.owner,
                want: caller.want,
            };
            waiting::enqueue(ctx, db, name, &request, wake_at_ms)?;
        }
        Acquire::Renew(renewal) => {
            // Renew is only decided for a caller-supplied token.
            let token = parsed.token.unwrap_or_default();
            match caller.want {
                Want::Exclusive => {
                    lease::renew(ctx, &mut key, name, token, &renewal, parsed.owner)?
                }
                _ => lease::renew_holder(ctx, &mut key, name, token, &renewal, parsed.owner)?,
            }
            drop(key);
            metrics::count(Counter::Renewals);
            waiting::wake_at(ctx, db, name, renewal.wake_at_ms());
            if let Some(client) = caller.session {
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
                now_ms: caller.now_ms,
                deadline_ms,
            };
            let (limit, count) = match caller.want {
                Want::Exclusive => (None, 1),
                Want::Shared => (Some(0), 1),
                Want::Permits { limit, count } => (Some(limit), count),
            };
            let fence = match limit {
                None => lease::grant(ctx, &mut key, name, &grantee)?,
                Some(limit) => lease::grant_holder(
                    ctx,
                    &mut key,
                    name,
                    &HolderGrant {
                        grantee,
                        limit,
                        count,
                    },
                )?,
            };
            drop(key);
            if let Some(client) = caller.session {
                sessions::bind(ctx, client, db, name, fence);
            }
            reply::grant(ctx, token, fence);
        }
    }
    Ok(())
}
