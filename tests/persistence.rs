//! Locks across restarts (RDB and AOF), DEBUG RELOAD, DUMP/RESTORE, and
//! corrupt RESTORE payloads, one behaviour per test, against a real server.

mod common;
use common::payload::*;
use common::*;

use std::collections::HashMap;
use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use rand::{rngs::StdRng, Rng, SeedableRng};

/// The AOF files the manifest names as live (base and incr, not history), in
/// manifest order, as (name, contents).
fn aof_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let aof_dir = dir.join("appendonlydir");
    let manifest = std::fs::read_to_string(aof_dir.join("appendonly.aof.manifest"))
        .expect("read the AOF manifest");
    let mut files = Vec::new();
    for line in manifest.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let field = |name: &str| {
            words
                .windows(2)
                .find(|w| w[0] == name)
                .map(|w| w[1].to_string())
        };
        let (Some(file), Some(kind)) = (field("file"), field("type")) else {
            continue;
        };
        if kind == "h" {
            continue;
        }
        let bytes = std::fs::read(aof_dir.join(&file)).expect("read an AOF file");
        files.push((file, bytes));
    }
    assert!(!files.is_empty(), "manifest names no file:\n{manifest}");
    files
}

/// The commands of an AOF file in the RESP format (not an RDB preamble),
/// packed effects spelled out (`expand_effect`).
fn aof_commands(bytes: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line(bytes: &[u8], at: &mut usize) -> Vec<u8> {
        let end = bytes[*at..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| *at + p)
            .expect("an AOF line ends with CRLF");
        let text = bytes[*at..end].to_vec();
        *at = end + 2;
        text
    }
    fn number(text: &[u8]) -> usize {
        std::str::from_utf8(text).unwrap().parse().unwrap()
    }
    assert!(!is_rdb(bytes), "an RDB preamble, not commands");
    let mut at = 0;
    let mut commands = Vec::new();
    while at < bytes.len() {
        let head = line(bytes, &mut at);
        match head.first() {
            Some(b'#') => continue, // timestamp annotation
            Some(b'*') => {}
            _ => panic!("unexpected AOF line {:?}", String::from_utf8_lossy(&head)),
        }
        let mut command = Vec::new();
        for _ in 0..number(&head[1..]) {
            let len = line(bytes, &mut at);
            assert_eq!(len[0], b'$');
            let len = number(&len[1..]);
            command.push(bytes[at..at + len].to_vec());
            at += len + 2;
        }
        commands.push(expand_effect(command));
    }
    commands
}

fn name_of(command: &[Vec<u8>]) -> String {
    String::from_utf8_lossy(&command[0]).to_uppercase()
}

fn as_i64(arg: &[u8]) -> i64 {
    std::str::from_utf8(arg).unwrap().parse().unwrap()
}

/// The checks every restart test makes: same fence and absolute deadline, a
/// foreign token gets 0 and is refused, the original token releases.
fn assert_lock_is_back(con: &mut Connection, key: &str, token: &str, before: (i64, i64)) {
    assert_eq!(fence_and_deadline(con, key), before, "{key} after restart");
    assert_eq!(release(con, key, "someone-else"), 0, "{key}");
    assert_eq!(extend(con, key, "someone-else", 60_000), 0, "{key}");
    assert_eq!(
        acquire(con, key, 60_000, Some("someone-else")),
        None,
        "{key}"
    );
    assert_eq!(
        fence_and_deadline(con, key),
        before,
        "{key} after foreign calls"
    );
    assert_eq!(release(con, key, token), 1, "{key}");
    assert!(!exists(con, key), "{key} still exists after release");
}

/// The server is up, answers, and its log shows no crash or module panic.
fn assert_alive_and_no_crash(server: &mut Server) {
    assert!(server.is_running(), "server died:\n{}", server.log());
    let mut con = server.conn();
    let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
    assert_eq!(pong, "PONG");
    let log = server.log();
    for marker in [
        "crashed by signal",
        "ASSERTION FAILED",
        "BUG REPORT",
        "Guru Meditation",
        "redis-lock: panic",
    ] {
        assert!(!log.contains(marker), "log has {marker:?}:\n{log}");
    }
}

// ---------------------------------------------------------------------------
// The DUMP payload helpers (tests/common/payload.rs)
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Restarts: RDB
// ---------------------------------------------------------------------------

