//! Multi-key locks (issue 28): `LOCK.MACQUIRE numkeys key [key ...] ttl-ms
//! [options]`, `LOCK.MRELEASE numkeys key [key ...] token`, `LOCK.MEXTEND
//! numkeys key [key ...] token ttl-ms`: all or nothing, one fence, waiting
//! on every key without holding any, fair to single-key requests, declared
//! keys (GETKEYS, ACL, CROSSSLOT), replicated as per-key effects.

mod common;
use common::*;

use std::thread;
use std::time::Duration;

fn macquire(keys: &[&[u8]], ttl: i64, options: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.MACQUIRE");
    cmd.arg(keys.len()).arg(keys).arg(ttl);
    for option in options {
        cmd.arg(*option);
    }
    cmd
}

fn grant(con: &mut Connection, cmd: &redis::Cmd) -> Option<(Vec<u8>, u64)> {
    cmd.query::<Option<(Vec<u8>, u64)>>(con)
        .expect("LOCK.MACQUIRE")
}

fn mrelease(con: &mut Connection, keys: &[&[u8]], token: &[u8]) -> i64 {
    redis::cmd("LOCK.MRELEASE")
        .arg(keys.len())
        .arg(keys)
        .arg(token)
        .query(con)
        .expect("LOCK.MRELEASE")
}

fn mextend(con: &mut Connection, keys: &[&[u8]], token: &[u8], ttl: i64) -> i64 {
    redis::cmd("LOCK.MEXTEND")
        .arg(keys.len())
        .arg(keys)
        .arg(token)
        .arg(ttl)
        .query(con)
        .expect("LOCK.MEXTEND")
}

fn fence_of(con: &mut Connection, key: &[u8]) -> Option<i64> {
    let info: Option<std::collections::HashMap<String, Value>> =
        redis::cmd("LOCK.INFO").arg(key).query(con).unwrap();
    info.and_then(|i| match i.get("fence") {
        Some(Value::Int(f)) => Some(*f),
        _ => None,
    })
}

/// `LOCK.QUEUE key`'s length: how many wait for it.
fn queued(con: &mut Connection, key: &[u8]) -> usize {
    let q: Vec<Value> = redis::cmd("LOCK.QUEUE").arg(key).query(con).unwrap();
    q.len()
}

/// Run `cmd` on its own connection in a thread: its reply.
fn in_thread(server: &Server, cmd: redis::Cmd) -> thread::JoinHandle<Option<(Vec<u8>, u64)>> {
    let mut con = server.conn();
    thread::spawn(move || cmd.query(&mut con).expect("waiter"))
}

#[test]
fn all_keys_are_granted_with_one_fence_or_none_is() {
    let server = Server::start();
    let mut con = server.conn();
    let (token, fence) = grant(&mut con, &macquire(&[b"a", b"b", b"c"], 60_000, &[])).unwrap();
    assert_eq!(token.len(), 36);
    for key in [&b"a"[..], b"b", b"c"] {
        assert_eq!(fence_of(&mut con, key), Some(fence as i64));
    }
    // One deadline for all.
    assert_eq!(
        fence_and_deadline(&mut con, "a"),
        fence_and_deadline(&mut con, "c")
    );
    // One key busy: nothing granted, nothing changed.
    acquire(&mut con, "y", 60_000, Some("other")).unwrap();
    assert_eq!(
        grant(&mut con, &macquire(&[b"x", b"y", b"z"], 60_000, &[])),
        None
    );
    assert!(!exists(&mut con, "x") && !exists(&mut con, "z"));
    // A later grant's fence is above every fence its keys had.
    let before = fence_of(&mut con, b"y").unwrap();
    assert_eq!(release(&mut con, "y", "other"), 1);
    let (_, later) = grant(&mut con, &macquire(&[b"x", b"y"], 60_000, &[])).unwrap();
    assert!(later as i64 > before && later > fence);
}

#[test]
fn the_same_token_retrying_gets_the_same_grant_and_a_fresh_lease() {
    let server = Server::start();
    let mut con = server.conn();
    let cmd = macquire(&[b"a", b"b"], 5_000, &[b"TOKEN", b"t"]);
    let first = grant(&mut con, &cmd).unwrap();
    let longer = macquire(&[b"a", b"b"], 60_000, &[b"TOKEN", b"t"]);
    assert_eq!(grant(&mut con, &longer), Some(first.clone()));
    assert!(pttl(&mut con, "a") > 10_000 && pttl(&mut con, "b") > 10_000);
    // Holding only some of them is not that grant: an error, nothing changed.
    let wider = macquire(&[b"a", b"b", b"c"], 60_000, &[b"TOKEN", b"t"]);
    assert!(error_of(&mut con, &wider).contains("only some"));
    assert!(!exists(&mut con, "c"));
    // Each key is a lock like any other.
    assert_eq!(extend(&mut con, "a", "t", 30_000), 1);
    assert_eq!(release(&mut con, "a", "t"), 1);
    assert_eq!(fence_of(&mut con, b"b"), Some(first.1 as i64));
}

#[test]
fn mrelease_counts_what_it_released_and_mextend_is_all_or_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    grant(&mut con, &macquire(&[b"a", b"b"], 5_000, &[b"TOKEN", b"t"])).unwrap();
    assert_eq!(mextend(&mut con, &[b"a", b"b"], b"t", 60_000), 1);
    assert!(pttl(&mut con, "b") > 10_000);
    // Not every key held: 0, and no lease moved.
    assert_eq!(mextend(&mut con, &[b"a", b"b", b"c"], b"t", 120_000), 0);
    assert!(pttl(&mut con, "a") <= 60_000);
    assert_eq!(mextend(&mut con, &[b"a", b"b"], b"other", 120_000), 0);
    assert_eq!(mrelease(&mut con, &[b"a", b"b"], b"other"), 0);
    assert_eq!(mrelease(&mut con, &[b"a", b"c", b"b"], b"t"), 2);
    assert_eq!(dbsize(&mut con), 0);
    assert_eq!(mrelease(&mut con, &[b"a", b"b"], b"t"), 0);
}

