//! Operating the module: `lock.*` settings (CONFIG and module arguments),
//! the `INFO lock` section, `lock.*` keyspace events and SESSION locks, one
//! behaviour per test, against a real server.
//!
//! Timings are only asserted as generous bounds or as lower bounds (a
//! lock-delay may not end early), because the machine is noisy.

mod common;
use common::*;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_testsupport::{module_path, server_binary};

const BOUND: Duration = Duration::from_secs(15);

fn config_get(con: &mut Connection, name: &str) -> i64 {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .expect("CONFIG GET");
    assert_eq!(pair.len(), 2, "CONFIG GET {name}: {pair:?}");
    pair[1].parse().unwrap()
}

fn config_set(con: &mut Connection, name: &str, value: &str) -> Result<(), String> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query::<()>(con)
        .map_err(|e| e.to_string())
}

/// Every `lock_*` field of `INFO lock`, without the prefix.
fn lock_info(con: &mut Connection) -> HashMap<String, i64> {
    let text: String = redis::cmd("INFO")
        .arg("lock")
        .query(con)
        .expect("INFO lock");
    text.lines()
        .filter_map(|l| l.strip_prefix("lock_"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect()
}

fn acquire_cmd(key: &str, ttl: i64, token: &str, extra: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(ttl).arg("TOKEN").arg(token);
    for arg in extra {
        cmd.arg(*arg);
    }
    cmd
}

/// `LOCK.ACQUIRE key ttl TOKEN token WAIT wait_ms` on its own connection
/// and thread.
fn waiter(
    server: &Server,
    key: &str,
    ttl: i64,
    token: &str,
    wait_ms: i64,
) -> thread::JoinHandle<Result<Option<(String, u64)>, String>> {
    let mut con = server.conn();
    let cmd = acquire_cmd(key, ttl, token, &["WAIT", &wait_ms.to_string()]);
    thread::spawn(move || cmd.query(&mut con).map_err(|e| e.to_string()))
}

fn blocked_clients(con: &mut Connection) -> i64 {
    info_field(con, "clients", "blocked_clients")
        .parse()
        .unwrap()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < BOUND, "not within {BOUND:?}: {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------
// Settings

const SETTINGS: [(&str, i64); 7] = [
    ("lock.max-ttl-ms", 86_400_000),
    ("lock.max-hold-ms", 0),
    ("lock.max-extends", 0),
    ("lock.expiry-delay-ms", 0),
    ("lock.max-waiters", 0),
    ("lock.max-holders", 1000),
    ("lock.max-keys", 64),
];

#[test]
fn config_get_shows_every_setting_with_its_default() {
    let server = Server::start();
    let mut con = server.conn();
    let all: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.*")
        .query(&mut con)
        .unwrap();
    assert_eq!(all.len(), 2 * SETTINGS.len(), "{all:?}");
    for (name, default) in SETTINGS {
        assert_eq!(config_get(&mut con, name), default, "{name}");
    }
}

#[test]
fn module_arguments_and_config_lines_set_starting_values() {
    // Arguments after the module's path are the module's.
    let server = Server::start_with(&["max-ttl-ms", "60000", "expiry-delay-ms", "250"]);
    let mut con = server.conn();
    assert_eq!(config_get(&mut con, "lock.max-ttl-ms"), 60_000);
    assert_eq!(config_get(&mut con, "lock.expiry-delay-ms"), 250);
    let refused = error_of(&mut con, &acquire_cmd("k", 60_001, "t", &[]));
    assert!(refused.contains("lock.max-ttl-ms"), "{refused}");
    assert!(acquire(&mut con, "k", 60_000, Some("t")).is_some());

    // A config line (here on the command line) for the module's setting.
    let server = Server::start_with(&["--lock.max-waiters", "7"]);
    assert_eq!(config_get(&mut server.conn(), "lock.max-waiters"), 7);
}

/// Start a server whose module arguments are `args`; it must refuse to load
/// the module and exit. Returns what it logged.
fn start_refused(args: &[&str]) -> String {
    let socket = std::env::temp_dir().join(format!(
        "redis-lock-refused-{}-{}.sock",
        std::process::id(),
        args.join("-")
    ));
    let mut child = Command::new(server_binary())
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(&socket)
        .arg("--loadmodule")
        .arg(module_path().expect("the module"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            panic!("the server started with module arguments {args:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "{args:?}");
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn bad_module_arguments_fail_the_load_with_a_reason() {
    for (args, reason) in [
        (
            &["max-ttl-ms", "0"][..],
            "max-ttl-ms must be an integer from 1",
        ),
        (&["max-ttl-ms", "ten"][..], "max-ttl-ms must be an integer"),
        (&["max-hold-ms", "-1"][..], "max-hold-ms must be an integer"),
        (&["max-waiters"][..], "name value pairs"),
        (&["no-such-setting", "1"][..], "unknown module argument"),
    ] {
        let log = start_refused(args);
        assert!(log.contains(reason), "{args:?}: {log}");
    }
}

#[test]
fn config_set_takes_good_values_and_refuses_bad_ones_keeping_the_old() {
    let server = Server::start();
    let mut con = server.conn();
    for (name, _) in SETTINGS {
        config_set(&mut con, name, "1234").unwrap();
        assert_eq!(config_get(&mut con, name), 1234, "{name}");
        for bad in ["abc", "-1", "1.5", "", "99999999999999999999"] {
            assert!(
                config_set(&mut con, name, bad).is_err(),
                "{name} took {bad:?}"
            );
            assert_eq!(config_get(&mut con, name), 1234, "{name} after {bad:?}");
        }
    }
    // Each has its own ceiling.
    assert!(config_set(&mut con, "lock.max-ttl-ms", "0").is_err());
    assert!(config_set(&mut con, "lock.max-ttl-ms", "31536000001").is_err());
    config_set(&mut con, "lock.max-ttl-ms", "31536000000").unwrap();
    assert!(config_set(&mut con, "lock.max-extends", "4294967296").is_err());
    config_set(&mut con, "lock.max-extends", "4294967295").unwrap();
}

#[test]
fn max_ttl_ms_bounds_acquire_and_extend() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "lock.max-ttl-ms", "1000").unwrap();
    let digest_before = digest(&mut con);
    let refused = error_of(&mut con, &acquire_cmd("k", 1001, "t", &[]));
    assert_eq!(
        refused,
        "ERR ttl-ms exceeds lock.max-ttl-ms (CONFIG GET lock.max-ttl-ms shows it)"
    );
    assert_eq!(digest(&mut con), digest_before);
    assert!(acquire(&mut con, "k", 1000, Some("t")).is_some());
    let mut extend_cmd = redis::cmd("LOCK.EXTEND");
    extend_cmd.arg("k").arg("t").arg(1001);
    assert!(error_of(&mut con, &extend_cmd).contains("lock.max-ttl-ms"));
    assert_eq!(extend(&mut con, "k", "t", 1000), 1);
    // Raised again, longer leases are fine.
    config_set(&mut con, "lock.max-ttl-ms", "86400000").unwrap();
    assert_eq!(extend(&mut con, "k", "t", 3_600_000), 1);
}

#[test]
fn max_hold_ms_refuses_an_extension_past_the_limit_and_leaves_the_lease() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "lock.max-hold-ms", "5000").unwrap();
    acquire(&mut con, "k", 1_000, Some("t")).unwrap();
    let granted = info(&mut con, "k").unwrap()["granted"];
    assert_eq!(extend(&mut con, "k", "t", 2_000), 1);
    let before = info(&mut con, "k").unwrap();

    let mut too_far = redis::cmd("LOCK.EXTEND");
    too_far.arg("k").arg("t").arg(10_000);
    assert_eq!(
        error_of(&mut con, &too_far),
        "LIMIT lock.max-hold-ms reached: the lease was not extended and ends at its current deadline"
    );
    // A renewal by the holder is an extension too.
    let renew = error_of(&mut con, &acquire_cmd("k", 10_000, "t", &[]));
    assert!(renew.starts_with("LIMIT lock.max-hold-ms"), "{renew}");
    let after = info(&mut con, "k").unwrap();
    assert_eq!(after["deadline"], before["deadline"]);
    assert_eq!(after["extends"], 1);
    assert!(pttl(&mut con, "k") <= 2_000);
    // Up to the limit is still allowed.
    let room = granted + 5_000 - now_ms() - 50;
    assert!(room > 0);
    assert_eq!(extend(&mut con, "k", "t", room), 1);
    assert_eq!(lock_info(&mut con)["extends_limited"], 2);
    // A stale holder still gets 0, not LIMIT.
    assert_eq!(extend(&mut con, "k", "other", 10_000), 0);
    // The holder still holds, and can release.
    assert_eq!(release(&mut con, "k", "t"), 1);
}

#[test]
fn max_extends_limits_extensions_per_grant() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "lock.max-extends", "2").unwrap();
    acquire(&mut con, "k", 10_000, Some("t")).unwrap();
    assert_eq!(extend(&mut con, "k", "t", 10_000), 1);
    assert!(acquire(&mut con, "k", 10_000, Some("t")).is_some());
    let mut third = redis::cmd("LOCK.EXTEND");
    third.arg("k").arg("t").arg(10_000);
    assert_eq!(
        error_of(&mut con, &third),
        "LIMIT lock.max-extends reached: the lease was not extended and ends at its current deadline"
    );
    assert_eq!(info(&mut con, "k").unwrap()["extends"], 2);
    // A new grant starts counting again.
    assert_eq!(release(&mut con, "k", "t"), 1);
    acquire(&mut con, "k", 10_000, Some("t")).unwrap();
    assert_eq!(extend(&mut con, "k", "t", 10_000), 1);
    // 0 is no limit.
    config_set(&mut con, "lock.max-extends", "0").unwrap();
    for _ in 0..5 {
        assert_eq!(extend(&mut con, "k", "t", 10_000), 1);
    }
}

#[test]
fn expiry_delay_keeps_an_expired_lock_ungranted_but_not_a_released_one() {
    let server = Server::start();
    let mut con = server.conn();
    // Long enough that a stalled test thread (2 busy cores in CI) does not
    // outlive the delay between the expiry and the next ACQUIRE.
    config_set(&mut con, "lock.expiry-delay-ms", "4000").unwrap();

    // A clean release: no delay.
    acquire(&mut con, "k", 10_000, Some("a")).unwrap();
    assert_eq!(release(&mut con, "k", "a"), 1);
    assert!(acquire(&mut con, "k", 10_000, Some("b")).is_some());
    assert_eq!(release(&mut con, "k", "b"), 1);

    // An expiry while held: nobody for 4 s after the deadline.
    acquire(&mut con, "k", 100, Some("slow")).unwrap();
    let deadline = info(&mut con, "k").unwrap()["deadline"];
    thread::sleep(Duration::from_millis(300));
    assert_eq!(acquire(&mut con, "k", 10_000, Some("next")), None);
    assert!(info(&mut con, "k").is_none(), "the lock itself is gone");
    let mut granted_at = 0;
    wait_for("the lock-delay ends", || {
        let got = acquire(&mut con, "k", 10_000, Some("next")).is_some();
        granted_at = now_ms();
        got
    });
    assert!(
        granted_at >= deadline + 4_000,
        "granted at {granted_at}, deadline {deadline}"
    );
    assert_eq!(lock_info(&mut con)["expiries"], 1);
}

/// "Nobody" means every kind of request: a reader and a permit request are
/// kept off a key in its lock-delay just as a writer is (a SHARED or
/// SEM.ACQUIRE used to be granted there).
#[test]
fn expiry_delay_keeps_readers_and_permit_requests_off_the_key_too() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "lock.expiry-delay-ms", "4000").unwrap();
    acquire(&mut con, "k", 100, Some("slow")).unwrap();
    let deadline = info(&mut con, "k").unwrap()["deadline"];
    thread::sleep(Duration::from_millis(300));
    let shared: Option<(String, i64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(10_000)
        .arg("SHARED")
        .query(&mut con)
        .unwrap();
    assert_eq!(shared, None, "a reader in the lock-delay");
    assert!(info(&mut con, "k").is_none());
    // A semaphore under the same name: the key is free, the delay is not over.
    let permit: Option<(String, i64)> = redis::cmd("SEM.ACQUIRE")
        .arg("k")
        .arg(3)
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(permit, None, "a permit request in the lock-delay");
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut con).unwrap();
    assert_eq!(exists, 0, "nothing was created");
    let mut granted_at = 0;
    wait_for("the lock-delay ends", || {
        let got: Option<(String, i64)> = redis::cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg(10_000)
            .arg("SHARED")
            .query(&mut con)
            .unwrap();
        granted_at = now_ms();
        got.is_some()
    });
    assert!(
        granted_at >= deadline + 4_000,
        "granted at {granted_at}, deadline {deadline}"
    );
}

