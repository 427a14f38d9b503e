//! `LOCK.ACQUIRE key ttl-ms [TOKEN token]` → `[token, fence]`, or null when
//! another token holds the key.

use redis_module::{Context, RedisString};

use crate::args::parse_acquire;
use crate::errors::LockError;
use crate::lock_type::Lock;
use crate::rules::{self, AcquireDecision};
use crate::store::{self, LockKey};
use crate::{effects, fence, reply};

/// Length of a hyphenated UUID.
const UUID_LEN: usize = 36;

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_acquire(args)?;
    let name = &args[1];
    let deadline_ms = rules::deadline_ms(store::now_ms(), parsed.ttl_ms)?;

    let key = LockKey::open_write(ctx, name);
    let held = key.lock()?;
    match rules::decide_acquire(held.map(|l| &*l.holder_token), parsed.token) {
        AcquireDecision::Refuse => reply::null(ctx),
        AcquireDecision::Renew => {
            let fence = held.map_or(0, |l| l.fence);
            key.set_deadline(Some(deadline_ms));
            effects::deadline_moved(ctx, name, deadline_ms);
            // Renew is only decided for a caller-supplied token.
            reply::grant(ctx, parsed.token.unwrap_or_default(), fence);
        }
        AcquireDecision::Grant => {
            let mut drawn = [0u8; UUID_LEN];
            let token = match parsed.token {
                Some(token) => token,
                None => draw_token(&mut drawn),
            };
            let fence = fence::issue().ok_or(LockError::FenceExhausted)?;
            key.set(Lock {
                fence,
                holder_token: token.into(),
            })?;
            key.set_deadline(Some(deadline_ms));
            effects::granted(ctx, name, token, fence, deadline_ms);
            reply::grant(ctx, token, fence);
        }
    }
    Ok(())
}

/// A random UUIDv4 in lowercase hyphenated form, written into `buffer`.
fn draw_token(buffer: &mut [u8; UUID_LEN]) -> &[u8] {
    let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    uuid.hyphenated().encode_lower(buffer).as_bytes()
}
