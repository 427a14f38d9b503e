//! Who holds it, who waits, who leads: `OWNER` labels, `LOCK.QUEUE` and
//! `LOCK.OBSERVE`, each rule of docs/commands.md with garbage, replication
//! and persistence. No reply, INFO field or queue entry shows a token.

mod common;
use common::*;

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

fn acquire_as(
    con: &mut Connection,
    key: &str,
    ttl: i64,
    token: &str,
    owner: &str,
) -> Option<(String, u64)> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(ttl)
        .arg("TOKEN")
        .arg(token)
        .arg("OWNER")
        .arg(owner)
        .query(con)
        .expect("LOCK.ACQUIRE … OWNER")
}

/// A waiter on its own connection: `LOCK.ACQUIRE key ttl TOKEN token WAIT
/// wait [OWNER owner]`, its reply when it comes.
fn waiter(
    server: &Server,
    key: &str,
    token: &str,
    wait: i64,
    owner: Option<&str>,
) -> thread::JoinHandle<Option<(String, u64)>> {
    let mut con = server.conn();
    let (key, token, owner) = (
        key.to_string(),
        token.to_string(),
        owner.map(str::to_string),
    );
    thread::spawn(move || {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(&key)
            .arg(60_000)
            .arg("TOKEN")
            .arg(&token)
            .arg("WAIT")
            .arg(wait);
        if let Some(owner) = owner {
            cmd.arg("OWNER").arg(owner);
        }
        cmd.query(&mut con).expect("LOCK.ACQUIRE … WAIT")
    })
}

fn queue(con: &mut Connection, key: &str, count: Option<i64>) -> Vec<HashMap<String, Value>> {
    let mut cmd = redis::cmd("LOCK.QUEUE");
    cmd.arg(key);
    if let Some(n) = count {
        cmd.arg("COUNT").arg(n);
    }
    cmd.query(con).expect("LOCK.QUEUE")
}

fn int(fields: &HashMap<String, Value>, name: &str) -> i64 {
    match &fields[name] {
        Value::Int(n) => *n,
        other => panic!("{name} is {other:?}"),
    }
}

fn text(fields: &HashMap<String, Value>, name: &str) -> Option<String> {
    match fields.get(name)? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).to_string()),
        other => panic!("{name} is {other:?}"),
    }
}

fn queued_len(con: &mut Connection, key: &str) -> i64 {
    info(con, key).map_or(0, |i| i["waiters"])
}

/// `LOCK.OBSERVE key fence timeout` on its own connection, with the time it
/// took.
fn observer(
    server: &Server,
    key: &str,
    fence: u64,
    timeout: i64,
) -> thread::JoinHandle<(Option<HashMap<String, Value>>, Duration)> {
    let mut con = server.conn();
    let key = key.to_string();
    thread::spawn(move || {
        let start = Instant::now();
        let reply = redis::cmd("LOCK.OBSERVE")
            .arg(&key)
            .arg(fence)
            .arg(timeout)
            .query(&mut con)
            .expect("LOCK.OBSERVE");
        (reply, start.elapsed())
    })
}

fn observers(con: &mut Connection) -> i64 {
    info_field(con, "lock", "lock_observers").parse().unwrap()
}

fn wait_for_observers(con: &mut Connection, n: i64) {
    wait_until(Duration::from_secs(10), || observers(con) == n);
}

// ---------------------------------------------------------------------------
// OWNER

#[test]
fn info_shows_the_owner_label_and_never_the_token() {
    let server = Server::start();
    let mut con = server.conn();
    acquire_as(&mut con, "job", 60_000, "secret-token-1", "pod-7").unwrap();
    assert_eq!(owner(&mut con, "job").as_deref(), Some(&b"pod-7"[..]));
    acquire(&mut con, "plain", 60_000, Some("t")).unwrap();
    assert_eq!(owner(&mut con, "plain"), None);
    let all: HashMap<String, Value> = redis::cmd("LOCK.INFO").arg("job").query(&mut con).unwrap();
    assert_eq!(all.len(), 7);
    assert!(!format!("{all:?}").contains("secret-token"));
}