#[test]
fn lock_survives_shutdown_and_restart_from_rdb() {
    let mut server = Server::start_with(&["--save", "3600 1"]);
    let mut con = server.conn();
    let (token, _) = acquire(&mut con, "rdb", 600_000, None).unwrap();
    acquire(&mut con, "other", 600_000, Some("other-token")).unwrap();
    let before = fence_and_deadline(&mut con, "rdb");
    let other_before = fence_and_deadline(&mut con, "other");
    server.shutdown();
    assert!(
        server.dir.join("dump.rdb").exists(),
        "SHUTDOWN did not save"
    );
    server.restart();
    let mut con = server.conn();
    assert_lock_is_back(&mut con, "rdb", &token, before);
    assert_lock_is_back(&mut con, "other", "other-token", other_before);
}

#[test]
fn lock_survives_crash_after_save() {
    let mut server = Server::start();
    let mut con = server.conn();
    let (token, _) = acquire(&mut con, "k", 600_000, Some("crash-token")).unwrap();
    let before = fence_and_deadline(&mut con, "k");
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    server.kill();
    server.restart();
    let mut con = server.conn();
    assert_lock_is_back(&mut con, "k", &token, before);
}

// ---------------------------------------------------------------------------
// Restarts: AOF
// ---------------------------------------------------------------------------

#[test]
fn lock_survives_restart_from_aof_without_rewrite() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    let (token, _) = acquire(&mut con, "k", 600_000, None).unwrap();
    let before = fence_and_deadline(&mut con, "k");
    // SIGKILL: what the AOF holds is what the client was told. Only with
    // `appendfsync always`: under `everysec` the server may postpone its
    // write (up to 2 s, while a background fsync is slow) and reply anyway,
    // which made such tests flaky on a loaded machine (seen on Valkey 9.1).
    server.kill();
    assert!(!server.dir.join("dump.rdb").exists());
    server.restart();
    let mut con = server.conn();
    assert_lock_is_back(&mut con, "k", &token, before);
}

#[test]
fn lock_survives_restart_from_aof_after_bgrewriteaof() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    let (token, _) = acquire(&mut con, "k", 600_000, None).unwrap();
    let before = fence_and_deadline(&mut con, "k");
    rewrite_aof(&mut con);
    let files = aof_files(&server.dir);
    assert!(
        is_rdb(&files[0].1),
        "base {} is not an RDB preamble",
        files[0].0
    );
    server.shutdown();
    assert!(!server.dir.join("dump.rdb").exists());
    server.restart();
    let mut con = server.conn();
    assert_lock_is_back(&mut con, "k", &token, before);
}

#[test]
fn aof_rewrite_without_rdb_preamble_writes_setstate_and_absolute_pexpireat() {
    let mut server = Server::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut con = server.conn();
    acquire(&mut con, "k", 600_000, Some("aof-token")).unwrap();
    let (fence, deadline) = fence_and_deadline(&mut con, "k");
    rewrite_aof(&mut con);

    let files = aof_files(&server.dir);
    let (base_name, base) = &files[0];
    assert!(base_name.contains(".base.aof"), "{base_name}");
    let commands = aof_commands(base);
    let setstate: Vec<_> = commands
        .iter()
        .filter(|c| name_of(c) == "LOCK.SETSTATE")
        .collect();
    assert_eq!(setstate.len(), 1, "{commands:?}");
    let granted = info(&mut con, "k").unwrap()["granted"];
    assert_eq!(
        setstate[0][1..],
        [
            b"k".to_vec(),
            b"aof-token".to_vec(),
            fence.to_string().into_bytes(),
            deadline.to_string().into_bytes(),
            granted.to_string().into_bytes(),
            b"0".to_vec()
        ],
        "{:?}",
        setstate[0]
    );
    let pexpireat: Vec<_> = commands
        .iter()
        .filter(|c| name_of(c) == "PEXPIREAT" && c[1] == b"k")
        .collect();
    assert_eq!(pexpireat.len(), 1, "{commands:?}");
    let at = as_i64(&pexpireat[0][2]);
    assert!(
        (at - deadline).abs() <= 1,
        "PEXPIREAT {at}, deadline {deadline}"
    );
    // Absolute, not relative: a unix time in ms, not a TTL.
    assert!(at > now_ms(), "PEXPIREAT {at} is not absolute");

    server.shutdown();
    server.restart();
    let mut con = server.conn();
    assert_lock_is_back(&mut con, "k", "aof-token", (fence, deadline));
}