/// A lease holds through its deadline's millisecond on every server: a
/// client asking for the key all through the lease, and past it, is granted
/// it only from the next millisecond on (on the server's clock), and the
/// expiry is counted. Redis 8's expiry cycle may remove a key as that
/// millisecond begins (`decide::lock_delay` keeps it from everyone until the
/// millisecond ends; its unit test covers that case, which this loop does
/// not reliably meet: the expiry cycle runs every 2 ms here, hz 500).
#[test]
fn nobody_is_granted_a_lock_in_the_last_millisecond_of_its_lease() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "hz", "500").unwrap();
    for round in 0..20 {
        let key = format!("last{round}");
        acquire(&mut con, &key, 40, Some("holder")).unwrap();
        let deadline = info(&mut con, &key).unwrap()["deadline"];
        let start = Instant::now();
        while acquire(&mut con, &key, 10_000, Some("next")).is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{key} never came free"
            );
            thread::sleep(Duration::from_micros(300));
        }
        let granted = info(&mut con, &key).unwrap()["granted"];
        assert!(
            granted > deadline,
            "{key} granted at {granted}, within the lease that ends with ms {deadline}"
        );
    }
    assert_eq!(lock_info(&mut con)["expiries"], 20);
}

#[test]
fn expiry_delay_holds_waiters_until_it_ends() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "lock.expiry-delay-ms", "1000").unwrap();
    acquire(&mut con, "k", 200, Some("slow")).unwrap();
    let deadline = info(&mut con, "k").unwrap()["deadline"];
    let w = waiter(&server, "k", 10_000, "w", 10_000);
    let granted = w.join().unwrap().unwrap();
    let at = now_ms();
    assert_eq!(granted.map(|g| g.0), Some("w".to_string()));
    assert!(
        at >= deadline + 1_000,
        "granted at {at}, deadline {deadline}"
    );
    let stats = lock_info(&mut con);
    assert_eq!(stats["handoffs_on_expiry"], 1);
    assert_eq!(stats["expiries"], 1);
}