#[test]
fn a_waiters_label_becomes_the_holders_at_the_handoff() {
    let server = Server::start();
    let mut con = server.conn();
    acquire_as(&mut con, "job", 60_000, "a", "host-a").unwrap();
    let b = waiter(&server, "job", "b", 0, Some("host-b"));
    wait_until(Duration::from_secs(10), || queued_len(&mut con, "job") == 1);
    assert_eq!(release(&mut con, "job", "a"), 1);
    assert!(b.join().unwrap().is_some());
    assert_eq!(owner(&mut con, "job").as_deref(), Some(&b"host-b"[..]));
}

#[test]
fn a_renewal_may_change_the_label_and_keeps_it_otherwise() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire_as(&mut con, "job", 60_000, "me", "first").unwrap();
    assert_eq!(
        acquire(&mut con, "job", 60_000, Some("me")).unwrap().1,
        fence
    );
    assert_eq!(owner(&mut con, "job").as_deref(), Some(&b"first"[..]));
    assert_eq!(
        acquire_as(&mut con, "job", 60_000, "me", "second")
            .unwrap()
            .1,
        fence
    );
    assert_eq!(owner(&mut con, "job").as_deref(), Some(&b"second"[..]));
    assert_eq!(extend(&mut con, "job", "me", 60_000), 1);
    assert_eq!(owner(&mut con, "job").as_deref(), Some(&b"second"[..]));
    // Another token's label changes nothing.
    assert_eq!(
        acquire_as(&mut con, "job", 60_000, "other", "intruder"),
        None
    );
    assert_eq!(owner(&mut con, "job").as_deref(), Some(&b"second"[..]));
}

#[test]
fn a_bad_label_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    acquire_as(&mut con, "job", 60_000, "me", "kept").unwrap();
    let before = digest(&mut con);
    let long = "o".repeat(129);
    for (args, expected) in [
        (
            vec!["job", "1000", "TOKEN", "me", "OWNER", ""],
            "ERR owner must be 1 to 128 bytes long",
        ),
        (
            vec!["job", "1000", "TOKEN", "me", "OWNER", long.as_str()],
            "ERR owner must be 1 to 128 bytes long",
        ),
        (
            vec!["job", "1000", "TOKEN", "me", "OWNER", "a", "OWNER", "b"],
            "ERR syntax error: OWNER is given more than once",
        ),
        (
            vec!["job", "1000", "TOKEN", "me", "OWNER"],
            "ERR syntax error: OWNER needs a value",
        ),
        (
            vec!["new", "1000", "owner"],
            "ERR syntax error: OWNER needs a value",
        ),
    ] {
        let error = error_of(&mut con, redis::cmd("LOCK.ACQUIRE").arg(&args));
        assert_eq!(error, expected, "{args:?}");
    }
    assert_eq!(digest(&mut con), before);
    assert!(!exists(&mut con, "new"));
    // 128 bytes is the limit, and binary is fine.
    let label = vec![0xffu8; 128];
    redis::cmd("LOCK.ACQUIRE")
        .arg("big")
        .arg(1000)
        .arg("OWNER")
        .arg(&label[..])
        .query::<Value>(&mut con)
        .unwrap();
    assert_eq!(owner(&mut con, "big"), Some(label));
}

#[test]
fn the_label_is_replicated_and_survives_reload_aof_and_restore() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire_as(&mut m, "job", 600_000, "me", "pod-1").unwrap();
    acquire_as(&mut m, "job2", 600_000, "me", "pod-2").unwrap();
    assert!(acquire_as(&mut m, "job2", 600_000, "me", "pod-2b").is_some());
    sync_replica(&master, &replica);
    assert_eq!(owner(&mut r, "job").as_deref(), Some(&b"pod-1"[..]));
    assert_eq!(owner(&mut r, "job2").as_deref(), Some(&b"pod-2b"[..]));
    assert_eq!(digest(&mut r), digest(&mut m));
    // DUMP / RESTORE.
    let payload = common::payload::dump(&mut m, "job");
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut m).unwrap();
    common::payload::restore(&mut m, "copy", 0, &payload).unwrap();
    assert_eq!(owner(&mut m, "copy").as_deref(), Some(&b"pod-1"[..]));
    // DEBUG RELOAD.
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut m).unwrap();
    assert_eq!(owner(&mut m, "job2").as_deref(), Some(&b"pod-2b"[..]));

    // The AOF, with and without its RDB preamble.
    for preamble in ["yes", "no"] {
        let mut server = Server::start_with(&[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            preamble,
        ]);
        let mut con = server.conn();
        acquire_as(&mut con, "job", 600_000, "me", "in-aof").unwrap();
        server.kill();
        server.restart();
        let mut con = server.conn();
        assert_eq!(
            owner(&mut con, "job").as_deref(),
            Some(&b"in-aof"[..]),
            "{preamble}"
        );
        rewrite_aof(&mut con);
        server.kill();
        server.restart();
        let mut con = server.conn();
        assert_eq!(
            owner(&mut con, "job").as_deref(),
            Some(&b"in-aof"[..]),
            "rewritten, {preamble}"
        );
    }
}