#[test]
fn aof_records_effects_only_and_loadaof_reproduces_the_keyspace() {
    let server = Server::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut con = server.conn();
    let mut grants = 0;
    let mut deadline_moves = 0;
    let mut releases = 0;
    for i in 0..6 {
        let key = format!("k{i}");
        let token = format!("t{i}");
        acquire(&mut con, &key, 600_000, Some(&token)).unwrap();
        grants += 1;
        // Refused and foreign calls change nothing and write nothing.
        assert_eq!(acquire(&mut con, &key, 600_000, Some("intruder")), None);
        assert_eq!(extend(&mut con, &key, "intruder", 600_000), 0);
        assert_eq!(release(&mut con, &key, "intruder"), 0);
        // Renew (same token) and extend move the deadline.
        let renewed: Option<(String, u64)> = redis::cmd("lock.acquire")
            .arg(&key)
            .arg(500_000)
            .arg("token")
            .arg(&token)
            .query(&mut con)
            .unwrap();
        assert!(renewed.is_some());
        deadline_moves += 1;
        assert_eq!(extend(&mut con, &key, &token, 700_000), 1);
        deadline_moves += 1;
        if i % 2 == 0 {
            assert_eq!(release(&mut con, &key, &token), 1);
            releases += 1;
        }
    }
    // A server-drawn token, still held.
    acquire(&mut con, "drawn", 600_000, None).unwrap();
    grants += 1;

    let commands: Vec<Vec<Vec<u8>>> = aof_files(&server.dir)
        .iter()
        .flat_map(|(_, bytes)| aof_commands(bytes))
        .collect();
    let count = |name: &str| commands.iter().filter(|c| name_of(c) == name).count();
    for forbidden in ["LOCK.ACQUIRE", "LOCK.EXTEND", "LOCK.RELEASE", "LOCK.INFO"] {
        assert_eq!(count(forbidden), 0, "{forbidden} in the AOF: {commands:?}");
    }
    // Extensions (EXTEND, and ACQUIRE by the holder) carry the whole state
    // too, since their count changes.
    assert_eq!(
        count("LOCK.SETSTATE"),
        grants + deadline_moves,
        "{commands:?}"
    );
    assert_eq!(count("PEXPIREAT"), 0, "{commands:?}");
    assert_eq!(count("DEL"), releases, "{commands:?}");
    // Each grant carries the absolute deadline the lock got.
    let drawn = commands
        .iter()
        .find(|c| name_of(c) == "LOCK.SETSTATE" && c[1] == b"drawn")
        .unwrap();
    assert_eq!(
        (as_i64(&drawn[3]), as_i64(&drawn[4])),
        fence_and_deadline(&mut con, "drawn")
    );

    let held: Vec<String> = ["k1", "k3", "k5", "drawn"].map(String::from).to_vec();
    let before: Vec<(i64, i64)> = held
        .iter()
        .map(|k| fence_and_deadline(&mut con, k))
        .collect();
    let digest_before = digest(&mut con);
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut con).unwrap();
    assert_eq!(digest(&mut con), digest_before);
    assert_eq!(dbsize(&mut con), held.len() as i64);
    for (key, before) in held.iter().zip(before) {
        assert_eq!(fence_and_deadline(&mut con, key), before, "{key}");
    }
    assert_eq!(release(&mut con, "k1", "t1"), 1);
}

// ---------------------------------------------------------------------------
// A lease that ran out while the server was down
// ---------------------------------------------------------------------------

/// Sleep until the host clock is `margin_ms` past `deadline_ms`.
fn sleep_past(deadline_ms: i64, margin_ms: i64) {
    let now = now_ms();
    let wait = deadline_ms + margin_ms - now;
    if wait > 0 {
        sleep(Duration::from_millis(wait as u64));
    }
}

#[test]
fn lease_that_ran_out_while_stopped_is_free_after_rdb_restart() {
    let mut server = Server::start();
    let mut con = server.conn();
    let (_, old_fence) = acquire(&mut con, "k", 1_000, Some("old")).unwrap();
    let (_, deadline) = fence_and_deadline(&mut con, "k");
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    // Still held after the (synchronous) save: the RDB has the lock.
    assert!(info(&mut con, "k").is_some(), "lock expired before SAVE");
    server.kill();
    sleep_past(deadline, 300);
    server.restart();
    let mut con = server.conn();
    assert_eq!(info(&mut con, "k"), None);
    assert!(!exists(&mut con, "k"));
    assert_eq!(extend(&mut con, "k", "old", 1_000), 0);
    assert_eq!(release(&mut con, "k", "old"), 0);
    let (_, fence) = acquire(&mut con, "k", 10_000, Some("new")).unwrap();
    assert!(fence > old_fence);
}

