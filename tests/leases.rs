//! Lease groups (`LOCK.LEASE`) and revocation (`LOCK.REVOKE`), against a
//! real server: one keepalive keeps every attached hold alive, of every
//! kind and on every grant path; the lease's end ends them all at once, as
//! an expiry (events, hand-off) or as a release (revoked); a revoked token
//! is told so; garbage changes nothing; replicas, the AOF and the RDB end
//! with the master's leases. No test asserts a duration.

mod common;
use common::*;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

fn run(con: &mut Connection, parts: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(parts[0]);
    cmd.arg(&parts[1..]);
    cmd.query(con)
}

fn cmd(parts: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd(std::str::from_utf8(parts[0]).unwrap());
    for part in &parts[1..] {
        cmd.arg(*part);
    }
    cmd
}

fn grant_lease(con: &mut Connection, ttl: i64, owner: Option<&str>) -> String {
    let mut cmd = redis::cmd("LOCK.LEASE");
    cmd.arg("GRANT").arg(ttl);
    if let Some(owner) = owner {
        cmd.arg("OWNER").arg(owner);
    }
    cmd.query(con).expect("LOCK.LEASE GRANT")
}

fn lease_cmd(con: &mut Connection, sub: &str, id: &str) -> Value {
    redis::cmd("LOCK.LEASE")
        .arg(sub)
        .arg(id)
        .query(con)
        .expect("LOCK.LEASE")
}

fn lease_info(con: &mut Connection, id: &str) -> Option<HashMap<String, Value>> {
    redis::cmd("LOCK.LEASE")
        .arg("INFO")
        .arg(id)
        .query(con)
        .expect("LOCK.LEASE INFO")
}

fn lock_info(con: &mut Connection, key: &str) -> Option<HashMap<String, Value>> {
    redis::cmd("LOCK.INFO").arg(key).query(con).unwrap()
}

/// `LOCK.LEASE INFO` without `ttl`, which moves with the clock.
fn lease_state(con: &mut Connection, id: &str) -> Option<HashMap<String, Value>> {
    lease_info(con, id).map(|mut shown| {
        shown.remove("ttl");
        shown
    })
}

fn int(value: &Value) -> i64 {
    redis::from_redis_value(value).expect("an integer")
}

fn counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap()
}

fn leased(con: &mut Connection, parts: &[&str], id: &str) -> Option<(String, u64)> {
    let mut cmd = redis::cmd(parts[0]);
    cmd.arg(&parts[1..]).arg("LEASE").arg(id);
    cmd.query(con).expect("a grant or null")
}