// ---------------------------------------------------------------------------
// LOCK.QUEUE

#[test]
fn queue_lists_waiters_in_order_without_tokens() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "job", 60_000, Some("holder")).unwrap();
    assert_eq!(queue(&mut con, "job", None), Vec::new());
    assert_eq!(queue(&mut con, "missing", None), Vec::new());
    let first = waiter(&server, "job", "secret-1", 30_000, Some("first"));
    wait_until(Duration::from_secs(10), || queued_len(&mut con, "job") == 1);
    let second = waiter(&server, "job", "secret-2", 0, None);
    wait_until(Duration::from_secs(10), || queued_len(&mut con, "job") == 2);
    thread::sleep(Duration::from_millis(30));
    let listed = queue(&mut con, "job", None);
    assert_eq!(listed.len(), 2);
    assert_eq!(text(&listed[0], "owner").as_deref(), Some("first"));
    assert_eq!(text(&listed[1], "owner"), None);
    assert_eq!(int(&listed[0], "ttl"), 60_000);
    assert!(int(&listed[0], "waited") >= 30, "{listed:?}");
    assert!(int(&listed[0], "waited") >= int(&listed[1], "waited"));
    let timeout = int(&listed[0], "timeout");
    assert!(timeout > 0 && timeout <= 30_000, "{listed:?}");
    assert_eq!(int(&listed[1], "timeout"), 0, "WAIT 0 has no timeout");
    assert_ne!(int(&listed[0], "client"), int(&listed[1], "client"));
    assert!(!format!("{listed:?}").contains("secret"));
    assert_eq!(queue(&mut con, "job", Some(1)).len(), 1);

    // CLIENT KILL ID removes a stuck waiter; the next one moves up.
    let id = int(&listed[0], "client");
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut con)
        .unwrap();
    wait_until(Duration::from_secs(10), || {
        queue(&mut con, "job", None).len() == 1
    });
    assert!(first.join().is_err(), "the killed waiter got no grant");
    assert_eq!(
        int(&queue(&mut con, "job", None)[0], "client"),
        int(&listed[1], "client")
    );
    assert_eq!(release(&mut con, "job", "holder"), 1);
    assert!(second.join().unwrap().is_some());
    assert_eq!(queue(&mut con, "job", None), Vec::new());
}