#[test]
fn waiters_in_opposite_orders_are_both_granted() {
    let server = Server::start();
    let mut con = server.conn();
    grant(
        &mut con,
        &macquire(&[b"a", b"b"], 60_000, &[b"TOKEN", b"h"]),
    )
    .unwrap();
    let ab = in_thread(
        &server,
        macquire(&[b"a", b"b"], 60_000, &[b"TOKEN", b"ab", b"WAIT", b"0"]),
    );
    wait_until(Duration::from_secs(10), || queued(&mut con, b"a") == 1);
    let ba = in_thread(
        &server,
        macquire(&[b"b", b"a"], 60_000, &[b"TOKEN", b"ba", b"WAIT", b"0"]),
    );
    wait_until(Duration::from_secs(10), || queued(&mut con, b"a") == 2);
    assert_eq!(mrelease(&mut con, &[b"a", b"b"], b"h"), 2);
    let (token, fence) = ab.join().unwrap().unwrap();
    assert_eq!(token, b"ab");
    assert_eq!(fence_of(&mut con, b"b"), Some(fence as i64));
    assert_eq!(mrelease(&mut con, &[b"a", b"b"], b"ab"), 2);
    let (token, later) = ba.join().unwrap().unwrap();
    assert_eq!(token, b"ba");
    assert!(later > fence);
}

#[test]
fn a_waiting_multi_key_request_is_not_overtaken_by_single_key_requests() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "b", 60_000, Some("holder")).unwrap();
    let multi = in_thread(
        &server,
        macquire(&[b"a", b"b"], 60_000, &[b"TOKEN", b"m", b"WAIT", b"0"]),
    );
    wait_until(Duration::from_secs(10), || queued(&mut con, b"a") == 1);
    // `a` is free but reserved: no barging, blocking or not.
    assert_eq!(acquire(&mut con, "a", 60_000, Some("late")), None);
    let single = in_thread(&server, acquire_wait("a", 60_000, "single", 0).clone());
    wait_until(Duration::from_secs(10), || queued(&mut con, b"a") == 2);
    assert_eq!(release(&mut con, "b", "holder"), 1);
    let (token, _) = multi.join().unwrap().unwrap();
    assert_eq!(token, b"m");
    assert_eq!(queued(&mut con, b"a"), 1);
    assert_eq!(mrelease(&mut con, &[b"a", b"b"], b"m"), 2);
    assert_eq!(single.join().unwrap().unwrap().0, b"single");
}

#[test]
fn a_wait_that_runs_out_or_a_waiter_that_leaves_frees_its_place() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "b", 60_000, Some("holder")).unwrap();
    let timed = macquire(&[b"a", b"b"], 60_000, &[b"TOKEN", b"m", b"WAIT", b"100"]);
    assert_eq!(grant(&mut con, &timed), None);
    assert_eq!(queued(&mut con, b"a"), 0);
    // A waiter whose connection closes leaves every queue, and the request
    // behind it on the free key is served.
    let mut leaver = server.conn();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut leaver).unwrap();
    let gone = thread::spawn(move || {
        let _ = macquire(&[b"a", b"b"], 60_000, &[b"WAIT", b"0"]).query::<Value>(&mut leaver);
    });
    wait_until(Duration::from_secs(10), || queued(&mut con, b"a") == 1);
    let single = in_thread(&server, acquire_wait("a", 60_000, "single", 0).clone());
    wait_until(Duration::from_secs(10), || queued(&mut con, b"a") == 2);
    let _: Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut con)
        .unwrap();
    gone.join().unwrap();
    assert_eq!(single.join().unwrap().unwrap().0, b"single");
    assert_eq!(queued(&mut con, b"b"), 0);
    assert_eq!(release(&mut con, "b", "holder"), 1);
    assert!(!exists(&mut con, "b"));
}

#[test]
fn expiry_of_one_key_ends_that_keys_hold_only() {
    let server = Server::start();
    let mut con = server.conn();
    grant(
        &mut con,
        &macquire(&[b"a", b"b"], 60_000, &[b"TOKEN", b"t"]),
    )
    .unwrap();
    assert_eq!(extend(&mut con, "a", "t", 50), 1);
    wait_until(Duration::from_secs(10), || !exists(&mut con, "a"));
    assert!(pttl(&mut con, "b") > 10_000);
    assert_eq!(mextend(&mut con, &[b"a", b"b"], b"t", 60_000), 0);
    assert_eq!(mrelease(&mut con, &[b"a", b"b"], b"t"), 1);
}

#[test]
fn shared_takes_a_read_lease_on_every_key() {
    let server = Server::start();
    let mut con = server.conn();
    grant(
        &mut con,
        &macquire(&[b"a", b"b"], 60_000, &[b"SHARED", b"TOKEN", b"r1"]),
    )
    .unwrap();
    grant(
        &mut con,
        &macquire(&[b"b", b"a"], 60_000, &[b"SHARED", b"TOKEN", b"r2"]),
    )
    .unwrap();
    assert_eq!(grant(&mut con, &macquire(&[b"a"], 60_000, &[])), None);
    assert_eq!(acquire(&mut con, "b", 60_000, None), None);
    assert_eq!(mrelease(&mut con, &[b"a", b"b"], b"r1"), 2);
    assert_eq!(mrelease(&mut con, &[b"a", b"b"], b"r2"), 2);
}