#[test]
fn lease_that_ran_out_while_stopped_is_free_after_aof_restart() {
    let mut server = Server::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut con = server.conn();
    let (_, old_fence) = acquire(&mut con, "k", 1_000, Some("old")).unwrap();
    let (_, deadline) = fence_and_deadline(&mut con, "k");
    server.kill();
    let grants = aof_files(&server.dir)
        .iter()
        .flat_map(|(_, bytes)| aof_commands(bytes))
        .filter(|c| name_of(c) == "LOCK.SETSTATE")
        .count();
    assert_eq!(grants, 1, "the AOF does not hold the grant");
    sleep_past(deadline, 300);
    server.restart();
    let mut con = server.conn();
    assert_eq!(info(&mut con, "k"), None);
    assert!(!exists(&mut con, "k"));
    assert_eq!(extend(&mut con, "k", "old", 1_000), 0);
    assert_eq!(release(&mut con, "k", "old"), 0);
    let (_, fence) = acquire(&mut con, "k", 10_000, Some("new")).unwrap();
    assert!(fence > old_fence);
}

// ---------------------------------------------------------------------------
// DEBUG RELOAD
// ---------------------------------------------------------------------------

#[test]
fn debug_reload_keeps_every_lock() {
    let server = Server::start();
    let mut con = server.conn();
    let mut locks = HashMap::new();
    for i in 0..20 {
        let key = format!("k{i}");
        let (token, _) = acquire(&mut con, &key, 600_000, None).unwrap();
        locks.insert(key, token.into_bytes());
    }
    let binary: Vec<u8> = b"\x00\xff\r\nbinary".to_vec();
    let _: Value = redis::cmd("LOCK.ACQUIRE")
        .arg("bin")
        .arg(600_000)
        .arg("TOKEN")
        .arg(&binary)
        .query(&mut con)
        .unwrap();
    locks.insert("bin".to_string(), binary);
    let before: HashMap<&String, (i64, i64)> = locks
        .keys()
        .map(|k| (k, fence_and_deadline(&mut con, k)))
        .collect();
    let digest_before = digest(&mut con);

    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();

    assert_eq!(digest(&mut con), digest_before);
    for (key, token) in &locks {
        assert_eq!(fence_and_deadline(&mut con, key), before[key], "{key}");
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg(token)
            .query(&mut con)
            .unwrap();
        assert_eq!(released, 1, "{key}");
    }
    assert_eq!(dbsize(&mut con), 0);
}

// ---------------------------------------------------------------------------
// DUMP / RESTORE
// ---------------------------------------------------------------------------

#[test]
fn dump_restore_round_trip_keeps_fence_and_token() {
    let server = Server::start();
    let mut con = server.conn();
    let (token, fence) = acquire(&mut con, "src", 600_000, None).unwrap();
    let payload = dump(&mut con, "src");
    restore(&mut con, "copy", 0, &payload).expect("RESTORE");
    let info_copy = info(&mut con, "copy").unwrap();
    assert_eq!(info_copy["fence"], fence as i64);
    // No TTL argument: no lease deadline.
    assert_eq!(info_copy["deadline"], -1);
    assert_eq!(pttl(&mut con, "copy"), -1);
    assert_eq!(release(&mut con, "copy", "someone-else"), 0);
    assert_eq!(acquire(&mut con, "copy", 1_000, Some("someone-else")), None);
    assert_eq!(extend(&mut con, "copy", &token, 5_000), 1);
    assert!(pttl(&mut con, "copy") <= 5_000);
    assert_eq!(release(&mut con, "copy", &token), 1);
    // RESTORE REPLACE over the original: same lock again.
    let before = fence_and_deadline(&mut con, "src");
    let _: Value = redis::cmd("RESTORE")
        .arg("src")
        .arg(0)
        .arg(&payload)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    assert_eq!(fence_and_deadline(&mut con, "src"), (before.0, -1));
    assert_eq!(release(&mut con, "src", &token), 1);
}

