//! Lease groups (`LOCK.LEASE`): one lease, kept alive by one `KEEPALIVE`,
//! that every hold attached to it (`LEASE id` on an acquire) lives exactly
//! as long as; revoking it, or letting it run out, ends them all at once.
//! What this file decides, with no Redis types: the lease's id and its text,
//! when it is over, and how far ahead of it an attached key's TTL runs.
//!
//! Why a horizon: a hold's end is its key's Redis TTL, which `PTTL` shows
//! and Redis expires, and a `KEEPALIVE` must cost the same whether one hold
//! or 10,000 are attached, so it cannot move every key's TTL. An attached
//! key's TTL runs ahead of the lease, to the lease's deadline plus
//! [`horizon`]; the module itself ends the attached holds when the lease
//! ends (its timer), and a `KEEPALIVE` moves forward only the TTLs of the
//! keys whose horizon the lease is about to reach. The horizon is a
//! multiple of the lease's ttl, larger for a larger group, so that keys come
//! due rarely: on average well under one key per `KEEPALIVE`, whatever the
//! group's size. The TTL never ends before the hold does; a key outlives
//! its hold only if this server's lease state is lost (a failover to a
//! replica that missed the lease, a restart without persistence), and then
//! no longer than its horizon.

use crate::rules;

/// Bytes of a lease id (its text is twice as many lowercase hex digits).
pub const LEASE_ID_BYTES: usize = 16;
/// Length of a lease id's text.
pub const LEASE_ID_LEN: usize = 2 * LEASE_ID_BYTES;

/// A lease's id: 16 random bytes, written as 32 lowercase hex digits. Like a
/// token it is a secret: whoever knows it keeps the lease's holds alive or
/// revokes them. It is never shown but to the client that granted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub [u8; LEASE_ID_BYTES]);

impl LeaseId {
    /// A fresh, unguessable id.
    pub fn draw() -> LeaseId {
        LeaseId(rand::random())
    }

    /// The id `text` spells, if it is 32 lowercase hex digits.
    pub fn parse(text: &[u8]) -> Option<LeaseId> {
        let text: &[u8; LEASE_ID_LEN] = text.try_into().ok()?;
        let digit = |b: u8| match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        };
        let mut id = [0u8; LEASE_ID_BYTES];
        for (byte, pair) in id.iter_mut().zip(text.chunks_exact(2)) {
            *byte = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(LeaseId(id))
    }

    /// The id's text, in `buffer`.
    pub fn text<'a>(&self, buffer: &'a mut [u8; LEASE_ID_LEN]) -> &'a [u8] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for (pair, byte) in buffer.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0xf)];
        }
        buffer
    }
}

/// How many of its ttls ahead of a lease an attached key's TTL runs, at
/// least (see the file's comment).
pub const HORIZON_TTLS: i64 = 64;

/// How far ahead of a lease's deadline the TTL of a key attached to it runs,
/// for a lease of `ttl_ms` with `keys` keys attached: [`HORIZON_TTLS`] ttls,
/// or one ttl per key for a larger group, so that a key comes due about once
/// every `keys` keepalives: on average one key a keepalive at most.
pub fn horizon(ttl_ms: i64, keys: usize) -> i64 {
    let ttls = (keys as i64).max(HORIZON_TTLS);
    ttl_ms.saturating_mul(ttls)
}

/// Whether a key whose TTL runs to `key_horizon_ms` must be moved forward
/// now that its lease ends at `deadline_ms` and keeps ttls of `ttl_ms`: when
/// the lease may reach it before the next keepalive (one ttl of slack).
pub fn due(key_horizon_ms: i64, deadline_ms: i64, ttl_ms: i64) -> bool {
    key_horizon_ms <= deadline_ms.saturating_add(ttl_ms)
}

/// Whether a lease that ends at `deadline_ms` still runs at `now_ms` (the
/// rule of every lease: live through its deadline's millisecond).
pub fn is_live(deadline_ms: i64, now_ms: i64) -> bool {
    rules::is_live(deadline_ms, now_ms)
}

