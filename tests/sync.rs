//! `SYNC numreplicas timeout-ms`: a grant (an extension, a guarded write)
//! is answered only once that many replicas hold it; when they do not in
//! time, a grant is undone as if released (the next waiter is served, the
//! fence stays used) and the reply is `NOSYNC …`. On every command that
//! grants or renews, from the `WAIT` queue too; refused in MULTI and
//! scripts; garbage refused with nothing changed. The timeouts of the
//! waits that must succeed leave room for a replica's own acknowledgement,
//! once a second (no test asserts a duration).

mod common;
use common::resp::RawClient;
use common::*;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

/// Long enough for a replica's own acknowledgement, once a second (10 s,
/// [`scaled`] under memcheck).
fn synced() -> &'static str {
    static SYNCED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SYNCED.get_or_init(|| scaled(Duration::from_secs(10)).as_millis().to_string())
}

fn run(con: &mut Connection, parts: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(parts[0]);
    cmd.arg(&parts[1..]);
    cmd.query(con)
}

fn grant(con: &mut Connection, parts: &[&str]) -> Option<(String, u64)> {
    let mut cmd = redis::cmd(parts[0]);
    cmd.arg(&parts[1..]);
    cmd.query(con).expect("a grant or null")
}

fn lock_info(con: &mut Connection, key: &str) -> Option<HashMap<String, Value>> {
    redis::cmd("LOCK.INFO").arg(key).query(con).unwrap()
}

fn counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap()
}

#[test]
fn a_synced_grant_is_on_the_replica_when_it_is_answered() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    for key in ["a", "b", "c"] {
        let (_, fence) = grant(
            &mut m,
            &["LOCK.ACQUIRE", key, "60000", "SYNC", "1", synced()],
        )
        .expect("granted");
        // No waiting here: the reply came once the replica held it.
        let held = lock_info(&mut r, key).expect("on the replica");
        assert_eq!(held["fence"], Value::Int(fence as i64), "{key}");
    }
    // The same for permits, readers, an extension and a guarded write.
    let (token, fence) = grant(
        &mut m,
        &[
            "SEM.ACQUIRE",
            "s",
            "3",
            "60000",
            "COUNT",
            "2",
            "SYNC",
            "1",
            synced(),
        ],
    )
    .unwrap();
    let permits: HashMap<String, Value> = redis::cmd("SEM.INFO").arg("s").query(&mut r).unwrap();
    assert_eq!(permits["fence"], Value::Int(fence as i64));
    grant(
        &mut m,
        &[
            "LOCK.ACQUIRE",
            "rw",
            "60000",
            "SHARED",
            "TOKEN",
            "r",
            "SYNC",
            "1",
            synced(),
        ],
    )
    .unwrap();
    assert!(lock_info(&mut r, "rw").is_some());
    let (_, _) = grant(&mut m, &["LOCK.ACQUIRE", "g", "1000", "TOKEN", "t"]).unwrap();
    let extended = run(
        &mut m,
        &["LOCK.EXTEND", "g", "t", "500000", "SYNC", "1", synced()],
    );
    assert_eq!(extended, Ok(Value::Int(1)));
    let ttl: i64 = redis::cmd("PTTL").arg("g").query(&mut r).unwrap();
    assert!(ttl > 100_000, "the extension is on the replica: {ttl}");
    let extended = run(
        &mut m,
        &["SEM.EXTEND", "s", &token, "500000", "SYNC", "1", synced()],
    );
    assert_eq!(extended, Ok(Value::Int(1)));
    let guarded = run(
        &mut m,
        &[
            "LOCK.GUARD",
            "g",
            "t",
            "SYNC",
            "1",
            synced(),
            "INCRBY",
            "total",
            "7",
        ],
    );
    assert_eq!(guarded, Ok(Value::Int(7)), "the command's own reply");
    let total: i64 = redis::cmd("GET").arg("total").query(&mut r).unwrap();
    assert_eq!(total, 7);
    assert_eq!(counter(&mut m, "syncs"), 8);
    assert_eq!(counter(&mut m, "sync_timeouts"), 0);
    sync_replica(&master, &replica);
    assert_eq!(digest(&mut r), digest(&mut m));
}

