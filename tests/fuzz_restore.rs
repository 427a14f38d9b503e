//! RESTORE fuzzing (issue 5, scenario 9): mutate real DUMP payloads of locks,
//! reseal them with a valid CRC64 (so that the module's `rdb_load` really runs
//! on them), RESTORE them into a real server and check that:
//!
//! - the server never crashes (every reply is a reply, PING still answers);
//! - every accepted key is a consistent lock: TYPE is `redislock`, LOCK.INFO
//!   shows a fence in 1..=2^53-1, a foreign token neither extends nor
//!   releases it, its DUMP restores again to the same fence, and the fence is
//!   observed: the next grant on any key is above it;
//! - a DEBUG RELOAD (RDB save and load of every accepted key) keeps them.
//!
//! `LOCK_FUZZ_SEED` (default fixed, always printed) and `LOCK_FUZZ_RESTORES`
//! (default 10000) choose the run. A payload that crashes the server is written
//! to `target/fuzz-restore-crash-<seed>-<n>.bin`.

mod common;

use std::collections::HashMap;

use common::payload::*;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The bytes of `payload` before its trailer (RDB version, CRC64).
fn body_of(payload: &[u8]) -> &[u8] {
    &payload[..payload.len() - 10]
}

fn reseal(body: &[u8], rdb_version: [u8; 2]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend(rdb_version);
    let crc = crc64(&p);
    p.extend(crc.to_le_bytes());
    p
}

/// An RDB length in its plain forms (6-bit, 14-bit, 32-bit, 64-bit), or
/// `None` for the special encodings (integers, LZF) and short input.
fn plain_len(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (&first, rest) = bytes.split_first()?;
    let take = |n: usize| -> Option<(u64, &[u8])> {
        let (be, rest) = (rest.get(..n)?, &rest[n..]);
        Some((be.iter().fold(0u64, |v, &b| v << 8 | u64::from(b)), rest))
    };
    match first {
        0x00..=0x3f => Some((u64::from(first), rest)),
        0x40..=0x7f => {
            let (&second, rest) = rest.split_first()?;
            Some((u64::from(first & 0x3f) << 8 | u64::from(second), rest))
        }
        0x80 => take(4),
        0x81 => take(8),
        _ => None,
    }
}

/// Token and fence of a lock body that has the plain layout the module
/// writes (encoding 3), after the seed's own `header` (type, module id,
/// encoding version): `05 <len> <token> 02 <fence> 02 <granted-ms>
/// 02 <deadline-ms> 02 <extends> 05 <len> <owner> 00`, and whether the four
/// fields after the fence are in range (granted ≥ 0 and deadline ≥ -1 as
/// signed values, extends a u32, the owner at most 128 bytes). `None` for
/// anything else.
fn decode(body: &[u8], header: &[u8]) -> Option<(Vec<u8>, u64, bool)> {
    let rest = body.strip_prefix(header)?.strip_prefix(&[0x05])?;
    let (len, rest) = plain_len(rest)?;
    let len = usize::try_from(len).ok().filter(|&l| l <= rest.len())?;
    let (token, rest) = rest.split_at(len);
    let (fence, rest) = plain_len(rest.strip_prefix(&[0x02])?)?;
    let (granted, rest) = plain_len(rest.strip_prefix(&[0x02])?)?;
    let (deadline, rest) = plain_len(rest.strip_prefix(&[0x02])?)?;
    let (extends, rest) = plain_len(rest.strip_prefix(&[0x02])?)?;
    let (owner_len, rest) = plain_len(rest.strip_prefix(&[0x05])?)?;
    let owner_len = usize::try_from(owner_len)
        .ok()
        .filter(|&l| l <= rest.len())?;
    let rest = &rest[owner_len..];
    // The lease group (0: none), and for one, the deadline it had, which an
    // unattached hold takes as its own.
    let (lease, rest) = plain_len(rest.strip_prefix(&[0x02])?)?;
    let (deadline, rest) = match lease {
        0 => (deadline, rest),
        _ => plain_len(rest.strip_prefix(&[0x02])?)?,
    };
    let in_range = granted as i64 >= 0
        && deadline as i64 >= -1
        && extends <= u64::from(u32::MAX)
        && owner_len <= 128;
    (rest == [0x00]).then(|| (token.to_vec(), fence, in_range))
}