#[test]
fn queue_garbage_is_refused() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("x")
        .query(&mut con)
        .unwrap();
    for (args, expected) in [
        (
            vec![],
            "ERR wrong number of arguments for 'lock.queue' command",
        ),
        (vec!["k", "COUNT"], "ERR syntax error: unknown option"),
        (vec!["k", "LIMIT", "5"], "ERR syntax error: unknown option"),
        (
            vec!["k", "COUNT", "0"],
            "ERR COUNT must be an integer from 1 to 1000",
        ),
        (
            vec!["k", "COUNT", "1001"],
            "ERR COUNT must be an integer from 1 to 1000",
        ),
        (
            vec!["k", "COUNT", "-1"],
            "ERR COUNT must be an integer from 1 to 1000",
        ),
        (
            vec!["k", "COUNT", "ten"],
            "ERR COUNT must be an integer from 1 to 1000",
        ),
        (
            vec!["k", "COUNT", "5", "x"],
            "ERR wrong number of arguments for 'lock.queue' command",
        ),
        (
            vec!["text"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ] {
        let error = error_of(&mut con, redis::cmd("LOCK.QUEUE").arg(&args));
        assert_eq!(error, expected, "{args:?}");
    }
}

// ---------------------------------------------------------------------------
// LOCK.OBSERVE

#[test]
fn observe_answers_at_once_when_the_holder_is_not_the_one_seen() {
    let server = Server::start();
    let mut con = server.conn();
    let free: Option<HashMap<String, Value>> = redis::cmd("LOCK.OBSERVE")
        .arg("job")
        .arg(12345)
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(free, None);
    let (_, fence) = acquire_as(&mut con, "job", 60_000, "secret-me", "leader-1").unwrap();
    let held: HashMap<String, Value> = redis::cmd("LOCK.OBSERVE")
        .arg("job")
        .arg(0)
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(int(&held, "fence"), fence as i64);
    assert_eq!(text(&held, "owner").as_deref(), Some("leader-1"));
    assert!(int(&held, "ttl") > 50_000);
    assert!(!format!("{held:?}").contains("secret"));
    // The same holder with a timeout: the holder as it is, after it.
    let start = Instant::now();
    let same: HashMap<String, Value> = redis::cmd("LOCK.OBSERVE")
        .arg("job")
        .arg(fence)
        .arg(150)
        .query(&mut con)
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(140));
    assert_eq!(int(&same, "fence"), fence as i64);
}

#[test]
fn observe_wakes_on_release_grant_handoff_expiry_delete_and_flush() {
    let server = Server::start();
    let mut con = server.conn();
    // Free → granted.
    let o = observer(&server, "job", 0, 0);
    wait_for_observers(&mut con, 1);
    let (_, f1) = acquire(&mut con, "job", 60_000, Some("a")).unwrap();
    let (reply, _) = o.join().unwrap();
    assert_eq!(int(&reply.unwrap(), "fence"), f1 as i64);
    // Held → released, with a waiter: the observer sees the next holder.
    let b = waiter(&server, "job", "b", 0, Some("b"));
    wait_until(Duration::from_secs(10), || queued_len(&mut con, "job") == 1);
    let o = observer(&server, "job", f1, 0);
    wait_for_observers(&mut con, 1);
    assert_eq!(release(&mut con, "job", "a"), 1);
    let (reply, _) = o.join().unwrap();
    let reply = reply.unwrap();
    let (_, f2) = b.join().unwrap().unwrap();
    assert_eq!(int(&reply, "fence"), f2 as i64);
    assert_eq!(text(&reply, "owner").as_deref(), Some("b"));
    // Expiry.
    let _: i64 = redis::cmd("LOCK.EXTEND")
        .arg("job")
        .arg("b")
        .arg(200)
        .query(&mut con)
        .unwrap();
    let o = observer(&server, "job", f2, 0);
    wait_for_observers(&mut con, 1);
    let (reply, took) = o.join().unwrap();
    assert_eq!(reply, None);
    assert!(took < Duration::from_secs(5));
    // DEL, and FLUSHALL.
    for wipe in ["DEL", "FLUSHALL"] {
        let (_, f) = acquire(&mut con, "job", 60_000, Some("c")).unwrap();
        let o = observer(&server, "job", f, 0);
        wait_for_observers(&mut con, 1);
        let mut cmd = redis::cmd(wipe);
        if wipe == "DEL" {
            cmd.arg("job");
        }
        let _: Value = cmd.query(&mut con).unwrap();
        assert_eq!(o.join().unwrap().0, None, "{wipe}");
    }
    assert_eq!(observers(&mut con), 0);
}

#[test]
fn a_renewal_an_extension_or_a_guard_wakes_no_observer() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "job", 60_000, Some("me")).unwrap();
    let o = observer(&server, "job", fence, 400);
    wait_for_observers(&mut con, 1);
    assert_eq!(extend(&mut con, "job", "me", 60_000), 1);
    acquire(&mut con, "job", 60_000, Some("me")).unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("job")
        .arg(50_000)
        .query(&mut con)
        .unwrap();
    let _: Value = redis::cmd("LOCK.GUARD")
        .arg("job")
        .arg("me")
        .arg("SET")
        .arg("d")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let (reply, took) = o.join().unwrap();
    assert!(took >= Duration::from_millis(380), "woken after {took:?}");
    assert_eq!(int(&reply.unwrap(), "fence"), fence as i64);
}

