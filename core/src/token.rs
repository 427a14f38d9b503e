//! A holder token as a lock keeps it: in as few bytes as the token allows,
//! because a lock server may hold millions of locks.
//!
//! - A lowercase canonical UUID (what the server draws, and what most clients
//!   send): its 16 bytes, formatted back to the same 36 characters on use.
//! - Any other token of up to 22 bytes: inline.
//! - A longer one: on the heap.
//!
//! Either way the token takes 24 bytes of the lock value, which stays one
//! allocation for the common tokens (see [`crate::lock::Lock`]).
//! Also where the server draws a token for a caller that sent none.

/// Length of a hyphenated UUID.
pub const UUID_LEN: usize = 36;

const INLINE_MAX: usize = 22;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredToken {
    Uuid([u8; 16]),
    Inline { len: u8, bytes: [u8; INLINE_MAX] },
    Heap(Box<[u8]>),
}

impl StoredToken {
    #[inline]
    pub fn new(token: &[u8]) -> Self {
        if let Some(uuid) = canonical_uuid(token) {
            return StoredToken::Uuid(uuid);
        }
        if token.len() <= INLINE_MAX {
            let mut bytes = [0u8; INLINE_MAX];
            bytes[..token.len()].copy_from_slice(token);
            return StoredToken::Inline {
                len: token.len() as u8,
                bytes,
            };
        }
        StoredToken::Heap(token.into())
    }

    /// The token's bytes, exactly as the client gave them; `buffer` holds the
    /// text of a UUID.
    pub fn bytes<'a>(&'a self, buffer: &'a mut [u8; UUID_LEN]) -> &'a [u8] {
        match self {
            StoredToken::Uuid(raw) => uuid::Uuid::from_bytes(*raw)
                .hyphenated()
                .encode_lower(buffer)
                .as_bytes(),
            StoredToken::Inline { len, bytes } => &bytes[..usize::from(*len)],
            StoredToken::Heap(bytes) => bytes,
        }
    }

    /// Whether `token` is this one, byte for byte: the one ownership check
    /// (EXTEND, RELEASE, a renewing ACQUIRE). A UUID is formatted back to its
    /// text on the stack and compared (about a fifth of the instructions of
    /// parsing the caller's text).
    #[inline]
    pub fn matches(&self, token: &[u8]) -> bool {
        match self {
            StoredToken::Uuid(_) if token.len() != UUID_LEN => false,
            StoredToken::Uuid(_) => self.bytes(&mut [0u8; UUID_LEN]) == token,
            StoredToken::Inline { len, bytes } => &bytes[..usize::from(*len)] == token,
            StoredToken::Heap(bytes) => **bytes == *token,
        }
    }

    /// Bytes kept outside the lock value itself.
    pub fn heap_len(&self) -> usize {
        match self {
            StoredToken::Heap(bytes) => bytes.len(),
            _ => 0,
        }
    }
}

/// A random UUIDv4 in lowercase hyphenated form, written into `buffer`: the
/// token of a grant whose caller sent none.
pub fn draw(buffer: &mut [u8; UUID_LEN]) -> &[u8] {
    let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    uuid.hyphenated().encode_lower(buffer).as_bytes()
}

/// One in each byte, and the top bit of each byte, of a `u64` read as 8
/// bytes.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The top bit of each byte of `x` (all bytes ASCII, below 0x80) set where
/// `low <= byte <= high`. Neither subtraction borrows across bytes: each
/// byte of `x | HIGH` is at least 0x80 and `low` at most that, and each byte
/// of the second minuend is `0x80 + high`, at least any ASCII byte.
#[inline(always)]
const fn in_range(x: u64, low: u8, high: u8) -> u64 {
    let at_least_low = (x | HIGH) - ONES * low as u64;
    let at_most_high = ((ONES * high as u64) | HIGH) - x;
    at_least_low & at_most_high & HIGH
}

/// Whether all 8 bytes of `x` are lowercase hex digits.
#[inline(always)]
const fn all_hex(x: u64) -> bool {
    x & HIGH == 0 && in_range(x, b'0', b'9') | in_range(x, b'a', b'f') == HIGH
}

