//! The lock rules, with no Redis types: who gets the lock, who may extend or
//! release it, what the next fence is, and when a lease has run out.
//!
//! Every function takes the time it needs as an argument, so the rules are
//! tested here without a server (see also [`crate::model`]).

use crate::errors::LockError;

/// Largest fence handed out: 2^53 - 1, so JavaScript and JSON read it exactly.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// Largest `ttl-ms` accepted by ACQUIRE and EXTEND: 24 hours. A holder that needs
/// longer extends its lease; a larger value is far more often a unit mistake
/// (seconds or microseconds sent as milliseconds) than a real need.
pub const MAX_TTL_MS: i64 = 86_400_000;

/// Largest `WAIT timeout-ms`: 365 days. `0` waits without a limit.
pub const MAX_WAIT_MS: i64 = 31_536_000_000;

/// Tokens are 1 to 256 bytes, binary-safe.
pub const MAX_TOKEN_LEN: usize = 256;

/// What ACQUIRE does to a key, given who holds it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireDecision {
    /// The key is free: grant it with a new fence.
    Grant,
    /// The caller already holds it: same fence, lease reset to `ttl-ms`.
    Renew,
    /// Someone else holds it.
    Refuse,
}

/// `holder` is the token of the live lock on the key, if any. `token` is the
/// caller's, or `None` when the server is to draw a fresh one, which cannot
/// match any holder. `others_waiting` is true when clients are queued for the
/// key: a free key then goes to the head of the queue, never to a newcomer (no
/// barging), while the holder may still renew.
pub fn decide_acquire(
    holder: Option<&[u8]>,
    token: Option<&[u8]>,
    others_waiting: bool,
) -> AcquireDecision {
    match holder {
        None if others_waiting => AcquireDecision::Refuse,
        None => AcquireDecision::Grant,
        Some(h) if Some(h) == token => AcquireDecision::Renew,
        Some(_) => AcquireDecision::Refuse,
    }
}

/// EXTEND and RELEASE act only for the token that holds the lock.
pub fn is_holder(holder: Option<&[u8]>, token: &[u8]) -> bool {
    holder == Some(token)
}

/// The fence for the next grant: above every fence this server has issued
/// (`high_water`) and at least the wall clock in microseconds, so that a server
/// that lost its history (a promoted replica that missed grants, an AOF without
/// them) still issues fences above the lost ones as long as its clock is not
/// behind. `None` when the fence would pass [`MAX_FENCE`].
pub fn next_fence(high_water: u64, now_us: u64) -> Option<u64> {
    let fence = high_water.checked_add(1)?.max(now_us);
    (fence <= MAX_FENCE).then_some(fence)
}

/// The absolute deadline of a lease of `ttl_ms` starting at `now_ms`.
pub fn deadline_ms(now_ms: i64, ttl_ms: i64) -> Result<i64, LockError> {
    now_ms.checked_add(ttl_ms).ok_or(LockError::TtlOverflow)
}

/// Redis' own rule (`keyIsExpired`): a key whose deadline is `now` is still
/// alive; it is gone once `now` passes the deadline.
pub fn is_live(deadline_ms: i64, now_ms: i64) -> bool {
    now_ms <= deadline_ms
}

/// A TTL must be in `1..=MAX_TTL_MS`.
pub fn check_ttl(ttl_ms: i64) -> Result<i64, LockError> {
    if ttl_ms <= 0 {
        Err(LockError::TtlNotPositive)
    } else if ttl_ms > MAX_TTL_MS {
        Err(LockError::TtlTooLarge)
    } else {
        Ok(ttl_ms)
    }
}

/// A WAIT timeout must be in `0..=MAX_WAIT_MS`; 0 means no limit.
pub fn check_wait(wait_ms: i64) -> Result<i64, LockError> {
    if wait_ms < 0 {
        Err(LockError::WaitNegative)
    } else if wait_ms > MAX_WAIT_MS {
        Err(LockError::WaitTooLarge)
    } else {
        Ok(wait_ms)
    }
}

pub fn check_token(token: &[u8]) -> Result<&[u8], LockError> {
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        Err(LockError::TokenLength)
    } else {
        Ok(token)
    }
}