#[test]
fn max_waiters_refuses_a_wait_past_the_limit() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "lock.max-waiters", "2").unwrap();
    acquire(&mut con, "k", 10_000, Some("holder")).unwrap();
    // One after the other, so that the queue's order is known.
    let w1 = waiter(&server, "k", 10_000, "w1", 10_000);
    wait_for("w1 waits", || blocked_clients(&mut con) == 1);
    let w2 = waiter(&server, "k", 10_000, "w2", 10_000);
    wait_for("two waiters", || blocked_clients(&mut con) == 2);
    let refused = error_of(&mut con, &acquire_cmd("k", 10_000, "w3", &["WAIT", "1000"]));
    assert_eq!(
        refused,
        "LIMIT lock.max-waiters reached: too many clients wait for this key"
    );
    // Without WAIT: the usual null. Another key has its own queue.
    assert_eq!(acquire(&mut con, "k", 10_000, Some("w3")), None);
    assert_eq!(info(&mut con, "k").unwrap()["waiters"], 2);
    assert_eq!(lock_info(&mut con)["waits_refused"], 1);
    assert_eq!(release(&mut con, "k", "holder"), 1);
    assert_eq!(w1.join().unwrap().unwrap().unwrap().0, "w1");
    assert_eq!(release(&mut con, "k", "w1"), 1);
    assert_eq!(w2.join().unwrap().unwrap().unwrap().0, "w2");
}