/// The 4 bytes that the 8 hex digits of `x` (the first in the lowest byte,
/// as `u64::from_le_bytes` reads them; checked by [`all_hex`]) spell.
#[inline(always)]
const fn hex_bytes(x: u64) -> [u8; 4] {
    // Each digit's value: its low nibble, plus 9 for a letter (bit 6).
    let nibbles = (x & (ONES * 0x0f)) + ((x >> 6) & ONES) * 9;
    // Each even byte: its digit as the high nibble, the next as the low one.
    let pairs = ((nibbles << 4) | (nibbles >> 8)) & 0x00ff_00ff_00ff_00ff;
    let halves = (pairs | (pairs >> 8)) & 0x0000_ffff_0000_ffff;
    ((halves | (halves >> 16)) as u32).to_le_bytes()
}

/// Eight bytes of `token` from `at`, the first in the lowest byte.
#[inline(always)]
fn read8(token: &[u8; UUID_LEN], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&token[at..at + 8]);
    u64::from_le_bytes(bytes)
}

/// Four bytes of `token` from `at`, the first in the lowest byte.
#[inline(always)]
fn read4(token: &[u8; UUID_LEN], at: usize) -> u64 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&token[at..at + 4]);
    u64::from(u32::from_le_bytes(bytes))
}