#[test]
fn binary_keys_tokens_and_labels_round_trip() {
    let server = Server::start();
    let mut con = server.conn();
    let keys: [&[u8]; 3] = [b"k\0ey", b"k\r\ney", b"\xff\xfe"];
    let token: &[u8] = b"t\0k\r\n\xff";
    let (got, fence) = grant(
        &mut con,
        &macquire(&keys, 60_000, &[b"TOKEN", token, b"OWNER", b"o\0\xff"]),
    )
    .unwrap();
    assert_eq!(got, token);
    for key in keys {
        assert_eq!(fence_of(&mut con, key), Some(fence as i64));
    }
    assert_eq!(mextend(&mut con, &keys, token, 60_000), 1);
    assert_eq!(mrelease(&mut con, &keys, token), 3);
}

#[test]
fn bad_input_is_an_error_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut con).unwrap();
    let _: Value = redis::cmd("SEM.ACQUIRE")
        .arg("sem")
        .arg(2)
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let raw = |args: &[&[u8]]| {
        let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd
    };
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (vec![b"LOCK.MACQUIRE"], "wrong number"),
        (vec![b"LOCK.MACQUIRE", b"1", b"a"], "wrong number"),
        (vec![b"LOCK.MACQUIRE", b"0", b"a", b"100"], "numkeys"),
        (vec![b"LOCK.MACQUIRE", b"-1", b"a", b"100"], "numkeys"),
        (
            vec![b"LOCK.MACQUIRE", b"\0\r\n\xff", b"a", b"100"],
            "numkeys",
        ),
        (vec![b"LOCK.MACQUIRE", b"3", b"a", b"b", b"100"], "numkeys"),
        (vec![b"LOCK.MACQUIRE", b"65", b"a", b"100"], "max-keys"),
        (
            vec![b"LOCK.MACQUIRE", b"2", b"a", b"a", b"100"],
            "more than once",
        ),
        (vec![b"LOCK.MACQUIRE", b"1", b"a", b"b", b"100"], "ttl-ms"),
        (
            vec![b"LOCK.MACQUIRE", b"2", b"a", b"b", b"\xff\0"],
            "ttl-ms",
        ),
        (vec![b"LOCK.MACQUIRE", b"2", b"a", b"b", b"0"], "ttl-ms"),
        (
            vec![b"LOCK.MACQUIRE", b"2", b"a", b"b", b"100", b"TOKEN"],
            "syntax",
        ),
        (
            vec![b"LOCK.MACQUIRE", b"2", b"a", b"b", b"100", b"WAIT", b"x\0"],
            "timeout-ms",
        ),
        (
            vec![b"LOCK.MACQUIRE", b"2", b"a", b"b", b"100", b"NOPE\r\n"],
            "syntax",
        ),
        (
            vec![b"LOCK.MACQUIRE", b"2", b"a", b"b", b"100", b"LEASE", b"x"],
            "lease id",
        ),
        (
            vec![b"LOCK.MACQUIRE", b"2", b"a", b"s", b"100"],
            "WRONGTYPE",
        ),
        (
            vec![b"LOCK.MACQUIRE", b"2", b"a", b"sem", b"100"],
            "WRONGTYPE",
        ),
        (vec![b"LOCK.MRELEASE", b"1", b"a"], "wrong number"),
        (
            vec![b"LOCK.MRELEASE", b"1", b"a", b"t", b"extra"],
            "numkeys",
        ),
        (vec![b"LOCK.MRELEASE", b"x", b"a", b"t"], "numkeys"),
        (vec![b"LOCK.MRELEASE", b"2", b"a", b"s", b"t"], "WRONGTYPE"),
        (vec![b"LOCK.MEXTEND", b"1", b"a", b"t"], "wrong number"),
        (vec![b"LOCK.MEXTEND", b"1", b"a", b"t", b"-5"], "ttl-ms"),
        (
            vec![b"LOCK.MEXTEND", b"2", b"a", b"a", b"t", b"5"],
            "more than once",
        ),
        (
            vec![b"LOCK.MEXTEND", b"1", b"a", b"t", b"5", b"junk"],
            "numkeys",
        ),
    ];
    for (args, expected) in cases {
        let error = error_of(&mut con, &raw(&args));
        assert!(error.contains(expected), "{args:?}: {error}");
    }
    assert!(!exists(&mut con, "a"));
    assert_eq!(dbsize(&mut con), 2);
    // lock.max-keys is a setting like the others.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lock.max-keys")
        .arg(2)
        .query(&mut con)
        .unwrap();
    let three = macquire(&[b"a", b"b", b"c"], 100, &[]);
    assert!(error_of(&mut con, &three).contains("max-keys"));
    assert!(grant(&mut con, &macquire(&[b"a", b"b"], 100, &[])).is_some());
}

#[test]
fn wait_in_multi_and_scripts_does_not_block() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "b", 60_000, Some("holder")).unwrap();
    let (reply,): (Value,) = redis::pipe()
        .atomic()
        .add_command(macquire(&[b"a", b"b"], 60_000, &[b"WAIT", b"0"]))
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, Value::Nil);
    let script: Value = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.MACQUIRE', '2', KEYS[1], KEYS[2], '60000', 'WAIT', '0')")
        .arg(2)
        .arg("a")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(script, Value::Nil);
    assert_eq!(queued(&mut con, b"a"), 0);
    assert!(!exists(&mut con, "a"));
}

#[test]
fn command_getkeys_lists_every_key() {
    let server = Server::start();
    let mut con = server.conn();
    for (command, tail) in [
        ("LOCK.MACQUIRE", vec!["100", "WAIT", "5"]),
        ("LOCK.MRELEASE", vec!["t"]),
        ("LOCK.MEXTEND", vec!["t", "100"]),
    ] {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(command)
            .arg(3)
            .arg("k1")
            .arg("k2")
            .arg("k3")
            .arg(&tail)
            .query(&mut con)
            .unwrap();
        assert_eq!(keys, ["k1", "k2", "k3"], "{command}");
    }
}

