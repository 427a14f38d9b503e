//! Making a client the holder of a free key (the one sequence shared by an
//! immediate ACQUIRE and a handoff to a waiter), and keeping its lease going
//! (EXTEND, and ACQUIRE by the holder).

use redis_module::{Context, RedisString};

use crate::effects::{self, LockState};
use crate::errors::LockError;
use crate::lock_type::Lock;
use crate::metrics::{self, Counter};
use crate::store::{self, LockKey};
use crate::{config, fence, rules, session, waiting};

pub use crate::token::UUID_LEN;

/// Grant the free key `name` (open as `key`) to `token` for `ttl_ms` from
/// now, with a new fence, and replicate the grant. With `session` (a client
/// id), the lock is also released when that connection closes. Returns the
/// fence and the deadline.
pub fn grant(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
    ttl_ms: i64,
    session: Option<u64>,
) -> Result<(u64, i64), LockError> {
    let granted_ms = store::now_ms();
    let deadline_ms = rules::deadline_ms(granted_ms, ttl_ms)?;
    let fence = fence::issue().ok_or(LockError::FenceExhausted)?;
    key.set(Lock::new(token, fence, granted_ms, deadline_ms, 0))?;
    key.set_deadline(Some(deadline_ms));
    effects::granted(
        ctx,
        name,
        &LockState {
            token,
            fence,
            deadline_ms,
            granted_ms,
            extends: 0,
        },
    );
    metrics::count(Counter::Grants);
    if let Some(client) = session {
        session::bind(ctx, client, store::selected_db(ctx), name.as_slice(), fence);
    }
    Ok((fence, deadline_ms))
}

/// A random UUIDv4 in lowercase hyphenated form, written into `buffer`.
pub fn draw_token(buffer: &mut [u8; UUID_LEN]) -> &[u8] {
    let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    uuid.hyphenated().encode_lower(buffer).as_bytes()
}

/// Move the deadline of the lock `key` (open as `key`, held by `token`) to
/// `ttl_ms` from now, within the hold policy, and replicate it: EXTEND, and
/// ACQUIRE by the holder. Returns the lock's fence.
pub fn extend_lease(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
    ttl_ms: i64,
) -> Result<u64, LockError> {
    let deadline_ms = rules::deadline_ms(store::now_ms(), ttl_ms)?;
    let lock = key.lock_mut().ok_or(LockError::Internal)?;
    if let Err(limit) = rules::check_extend(
        lock.granted_ms,
        lock.extends,
        deadline_ms,
        config::hold_policy(),
    ) {
        metrics::count(Counter::ExtendsLimited);
        return Err(limit);
    }
    lock.extends = lock.extends.saturating_add(1);
    lock.deadline_ms = deadline_ms;
    let state = LockState {
        token,
        fence: lock.fence,
        deadline_ms,
        granted_ms: lock.granted_ms,
        extends: lock.extends,
    };
    key.set_deadline(Some(deadline_ms));
    effects::extended(ctx, name, &state);
    // A shorter lease brings the handoff to waiters forward.
    waiting::wake_at(ctx, store::selected_db(ctx), name.as_slice(), deadline_ms);
    Ok(state.fence)
}