#[test]
fn one_keepalive_keeps_every_kind_of_hold_alive_past_its_own_ttl() {
    let server = Server::start();
    let mut con = server.conn();
    // Kept alive every 100 ms below, with room for a slow server.
    let id = grant_lease(&mut con, scaled_ms(1000), Some("pod-7"));
    assert_eq!(id.len(), 32);
    assert!(id
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_ne!(grant_lease(&mut con, 400, None), id, "a fresh id each time");
    // A lock, a reader, permits: each with a ttl far shorter than the lease.
    let (_, lock_fence) =
        leased(&mut con, &["LOCK.ACQUIRE", "lock", "20", "TOKEN", "a"], &id).unwrap();
    leased(
        &mut con,
        &["LOCK.ACQUIRE", "rw", "20", "SHARED", "TOKEN", "r"],
        &id,
    )
    .unwrap();
    leased(
        &mut con,
        &["SEM.ACQUIRE", "sem", "3", "20", "COUNT", "2", "TOKEN", "s"],
        &id,
    )
    .unwrap();
    let shown = lease_info(&mut con, &id).expect("live");
    assert_eq!(int(&shown["holds"]), 3);
    assert_eq!(shown["owner"], Value::BulkString(b"pod-7".to_vec()));
    let keys: Vec<String> = redis::from_redis_value(&shown["keys"]).unwrap();
    assert_eq!(keys.len(), 3);
    let number = int(&shown["lease"]);
    // LOCK.INFO shows the lease's public number and its deadline, never its id.
    let held = lock_info(&mut con, "lock").expect("held");
    assert_eq!(int(&held["lease"]), number);
    assert_eq!(int(&held["fence"]), lock_fence as i64);
    assert_eq!(held["deadline"], shown["deadline"]);
    // Kept alive for several lease ttls: every hold stays, its key's TTL
    // always ahead of the lease.
    for _ in 0..12 {
        thread::sleep(Duration::from_millis(100));
        assert_eq!(lease_cmd(&mut con, "KEEPALIVE", &id), Value::Int(1));
        for key in ["lock", "rw", "sem"] {
            assert!(exists(&mut con, key), "{key} lives with its lease");
            let ttl = int(&lease_info(&mut con, &id).unwrap()["ttl"]);
            assert!(
                pttl(&mut con, key) >= ttl,
                "{key}'s TTL runs ahead of the lease"
            );
        }
    }
    // Its holder's EXTEND moves nothing and says 1; RELEASE ends only its
    // own hold, which leaves the lease.
    assert_eq!(extend(&mut con, "lock", "a", 5), 1);
    assert_eq!(release(&mut con, "rw", "r"), 1);
    assert_eq!(int(&lease_info(&mut con, &id).unwrap()["holds"]), 2);
    assert!(counter(&mut con, "keepalives") >= 12);
    // The second lease, never kept alive, runs out.
    wait_until(Duration::from_secs(10), || counter(&mut con, "leases") == 1);
    // Never the id: not in INFO, LOCK.INFO, SEM.INFO.
    let text: String = redis::cmd("INFO").arg("lock").query(&mut con).unwrap();
    assert!(!text.contains(&id));
    for (command, key) in [("LOCK.INFO", "lock"), ("SEM.INFO", "sem")] {
        let reply: Value = redis::cmd(command)
            .arg(key)
            .arg("HOLDS")
            .arg(10)
            .query(&mut con)
            .unwrap();
        assert!(!format!("{reply:?}").contains(&id), "{command}");
    }
}

#[test]
fn a_key_attached_for_many_horizons_never_outlives_its_ttl_nor_loses_it() {
    // A lease of 50 ms: its keys run 64 ttls (3.2 s) ahead, and keepalives
    // for longer than that must move them, a few at a time. A stall of the
    // test longer than the lease (a loaded machine) ends the lease, as it
    // must: then the attempt starts again with a new one.
    if skip_under_memcheck("a 50 ms lease kept alive by the test for 4 s: each attempt ends early")
    {
        return;
    }
    let server = Server::start();
    let mut con = server.conn();
    let mut kept_alive = false;
    for attempt in 0..5 {
        let id = grant_lease(&mut con, 50, None);
        let keys: Vec<String> = (0..20).map(|i| format!("k{attempt}-{i}")).collect();
        // A stall while the keys are attached ends the lease too: NOLEASE,
        // and the next attempt.
        let attached = keys.iter().all(|key| {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(key).arg(10).arg("LEASE").arg(&id);
            match cmd.query::<Option<(String, u64)>>(&mut con) {
                Ok(granted) => granted.is_some() || panic!("{key} is new, yet refused"),
                Err(e) if e.code() == Some("NOLEASE") => false,
                Err(e) => panic!("{key}: {e}"),
            }
        });
        if !attached {
            continue;
        }
        let start = std::time::Instant::now();
        let mut checked = 0usize;
        kept_alive = loop {
            if start.elapsed() > Duration::from_millis(4_000) {
                break true;
            }
            if lease_cmd(&mut con, "KEEPALIVE", &id) != Value::Int(1) {
                break false;
            }
            // A stall right here may end the lease too.
            let Some(shown) = lease_info(&mut con, &id) else {
                break false;
            };
            let deadline = int(&shown["deadline"]);
            let key = &keys[checked % keys.len()];
            checked += 1;
            let expire_at: i64 = redis::cmd("PEXPIRETIME").arg(key).query(&mut con).unwrap();
            if expire_at == -2 {
                // Gone: only because its lease ended meanwhile.
                assert!(
                    lease_info(&mut con, &id).is_none(),
                    "{key} gone, its lease alive"
                );
                break false;
            }
            assert!(
                expire_at >= deadline,
                "{key}: TTL {expire_at} behind its lease {deadline}"
            );
        };
        if kept_alive {
            if lease_cmd(&mut con, "KEEPALIVE", &id) == Value::Int(1) {
                assert_eq!(int(&lease_info(&mut con, &id).unwrap()["holds"]), 20);
                assert!(keys.iter().all(|key| exists(&mut con, key)));
                break;
            }
            kept_alive = false;
        }
    }
    assert!(kept_alive, "no attempt kept its lease alive for 4 s");
}

#[test]
fn a_lease_that_runs_out_ends_every_hold_at_once_as_an_expiry_and_hands_them_on() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kd")
        .query(&mut con)
        .unwrap();
    let events = keyspace_events(&server, "g*", scaled(Duration::from_secs(10)));
    // Long enough to attach four holds and queue two waiters.
    let id = grant_lease(&mut con, scaled_ms(300), None);
    for key in ["g1", "g2", "g3"] {
        leased(
            &mut con,
            &["LOCK.ACQUIRE", key, "60000", "TOKEN", "old"],
            &id,
        )
        .unwrap();
    }
    leased(
        &mut con,
        &["LOCK.ACQUIRE", "gs", "60000", "SHARED", "TOKEN", "old"],
        &id,
    )
    .unwrap();
    // Clients wait for two of them.
    let waiters: Vec<_> = ["g1", "gs"]
        .into_iter()
        .map(|key| {
            let mut c = server.conn();
            let key = key.to_string();
            thread::spawn(move || {
                acquire_wait(&key, 60000, "next", 20000)
                    .query::<Option<(String, u64)>>(&mut c)
                    .unwrap()
            })
        })
        .collect();
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "waiters") == 2
    });
    // No keepalive: the lease runs out, and its holds with it.
    for waiter in waiters {
        assert_eq!(waiter.join().unwrap().expect("handed on").0, "next");
    }
    wait_until(Duration::from_secs(10), || {
        !exists(&mut con, "g2") && !exists(&mut con, "g3")
    });
    assert_eq!(lease_cmd(&mut con, "KEEPALIVE", &id), Value::Int(0));
    assert_eq!(lease_info(&mut con, &id), None);
    assert_eq!(counter(&mut con, "leases_expired"), 1);
    assert_eq!(counter(&mut con, "expiries"), 4);
    assert_eq!(counter(&mut con, "leases"), 0);
    // The old token holds nothing, and is told nothing else.
    assert_eq!(extend(&mut con, "g2", "old", 1000), 0);
    let mut seen = HashMap::new();
    while let Ok((key, event)) = events.recv_timeout(Duration::from_millis(500)) {
        seen.entry(key).or_insert_with(Vec::new).push(event);
    }
    for key in ["g1", "g2", "g3"] {
        assert!(
            seen[key].contains(&"lock.expired".to_string()),
            "{key}: {:?}",
            seen[key]
        );
    }
    assert!(seen["g1"].contains(&"lock.handoff".to_string()));
}

#[test]
fn a_lease_that_runs_out_while_its_holder_waits_grants_it_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "busy", 60000, Some("holder")).unwrap();
    // Long enough to queue the waiter.
    let id = grant_lease(&mut con, scaled_ms(200), None);
    let mut waiting = server.conn();
    let id2 = id.clone();
    let waiter = thread::spawn(move || {
        let mut cmd = acquire_wait("busy", 60000, "w", 20000);
        cmd.arg("LEASE").arg(&id2);
        error_of(&mut waiting, &cmd)
    });
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "waiters") == 1
    });
    wait_until(Duration::from_secs(10), || {
        lease_info(&mut con, &id).is_none()
    });
    assert_eq!(release(&mut con, "busy", "holder"), 1);
    assert!(waiter.join().unwrap().starts_with("NOLEASE"));
    assert!(!exists(&mut con, "busy"), "granted to nobody");
}