#[test]
fn without_its_replicas_a_grant_is_undone_and_its_fence_stays_used() {
    let server = Server::start();
    let mut con = server.conn();
    let error = answer_of(
        &mut con,
        redis::cmd("LOCK.ACQUIRE").arg(&["k", "60000", "SYNC", "1", "200"]),
    );
    assert_eq!(
        error,
        "NOSYNC 0 of 1 replicas acknowledged; the grant was undone"
    );
    assert!(
        lock_info(&mut con, "k").is_none(),
        "undone: the key is free"
    );
    assert_eq!(dbsize(&mut con), 0);
    let high_water: u64 = info_field(&mut con, "lock", "lock_fence_high_water")
        .parse()
        .unwrap();
    let (_, fence) = acquire(&mut con, "k", 1000, None).unwrap();
    assert!(
        fence > high_water,
        "the undone grant's fence is not used again"
    );
    // Not the holder: 0 at once, nothing to wait for.
    let extended = run(
        &mut con,
        &["LOCK.EXTEND", "k", "t", "1000", "SYNC", "1", "100"],
    );
    assert_eq!(extended, Ok(Value::Int(0)));
    // An extension and a guarded write stand, and say so.
    let (token, _) = acquire(&mut con, "e", 1000, Some("me")).unwrap();
    let error = answer_of(
        &mut con,
        redis::cmd("LOCK.EXTEND").arg(&["e", &token, "600000", "SYNC", "2", "100"]),
    );
    assert_eq!(
        error,
        "NOSYNC 0 of 2 replicas acknowledged; the extension stands"
    );
    assert!(pttl(&mut con, "e") > 100_000, "the extension stands");
    let error = answer_of(
        &mut con,
        redis::cmd("LOCK.GUARD").arg(&["e", "me", "SYNC", "1", "100", "SET", "data", "v"]),
    );
    assert_eq!(
        error,
        "NOSYNC 0 of 1 replicas acknowledged; the guarded command ran"
    );
    let data: String = redis::cmd("GET").arg("data").query(&mut con).unwrap();
    assert_eq!(data, "v");
    assert_eq!(counter(&mut con, "sync_timeouts"), 3);
    assert_eq!(counter(&mut con, "syncs_undone"), 1);
}

/// The error text of a call, or what it answered instead.
fn answer_of(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Ok(v) => format!("expected an error, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
            .trim()
            .to_string(),
    }
}

#[test]
fn a_replica_that_does_not_answer_leaves_the_key_to_the_next_waiter() {
    if skip_under_memcheck("the replica's DEBUG SLEEP must start within 200 ms, before the grant") {
        return;
    }
    let (master, replica) = pair();
    let mut m = master.conn();
    acquire(&mut m, "k", 60_000, Some("holder")).unwrap();
    // A waiter whose grant must be on 1 replica, and one behind it.
    let mut first = master.conn();
    let first = thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&[
                "k", "60000", "TOKEN", "first", "WAIT", "20000", "SYNC", "1", "500",
            ])
            .query::<Option<(String, u64)>>(&mut first)
    });
    let mut second = master.conn();
    wait_until(Duration::from_secs(10), || {
        info(&mut m, "k").is_some_and(|i| i["waiters"] == 1)
    });
    let second = thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&["k", "60000", "TOKEN", "second", "WAIT", "20000"])
            .query::<Option<(String, u64)>>(&mut second)
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut m, "k").is_some_and(|i| i["waiters"] == 2)
    });
    // The replica stops answering (its link stays up: DEBUG SLEEP).
    let mut r = replica.conn();
    let sleeper = thread::spawn(move || {
        let _: redis::RedisResult<()> = redis::cmd("DEBUG").arg("SLEEP").arg(3).query(&mut r);
    });
    thread::sleep(Duration::from_millis(200));
    assert_eq!(release(&mut m, "k", "holder"), 1);
    let first = first.join().unwrap();
    let error = first.expect_err("its replica did not answer");
    assert_eq!(error.code(), Some("NOSYNC"), "{error}");
    let (token, _) = second.join().unwrap().unwrap().expect("handed the key");
    assert_eq!(token, "second");
    sleeper.join().unwrap();
    // The replica ends with the master's state.
    sync_replica(&master, &replica);
    assert_eq!(digest(&mut replica.conn()), digest(&mut m));
}