/// The 16 bytes of `token` if it is a UUID written exactly as
/// `encode_lower` writes one (so that formatting it gives `token` back):
/// lowercase only, since an uppercase UUID would not come back as it was
/// sent. Every grant of a UUID token parses one, so eight digits at a time
/// (about half the instructions of a digit at a time).
#[inline]
fn canonical_uuid(token: &[u8]) -> Option<[u8; 16]> {
    let token: &[u8; UUID_LEN] = token.try_into().ok()?;
    if token[8] != b'-' || token[13] != b'-' || token[18] != b'-' || token[23] != b'-' {
        return None;
    }
    // The 32 digits, 8-4-4-4-12, in four groups of eight.
    let groups = [
        read8(token, 0),
        read4(token, 9) | read4(token, 14) << 32,
        read4(token, 19) | read4(token, 24) << 32,
        read8(token, 28),
    ];
    if !groups.iter().all(|&group| all_hex(group)) {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (out, &group) in bytes.chunks_exact_mut(4).zip(groups.iter()) {
        out.copy_from_slice(&hex_bytes(group));
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(token: &[u8]) -> Vec<u8> {
        let mut buffer = [0u8; UUID_LEN];
        StoredToken::new(token).bytes(&mut buffer).to_vec()
    }

    #[test]
    fn each_kind_of_token_is_stored_compactly_and_given_back_exactly() {
        let uuid = b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c6";
        assert!(matches!(StoredToken::new(uuid), StoredToken::Uuid(_)));
        assert_eq!(round_trip(uuid), uuid);
        let upper = b"0B8E4F53-3C43-4A0E-9F53-1E7D51F4A9C6";
        assert!(matches!(StoredToken::new(upper), StoredToken::Heap(_)));
        assert_eq!(round_trip(upper), upper);
        assert!(matches!(
            StoredToken::new(b"worker-1"),
            StoredToken::Inline { .. }
        ));
        assert_eq!(round_trip(b"worker-1"), b"worker-1");
        let long = [0xffu8; 256];
        assert_eq!(StoredToken::new(&long).heap_len(), 256);
        assert_eq!(round_trip(&long), long);
        assert_eq!(round_trip(&[0u8; INLINE_MAX]), [0u8; INLINE_MAX]);
        assert_eq!(round_trip(&[1u8; INLINE_MAX + 1]), [1u8; INLINE_MAX + 1]);
    }

    #[test]
    fn a_short_or_uuid_token_takes_24_bytes_in_place() {
        assert_eq!(std::mem::size_of::<StoredToken>(), 24);
    }

    #[test]
    fn a_drawn_token_is_a_canonical_uuid_stored_in_16_bytes() {
        let mut buffer = [0u8; UUID_LEN];
        let drawn = draw(&mut buffer).to_vec();
        assert!(matches!(StoredToken::new(&drawn), StoredToken::Uuid(_)));
        assert_eq!(drawn[14], b'4', "version 4");
        let mut again = [0u8; UUID_LEN];
        assert_ne!(draw(&mut again), &drawn[..]);
    }

    /// A digit at a time: what [`canonical_uuid`] must agree with.
    fn canonical_uuid_by_digit(token: &[u8]) -> Option<[u8; 16]> {
        let text = std::str::from_utf8(token).ok()?;
        let parsed = uuid::Uuid::try_parse(text).ok()?;
        let mut back = [0u8; UUID_LEN];
        (parsed.hyphenated().encode_lower(&mut back).as_bytes() == token)
            .then(|| *parsed.as_bytes())
    }

    #[test]
    fn uuid_parsing_takes_lowercase_hyphenated_uuids_only() {
        let uuid = b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c6";
        assert_eq!(canonical_uuid(uuid), canonical_uuid_by_digit(uuid));
        assert!(canonical_uuid(b"ffffffff-ffff-ffff-ffff-ffffffffffff").is_some());
        assert!(canonical_uuid(b"00000000-0000-0000-0000-000000000000").is_some());
        for bad in [
            &b"0B8E4F53-3c43-4a0e-9f53-1e7d51f4a9c6"[..],
            b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9cg",
            b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c/",
            b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c:",
            b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c`",
            b"0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9c\xe0",
            b"0b8e4f53+3c43-4a0e-9f53-1e7d51f4a9c6",
            b"0b8e4f533c43-4a0e-9f53-1e7d51f4a9c6",
            b"{0b8e4f53-3c43-4a0e-9f53-1e7d51f4a9}",
        ] {
            assert_eq!(
                canonical_uuid(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut high = *uuid;
        high[35] = 0xe6;
        assert_eq!(canonical_uuid(&high), None);
    }

    proptest! {
        /// Eight digits at a time agrees with a digit at a time, for UUIDs
        /// with any one byte changed to anything.
        #[test]
        fn uuid_parsing_agrees_with_the_digit_by_digit_parse(
            raw in any::<[u8; 16]>(),
            at in 0usize..UUID_LEN,
            byte in any::<u8>(),
        ) {
            let text = uuid::Uuid::from_bytes(raw).hyphenated().to_string().into_bytes();
            prop_assert_eq!(canonical_uuid(&text), Some(raw));
            let mut changed = text.clone();
            changed[at] = byte;
            prop_assert_eq!(canonical_uuid(&changed), canonical_uuid_by_digit(&changed));
        }

        #[test]
        fn any_token_round_trips(token in proptest::collection::vec(any::<u8>(), 1..=256)) {
            prop_assert_eq!(round_trip(&token), token);
        }

        /// `matches` is byte equality, whatever the stored form: a UUID
        /// differs from its upper-case spelling, a prefix is not the token.
        #[test]
        fn matches_is_byte_equality(
            a in proptest::collection::vec(any::<u8>(), 1..=40),
            b in proptest::collection::vec(any::<u8>(), 1..=40),
            raw in any::<[u8; 16]>(),
        ) {
            prop_assert_eq!(StoredToken::new(&a).matches(&b), a == b);
            prop_assert!(StoredToken::new(&a).matches(&a));
            let text = uuid::Uuid::from_bytes(raw).hyphenated().to_string();
            let stored = StoredToken::new(text.as_bytes());
            prop_assert!(stored.matches(text.as_bytes()));
            prop_assert!(!stored.matches(text.to_uppercase().as_bytes()) || text == text.to_uppercase());
            prop_assert!(!stored.matches(&text.as_bytes()[..35]));
            prop_assert_eq!(stored.matches(&b), b == text.as_bytes());
        }

        /// `Holders::put` compares stored forms: equal exactly when the
        /// tokens are, and a lowercase UUID is kept as its own 16 bytes.
        #[test]
        fn stored_forms_are_equal_exactly_when_the_tokens_are(
            a in proptest::collection::vec(any::<u8>(), 1..=40),
            raw in any::<[u8; 16]>(),
            flip in 0usize..36,
        ) {
            let text = uuid::Uuid::from_bytes(raw).hyphenated().to_string();
            prop_assert_eq!(StoredToken::new(text.as_bytes()), StoredToken::Uuid(raw));
            let mut other = text.clone().into_bytes();
            other[flip] = if other[flip] == b'0' { b'1' } else { b'0' };
            prop_assert_eq!(
                StoredToken::new(&other) == StoredToken::new(text.as_bytes()),
                other == text.as_bytes()
            );
            prop_assert_eq!(
                StoredToken::new(&a) == StoredToken::new(text.as_bytes()),
                a == text.as_bytes()
            );
        }

        #[test]
        fn any_uuid_text_round_trips(raw in any::<[u8; 16]>(), upper in any::<bool>()) {
            let text = uuid::Uuid::from_bytes(raw).hyphenated().to_string();
            let text = if upper { text.to_uppercase() } else { text };
            prop_assert_eq!(round_trip(text.as_bytes()), text.as_bytes());
        }
    }
}