#[test]
fn acl_key_patterns_see_every_key() {
    let server = Server::start();
    let mut admin = server.conn();
    acl_setuser(
        &mut admin,
        "worker on >pw ~app:* +lock.macquire +lock.mrelease +lock.mextend",
    )
    .unwrap();
    let mut worker = conn_as(&server, "worker", "pw");
    assert!(grant(
        &mut worker,
        &macquire(&[b"app:1", b"app:2"], 60_000, &[b"TOKEN", b"t"])
    )
    .is_some());
    let outside = macquire(&[b"app:3", b"other"], 60_000, &[]);
    assert!(error_of(&mut worker, &outside).contains("NOPERM"));
    assert!(!exists(&mut admin, "app:3"));
    let release = redis::cmd("LOCK.MRELEASE")
        .arg(2)
        .arg("app:1")
        .arg("secret")
        .arg("t")
        .clone();
    assert!(error_of(&mut worker, &release).contains("NOPERM"));
    assert_eq!(mrelease(&mut worker, &[b"app:1", b"app:2"], b"t"), 2);
}

#[test]
fn keys_of_several_slots_are_crossslot_on_a_one_node_cluster() {
    let server = Server::start_with(&["--cluster-enabled", "yes"]);
    let mut con = server.conn();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut con)
        .unwrap();
    wait_until(Duration::from_secs(20), || {
        info_field(&mut con, "cluster", "cluster_enabled") == "1"
            && redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut con)
                .unwrap()
                .contains("cluster_state:ok")
    });
    let cross = macquire(&[b"a", b"b"], 60_000, &[]);
    assert!(error_of(&mut con, &cross).contains("CROSSSLOT"));
    let (token, _) = grant(&mut con, &macquire(&[b"{u}a", b"{u}b"], 60_000, &[])).unwrap();
    assert_eq!(mrelease(&mut con, &[b"{u}a", b"{u}b"], &token), 2);
}

#[test]
fn a_replica_and_an_aof_reload_end_in_the_masters_state() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    grant(
        &mut m,
        &macquire(&[b"a", b"b", b"c"], 60_000, &[b"TOKEN", b"t"]),
    )
    .unwrap();
    assert_eq!(mextend(&mut m, &[b"a", b"b", b"c"], b"t", 120_000), 1);
    assert_eq!(mrelease(&mut m, &[b"c"], b"t"), 1);
    sync_replica(&master, &replica);
    for key in ["a", "b"] {
        assert_eq!(
            fence_and_deadline(&mut m, key),
            fence_and_deadline(&mut r, key),
            "{key}"
        );
    }
    assert!(!exists(&mut r, "c"));
    assert_eq!(digest(&mut m), digest(&mut r));

    let server = Server::start_with(&["--appendonly", "yes"]);
    let mut con = server.conn();
    let (_, fence) = grant(
        &mut con,
        &macquire(&[b"x", b"y"], 60_000, &[b"TOKEN", b"t"]),
    )
    .unwrap();
    assert_eq!(mextend(&mut con, &[b"x", b"y"], b"t", 90_000), 1);
    let before = (
        fence_and_deadline(&mut con, "x"),
        fence_and_deadline(&mut con, "y"),
    );
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut con).unwrap();
    let after = (
        fence_and_deadline(&mut con, "x"),
        fence_and_deadline(&mut con, "y"),
    );
    assert_eq!(before, after);
    assert_eq!(before.0 .0, fence as i64);
    // The fence high-water mark came back too: the next grant is above it.
    let (_, next) = grant(&mut con, &macquire(&[b"z"], 60_000, &[])).unwrap();
    assert!(next > fence);
}

#[test]
fn a_waiters_grant_reaches_the_replica() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "b", 60_000, Some("holder")).unwrap();
    let waiter = in_thread(
        &master,
        macquire(&[b"a", b"b"], 60_000, &[b"TOKEN", b"w", b"WAIT", b"0"]),
    );
    wait_until(Duration::from_secs(10), || queued(&mut m, b"a") == 1);
    assert_eq!(release(&mut m, "b", "holder"), 1);
    let (_, fence) = waiter.join().unwrap().unwrap();
    sync_replica(&master, &replica);
    assert_eq!(fence_of(&mut r, b"a"), Some(fence as i64));
    assert_eq!(fence_of(&mut r, b"b"), Some(fence as i64));
    assert_eq!(digest(&mut m), digest(&mut r));
}

fn grant_lease(con: &mut Connection, ttl: i64) -> String {
    redis::cmd("LOCK.LEASE")
        .arg("GRANT")
        .arg(ttl)
        .query(con)
        .expect("LOCK.LEASE GRANT")
}

fn lease_cmd(con: &mut Connection, sub: &str, id: &str) -> i64 {
    redis::cmd("LOCK.LEASE")
        .arg(sub)
        .arg(id)
        .query(con)
        .expect("LOCK.LEASE")
}

/// `LOCK.LEASE INFO id`'s `holds`, and its `keys` sorted (none: gone).
fn lease_holds(con: &mut Connection, id: &str) -> Option<(i64, Vec<String>)> {
    let shown: Option<std::collections::HashMap<String, Value>> = redis::cmd("LOCK.LEASE")
        .arg("INFO")
        .arg(id)
        .query(con)
        .expect("LOCK.LEASE INFO");
    shown.map(|shown| {
        let holds: i64 = redis::from_redis_value(&shown["holds"]).unwrap();
        let mut keys: Vec<String> = redis::from_redis_value(&shown["keys"]).unwrap();
        keys.sort();
        (holds, keys)
    })
}