#[test]
fn restore_with_ttl_sets_the_lease() {
    let server = Server::start();
    let mut con = server.conn();
    let (token, fence) = acquire(&mut con, "src", 600_000, None).unwrap();
    let payload = dump(&mut con, "src");

    let before_ms = now_ms();
    restore(&mut con, "rel", 30_000, &payload).expect("RESTORE with TTL");
    let after_ms = now_ms();
    let (got_fence, deadline) = fence_and_deadline(&mut con, "rel");
    assert_eq!(got_fence, fence as i64);
    assert!(
        deadline >= before_ms + 30_000 - 50 && deadline <= after_ms + 30_000 + 50,
        "deadline {deadline} not ~30 s after {before_ms}"
    );
    let ttl = pttl(&mut con, "rel");
    assert!(ttl > 25_000 && ttl <= 30_000, "PTTL {ttl}");

    let at = before_ms + 123_456;
    let _: Value = redis::cmd("RESTORE")
        .arg("abs")
        .arg(at)
        .arg(&payload)
        .arg("ABSTTL")
        .query(&mut con)
        .unwrap();
    assert_eq!(fence_and_deadline(&mut con, "abs"), (fence as i64, at));
    assert_eq!(release(&mut con, "abs", &token), 1);
}

#[test]
fn restore_onto_a_second_server() {
    let first = Server::start();
    let second = Server::start();
    let mut a = first.conn();
    let mut b = second.conn();
    let (token, fence) = acquire(&mut a, "k", 600_000, None).unwrap();
    let payload = dump(&mut a, "k");
    restore(&mut b, "k", 60_000, &payload).expect("RESTORE on the second server");
    assert_eq!(info(&mut b, "k").unwrap()["fence"], fence as i64);
    assert!(pttl(&mut b, "k") > 55_000);
    assert_eq!(acquire(&mut b, "k", 1_000, Some("other")), None);
    assert_eq!(release(&mut b, "k", "other"), 0);
    assert_eq!(extend(&mut b, "k", &token, 90_000), 1);
    assert_eq!(release(&mut b, "k", &token), 1);
    // The first server is untouched.
    assert_eq!(info(&mut a, "k").unwrap()["fence"], fence as i64);
}

// ---------------------------------------------------------------------------
// Corrupt RESTORE payloads
// ---------------------------------------------------------------------------

/// A payload that RESTORE refused left no key; one it accepted is a lock with
/// a valid fence. Returns whether it was accepted.
fn restore_checked(con: &mut Connection, key: &str, payload: &[u8], case: &str) -> bool {
    match restore(con, key, 0, payload) {
        Err(e) => {
            assert!(
                e.code().is_some_and(|c| c == "ERR"),
                "{case}: {e} for {payload:02x?}"
            );
            assert!(!exists(con, key), "{case}: refused but {key} exists");
            false
        }
        Ok(_) => {
            let kind: String = redis::cmd("TYPE").arg(key).query(con).unwrap();
            assert_eq!(kind, "redislock", "{case}: {payload:02x?}");
            let fence = info(con, key).unwrap_or_else(|| panic!("{case}: not held"))["fence"];
            assert!(
                fence >= 1 && fence as u64 <= MAX_FENCE,
                "{case}: fence {fence} from {payload:02x?}"
            );
            // It DUMPs and RESTOREs again like any lock.
            let again = dump(con, key);
            let copy = format!("{key}-again");
            restore(con, &copy, 0, &again).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(info(con, &copy).unwrap()["fence"], fence, "{case}");
            let _: i64 = redis::cmd("DEL").arg(&copy).query(con).unwrap();
            true
        }
    }
}