#[test]
fn a_waiter_granted_with_sync_is_answered_once_its_replica_holds_it() {
    let (master, replica) = pair();
    let mut m = master.conn();
    acquire(&mut m, "k", 60_000, Some("holder")).unwrap();
    let mut waiter = master.conn();
    let waiting = thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(&[
                "k",
                "60000",
                "TOKEN",
                "w",
                "WAIT",
                "20000",
                "SYNC",
                "1",
                synced(),
            ])
            .query::<Option<(String, u64)>>(&mut waiter)
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut m, "k").is_some_and(|i| i["waiters"] == 1)
    });
    assert_eq!(release(&mut m, "k", "holder"), 1);
    let (token, fence) = waiting.join().unwrap().unwrap().expect("granted");
    assert_eq!(token, "w");
    let held = lock_info(&mut replica.conn(), "k").expect("on the replica");
    assert_eq!(held["fence"], Value::Int(fence as i64));
}

#[test]
fn a_client_that_leaves_while_it_waits_for_its_replicas_gives_its_grant_back() {
    use std::io::Write;
    let server = Server::start();
    let mut con = server.conn();
    // Sent on a socket of its own, never read: no replica will answer.
    let mut leaving = std::net::TcpStream::connect(server.addr()).unwrap();
    let args = [
        "LOCK.ACQUIRE",
        "k",
        "60000",
        "TOKEN",
        "gone",
        "SYNC",
        "1",
        "20000",
    ];
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    leaving.write_all(request.as_bytes()).unwrap();
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "sync_waiting") == 1
    });
    assert!(
        lock_info(&mut con, "k").is_some(),
        "granted, not yet answered"
    );
    drop(leaving);
    wait_until(Duration::from_secs(10), || {
        lock_info(&mut con, "k").is_none()
    });
    assert_eq!(counter(&mut con, "sync_waiting"), 0);
    assert_eq!(counter(&mut con, "syncs_undone"), 1);
}

#[test]
fn sync_cannot_wait_in_multi_or_a_script_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let before = digest(&mut con);
    let scripted = run(
        &mut con,
        &[
            "EVAL",
            "return redis.call('LOCK.ACQUIRE', 'k', '1000', 'SYNC', '1', '100')",
            "0",
        ],
    );
    let error = scripted.expect_err("refused in a script").to_string();
    assert!(error.contains("SYNC cannot wait"), "{error}");
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let _: () = redis::cmd("LOCK.ACQUIRE")
        .arg(&["k", "1000", "SYNC", "1", "100"])
        .query(&mut con)
        .unwrap();
    let exec = redis::cmd("EXEC").query::<Value>(&mut con);
    let error = exec.expect_err("refused in MULTI").to_string();
    assert!(error.contains("SYNC cannot wait"), "{error}");
    // LOCK.MACQUIRE and LOCK.MEXTEND alike.
    let scripted = run(
        &mut con,
        &[
            "EVAL",
            "return redis.call('LOCK.MACQUIRE', '2', KEYS[1], KEYS[2], '1000', 'SYNC', '1', '100')",
            "2",
            "k",
            "m",
        ],
    );
    let error = scripted.expect_err("refused in a script").to_string();
    assert!(error.contains("SYNC cannot wait"), "{error}");
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let _: () = redis::cmd("LOCK.MACQUIRE")
        .arg(&["2", "k", "m", "1000", "WAIT", "0", "SYNC", "1", "100"])
        .query(&mut con)
        .unwrap();
    let exec = redis::cmd("EXEC").query::<Value>(&mut con);
    let error = exec.expect_err("refused in MULTI").to_string();
    assert!(error.contains("SYNC cannot wait"), "{error}");
    assert_eq!(digest(&mut con), before);
    assert_eq!(counter(&mut con, "syncs"), 0);
}