fn counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap()
}

fn lease_number_of(con: &mut Connection, key: &[u8]) -> Option<i64> {
    let info: Option<std::collections::HashMap<String, Value>> =
        redis::cmd("LOCK.INFO").arg(key).query(con).unwrap();
    info.and_then(|i| match i.get("lease") {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    })
}

/// `LOCK.ACQUIRE key ttl TOKEN token WAIT 20000` ([`scaled_ms`]) in a
/// thread.
fn single_waiter(
    server: &Server,
    key: &str,
    token: &str,
) -> thread::JoinHandle<Option<(Vec<u8>, u64)>> {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key)
        .arg(60_000)
        .arg("TOKEN")
        .arg(token)
        .arg("WAIT")
        .arg(scaled_ms(20_000));
    in_thread(server, cmd)
}

#[test]
fn a_leased_multi_key_hold_lives_with_its_lease_and_ends_with_it_on_every_key() {
    let server = Server::start();
    let mut con = server.conn();
    // Kept alive every 100 ms below, with room for a slow server.
    let id = grant_lease(&mut con, scaled_ms(1000));
    let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
    let leased = macquire(&keys, 20, &[b"TOKEN", b"t", b"LEASE", id.as_bytes()]);
    let (token, fence) = grant(&mut con, &leased).unwrap();
    assert_eq!(token, b"t");
    assert_eq!(
        lease_holds(&mut con, &id),
        Some((3, vec!["a".into(), "b".into(), "c".into()]))
    );
    let number = lease_number_of(&mut con, b"a").expect("attached");
    for key in keys {
        assert_eq!(fence_of(&mut con, key), Some(fence as i64));
        assert_eq!(lease_number_of(&mut con, key), Some(number));
    }
    // The same request again: the same grant, nothing moved (a renewal,
    // not a second multi-key grant).
    assert_eq!(grant(&mut con, &leased), Some((token.clone(), fence)));
    assert_eq!(counter(&mut con, "macquires"), 1);
    assert_eq!(counter(&mut con, "grants"), 3, "one per key");
    // The same token under another lease, or none: the error LOCK.ACQUIRE
    // gives.
    let other = grant_lease(&mut con, 60_000);
    let single = redis::cmd("LOCK.ACQUIRE")
        .arg("a")
        .arg(20)
        .arg("TOKEN")
        .arg("t")
        .arg("LEASE")
        .arg(&other)
        .clone();
    let expected = error_of(&mut con, &single);
    assert!(expected.contains("lease"), "{expected}");
    let elsewhere = macquire(&keys, 20, &[b"TOKEN", b"t", b"LEASE", other.as_bytes()]);
    assert_eq!(error_of(&mut con, &elsewhere), expected);
    let unleased = macquire(&keys, 20, &[b"TOKEN", b"t"]);
    assert_eq!(error_of(&mut con, &unleased), expected);
    // Kept alive well past its 20 ms ttl: every key stays, and MEXTEND moves
    // nothing and says 1, as EXTEND does.
    for _ in 0..5 {
        thread::sleep(Duration::from_millis(100));
        assert_eq!(lease_cmd(&mut con, "KEEPALIVE", &id), 1);
        assert!(keys
            .iter()
            .all(|key| exists(&mut con, std::str::from_utf8(key).unwrap())));
    }
    assert_eq!(mextend(&mut con, &keys, b"t", 5), 1);
    // A client waits for each key; the lease runs out: every key ends, as
    // an expiry, and goes to its waiter.
    let waiters: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|key| single_waiter(&server, key, &format!("next-{key}")))
        .collect();
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "waiters") == 3
    });
    for (waiter, key) in waiters.into_iter().zip(["a", "b", "c"]) {
        let (got, next_fence) = waiter.join().unwrap().expect("handed on");
        assert_eq!(got, format!("next-{key}").into_bytes());
        assert!(next_fence > fence);
    }
    assert_eq!(lease_holds(&mut con, &id), None);
    assert_eq!(counter(&mut con, "leases_expired"), 1);
    assert_eq!(counter(&mut con, "expiries"), 3);
    assert_eq!(mrelease(&mut con, &keys, b"t"), 0);
}

#[test]
fn revoking_a_lease_counts_each_key_and_one_key_leaves_it_alone() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60_000);
    let keys: [&[u8]; 3] = [b"x", b"y", b"z"];
    grant(
        &mut con,
        &macquire(&keys, 60_000, &[b"TOKEN", b"t", b"LEASE", id.as_bytes()]),
    )
    .unwrap();
    let waiter = single_waiter(&server, "y", "next");
    wait_until(Duration::from_secs(10), || queued(&mut con, b"y") == 1);
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), 3);
    assert_eq!(waiter.join().unwrap().expect("served").0, b"next");
    assert!(!exists(&mut con, "x") && !exists(&mut con, "z"));
    assert_eq!(counter(&mut con, "revocations"), 3);
    let error = error_of(
        &mut con,
        redis::cmd("LOCK.EXTEND").arg("x").arg("t").arg(100),
    );
    assert_eq!(error, "REVOKED lease revoked");
    // A lease that is gone grants nothing, on any key.
    let gone = macquire(&[b"x", b"z"], 60_000, &[b"LEASE", id.as_bytes()]);
    assert!(error_of(&mut con, &gone).starts_with("NOLEASE"));
    assert!(!exists(&mut con, "x") && !exists(&mut con, "z"));

    // One key released, one deleted: each leaves the lease alone, the
    // others stay attached.
    let id = grant_lease(&mut con, 60_000);
    let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
    grant(
        &mut con,
        &macquire(&keys, 60_000, &[b"TOKEN", b"u", b"LEASE", id.as_bytes()]),
    )
    .unwrap();
    assert_eq!(mrelease(&mut con, &[b"b"], b"u"), 1);
    assert_eq!(release(&mut con, "d", "u"), 1);
    assert_eq!(
        lease_holds(&mut con, &id),
        Some((2, vec!["a".into(), "c".into()]))
    );
    let deleted: i64 = redis::cmd("DEL").arg("c").query(&mut con).unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(lease_holds(&mut con, &id), Some((1, vec!["a".into()])));
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), 1);
    assert_eq!(dbsize(&mut con), 1, "only y, its waiter's");
}