#[test]
fn revoking_a_lease_releases_its_holds_serves_waiters_and_tells_the_old_tokens() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60000, Some("stuck-pod"));
    leased(
        &mut con,
        &["LOCK.ACQUIRE", "r1", "60000", "TOKEN", "t1"],
        &id,
    )
    .unwrap();
    leased(
        &mut con,
        &["SEM.ACQUIRE", "r2", "2", "60000", "TOKEN", "t2"],
        &id,
    )
    .unwrap();
    let mut waiting = server.conn();
    let waiter = thread::spawn(move || {
        acquire_wait("r1", 60000, "next", 20000)
            .query::<Option<(String, u64)>>(&mut waiting)
            .unwrap()
    });
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "waiters") == 1
    });
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), Value::Int(2));
    assert_eq!(waiter.join().unwrap().unwrap().0, "next");
    assert!(!exists(&mut con, "r2"));
    // The old tokens: REVOKED on EXTEND and GUARD (nothing written), 0 on
    // RELEASE; the lease is gone.
    assert_eq!(
        error_of(
            &mut con,
            redis::cmd("LOCK.EXTEND").arg("r1").arg("t1").arg(100)
        ),
        "REVOKED lease revoked"
    );
    assert_eq!(
        error_of(
            &mut con,
            redis::cmd("LOCK.GUARD")
                .arg("r1")
                .arg("t1")
                .arg("SET")
                .arg("resource")
                .arg("x")
        ),
        "REVOKED lease revoked"
    );
    assert!(
        !exists(&mut con, "resource"),
        "the revoked holder wrote nothing"
    );
    assert_eq!(
        error_of(
            &mut con,
            redis::cmd("SEM.EXTEND").arg("r2").arg("t2").arg(100)
        ),
        "REVOKED lease revoked"
    );
    assert_eq!(release(&mut con, "r1", "t1"), 0);
    assert_eq!(lease_cmd(&mut con, "KEEPALIVE", &id), Value::Int(0));
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), Value::Int(0));
    assert_eq!(counter(&mut con, "leases_revoked"), 1);
    assert_eq!(counter(&mut con, "revocations"), 2);
}

#[test]
fn lock_revoke_takes_a_key_back_with_a_reason_the_holder_and_observers_hear() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kd")
        .query(&mut con)
        .unwrap();
    let events = keyspace_events(&server, "job", Duration::from_secs(10));
    assert_eq!(
        run(&mut con, &["LOCK.REVOKE", "job"]).unwrap(),
        Value::Int(0)
    );
    let (_, fence) = acquire(&mut con, "job", 60000, Some("worker")).unwrap();
    let mut waiting = server.conn();
    let waiter = thread::spawn(move || {
        acquire_wait("job", 60000, "next", 20000)
            .query::<Option<(String, u64)>>(&mut waiting)
            .unwrap()
    });
    let mut observing = server.conn();
    let observer = thread::spawn(move || {
        redis::cmd("LOCK.OBSERVE")
            .arg("job")
            .arg(fence)
            .arg(20000)
            .query::<HashMap<String, Value>>(&mut observing)
            .unwrap()
    });
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "waiters") == 1 && counter(&mut con, "observers") == 1
    });
    // A reason with CR, LF, NUL and a high byte: one line in the reply.
    let reason: &[u8] = b"stuck\r\n\x00\xff job";
    let n: i64 = cmd(&[b"LOCK.REVOKE", b"job", b"REASON", reason])
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(waiter.join().unwrap().unwrap().0, "next");
    let seen = observer.join().unwrap();
    assert_eq!(seen["revoked"], Value::BulkString(reason.to_vec()));
    assert_ne!(int(&seen["fence"]), fence as i64);
    let escaped = "REVOKED stuck\\x0d\\x0a\\x00\\xff job";
    assert_eq!(
        error_of(
            &mut con,
            redis::cmd("LOCK.EXTEND").arg("job").arg("worker").arg(100)
        ),
        escaped
    );
    assert_eq!(
        error_of(
            &mut con,
            redis::cmd("LOCK.GUARD")
                .arg("job")
                .arg("worker")
                .arg("SET")
                .arg("out")
                .arg("x")
        ),
        escaped
    );
    assert!(!exists(&mut con, "out"));
    assert_eq!(release(&mut con, "job", "worker"), 0);
    // Another token that never held it is only LOST/0, as before.
    assert_eq!(extend(&mut con, "job", "stranger", 100), 0);
    let mut saw = Vec::new();
    while let Ok((_, event)) = events.recv_timeout(Duration::from_millis(500)) {
        saw.push(event);
    }
    assert!(saw.contains(&"lock.revoked".to_string()), "{saw:?}");
    // Without a reason: the default one; a shared lock: every reader.
    acquire(&mut con, "plain", 60000, Some("p")).unwrap();
    run(&mut con, &["LOCK.REVOKE", "plain"]).unwrap();
    assert_eq!(
        error_of(
            &mut con,
            redis::cmd("LOCK.EXTEND").arg("plain").arg("p").arg(100)
        ),
        "REVOKED revoked by an operator"
    );
    for reader in ["r1", "r2", "r3"] {
        run(
            &mut con,
            &[
                "LOCK.ACQUIRE",
                "readers",
                "60000",
                "SHARED",
                "TOKEN",
                reader,
            ],
        )
        .unwrap();
    }
    assert_eq!(
        run(&mut con, &["LOCK.REVOKE", "readers"]).unwrap(),
        Value::Int(3)
    );
    assert!(!exists(&mut con, "readers"));
}