/// Where the 8 bytes of the fence sit in a seed payload: before granted-ms
/// and deadline-ms (each `02 81` + 8 bytes), extends 0 (`02 00`), no owner
/// (`05 00`), no lease group (`02 00`), EOF (`00`), the RDB version (2) and
/// the CRC64 (8). A seed is a fresh DUMP without a label, so its extends is
/// 0 and both times take the 8-byte form.
fn fence_offset(payload: &[u8]) -> usize {
    payload.len() - 10 - 1 - 2 - 2 - 2 - 10 - 10 - 8
}

const INTERESTING: [u8; 10] = [0x00, 0x01, 0x02, 0x05, 0x3f, 0x40, 0x7f, 0x80, 0x81, 0xff];

/// One to four mutations of `body`.
fn mutate(rng: &mut StdRng, body: &mut Vec<u8>, fence_at: usize) {
    for _ in 0..rng.gen_range(1..=4) {
        let len = body.len().max(1);
        match rng.gen_range(0..10) {
            0 => {
                let i = rng.gen_range(0..len);
                if let Some(b) = body.get_mut(i) {
                    *b ^= 1 << rng.gen_range(0..8);
                }
            }
            1 => {
                let i = rng.gen_range(0..len);
                if let Some(b) = body.get_mut(i) {
                    *b = INTERESTING[rng.gen_range(0..INTERESTING.len())];
                }
            }
            2 => {
                let i = rng.gen_range(0..=body.len());
                let n = rng.gen_range(1..=16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                body.splice(i..i, bytes);
            }
            3 => {
                let i = rng.gen_range(0..len);
                let n = rng.gen_range(1..=8).min(body.len() - i.min(body.len()));
                body.drain(i.min(body.len())..(i + n).min(body.len()));
            }
            4 => {
                let n = rng.gen_range(0..len);
                body.truncate(n);
            }
            5 => {
                // The fence field, with values at and around its limits.
                let fence: u64 = match rng.gen_range(0..7) {
                    0 => 0,
                    1 => 1,
                    2 => MAX_FENCE,
                    3 => MAX_FENCE + 1,
                    4 => u64::MAX,
                    5 => now_us() + rng.gen_range(0..1_000_000),
                    _ => rng.gen(),
                };
                if fence_at + 8 <= body.len() {
                    body[fence_at..fence_at + 8].copy_from_slice(&fence.to_be_bytes());
                }
            }
            6 => {
                // The module id's encoding version (low 10 bits).
                if body.len() >= 10 {
                    body[9] = rng.gen();
                    body[8] = (body[8] & !3) | rng.gen_range(0..4);
                }
            }
            7 => {
                // The token's length prefix (12th byte), as any RDB length.
                if body.len() > 11 {
                    body[11] = rng.gen();
                }
            }
            8 => {
                // A chunk repeated.
                let i = rng.gen_range(0..len).min(body.len());
                let n = rng.gen_range(1..=12).min(body.len() - i);
                let chunk = body[i..i + n].to_vec();
                body.splice(i..i, chunk);
            }
            _ => {
                // An opcode (string 0x05, unsigned 0x02, EOF 0x00) changed.
                let opcodes: Vec<usize> = [10, fence_at - 2, fence_at + 8]
                    .into_iter()
                    .filter(|&i| i < body.len())
                    .collect();
                if !opcodes.is_empty() {
                    let i = opcodes[rng.gen_range(0..opcodes.len())];
                    body[i] = rng.gen_range(0..8);
                }
            }
        }
    }
}

/// Real DUMPs of locks with tokens of each stored form: a server-drawn UUID
/// (kept as 16 bytes), a short one (inline), a long one (heap), a binary one.
fn seeds(con: &mut Connection) -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    let long = "L".repeat(256);
    let tokens: [Option<&[u8]>; 4] = [
        None,
        Some(b"short"),
        Some(long.as_bytes()),
        Some(b"\x00\xff\r\nbin"),
    ];
    for (i, token) in tokens.into_iter().enumerate() {
        let key = format!("seed:{i}");
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(&key).arg(600_000);
        if let Some(t) = token {
            cmd.arg("TOKEN").arg(t);
        }
        let _: Value = cmd.query(con).expect("ACQUIRE");
        seeds.push(dump(con, &key));
    }
    seeds
}

