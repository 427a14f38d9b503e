//! Regressions found by the fault-injection harness (`make chaos`, chaos/).
//! Each test is named after what must hold; while the bug is open it is
//! `#[ignore]`d with a note saying which scenario found it.

mod common;

use std::thread;
use std::time::Duration;

use common::*;

/// Found by chaos scenario 3 (paused server, `CLIENT PAUSE ... ALL`): the
/// module's expiry timer hands a lock to its waiter while writes are paused.
/// - Redis 7.0.15 aborts with `db.c:191 'de != NULL' is not true` (dbAdd),
///   from `RM_ModuleTypeSetValue` in the timer: while writes are paused,
///   Redis does not delete an expired key (a lookup reports it missing but
///   leaves it in the keyspace), so the timer, finding the key "empty", sets a
///   new value and Redis adds a key that is still in the dict.
/// - Valkey 8.1.8 aborts with `server.c:3495 '!isPausedActions(PAUSE_ACTION_REPLICA)
///   || ...' is not true` in `moduleFreeContext` after the timer: the module
///   propagated a write during the pause. Valkey propagates only with a
///   replica or the AOF, hence `--appendonly yes` here.
///
/// Fixed: the module's timers (handoff, reclaim, SESSION release) do not
/// write while writes are paused (`RedisModule_AvoidReplicaTraffic`), and
/// look again every few milliseconds until the pause ends.
#[test]
fn expiry_handoff_during_client_pause_keeps_the_server_alive() {
    for mode in ["WRITE", "ALL"] {
        let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let mut holder = server.conn();
        assert!(acquire(&mut holder, "paused", 200, Some("holder")).is_some());
        // A waiter queues behind the holder, on its own connection.
        let mut waiter = server.conn();
        let waited = thread::spawn(move || {
            redis::cmd("LOCK.ACQUIRE")
                .arg("paused")
                .arg(5000)
                .arg("TOKEN")
                .arg("waiter")
                .arg("WAIT")
                .arg(10_000)
                .query::<Option<(String, u64)>>(&mut waiter)
        });
        wait_until(Duration::from_secs(5), || {
            info(&mut holder, "paused").is_some_and(|i| i.get("waiters") == Some(&1))
        });
        // Pause writes across the holder's deadline: the lease expires and
        // the module's timer fires while Redis keeps the expired key.
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(1000)
            .arg(mode)
            .query(&mut holder)
            .expect("CLIENT PAUSE");
        thread::sleep(Duration::from_millis(1300));
        let log = server.log();
        assert!(
            server.is_running() && !log.contains("BUG REPORT START"),
            "CLIENT PAUSE {mode}: the server crashed during the pause:\n{log}"
        );
        let granted = waited.join().expect("waiter thread");
        let (token, _fence) = granted
            .expect("the waiter's reply")
            .expect("the waiter is granted the lock once the lease expired");
        assert_eq!(token, "waiter");
        let _: String = redis::cmd("PING").query(&mut server.conn()).expect("PING");
    }
}

/// The same for the other timer-driven writes: a `SESSION` lock whose
/// connection closes while writes are paused is released once the pause ends,
/// and the server stays up.
#[test]
fn session_release_during_client_pause_waits_for_the_pause_to_end() {
    for mode in ["WRITE", "ALL"] {
        let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let mut admin = server.conn();
        let mut holder = server.conn();
        let _: Option<(String, u64)> = redis::cmd("LOCK.ACQUIRE")
            .arg("session")
            .arg(60_000)
            .arg("TOKEN")
            .arg("holder")
            .arg("SESSION")
            .query(&mut holder)
            .unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(800)
            .arg(mode)
            .query(&mut admin)
            .expect("CLIENT PAUSE");
        drop(holder);
        thread::sleep(Duration::from_millis(300));
        assert!(
            server.is_running(),
            "CLIENT PAUSE {mode}:\n{}",
            server.log()
        );
        // Released after the pause, not during it.
        wait_until(Duration::from_secs(10), || {
            info(&mut server.conn(), "session").is_none()
        });
        assert!(
            !server.log().contains("BUG REPORT START"),
            "{}",
            server.log()
        );
    }
}