#[test]
fn restore_of_every_truncated_payload_is_refused_or_whole() {
    let mut server = Server::start();
    let mut con = server.conn();
    let kit = PayloadKit::learn(&mut con);
    // A drawn UUID is stored as is; a repetitive token is LZF-compressed in
    // the payload, so its cuts also land inside compressed-string headers.
    let (uuid, _) = acquire(&mut con, "uuid", 600_000, None).unwrap();
    acquire(&mut con, "lzf", 600_000, Some(&"a".repeat(36))).unwrap();
    let mut accepted = 0;
    for source in ["uuid", "lzf"] {
        let fence = info(&mut con, source).unwrap()["fence"];
        let payload = dump(&mut con, source);
        let body_len = payload.len() - 10;
        if source == "uuid" {
            assert!(
                payload.windows(36).any(|w| w == uuid.as_bytes()),
                "the UUID is stored as is"
            );
        } else {
            assert!(body_len < 10 + 2 + 36 + 13, "the token is compressed");
        }

        // Plain prefixes, checksum validation off so they get past it. A
        // prefix shorter than the body cannot load; a longer one can only be
        // the lock itself.
        skip_checksum(&mut con, true);
        for n in 0..payload.len() {
            let key = format!("{source}-plain{n}");
            let case = format!("{source}: prefix of {n} bytes");
            if restore_checked(&mut con, &key, &payload[..n], &case) {
                assert!(n >= body_len, "{case} was accepted");
                assert_eq!(info(&mut con, &key).unwrap()["fence"], fence, "{case}");
                accepted += 1;
            }
        }

        // Body prefixes with a correct footer and checksum (validation on):
        // the loader, not the checksum, must refuse them. The footer's 10
        // bytes are readable, so a cut in the last 10 body bytes may still
        // decode to some lock.
        skip_checksum(&mut con, false);
        for n in 0..body_len {
            let key = format!("{source}-sealed{n}");
            let case = format!("{source}: body prefix of {n} bytes, resealed");
            if restore_checked(&mut con, &key, &kit.seal(&payload[..n]), &case) {
                assert!(n + 10 >= body_len, "{case} was accepted");
                accepted += 1;
            }
        }
    }

    // Only the two sources and the accepted ones exist.
    assert_eq!(dbsize(&mut con), 2 + accepted);
    assert_alive_and_no_crash(&mut server);
}

