//! Shared holders: read/write locks (`LOCK.ACQUIRE … SHARED`) and counting
//! semaphores (`SEM.*`), each holder with its own token, lease and fence;
//! the fair queue across modes and counts; expiry per holder with a
//! hand-off; replication, persistence and garbage.

mod common;
use common::*;

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

fn shared(con: &mut Connection, key: &str, ttl: i64, token: &str) -> Option<(String, u64)> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(ttl)
        .arg("TOKEN")
        .arg(token)
        .arg("SHARED")
        .query(con)
        .expect("LOCK.ACQUIRE … SHARED")
}

fn sem(
    con: &mut Connection,
    key: &str,
    limit: u32,
    ttl: i64,
    count: u32,
    token: &str,
) -> Option<(String, u64)> {
    redis::cmd("SEM.ACQUIRE")
        .arg(key)
        .arg(limit)
        .arg(ttl)
        .arg("COUNT")
        .arg(count)
        .arg("TOKEN")
        .arg(token)
        .query(con)
        .expect("SEM.ACQUIRE")
}

fn sem_info(con: &mut Connection, key: &str) -> Option<HashMap<String, i64>> {
    redis::cmd("SEM.INFO")
        .arg(key)
        .query(con)
        .expect("SEM.INFO")
}

fn mode(con: &mut Connection, key: &str) -> Option<String> {
    let fields: Option<HashMap<String, Value>> =
        redis::cmd("LOCK.INFO").arg(key).query(con).unwrap();
    match fields?.remove("mode")? {
        Value::BulkString(b) => Some(String::from_utf8(b).unwrap()),
        other => panic!("mode {other:?}"),
    }
}

/// A waiting request on its own connection: its reply when it comes.
fn waiter(server: &Server, cmd: redis::Cmd) -> thread::JoinHandle<Option<(String, u64)>> {
    let mut con = server.conn();
    thread::spawn(move || cmd.query(&mut con).expect("waiting acquire"))
}

fn wait_shared(key: &str, token: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key)
        .arg(60_000)
        .arg("TOKEN")
        .arg(token)
        .arg("SHARED")
        .arg("WAIT")
        .arg(0);
    cmd
}

fn wait_exclusive(key: &str, token: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key)
        .arg(60_000)
        .arg("TOKEN")
        .arg(token)
        .arg("WAIT")
        .arg(0);
    cmd
}

fn wait_permits(key: &str, limit: u32, count: u32, token: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SEM.ACQUIRE");
    cmd.arg(key)
        .arg(limit)
        .arg(60_000)
        .arg("COUNT")
        .arg(count)
        .arg("TOKEN")
        .arg(token)
        .arg("WAIT")
        .arg(0);
    cmd
}

fn waiters_of(con: &mut Connection, key: &str, command: &str) -> i64 {
    let fields: Option<HashMap<String, Value>> = redis::cmd(command).arg(key).query(con).unwrap();
    match fields.and_then(|mut f| f.remove("waiters")) {
        Some(Value::Int(n)) => n,
        _ => 0,
    }
}

fn queued(con: &mut Connection, key: &str, command: &str, n: i64) {
    wait_until(Duration::from_secs(10), || {
        waiters_of(con, key, command) == n
    });
}

// ---------------------------------------------------------------------------
// Read/write locks

#[test]
fn readers_share_each_with_its_own_fence_and_lease_and_a_writer_is_excluded() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, f1) = shared(&mut con, "rw", 60_000, "r1").unwrap();
    let (_, f2) = shared(&mut con, "rw", 10_000, "r2").unwrap();
    assert!(f2 > f1, "each reader has a new fence");
    assert_eq!(acquire(&mut con, "rw", 60_000, Some("w")), None);
    let both = info(&mut con, "rw").unwrap();
    assert_eq!((both["holders"], both["fence"]), (2, f2 as i64));
    assert!(both["ttl"] > 50_000, "the latest lease: {both:?}");
    assert_eq!(mode(&mut con, "rw").as_deref(), Some("shared"));
    let kind: String = redis::cmd("TYPE").arg("rw").query(&mut con).unwrap();
    assert_eq!(kind, "redisshrd");
    // The same reader again: a renewal with its own fence.
    assert_eq!(shared(&mut con, "rw", 60_000, "r2").unwrap().1, f2);
    // One reader's release leaves the other's lease alone.
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    assert_eq!(release(&mut con, "rw", "r1"), 0);
    let after = info(&mut con, "rw").unwrap();
    assert_eq!((after["holders"], after["fence"]), (1, f2 as i64));
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    assert!(!exists(&mut con, "rw"), "the key goes with its last reader");
    let (_, fw) = acquire(&mut con, "rw", 60_000, Some("w")).unwrap();
    assert!(fw > f2);
    assert_eq!(shared(&mut con, "rw", 60_000, "r3"), None);
}

