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
            &body[..],
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
