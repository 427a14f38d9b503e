//! Single-server guards: the watchdog, the loss signal, release, with_lock,
//! and waiting acquires, against a real redis-server with the module.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{info, LocksOn, Server};
use redis_lock_client::{Error, LockOptions, Locks, LostReason};
use redis_lock_testsupport::Launch;
use tokio::sync::{Barrier, Mutex};
use tokio::time::{timeout, Instant};

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_holds_a_one_second_lease_through_five_seconds_of_work() {
    let server = Server::start();
    let locks = server.locks().await;
    let rival = server.locks().await;
    let guard = locks
        .lock("job")
        .ttl(SEC)
        .acquire()
        .await
        .expect("the key is free");
    let fence = guard.fence();

    // Five seconds of "work", five times the ttl, watching for a loss.
    tokio::select! {
        reason = guard.lost() => panic!("lease lost during the work: {reason}"),
        _ = tokio::time::sleep(5 * SEC) => {}
    }

    assert!(!guard.is_lost());
    assert!(
        matches!(
            rival.lock("job").ttl(SEC).acquire().await,
            Err(Error::NotAcquired)
        ),
        "still held"
    );
    let held = info(&mut server.admin(), "job").expect("the key is held");
    assert_eq!(
        held["fence"], fence as i64,
        "the same lease, never re-granted"
    );
    assert!(guard.release().await.unwrap());
    assert!(info(&mut server.admin(), "job").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_fires_lost() {
    let server = Server::start();
    let locks = server.locks().await;
    let guard = locks.lock("job").ttl(SEC).acquire().await.unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("job")
        .query(&mut server.admin())
        .unwrap();
    let reason = timeout(5 * SEC, guard.lost()).await.expect("lost() fired");
    assert_eq!(reason, LostReason::Refused);
    assert!(guard.is_lost());
    assert!(!guard.release().await.unwrap(), "nothing left to release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_fires_lost_before_the_deadline() {
    let mut server = Server::start();
    let margin = Duration::from_millis(300);
    let locks = server
        .locks()
        .await
        .with_options(LockOptions::default().safety_margin(margin));
    // Measured before the acquire is sent: the lease cannot end before this
    // plus the ttl, on any clock that does not run slow.
    let before_send = Instant::now();
    let guard = locks.lock("job").ttl(SEC).acquire().await.unwrap();
    server.shutdown();
    let reason = timeout(5 * SEC, guard.lost()).await.expect("lost() fired");
    let fired = Instant::now();
    assert_eq!(reason, LostReason::Expired);
    assert!(
        fired < before_send + SEC,
        "lost() fired {:?} after the acquire was sent, not before the 1 s deadline",
        fired - before_send
    );
    // The server is gone: releasing is a connection error, not a false "no".
    assert!(matches!(guard.release().await, Err(Error::Connection(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_survives_a_killed_connection() {
    let server = Server::start();
    let locks = server.locks().await;
    let guard = locks.lock("job").ttl(SEC).acquire().await.unwrap();
    let mut admin = server.admin();
    // Kill every client connection but the admin's: the connection manager
    // behind the guard reconnects, and the watchdog carries on.
    for _ in 0..3 {
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query(&mut admin)
            .unwrap();
        assert!(killed >= 1, "the guard's connection was killed");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(!guard.is_lost(), "lost: {:?}", guard.lost_signal().reason());
    assert!(
        guard.release().await.unwrap(),
        "the lease outlived the reconnects"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_guard_release_returns_false() {
    let server = Server::start();
    let locks = server.locks().await;
    let stale = locks.lock("job").ttl(SEC).acquire().await.unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("job")
        .query(&mut server.admin())
        .unwrap();
    let fresh = locks
        .lock("job")
        .ttl(SEC)
        .acquire()
        .await
        .expect("free after DEL");
    assert!(fresh.fence() > stale.fence());

    assert!(
        !stale.release().await.unwrap(),
        "the stale guard no longer holds it"
    );
    let held = info(&mut server.admin(), "job").expect("still held by the fresh guard");
    assert_eq!(held["fence"], fresh.fence() as i64);
    assert!(fresh.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_it() {
    let server = Server::start();
    let locks = server.locks().await;
    let guard = locks
        .lock("job")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    drop(guard);
    let mut con = server.admin();
    common::wait_until(5 * SEC, || info(&mut con, "job").is_none());
}

/// A ledger that refuses a fence lower than the highest it has seen.
#[derive(Default)]
struct Ledger {
    highest_fence: u64,
    runs: Vec<u64>,
}

impl Ledger {
    fn write(&mut self, fence: u64) -> bool {
        if fence < self.highest_fence {
            return false;
        }
        self.highest_fence = fence;
        self.runs.push(fence);
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_runs_once_across_eight_concurrent_tasks() {
    let server = Server::start();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut previous_fence = 0;
    for _round in 0..2 {
        let barrier = Arc::new(Barrier::new(8));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let locks = server.locks().await;
            let ledger = ledger.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                locks
                    .lock("nightly-billing")
                    .ttl(2 * SEC)
                    .run(|held| async move {
                        // Hold the lock long enough for every rival to try.
                        tokio::time::sleep(SEC).await;
                        assert!(ledger.lock().await.write(held.fence), "stale fence");
                        held.fence
                    })
                    .await
            }));
        }
        let mut ran = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(fence) => ran.push(fence),
                Err(Error::NotAcquired) => {}
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert_eq!(ran.len(), 1, "exactly one task ran the job");
        assert!(ran[0] > previous_fence, "a later run has a larger fence");
        previous_fence = ran[0];
        // Released at the end of with_lock.
        assert!(info(&mut server.admin(), "nightly-billing").is_none());
    }
    assert_eq!(ledger.lock().await.runs.len(), 2);
    // A writer with the first round's fence is refused now.
    let first = ledger.lock().await.runs[0];
    assert!(!ledger.lock().await.write(first - 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_stops_the_work_when_the_lease_is_lost() {
    let server = Server::start();
    let locks = server.locks().await;
    let mut admin = server.admin();
    let outcome = locks
        .lock("job")
        .ttl(SEC)
        .run(|_held| async move {
            let _: i64 = redis::cmd("DEL").arg("job").query(&mut admin).unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            "finished"
        })
        .await;
    assert!(
        matches!(outcome, Err(Error::Lost(LostReason::Refused))),
        "got {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wait_is_handed_the_lock_on_release() {
    let server = Server::start();
    let locks = server.locks().await;
    let holder = locks.lock("job").ttl(10 * SEC).acquire().await.unwrap();
    let holder_fence = holder.fence();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("job").ttl(SEC).wait(10 * SEC).acquire().await })
    };
    let mut con = server.admin();
    common::wait_until(5 * SEC, || {
        info(&mut con, "job").is_some_and(|i| i["waiters"] == 1)
    });
    assert!(holder.release().await.unwrap());
    let guard = waiter.await.unwrap().expect("handed the lock");
    assert!(guard.fence() > holder_fence);
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wait_times_out_without_disturbing_other_guards() {
    let server = Server::start();
    let locks = server.locks().await;
    let rival = server.locks().await;
    let _taken = rival.lock("busy").ttl(10 * SEC).acquire().await.unwrap();
    // A short lease on the same Locks: its extends must not queue behind the
    // blocked wait (which has its own connection).
    let short = locks
        .lock("short")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let waited = locks.lock("busy").ttl(SEC).wait(2 * SEC).acquire().await;
    assert!(matches!(waited, Err(Error::TimedOut)), "got {waited:?}");
    assert!(
        !short.is_lost(),
        "the short lease was kept alive during the wait"
    );
    assert!(short.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_typed() {
    let server = Server::start();
    let locks = server.locks().await;
    assert!(matches!(
        locks.lock("job").ttl(Duration::ZERO).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("x")
        .query(&mut server.admin())
        .unwrap();
    match locks.lock("text").ttl(SEC).acquire().await {
        Err(Error::Server(e)) => assert_eq!(e.code(), Some("WRONGTYPE")),
        other => panic!("expected WRONGTYPE, got {other:?}"),
    }
    let plain = Locks::from_connection(
        server
            .redis_client()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    );
    assert!(matches!(
        plain.lock("job").ttl(SEC).wait(SEC).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    // A server without the module: refused by the version check at the
    // first command, before the lock command is sent.
    let bare = Launch::new().without_module().start();
    let no_module = Locks::from_connection(
        bare.redis_client()
            .get_multiplexed_async_connection()
            .await
            .expect("bare server up"),
    );
    let outcome = no_module.lock("job").ttl(SEC).acquire().await;
    assert!(
        matches!(
            outcome,
            Err(Error::ModuleVersion {
                found: None,
                required: 400
            })
        ),
        "got {outcome:?}"
    );
}