#[test]
fn extend_moves_one_readers_lease_and_expiry_takes_one_reader() {
    let server = Server::start();
    let mut con = server.conn();
    shared(&mut con, "rw", 300, "short").unwrap();
    shared(&mut con, "rw", 60_000, "long").unwrap();
    assert_eq!(extend(&mut con, "rw", "long", 50_000), 1);
    assert_eq!(extend(&mut con, "rw", "nobody", 50_000), 0);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(
        extend(&mut con, "rw", "short", 1_000),
        0,
        "its own lease ran out"
    );
    let left = info(&mut con, "rw").unwrap();
    assert_eq!(left["holders"], 1);
    assert!(left["ttl"] > 40_000 && left["ttl"] <= 50_000, "{left:?}");
}

#[test]
fn upgrades_and_downgrades_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    shared(&mut con, "rw", 60_000, "me").unwrap();
    let before = digest(&mut con);
    let error = error_of(
        &mut con,
        redis::cmd("LOCK.ACQUIRE")
            .arg("rw")
            .arg(1000)
            .arg("TOKEN")
            .arg("me"),
    );
    assert!(
        error.starts_with("ERR this token holds the lock in the other mode"),
        "{error}"
    );
    assert_eq!(digest(&mut con), before);
    acquire(&mut con, "x", 60_000, Some("me")).unwrap();
    let error = error_of(
        &mut con,
        redis::cmd("LOCK.ACQUIRE")
            .arg("x")
            .arg(1000)
            .arg("TOKEN")
            .arg("me")
            .arg("SHARED"),
    );
    assert!(
        error.starts_with("ERR this token holds the lock in the other mode"),
        "{error}"
    );
    assert_eq!(mode(&mut con, "x").as_deref(), Some("exclusive"));
}

#[test]
fn readers_at_the_head_are_granted_together_and_a_queued_writer_is_not_starved() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "rw", 60_000, Some("w0")).unwrap();
    let r1 = waiter(&server, wait_shared("rw", "r1"));
    queued(&mut con, "rw", "LOCK.INFO", 1);
    let r2 = waiter(&server, wait_shared("rw", "r2"));
    queued(&mut con, "rw", "LOCK.INFO", 2);
    let w1 = waiter(&server, wait_exclusive("rw", "w1"));
    queued(&mut con, "rw", "LOCK.INFO", 3);
    let r3 = waiter(&server, wait_shared("rw", "r3"));
    queued(&mut con, "rw", "LOCK.INFO", 4);
    // The writer releases: both readers at the head, together; not r3,
    // which queued behind the writer w1.
    assert_eq!(release(&mut con, "rw", "w0"), 1);
    let (_, f1) = r1.join().unwrap().unwrap();
    let (_, f2) = r2.join().unwrap().unwrap();
    assert!(f2 > f1);
    assert_eq!(info(&mut con, "rw").unwrap()["holders"], 2);
    assert_eq!(waiters_of(&mut con, "rw", "LOCK.INFO"), 2);
    // A newcomer reader does not pass the queued writer either.
    assert_eq!(shared(&mut con, "rw", 60_000, "late"), None);
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    assert_eq!(
        waiters_of(&mut con, "rw", "LOCK.INFO"),
        2,
        "one reader is left"
    );
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    let (_, fw) = w1.join().unwrap().unwrap();
    assert!(fw > f2);
    assert_eq!(release(&mut con, "rw", "w1"), 1);
    let (_, f3) = r3.join().unwrap().unwrap();
    assert!(f3 > fw);
}

#[test]
fn a_writer_waiting_for_readers_is_handed_the_lock_when_their_leases_run_out() {
    let server = Server::start();
    let mut con = server.conn();
    shared(&mut con, "rw", 300, "r1").unwrap();
    shared(&mut con, "rw", 500, "r2").unwrap();
    let start = Instant::now();
    let w = waiter(&server, wait_exclusive("rw", "w"));
    let (token, _) = w.join().unwrap().unwrap();
    assert_eq!(token, "w");
    assert!(
        start.elapsed() >= Duration::from_millis(450),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(mode(&mut con, "rw").as_deref(), Some("exclusive"));
    assert_eq!(lock_counter(&mut con, "expiries"), 2);
}

#[test]
fn a_reader_may_guard_reads_but_not_writes() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET")
        .arg("data")
        .arg("v")
        .query(&mut con)
        .unwrap();
    shared(&mut con, "rw", 60_000, "r").unwrap();
    let read: String = redis::cmd("LOCK.GUARD")
        .arg("rw")
        .arg("r")
        .arg("GET")
        .arg("data")
        .query(&mut con)
        .unwrap();
    assert_eq!(read, "v");
    let error = error_of(
        &mut con,
        redis::cmd("LOCK.GUARD")
            .arg("rw")
            .arg("r")
            .arg("SET")
            .arg("data")
            .arg("w"),
    );
    assert!(error.starts_with("ERR"), "{error}");
    let error = error_of(
        &mut con,
        redis::cmd("LOCK.GUARD")
            .arg("rw")
            .arg("x")
            .arg("GET")
            .arg("data"),
    );
    assert!(error.starts_with("LOST"), "{error}");
    let data: String = redis::cmd("GET").arg("data").query(&mut con).unwrap();
    assert_eq!(data, "v");
}