// ---------------------------------------------------------------------------
// INFO lock

#[test]
fn info_lock_counts_grants_refusals_releases_and_extensions() {
    let server = Server::start();
    let mut con = server.conn();
    let zero = lock_info(&mut con);
    for name in [
        "grants",
        "refused",
        "renewals",
        "releases",
        "stale_releases",
        "extends",
        "stale_extends",
        "extends_limited",
        "expiries",
        "locks",
        "waiters",
        "session_releases",
        "eviction_risk",
    ] {
        assert_eq!(zero[name], 0, "{name}: {zero:?}");
    }

    let (_, f1) = acquire(&mut con, "a", 10_000, Some("t")).unwrap();
    acquire(&mut con, "b", 10_000, Some("t")).unwrap();
    let (_, f3) = acquire(&mut con, "c", 10_000, None).unwrap();
    assert_eq!(acquire(&mut con, "a", 10_000, Some("other")), None);
    assert!(acquire(&mut con, "a", 10_000, Some("t")).is_some());
    assert_eq!(extend(&mut con, "a", "t", 10_000), 1);
    assert_eq!(extend(&mut con, "a", "other", 10_000), 0);
    assert_eq!(extend(&mut con, "free", "t", 10_000), 0);
    assert_eq!(release(&mut con, "b", "other"), 0);
    assert_eq!(release(&mut con, "b", "t"), 1);
    assert_eq!(release(&mut con, "b", "t"), 0);

    let stats = lock_info(&mut con);
    assert!(f3 > f1);
    assert_eq!(stats["grants"], 3);
    assert_eq!(stats["refused"], 1);
    assert_eq!(stats["renewals"], 1);
    assert_eq!(stats["extends"], 1);
    assert_eq!(stats["stale_extends"], 2);
    assert_eq!(stats["releases"], 1);
    assert_eq!(stats["stale_releases"], 2);
    assert_eq!(stats["locks"], 2);
    assert_eq!(stats["fence_high_water"], f3 as i64);
    // Counting changes nothing a client sees.
    assert_eq!(info(&mut con, "a").unwrap()["fence"], f1 as i64);
}

