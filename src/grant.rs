//! Making a client the holder of a free key: the one sequence shared by an
//! immediate ACQUIRE and a handoff to a waiter.

use redis_module::{Context, RedisString};

use crate::errors::LockError;
use crate::lock_type::Lock;
use crate::store::LockKey;
use crate::token::StoredToken;
use crate::{effects, fence};

pub use crate::token::UUID_LEN;

/// Grant the free key `name` (open as `key`) to `token` until `deadline_ms`,
/// with a new fence, and replicate the grant. Returns the fence.
pub fn grant(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    token: &[u8],
    deadline_ms: i64,
) -> Result<u64, LockError> {
    let fence = fence::issue().ok_or(LockError::FenceExhausted)?;
    key.set(Lock {
        fence,
        holder_token: StoredToken::new(token),
    })?;
    key.set_deadline(Some(deadline_ms));
    effects::granted(ctx, name, token, fence, deadline_ms);
    Ok(fence)
}

/// A random UUIDv4 in lowercase hyphenated form, written into `buffer`.
pub fn draw_token(buffer: &mut [u8; UUID_LEN]) -> &[u8] {
    let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    uuid.hyphenated().encode_lower(buffer).as_bytes()
}