#[test]
fn garbage_and_unknown_leases_change_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60000, None);
    acquire(&mut con, "held", 60000, Some("h")).unwrap();
    let before = digest(&mut con);
    let gone = "0123456789abcdef0123456789abcdef";
    let long_reason = "x".repeat(129);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["LOCK.LEASE", "GRANT"], "ERR wrong number"),
        (vec!["LOCK.LEASE", "GRANT", "0"], "ERR"),
        (vec!["LOCK.LEASE", "GRANT", "-5"], "ERR"),
        (vec!["LOCK.LEASE", "GRANT", "abc"], "ERR"),
        (vec!["LOCK.LEASE", "GRANT", "100", "OWNER"], "ERR"),
        (vec!["LOCK.LEASE", "GRANT", "100", "WHO", "x"], "ERR syntax"),
        (vec!["LOCK.LEASE", "GRANT", "99999999999999"], "ERR"),
        (vec!["LOCK.LEASE", "KEEPALIVE"], "ERR wrong number"),
        (vec!["LOCK.LEASE", "KEEPALIVE", "nothex"], "ERR lease id"),
        (
            vec!["LOCK.LEASE", "KEEPALIVE", &id, "x"],
            "ERR wrong number",
        ),
        (
            vec!["LOCK.LEASE", "REVOKE", "0123456789ABCDEF0123456789ABCDEF"],
            "ERR lease id",
        ),
        (vec!["LOCK.LEASE", "INFO"], "ERR wrong number"),
        (vec!["LOCK.LEASE", "NOPE", &id], "ERR"),
        (vec!["LOCK.ACQUIRE", "new", "1000", "LEASE"], "ERR syntax"),
        (
            vec!["LOCK.ACQUIRE", "new", "1000", "LEASE", "x"],
            "ERR lease id",
        ),
        (
            vec!["LOCK.ACQUIRE", "new", "1000", "LEASE", gone],
            "NOLEASE",
        ),
        (
            vec!["LOCK.ACQUIRE", "new", "1000", "LEASE", &id, "LEASE", &id],
            "ERR syntax",
        ),
        (vec!["LOCK.ACQUIRE", "new", "0", "LEASE", &id], "ERR"),
        (
            vec!["SEM.ACQUIRE", "new", "2", "1000", "LEASE", gone],
            "NOLEASE",
        ),
        (
            vec!["LOCK.ACQUIRE", "held", "1000", "TOKEN", "h", "LEASE", &id],
            "ERR this token already holds",
        ),
        (vec!["LOCK.REVOKE"], "ERR wrong number"),
        (vec!["LOCK.REVOKE", "held", "REASON", ""], "ERR REASON"),
        (
            vec!["LOCK.REVOKE", "held", "REASON", &long_reason],
            "ERR REASON",
        ),
        (vec!["LOCK.REVOKE", "held", "WHY", "x"], "ERR syntax"),
        (
            vec!["LOCK.REVOKE", "held", "REASON", "a", "b"],
            "ERR syntax error: unknown option",
        ),
        (
            vec!["LOCK.LEASESET", &id, "1", "1000", "1"],
            "ERR LOCK.LEASESET",
        ),
        (vec!["LOCK.LEASEDEL", &id], "ERR LOCK.LEASESET"),
    ];
    for (parts, want) in cases {
        let err = error_of(&mut con, &{
            let mut c = redis::cmd(parts[0]);
            c.arg(&parts[1..]);
            c
        });
        assert!(err.starts_with(want), "{parts:?}: {err}");
    }
    assert_eq!(digest(&mut con), before, "nothing changed");
    assert_eq!(int(&lease_info(&mut con, &id).unwrap()["holds"]), 0);
    // A token already holding under the lease asks again: its grant.
    let (_, fence) = leased(
        &mut con,
        &["LOCK.ACQUIRE", "mine", "1000", "TOKEN", "m"],
        &id,
    )
    .unwrap();
    let again = leased(
        &mut con,
        &["LOCK.ACQUIRE", "mine", "1000", "TOKEN", "m"],
        &id,
    )
    .unwrap();
    assert_eq!(again.1, fence);
    // Binary label on the lease, shown as given.
    let label: &[u8] = b"pod\x00\r\n\xff";
    let binary: String = cmd(&[b"LOCK.LEASE", b"GRANT", b"1000", b"OWNER", label])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        lease_info(&mut con, &binary).unwrap()["owner"],
        Value::BulkString(label.to_vec())
    );
}

#[test]
fn leases_work_in_multi_and_scripts() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60000, None);
    let (granted, alive): (Vec<Value>, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("m1")
        .arg(1000)
        .arg("LEASE")
        .arg(&id)
        .cmd("LOCK.LEASE")
        .arg("KEEPALIVE")
        .arg(&id)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        (granted.len(), alive),
        (2, 1),
        "granted in MULTI: {granted:?}"
    );
    let script = "local id = redis.call('LOCK.LEASE', 'GRANT', 5000)
        local g = redis.call('LOCK.ACQUIRE', KEYS[1], 1000, 'LEASE', id)
        return {id, redis.call('LOCK.LEASE', 'KEEPALIVE', id), redis.call('LOCK.LEASE', 'REVOKE', id)}";
    let (script_id, alive, revoked): (String, i64, i64) = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("s1")
        .query(&mut con)
        .unwrap();
    assert_eq!((script_id.len(), alive, revoked), (32, 1, 1));
    assert!(!exists(&mut con, "s1"));
    assert_eq!(int(&lease_info(&mut con, &id).unwrap()["holds"]), 1);
}

#[test]
fn a_replica_the_aof_and_the_rdb_end_with_the_masters_leases() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut m)
        .unwrap();
    wait_for_aof_rewrite(&mut m);
    let id = grant_lease(&mut m, 60000, Some("o"));
    leased(
        &mut m,
        &["LOCK.ACQUIRE", "x", "100", "TOKEN", "tx", "OWNER", "ox"],
        &id,
    )
    .unwrap();
    leased(&mut m, &["LOCK.ACQUIRE", "y", "100", "SHARED"], &id).unwrap();
    leased(&mut m, &["SEM.ACQUIRE", "z", "4", "100", "COUNT", "3"], &id).unwrap();
    assert_eq!(lease_cmd(&mut m, "KEEPALIVE", &id), Value::Int(1));
    sync_replica(&master, &replica);
    let mut r = replica.conn();
    let want = digest(&mut m);
    assert_eq!(digest(&mut r), want);
    let on_master = lease_state(&mut m, &id).unwrap();
    assert_eq!(lease_state(&mut r, &id).unwrap(), on_master);
    // The AOF, replayed, in both forms of rewrite; the RDB, on restart.
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
        assert_eq!(
            lease_info(&mut m, &id).unwrap()["holds"],
            on_master["holds"]
        );
    }
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut m).unwrap();
    assert_eq!(digest(&mut m), want, "RDB");
    assert_eq!(lease_state(&mut m, &id).unwrap(), on_master);
    // Revoked on the master: gone on the replica, holds and lease.
    assert_eq!(lease_cmd(&mut m, "REVOKE", &id), Value::Int(3));
    sync_replica(&master, &replica);
    assert_eq!(lease_info(&mut r, &id), None);
    assert_eq!(dbsize(&mut r), 0);
}

#[test]
fn after_a_restart_or_a_promotion_a_lease_still_runs_out() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let id = grant_lease(&mut m, 1500, None);
    leased(&mut m, &["LOCK.ACQUIRE", "p", "60000"], &id).unwrap();
    sync_replica(&master, &replica);
    let mut r = replica.conn();
    promote(&mut r);
    // The promoted replica ends it by itself, its keys too.
    wait_until(Duration::from_secs(20), || {
        lease_info(&mut r, &id).is_none()
    });
    wait_until(Duration::from_secs(20), || !exists(&mut r, "p"));
    assert_eq!(counter(&mut r, "leases_expired"), 1);

    let mut server = Server::start_with(&["--save", "1 1", "--appendonly", "no"]);
    let mut con = server.conn();
    let id = grant_lease(&mut con, 5000, None);
    leased(&mut con, &["LOCK.ACQUIRE", "q", "60000"], &id).unwrap();
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    server.kill();
    server.restart();
    let mut con = server.conn();
    assert!(lease_info(&mut con, &id).is_some(), "loaded from the RDB");
    assert_eq!(lease_cmd(&mut con, "KEEPALIVE", &id), Value::Int(1));
    wait_until(Duration::from_secs(20), || !exists(&mut con, "q"));
    assert_eq!(lease_info(&mut con, &id), None);
}