#[test]
fn info_lock_counts_waits_handoffs_timeouts_and_expiries() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k", 10_000, Some("holder")).unwrap();
    acquire(&mut con, "other", 10_000, Some("holder")).unwrap();
    let w1 = waiter(&server, "k", 300, "w1", 10_000);
    wait_for("w1 waits", || blocked_clients(&mut con) == 1);
    let w2 = waiter(&server, "k", 10_000, "w2", 10_000);
    let w3 = waiter(&server, "other", 10_000, "w3", 1);
    wait_for("w2 waits", || lock_info(&mut con)["waits"] == 3);
    assert_eq!(w3.join().unwrap().unwrap(), None);
    assert_eq!(lock_info(&mut con)["waiters"], 2);

    // Release: w1 gets it; it lets its 300 ms lease run out: w2 gets it.
    assert_eq!(release(&mut con, "k", "holder"), 1);
    assert_eq!(w1.join().unwrap().unwrap().unwrap().0, "w1");
    assert_eq!(w2.join().unwrap().unwrap().unwrap().0, "w2");

    let stats = lock_info(&mut con);
    assert_eq!(stats["waits"], 3);
    assert_eq!(stats["wait_timeouts"], 1);
    assert_eq!(stats["grants_after_wait"], 2);
    assert_eq!(stats["handoffs_on_release"], 1);
    assert_eq!(stats["handoffs_on_expiry"], 1);
    assert_eq!(stats["expiries"], 1);
    assert_eq!(stats["grants"], 4);
    assert_eq!(stats["waiters"], 0);
    assert_eq!(stats["locks"], 2);
}

#[test]
fn info_lock_counts_an_expiry_without_waiters_but_not_a_del() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "gone", 50, Some("t")).unwrap();
    acquire(&mut con, "deleted", 10_000, Some("t")).unwrap();
    let _: i64 = redis::cmd("DEL").arg("deleted").query(&mut con).unwrap();
    // Redis' active expiry finds it on its own, no client touches it.
    wait_for("the expiry is counted", || {
        lock_info(&mut con)["expiries"] == 1
    });
    thread::sleep(Duration::from_millis(200));
    let stats = lock_info(&mut con);
    assert_eq!(stats["expiries"], 1);
    assert_eq!(stats["locks"], 0);
}

// ---------------------------------------------------------------------------
// Keyspace events

