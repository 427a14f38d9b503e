//! The lease of a guard beyond the watchdog's normal rounds: the hold
//! policy's `LIMIT`, a manual extend, and the clock-read `held()` and
//! `remaining()`, against a real redis-server with the module. Each hold
//! with its own watchdog (`KeepAlive::Watchdog`): a hold in a session has
//! the session's ttl, and the hold policy does not apply to it
//! (sessions.rs).

mod common;

use std::time::Duration;

use common::{info, LocksOn, Server};
use redis_lock_client::{redis, Error, LostReason};
use tokio::time::timeout;

const SEC: Duration = Duration::from_secs(1);

/// How many `LOCK.EXTEND` calls the server has served, and how many of them
/// failed (an error reply, such as `LIMIT`).
fn extend_calls(con: &mut redis::Connection) -> (u64, u64) {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO commandstats");
    let Some(line) = stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_lock.extend:"))
    else {
        return (0, 0);
    };
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .map_or(0, |n| n.parse().unwrap())
    };
    (field("calls="), field("failed_calls="))
}

fn config_set(con: &mut redis::Connection, name: &str, value: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .expect("CONFIG SET");
}

/// Before the fix, the watchdog retried a `LIMIT` every few milliseconds
/// until the deadline and reported `Expired` (12 extends, 11 of them
/// refused, on a 900 ms lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_reply_stops_the_watchdog_at_once_with_limit() {
    let server = Server::start();
    let mut admin = server.admin();
    // One extension allowed: the watchdog's first extend passes, its second
    // is answered LIMIT.
    config_set(&mut admin, "lock.max-extends", 1);
    let locks = server.watchdog_locks().await;
    let guard = locks
        .lock("job")
        .ttl(Duration::from_millis(1500))
        .acquire()
        .await
        .unwrap();
    let reason = timeout(10 * SEC, guard.lost()).await.expect("lost() fired");
    assert_eq!(reason, LostReason::Limit);
    assert!(!guard.held(), "a lease the watchdog no longer keeps");
    assert_eq!(
        extend_calls(&mut admin),
        (2, 1),
        "one extend that passed, one LIMIT, and no retry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_extend_answered_limit_is_a_limit_loss_and_the_lease_still_holds() {
    let server = Server::start();
    let mut admin = server.admin();
    config_set(&mut admin, "lock.max-extends", 1);
    let locks = server.watchdog_locks().await;
    let guard = locks.lock("job").ttl(10 * SEC).acquire().await.unwrap();
    guard
        .extend(10 * SEC)
        .await
        .expect("the one extension allowed");
    let refused = guard.extend(10 * SEC).await;
    assert!(
        matches!(refused, Err(Error::Lost(LostReason::Limit))),
        "got {refused:?}"
    );
    assert_eq!(guard.lost().await, LostReason::Limit, "signalled at once");
    assert!(guard.is_lost() && !guard.held());
    // The server keeps the lease to its deadline: time is left, and the
    // release finds it.
    assert!(guard.remaining() > Duration::ZERO);
    let held = info(&mut admin, "job").expect("still held on the server");
    assert_eq!(held["fence"], guard.fence() as i64);
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_moves_the_deadline_and_the_watchdog_keeps_the_new_ttl() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.watchdog_locks().await;
    let guard = locks.lock("job").ttl(30 * SEC).acquire().await.unwrap();
    let first_deadline = guard.deadline();

    // Shorter: the watchdog now extends every 300 ms with 900 ms, where the
    // 30 s ttl would have waited 10 s for its first extend.
    guard.extend(Duration::from_millis(900)).await.unwrap();
    assert!(guard.deadline() < first_deadline);
    let fence = guard.fence();
    common::wait_until(10 * SEC, || {
        info(&mut admin, "job").is_some_and(|i| i["extends"] >= 3)
    });
    let held = info(&mut admin, "job").expect("held");
    assert_eq!(held["fence"], fence as i64, "the same lease");
    assert!(held["ttl"] <= 900, "extended by 900 ms, not 30 s: {held:?}");

    // Longer again, past what the watchdog gives.
    guard.extend(60 * SEC).await.unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg("job").query(&mut admin).unwrap();
    assert!(pttl > 30_000, "PTTL {pttl}");
    assert!(guard.deadline() > first_deadline);
    assert!(guard.held());

    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));

    // Deleted: the extend is refused, and that is a loss.
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut admin).unwrap();
    let refused = guard.extend(60 * SEC).await;
    assert!(
        matches!(refused, Err(Error::Lost(LostReason::Refused))),
        "got {refused:?}"
    );
    assert_eq!(guard.lost().await, LostReason::Refused);
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(!guard.release().await.unwrap(), "nothing left to release");
}

/// A paused process: the test blocks the runtime's only thread past the
/// lease's end, so the watchdog cannot run. The loss is not signalled yet,
/// but `held()` and `remaining()` read the clock and already say it.
#[tokio::test(flavor = "current_thread")]
async fn held_and_remaining_read_the_clock_after_a_pause() {
    let server = Server::start();
    let locks = server.watchdog_locks().await;
    let ttl = Duration::from_millis(500);
    let guard = locks.lock("job").ttl(ttl).acquire().await.unwrap();
    assert!(guard.held());
    let remaining = guard.remaining();
    assert!(
        remaining > Duration::ZERO && remaining < ttl,
        "{remaining:?}"
    );
    assert!(guard.lost_signal().held());

    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !guard.is_lost(),
        "the watchdog has not run: nothing signalled"
    );
    assert!(!guard.held(), "the clock says the lease is over");
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(!guard.lost_signal().held());

    // Once the runtime runs again, the watchdog signals it.
    assert_eq!(guard.lost().await, LostReason::Expired);
}