#[test]
fn a_waiter_with_a_lease_is_attached_when_it_is_handed_the_key() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60000, Some("waiting-pod"));
    acquire(&mut con, "q", 60000, Some("first")).unwrap();
    run(
        &mut con,
        &["SEM.ACQUIRE", "permits", "1", "60000", "TOKEN", "p1"],
    )
    .unwrap();
    let waiters: Vec<_> = [
        vec![
            "LOCK.ACQUIRE",
            "q",
            "10",
            "TOKEN",
            "w",
            "WAIT",
            "20000",
            "LEASE",
        ],
        vec![
            "SEM.ACQUIRE",
            "permits",
            "1",
            "10",
            "TOKEN",
            "w",
            "WAIT",
            "20000",
            "LEASE",
        ],
    ]
    .into_iter()
    .map(|parts| {
        let mut c = server.conn();
        let mut parts: Vec<String> = parts.into_iter().map(String::from).collect();
        parts.push(id.clone());
        thread::spawn(move || {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            run(&mut c, &parts).unwrap()
        })
    })
    .collect();
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "waiters") == 2
    });
    assert_eq!(release(&mut con, "q", "first"), 1);
    let _: i64 = redis::cmd("SEM.RELEASE")
        .arg("permits")
        .arg("p1")
        .query(&mut con)
        .unwrap();
    for waiter in waiters {
        assert!(matches!(waiter.join().unwrap(), Value::Array(_)));
    }
    let shown = lease_info(&mut con, &id).unwrap();
    assert_eq!(int(&shown["holds"]), 2);
    assert_eq!(
        int(&lock_info(&mut con, "q").unwrap()["lease"]),
        int(&shown["lease"])
    );
    // Its 10 ms ttl does not end it: the lease does.
    thread::sleep(Duration::from_millis(200));
    assert!(exists(&mut con, "q") && exists(&mut con, "permits"));
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), Value::Int(2));
    assert!(!exists(&mut con, "q") && !exists(&mut con, "permits"));
}

#[test]
fn a_lease_that_runs_out_starts_the_lock_delay_a_revoked_one_does_not() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lock.expiry-delay-ms")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    let id = grant_lease(&mut con, scaled_ms(100), None);
    leased(&mut con, &["LOCK.ACQUIRE", "delayed", "60000"], &id).unwrap();
    wait_until(Duration::from_secs(10), || !exists(&mut con, "delayed"));
    // Expired: nobody gets it during the lock-delay.
    assert_eq!(acquire(&mut con, "delayed", 1000, None), None);
    // Revoked: released, so no delay.
    let id = grant_lease(&mut con, 60_000, None);
    leased(&mut con, &["LOCK.ACQUIRE", "released", "60000"], &id).unwrap();
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), Value::Int(1));
    assert!(acquire(&mut con, "released", 1000, None).is_some());
}

/// `LOCK.LEASE INFO id`'s `holds`, and its `keys` sorted (none: gone).
fn lease_holds(con: &mut Connection, id: &str) -> Option<(i64, Vec<String>)> {
    lease_info(con, id).map(|shown| {
        let mut keys: Vec<String> = redis::from_redis_value(&shown["keys"]).unwrap();
        keys.sort();
        (int(&shown["holds"]), keys)
    })
}

/// A connection to `server` with database `db` selected.
fn conn_in(server: &Server, db: i64) -> Connection {
    let mut con = server.conn();
    let _: () = redis::cmd("SELECT").arg(db).query(&mut con).unwrap();
    con
}

fn lease_of(con: &mut Connection, key: &str) -> Option<i64> {
    lock_info(con, key).and_then(|shown| shown.get("lease").map(int))
}

/// Whether the server mishandles `MOVE` while a module listens to keyspace
/// events: Valkey 8.1 (seen on 8.1.8, with this module, even when its
/// handler returns at once) leaves the client that sent it in the target
/// database, and its replicas miss the `MOVE`. Redis 7.0 to 8.2 and Valkey
/// 9.1 do not. A server defect; the module cannot work around it.
fn move_strays(con: &mut Connection) -> bool {
    server_version(con) == ("valkey".to_string(), (8, 1))
}

/// `MOVE key db` from `con` (in db 0), which is in db 0 again after it
/// (see [`move_strays`]).
fn move_key(con: &mut Connection, key: &str, db: i64) -> i64 {
    let moved: i64 = redis::cmd("MOVE").arg(key).arg(db).query(con).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(con).unwrap();
    moved
}

/// Issue 33: a hold renamed (`RENAME`, `RENAMENX`, `RENAME` onto a held
/// key) stays attached to its lease under its new name: the lease shows it
/// there, and its end (here a revocation) releases it, serving its waiters;
/// the old name is free. Before the fix it was detached, held by nobody
/// until its key's horizon.
#[test]
fn a_renamed_hold_stays_attached_to_its_lease_and_ends_with_it() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60000, Some("pod"));
    let other = grant_lease(&mut con, 60000, None);
    leased(&mut con, &["LOCK.ACQUIRE", "a", "1000", "TOKEN", "t"], &id).unwrap();
    leased(
        &mut con,
        &["LOCK.ACQUIRE", "r", "1000", "SHARED", "TOKEN", "t"],
        &id,
    )
    .unwrap();
    leased(
        &mut con,
        &["SEM.ACQUIRE", "s", "2", "1000", "TOKEN", "t"],
        &id,
    )
    .unwrap();
    leased(
        &mut con,
        &["LOCK.ACQUIRE", "y", "1000", "TOKEN", "u"],
        &other,
    )
    .unwrap();
    let number = int(&lease_info(&mut con, &id).unwrap()["lease"]);
    let _: () = redis::cmd("RENAME")
        .arg("a")
        .arg("b")
        .query(&mut con)
        .unwrap();
    let renamed: i64 = redis::cmd("RENAMENX")
        .arg("s")
        .arg("s2")
        .query(&mut con)
        .unwrap();
    assert_eq!(renamed, 1);
    // Onto a key held under another lease: that hold is gone with it.
    let _: () = redis::cmd("RENAME")
        .arg("r")
        .arg("y")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        lease_holds(&mut con, &id),
        Some((3, vec!["b".into(), "s2".into(), "y".into()]))
    );
    assert_eq!(lease_holds(&mut con, &other), Some((0, vec![])));
    assert_eq!(lease_of(&mut con, "b"), Some(number));
    assert_eq!(lease_of(&mut con, "y"), Some(number));
    // The old names are free.
    assert!(acquire(&mut con, "a", 60000, Some("new-a")).is_some());
    assert!(acquire(&mut con, "r", 60000, Some("new-r")).is_some());
    // Its holder still holds it under the new name.
    assert_eq!(extend(&mut con, "b", "t", 1000), 1);
    let mut waiting = server.conn();
    let waiter = thread::spawn(move || {
        acquire_wait("b", 60000, "next", 20000)
            .query::<Option<(String, u64)>>(&mut waiting)
            .unwrap()
    });
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "waiters") == 1
    });
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), Value::Int(3));
    assert_eq!(waiter.join().unwrap().expect("handed on").0, "next");
    assert!(!exists(&mut con, "y") && !exists(&mut con, "s2"));
    assert_eq!(
        error_of(
            &mut con,
            redis::cmd("LOCK.EXTEND").arg("b").arg("t").arg(100)
        ),
        "REVOKED lease revoked"
    );
}