/// The `lock.*` events published for `key` in db 0, in order, until
/// `timeout` passes without a new one.
fn events_of(server: &Server, key: &str) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut con = server.conn();
    let channel = format!("__keyspace@0__:{key}");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut pubsub = con.as_pubsub();
        pubsub.subscribe(&channel).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(msg) = pubsub.get_message() {
                if tx.send(msg.get_payload::<String>().unwrap()).is_err() {
                    return;
                }
            }
        }
    });
    ready_rx.recv_timeout(BOUND).unwrap();
    rx
}

fn next_events(rx: &std::sync::mpsc::Receiver<String>, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(BOUND)
                .unwrap_or_else(|_| panic!("event {i} of {n} did not come"))
        })
        .collect()
}

fn no_more_events(rx: &std::sync::mpsc::Receiver<String>) {
    if let Ok(e) = rx.recv_timeout(Duration::from_millis(300)) {
        panic!("unexpected event {e}");
    }
}

#[test]
fn keyspace_events_fire_for_each_change_and_only_then() {
    let server = Server::start();
    let mut con = server.conn();
    // Off by default: nothing is published.
    let quiet = events_of(&server, "k");
    acquire(&mut con, "k", 10_000, Some("t")).unwrap();
    assert_eq!(release(&mut con, "k", "t"), 1);
    no_more_events(&quiet);

    // `K` keyspace channel, `d` module events; nothing else is enabled.
    config_set(&mut con, "notify-keyspace-events", "Kd").unwrap();
    let events = events_of(&server, "k");
    acquire(&mut con, "k", 10_000, Some("t")).unwrap();
    assert_eq!(next_events(&events, 1), ["lock.acquired"]);
    // Refusals and stale calls change nothing, and say nothing.
    assert_eq!(acquire(&mut con, "k", 10_000, Some("other")), None);
    assert_eq!(extend(&mut con, "k", "other", 10_000), 0);
    assert_eq!(release(&mut con, "k", "other"), 0);
    no_more_events(&events);
    assert_eq!(extend(&mut con, "k", "t", 10_000), 1);
    assert!(acquire(&mut con, "k", 10_000, Some("t")).is_some());
    assert_eq!(next_events(&events, 2), ["lock.extended", "lock.extended"]);

    // A handoff: the release, then the new holder's grant and the handoff.
    let w = waiter(&server, "k", 200, "w", 10_000);
    wait_for("w waits", || blocked_clients(&mut con) == 1);
    assert_eq!(release(&mut con, "k", "t"), 1);
    assert_eq!(w.join().unwrap().unwrap().unwrap().0, "w");
    assert_eq!(
        next_events(&events, 3),
        ["lock.released", "lock.acquired", "lock.handoff"]
    );
    // w lets its 200 ms lease run out: the holder learns of it at once.
    let started = Instant::now();
    assert_eq!(next_events(&events, 1), ["lock.expired"]);
    assert!(started.elapsed() < Duration::from_secs(5));
    no_more_events(&events);
}

#[test]
fn the_a_flag_includes_module_events() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "notify-keyspace-events", "KA").unwrap();
    let events = events_of(&server, "k");
    acquire(&mut con, "k", 10_000, Some("t")).unwrap();
    assert_eq!(next_events(&events, 1), ["lock.acquired"]);
}

// ---------------------------------------------------------------------------
// SESSION

#[test]
fn a_session_lock_is_released_when_its_connection_closes() {
    let server = Server::start();
    let mut con = server.conn();
    let mut holder = server.conn();
    let _: Option<(String, u64)> = acquire_cmd("k", 60_000, "t", &["SESSION"])
        .query(&mut holder)
        .unwrap();
    acquire(&mut con, "plain", 60_000, Some("t")).unwrap();
    let _: Option<(String, u64)> = acquire_cmd("plain", 60_000, "t", &[])
        .query(&mut holder)
        .unwrap();
    drop(holder);
    wait_for("the session lock is released", || {
        info(&mut con, "k").is_none()
    });
    // A lock taken without SESSION outlives the connection.
    assert!(info(&mut con, "plain").is_some());
    let stats = lock_info(&mut con);
    assert_eq!(stats["session_releases"], 1);
    assert!(acquire(&mut con, "k", 1_000, Some("next")).is_some());
}

