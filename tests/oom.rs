//! Memory pressure (issue 5, scenario 10): under `maxmemory` with
//! `noeviction`, lock writes that allocate get `OOM` and change nothing while
//! a held lock can still be given back; with an eviction policy the module
//! warns, because Redis can then evict a live lock.

mod common;
use common::*;

use std::time::Duration;

/// What the module writes to the server log for an evicting policy.
fn eviction_warning(policy: &str) -> String {
    format!("maxmemory-policy is {policy}: under memory pressure Redis may evict lock keys")
}

fn config_set(con: &mut Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

fn used_memory(con: &mut Connection) -> u64 {
    info_field(con, "memory", "used_memory").parse().unwrap()
}

fn eviction_risk(con: &mut Connection) -> String {
    info_field(con, "lock", "lock_eviction_risk")
}

/// Put `used_memory` well above `maxmemory` under `noeviction`: an 8 MB
/// string (built by SETRANGE, so only a few bytes cross the socket), then
/// `maxmemory` 4 MB. Nothing can be evicted, so the server stays over the
/// limit for as long as the test runs.
fn over_maxmemory(con: &mut Connection) {
    let _: i64 = redis::cmd("SETRANGE")
        .arg("ballast")
        .arg(8 * 1024 * 1024 - 1)
        .arg("x")
        .query(con)
        .unwrap();
    config_set(con, "maxmemory", "4mb");
    let used = used_memory(con);
    assert!(used > 4 * 1024 * 1024, "used_memory {used}");
}

/// `LOCK.INFO` of a held lock without `ttl`, which counts down.
fn lasting_info(con: &mut Connection, key: &str) -> std::collections::HashMap<String, i64> {
    let mut seen = info(con, key).unwrap_or_else(|| panic!("{key} is not held"));
    seen.remove("ttl");
    seen
}

#[test]
fn over_maxmemory_acquire_and_extend_get_oom_and_change_nothing_but_release_works() {
    let server = Server::start_with(&["--maxmemory-policy", "noeviction"]);
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "lock:held", 60_000, Some("holder")).unwrap();
    over_maxmemory(&mut con);

    let digest_before = digest(&mut con);
    let held_before = lasting_info(&mut con, "lock:held");
    let counters = |con: &mut Connection| {
        ["grants", "refused", "renewals", "extends", "waits"]
            .map(|name| info_field(con, "lock", &format!("lock_{name}")))
    };
    let counters_before = counters(&mut con);
    let high_water_before = info_field(&mut con, "lock", "lock_fence_high_water");

    let refused: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", "lock:new", "10000"],
        vec!["LOCK.ACQUIRE", "lock:new", "10000", "TOKEN", "t", "SESSION"],
        // Busy key, renewal by the holder, and a WAIT that would block.
        vec!["LOCK.ACQUIRE", "lock:held", "10000"],
        vec!["LOCK.ACQUIRE", "lock:held", "10000", "TOKEN", "holder"],
        vec!["LOCK.ACQUIRE", "lock:held", "10000", "WAIT", "5000"],
        vec!["LOCK.EXTEND", "lock:held", "holder", "120000"],
        vec!["LOCK.EXTEND", "lock:held", "not-the-holder", "120000"],
    ];
    for args in &refused {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let err = error_of(&mut con, &cmd);
        assert!(err.starts_with("OOM"), "{args:?}: {err}");
    }
    assert_eq!(digest(&mut con), digest_before);
    assert_eq!(lasting_info(&mut con, "lock:held"), held_before);
    assert!(!exists(&mut con, "lock:new"));
    assert_eq!(counters(&mut con), counters_before);
    assert_eq!(
        info_field(&mut con, "lock", "lock_fence_high_water"),
        high_water_before
    );
    assert_eq!(info_field(&mut con, "lock", "lock_waiters"), "0");

    // Still over the limit: reading and giving back work.
    assert!(used_memory(&mut con) > 4 * 1024 * 1024);
    assert_eq!(info(&mut con, "lock:held").unwrap()["fence"], fence as i64);
    assert_eq!(release(&mut con, "lock:held", "not-the-holder"), 0);
    assert_eq!(release(&mut con, "lock:held", "holder"), 1);
    assert_eq!(info(&mut con, "lock:held"), None);
    assert!(!exists(&mut con, "lock:held"));

    // Once memory is back under the limit, acquiring works again.
    let _: i64 = redis::cmd("DEL").arg("ballast").query(&mut con).unwrap();
    let (_, again) = acquire(&mut con, "lock:held", 10_000, None).unwrap();
    assert!(again > fence);
}

/// RELEASE is not deny-oom, and a release with a waiter hands the lock over
/// within the same command: so under memory pressure the queue keeps
/// moving, although no new lock can be taken.
#[test]
fn over_maxmemory_release_still_hands_the_lock_to_a_waiter() {
    let server = Server::start_with(&["--maxmemory-policy", "noeviction"]);
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "lock:q", 60_000, Some("holder")).unwrap();
    // The waiter queues before memory runs out.
    let mut waiter = server.conn();
    let handle = std::thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg("lock:q")
            .arg(30_000)
            .arg("TOKEN")
            .arg("waiter")
            .arg("WAIT")
            .arg(20_000)
            .query::<Option<(String, u64)>>(&mut waiter)
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut con, "lock:q").is_some_and(|i| i["waiters"] == 1)
    });
    over_maxmemory(&mut con);

    assert_eq!(release(&mut con, "lock:q", "holder"), 1);
    let granted = handle.join().unwrap().expect("the waiter's ACQUIRE");
    let (token, new_fence) = granted.expect("the waiter was granted, not timed out");
    assert_eq!(token, "waiter");
    assert!(new_fence > fence);
    assert_eq!(info(&mut con, "lock:q").unwrap()["fence"], new_fence as i64);
    // The new holder cannot extend (deny-oom) but can give the lock back.
    let err = error_of(
        &mut con,
        redis::cmd("LOCK.EXTEND")
            .arg("lock:q")
            .arg("waiter")
            .arg(60_000),
    );
    assert!(err.starts_with("OOM"), "{err}");
    assert_eq!(release(&mut con, "lock:q", "waiter"), 1);
}