#[test]
fn restore_of_randomly_mutated_payloads_never_crashes() {
    let mut server = Server::start();
    let mut con = server.conn();
    acquire(
        &mut con,
        "src",
        600_000,
        Some("mutation-source-token-0123456789abcd"),
    )
    .unwrap();
    let payload = dump(&mut con, "src");
    skip_checksum(&mut con, true);
    let mut rng = StdRng::seed_from_u64(0x10c4_5eed);
    let (mut accepted, mut refused) = (0, 0);
    for i in 0..400 {
        let mut p = payload.clone();
        let kind = rng.gen_range(0..4);
        for _ in 0..rng.gen_range(1..=3) {
            // Byte 0 (the RDB type) is left alone: changing it hands the
            // payload to Redis' own types, not to this module.
            let at = rng.gen_range(1..p.len());
            match kind {
                0 => p[at] = rng.gen(),
                1 => p[at] ^= 1 << rng.gen_range(0..8),
                2 => p.insert(at, rng.gen()),
                _ => {
                    p.remove(at);
                }
            }
        }
        let case = format!("mutation {i} (kind {kind})");
        if restore_checked(&mut con, &format!("m{i}"), &p, &case) {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    // Both outcomes happen, so the payloads did reach the loader.
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
    assert_eq!(dbsize(&mut con), 1 + accepted);
    assert_alive_and_no_crash(&mut server);
}

#[test]
fn restore_of_hand_made_invalid_payloads_is_refused() {
    let mut server = Server::start();
    let mut con = server.conn();
    let kit = PayloadKit::learn(&mut con);
    let token: &[u8] = b"hand-made-token";
    let fence = 1_000_000;
    let long = vec![b'x'; 257];

    let mut truncated_token = kit.header.to_vec();
    truncated_token.extend([0x05]);
    truncated_token.extend(rdb_len(u64::from(u32::MAX)));
    truncated_token.extend(b"abc");
    let mut huge_token = kit.header.to_vec();
    huge_token.extend([0x05]);
    huge_token.extend(rdb_len(u64::MAX));
    huge_token.extend(b"abc");
    let mut token_as_unsigned = kit.body(1, token, fence);
    token_as_unsigned[10] = 0x02;
    let mut fence_as_string = kit.body(1, token, fence);
    let fence_op = fence_as_string.len() - 11;
    fence_as_string[fence_op] = 0x05;
    let mut no_fence = kit.body(1, token, fence);
    no_fence.truncate(no_fence.len() - 11);
    no_fence.push(0x00);
    let mut no_eof = kit.body(1, token, fence);
    no_eof.pop();
    let mut extra_field = kit.body(1, token, fence);
    extra_field.pop();
    extra_field.extend([0x02, 0x01, 0x00]);

    // Encoding 2: header, token, fence, then `tail` and EOF.
    let v2 = |tail: &[u8]| {
        let mut body = kit.fields(2, token, fence);
        body.extend(tail);
        body.push(0x00);
        body
    };

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("token length 0", kit.body(1, b"", fence)),
        ("token length 257", kit.body(1, &long, fence)),
        ("token length 2^32-1, 3 bytes given", truncated_token),
        ("token length 2^64-1", huge_token),
        ("fence 0", kit.body(1, token, 0)),
        ("fence 2^53", kit.body(1, token, MAX_FENCE + 1)),
        ("fence u64::MAX", kit.body(1, token, u64::MAX)),
        ("encoding version 0", kit.body(0, token, fence)),
        ("encoding version 5", kit.body(5, token, fence)),
        ("encoding 4 without its lease field", {
            let mut b = kit.body(3, token, fence);
            b[2..10].copy_from_slice(&kit.header_with_encver(4)[2..10]);
            b
        }),
        ("encoding 4, a lease group without its deadline", {
            let mut b = kit.body(4, token, fence);
            b.pop();
            b.truncate(b.len() - 2);
            b.extend([0x02, 0x07, 0x00]);
            b
        }),
        ("encoding 3 without its owner field", {
            let mut b = kit.body(2, token, fence);
            b[2..10].copy_from_slice(&kit.header_with_encver(3)[2..10]);
            b
        }),
        ("encoding 3, owner of 129 bytes", {
            let mut b = kit.fields(3, token, fence);
            b.extend(kit.v2_tail(1, u64::MAX, 0));
            b.extend(owner_field(&[b'o'; 129]));
            b.push(0x00);
            b
        }),
        (
            "encoding 2 without extends",
            v2(&kit.v2_tail(1, u64::MAX, 0)[..12]),
        ),
        (
            "encoding 2, granted < 0",
            v2(&kit.v2_tail((-5i64) as u64, u64::MAX, 0)),
        ),
        (
            "encoding 2, deadline < -1",
            v2(&kit.v2_tail(1, (-2i64) as u64, 0)),
        ),
        (
            "encoding 2, extends 2^32",
            v2(&kit.v2_tail(1, u64::MAX, 1 << 32)),
        ),
        ("encoding 2 body with encoding 1", {
            let mut b = kit.header_with_encver(1);
            b.extend(&v2(&kit.v2_tail(1, u64::MAX, 0))[10..]);
            b
        }),
        ("encoding version 1023", kit.body(1023, token, fence)),
        ("token sent as an unsigned", token_as_unsigned),
        ("fence sent as a string", fence_as_string),
        ("no fence", no_fence),
        ("no EOF marker", no_eof),
        ("a field after the fence", extra_field),
        ("header only", kit.header.to_vec()),
    ];
    for (case, body) in &cases {
        let key = format!("bad: {case}");
        let err =
            restore(&mut con, &key, 0, &kit.seal(body)).expect_err(&format!("{case} was accepted"));
        assert_eq!(err.code(), Some("ERR"), "{case}: {err}");
        assert!(!exists(&mut con, &key), "{case}: key exists");
    }
    assert_eq!(dbsize(&mut con), 0);

    // The limits themselves are accepted, and encodings 2 (before owner
    // labels) and 3 (before lease groups) still load.
    restore(&mut con, "v2", 0, &kit.seal(&kit.body(2, token, fence))).expect("encoding 2");
    assert_eq!(info(&mut con, "v2").unwrap()["fence"], fence as i64);
    restore(&mut con, "v3", 0, &kit.seal(&kit.body(3, token, fence))).expect("encoding 3");
    // A hold attached to a lease group this server does not have: it loads
    // unattached, living to the deadline its lease had.
    let mut foreign = kit.body(4, token, fence);
    foreign.pop();
    foreign.truncate(foreign.len() - 2);
    foreign.extend([0x02, 0x07, 0x02, 0x81]);
    foreign.extend(((now_ms() + 60_000) as u64).to_be_bytes());
    foreign.push(0x00);
    restore(&mut con, "foreign", 0, &kit.seal(&foreign)).expect("a foreign lease group");
    let foreign_info: std::collections::HashMap<String, Value> = redis::cmd("LOCK.INFO")
        .arg("foreign")
        .query(&mut con)
        .unwrap();
    assert!(
        !foreign_info.contains_key("lease"),
        "unattached: {foreign_info:?}"
    );
    let mut labelled = kit.fields(3, token, fence);
    labelled.extend(kit.v2_tail(1, u64::MAX, 0));
    labelled.extend(owner_field(&[b'o'; 128]));
    labelled.push(0x00);
    restore(&mut con, "owner128", 0, &kit.seal(&labelled)).expect("a 128-byte owner");
    let max_token = vec![b'y'; 256];
    restore(&mut con, "token256", 0, &kit.lock(&max_token, fence)).expect("256-byte token");
    restore(&mut con, "fence-max", 0, &kit.lock(token, MAX_FENCE)).expect("fence 2^53-1");
    restore(&mut con, "fence-1", 0, &kit.lock(token, 1)).expect("fence 1");
    assert_eq!(
        info(&mut con, "fence-max").unwrap()["fence"],
        MAX_FENCE as i64
    );
    assert_eq!(info(&mut con, "fence-1").unwrap()["fence"], 1);
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg("token256")
        .arg(&max_token)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    assert_alive_and_no_crash(&mut server);
}

#[test]
fn refused_restore_payload_does_not_move_the_fence() {
    // A payload whose lock decodes but that Redis then refuses (here: no EOF
    // marker after it) must leave no trace, like any refused command. A fence
    // of 2^53-1 in it must not use up the server's fence space.
    let server = Server::start();
    let mut con = server.conn();
    let kit = PayloadKit::learn(&mut con);
    let mut no_eof = kit.body(1, b"t", MAX_FENCE);
    *no_eof.last_mut().unwrap() = 0x07;
    assert!(restore(&mut con, "bad", 0, &kit.seal(&no_eof)).is_err());
    assert!(!exists(&mut con, "bad"));
    let reply = redis::cmd("LOCK.ACQUIRE")
        .arg("next")
        .arg(10_000)
        .query::<Option<(String, u64)>>(&mut con);
    match reply {
        Ok(Some((_, fence))) => assert!(
            fence < MAX_FENCE - 1,
            "next fence {fence}: the refused payload's fence was taken as seen"
        ),
        other => panic!("ACQUIRE after a refused RESTORE: {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Digest and memory
// ---------------------------------------------------------------------------

fn digest_values(con: &mut Connection, keys: &[&str]) -> Vec<String> {
    redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(keys)
        .query(con)
        .expect("DEBUG DIGEST-VALUE")
}

#[test]
fn digest_value_tells_locks_apart_and_survives_reload() {
    let server = Server::start();
    let mut con = server.conn();
    let kit = PayloadKit::learn(&mut con);
    let (_, fence) = acquire(&mut con, "a", 600_000, Some("t1")).unwrap();
    // Same token, another fence.
    acquire(&mut con, "other-fence", 600_000, Some("t1")).unwrap();
    // Same fence, another token.
    restore(&mut con, "other-token", 600_000, &kit.lock(b"t2", fence)).unwrap();
    // Same token and fence: a copy.
    let payload = dump(&mut con, "a");
    restore(&mut con, "same", 600_000, &payload).unwrap();

    let keys = ["a", "other-fence", "other-token", "same"];
    let d = digest_values(&mut con, &keys);
    assert_ne!(d[0], "0".repeat(40), "empty digest for a lock");
    assert_ne!(d[0], d[1], "fence not in the digest");
    assert_ne!(d[0], d[2], "token not in the digest");
    assert_eq!(d[0], d[3], "same lock, different digest");

    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(digest_values(&mut con, &keys), d);
}

#[test]
fn memory_usage_is_positive_small_and_counts_the_token() {
    let server = Server::start();
    let mut con = server.conn();
    let (token, _) = acquire(&mut con, "k", 600_000, None).unwrap();
    assert_eq!(token.len(), 36);
    let usage = |con: &mut Connection, key: &str| -> i64 {
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query(con)
            .expect("MEMORY USAGE")
    };
    let small = usage(&mut con, "k");
    assert!(small > 36 && small < 200, "MEMORY USAGE {small}");
    let long = "z".repeat(256);
    acquire(&mut con, "j", 600_000, Some(&long)).unwrap();
    let big = usage(&mut con, "j");
    assert!(
        big - small >= 200,
        "256-byte token {big}, 36-byte token {small}"
    );
}