#[test]
fn sync_garbage_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "held", 60_000, Some("t")).unwrap();
    let before = digest(&mut con);
    for (args, want) in [
        (
            vec!["LOCK.ACQUIRE", "k", "1000", "SYNC"],
            "ERR syntax error: SYNC needs",
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "1000", "SYNC", "1"],
            "ERR syntax error: SYNC needs",
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "1000", "SYNC", "-1", "100"],
            "ERR SYNC numreplicas",
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "1000", "SYNC", "1001", "100"],
            "ERR SYNC numreplicas",
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "1000", "SYNC", "1\0", "100"],
            "ERR SYNC numreplicas",
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "1000", "SYNC", "1", "0"],
            "ERR SYNC timeout-ms",
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "1000", "SYNC", "1", "x"],
            "ERR SYNC timeout-ms",
        ),
        (
            vec![
                "LOCK.ACQUIRE",
                "k",
                "1000",
                "SYNC",
                "1",
                "100",
                "SYNC",
                "1",
                "100",
            ],
            "ERR syntax error: SYNC is given more than once",
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "1000", "SYNC", "1", "100", "AOF"],
            "ERR SYNC AOF",
        ),
        (
            vec!["SEM.ACQUIRE", "s", "2", "1000", "SYNC", "1"],
            "ERR syntax error: SYNC needs",
        ),
        (
            vec!["LOCK.MACQUIRE", "2", "k", "m", "1000", "SYNC", "1"],
            "ERR syntax error: SYNC needs",
        ),
        (
            vec![
                "LOCK.MACQUIRE",
                "2",
                "k",
                "m",
                "1000",
                "SYNC",
                "x\r\n",
                "100",
            ],
            "ERR SYNC numreplicas",
        ),
        (
            vec!["LOCK.MACQUIRE", "2", "k", "m", "1000", "SYNC", "1", "-5"],
            "ERR SYNC timeout-ms",
        ),
        (
            vec![
                "LOCK.MACQUIRE",
                "1",
                "k",
                "1000",
                "SYNC",
                "1",
                "9",
                "SYNC",
                "1",
                "9",
            ],
            "ERR syntax error: SYNC is given more than once",
        ),
        (
            vec!["LOCK.MEXTEND", "1", "held", "t", "1000", "SYNC", "1", "0"],
            "ERR SYNC timeout-ms",
        ),
        (
            vec!["LOCK.EXTEND", "held", "t", "1000", "SYNC", "1"],
            "ERR syntax error: SYNC needs",
        ),
        (
            vec!["LOCK.EXTEND", "held", "t", "1000", "SYNC", "1", "0"],
            "ERR SYNC timeout-ms",
        ),
        (
            vec!["SEM.EXTEND", "s", "t", "1000", "SYNC", "x", "1"],
            "ERR SYNC numreplicas",
        ),
        (
            vec!["LOCK.GUARD", "held", "t", "SYNC", "1", "100"],
            "ERR wrong number of arguments",
        ),
        (
            vec!["LOCK.GUARD", "held", "t", "SYNC", "1", "0", "SET", "a", "b"],
            "ERR SYNC timeout-ms",
        ),
        (
            vec!["LOCK.GUARD_RO", "held", "t", "SYNC", "1", "10", "GET", "a"],
            "ERR SYNC is not an option",
        ),
    ] {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        let error = answer_of(&mut con, &cmd);
        assert!(error.starts_with(want), "{args:?}: {error}");
    }
    assert_eq!(digest(&mut con), before);
    // SYNC 0 is no SYNC: answered at once, with no replica.
    let granted = grant(&mut con, &["LOCK.ACQUIRE", "z", "1000", "SYNC", "0", "100"]);
    assert!(granted.is_some());
    // GUARD's keys, with SYNC before the command.
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&[
            "GETKEYS",
            "LOCK.GUARD",
            "lk",
            "t",
            "SYNC",
            "1",
            "100",
            "SET",
            "data",
            "v",
        ])
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["lk", "data"]);
}

