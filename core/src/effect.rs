//! The packed state that `LOCK.SETSTATE key token state` and `LOCK.SETHOLDER
//! key token state` carry to replicas and the AOF: every value explicit, as
//! fixed-width little-endian integers in one argument instead of one decimal
//! argument each. Fewer, shorter arguments are what a master pays for per
//! grant while anything reads its propagation: the server copies every
//! argument into the replication stream and formats it into the AOF.
//!
//! - a lock: `fence u64, deadline-ms i64 (-1: none), granted-ms i64`, then,
//!   only when there are extensions, a label or a lease group, `extends u32`
//!   (its top bit set when a lease group follows), the group's number `u64`
//!   if any, and the label's bytes (24 bytes, 28, or 36, and the label);
//! - a holder of a shared lock or a semaphore: `limit u32, count u32`, then
//!   the same as a lock (32 bytes, or 36 and the label).
//!
//! The text forms of earlier versions still load (`args.rs`).

use crate::errors::LockError;
use crate::rules;

/// One lock's or holder's state, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State<'a> {
    pub fence: u64,
    /// Absolute unix time in ms; -1 for none.
    pub deadline_ms: i64,
    pub granted_ms: i64,
    pub extends: u32,
    pub owner: Option<&'a [u8]>,
    /// The number of the lease group the hold is attached to (`LEASE`).
    pub lease: Option<u64>,
}

/// The top bit of the packed `extends`: a lease group's number follows.
const LEASED: u32 = 1 << 31;

/// A holder's place in its key: `limit` 0 for a shared lock, else the
/// semaphore's limit, and how many permits it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permits {
    pub limit: u32,
    pub count: u32,
}

const BASE: usize = 24;
const PERMITS: usize = 8;
const INLINE: usize = PERMITS + BASE + 4 + 8;

/// A packed state: on the stack unless it carries a label.
pub enum Packed {
    Inline { bytes: [u8; INLINE], len: usize },
    Labelled(Vec<u8>),
}

impl Packed {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Packed::Inline { bytes, len } => &bytes[..*len],
            Packed::Labelled(bytes) => bytes,
        }
    }
}

/// Pack a lock's state, or a holder's with its `permits`.
pub fn pack(permits: Option<Permits>, state: &State) -> Packed {
    let mut bytes = [0u8; INLINE];
    let mut len = 0;
    let mut put = |field: &[u8]| {
        bytes[len..len + field.len()].copy_from_slice(field);
        len += field.len();
    };
    if let Some(p) = permits {
        put(&p.limit.to_le_bytes());
        put(&p.count.to_le_bytes());
    }
    put(&state.fence.to_le_bytes());
    put(&state.deadline_ms.to_le_bytes());
    put(&state.granted_ms.to_le_bytes());
    if state.extends == 0 && state.owner.is_none() && state.lease.is_none() {
        return Packed::Inline { bytes, len };
    }
    let extends = state.extends.min(rules::MAX_EXTENDS);
    match state.lease {
        Some(lease) => {
            put(&(extends | LEASED).to_le_bytes());
            put(&lease.to_le_bytes());
        }
        None => put(&extends.to_le_bytes()),
    }
    match state.owner {
        None => Packed::Inline { bytes, len },
        Some(owner) => {
            let mut labelled = bytes[..len].to_vec();
            labelled.extend_from_slice(owner);
            Packed::Labelled(labelled)
        }
    }
}

/// Unpack a lock's state (`with_permits` false) or a holder's, checking every
/// value as the text forms are checked.
pub fn unpack(bytes: &[u8], with_permits: bool) -> Result<(Option<Permits>, State<'_>), LockError> {
    let head = if with_permits { PERMITS } else { 0 };
    if bytes.len() != head + BASE && bytes.len() < head + BASE + 4 {
        return Err(LockError::StateInvalid);
    }
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let u64_at = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let permits = with_permits.then(|| Permits {
        limit: u32_at(0),
        count: u32_at(4),
    });
    let fence = rules::check_fence(u64_at(head))?;
    let deadline_ms = u64_at(head + 8) as i64;
    if deadline_ms < -1 {
        return Err(LockError::DeadlineInvalid);
    }
    let granted_ms = u64_at(head + 16) as i64;
    if granted_ms < 0 {
        return Err(LockError::GrantedInvalid);
    }
    let (extends, lease, owner) = match bytes.get(head + BASE..) {
        Some(tail) if tail.len() >= 4 => {
            let extends = u32_at(head + BASE);
            let (lease, label) = match extends & LEASED {
                0 => (None, &tail[4..]),
                _ if tail.len() >= 12 => {
                    let lease = u64_at(head + BASE + 4);
                    if lease == 0 {
                        return Err(LockError::StateInvalid);
                    }
                    (Some(lease), &tail[12..])
                }
                _ => return Err(LockError::StateInvalid),
            };
            let owner = if label.is_empty() {
                None
            } else {
                Some(rules::check_owner(label)?)
            };
            (extends & !LEASED, lease, owner)
        }
        _ => (0, None, None),
    };
    Ok((
        permits,
        State {
            fence,
            deadline_ms,
            granted_ms,
            extends,
            owner,
            lease,
        },
    ))
}