#[test]
fn lock_max_holders_bounds_the_readers_of_a_key() {
    let server = Server::start_with(&["--lock.max-holders", "3"]);
    let mut con = server.conn();
    for i in 0..3 {
        shared(&mut con, "rw", 60_000, &format!("r{i}")).unwrap();
    }
    let error = error_of(
        &mut con,
        redis::cmd("LOCK.ACQUIRE")
            .arg("rw")
            .arg(1000)
            .arg("TOKEN")
            .arg("r3")
            .arg("SHARED"),
    );
    assert!(error.starts_with("LIMIT lock.max-holders"), "{error}");
    assert_eq!(info(&mut con, "rw").unwrap()["holders"], 3);
}

fn lock_counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap()
}

// ---------------------------------------------------------------------------
// Semaphores

#[test]
fn a_semaphore_hands_out_at_most_limit_permits_each_with_its_own_fence() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fa) = sem(&mut con, "s", 3, 60_000, 2, "a").unwrap();
    assert_eq!(sem(&mut con, "s", 3, 60_000, 2, "b"), None, "only 1 left");
    let (_, fc) = sem(&mut con, "s", 3, 60_000, 1, "c").unwrap();
    assert!(fc > fa);
    let info = sem_info(&mut con, "s").unwrap();
    assert_eq!(
        (info["limit"], info["used"], info["holders"], info["fence"]),
        (3, 3, 2, fc as i64)
    );
    let kind: String = redis::cmd("TYPE").arg("s").query(&mut con).unwrap();
    assert_eq!(kind, "redissema");
    // The same token again: a renewal; another COUNT: refused.
    assert_eq!(sem(&mut con, "s", 3, 60_000, 2, "a").unwrap().1, fa);
    let error = error_of(
        &mut con,
        redis::cmd("SEM.ACQUIRE")
            .arg("s")
            .arg(3)
            .arg(1000)
            .arg("COUNT")
            .arg(1)
            .arg("TOKEN")
            .arg("a"),
    );
    assert!(
        error.starts_with("ERR this token holds another COUNT"),
        "{error}"
    );
    // Another limit: refused.
    let error = error_of(
        &mut con,
        redis::cmd("SEM.ACQUIRE").arg("s").arg(4).arg(1000),
    );
    assert!(error.starts_with("ERR limit differs"), "{error}");
    let ext: i64 = redis::cmd("SEM.EXTEND")
        .arg("s")
        .arg("c")
        .arg(90_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(ext, 1);
    let rel: i64 = redis::cmd("SEM.RELEASE")
        .arg("s")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(rel, 1);
    assert_eq!(sem_info(&mut con, "s").unwrap()["used"], 1);
    let rel: i64 = redis::cmd("SEM.RELEASE")
        .arg("s")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(rel, 0);
    let rel: i64 = redis::cmd("SEM.RELEASE")
        .arg("s")
        .arg("c")
        .query(&mut con)
        .unwrap();
    assert_eq!(rel, 1);
    assert_eq!(sem_info(&mut con, "s"), None);
    assert!(!exists(&mut con, "s"), "the key goes with its last holder");
}

#[test]
fn a_semaphore_gone_with_its_last_holder_extends_and_releases_to_zero() {
    let server = Server::start();
    let mut con = server.conn();
    sem(&mut con, "s", 3, 60_000, 2, "a").unwrap();
    let _: i64 = redis::cmd("DEL").arg("s").query(&mut con).unwrap();
    for (name, cmd) in [
        (
            "SEM.EXTEND",
            redis::cmd("SEM.EXTEND").arg("s").arg("a").arg(1000).clone(),
        ),
        (
            "SEM.RELEASE",
            redis::cmd("SEM.RELEASE").arg("s").arg("a").clone(),
        ),
    ] {
        let reply: i64 = cmd.query(&mut con).unwrap();
        assert_eq!(reply, 0, "{name}");
    }
    sem(&mut con, "s", 3, 200, 1, "short").unwrap();
    thread::sleep(Duration::from_millis(300));
    let reply: i64 = redis::cmd("SEM.EXTEND")
        .arg("s")
        .arg("short")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, 0, "its lease ran out, and the key with it");
    assert!(!exists(&mut con, "s"));
}