/// Issue 33: a hold moved to another database (`MOVE`) stays attached to
/// its lease there, and ends when its lease runs out, handing the key to
/// a client waiting for it in that database; the old name is free in the
/// old one.
#[test]
fn a_moved_hold_stays_attached_to_its_lease_and_ends_with_it() {
    let server = Server::start();
    let mut con = server.conn();
    let mut db1 = conn_in(&server, 1);
    // Long enough for the steps before it runs out, even on a slow machine.
    let id = grant_lease(&mut con, 5000, None);
    leased(&mut con, &["LOCK.ACQUIRE", "m", "1000", "TOKEN", "t"], &id).unwrap();
    let number = int(&lease_info(&mut con, &id).unwrap()["lease"]);
    assert_eq!(move_key(&mut con, "m", 1), 1);
    assert_eq!(lease_holds(&mut con, &id), Some((1, vec!["m".into()])));
    assert_eq!(lease_of(&mut db1, "m"), Some(number));
    assert!(acquire(&mut con, "m", 60000, Some("db0")).is_some());
    let mut waiting = conn_in(&server, 1);
    let waiter = thread::spawn(move || {
        acquire_wait("m", 60000, "next", 60000)
            .query::<Option<(String, u64)>>(&mut waiting)
            .unwrap()
    });
    // No keepalive: the lease runs out, and the moved hold with it.
    assert_eq!(waiter.join().unwrap().expect("handed on").0, "next");
    assert_eq!(lease_info(&mut con, &id), None);
    assert_eq!(counter(&mut con, "expiries"), 1);
    assert_eq!(release(&mut con, "m", "db0"), 1, "db 0's own lock");
}

/// Issue 33: keepalives keep a renamed and a moved hold alive past their
/// keys' horizon (their TTLs are moved under their new names), as any
/// attached hold's. A lease of 50 ms: its keys run 64 ttls (3.2 s) ahead.
/// A stall of the test longer than the lease ends it, as it must: then the
/// attempt starts again, with a longer lease (and a longer run past its
/// horizon), so that a busy machine cannot fail it.
#[test]
fn keepalives_keep_a_renamed_and_a_moved_hold_past_their_horizon() {
    let server = Server::start();
    let mut con = server.conn();
    let mut db1 = conn_in(&server, 1);
    let mut kept_alive = false;
    for (attempt, lease_ms) in [50, 50, 100, 200, 400, 800].into_iter().enumerate() {
        let id = grant_lease(&mut con, lease_ms, None);
        let (old, renamed, moved) = (
            format!("old{attempt}"),
            format!("renamed{attempt}"),
            format!("moved{attempt}"),
        );
        let granted = [&old, &moved].iter().all(|key| {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(key).arg(10).arg("LEASE").arg(&id);
            match cmd.query::<Option<(String, u64)>>(&mut con) {
                Ok(granted) => granted.is_some() || panic!("{key} is new, yet refused"),
                Err(e) if e.code() == Some("NOLEASE") => false,
                Err(e) => panic!("{key}: {e}"),
            }
        });
        if !granted {
            continue;
        }
        let _: () = redis::cmd("RENAME")
            .arg(&old)
            .arg(&renamed)
            .query(&mut con)
            .unwrap();
        assert_eq!(move_key(&mut con, &moved, 1), 1);
        let start = std::time::Instant::now();
        // Past the keys' horizon (64 lease ttls) and a little more.
        let run_for = Duration::from_millis(lease_ms as u64 * 80);
        kept_alive = loop {
            if start.elapsed() > run_for {
                break true;
            }
            if lease_cmd(&mut con, "KEEPALIVE", &id) != Value::Int(1) {
                break false;
            }
            let Some(shown) = lease_info(&mut con, &id) else {
                break false;
            };
            let deadline = int(&shown["deadline"]);
            let renamed_at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&renamed)
                .query(&mut con)
                .unwrap();
            let moved_at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&moved)
                .query(&mut db1)
                .unwrap();
            if renamed_at == -2 || moved_at == -2 {
                // Gone: only because its lease ended meanwhile.
                assert!(
                    lease_info(&mut con, &id).is_none(),
                    "{renamed}: {renamed_at}, {moved}: {moved_at}, their lease alive"
                );
                break false;
            }
            for (key, expire_at) in [(&renamed, renamed_at), (&moved, moved_at)] {
                assert!(
                    expire_at >= deadline,
                    "{key}: TTL {expire_at} behind its lease {deadline}"
                );
            }
        };
        if kept_alive {
            if lease_cmd(&mut con, "KEEPALIVE", &id) == Value::Int(1) {
                assert_eq!(
                    lease_holds(&mut con, &id),
                    Some((2, vec![moved.clone(), renamed.clone()]))
                );
                assert!(exists(&mut con, &renamed) && exists(&mut db1, &moved));
                assert!(!exists(&mut con, &old) && !exists(&mut con, &moved));
                break;
            }
            kept_alive = false;
        }
    }
    assert!(
        kept_alive,
        "no attempt kept its lease alive past its horizon"
    );
}