#[test]
fn a_leased_multi_key_hold_survives_a_replica_the_aof_and_the_rdb() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut m)
        .unwrap();
    wait_for_aof_rewrite(&mut m);
    let id = grant_lease(&mut m, 60_000);
    let keys: [&[u8]; 3] = [b"p", b"q", b"r"];
    let (_, fence) = grant(
        &mut m,
        &macquire(
            &keys,
            100,
            &[b"TOKEN", b"t", b"SHARED", b"LEASE", id.as_bytes()],
        ),
    )
    .unwrap();
    let attached = Some((3, vec!["p".into(), "q".into(), "r".into()]));
    sync_replica(&master, &replica);
    let mut r = replica.conn();
    let want = digest(&mut m);
    assert_eq!(digest(&mut r), want);
    assert_eq!(lease_holds(&mut r, &id), attached);
    // Replayed from the AOF as it was written, then rewritten (both forms),
    // then from the RDB.
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
    assert_eq!(lease_holds(&mut m, &id), attached, "AOF");
    for preamble in ["yes", "no"] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("aof-use-rdb-preamble")
            .arg(preamble)
            .query(&mut m)
            .unwrap();
        rewrite_aof(&mut m);
        let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
        assert_eq!(digest(&mut m), want, "AOF, preamble {preamble}");
        assert_eq!(lease_holds(&mut m, &id), attached, "preamble {preamble}");
    }
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut m).unwrap();
    assert_eq!(digest(&mut m), want, "RDB");
    assert_eq!(lease_holds(&mut m, &id), attached, "RDB");
    for key in keys {
        assert_eq!(fence_of(&mut m, key), Some(fence as i64));
    }
    // The attachment is whole: revoked on the master, every key goes on
    // the replica too.
    assert_eq!(lease_cmd(&mut m, "REVOKE", &id), 3);
    sync_replica(&master, &replica);
    assert_eq!(lease_holds(&mut r, &id), None);
    assert_eq!(dbsize(&mut r), 0);
}

#[test]
fn a_queued_multi_key_request_with_a_lease_is_attached_or_told_its_lease_is_gone() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60_000);
    acquire(&mut con, "b", 60_000, Some("holder")).unwrap();
    let waiter = in_thread(
        &server,
        macquire(
            &[b"a", b"b"],
            10,
            &[b"TOKEN", b"w", b"WAIT", b"20000", b"LEASE", id.as_bytes()],
        ),
    );
    wait_until(Duration::from_secs(10), || queued(&mut con, b"b") == 1);
    assert_eq!(release(&mut con, "b", "holder"), 1);
    let (_, fence) = waiter.join().unwrap().expect("granted");
    assert_eq!(
        lease_holds(&mut con, &id),
        Some((2, vec!["a".into(), "b".into()]))
    );
    assert_eq!(fence_of(&mut con, b"a"), Some(fence as i64));
    // Its 10 ms ttl does not end it: the lease does.
    thread::sleep(Duration::from_millis(100));
    assert!(exists(&mut con, "a") && exists(&mut con, "b"));

    // A lease that runs out while its request waits: NOLEASE when its turn
    // comes, and the next waiter is served.
    let short = grant_lease(&mut con, 1000);
    acquire(&mut con, "d", 60_000, Some("holder")).unwrap();
    let mut leaving = server.conn();
    let doomed = macquire(
        &[b"c", b"d"],
        60_000,
        &[
            b"TOKEN",
            b"w2",
            b"WAIT",
            b"20000",
            b"LEASE",
            short.as_bytes(),
        ],
    );
    let doomed = thread::spawn(move || error_of(&mut leaving, &doomed));
    wait_until(Duration::from_secs(10), || queued(&mut con, b"d") == 1);
    let next = single_waiter(&server, "c", "next");
    wait_until(Duration::from_secs(10), || queued(&mut con, b"c") == 2);
    wait_until(Duration::from_secs(10), || {
        lease_holds(&mut con, &short).is_none()
    });
    assert_eq!(release(&mut con, "d", "holder"), 1);
    assert!(doomed.join().unwrap().starts_with("NOLEASE"));
    assert_eq!(next.join().unwrap().expect("served").0, b"next");
    assert!(!exists(&mut con, "d"), "granted to nobody");
}

#[test]
fn a_queued_shared_request_at_max_holders_waits_as_a_single_key_reader_does() {
    let server = Server::start_with(&["--lock.max-holders", "2"]);
    let mut con = server.conn();
    acquire(&mut con, "a", 60_000, Some("writer")).unwrap();
    grant(
        &mut con,
        &macquire(&[b"b"], 60_000, &[b"SHARED", b"TOKEN", b"r1"]),
    )
    .unwrap();
    let shared_wait = |keys: &[&[u8]], token: &[u8]| {
        macquire(
            keys,
            60_000,
            &[b"SHARED", b"TOKEN", token, b"WAIT", b"20000"],
        )
    };
    let many = in_thread(&server, shared_wait(&[b"a", b"b"], b"m"));
    wait_until(Duration::from_secs(10), || queued(&mut con, b"b") == 1);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lock.max-holders")
        .arg(1)
        .query(&mut con)
        .unwrap();
    // Its first key frees: it is served, finds its other key full (as a
    // single-key reader queued there would), and keeps waiting, not LIMIT.
    assert_eq!(release(&mut con, "a", "writer"), 1);
    assert_eq!(queued(&mut con, b"b"), 1, "still waiting");
    assert_eq!(queued(&mut con, b"a"), 1);
    // The reader leaves: the request gets both keys.
    assert_eq!(mrelease(&mut con, &[b"b"], b"r1"), 1);
    let (token, fence) = many.join().unwrap().expect("granted");
    assert_eq!(token, b"m");
    assert_eq!(fence_of(&mut con, b"a"), Some(fence as i64));
}

