//! Files written before the one hold model still load, whole: an RDB and a
//! multi-part AOF (its base in the text forms of an AOF rewrite, its
//! incremental part in the packed effects) that `tests/fixtures/make.sh`
//! wrote with the module of main at 2747111 on Redis 7.0, holding locks of
//! every storage (packed, kept whole, labelled, extended, binary, without
//! expiry), readers and permits. Each key comes back with the same TTL and
//! the same bytes (its `DUMP` payload without the RDB version and checksum,
//! which differ by server), and the next grant's fence is above every fence
//! in the files. Runs on every server of the matrix (each reads Redis
//! 7.0's files).

mod common;
use common::payload::rdb_len_decode;
use common::*;

use std::path::{Path, PathBuf};

const FIXTURES: &str = "tests/fixtures/v1";

/// (key, PEXPIRETIME, DUMP body) of each key in the fixtures.
fn expected() -> Vec<(Vec<u8>, i64, Vec<u8>)> {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join("expected.txt")).unwrap();
    let hex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    text.lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            (hex(parts[0]), parts[1].parse().unwrap(), hex(parts[2]))
        })
        .collect()
}

/// A `DUMP` body of the fixtures' encodings (a lock's 3, a list's 1) as the
/// module writes it now (4 and 2): the same fields, each hold followed by
/// `[0x02 0x00]`, no lease group. The values are read, never re-made.
fn in_current_encoding(body: &[u8]) -> Vec<u8> {
    let mut out = body[..10].to_vec();
    let id = u64::from_be_bytes(body[2..10].try_into().unwrap());
    let encver = id & 1023;
    let list = match encver {
        3 => false,
        1 => true,
        other => panic!("fixture encoding {other}"),
    };
    out[2..10].copy_from_slice(&((id & !1023) | (encver + 1)).to_be_bytes());
    // One field: its opcode (0x02 a number, 0x05 a string) and value.
    let mut at = 10;
    let mut field = |out: &mut Vec<u8>| -> u64 {
        let opcode = body[at];
        let first = body[at + 1];
        let (n, len) = match (opcode, first >> 6) {
            // A string kept as an integer (1, 2 or 4 bytes), or LZF
            // compressed (compressed length, length, bytes).
            (0x05, 3) => match first & 0x3f {
                0 => (0, 2 + 1),
                1 => (0, 2 + 2),
                2 => (0, 2 + 4),
                _ => {
                    let (clen, used) = rdb_len_decode(&body[at + 2..]);
                    let (_, used2) = rdb_len_decode(&body[at + 2 + used..]);
                    (0, 2 + used + used2 + clen as usize)
                }
            },
            _ => {
                let (n, used) = rdb_len_decode(&body[at + 1..]);
                (n, 1 + used + if opcode == 0x05 { n as usize } else { 0 })
            }
        };
        out.extend(&body[at..at + len]);
        at += len;
        n
    };
    let holds = if list {
        field(&mut out);
        field(&mut out)
    } else {
        1
    };
    // token, fence, granted, deadline, extends, [count], owner
    let fields = if list { 7 } else { 6 };
    for _ in 0..holds {
        for _ in 0..fields {
            field(&mut out);
        }
        out.extend([0x02, 0x00]);
    }
    assert_eq!(body[at..], [0x00], "the fixture's EOF");
    out.push(0x00);
    out
}

fn server_dir(con: &mut Connection) -> PathBuf {
    let dir: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dir")
        .query(con)
        .unwrap();
    PathBuf::from(&dir[1])
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Every key of the fixtures is here, as it was written.
fn assert_loaded(con: &mut Connection, what: &str) {
    let keys = expected();
    assert_eq!(dbsize(con), keys.len() as i64, "{what}: keys");
    let mut highest = 0;
    for (key, deadline, body) in &keys {
        let now: i64 = redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap();
        assert_eq!(now, *deadline, "{what}: {key:?} TTL");
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(con).unwrap();
        assert_eq!(
            &payload[..payload.len() - 10],
            &in_current_encoding(body)[..],
            "{what}: {key:?} bytes"
        );
        let info: Option<std::collections::HashMap<String, Value>> =
            redis::cmd(if key == b"permits" {
                "SEM.INFO"
            } else {
                "LOCK.INFO"
            })
            .arg(key)
            .query(con)
            .unwrap();
        let info = info.unwrap_or_else(|| panic!("{what}: {key:?} is held"));
        let fence: i64 = redis::from_redis_value(&info["fence"]).unwrap();
        highest = highest.max(fence);
    }
    // The tokens: each holder renews its own hold (same fence).
    for (key, token) in [
        (&b"packed-short"[..], &b"worker-1"[..]),
        (b"extended", b"ext"),
        (b"bin\x00\r\n\xff", b"t\x00\xfe"),
        (b"persisted", b"p"),
        (b"readers", b"r1"),
        (b"readers", b"r2"),
    ] {
        let extended: i64 = redis::cmd("LOCK.EXTEND")
            .arg(key)
            .arg(token)
            .arg(60_000)
            .query(con)
            .unwrap();
        assert_eq!(extended, 1, "{what}: {key:?} held by {token:?}");
    }
    for token in ["a", "b", "c"] {
        let extended: i64 = redis::cmd("SEM.EXTEND")
            .arg(&["permits", token, "60000"])
            .query(con)
            .unwrap();
        assert_eq!(extended, 1, "{what}: permits of {token}");
    }
    let (_, fence) = acquire(con, "new", 1_000, None).unwrap();
    assert!(
        fence as i64 > highest,
        "{what}: fence {fence} after {highest}"
    );
}

#[test]
fn an_rdb_written_before_the_one_hold_model_loads_whole() {
    let server = Server::start();
    let mut con = server.conn();
    let dir = server_dir(&mut con);
    std::fs::copy(Path::new(FIXTURES).join("dump.rdb"), dir.join("dump.rdb")).unwrap();
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .arg("NOSAVE")
        .query(&mut con)
        .unwrap();
    assert_loaded(&mut con, "RDB");
}

#[test]
fn an_aof_written_before_the_one_hold_model_loads_whole() {
    let mut server = Server::start();
    let dir = server_dir(&mut server.conn());
    server.shutdown();
    copy_dir(
        &Path::new(FIXTURES).join("appendonlydir"),
        &dir.join("appendonlydir"),
    );
    server.restart_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    assert_loaded(&mut server.conn(), "AOF");
}