/// A replicated or logged effect as its text form, for a reader of the
/// replication stream or the AOF (tests, the chaos checker): `LOCK.SETSTATE
/// key token state` and `LOCK.SETHOLDER key token state` with their state
/// spelled out as the decimal arguments that the text forms of `args.rs`
/// take (`LOCK.SETHOLDER key limit count token fence deadline-ms granted-ms
/// extends [OWNER label]`). `None` for any other command, which reads as it
/// is; an error for a packed state that does not unpack.
pub fn spell_out<A: AsRef<[u8]>>(command: &[A]) -> Option<Result<Vec<Vec<u8>>, LockError>> {
    let [name, key, token, packed] = command else {
        return None;
    };
    let name = name.as_ref();
    let holder = name.eq_ignore_ascii_case(b"LOCK.SETHOLDER");
    if !holder && !name.eq_ignore_ascii_case(b"LOCK.SETSTATE") {
        return None;
    }
    Some(unpack(packed.as_ref(), holder).map(|(permits, state)| {
        let text = |n: i128| n.to_string().into_bytes();
        let mut out = vec![name.to_vec(), key.as_ref().to_vec()];
        if let Some(p) = permits {
            out.push(text(p.limit.into()));
            out.push(text(p.count.into()));
        }
        out.push(token.as_ref().to_vec());
        out.push(text(state.fence.into()));
        out.push(text(state.deadline_ms.into()));
        out.push(text(state.granted_ms.into()));
        if holder || state.extends != 0 || state.owner.is_some() || state.lease.is_some() {
            out.push(text(state.extends.into()));
        }
        if let Some(owner) = state.owner {
            out.push(b"OWNER".to_vec());
            out.push(owner.to_vec());
        }
        if let Some(lease) = state.lease {
            out.push(b"LEASE".to_vec());
            out.push(text(lease.into()));
        }
        out
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_764_601_200_000;

    #[test]
    fn a_plain_grant_packs_into_24_bytes_and_a_holder_into_32() {
        let state = State {
            fence: 7,
            deadline_ms: NOW + 30_000,
            granted_ms: NOW,
            extends: 0,
            owner: None,
            lease: None,
        };
        assert_eq!(pack(None, &state).bytes().len(), 24);
        let permits = Some(Permits { limit: 3, count: 2 });
        assert_eq!(pack(permits, &state).bytes().len(), 32);
        let extended = State {
            extends: 1,
            ..state
        };
        assert_eq!(pack(None, &extended).bytes().len(), 28);
        let labelled = State {
            owner: Some(b"pod-7"),
            ..state
        };
        assert_eq!(pack(None, &labelled).bytes().len(), 33);
        assert_eq!(
            unpack(pack(permits, &labelled).bytes(), true),
            Ok((permits, labelled))
        );
        let leased = State {
            lease: Some(42),
            ..labelled
        };
        assert_eq!(pack(None, &leased).bytes().len(), 41);
        assert_eq!(
            unpack(pack(permits, &leased).bytes(), true),
            Ok((permits, leased))
        );
        let leased_only = State {
            lease: Some(42),
            ..state
        };
        assert_eq!(pack(None, &leased_only).bytes().len(), 36);
        assert_eq!(
            unpack(pack(None, &leased_only).bytes(), false),
            Ok((None, leased_only))
        );
        // A flagged lease with its number cut off, or numbered 0.
        let whole = pack(None, &leased_only);
        assert_eq!(
            unpack(&whole.bytes()[..30], false),
            Err(LockError::StateInvalid)
        );
        let mut zero = pack(None, &leased_only).bytes().to_vec();
        zero[28..36].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(unpack(&zero, false), Err(LockError::StateInvalid));
    }

    #[test]
    fn an_effect_is_spelled_out_as_the_text_form_it_replaces() {
        let state = State {
            fence: 7,
            deadline_ms: NOW + 30_000,
            granted_ms: NOW,
            extends: 0,
            owner: None,
            lease: None,
        };
        let plain = pack(None, &state);
        let spelled = spell_out(&[b"LOCK.SETSTATE".as_slice(), b"k", b"t", plain.bytes()]);
        let text = |parts: &[&str]| {
            parts
                .iter()
                .map(|p| p.as_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        let deadline = (NOW + 30_000).to_string();
        let granted = NOW.to_string();
        assert_eq!(
            spelled,
            Some(Ok(text(&[
                "LOCK.SETSTATE",
                "k",
                "t",
                "7",
                &deadline,
                &granted
            ])))
        );

        let labelled = State {
            extends: 2,
            owner: Some(b"pod-7"),
            ..state
        };
        let holder = pack(Some(Permits { limit: 3, count: 2 }), &labelled);
        let spelled = spell_out(&[b"lock.setholder".as_slice(), b"k", b"t", holder.bytes()]);
        let want = text(&[
            "lock.setholder",
            "k",
            "3",
            "2",
            "t",
            "7",
            &deadline,
            &granted,
            "2",
            "OWNER",
            "pod-7",
        ]);
        assert_eq!(spelled, Some(Ok(want.clone())));

        // Other commands, and the text forms themselves, read as they are.
        assert_eq!(spell_out(&[b"DEL".as_slice(), b"k"]), None);
        assert_eq!(spell_out(&text(&["PEXPIREAT", "k", "t", "1"])), None);
        assert_eq!(
            spell_out(&text(&["LOCK.SETSTATE", "k", "t", "7", "1", "2"])),
            None
        );
        assert_eq!(
            spell_out(&text(&["LOCK.SETSTATE", "k", "t", "garbage"])),
            Some(Err(LockError::StateInvalid))
        );
    }

    #[test]
    fn garbage_is_refused() {
        let good = pack(
            None,
            &State {
                fence: 7,
                deadline_ms: -1,
                granted_ms: NOW,
                extends: 0,
                owner: None,
                lease: None,
            },
        );
        let good = good.bytes();
        assert!(unpack(good, false).is_ok());
        for len in [0, 1, 23, 25, 26, 27] {
            let bytes = vec![1u8; len];
            assert_eq!(unpack(&bytes, false), Err(LockError::StateInvalid), "{len}");
        }
        assert_eq!(unpack(good, true), Err(LockError::StateInvalid));
        let mut zero_fence = good.to_vec();
        zero_fence[..8].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(unpack(&zero_fence, false), Err(LockError::FenceInvalid));
        let mut huge_fence = good.to_vec();
        huge_fence[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(unpack(&huge_fence, false), Err(LockError::FenceInvalid));
        let mut early = good.to_vec();
        early[8..16].copy_from_slice(&(-2i64).to_le_bytes());
        assert_eq!(unpack(&early, false), Err(LockError::DeadlineInvalid));
        let mut negative = good.to_vec();
        negative[16..24].copy_from_slice(&(-5i64).to_le_bytes());
        assert_eq!(unpack(&negative, false), Err(LockError::GrantedInvalid));
        let mut long_label = good.to_vec();
        long_label.extend_from_slice(&[0u8; 4]);
        long_label.extend_from_slice(&[b'x'; rules::MAX_OWNER_LEN + 1]);
        assert_eq!(unpack(&long_label, false), Err(LockError::OwnerLength));
    }

    proptest! {
        #[test]
        fn every_state_round_trips(
            fence in 1..=rules::MAX_FENCE,
            deadline_ms in -1i64..=i64::MAX,
            granted_ms in 0i64..=i64::MAX,
            extends in 0..=rules::MAX_EXTENDS,
            lease in proptest::option::of(1u64..),
            owner in proptest::option::of(proptest::collection::vec(any::<u8>(), 1..=rules::MAX_OWNER_LEN)),
            permits in proptest::option::of((any::<u32>(), any::<u32>())),
        ) {
            let state = State { fence, deadline_ms, granted_ms, extends, owner: owner.as_deref(), lease };
            let permits = permits.map(|(limit, count)| Permits { limit, count });
            let packed = pack(permits, &state);
            prop_assert_eq!(unpack(packed.bytes(), permits.is_some()), Ok((permits, state)));
        }

        #[test]
        fn no_bytes_crash_the_unpacker(bytes in proptest::collection::vec(any::<u8>(), 0..200), holder in any::<bool>()) {
            let _ = unpack(&bytes, holder);
        }
    }
}