/// Whether a hold loaded by `RESTORE` is a copy, not the hold itself: its
/// lease already has a hold of the same grant (its fence) under another key
/// (`elsewhere`), and none under this one (`here`). A copy (`DUMP` of a
/// held key, `RESTORE` under another name while the original still holds)
/// is not attached to the lease: one grant is one hold per key, which is
/// why `COPY` is refused. The hold restored over itself (`REPLACE`), or
/// under a new name once the original is gone (a rename by hand), is the
/// hold, and stays attached. A key of a multi-key grant restored after its
/// own deletion, while the grant's other keys are held, cannot be told from
/// a copy of one of them: it is taken for one.
pub fn restored_is_copy(elsewhere: bool, here: bool) -> bool {
    elsewhere && !here
}

/// When a hold ends, as every reply shows it: attached to a lease group,
/// that lease's deadline (its key's own TTL runs further, to its horizon),
/// or its own when the lease is unknown here; else its own (`own`: none
/// without expiry).
pub fn shown_deadline(own: Option<i64>, lease_deadline: Option<i64>) -> Option<i64> {
    lease_deadline.or(own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leased_hold_shows_its_leases_deadline_else_its_own() {
        assert_eq!(shown_deadline(Some(5_000), Some(3_000)), Some(3_000));
        assert_eq!(
            shown_deadline(Some(5_000), None),
            Some(5_000),
            "lease unknown"
        );
        assert_eq!(shown_deadline(None, None), None, "no expiry");
    }

    #[test]
    fn a_restored_hold_is_a_copy_only_beside_its_original() {
        assert!(restored_is_copy(true, false), "DUMP a, RESTORE b");
        assert!(
            !restored_is_copy(true, true),
            "a multi-key grant's key restored over itself"
        );
        assert!(!restored_is_copy(false, true), "RESTORE a REPLACE");
        assert!(!restored_is_copy(false, false), "DUMP a, DEL a, RESTORE b");
    }

    #[test]
    fn an_id_is_32_lowercase_hex_digits_and_comes_back_exactly() {
        let id = LeaseId::draw();
        let mut buffer = [0u8; LEASE_ID_LEN];
        let text = id.text(&mut buffer).to_vec();
        assert_eq!(text.len(), 32);
        assert!(text
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)));
        assert_eq!(LeaseId::parse(&text), Some(id));
        assert_ne!(LeaseId::draw(), id, "unguessable: not the same twice");
        for bad in [
            &b""[..],
            b"0123",
            b"0123456789ABCDEF0123456789abcdef",
            b"0123456789abcdef0123456789abcdeg",
            b"0123456789abcdef0123456789abcde\x00",
            b"0123456789abcdef0123456789abcdef0",
        ] {
            assert_eq!(LeaseId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_attached_key_runs_ahead_and_comes_due_before_its_lease_reaches_it() {
        assert_eq!(horizon(1_000, 1), 64_000);
        assert_eq!(horizon(1_000, 10_000), 10_000_000);
        assert!(!due(100_000, 50_000, 1_000));
        assert!(due(51_000, 50_000, 1_000));
        assert!(due(40_000, 50_000, 1_000));
        assert!(is_live(100, 100) && !is_live(100, 101));
    }

    proptest::proptest! {
        /// Keepalives every third of a ttl, keys refreshed when due: no key's
        /// TTL ever falls behind its lease, and on average well under one
        /// key is moved per keepalive, whatever the group's size.
        #[test]
        fn keepalives_move_few_keys_and_never_let_one_fall_behind(
            keys in 1usize..3_000,
            ttl_ms in 100i64..60_000,
            keepalives in 10usize..400,
        ) {
            let mut now = 0i64;
            let mut deadline = ttl_ms;
            // Keys attached over the first ttl.
            let mut horizons: Vec<i64> = (0..keys)
                .map(|i| deadline + horizon(ttl_ms, i + 1) - (i as i64 % ttl_ms))
                .collect();
            let mut moved = 0usize;
            for _ in 0..keepalives {
                now += ttl_ms / 3;
                deadline = now + ttl_ms;
                for h in horizons.iter_mut() {
                    if due(*h, deadline, ttl_ms) {
                        *h = deadline + horizon(ttl_ms, keys);
                        moved += 1;
                    }
                    proptest::prop_assert!(*h >= deadline);
                }
            }
            proptest::prop_assert!(moved <= keys + keepalives);
        }
    }
}
