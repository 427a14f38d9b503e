//! Binary safety, end to end: keys, tokens, owner labels and guarded
//! arguments that hold NUL, `\r\n`, high bytes (and an empty key, which
//! Redis allows) go through every command and every path that rebuilds a
//! key name from stored bytes: a grant, a wait and its hand-off on release,
//! on expiry and on `DEL`, a SESSION connection that closes, a blocked
//! `LOCK.OBSERVE`, `LOCK.QUEUE`, `LOCK.GUARD`, shared locks and semaphores,
//! the expiry counter, a replica, an AOF reload, an RDB reload and
//! `DUMP`/`RESTORE`. Each comes back byte for byte, and the server log has
//! no panic. Runs on every server of the matrix.

mod common;
use common::*;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

/// Keys that a C string would truncate or a text protocol would split.
const KEYS: [&[u8]; 4] = [b"job\x00:1", b"a\r\nb", b"\xff\xfe\x00\x80", b""];
/// Tokens and labels of the same kind (each 1 byte or more: both must be).
const TOKENS: [&[u8]; 3] = [b"t\x00k", b"\r\n", b"\xff\x00\xfe"];
const OWNER: &[u8] = b"o\x00\r\n\xff";

fn cmd(parts: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd(std::str::from_utf8(parts[0]).expect("a command name"));
    for part in &parts[1..] {
        cmd.arg(*part);
    }
    cmd
}

fn grant_of(con: &mut Connection, parts: &[&[u8]]) -> Option<(Vec<u8>, u64)> {
    cmd(parts).query(con).expect("a grant or null")
}

/// `LOCK.INFO` (or `SEM.INFO`) as field → value, `None` when free.
fn info_of(con: &mut Connection, command: &str, key: &[u8]) -> Option<HashMap<String, Value>> {
    redis::cmd(command)
        .arg(key)
        .query(con)
        .expect("INFO of a key")
}

fn int(fields: &HashMap<String, Value>, name: &str) -> i64 {
    match fields.get(name) {
        Some(Value::Int(n)) => *n,
        other => panic!("{name}: {other:?}"),
    }
}