#[test]
fn a_session_lock_is_handed_to_the_first_waiter_when_its_connection_closes() {
    let server = Server::start();
    let mut con = server.conn();
    let mut holder = server.conn();
    let _: Option<(String, u64)> = acquire_cmd("k", 60_000, "t", &["SESSION"])
        .query(&mut holder)
        .unwrap();
    let (_, fence) = fence_and_deadline(&mut con, "k");
    let w = waiter(&server, "k", 60_000, "w", 20_000);
    wait_for("w waits", || blocked_clients(&mut con) == 1);
    let closed = Instant::now();
    drop(holder);
    let (token, new_fence) = w.join().unwrap().unwrap().unwrap();
    assert_eq!(token, "w");
    assert!(new_fence as i64 > fence);
    assert!(closed.elapsed() < Duration::from_secs(5));
    assert_eq!(lock_info(&mut con)["handoffs_on_release"], 1);
}

#[test]
fn a_session_waiter_is_bound_once_granted() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k", 60_000, Some("holder")).unwrap();
    let mut w = server.conn();
    let cmd = acquire_cmd("k", 60_000, "w", &["WAIT", "20000", "SESSION"]);
    let t = thread::spawn(move || {
        let got: Option<(String, u64)> = cmd.query(&mut w).unwrap();
        (got, w)
    });
    wait_for("w waits", || blocked_clients(&mut con) == 1);
    assert_eq!(release(&mut con, "k", "holder"), 1);
    let (got, w) = t.join().unwrap();
    assert_eq!(got.unwrap().0, "w");
    drop(w);
    wait_for("w's session lock is released", || {
        info(&mut con, "k").is_none()
    });
}

#[test]
fn a_session_lock_still_ends_at_its_ttl() {
    let server = Server::start();
    let mut con = server.conn();
    let mut holder = server.conn();
    let _: Option<(String, u64)> = acquire_cmd("k", 100, "t", &["SESSION"])
        .query(&mut holder)
        .unwrap();
    thread::sleep(Duration::from_millis(250));
    assert!(info(&mut con, "k").is_none());
    // The holder's connection is still open; a new holder is not disturbed
    // when it closes.
    let (_, fence) = acquire(&mut con, "k", 60_000, Some("new")).unwrap();
    drop(holder);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(info(&mut con, "k").map(|i| i["fence"]), Some(fence as i64));
    assert_eq!(lock_info(&mut con)["session_releases"], 0);
}

#[test]
fn a_session_release_replicates_as_del() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let mut holder = master.conn();
    let _: Option<(String, u64)> = acquire_cmd("k", 60_000, "t", &["SESSION"])
        .query(&mut holder)
        .unwrap();
    sync_replica(&master, &replica);
    assert!(info(&mut r, "k").is_some());
    drop(holder);
    wait_for("released on the master", || info(&mut m, "k").is_none());
    sync_replica(&master, &replica);
    assert!(info(&mut r, "k").is_none());
    assert_eq!(digest(&mut m), digest(&mut r));
}

#[test]
fn session_binding_survives_pruning_of_stale_entries() {
    let server = Server::start();
    let mut con = server.conn();
    let mut holder = server.conn();
    // Many short SESSION locks on one connection, released as it goes.
    for i in 0..40 {
        let key = format!("k{i}");
        let _: Option<(String, u64)> = acquire_cmd(&key, 60_000, "t", &["SESSION"])
            .query(&mut holder)
            .unwrap();
        if i % 2 == 0 {
            assert_eq!(release(&mut holder, &key, "t"), 1);
        }
    }
    assert_eq!(dbsize(&mut con), 20);
    drop(holder);
    wait_for("every session lock is released", || dbsize(&mut con) == 0);
    assert_eq!(lock_info(&mut con)["session_releases"], 20);
}

// ---------------------------------------------------------------------------
// The hold state travels with the lock