#[test]
fn a_waiter_granted_with_session_gives_every_key_back_when_it_leaves() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "b", 60_000, Some("holder")).unwrap();
    let mut session = server.conn();
    let waiter = thread::spawn(move || {
        let granted = macquire(
            &[b"a", b"b", b"c"],
            60_000,
            &[b"TOKEN", b"s", b"WAIT", b"20000", b"SESSION"],
        )
        .query::<Option<(Vec<u8>, u64)>>(&mut session)
        .expect("waiter");
        (granted, session)
    });
    wait_until(Duration::from_secs(10), || queued(&mut con, b"b") == 1);
    assert_eq!(release(&mut con, "b", "holder"), 1);
    let (granted, session) = waiter.join().unwrap();
    let (_, fence) = granted.expect("granted");
    for key in [&b"a"[..], b"b", b"c"] {
        assert_eq!(fence_of(&mut con, key), Some(fence as i64));
    }
    let next = in_thread(&server, acquire_wait("c", 60_000, "next", 20_000).clone());
    wait_until(Duration::from_secs(10), || queued(&mut con, b"c") == 1);
    drop(session);
    assert_eq!(next.join().unwrap().expect("served").0, b"next");
    wait_until(Duration::from_secs(10), || {
        !exists(&mut con, "a") && !exists(&mut con, "b")
    });
    assert_eq!(counter(&mut con, "session_releases"), 3);
    assert_eq!(counter(&mut con, "macquires"), 1, "granted from the queue");
}

#[test]
fn a_leased_multi_key_hold_follows_its_keys_through_swapdb() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60_000);
    grant(
        &mut con,
        &macquire(
            &[b"a", b"b"],
            60_000,
            &[b"TOKEN", b"t", b"LEASE", id.as_bytes()],
        ),
    )
    .unwrap();
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut con).unwrap();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut con).unwrap();
    assert_eq!(mrelease(&mut con, &[b"a"], b"t"), 1);
    assert_eq!(lease_holds(&mut con, &id), Some((1, vec!["b".into()])));
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), 1);
    assert_eq!(dbsize(&mut con), 0, "b, revoked where it is now");
}

/// A key overwritten with another type fails every waiter of it
/// (`WRONGTYPE`); a multi-key waiter failed that way leaves its other
/// keys' queues too, and whoever waited behind it there is served: here a
/// single-key waiter on a free key it kept (found stuck until its own
/// timeout before the fix).
#[test]
fn a_multi_key_waiter_failed_by_another_key_frees_the_key_it_kept() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k2", 60_000, Some("holder")).unwrap();
    let first = {
        let mut waiter = server.conn();
        thread::spawn(move || {
            acquire_wait("k2", 60_000, "first", 0)
                .query::<Option<(Vec<u8>, u64)>>(&mut waiter)
                .map_err(|e| e.to_string())
        })
    };
    wait_until(Duration::from_secs(10), || queued(&mut con, b"k2") == 1);
    let multi = {
        let mut waiter = server.conn();
        let cmd = macquire(&[b"k1", b"k2"], 60_000, &[b"WAIT", b"0"]);
        thread::spawn(move || {
            cmd.query::<Option<(Vec<u8>, u64)>>(&mut waiter)
                .map_err(|e| e.to_string())
        })
    };
    wait_until(Duration::from_secs(10), || queued(&mut con, b"k2") == 2);
    // Behind the multi-key request on k1, which is free but kept for it.
    let behind = in_thread(&server, acquire_wait("k1", 60_000, "behind", 30_000));
    wait_until(Duration::from_secs(10), || queued(&mut con, b"k1") == 2);
    assert_eq!(fence_of(&mut con, b"k1"), None);
    redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("k2")
        .cmd("SET")
        .arg("k2")
        .arg("a string")
        .query::<()>(&mut con)
        .unwrap();
    for waiter in [first, multi] {
        let error = waiter.join().unwrap().unwrap_err();
        assert!(error.starts_with("WRONGTYPE"), "{error}");
    }
    let (token, fence) = behind.join().unwrap().expect("granted k1, not timed out");
    assert_eq!(token, b"behind");
    assert_eq!(fence_of(&mut con, b"k1"), Some(fence as i64));
    assert_eq!(queued(&mut con, b"k1"), 0);
}