#[test]
fn an_evicting_policy_at_start_is_logged_and_flagged_in_info() {
    let server = Server::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let mut con = server.conn();
    assert_eq!(eviction_risk(&mut con), "1");
    let log = server.log();
    assert!(
        log.contains(&eviction_warning("allkeys-lru")),
        "no warning in the log:\n{log}"
    );
    assert!(log.contains("Use maxmemory-policy noeviction on a lock server"));
}

#[test]
fn noeviction_is_not_flagged_and_policy_changes_at_run_time_flip_the_flag() {
    let server = Server::start_with(&["--maxmemory-policy", "noeviction"]);
    let mut con = server.conn();
    assert_eq!(eviction_risk(&mut con), "0");
    assert!(
        !server.log().contains("maxmemory-policy is"),
        "{}",
        server.log()
    );

    config_set(&mut con, "maxmemory-policy", "volatile-ttl");
    assert_eq!(eviction_risk(&mut con), "1");
    let log = server.log();
    assert!(log.contains(&eviction_warning("volatile-ttl")), "{log}");

    config_set(&mut con, "maxmemory-policy", "noeviction");
    assert_eq!(eviction_risk(&mut con), "0");
    // Another evicting policy, set together with another setting, and back.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1gb")
        .arg("maxmemory-policy")
        .arg("allkeys-random")
        .query(&mut con)
        .unwrap();
    assert_eq!(eviction_risk(&mut con), "1");
    assert!(server.log().contains(&eviction_warning("allkeys-random")));
    config_set(&mut con, "maxmemory-policy", "noeviction");
    assert_eq!(eviction_risk(&mut con), "0");
    // Setting noeviction never warns.
    assert!(!server.log().contains("maxmemory-policy is noeviction"));
}

/// Why the module warns: under `allkeys-lru` and memory pressure Redis
/// evicts live locks like any other key. The holder is not told; the next
/// ACQUIRE of the key is granted at once, so two clients believe they hold
/// it. Fences still grow (the high-water mark is not in the key), so a
/// resource that checks them refuses the first holder. The module warns
/// instead of refusing to grant: refusing would turn memory pressure into a
/// lock outage, and the operator chose the policy.
#[test]
fn under_allkeys_lru_memory_pressure_evicts_live_locks() {
    const LOCKS: usize = 2_000;
    let server = Server::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let mut con = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..LOCKS {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("lock:{i}"))
            .arg(600_000)
            .arg("TOKEN")
            .arg(format!("holder-{i}"));
    }
    let grants: Vec<(String, u64)> = pipe.query(&mut con).unwrap();
    assert_eq!(grants.len(), LOCKS);
    let top_fence = grants.iter().map(|g| g.1).max().unwrap();
    assert_eq!(
        info_field(&mut con, "lock", "lock_locks"),
        LOCKS.to_string()
    );

    // A little headroom, then fill it with plain values (bounded: at most
    // 64 × 32 KB) until Redis has had to evict.
    let limit = used_memory(&mut con) + 64 * 1024;
    config_set(&mut con, "maxmemory", &limit.to_string());
    let filler = vec![b'f'; 32 * 1024];
    let mut evicted = 0;
    for i in 0..64 {
        let _: () = redis::cmd("SET")
            .arg(format!("fill:{i}"))
            .arg(&filler)
            .query(&mut con)
            .unwrap();
        evicted = info_field(&mut con, "stats", "evicted_keys")
            .parse::<u64>()
            .unwrap();
        if evicted > 0 && used_memory(&mut con) <= limit {
            break;
        }
    }
    assert!(evicted > 0, "nothing was evicted");
    // No more eviction from here on: what the test reads next stays put.
    config_set(&mut con, "maxmemory", "0");

    let mut pipe = redis::pipe();
    for i in 0..LOCKS {
        pipe.cmd("EXISTS").arg(format!("lock:{i}"));
    }
    let present: Vec<i64> = pipe.query(&mut con).unwrap();
    let gone: Vec<usize> = (0..LOCKS).filter(|&i| present[i] == 0).collect();
    assert!(
        !gone.is_empty(),
        "{evicted} keys evicted, but no lock among them"
    );
    let remaining = LOCKS - gone.len();
    eprintln!(
        "allkeys-lru: {evicted} keys evicted, {} of {LOCKS} live locks among them",
        gone.len()
    );
    assert_eq!(
        info_field(&mut con, "lock", "lock_locks"),
        remaining.to_string()
    );
    assert_eq!(info_field(&mut con, "lock", "lock_eviction_risk"), "1");

    // An evicted lock's holder has lost it without being told ...
    let victim = gone[0];
    let key = format!("lock:{victim}");
    assert_eq!(info(&mut con, &key), None);
    // ... so the next client is granted it at once, while the first holder's
    // lease had nine more minutes: two holders. Only the fence tells them
    // apart: the new one is above every fence issued before.
    let mut other = server.conn();
    let (_, fence) = acquire(&mut other, &key, 600_000, Some("intruder")).unwrap();
    assert!(fence > top_fence);
    assert_eq!(
        extend(&mut con, &key, &format!("holder-{victim}"), 600_000),
        0
    );
    assert_eq!(release(&mut con, &key, &format!("holder-{victim}")), 0);
}