#[test]
fn grant_time_and_extension_count_reach_replicas_and_survive_reloads() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "k", 60_000, Some("t")).unwrap();
    assert_eq!(extend(&mut m, "k", "t", 60_000), 1);
    assert!(acquire(&mut m, "k", 60_000, Some("t")).is_some());
    let on_master = info(&mut m, "k").unwrap();
    assert_eq!(on_master["extends"], 2);
    sync_replica(&master, &replica);
    let on_replica = info(&mut r, "k").unwrap();
    for field in ["fence", "granted", "extends", "deadline"] {
        assert_eq!(on_replica[field], on_master[field], "{field}");
    }
    assert_eq!(digest(&mut m), digest(&mut r));

    // A promoted replica enforces the same limit on the same count.
    promote(&mut r);
    config_set(&mut r, "lock.max-extends", "2").unwrap();
    let mut third = redis::cmd("LOCK.EXTEND");
    third.arg("k").arg("t").arg(60_000);
    assert!(error_of(&mut r, &third).starts_with("LIMIT lock.max-extends"));

    // RDB (DEBUG RELOAD) and AOF (rewrite, then DEBUG LOADAOF) keep them.
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut m).unwrap();
    let reloaded = info(&mut m, "k").unwrap();
    for field in ["fence", "granted", "extends", "deadline"] {
        assert_eq!(reloaded[field], on_master[field], "{field}");
    }
    config_set(&mut m, "appendonly", "yes").unwrap();
    wait_for_aof_rewrite(&mut m);
    rewrite_aof(&mut m);
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut m).unwrap();
    let reloaded = info(&mut m, "k").unwrap();
    for field in ["fence", "granted", "extends", "deadline"] {
        assert_eq!(reloaded[field], on_master[field], "{field}");
    }
}

#[test]
fn session_is_refused_inside_a_script_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let digest_before = digest(&mut con);
    let mut eval = redis::cmd("EVAL");
    eval.arg("return redis.call('LOCK.ACQUIRE', KEYS[1], '60000', 'SESSION')")
        .arg(1)
        .arg("k");
    let refused = error_of(&mut con, &eval);
    assert!(
        refused.contains("SESSION is not allowed in scripts"),
        "{refused}"
    );
    assert_eq!(digest(&mut con), digest_before);
    // Without SESSION, a script may still take a lock.
    let mut plain = redis::cmd("EVAL");
    plain
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], '60000', 'TOKEN', 't')")
        .arg(1)
        .arg("k");
    let granted: (String, u64) = plain.query(&mut con).unwrap();
    assert_eq!(granted.0, "t");
}

#[test]
fn a_ttl_changed_by_a_client_is_what_expiry_counting_and_aof_rewrite_follow() {
    let server = Server::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut con = server.conn();
    // Shortened by PEXPIRE: its expiry is still an expiry of a held lock.
    acquire(&mut con, "short", 60_000, Some("t")).unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("short")
        .arg(50)
        .query(&mut con)
        .unwrap();
    wait_for("the shortened lease is counted as expired", || {
        lock_info(&mut con)["expiries"] == 1
    });
    // Made permanent by PERSIST: an AOF rewrite and reload keep it so.
    acquire(&mut con, "kept", 60_000, Some("t")).unwrap();
    let _: i64 = redis::cmd("PERSIST").arg("kept").query(&mut con).unwrap();
    assert_eq!(info(&mut con, "kept").unwrap()["deadline"], -1);
    rewrite_aof(&mut con);
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut con).unwrap();
    assert_eq!(pttl(&mut con, "kept"), -1);
    assert_eq!(info(&mut con, "kept").unwrap()["deadline"], -1);
    assert_eq!(release(&mut con, "kept", "t"), 1);
}

/// `MODULE LIST` reports the module's real version (major·10000, plus
/// minor·100, plus patch of the crate's version), not a constant: what a
/// client checks at connect.
#[test]
fn module_list_reports_the_crate_version() {
    let server = Server::start();
    let mut con = server.conn();
    let modules: Vec<HashMap<String, redis::Value>> =
        redis::cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    let lock = modules
        .iter()
        .find(|m| m.get("name") == Some(&redis::Value::BulkString(b"lock".to_vec())))
        .expect("the lock module in MODULE LIST");
    let number = |part: &str| part.parse::<i64>().unwrap();
    let expected = number(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + number(env!("CARGO_PKG_VERSION_PATCH"));
    assert!(expected >= 400, "the crate's version is at least 0.4.0");
    assert_eq!(lock.get("ver"), Some(&redis::Value::Int(expected)));
}