/// `LOCK.MRELEASE` gives back every key before it hands any on. Before the
/// fix it handed each key on as it went, while it still had the later keys
/// open: a multi-key waiter served by that hand-off opened one of those
/// keys again and changed it (expired a reader whose lease ran out in the
/// meantime, and granted the key), so the release that followed worked on a
/// value that was freed (use after free), and its reply counted a release
/// that never happened. The moment is set by the clock inside one command:
/// readers with leases ending at every 10 ms, each paired with a lock and a
/// waiter for both, and thousands of other keys to make the command last;
/// whatever the moment, the reply must count exactly the releases made, and
/// each waiter hold both its keys.
#[test]
fn mrelease_hands_on_only_after_it_released_every_key() {
    let server = Server::start();
    let mut con = server.conn();
    let pairs = 60;
    let filler = 30_000;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("lock.max-keys")
        .arg(100_000)
        .query::<()>(&mut con)
        .unwrap();
    let lock = |i: usize| format!("lock{i}").into_bytes();
    let reader = |i: usize| format!("reader{i}").into_bytes();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in 0..pairs {
        acquire(
            &mut con,
            std::str::from_utf8(&lock(i)).unwrap(),
            600_000,
            Some("t"),
        )
        .unwrap();
        let shared: Option<(Vec<u8>, u64)> = redis::cmd("LOCK.ACQUIRE")
            .arg(reader(i))
            .arg(600_000)
            .arg("TOKEN")
            .arg("t")
            .arg("SHARED")
            .query(&mut con)
            .unwrap();
        assert!(shared.is_some());
        keys.push(lock(i));
        keys.push(reader(i));
    }
    let mut waiters = Vec::new();
    for i in 0..pairs {
        let cmd = macquire(&[&lock(i), &reader(i)], 600_000, &[b"WAIT", b"0"]);
        waiters.push(in_thread(&server, cmd));
        wait_until(Duration::from_secs(10), || {
            queued(&mut con, &reader(i)) == 1
        });
    }
    keys.extend((0..filler).map(|i| format!("filler{i}").into_bytes()));
    let releases = counter(&mut con, "releases");
    // The readers' leases end 10 ms apart from now on, then the release.
    let mut pipe = redis::pipe();
    for i in 0..pairs {
        pipe.cmd("LOCK.EXTEND")
            .arg(reader(i))
            .arg("t")
            .arg(10 * (i as i64 + 1))
            .ignore();
    }
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    pipe.cmd("LOCK.MRELEASE")
        .arg(keys.len())
        .arg(&keys)
        .arg("t");
    let (released,): (i64,) = pipe.query(&mut con).unwrap();
    assert_eq!(released, counter(&mut con, "releases") - releases);
    assert!(released >= pairs as i64, "{released}");
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (_, fence) = waiter.join().unwrap().expect("granted");
        assert_eq!(fence_of(&mut con, &lock(i)), Some(fence as i64));
        assert_eq!(fence_of(&mut con, &reader(i)), Some(fence as i64));
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

/// Issue 33: `LOCK.QUEUE` shows how many keys a multi-key waiter waits for
/// (`keys`), so that a free key kept for it (everyone else gets null) can
/// be explained; a single-key waiter's entry is as it was (no `keys`).
#[test]
fn lock_queue_shows_how_many_keys_a_multi_key_waiter_waits_for() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "c", 60_000, Some("holder")).unwrap();
    let multi = in_thread(
        &server,
        macquire(
            &[b"a", b"b", b"c"],
            60_000,
            &[b"TOKEN", b"m", b"WAIT", b"0"],
        ),
    );
    wait_until(Duration::from_secs(10), || queued(&mut con, b"a") == 1);
    let single = in_thread(&server, acquire_wait("a", 60_000, "single", 0).clone());
    wait_until(Duration::from_secs(10), || queued(&mut con, b"a") == 2);
    let shown: Vec<std::collections::HashMap<String, Value>> =
        redis::cmd("LOCK.QUEUE").arg("a").query(&mut con).unwrap();
    assert_eq!(shown[0].get("keys"), Some(&Value::Int(3)), "{shown:?}");
    assert_eq!(
        shown[0].get("mode"),
        Some(&Value::BulkString(b"exclusive".to_vec()))
    );
    assert_eq!(shown[1].get("keys"), None, "{shown:?}");
    assert_eq!(
        shown[1].len(),
        5,
        "ttl, waited, timeout, client, mode: {shown:?}"
    );
    // Its other keys' queues show it the same way.
    let on_c: Vec<std::collections::HashMap<String, Value>> =
        redis::cmd("LOCK.QUEUE").arg("c").query(&mut con).unwrap();
    assert_eq!(on_c[0].get("keys"), Some(&Value::Int(3)));
    assert_eq!(release(&mut con, "c", "holder"), 1);
    assert_eq!(multi.join().unwrap().unwrap().0, b"m");
    assert_eq!(mrelease(&mut con, &[b"a", b"b", b"c"], b"m"), 3);
    assert_eq!(single.join().unwrap().unwrap().0, b"single");
}

/// MEXTEND shares EXTEND's body: a token whose hold on one of the keys was
/// revoked is told `REVOKED <reason>` (nothing moves on any key), as
/// `LOCK.EXTEND` tells it; a token that simply holds nothing gets 0.
#[test]
fn mextend_by_a_revoked_token_is_told_why() {
    let server = Server::start();
    let mut con = server.conn();
    let cmd = macquire(&[b"a", b"b\0\r\n"], 60_000, &[b"TOKEN", b"worker"]);
    grant(&mut con, &cmd).unwrap();
    let revoked: i64 = redis::cmd("LOCK.REVOKE")
        .arg(&b"b\0\r\n"[..])
        .arg("REASON")
        .arg("stuck")
        .query(&mut con)
        .unwrap();
    assert_eq!(revoked, 1);
    let before = fence_and_deadline(&mut con, "a");
    let mut extend = redis::cmd("LOCK.MEXTEND");
    extend
        .arg(2)
        .arg("a")
        .arg(&b"b\0\r\n"[..])
        .arg("worker")
        .arg(90_000);
    assert_eq!(error_of(&mut con, &extend), "REVOKED stuck");
    assert_eq!(fence_and_deadline(&mut con, "a"), before);
    assert_eq!(mextend(&mut con, &[b"a", b"b\0\r\n"], b"nobody", 90_000), 0);
}
