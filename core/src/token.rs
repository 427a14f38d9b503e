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

/// Each byte's value as a lowercase hex digit, or 0xff. Lowercase only: an
/// uppercase UUID would not come back as it was sent.
const NIBBLE: [u8; 256] = {
    let mut table = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// The 16 bytes of `token` if it is a UUID written exactly as
/// `encode_lower` writes one (so that formatting it gives `token` back).
fn canonical_uuid(token: &[u8]) -> Option<[u8; 16]> {
    /// Where each byte's two hex digits start in the 36 characters.
    const DIGITS: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let token: &[u8; UUID_LEN] = token.try_into().ok()?;
    if [8, 13, 18, 23].iter().any(|&i| token[i] != b'-') {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (byte, &at) in bytes.iter_mut().zip(DIGITS.iter()) {
        let (high, low) = (
            NIBBLE[usize::from(token[at])],
            NIBBLE[usize::from(token[at + 1])],
        );
        if (high | low) > 0xf {
            return None;
        }
        *byte = high << 4 | low;
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

    proptest! {
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