#[test]
fn a_large_request_at_the_head_is_not_starved_by_small_ones() {
    let server = Server::start();
    let mut con = server.conn();
    sem(&mut con, "s", 3, 60_000, 1, "a").unwrap();
    sem(&mut con, "s", 3, 60_000, 1, "b").unwrap();
    let big = waiter(&server, wait_permits("s", 3, 3, "big"));
    queued(&mut con, "s", "SEM.INFO", 1);
    let small = waiter(&server, wait_permits("s", 3, 1, "small"));
    queued(&mut con, "s", "SEM.INFO", 2);
    let listed: Vec<HashMap<String, Value>> =
        redis::cmd("LOCK.QUEUE").arg("s").query(&mut con).unwrap();
    assert_eq!(listed[0]["mode"], Value::BulkString(b"permits".to_vec()));
    assert_eq!(listed[0]["count"], Value::Int(3));
    assert_eq!(listed[1]["count"], Value::Int(1));
    // One permit is free, but the head needs three: the small one waits too.
    assert_eq!(sem(&mut con, "s", 3, 60_000, 1, "newcomer"), None);
    let rel: i64 = redis::cmd("SEM.RELEASE")
        .arg("s")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(rel, 1);
    assert_eq!(waiters_of(&mut con, "s", "SEM.INFO"), 2);
    let rel: i64 = redis::cmd("SEM.RELEASE")
        .arg("s")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(rel, 1);
    let (_, fbig) = big.join().unwrap().unwrap();
    assert_eq!(sem_info(&mut con, "s").unwrap()["used"], 3);
    let rel: i64 = redis::cmd("SEM.RELEASE")
        .arg("s")
        .arg("big")
        .query(&mut con)
        .unwrap();
    assert_eq!(rel, 1);
    let (_, fsmall) = small.join().unwrap().unwrap();
    assert!(fsmall > fbig);
}

#[test]
fn an_expired_permit_is_handed_to_the_head_with_no_client_traffic() {
    let server = Server::start();
    let mut con = server.conn();
    sem(&mut con, "s", 1, 300, 1, "slow").unwrap();
    let start = Instant::now();
    let w = waiter(&server, wait_permits("s", 1, 1, "next"));
    let (token, _) = w.join().unwrap().unwrap();
    assert_eq!(token, "next");
    assert!(start.elapsed() >= Duration::from_millis(250));
    assert_eq!(sem_info(&mut con, "s").unwrap()["holders"], 1);
}

#[test]
fn locks_and_semaphores_do_not_mix() {
    let server = Server::start();
    let mut con = server.conn();
    sem(&mut con, "s", 2, 60_000, 1, "a").unwrap();
    acquire(&mut con, "l", 60_000, Some("a")).unwrap();
    shared(&mut con, "r", 60_000, "a").unwrap();
    let before = digest(&mut con);
    for (i, cmd) in [
        redis::cmd("LOCK.ACQUIRE").arg("s").arg(1000).clone(),
        redis::cmd("LOCK.EXTEND")
            .arg("s")
            .arg("a")
            .arg(1000)
            .clone(),
        redis::cmd("LOCK.RELEASE").arg("s").arg("a").clone(),
        redis::cmd("LOCK.INFO").arg("s").clone(),
        redis::cmd("LOCK.GUARD")
            .arg("s")
            .arg("a")
            .arg("GET")
            .arg("x")
            .clone(),
        redis::cmd("SEM.ACQUIRE").arg("l").arg(2).arg(1000).clone(),
        redis::cmd("SEM.ACQUIRE").arg("r").arg(2).arg(1000).clone(),
        redis::cmd("SEM.EXTEND").arg("l").arg("a").arg(1000).clone(),
        redis::cmd("SEM.RELEASE").arg("r").arg("a").clone(),
        redis::cmd("SEM.INFO").arg("l").clone(),
    ]
    .iter()
    .enumerate()
    {
        let error = error_of(&mut con, cmd);
        assert!(error.starts_with("WRONGTYPE"), "call {i}: {error}");
    }
    assert_eq!(digest(&mut con), before);
}