/// Issue 33: `RESTORE` of a leased key's `DUMP`. A copy under another name,
/// while the original lives, is loaded unattached (one hold of a grant per
/// key of the lease; `COPY` is refused for the same reason): the lease
/// neither counts nor ends it. The original restored under its own name
/// (`REPLACE`), or under a new name once the original is gone (a rename by
/// hand), is attached as before.
#[test]
fn a_restored_copy_of_a_leased_hold_is_not_attached_a_restored_original_is() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60000, None);
    leased(&mut con, &["LOCK.ACQUIRE", "a", "1000", "TOKEN", "t"], &id).unwrap();
    let number = int(&lease_info(&mut con, &id).unwrap()["lease"]);
    let payload: Vec<u8> = redis::cmd("DUMP").arg("a").query(&mut con).unwrap();
    let restore = |con: &mut Connection, key: &str, ttl: i64, replace: bool| {
        let mut cmd = redis::cmd("RESTORE");
        cmd.arg(key).arg(ttl).arg(&payload);
        if replace {
            cmd.arg("REPLACE");
        }
        let _: () = cmd.query(con).unwrap();
    };
    restore(&mut con, "copy", 600_000, false);
    assert_eq!(lease_holds(&mut con, &id), Some((1, vec!["a".into()])));
    assert_eq!(lease_of(&mut con, "copy"), None, "not the lease's");
    assert_eq!(lease_of(&mut con, "a"), Some(number));
    // The original, restored over itself: still the lease's.
    restore(&mut con, "a", 0, true);
    assert_eq!(lease_holds(&mut con, &id), Some((1, vec!["a".into()])));
    assert_eq!(lease_of(&mut con, "a"), Some(number));
    // A copy the server drops after loading it (its absolute TTL is past):
    // nothing of it stays, not even its verdict.
    let _: () = redis::cmd("RESTORE")
        .arg("moved")
        .arg(1)
        .arg(&payload)
        .arg("ABSTTL")
        .query(&mut con)
        .unwrap();
    assert!(!exists(&mut con, "moved"));
    assert_eq!(lease_holds(&mut con, &id), Some((1, vec!["a".into()])));
    // Moved by hand: DUMP, DEL, RESTORE under another name.
    let _: i64 = redis::cmd("DEL").arg("a").query(&mut con).unwrap();
    restore(&mut con, "moved", 0, false);
    assert_eq!(lease_holds(&mut con, &id), Some((1, vec!["moved".into()])));
    assert_eq!(lease_cmd(&mut con, "REVOKE", &id), Value::Int(1));
    assert!(!exists(&mut con, "moved"));
    // The copy ends at its own deadline (the TTL RESTORE gave it).
    assert!(exists(&mut con, "copy"));
    assert!(pttl(&mut con, "copy") > 0);
}

/// Issue 33: a replica applies the master's `RENAME` and `MOVE` as the
/// master does: the held keys stay attached to the lease under their new
/// names, and the lease's end removes them there too; so does the AOF,
/// replayed. (Not `MOVE` on a server whose replicas miss it:
/// [`move_strays`].)
#[test]
fn a_replica_and_the_aof_follow_a_renamed_and_a_moved_hold_to_its_lease() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut m)
        .unwrap();
    wait_for_aof_rewrite(&mut m);
    let id = grant_lease(&mut m, 60000, None);
    leased(&mut m, &["LOCK.ACQUIRE", "a", "1000", "TOKEN", "t"], &id).unwrap();
    leased(
        &mut m,
        &["SEM.ACQUIRE", "b", "3", "1000", "TOKEN", "t"],
        &id,
    )
    .unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("a")
        .arg("a2")
        .query(&mut m)
        .unwrap();
    let mut want = Some((2, vec!["a2".to_string(), "b".to_string()]));
    if move_strays(&mut m) {
        let _: () = redis::cmd("RENAME")
            .arg("b")
            .arg("b2")
            .query(&mut m)
            .unwrap();
        want = Some((2, vec!["a2".to_string(), "b2".to_string()]));
    } else {
        assert_eq!(move_key(&mut m, "b", 1), 1);
    }
    sync_replica(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(lease_holds(&mut m, &id), want);
    assert_eq!(lease_holds(&mut r, &id), want);
    let on_master = digest(&mut m);
    assert_eq!(digest(&mut r), on_master);
    // The AOF: the grants, then the RENAME and the MOVE, replayed.
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
    assert_eq!(digest(&mut m), on_master);
    assert_eq!(lease_holds(&mut m, &id), want);
    // Promoted, the replica ends them with the lease, where they are now.
    promote(&mut r);
    assert_eq!(lease_cmd(&mut r, "REVOKE", &id), Value::Int(2));
    assert_eq!(dbsize(&mut r), 0);
    assert_eq!(dbsize(&mut conn_in(&replica, 1)), 0);
}

/// Issue 33: `LOCK.LEASE END id`, the holder's own end of its lease: every
/// attached hold (a lock, a reader, permits, a multi-key grant's keys) is
/// given back as its `LOCK.RELEASE` would give it back: waiters served at
/// once, `released` events, no `REVOKED` mark (the old token gets `0`, as
/// after its own release); the lease is gone; replicated.
#[test]
fn ending_a_lease_releases_its_holds_as_releases_and_serves_waiters() {
    let (master, replica) = pair();
    let mut con = master.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kd")
        .query(&mut con)
        .unwrap();
    let events = keyspace_events(&master, "e*", Duration::from_secs(20));
    let id = grant_lease(&mut con, 60000, Some("worker"));
    leased(&mut con, &["LOCK.ACQUIRE", "e1", "1000", "TOKEN", "t"], &id).unwrap();
    leased(
        &mut con,
        &["LOCK.ACQUIRE", "e2", "1000", "SHARED", "TOKEN", "t"],
        &id,
    )
    .unwrap();
    leased(
        &mut con,
        &["SEM.ACQUIRE", "e3", "2", "1000", "COUNT", "2", "TOKEN", "t"],
        &id,
    )
    .unwrap();
    leased(
        &mut con,
        &["LOCK.MACQUIRE", "2", "e4", "e5", "1000", "TOKEN", "t"],
        &id,
    )
    .unwrap();
    let waiters: Vec<_> = [
        vec![
            "LOCK.ACQUIRE",
            "e1",
            "60000",
            "TOKEN",
            "next",
            "WAIT",
            "20000",
        ],
        vec![
            "SEM.ACQUIRE",
            "e3",
            "2",
            "60000",
            "TOKEN",
            "next",
            "WAIT",
            "20000",
        ],
    ]
    .into_iter()
    .map(|parts| {
        let mut c = master.conn();
        let parts: Vec<String> = parts.into_iter().map(String::from).collect();
        thread::spawn(move || {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            run(&mut c, &parts).unwrap()
        })
    })
    .collect();
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "waiters") == 2
    });
    let releases = counter(&mut con, "releases");
    assert_eq!(lease_cmd(&mut con, "END", &id), Value::Int(5));
    for waiter in waiters {
        let granted: (String, u64) = redis::from_redis_value(&waiter.join().unwrap()).unwrap();
        assert_eq!(granted.0, "next");
    }
    for key in ["e2", "e4", "e5"] {
        assert!(!exists(&mut con, key), "{key} released");
    }
    assert_eq!(lease_info(&mut con, &id), None);
    assert_eq!(lease_cmd(&mut con, "KEEPALIVE", &id), Value::Int(0));
    assert_eq!(lease_cmd(&mut con, "END", &id), Value::Int(0), "gone");
    // Released, not revoked: the old token is told what its own release
    // would have told it.
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg("e1")
        .arg("t")
        .arg(100)
        .query(&mut con)
        .expect("not REVOKED");
    assert_eq!(extended, 0);
    assert!(error_of(
        &mut con,
        redis::cmd("LOCK.GUARD")
            .arg("e1")
            .arg("t")
            .arg("GET")
            .arg("x")
    )
    .starts_with("LOST "));
    assert_eq!(counter(&mut con, "releases") - releases, 5);
    assert_eq!(counter(&mut con, "leases_ended"), 1);
    assert_eq!(counter(&mut con, "leases_revoked"), 0);
    assert_eq!(counter(&mut con, "revocations"), 0);
    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    while let Ok((key, event)) = events.recv_timeout(Duration::from_millis(500)) {
        seen.entry(key).or_default().push(event);
    }
    for (key, event) in [
        ("e1", "lock.released"),
        ("e2", "lock.released"),
        ("e3", "sem.released"),
        ("e4", "lock.released"),
        ("e5", "lock.released"),
    ] {
        assert!(
            seen[key].contains(&event.to_string()),
            "{key}: {:?}",
            seen[key]
        );
        assert!(
            !seen[key].iter().any(|e| e.ends_with(".revoked")),
            "{key}: {:?}",
            seen[key]
        );
    }
    // The replica: the same keys, the lease gone.
    sync_replica(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(lease_info(&mut r, &id), None);
    assert_eq!(digest(&mut r), digest(&mut con));
}

