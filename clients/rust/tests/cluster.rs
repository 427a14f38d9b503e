//! A 3-master Redis Cluster with the module on every master: the lock
//! commands route by their key, across many slots; a guarded write goes to
//! the lock key's master, with its keys in the same slot; one session (one
//! server lease) per master.

mod common;

use std::time::Duration;

use common::{info_field, Cluster, LocksOn};
use redis::cluster::ClusterClient;
use redis_lock_client::{Error, Locks, LostReason};

const SEC: Duration = Duration::from_secs(1);

fn dbsize(con: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_release_across_many_slots() {
    let cluster = Cluster::start();
    let client = ClusterClient::new(cluster.urls()).unwrap();
    let locks = Locks::connect_cluster(client.clone()).await.unwrap();
    let rival = Locks::connect_cluster(client).await.unwrap();

    let keys: Vec<String> = (0..300).map(|i| format!("lock:{i}")).collect();
    let mut guards = Vec::new();
    for key in &keys {
        let guard = locks
            .lock(key)
            .ttl(10 * SEC)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{key} is free: {e}"));
        guards.push(guard);
    }
    // Every master holds a share of the locks, and they add up.
    let per_node: Vec<i64> = cluster
        .nodes
        .iter()
        .map(|n| dbsize(&mut n.admin()))
        .collect();
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys on every master: {per_node:?}"
    );
    assert_eq!(per_node.iter().sum::<i64>(), keys.len() as i64);

    // Held for anyone else, through the same routing.
    for key in keys.iter().step_by(37) {
        assert!(
            matches!(
                rival.lock(key).ttl(SEC).acquire().await,
                Err(Error::NotAcquired)
            ),
            "{key} is held"
        );
    }
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
    let per_node: Vec<i64> = cluster
        .nodes
        .iter()
        .map(|n| dbsize(&mut n.admin()))
        .collect();
    assert_eq!(per_node, vec![0, 0, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_the_watchdog_and_guarded_writes_work_in_a_cluster() {
    let cluster = Cluster::start();
    let client = ClusterClient::new(cluster.urls()).unwrap();
    let locks = Locks::connect_cluster(client.clone()).await.unwrap();
    let holder = locks.lock("{billing}").ttl(SEC).acquire().await.unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .lock("{billing}")
                .ttl(SEC)
                .wait(10 * SEC)
                .acquire()
                .await
        })
    };
    // The holder outlives its ttl twice over: the watchdog extends through
    // the cluster connection.
    tokio::time::sleep(2 * SEC).await;
    assert!(!holder.is_lost());
    assert!(!waiter.is_finished(), "still waiting");
    let fence = holder.fence();
    assert!(holder.release().await.unwrap());
    let next = waiter.await.unwrap().expect("handed the lock");
    assert!(next.fence() > fence);

    // LOCK.GUARD is routed by the lock key; the total shares its hash tag.
    let total: i64 = next
        .guarded(redis::cmd("INCRBY").arg("{billing}:total").arg(7))
        .await
        .unwrap();
    assert_eq!(total, 7);
    // A holder whose lock was released behind its back (by its token).
    let stale = locks
        .lock("{billing}:other")
        .ttl(SEC)
        .acquire()
        .await
        .unwrap();
    let mut admin = client.get_async_connection().await.unwrap();
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg("{billing}:other")
        .arg(stale.token())
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(released, 1);
    let refused = stale
        .guarded::<i64>(redis::cmd("INCRBY").arg("{billing}:total").arg(1))
        .await;
    assert!(
        matches!(refused, Err(Error::Lost(LostReason::NotHeld))),
        "got {refused:?}"
    );
    let total: i64 = next
        .guarded(redis::cmd("GET").arg("{billing}:total"))
        .await
        .unwrap();
    assert_eq!(total, 7, "the stale write did not land");
    assert!(next.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_per_master_keeps_every_hold_of_its_slots() {
    let cluster = Cluster::start();
    let client = ClusterClient::new(cluster.urls()).unwrap();
    let locks = Locks::connect_cluster(client).await.unwrap();
    let ttl = Duration::from_millis(1200);
    let mut guards = Vec::new();
    for i in 0..150 {
        let guard = locks
            .lock(format!("lock:{i}"))
            .ttl(ttl)
            .acquire()
            .await
            .unwrap();
        guards.push(guard);
    }
    // A hold attaches to the lease of its key's master: three leases, one
    // on each master, each with the holds of its slots.
    let sessions = locks.sessions();
    assert_eq!(sessions.len(), 3);
    assert_eq!(sessions.iter().map(|s| s.holds()).sum::<usize>(), 150);
    for node in &cluster.nodes {
        let mut admin = node.admin();
        assert_eq!(info_field(&mut admin, "lock", "lock_leases"), "1");
        let keys: i64 = redis::cmd("DBSIZE").query(&mut admin).unwrap();
        let leased: Vec<String> = redis::cmd("KEYS").arg("lock:*").query(&mut admin).unwrap();
        assert_eq!(leased.len() as i64, keys);
        // Every key of this master is attached to this master's lease.
        let numbers: std::collections::HashSet<Option<u64>> = {
            let mut numbers = std::collections::HashSet::new();
            for key in &leased {
                numbers.insert(locks.info(key).await.unwrap().unwrap().lease);
            }
            numbers
        };
        assert_eq!(numbers.len(), 1, "one lease per master: {numbers:?}");
        assert!(!numbers.contains(&None));
    }
    tokio::time::sleep(3 * ttl).await;
    assert!(guards.iter().all(|g| !g.is_lost()));
    for node in &cluster.nodes {
        let stats = info_field(&mut node.admin(), "commandstats", "cmdstat_lock.extend");
        assert_eq!(stats, "", "no per-lock extend");
    }
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
    assert!(sessions.iter().all(|s| s.holds() == 0));
}