#[test]
fn shared_and_semaphore_garbage_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    sem(&mut con, "s", 2, 60_000, 1, "a").unwrap();
    let before = digest(&mut con);
    for (args, expected) in [
        (vec!["LOCK.ACQUIRE", "k", "10", "SHARED", "SHARED"], "ERR syntax error: SHARED is given more than once"),
        (vec!["LOCK.ACQUIRE", "k", "10", "COUNT", "2"], "ERR syntax error: unknown option"),
        (vec!["SEM.ACQUIRE", "k", "3"], "ERR wrong number of arguments for 'sem.acquire' command"),
        (vec!["SEM.ACQUIRE", "k", "0", "10"], "ERR limit must be an integer from 1 to 1000000"),
        (vec!["SEM.ACQUIRE", "k", "1000001", "10"], "ERR limit must be an integer from 1 to 1000000"),
        (vec!["SEM.ACQUIRE", "k", "two", "10"], "ERR limit must be an integer from 1 to 1000000"),
        (vec!["SEM.ACQUIRE", "k", "3", "0"], "ERR ttl-ms must be greater than 0"),
        (vec!["SEM.ACQUIRE", "k", "3", "10", "COUNT", "0"], "ERR COUNT must be an integer from 1 to the semaphore's limit"),
        (vec!["SEM.ACQUIRE", "k", "3", "10", "COUNT", "4"], "ERR COUNT must be an integer from 1 to the semaphore's limit"),
        (vec!["SEM.ACQUIRE", "k", "3", "10", "COUNT"], "ERR syntax error: COUNT needs a value"),
        (vec!["SEM.ACQUIRE", "k", "3", "10", "COUNT", "1", "COUNT", "1"], "ERR syntax error: COUNT is given more than once"),
        (vec!["SEM.ACQUIRE", "k", "3", "10", "SHARED"], "ERR syntax error: unknown option"),
        (vec!["SEM.EXTEND", "s", "a"], "ERR wrong number of arguments for 'sem.extend' command"),
        (vec!["SEM.EXTEND", "s", "a", "0"], "ERR ttl-ms must be greater than 0"),
        (vec!["SEM.RELEASE", "s"], "ERR wrong number of arguments for 'sem.release' command"),
        (vec!["SEM.RELEASE", "s", ""], "ERR token must be 1 to 256 bytes long"),
        (vec!["SEM.INFO"], "ERR wrong number of arguments for 'sem.info' command"),
        (vec!["LOCK.SETHOLDER", "s", "2", "1", "t", "5", "99999999999999", "1", "0"], "ERR LOCK.SETHOLDER and LOCK.DELHOLDER are internal: only the replication link and AOF loading may call them"),
        (vec!["LOCK.DELHOLDER", "s", "a"], "ERR LOCK.SETHOLDER and LOCK.DELHOLDER are internal: only the replication link and AOF loading may call them"),
    ] {
        let error = error_of(&mut con, redis::cmd(args[0]).arg(&args[1..]));
        assert_eq!(error, expected, "{args:?}");
    }
    assert_eq!(digest(&mut con), before);
    assert!(!exists(&mut con, "k"));
}

// ---------------------------------------------------------------------------
// Replication and persistence

#[test]
fn holders_reach_the_replica_as_their_effects_and_survive_reload_aof_and_restore() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    shared(&mut m, "rw", 600_000, "r1").unwrap();
    shared(&mut m, "rw", 300_000, "r2").unwrap();
    sem(&mut m, "s", 5, 600_000, 2, "a").unwrap();
    sem(&mut m, "s", 5, 600_000, 3, "b").unwrap();
    assert_eq!(release(&mut m, "rw", "r2"), 1);
    let ext: i64 = redis::cmd("SEM.EXTEND")
        .arg("s")
        .arg("a")
        .arg(500_000)
        .query(&mut m)
        .unwrap();
    assert_eq!(ext, 1);
    sync_replica(&master, &replica);
    assert_eq!(digest(&mut r), digest(&mut m));
    assert_eq!(info(&mut r, "rw").unwrap()["holders"], 1);
    assert_eq!(sem_info(&mut r, "s").unwrap()["used"], 5);
    // The same absolute expiry (a TTL read a moment apart could straddle a
    // second).
    let expire_time =
        |con: &mut Connection| -> i64 { redis::cmd("PEXPIRETIME").arg("s").query(con).unwrap() };
    assert_eq!(expire_time(&mut r), expire_time(&mut m));
    assert!(expire_time(&mut m) > 0);

    // A promoted replica goes on from the master's holders and fences.
    let high = sem_info(&mut m, "s").unwrap()["fence"];
    promote(&mut r);
    let rel: i64 = redis::cmd("SEM.RELEASE")
        .arg("s")
        .arg("b")
        .query(&mut r)
        .unwrap();
    assert_eq!(rel, 1);
    let (_, next) = sem(&mut r, "s", 5, 1000, 3, "c").unwrap();
    assert!(next as i64 > high);

    // DUMP / RESTORE and DEBUG RELOAD.
    let payload = common::payload::dump(&mut m, "s");
    common::payload::restore(&mut m, "s-copy", 0, &payload).unwrap();
    assert_eq!(sem_info(&mut m, "s-copy").unwrap()["used"], 5);
    let before = digest(&mut m);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut m).unwrap();
    assert_eq!(digest(&mut m), before);

    // The AOF, with and without its RDB preamble, and after a rewrite.
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
        shared(&mut con, "rw", 600_000, "r1").unwrap();
        shared(&mut con, "rw", 600_000, "r2").unwrap();
        sem(&mut con, "s", 4, 600_000, 3, "a").unwrap();
        assert_eq!(release(&mut con, "rw", "r1"), 1);
        let before = digest(&mut con);
        server.kill();
        server.restart();
        let mut con = server.conn();
        assert_eq!(digest(&mut con), before, "replayed, preamble {preamble}");
        rewrite_aof(&mut con);
        server.kill();
        server.restart();
        let mut con = server.conn();
        assert_eq!(digest(&mut con), before, "rewritten, preamble {preamble}");
        assert_eq!(info(&mut con, "rw").unwrap()["holders"], 1);
    }
}