fn bytes(fields: &HashMap<String, Value>, name: &str) -> Vec<u8> {
    match fields.get(name) {
        Some(Value::BulkString(b)) => b.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

fn counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .expect("a counter")
}

fn assert_no_panic(server: &Server) {
    let log = server.log();
    assert!(!log.contains("panic"), "a panic in the log:\n{log}");
}

/// A waiter for `key`, blocked on a connection of its own; its reply.
fn waiter(server: &Server, parts: &[&[u8]]) -> thread::JoinHandle<Option<(Vec<u8>, u64)>> {
    let mut con = server.conn();
    let wait = cmd(parts);
    thread::spawn(move || wait.query(&mut con).expect("a grant or null"))
}

/// Wait (bounded) until `n` clients wait for `key` (any kind of lock key).
fn queued(con: &mut Connection, key: &[u8], n: usize) {
    wait_until(Duration::from_secs(20), || {
        redis::cmd("LOCK.QUEUE")
            .arg(key)
            .query::<Vec<Value>>(con)
            .expect("LOCK.QUEUE")
            .len()
            == n
    });
}

#[test]
fn binary_keys_tokens_and_labels_come_back_exactly_from_every_command() {
    let server = Server::start();
    let mut con = server.conn();
    for (i, key) in KEYS.iter().enumerate() {
        let token = TOKENS[i % TOKENS.len()];
        let (got, fence) = grant_of(
            &mut con,
            &[
                b"LOCK.ACQUIRE",
                key,
                b"60000",
                b"TOKEN",
                token,
                b"OWNER",
                OWNER,
            ],
        )
        .expect("granted");
        assert_eq!(got, token);
        let info = info_of(&mut con, "LOCK.INFO", key).expect("held");
        assert_eq!(int(&info, "fence") as u64, fence);
        assert_eq!(bytes(&info, "owner"), OWNER);
        // The same token renews, another is refused: byte equality.
        let renewed = grant_of(&mut con, &[b"LOCK.ACQUIRE", key, b"60000", b"TOKEN", token]);
        assert_eq!(renewed, Some((token.to_vec(), fence)));
        let mut prefix = token.to_vec();
        prefix.pop();
        if !prefix.is_empty() {
            assert_eq!(
                grant_of(
                    &mut con,
                    &[b"LOCK.ACQUIRE", key, b"60000", b"TOKEN", &prefix]
                ),
                None
            );
        }
        let extended: i64 = cmd(&[b"LOCK.EXTEND", key, token, b"30000"])
            .query(&mut con)
            .unwrap();
        assert_eq!(extended, 1);
        // A guarded write with binary key and value.
        let data = [key, &b"\x00data"[..]].concat();
        let _: () = cmd(&[b"LOCK.GUARD", key, token, b"SET", &data, b"v\x00\r\n"])
            .query(&mut con)
            .unwrap();
        let stored: Vec<u8> = redis::cmd("GET").arg(&data).query(&mut con).unwrap();
        assert_eq!(stored, b"v\x00\r\n");
        let released: i64 = cmd(&[b"LOCK.RELEASE", key, token]).query(&mut con).unwrap();
        assert_eq!(released, 1);
        assert!(info_of(&mut con, "LOCK.INFO", key).is_none());
    }
    assert_no_panic(&server);
}

#[test]
fn a_waiter_for_a_binary_key_is_handed_it_on_release_expiry_and_delete() {
    let server = Server::start();
    let mut con = server.conn();
    for key in KEYS {
        // On release.
        grant_of(
            &mut con,
            &[b"LOCK.ACQUIRE", key, b"60000", b"TOKEN", b"a\x00"],
        )
        .unwrap();
        let w = waiter(
            &server,
            &[
                b"LOCK.ACQUIRE",
                key,
                b"60000",
                b"TOKEN",
                b"w\r\n",
                b"WAIT",
                b"20000",
            ],
        );
        queued(&mut con, key, 1);
        let _: i64 = cmd(&[b"LOCK.RELEASE", key, b"a\x00"])
            .query(&mut con)
            .unwrap();
        let (token, _) = w.join().unwrap().expect("handed over on release");
        assert_eq!(token, b"w\r\n");
        let _: i64 = cmd(&[b"LOCK.RELEASE", key, b"w\r\n"])
            .query(&mut con)
            .unwrap();

        // On expiry: counted, and handed over with no client traffic.
        let expiries = counter(&mut con, "expiries");
        grant_of(
            &mut con,
            &[b"LOCK.ACQUIRE", key, b"300", b"TOKEN", b"a\x00"],
        )
        .unwrap();
        let w = waiter(
            &server,
            &[
                b"LOCK.ACQUIRE",
                key,
                b"60000",
                b"TOKEN",
                b"\xffw",
                b"WAIT",
                b"20000",
            ],
        );
        let (token, _) = w.join().unwrap().expect("handed over on expiry");
        assert_eq!(token, b"\xffw");
        assert_eq!(counter(&mut con, "expiries"), expiries + 1);
        let _: i64 = cmd(&[b"LOCK.RELEASE", key, b"\xffw"])
            .query(&mut con)
            .unwrap();

        // On DEL.
        grant_of(
            &mut con,
            &[b"LOCK.ACQUIRE", key, b"60000", b"TOKEN", b"a\x00"],
        )
        .unwrap();
        let w = waiter(
            &server,
            &[
                b"LOCK.ACQUIRE",
                key,
                b"60000",
                b"TOKEN",
                b"d\x00",
                b"WAIT",
                b"20000",
            ],
        );
        queued(&mut con, key, 1);
        let _: i64 = redis::cmd("DEL").arg(key).query(&mut con).unwrap();
        let (token, _) = w.join().unwrap().expect("handed over on DEL");
        assert_eq!(token, b"d\x00");
        let _: i64 = cmd(&[b"LOCK.RELEASE", key, b"d\x00"])
            .query(&mut con)
            .unwrap();
    }
    assert_no_panic(&server);
}

#[test]
fn a_binary_session_lock_goes_with_its_connection_and_observers_are_answered() {
    let server = Server::start();
    let mut con = server.conn();
    for key in KEYS {
        // An observer of the free key, answered when a SESSION lock is
        // granted, then when its connection closes.
        let mut watcher = server.conn();
        let observe_key = key.to_vec();
        let observer = thread::spawn(move || {
            let first: Option<HashMap<String, Value>> = redis::cmd("LOCK.OBSERVE")
                .arg(&observe_key)
                .arg(0)
                .arg(20000)
                .query(&mut watcher)
                .expect("an observed holder");
            let first = first.expect("a holder");
            let fence = int(&first, "fence");
            let second: Option<HashMap<String, Value>> = redis::cmd("LOCK.OBSERVE")
                .arg(&observe_key)
                .arg(fence)
                .arg(20000)
                .query(&mut watcher)
                .expect("the next holder");
            (bytes(&first, "owner"), second)
        });
        wait_until(Duration::from_secs(20), || {
            info_field(&mut con, "lock", "lock_observers") == "1"
        });
        let mut session = server.conn();
        grant_of(
            &mut session,
            &[
                b"LOCK.ACQUIRE",
                key,
                b"60000",
                b"TOKEN",
                b"s\x00",
                b"SESSION",
                b"OWNER",
                OWNER,
            ],
        )
        .expect("granted");
        wait_until(Duration::from_secs(20), || {
            info_field(&mut con, "lock", "lock_observers") == "1"
        });
        drop(session);
        let (owner, after) = observer.join().unwrap();
        assert_eq!(owner, OWNER);
        assert!(after.is_none(), "released when its connection closed");
        assert!(info_of(&mut con, "LOCK.INFO", key).is_none());
    }
    assert_no_panic(&server);
}

#[test]
fn lock_queue_shows_binary_labels_of_waiters() {
    let server = Server::start();
    let mut con = server.conn();
    for key in KEYS {
        grant_of(&mut con, &[b"LOCK.ACQUIRE", key, b"60000", b"TOKEN", b"a"]).unwrap();
        let w = waiter(
            &server,
            &[
                b"LOCK.ACQUIRE",
                key,
                b"60000",
                b"TOKEN",
                b"w",
                b"WAIT",
                b"20000",
                b"OWNER",
                OWNER,
            ],
        );
        queued(&mut con, key, 1);
        let queue: Vec<HashMap<String, Value>> =
            redis::cmd("LOCK.QUEUE").arg(key).query(&mut con).unwrap();
        assert_eq!(bytes(&queue[0], "owner"), OWNER);
        let _: i64 = cmd(&[b"LOCK.RELEASE", key, b"a"]).query(&mut con).unwrap();
        assert!(w.join().unwrap().is_some());
        let _: i64 = cmd(&[b"LOCK.RELEASE", key, b"w"]).query(&mut con).unwrap();
    }
    assert_no_panic(&server);
}

#[test]
fn binary_shared_locks_and_semaphores_grant_hand_off_and_expire() {
    let server = Server::start();
    let mut con = server.conn();
    for (i, key) in KEYS.iter().enumerate() {
        let token = TOKENS[i % TOKENS.len()];
        let other = [token, b"2"].concat();
        // Two readers, listed with their binary labels; a writer waits.
        for t in [token, &other[..]] {
            grant_of(
                &mut con,
                &[
                    b"LOCK.ACQUIRE",
                    key,
                    b"300",
                    b"TOKEN",
                    t,
                    b"SHARED",
                    b"OWNER",
                    OWNER,
                ],
            )
            .expect("a reader");
        }
        let info = info_of(&mut con, "LOCK.INFO", key).expect("readers");
        assert_eq!(int(&info, "holders"), 2);
        let w = waiter(
            &server,
            &[
                b"LOCK.ACQUIRE",
                key,
                b"60000",
                b"TOKEN",
                b"\x00w",
                b"WAIT",
                b"20000",
            ],
        );
        // Both readers' leases run out; the writer is handed the key.
        let (got, _) = w.join().unwrap().expect("the writer after the readers");
        assert_eq!(got, b"\x00w");
        let _: i64 = cmd(&[b"LOCK.RELEASE", key, b"\x00w"])
            .query(&mut con)
            .unwrap();

        // A semaphore: permits, their hand-off on release, SEM.INFO.
        let sem = [key, &b"\x00sem"[..]].concat();
        grant_of(
            &mut con,
            &[
                b"SEM.ACQUIRE",
                &sem,
                b"2",
                b"60000",
                b"COUNT",
                b"2",
                b"TOKEN",
                token,
            ],
        )
        .expect("two permits");
        let w = waiter(
            &server,
            &[
                b"SEM.ACQUIRE",
                &sem,
                b"2",
                b"60000",
                b"TOKEN",
                &other,
                b"WAIT",
                b"20000",
            ],
        );
        queued(&mut con, &sem, 1);
        let released: i64 = cmd(&[b"SEM.RELEASE", &sem, token]).query(&mut con).unwrap();
        assert_eq!(released, 1);
        assert_eq!(w.join().unwrap().expect("a permit").0, other);
        let info = info_of(&mut con, "SEM.INFO", &sem).expect("held");
        assert_eq!(int(&info, "used"), 1);
        let _: i64 = cmd(&[b"SEM.RELEASE", &sem, &other])
            .query(&mut con)
            .unwrap();
    }
    assert_no_panic(&server);
}

/// The state of every key the test made, as the server shows it: to
/// compare a replica, a reload and a restore with the master.
type Fields = HashMap<String, Value>;

fn states(con: &mut Connection) -> Vec<(Vec<u8>, Option<Fields>)> {
    let mut all = Vec::new();
    for key in KEYS {
        let mut info = info_of(con, "LOCK.INFO", key);
        if let Some(i) = info.as_mut() {
            i.remove("ttl");
        }
        all.push((key.to_vec(), info));
        let sem = [key, &b"\x00sem"[..]].concat();
        let mut info = info_of(con, "SEM.INFO", &sem);
        if let Some(i) = info.as_mut() {
            i.remove("ttl");
            i.remove("holds");
        }
        all.push((sem, info));
    }
    all
}

fn hold_everything(con: &mut Connection) {
    for (i, key) in KEYS.iter().enumerate() {
        let token = TOKENS[i % TOKENS.len()];
        grant_of(
            con,
            &[
                b"LOCK.ACQUIRE",
                key,
                b"600000",
                b"TOKEN",
                token,
                b"OWNER",
                OWNER,
            ],
        )
        .expect("granted");
        let sem = [key, &b"\x00sem"[..]].concat();
        grant_of(
            con,
            &[
                b"SEM.ACQUIRE",
                &sem,
                b"3",
                b"600000",
                b"TOKEN",
                token,
                b"OWNER",
                OWNER,
            ],
        )
        .expect("granted");
    }
}

#[test]
fn binary_keys_reach_a_replica_and_survive_aof_rdb_and_restore() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut m)
        .unwrap();
    wait_for_aof_rewrite(&mut m);
    hold_everything(&mut m);
    let before = states(&mut m);
    assert!(before.iter().all(|(_, s)| s.is_some()));

    sync_replica(&master, &replica);
    assert_eq!(states(&mut replica.conn()), before, "replica");

    // The AOF as commands (and after a rewrite), then the RDB.
    let _: Value = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
    assert_eq!(states(&mut m), before, "AOF reload");
    rewrite_aof(&mut m);
    let _: Value = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
    assert_eq!(states(&mut m), before, "AOF reload after a rewrite");
    let _: Value = redis::cmd("DEBUG").arg("RELOAD").query(&mut m).unwrap();
    assert_eq!(states(&mut m), before, "RDB reload");

    // DUMP and RESTORE of each key under its own name, at its own deadline.
    for (key, _) in &before {
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut m).unwrap();
        let deadline: i64 = redis::cmd("PEXPIRETIME").arg(key).query(&mut m).unwrap();
        let _: () = redis::cmd("DEL").arg(key).query(&mut m).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg(key)
            .arg(deadline)
            .arg(payload)
            .arg("ABSTTL")
            .query(&mut m)
            .unwrap();
    }
    assert_eq!(states(&mut m), before, "DUMP and RESTORE");
    assert_no_panic(&master);
    assert_no_panic(&replica);
}