/// `LOCK.LEASE END`'s garbage, and the container's `HELP`: an error, and
/// nothing changes; `HELP` lists every subcommand.
#[test]
fn lease_end_garbage_changes_nothing_and_help_lists_the_subcommands() {
    let server = Server::start();
    let mut con = server.conn();
    let id = grant_lease(&mut con, 60000, None);
    leased(&mut con, &["LOCK.ACQUIRE", "kept", "1000"], &id).unwrap();
    let before = digest(&mut con);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["LOCK.LEASE", "END"],
            "ERR wrong number of arguments for 'lock.lease' command",
        ),
        (
            vec!["LOCK.LEASE", "END", &id, "x"],
            "ERR wrong number of arguments for 'lock.lease' command",
        ),
        (
            vec!["LOCK.LEASE", "END", "nothex"],
            "ERR lease id must be 32 lowercase hex digits (what LOCK.LEASE GRANT replied)",
        ),
        (
            vec!["LOCK.LEASE", "END", "0123456789ABCDEF0123456789ABCDEF"],
            "ERR lease id must be 32 lowercase hex digits (what LOCK.LEASE GRANT replied)",
        ),
        (
            vec!["LOCK.LEASE", "HELP", "x"],
            "ERR wrong number of arguments for 'lock.lease' command",
        ),
    ];
    for (parts, want) in cases {
        let err = error_of(&mut con, &{
            let mut c = redis::cmd(parts[0]);
            c.arg(&parts[1..]);
            c
        });
        assert_eq!(err, want, "{parts:?}");
    }
    assert_eq!(
        error_of(&mut con, &cmd(&[b"LOCK.LEASE", b"END", b"\x00\r\n\xff"])),
        "ERR lease id must be 32 lowercase hex digits (what LOCK.LEASE GRANT replied)"
    );
    // Unknown: nothing to end.
    assert_eq!(
        lease_cmd(&mut con, "END", "0123456789abcdef0123456789abcdef"),
        Value::Int(0)
    );
    assert_eq!(digest(&mut con), before, "nothing changed");
    assert_eq!(int(&lease_info(&mut con, &id).unwrap()["holds"]), 1);
    let help: Vec<String> = redis::cmd("LOCK.LEASE")
        .arg("HELP")
        .query(&mut con)
        .unwrap();
    for sub in ["GRANT", "KEEPALIVE", "END", "REVOKE", "INFO", "HELP"] {
        assert!(
            help.iter().any(|line| line.starts_with(sub)),
            "{sub}: {help:?}"
        );
    }
    let lower: Vec<String> = redis::cmd("LOCK.LEASE")
        .arg("help")
        .query(&mut con)
        .unwrap();
    assert_eq!(lower, help);
}

/// A leased hold whose lease ran out is nobody's, its own token's too:
/// on a replica that has not yet received its master's end of it (the
/// master is stopped), `LOCK.GUARD_RO` by that token says the lock is
/// free, not that another token holds it. A lease that ran out before the
/// replica was first asked (a busy machine) proves nothing: again, longer.
#[test]
fn guard_by_a_token_whose_lease_ran_out_is_told_the_lock_is_free() {
    for lease_ms in [300, 2_000, 10_000] {
        let (master, replica) = pair();
        let mut m = master.conn();
        let id = grant_lease(&mut m, lease_ms, None);
        leased(&mut m, &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t"], &id).expect("granted");
        let _: () = redis::cmd("SET")
            .arg("data")
            .arg("v")
            .query(&mut m)
            .unwrap();
        sync_replica(&master, &replica);
        let mut r = replica.conn();
        let guarded = run(&mut r, &["LOCK.GUARD_RO", "k", "t", "GET", "data"]);
        if guarded != Ok(Value::BulkString(b"v".to_vec())) {
            continue;
        }
        master.pause();
        // The replica's copy of the lease runs out by its own clock.
        wait_until(Duration::from_secs(60), || {
            run(&mut r, &["LOCK.GUARD_RO", "k", "t", "GET", "data"]).is_err()
        });
        let error = run(&mut r, &["LOCK.GUARD_RO", "k", "t", "GET", "data"]).unwrap_err();
        master.resume();
        assert_eq!(error.code(), Some("LOST"), "{error}");
        assert!(
            error.to_string().contains("it is free"),
            "its own expired hold is nobody's: {error}"
        );
        return;
    }
    panic!("no lease outlived the replica's first answer");
}