#[test]
fn a_session_releases_only_its_own_holder() {
    let server = Server::start();
    let mut con = server.conn();
    shared(&mut con, "rw", 60_000, "kept").unwrap();
    {
        let mut session = server.conn();
        let _: Value = redis::cmd("LOCK.ACQUIRE")
            .arg("rw")
            .arg(60_000)
            .arg("TOKEN")
            .arg("bound")
            .arg("SHARED")
            .arg("SESSION")
            .query(&mut session)
            .unwrap();
        let _: Value = redis::cmd("SEM.ACQUIRE")
            .arg("s")
            .arg(2)
            .arg(60_000)
            .arg("TOKEN")
            .arg("bound")
            .arg("SESSION")
            .query(&mut session)
            .unwrap();
        assert_eq!(info(&mut con, "rw").unwrap()["holders"], 2);
    }
    wait_until(Duration::from_secs(10), || {
        info(&mut con, "rw").map(|i| i["holders"]) == Some(1) && sem_info(&mut con, "s").is_none()
    });
    assert_eq!(release(&mut con, "rw", "kept"), 1);
}

/// Every prefix of a shared lock's and of a semaphore's DUMP, and every
/// payload with one byte changed (checksum validation off, so the module's
/// loader sees them), is refused or loads whole: the server never crashes,
/// and a loaded key is a consistent holder set.
#[test]
fn restore_of_damaged_holder_payloads_is_refused_or_whole() {
    let server = Server::start();
    let mut con = server.conn();
    shared(&mut con, "rw", 600_000, "r1").unwrap();
    shared(&mut con, "rw", 600_000, "r2").unwrap();
    sem(&mut con, "s", 3, 600_000, 2, "a").unwrap();
    common::payload::skip_checksum(&mut con, true);
    let mut loaded = 0;
    for source in ["rw", "s"] {
        let payload = common::payload::dump(&mut con, source);
        let mut cases: Vec<Vec<u8>> = (0..payload.len()).map(|n| payload[..n].to_vec()).collect();
        for at in 10..payload.len() - 10 {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = payload.clone();
                damaged[at] ^= flip;
                cases.push(damaged);
            }
        }
        for (i, case) in cases.iter().enumerate() {
            let key = format!("{source}-case-{i}");
            if common::payload::restore(&mut con, &key, 0, case).is_ok() {
                loaded += 1;
                let kind: String = redis::cmd("TYPE").arg(&key).query(&mut con).unwrap();
                if kind == "redisshrd" {
                    let held = info(&mut con, &key);
                    assert!(held.is_none_or(|h| h["holders"] >= 1), "{key}");
                } else if kind == "redissema" {
                    let held = sem_info(&mut con, &key);
                    assert!(held.is_none_or(|h| h["used"] <= h["limit"]), "{key}");
                }
                let _: i64 = redis::cmd("DEL").arg(&key).query(&mut con).unwrap();
            }
            let pong: String = redis::cmd("PING").query(&mut con).unwrap();
            assert_eq!(pong, "PONG", "after case {i} of {source}");
        }
    }
    assert!(loaded > 0, "the whole payloads at least load");
}

