//! The lock rules, with no Redis types: who gets the lock, who may extend or
//! release it, what the next fence is, and when a lease has run out.
//!
//! Every function takes the time it needs as an argument, so the rules are
//! tested here without a server. [`crate::decide`] combines them into one
//! decision per command and event.

use crate::errors::LockError;

// The limits are spelled out in the error messages; keep the two in step.
const _: () = assert!(MAX_TOKEN_LEN == 256);
const _: () = assert!(MAX_WAIT_MS == 31_536_000_000);
const _: () = assert!(MAX_OWNER_LEN == 128);

/// Largest fence handed out: 2^53 - 1, so JavaScript and JSON read it exactly.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// Default of `lock.max-ttl-ms`, the largest `ttl-ms` ACQUIRE and EXTEND
/// accept: 24 hours. A holder that needs longer extends its lease; a larger
/// value is far more often a unit mistake (seconds or microseconds sent as
/// milliseconds) than a real need.
pub const DEFAULT_MAX_TTL_MS: i64 = 86_400_000;

/// The most `lock.max-ttl-ms`, `lock.max-hold-ms` and `lock.expiry-delay-ms`
/// may be set to: 365 days.
pub const CEILING_MS: i64 = 31_536_000_000;

/// Largest `WAIT timeout-ms`: 365 days. `0` waits without a limit.
pub const MAX_WAIT_MS: i64 = 31_536_000_000;

/// Tokens are 1 to 256 bytes, binary-safe.
pub const MAX_TOKEN_LEN: usize = 256;

/// The most extensions a hold counts (the packed effect keeps the top bit
/// of its 32 for a flag, `effect.rs`); more leave the count there.
pub const MAX_EXTENDS: u32 = (1 << 31) - 1;

/// Owner labels (`OWNER label`) are 1 to 128 bytes, binary-safe.
pub const MAX_OWNER_LEN: usize = 128;

/// The fence for the next grant: above every fence this server has issued
/// (`high_water`) and at least the wall clock in microseconds, so that a server
/// that lost its history (a promoted replica that missed grants, an AOF without
/// them) still issues fences above the lost ones as long as its clock is not
/// behind. `None` when the fence would pass [`MAX_FENCE`].
#[inline]
pub fn next_fence(high_water: u64, now_us: u64) -> Option<u64> {
    let fence = high_water.checked_add(1)?.max(now_us);
    (fence <= MAX_FENCE).then_some(fence)
}

/// The absolute deadline of a lease of `ttl_ms` starting at `now_ms`.
#[inline]
pub fn deadline_ms(now_ms: i64, ttl_ms: i64) -> Result<i64, LockError> {
    now_ms.checked_add(ttl_ms).ok_or(LockError::TtlOverflow)
}

/// Milliseconds left until `deadline_ms` at `now_ms` (0 once it passed),
/// or -1 without a deadline: every reply's `ttl`.
pub fn ms_left(deadline_ms: Option<i64>, now_ms: i64) -> i64 {
    deadline_ms.map_or(-1, |d| (d - now_ms).max(0))
}

/// When a wait of `wait_ms` that starts at `now_ms` ends; none for 0 (no
/// limit).
pub fn wait_ends(now_ms: i64, wait_ms: i64) -> Option<i64> {
    (wait_ms > 0).then(|| now_ms.saturating_add(wait_ms))
}

/// Milliseconds left in a wait that ends at `ends_ms` (at least 1 while it
/// still waits), or 0 for a wait with no limit: `LOCK.QUEUE`'s `wait`.
pub fn wait_left_ms(ends_ms: Option<i64>, now_ms: i64) -> i64 {
    ends_ms.map_or(0, |end| (end - now_ms).max(1))
}

/// Whether something that happened at `since_ms` is at most `lifetime_ms`
/// old at `now_ms`.
pub fn within(since_ms: i64, lifetime_ms: i64, now_ms: i64) -> bool {
    now_ms <= since_ms.saturating_add(lifetime_ms)
}

/// Redis' own rule (`keyIsExpired`): a key whose deadline is `now` is still
/// alive; it is gone once `now` passes the deadline.
pub fn is_live(deadline_ms: i64, now_ms: i64) -> bool {
    now_ms <= deadline_ms
}

/// The first millisecond at which a lease with this deadline is over (see
/// [`is_live`]): when a hand-off to the next waiter should look at the key.
pub fn lease_over_at(deadline_ms: i64) -> i64 {
    deadline_ms.saturating_add(1)
}

/// A TTL must be positive (the configured maximum is checked by
/// [`check_ttl_limit`], once the command knows it).
#[inline]
pub fn check_ttl(ttl_ms: i64) -> Result<i64, LockError> {
    if ttl_ms <= 0 {
        Err(LockError::TtlNotPositive)
    } else {
        Ok(ttl_ms)
    }
}

/// A TTL must not exceed `lock.max-ttl-ms`.
#[inline]
pub fn check_ttl_limit(ttl_ms: i64, max_ttl_ms: i64) -> Result<i64, LockError> {
    if ttl_ms > max_ttl_ms {
        Err(LockError::TtlTooLarge)
    } else {
        Ok(ttl_ms)
    }
}

