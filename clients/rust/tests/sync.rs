//! `sync(replicas, timeout)`, the module's `SYNC`: a grant (an extension,
//! a guarded write) answered only once that many replicas hold it, and
//! `Error::NotReplicated` when fewer did in time (a grant is then undone by
//! the server). Against a real master with a replica, or without one.
//!
//! Redis 7.0's replicas acknowledge once a second, so a synced request
//! takes up to a second there (a few ms elsewhere): the tests make few,
//! give timeouts that are never waited out when a replica is there, and
//! assert no duration.

mod common;

use std::time::Duration;

use common::{info, info_field, pair, LocksOn, Server};
use redis_lock_client::{Election, Error, Locks, LostReason, ReplicaSync};

const SEC: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(30);
/// Room for Redis 7.0's acknowledgements once a second.
const SYNCED: Duration = Duration::from_secs(5);
/// Wanted where no replica (or not that many) is: NOSYNC.
const UNMET: Duration = Duration::from_millis(200);

fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

fn dbsize(con: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_grant_extension_guarded_write_and_waited_grant_are_on_the_replica_when_answered()
{
    let (master, replica) = pair();
    let locks = master.locks().await;
    let mut follower = replica.admin();
    let guard = locks
        .lock("{billing}")
        .ttl(TTL)
        .sync(1, SYNCED)
        .acquire()
        .await
        .expect("granted once the replica holds it");
    assert_eq!(guard.sync(), Some(ReplicaSync::new(1, SYNCED)));
    // Read at once, no waiting: the reply came once the replica held it.
    let held = info(&mut follower, "{billing}").expect("on the replica");
    assert_eq!(held["fence"], guard.fence() as i64);

    guard
        .extend(600 * SEC)
        .await
        .expect("extended, with the guard's sync");
    assert!(
        pttl(&mut follower, "{billing}") > 30_000,
        "the extension is on the replica"
    );

    let total: i64 = guard
        .guarded_synced(
            redis::cmd("INCRBY").arg("{billing}:total").arg(7),
            ReplicaSync::new(1, SYNCED),
        )
        .await
        .expect("the command's own reply");
    assert_eq!(total, 7);
    assert_eq!(get(&mut follower, "{billing}:total").as_deref(), Some("7"));

    // A waiter granted from the queue (then its pinning extend), synced.
    let waiting = locks.clone();
    let waiter = tokio::spawn(async move {
        waiting
            .lock("{billing}")
            .ttl(TTL)
            .wait(10 * SEC)
            .sync(1, SYNCED)
            .acquire()
            .await
    });
    let mut admin = master.admin();
    common::wait_until(10 * SEC, || {
        info(&mut admin, "{billing}").is_some_and(|i| i["waiters"] == 1)
    });
    let first_fence = guard.fence();
    assert!(guard.release().await.unwrap());
    let next = waiter.await.unwrap().expect("handed the lock, synced");
    assert!(next.fence() > first_fence);
    let held = info(&mut follower, "{billing}").expect("on the replica");
    assert_eq!(held["fence"], next.fence() as i64);
    assert!(next.release().await.unwrap());

    // More replicas than there are: undone, nothing held.
    let refused = locks.lock("other").ttl(TTL).sync(2, UNMET).acquire().await;
    match refused {
        // Redis 7.0's replica may not have acknowledged in 200 ms.
        Err(Error::NotReplicated {
            acked,
            wanted: 2,
            undone: true,
        }) => assert!(acked <= 1),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(info(&mut admin, "other").is_none(), "undone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_enough_replicas_nothing_is_held_and_the_error_says_what_stands() {
    let server = Server::start();
    let locks = server.watchdog_locks().await;
    let mut admin = server.admin();
    let acquired = locks
        .lock("billing")
        .ttl(TTL)
        .sync(1, UNMET)
        .acquire()
        .await;
    assert!(
        matches!(
            acquired,
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1,
                undone: true
            })
        ),
        "got {acquired:?}"
    );
    let ran = locks
        .lock("billing")
        .ttl(TTL)
        .sync(1, UNMET)
        .run(|_| async { panic!("the work must not run") })
        .await;
    assert!(
        matches!(ran, Err(Error::NotReplicated { .. })),
        "got {ran:?}"
    );
    let permits = redis_lock_client::Semaphore::new(locks.clone(), "renders", 2)
        .permits(1)
        .ttl(TTL)
        .sync(1, UNMET)
        .acquire()
        .await;
    assert!(matches!(
        permits,
        Err(Error::NotReplicated { undone: true, .. })
    ));
    // Granted from the queue (WAIT), then undone.
    let campaign = Election::new(locks.clone(), "leader", TTL)
        .sync(1, UNMET)
        .campaign_timeout(SEC)
        .await;
    assert!(
        matches!(campaign, Err(Error::NotReplicated { undone: true, .. })),
        "got {campaign:?}"
    );
    assert_eq!(dbsize(&mut admin), 0, "undone by the server");
    let stats = info_field(&mut admin, "commandstats", "cmdstat_lock.release")
        + &info_field(&mut admin, "commandstats", "cmdstat_sem.release");
    assert_eq!(stats, "", "nothing given back: nothing to give");

    // An extension stands, a guarded command ran: each says so, and the
    // lease is kept, its deadline where the last replicated extend put it.
    let guard = locks.lock("billing").ttl(TTL).acquire().await.unwrap();
    let deadline = guard.deadline();
    let extended = guard
        .extend_synced(600 * SEC, ReplicaSync::new(1, UNMET))
        .await;
    let error = extended.expect_err("not replicated");
    assert!(
        matches!(
            error,
            Error::NotReplicated {
                acked: 0,
                wanted: 1,
                undone: false
            }
        ),
        "got {error:?}"
    );
    assert!(
        !error.to_string().contains(guard.token()),
        "no token in errors"
    );
    assert!(
        pttl(&mut admin, "billing") > 30_000,
        "it stands on the master"
    );
    assert_eq!(guard.deadline(), deadline, "but is not counted");
    assert!(guard.held() && !guard.is_lost());
    let guarded = guard
        .guarded_synced::<()>(
            redis::cmd("SET").arg("billing:total").arg(1),
            ReplicaSync::new(2, UNMET),
        )
        .await;
    assert!(
        matches!(guarded, Err(Error::NotReplicated { undone: false, .. })),
        "got {guarded:?}"
    );
    assert_eq!(
        get(&mut admin, "billing:total").as_deref(),
        Some("1"),
        "it ran"
    );
    assert!(guard.held());
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_arguments_are_checked_before_sending() {
    let server = Server::start();
    let locks = server.locks().await;
    let mut admin = server.admin();
    for (replicas, timeout, ttl) in [
        (1001, SEC, TTL),
        (1, Duration::ZERO, TTL),
        (1, Duration::from_secs(366 * 86_400), TTL),
        // The ttl less the margin (a tenth): 0.9 s.
        (1, Duration::from_millis(900), SEC),
    ] {
        let outcome = locks
            .lock("billing")
            .ttl(ttl)
            .sync(replicas, timeout)
            .acquire()
            .await;
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{replicas} {timeout:?}: {outcome:?}"
        );
    }
    assert_eq!(dbsize(&mut admin), 0, "nothing sent");
    // A connection given by hand has no way to open one of its own.
    let conn = redis_lock_client::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let outcome = Locks::from_connection(conn)
        .lock("billing")
        .sync(1, SEC)
        .acquire()
        .await;
    assert!(
        matches!(outcome, Err(Error::InvalidArgument(_))),
        "{outcome:?}"
    );
    // 0 replicas: no SYNC at all.
    let guard = locks
        .lock("billing")
        .ttl(SEC)
        .sync(0, Duration::from_millis(900))
        .acquire()
        .await
        .expect("granted without replicas");
    assert_eq!(guard.sync(), None);
    let too_long = guard.extend_synced(SEC, ReplicaSync::new(1, SEC)).await;
    assert!(
        matches!(too_long, Err(Error::InvalidArgument(_))),
        "{too_long:?}"
    );
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_extends_with_sync_and_loses_the_lease_when_the_replica_goes() {
    let (master, mut replica) = pair();
    let locks = master.locks().await;
    let mut admin = master.admin();
    let synced = locks
        .lock("synced")
        .ttl(3 * SEC)
        .sync(1, Duration::from_millis(1500))
        .acquire()
        .await
        .expect("granted");
    let plain = locks.lock("plain").ttl(3 * SEC).acquire().await.unwrap();
    // An extend with SYNC, acknowledged.
    common::wait_until(10 * SEC, || {
        info(&mut admin, "synced").is_some_and(|i| i["extends"] >= 1)
    });
    assert!(synced.held() && !synced.is_lost());

    replica.kill(); // its extends are now answered NOSYNC: not counted
    let reason = tokio::time::timeout(10 * SEC, synced.lost())
        .await
        .expect("lost before its deadline");
    assert_eq!(reason, LostReason::NotReplicated);
    assert!(
        info(&mut admin, "synced").is_some(),
        "the master still holds it: the extensions stand"
    );
    assert!(plain.held(), "a lease without sync is not concerned");
    assert!(synced.release().await.unwrap());
    assert!(plain.release().await.unwrap());
}