pub fn check_fence(fence: u64) -> Result<u64, LockError> {
    if fence == 0 || fence > MAX_FENCE {
        Err(LockError::FenceInvalid)
    } else {
        Ok(fence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_key_is_granted_own_token_renews_foreign_token_is_refused() {
        assert_eq!(
            decide_acquire(None, Some(b"a"), false),
            AcquireDecision::Grant
        );
        assert_eq!(decide_acquire(None, None, false), AcquireDecision::Grant);
        assert_eq!(
            decide_acquire(Some(b"a"), Some(b"a"), false),
            AcquireDecision::Renew
        );
        assert_eq!(
            decide_acquire(Some(b"a"), Some(b"b"), false),
            AcquireDecision::Refuse
        );
        assert_eq!(
            decide_acquire(Some(b"a"), Some(b"a "), false),
            AcquireDecision::Refuse
        );
        assert_eq!(
            decide_acquire(Some(b"a"), None, false),
            AcquireDecision::Refuse
        );
    }

    #[test]
    fn a_free_key_with_waiters_is_not_granted_to_a_newcomer_but_the_holder_renews() {
        assert_eq!(
            decide_acquire(None, Some(b"a"), true),
            AcquireDecision::Refuse
        );
        assert_eq!(decide_acquire(None, None, true), AcquireDecision::Refuse);
        assert_eq!(
            decide_acquire(Some(b"a"), Some(b"a"), true),
            AcquireDecision::Renew
        );
        assert_eq!(
            decide_acquire(Some(b"a"), Some(b"b"), true),
            AcquireDecision::Refuse
        );
    }

    #[test]
    fn fence_follows_the_clock_and_never_goes_back() {
        assert_eq!(next_fence(0, 1_000), Some(1_000));
        assert_eq!(next_fence(5_000, 1_000), Some(5_001));
        assert_eq!(next_fence(999, 1_000), Some(1_000));
        assert_eq!(next_fence(1_000, 1_000), Some(1_001));
    }

    #[test]
    fn fence_stops_below_two_to_the_53() {
        assert_eq!(next_fence(MAX_FENCE - 1, 0), Some(MAX_FENCE));
        assert_eq!(next_fence(MAX_FENCE, 0), None);
        assert_eq!(next_fence(0, MAX_FENCE + 1), None);
        assert_eq!(next_fence(u64::MAX, 0), None);
    }

    #[test]
    fn expiry_is_exact_at_the_boundary() {
        assert!(is_live(100, 99));
        assert!(is_live(100, 100));
        assert!(!is_live(100, 101));
    }

    #[test]
    fn ttl_limits() {
        assert_eq!(check_ttl(0), Err(LockError::TtlNotPositive));
        assert_eq!(check_ttl(-5), Err(LockError::TtlNotPositive));
        assert_eq!(check_ttl(1), Ok(1));
        assert_eq!(check_ttl(MAX_TTL_MS), Ok(MAX_TTL_MS));
        assert_eq!(check_ttl(MAX_TTL_MS + 1), Err(LockError::TtlTooLarge));
        assert_eq!(deadline_ms(i64::MAX - 1, 2), Err(LockError::TtlOverflow));
        assert_eq!(deadline_ms(1_000, 2), Ok(1_002));
    }

    #[test]
    fn token_limits() {
        assert_eq!(check_token(b""), Err(LockError::TokenLength));
        assert!(check_token(&[0u8; 1]).is_ok());
        assert!(check_token(&[0xffu8; MAX_TOKEN_LEN]).is_ok());
        assert_eq!(
            check_token(&[b'x'; MAX_TOKEN_LEN + 1]),
            Err(LockError::TokenLength)
        );
    }

    #[test]
    fn fence_limits() {
        assert_eq!(check_fence(0), Err(LockError::FenceInvalid));
        assert_eq!(check_fence(1), Ok(1));
        assert_eq!(check_fence(MAX_FENCE), Ok(MAX_FENCE));
        assert_eq!(check_fence(MAX_FENCE + 1), Err(LockError::FenceInvalid));
    }
}
