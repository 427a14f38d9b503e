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
            "ERR wrong number",
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