#[test]
fn synced_grants_end_the_same_on_the_replica_and_after_an_aof_reload() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "appendonly", "yes"])
        .query(&mut m)
        .unwrap();
    wait_for_aof_rewrite(&mut m);
    for key in ["a", "b"] {
        grant(
            &mut m,
            &["LOCK.ACQUIRE", key, "60000", "SYNC", "1", synced()],
        )
        .unwrap();
    }
    // One undone: more replicas than there are.
    let error = answer_of(
        &mut m,
        redis::cmd("LOCK.ACQUIRE").arg(&["c", "60000", "SYNC", "2", "100"]),
    );
    // (Redis 7.0's replica may not have answered yet: 0 or 1 of 2.)
    assert!(
        error.starts_with("NOSYNC ") && error.ends_with("undone"),
        "{error}"
    );
    sync_replica(&master, &replica);
    let state = digest(&mut m);
    assert_eq!(digest(&mut replica.conn()), state);
    let _: Value = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
    assert_eq!(digest(&mut m), state);
    assert!(lock_info(&mut m, "c").is_none());
}

#[test]
fn a_guarded_command_that_fails_or_only_reads_answers_at_once() {
    // No replica at all: anything that waited would end in NOSYNC.
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut con).unwrap();
    grant(&mut con, &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t"]).unwrap();
    fn guard<'a>(cmd: &[&'a str]) -> Vec<&'a str> {
        let mut parts = vec!["LOCK.GUARD", "k", "t", "SYNC", "1", synced()];
        parts.extend_from_slice(cmd);
        parts
    }
    let wrong = run(&mut con, &guard(&["LPUSH", "s", "x"])).unwrap_err();
    assert_eq!(wrong.code(), Some("WRONGTYPE"), "{wrong}");
    let unknown = run(&mut con, &guard(&["NOSUCHCMD", "a"])).unwrap_err();
    assert_eq!(unknown.code(), Some("ERR"), "{unknown}");
    let read = run(&mut con, &guard(&["GET", "s"])).unwrap();
    assert_eq!(read, Value::BulkString(b"v".to_vec()));
    assert_eq!(counter(&mut con, "sync_timeouts"), 0);
    // A write still waits, and says what stands.
    let write = run(
        &mut con,
        &["LOCK.GUARD", "k", "t", "SYNC", "1", "50", "SET", "o", "1"],
    );
    assert_eq!(write.unwrap_err().code(), Some("NOSYNC"));
}

fn macquire(keys: &[&str], rest: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.MACQUIRE");
    cmd.arg(keys.len()).arg(keys).arg(rest);
    cmd
}