/// Readers and permits that nobody touches again leave with their key when
/// Redis expires it, each counted once as an expiry, with one `lock.expired`
/// or `sem.expired` event per holder. Redis 8 removes such a key as its
/// latest lease's last millisecond begins (not one millisecond later, as
/// Redis 7.0 and Valkey do): those holders count all the same.
#[test]
fn holders_expired_by_the_server_with_their_key_are_each_counted_once() {
    const KEYS: usize = 60;
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kdx")
        .query(&mut con)
        .unwrap();
    // The expiry cycle every 2 ms: on Redis 8 it often catches a key in
    // its expiry millisecond, the case this test is about.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hz")
        .arg(500)
        .query(&mut con)
        .unwrap();
    let events = keyspace_events(&server, "h*", Duration::from_secs(30));
    // Two holders per key: a reader pair, or a semaphore with two permits
    // out (the later lease sets the key's expiry), all ending within 50 ms.
    for i in 0..KEYS {
        let ttl = 400 + (i as i64 * 50) / KEYS as i64;
        if i % 2 == 0 {
            shared(&mut con, &format!("hr{i}"), ttl - 5, "a").unwrap();
            shared(&mut con, &format!("hr{i}"), ttl, "b").unwrap();
        } else {
            sem(&mut con, &format!("hs{i}"), 3, ttl - 5, 1, "a").unwrap();
            sem(&mut con, &format!("hs{i}"), 3, ttl, 2, "b").unwrap();
        }
    }
    let start = Instant::now();
    loop {
        let left: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
        if left == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{left} keys left"
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(lock_counter(&mut con, "expiries"), 2 * KEYS as i64);
    let mut expired: HashMap<String, (usize, usize)> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let seen = |e: &HashMap<String, (usize, usize)>| {
        e.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    while seen(&expired) != (2 * KEYS, KEYS) && Instant::now() < deadline {
        if let Ok((key, event)) = events.recv_timeout(Duration::from_millis(100)) {
            let entry = expired.entry(key).or_default();
            match event.as_str() {
                "lock.expired" | "sem.expired" => entry.0 += 1,
                "expired" => entry.1 += 1,
                _ => {}
            }
        }
    }
    for i in 0..KEYS {
        let (key, module_event) = match i % 2 {
            0 => (format!("hr{i}"), "lock.expired"),
            _ => (format!("hs{i}"), "sem.expired"),
        };
        assert_eq!(
            expired.get(&key),
            Some(&(2, 1)),
            "{key}: two {module_event} events and Redis' own expired"
        );
    }
}

/// The key's TTL follows its latest lease after a release, even after a
/// client moved it (`PEXPIRE`), and the replica ends with the same expiry
/// as the master.
#[test]
fn a_release_puts_back_the_latest_lease_as_the_ttl_on_master_and_replica() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    sem(&mut m, "s", 3, 600_000, 1, "a").unwrap();
    sem(&mut m, "s", 3, 300_000, 1, "b").unwrap();
    let latest = sem_info(&mut m, "s").unwrap()["deadline"];
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("s")
        .arg(100_000)
        .query(&mut m)
        .unwrap();
    let rel: i64 = redis::cmd("SEM.RELEASE")
        .arg("s")
        .arg("b")
        .query(&mut m)
        .unwrap();
    assert_eq!(rel, 1);
    let expire_time =
        |con: &mut Connection| -> i64 { redis::cmd("PEXPIRETIME").arg("s").query(con).unwrap() };
    assert_eq!(
        expire_time(&mut m),
        latest,
        "the latest lease's deadline again"
    );
    sync_replica(&master, &replica);
    assert_eq!(expire_time(&mut r), latest);
    assert_eq!(digest(&mut r), digest(&mut m));
}

/// Two waiters with one token, granted in one hand-off: the second is the
/// first's holder asking again, so it is renewed with the same fence, as a
/// direct `SEM.ACQUIRE` by that token would be; with another `COUNT` it is
/// told so, and the first's permits stay as they were.
#[test]
fn waiters_with_one_token_granted_together_get_one_hold() {
    let server = Server::start();
    let mut con = server.conn();
    sem(&mut con, "s", 3, 60_000, 3, "holder").unwrap();
    let first = waiter(&server, wait_permits("s", 3, 1, "dup"));
    queued(&mut con, "s", "SEM.INFO", 1);
    let other_count = waiter(&server, wait_permits("s", 3, 2, "dup"));
    queued(&mut con, "s", "SEM.INFO", 2);
    let same_count = waiter(&server, wait_permits("s", 3, 1, "dup"));
    queued(&mut con, "s", "SEM.INFO", 3);
    let released: i64 = redis::cmd("SEM.RELEASE")
        .arg(&["s", "holder"])
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    let (_, fence) = first.join().unwrap().expect("granted");
    let error = other_count.join();
    assert!(error.is_err(), "the other COUNT is refused: {error:?}");
    assert_eq!(same_count.join().unwrap(), Some(("dup".into(), fence)));
    let permits = sem_info(&mut con, "s").unwrap();
    assert_eq!(
        (permits["used"], permits["holders"], permits["fence"]),
        (1, 1, fence as i64)
    );

    // Readers alike: one reader, one fence.
    shared(&mut con, "rw", 60_000, "r").unwrap();
    let writer = waiter(&server, wait_exclusive("rw", "w"));
    queued(&mut con, "rw", "LOCK.INFO", 1);
    let a = waiter(&server, wait_shared("rw", "dup"));
    let b = waiter(&server, wait_shared("rw", "dup"));
    queued(&mut con, "rw", "LOCK.INFO", 3);
    assert_eq!(release(&mut con, "rw", "r"), 1);
    let _ = writer.join().unwrap().expect("the writer first");
    assert_eq!(release(&mut con, "rw", "w"), 1);
    let (a, b) = (a.join().unwrap().unwrap(), b.join().unwrap().unwrap());
    assert_eq!(a, b, "one reader, one fence");
    assert_eq!(info(&mut con, "rw").unwrap()["holders"], 1);
}

/// `LOCK.INFO` of a key held in shared mode shows the newest reader's
/// label, as `LOCK.OBSERVE` does; with `HOLDS n`, `holds` lists each reader
/// (`n` bounds the list, never the count), `SEM.INFO … HOLDS n` each holder
/// with its permits, and an exclusive lock its one hold. Never a token.
#[test]
fn info_lists_the_holds_of_a_shared_lock_and_a_semaphore() {
    let server = Server::start();
    let mut con = server.conn();
    let labelled = |con: &mut Connection, token: &str, owner: &str| -> u64 {
        let grant: Option<(String, u64)> = redis::cmd("LOCK.ACQUIRE")
            .arg(&["rw", "60000", "TOKEN", token, "SHARED", "OWNER", owner])
            .query(con)
            .unwrap();
        grant.unwrap().1
    };
    let f1 = labelled(&mut con, "t1", "pod-1");
    let f2 = labelled(&mut con, "t2", "pod-2");
    assert_eq!(owner(&mut con, "rw").as_deref(), Some(&b"pod-2"[..]));
    let plain: HashMap<String, Value> = redis::cmd("LOCK.INFO").arg("rw").query(&mut con).unwrap();
    assert!(!plain.contains_key("holds"), "listed only when asked");
    let all: HashMap<String, Value> = redis::cmd("LOCK.INFO")
        .arg(&["rw", "HOLDS", "10"])
        .query(&mut con)
        .unwrap();
    let holds = |v: &Value| -> Vec<HashMap<String, Value>> {
        redis::from_redis_value(v).expect("a list of maps")
    };
    let listed = holds(&all["holds"]);
    let fences: Vec<i64> = listed
        .iter()
        .map(|h| redis::from_redis_value(&h["fence"]).unwrap())
        .collect();
    assert_eq!(fences, [f1 as i64, f2 as i64]);
    assert_eq!(listed[0]["owner"], Value::BulkString(b"pod-1".to_vec()));
    let text = format!("{all:?}");
    assert!(
        !text.contains("t1") && !text.contains("t2"),
        "a token: {text}"
    );
    let one: HashMap<String, Value> = redis::cmd("LOCK.INFO")
        .arg(&["rw", "holds", "1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(holds(&one["holds"]).len(), 1);
    assert_eq!(one["holders"], Value::Int(2));

    sem(&mut con, "s", 5, 60_000, 3, "a").unwrap();
    sem(&mut con, "s", 5, 60_000, 1, "b").unwrap();
    let info: HashMap<String, Value> = redis::cmd("SEM.INFO")
        .arg(&["s", "HOLDS", "5"])
        .query(&mut con)
        .unwrap();
    let counts: Vec<i64> = holds(&info["holds"])
        .iter()
        .map(|h| redis::from_redis_value(&h["count"]).unwrap())
        .collect();
    assert_eq!(counts, [3, 1]);
    let (_, fence) = acquire(&mut con, "lk", 60_000, Some("x")).unwrap();
    let info: HashMap<String, Value> = redis::cmd("LOCK.INFO")
        .arg(&["lk", "HOLDS", "5"])
        .query(&mut con)
        .unwrap();
    let one = holds(&info["holds"]);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["fence"], Value::Int(fence as i64));

    // Garbage: refused, and nothing changes.
    let before = digest(&mut con);
    for args in [
        vec!["rw", "HOLDS"],
        vec!["rw", "HOLDS", "0"],
        vec!["rw", "HOLDS", "1001"],
        vec!["rw", "HOLDS", "-1"],
        vec!["rw", "HOLDS", "1\0"],
        vec!["rw", "COUNT", "1"],
        vec!["rw", "HOLDS", "1", "extra"],
    ] {
        for command in ["LOCK.INFO", "SEM.INFO"] {
            let error = error_of(&mut con, redis::cmd(command).arg(&args));
            assert!(error.starts_with("ERR"), "{command} {args:?}: {error}");
        }
    }
    assert_eq!(digest(&mut con), before);
}

/// `PERSIST` (or a `RESTORE` with TTL 0) takes the TTL off a key with
/// several holders; each holder keeps its own lease, and the key's TTL is
/// put back to the latest of them (on the replica too), so the key still
/// goes when its last lease ends.
#[test]
fn a_persisted_holder_key_still_goes_with_its_last_lease() {
    let (master, replica) = pair();
    let mut m = master.conn();
    sem(&mut m, "s", 2, 300, 1, "a").unwrap();
    shared(&mut m, "rw", 300, "r").unwrap();
    for key in ["s", "rw"] {
        let persisted: i64 = redis::cmd("PERSIST").arg(key).query(&mut m).unwrap();
        assert_eq!(persisted, 1);
    }
    // RESTORE with TTL 0 of a live semaphore, under another name.
    sem(&mut m, "t", 2, 300, 1, "b").unwrap();
    let payload: Vec<u8> = redis::cmd("DUMP").arg("t").query(&mut m).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("u")
        .arg(0)
        .arg(payload)
        .query(&mut m)
        .unwrap();
    wait_until(Duration::from_secs(10), || {
        !exists(&mut m, "s") && !exists(&mut m, "rw") && !exists(&mut m, "u")
    });
    sync_replica(&master, &replica);
    let mut r = replica.conn();
    for key in ["s", "rw", "u"] {
        assert!(!exists(&mut r, key), "{key} on the replica");
    }
}