#[test]
fn every_observer_of_a_key_wakes_once_per_change() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "job", 60_000, Some("me")).unwrap();
    let watchers: Vec<_> = (0..50)
        .map(|_| observer(&server, "job", fence, 0))
        .collect();
    let other = observer(&server, "other", 0, 300);
    wait_for_observers(&mut con, 51);
    assert_eq!(release(&mut con, "job", "me"), 1);
    for w in watchers {
        assert_eq!(w.join().unwrap().0, None);
    }
    // The other key's observer was not woken by this key's change.
    let (reply, took) = other.join().unwrap();
    assert_eq!(reply, None);
    assert!(took >= Duration::from_millis(280));
    assert_eq!(observers(&mut con), 0);
}

#[test]
fn observe_answers_at_once_in_multi_and_scripts() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "job", 60_000, Some("me")).unwrap();
    let reply: Vec<HashMap<String, i64>> = redis::pipe()
        .atomic()
        .cmd("LOCK.OBSERVE")
        .arg("job")
        .arg(fence)
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(reply[0]["fence"], fence as i64);
    let script = "return redis.call('LOCK.OBSERVE', KEYS[1], ARGV[1], 0)";
    let reply: Vec<Value> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("job")
        .arg(fence)
        .query(&mut con)
        .unwrap();
    assert_eq!(reply.len(), 4);
}

#[test]
fn a_closed_observer_leaves_no_trace() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "job", 60_000, Some("me")).unwrap();
    let gone = observer(&server, "job", fence, 0);
    wait_for_observers(&mut con, 1);
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    let line = list
        .lines()
        .find(|l| l.contains("cmd=lock.observe"))
        .expect("the observer's connection");
    let id = line.split(' ').next().unwrap().trim_start_matches("id=");
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut con)
        .unwrap();
    assert!(gone.join().is_err(), "the closed observer got no reply");
    wait_for_observers(&mut con, 0);
    // The change that would have woken it finds nobody.
    assert_eq!(release(&mut con, "job", "me"), 1);
    assert_eq!(observers(&mut con), 0);
    let _: String = redis::cmd("PING").query(&mut con).unwrap();
}

#[test]
fn observe_garbage_is_refused() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("x")
        .query(&mut con)
        .unwrap();
    for (args, expected) in [
        (
            vec!["job", "0"],
            "ERR wrong number of arguments for 'lock.observe' command",
        ),
        (
            vec!["job", "0", "1", "2"],
            "ERR wrong number of arguments for 'lock.observe' command",
        ),
        (
            vec!["job", "-1", "10"],
            "ERR fence must be 0 (free) or an integer from 1 to 9007199254740991",
        ),
        (
            vec!["job", "9007199254740992", "10"],
            "ERR fence must be 0 (free) or an integer from 1 to 9007199254740991",
        ),
        (
            vec!["job", "x", "10"],
            "ERR fence must be 0 (free) or an integer from 1 to 9007199254740991",
        ),
        (
            vec!["job", "1", "soon"],
            "ERR timeout-ms is not an integer or out of range",
        ),
        (
            vec!["job", "1", "-5"],
            "ERR timeout-ms must be 0 (no limit) or greater",
        ),
        (
            vec!["text", "1", "10"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ] {
        let error = error_of(&mut con, redis::cmd("LOCK.OBSERVE").arg(&args));
        assert_eq!(error, expected, "{args:?}");
    }
    assert_eq!(observers(&mut con), 0);
}

#[test]
fn an_observer_on_a_replica_sees_the_masters_grants() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let o = observer(&replica, "job", 0, 0);
    wait_for_observers(&mut r, 1);
    let (_, fence) = acquire_as(&mut m, "job", 60_000, "me", "leader").unwrap();
    let (reply, _) = o.join().unwrap();
    let reply = reply.unwrap();
    assert_eq!(int(&reply, "fence"), fence as i64);
    assert_eq!(text(&reply, "owner").as_deref(), Some("leader"));
    let o = observer(&replica, "job", fence, 0);
    wait_for_observers(&mut r, 1);
    assert_eq!(release(&mut m, "job", "me"), 1);
    assert_eq!(o.join().unwrap().0, None);
}