#[test]
fn a_synced_multi_key_grant_is_on_the_replica_on_every_key_when_answered() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let keys = ["a", "b", "c"];
    let (token, fence) = macquire(&keys, &["60000", "SYNC", "1", synced()])
        .query::<Option<(String, u64)>>(&mut m)
        .unwrap()
        .expect("granted");
    for key in keys {
        let held = lock_info(&mut r, key).expect("on the replica");
        assert_eq!(held["fence"], Value::Int(fence as i64), "{key}");
    }
    // Renewed by its holder with SYNC: an extension, answered the same.
    let renewed = macquire(&keys, &["90000", "TOKEN", &token, "SYNC", "1", synced()])
        .query::<Option<(String, u64)>>(&mut m)
        .unwrap();
    assert_eq!(renewed, Some((token.clone(), fence)));
    // From the WAIT queue: answered once its replica holds every key.
    acquire(&mut m, "e", 60_000, Some("holder")).unwrap();
    let mut waiting = master.conn();
    let waiter = thread::spawn(move || {
        macquire(
            &["d", "e"],
            &[
                "60000",
                "TOKEN",
                "w",
                "WAIT",
                "20000",
                "SYNC",
                "1",
                synced(),
            ],
        )
        .query::<Option<(String, u64)>>(&mut waiting)
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut m, "e").is_some_and(|i| i["waiters"] == 1)
    });
    assert_eq!(release(&mut m, "e", "holder"), 1);
    let (token, fence) = waiter.join().unwrap().unwrap().expect("granted");
    assert_eq!(token, "w");
    for key in ["d", "e"] {
        let held = lock_info(&mut r, key).expect("on the replica");
        assert_eq!(held["fence"], Value::Int(fence as i64), "{key}");
    }
    assert_eq!(counter(&mut m, "syncs"), 3);
    assert_eq!(counter(&mut m, "sync_timeouts"), 0);
    sync_replica(&master, &replica);
    assert_eq!(digest(&mut r), digest(&mut m));
}

#[test]
fn without_its_replicas_a_multi_key_grant_is_undone_on_every_key() {
    let server = Server::start();
    let mut con = server.conn();
    let keys = ["a", "b", "c"];
    let error = answer_of(&mut con, &macquire(&keys, &["60000", "SYNC", "1", "100"]));
    assert_eq!(
        error,
        "NOSYNC 0 of 1 replicas acknowledged; the grant was undone"
    );
    assert_eq!(dbsize(&mut con), 0, "undone: every key is free");
    let high_water: u64 = info_field(&mut con, "lock", "lock_fence_high_water")
        .parse()
        .unwrap();
    // A client waits for one key of a grant that will be undone: it is
    // served when the grant goes back.
    let mut granting = server.conn();
    let granted = thread::spawn(move || {
        answer_of(
            &mut granting,
            &macquire(
                &["a", "b", "c"],
                &["60000", "TOKEN", "g", "SYNC", "1", "3000"],
            ),
        )
    });
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "sync_waiting") == 1
    });
    let mut waiting = server.conn();
    let waiter = thread::spawn(move || {
        acquire_wait("b", 60_000, "next", 20_000).query::<Option<(String, u64)>>(&mut waiting)
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut con, "b").is_some_and(|i| i["waiters"] == 1)
            || counter(&mut con, "sync_timeouts") == 2
    });
    assert!(granted.join().unwrap().starts_with("NOSYNC 0 of 1"));
    let (token, fence) = waiter.join().unwrap().unwrap().expect("served");
    assert_eq!(token, "next");
    assert!(fence > high_water, "the undone fences are not used again");
    assert!(!exists(&mut con, "a") && !exists(&mut con, "c"));
    assert_eq!(counter(&mut con, "syncs_undone"), 2);

    // From the WAIT queue: the same, and the next waiter is served.
    acquire(&mut con, "y", 60_000, Some("holder")).unwrap();
    let mut first = server.conn();
    let first = thread::spawn(move || {
        answer_of(
            &mut first,
            &macquire(
                &["x", "y"],
                &["60000", "TOKEN", "f", "WAIT", "20000", "SYNC", "1", "100"],
            ),
        )
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut con, "y").is_some_and(|i| i["waiters"] == 1)
    });
    let mut second = server.conn();
    let second = thread::spawn(move || {
        acquire_wait("x", 60_000, "second", 20_000).query::<Option<(String, u64)>>(&mut second)
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut con, "x").is_none() && counter(&mut con, "waiters") == 2
    });
    assert_eq!(release(&mut con, "y", "holder"), 1);
    assert!(first.join().unwrap().starts_with("NOSYNC 0 of 1"));
    assert_eq!(second.join().unwrap().unwrap().expect("served").0, "second");
    assert!(!exists(&mut con, "y"));
    assert_eq!(counter(&mut con, "syncs_undone"), 3);
}