/// The hold policy: how long and how often a holder may keep its lease going
/// (`lock.max-hold-ms`, `lock.max-extends`); 0 means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HoldPolicy {
    pub max_hold_ms: i64,
    pub max_extends: u32,
}

/// May a holder granted at `granted_ms`, that has extended `extends` times,
/// move its deadline to `new_deadline_ms`? An extension that would carry the
/// lease past the hold limit is refused whole (the lease keeps its current
/// deadline), so a holder learns of the limit while it still holds the lock.
pub fn check_extend(
    granted_ms: i64,
    extends: u32,
    new_deadline_ms: i64,
    policy: HoldPolicy,
) -> Result<(), LockError> {
    if policy.max_extends > 0 && extends >= policy.max_extends {
        return Err(LockError::ExtendLimit);
    }
    if policy.max_hold_ms > 0 && new_deadline_ms > granted_ms.saturating_add(policy.max_hold_ms) {
        return Err(LockError::HoldLimit);
    }
    Ok(())
}

/// Lock-delay (`lock.expiry-delay-ms`): a lock that expired while held at
/// `expired_at_ms` may not be granted again before this time.
pub fn embargo_until(expired_at_ms: i64, delay_ms: i64) -> i64 {
    expired_at_ms.saturating_add(delay_ms)
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

#[inline]
pub fn check_token(token: &[u8]) -> Result<&[u8], LockError> {
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        Err(LockError::TokenLength)
    } else {
        Ok(token)
    }
}

#[inline]
pub fn check_owner(owner: &[u8]) -> Result<&[u8], LockError> {
    if owner.is_empty() || owner.len() > MAX_OWNER_LEN {
        Err(LockError::OwnerLength)
    } else {
        Ok(owner)
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
        assert_eq!(lease_over_at(100), 101);
        assert!(!is_live(100, lease_over_at(100)));
        assert_eq!(lease_over_at(i64::MAX), i64::MAX);
    }

    #[test]
    fn ttl_limits() {
        assert_eq!(check_ttl(0), Err(LockError::TtlNotPositive));
        assert_eq!(check_ttl(-5), Err(LockError::TtlNotPositive));
        assert_eq!(check_ttl(1), Ok(1));
        assert_eq!(
            check_ttl(DEFAULT_MAX_TTL_MS + 1),
            Ok(DEFAULT_MAX_TTL_MS + 1)
        );
        assert_eq!(check_ttl_limit(1000, 1000), Ok(1000));
        assert_eq!(check_ttl_limit(1001, 1000), Err(LockError::TtlTooLarge));
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
    fn owner_limits() {
        assert_eq!(check_owner(b""), Err(LockError::OwnerLength));
        assert!(check_owner(b"h").is_ok());
        assert!(check_owner(&[0xffu8; MAX_OWNER_LEN]).is_ok());
        assert_eq!(
            check_owner(&[b'x'; MAX_OWNER_LEN + 1]),
            Err(LockError::OwnerLength)
        );
        assert!(LockError::OwnerLength.as_str().contains("128"));
    }

    #[test]
    fn fence_limits() {
        assert_eq!(check_fence(0), Err(LockError::FenceInvalid));
        assert_eq!(check_fence(1), Ok(1));
        assert_eq!(check_fence(MAX_FENCE), Ok(MAX_FENCE));
        assert_eq!(check_fence(MAX_FENCE + 1), Err(LockError::FenceInvalid));
    }

    #[test]
    fn hold_policy_limits_extends_and_total_hold() {
        let none = HoldPolicy::default();
        assert_eq!(check_extend(0, 1_000_000, i64::MAX, none), Ok(()));

        let extends = HoldPolicy {
            max_hold_ms: 0,
            max_extends: 2,
        };
        assert_eq!(check_extend(0, 0, 10, extends), Ok(()));
        assert_eq!(check_extend(0, 1, 10, extends), Ok(()));
        assert_eq!(check_extend(0, 2, 10, extends), Err(LockError::ExtendLimit));

        let hold = HoldPolicy {
            max_hold_ms: 5_000,
            max_extends: 0,
        };
        // Exactly at the limit is allowed; one ms past it is not.
        assert_eq!(check_extend(1_000, 9, 6_000, hold), Ok(()));
        assert_eq!(
            check_extend(1_000, 9, 6_001, hold),
            Err(LockError::HoldLimit)
        );
        // No overflow for a grant time near the end of time.
        assert_eq!(check_extend(i64::MAX - 1, 0, i64::MAX, hold), Ok(()));
    }

    #[test]
    fn embargo_starts_at_the_expiry() {
        assert_eq!(embargo_until(10_000, 0), 10_000);
        assert_eq!(embargo_until(10_000, 2_500), 12_500);
        assert_eq!(embargo_until(i64::MAX, 1), i64::MAX);
    }

    #[test]
    fn limits_in_messages_match_the_constants() {
        assert!(LockError::TtlTooLarge.as_str().contains("lock.max-ttl-ms"));
        assert!(LockError::TokenLength
            .as_str()
            .contains(&MAX_TOKEN_LEN.to_string()));
        assert!(LockError::FenceInvalid
            .as_str()
            .contains(&MAX_FENCE.to_string()));
    }
}