fn alive(con: &mut Connection) -> bool {
    redis::cmd("PING").query::<String>(con).is_ok()
}

#[test]
fn restore_of_mutated_lock_payloads_never_crashes_and_keeps_locks_consistent() {
    let seed = std::env::var("LOCK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5e_ed00_u64);
    let runs: usize = std::env::var("LOCK_FUZZ_RESTORES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    println!("fuzz_restore: LOCK_FUZZ_SEED={seed} LOCK_FUZZ_RESTORES={runs}");
    let mut rng = StdRng::seed_from_u64(seed);

    let mut server = Server::start();
    let mut con = server.conn();
    let seeds = seeds(&mut con);
    let rdb_version: [u8; 2] = seeds[0][seeds[0].len() - 10..seeds[0].len() - 8]
        .try_into()
        .unwrap();
    let (mut accepted, mut refused, mut reloads, mut restarts) = (0usize, 0usize, 0usize, 0usize);
    let (mut other_type, mut decoded) = (0usize, 0usize);
    let mut errors: HashMap<String, usize> = HashMap::new();
    // Accepted keys on the current server, with their fences.
    let mut kept: Vec<(String, i64)> = Vec::new();
    let mut high_water = 0u64;

    for n in 0..runs {
        let original = &seeds[rng.gen_range(0..seeds.len())];
        let fence_at = fence_offset(original);
        let mut body = body_of(original).to_vec();
        mutate(&mut rng, &mut body, fence_at);
        // What a correct loader must make of it, when the layout is plain.
        let expected = decode(&body, &original[..10]);
        let version_kept = rng.gen_range(0..20) != 0;
        let payload = if !version_kept {
            // Now and then a wrong RDB version, or no trailer at all.
            let v = [rng.gen(), rng.gen()];
            reseal(&body, v)
        } else {
            reseal(&body, rdb_version)
        };
        let key = format!("fz:{n}");
        let ttl = if rng.gen_bool(0.5) { 0 } else { 600_000 };
        let result = restore(&mut con, &key, ttl, &payload);
        if !alive(&mut con) || !server.is_running() {
            let path = format!(
                "{}/target/fuzz-restore-crash-{seed}-{n}.bin",
                env!("CARGO_MANIFEST_DIR")
            );
            let _ = std::fs::write(&path, &payload);
            panic!(
                "RESTORE #{n} (seed {seed}) took the server down; payload {payload:02x?} in {path}\n{}",
                server.log()
            );
        }
        if let (Some((token, fence, in_range)), true) = (&expected, version_kept) {
            let valid =
                (1..=256).contains(&token.len()) && (1..=MAX_FENCE).contains(fence) && *in_range;
            assert_eq!(
                result.is_ok(),
                valid,
                "RESTORE #{n}: token of {} bytes, fence {fence}: {result:?} {payload:02x?}",
                token.len()
            );
        }
        match result {
            Err(e) => {
                refused += 1;
                let text = e.detail().unwrap_or("").to_string();
                *errors.entry(text).or_default() += 1;
                assert!(!exists(&mut con, &key), "a refused RESTORE left {key}");
            }
            Ok(_)
                if redis::cmd("TYPE")
                    .arg(&key)
                    .query::<String>(&mut con)
                    .unwrap()
                    != "redislock" =>
            {
                // A mutated type byte made it a payload of a core type, which
                // Redis loaded itself: the lock commands must refuse it.
                other_type += 1;
                let err = error_of(&mut con, redis::cmd("LOCK.INFO").arg(&key));
                assert!(err.starts_with("WRONGTYPE"), "{err}");
                let _: i64 = redis::cmd("DEL").arg(&key).query(&mut con).unwrap();
            }
            Ok(_) => {
                accepted += 1;
                let (fence, _) = fence_and_deadline(&mut con, &key);
                assert!(
                    fence >= 1 && fence as u64 <= MAX_FENCE,
                    "fence {fence} accepted: {payload:02x?}"
                );
                assert_eq!(extend(&mut con, &key, "not-the-holder", 1_000), 0);
                assert_eq!(release(&mut con, &key, "not-the-holder"), 0);
                // DUMP of what was accepted restores again, to the same fence (a
                // small fence is stored as a short RDB length, not 8 bytes).
                let again = dump(&mut con, &key);
                restore(&mut con, &format!("{key}:copy"), 0, &again).expect("RESTORE of a DUMP");
                assert_eq!(
                    fence_and_deadline(&mut con, &format!("{key}:copy")).0,
                    fence
                );
                // The fence is observed: the next grant is above it.
                high_water = high_water.max(fence as u64);
                let probe = redis::cmd("LOCK.ACQUIRE")
                    .arg(format!("probe:{n}"))
                    .arg(1_000)
                    .query::<Option<(String, u64)>>(&mut con);
                match probe {
                    Ok(Some((_, next))) => {
                        assert!(
                            next > high_water,
                            "fence {next} after a restored {high_water}"
                        );
                        high_water = next;
                    }
                    Ok(None) => panic!("a free key was refused"),
                    Err(e) => assert!(
                        high_water == MAX_FENCE && e.to_string().contains("exhausted"),
                        "{e} with high water {high_water}"
                    ),
                }
                if let Some((token, want, _)) = &expected {
                    // The holder is exactly the token in the payload.
                    decoded += 1;
                    assert_eq!(fence as u64, *want, "{payload:02x?}");
                    let copy = format!("{key}:copy");
                    let released: i64 = redis::cmd("LOCK.RELEASE")
                        .arg(&copy)
                        .arg(token.as_slice())
                        .query(&mut con)
                        .unwrap();
                    assert_eq!(released, 1, "token {token:02x?} does not hold {copy}");
                }
                kept.push((key, fence));
            }
        }
        if n % 500 == 499 {
            // Every accepted lock survives an RDB save and load as it was.
            let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
            reloads += 1;
            for (key, fence) in &kept {
                assert_eq!(fence_and_deadline(&mut con, key).0, *fence, "{key}");
            }
        }
        if high_water > MAX_FENCE - 1_000_000 {
            // Fences are used up: a fresh server, so grants stay checkable.
            server = Server::start();
            con = server.conn();
            kept.clear();
            high_water = 0;
            restarts += 1;
        }
    }
    let mut errors: Vec<(String, usize)> = errors.into_iter().collect();
    errors.sort_by_key(|e| std::cmp::Reverse(e.1));
    println!(
        "fuzz_restore: {runs} RESTOREs, {accepted} accepted as locks (all consistent; \
         {decoded} decoded here and held by exactly the payload's token and fence), \
         {other_type} loaded as another type, {refused} refused, \
         {reloads} DEBUG RELOADs, {restarts} fresh servers after the fence space ran out, 0 crashes; \
         refusals: {errors:?}"
    );
    assert!(
        accepted > runs / 50,
        "too few payloads accepted to test rdb_load"
    );
    assert!(
        refused > runs / 10,
        "too few payloads refused to test rdb_load"
    );
}