#[test]
fn a_client_that_leaves_while_its_multi_key_grant_syncs_gives_every_key_back() {
    use std::io::Write;
    let server = Server::start();
    let mut con = server.conn();
    let mut leaving = std::net::TcpStream::connect(server.addr()).unwrap();
    let args = [
        "LOCK.MACQUIRE",
        "2",
        "k1",
        "k2",
        "60000",
        "SYNC",
        "1",
        "20000",
    ];
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    leaving.write_all(request.as_bytes()).unwrap();
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "sync_waiting") == 1
    });
    assert_eq!(dbsize(&mut con), 2, "granted, not yet answered");
    drop(leaving);
    wait_until(Duration::from_secs(10), || dbsize(&mut con) == 0);
    assert_eq!(counter(&mut con, "syncs_undone"), 1);
}

/// `LOCK.GUARD k t SYNC 1 600000 INCR ctr` sent on a socket of its own, on
/// a server without replicas: the write is done and its reply waits.
fn guarded_write_waiting(server: &Server, con: &mut Connection) -> RawClient {
    acquire(con, "k", 600_000, Some("t")).unwrap();
    let mut waiting = RawClient::connect(server);
    waiting.send(&[
        b"LOCK.GUARD",
        b"k",
        b"t",
        b"SYNC",
        b"1",
        b"600000",
        b"INCR",
        b"ctr",
    ]);
    wait_until(Duration::from_secs(10), || {
        counter(con, "sync_waiting") == 1
    });
    waiting
}

/// Once the waiting client is gone: the server still serves (it crashed
/// here on Redis 7.0 when it freed the guarded command's reply, kept past
/// its command), nothing waits, the write stands and the lock is still
/// its holder's.
fn the_guarded_write_stands(server: &Server) {
    let mut con = server.conn();
    let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
    assert_eq!(pong, "PONG");
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "sync_waiting") == 0
    });
    let ctr: i64 = redis::cmd("GET").arg("ctr").query(&mut con).unwrap();
    assert_eq!(ctr, 1, "the guarded write stands");
    assert!(holds(&mut con, "k", "t"), "the lock is still its holder's");
    assert_eq!(counter(&mut con, "syncs_undone"), 0);
}

/// Whether `token` holds `key`: a guarded `PING` runs.
fn holds(con: &mut Connection, key: &str, token: &str) -> bool {
    redis::cmd("LOCK.GUARD")
        .arg(&[key, token, "PING"])
        .query::<String>(con)
        .is_ok_and(|pong| pong == "PONG")
}

#[test]
fn a_client_that_closes_while_its_guarded_write_syncs_leaves_the_write_and_the_server() {
    let server = Server::start();
    let mut con = server.conn();
    let waiting = guarded_write_waiting(&server, &mut con);
    drop(waiting);
    the_guarded_write_stands(&server);
}

#[test]
fn client_kill_while_a_guarded_write_syncs_leaves_the_write_and_the_server() {
    let server = Server::start();
    let mut con = server.conn();
    let waiting = guarded_write_waiting(&server, &mut con);
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut con)
        .unwrap();
    assert_eq!(killed, 1, "the waiting client");
    drop(waiting);
    the_guarded_write_stands(&server);
}

#[test]
fn becoming_a_replica_while_a_guarded_write_syncs_leaves_the_write_and_the_server() {
    let server = Server::start();
    let mut con = server.conn();
    let _waiting = guarded_write_waiting(&server, &mut con);
    // A master that is not there: the link never comes up, and the data
    // stays as it is.
    let nowhere = redis_lock_testsupport::free_port().unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(nowhere)
        .query(&mut con)
        .unwrap();
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "sync_waiting") == 0
    });
    promote(&mut con);
    the_guarded_write_stands(&server);
}
