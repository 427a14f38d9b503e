//! Redlock over five independent redis-servers with the module: kills,
//! SIGSTOP, fences across holders, loss of the majority.

mod common;

use std::time::Duration;

use common::{LocksOn, Server};
use redis_lock_client::{Error, FenceCheck, Locks, LostReason, Redlock, RedlockOptions};
use tokio::time::{timeout, Instant};

const SEC: Duration = Duration::from_secs(1);

fn five() -> Vec<Server> {
    (0..5).map(|_| Server::start()).collect()
}

async fn redlock(servers: &[Server], options: RedlockOptions) -> Redlock {
    let mut nodes: Vec<Locks> = Vec::new();
    for server in servers {
        nodes.push(server.locks().await);
    }
    Redlock::new(nodes).with_options(options)
}

/// Few, quick attempts: a test of a refusal should not sit in retries.
fn quick() -> RedlockOptions {
    RedlockOptions::default()
        .attempts(2)
        .retry_delay(Duration::from_millis(50))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_with_two_servers_killed_and_fails_with_three() {
    let mut servers = five();
    let redlock = redlock(&servers, quick()).await;
    assert_eq!(redlock.quorum(), 3);
    servers[0].kill();
    servers[3].kill();

    let guard = redlock
        .acquire("job", 2 * SEC)
        .await
        .expect("three of five is a majority");
    let granted: Vec<usize> = (0..5).filter(|&i| guard.fences()[i].is_some()).collect();
    assert_eq!(granted, vec![1, 2, 4]);
    assert!(guard.release().await.unwrap());

    servers[4].kill();
    match redlock.acquire("job", 2 * SEC).await {
        Err(Error::NoQuorum {
            granted,
            refused,
            failed,
        }) => assert_eq!((granted, refused, failed), (2, 0, 3)),
        other => panic!(
            "expected NoQuorum, got {:?}",
            other.map(|g| g.fences().to_vec())
        ),
    }
    // The failed attempts gave back what they got on the live nodes.
    for i in [1, 2] {
        assert!(
            common::info(&mut servers[i].admin(), "job").is_none(),
            "node {i} released"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_within_the_validity_with_one_server_stopped() {
    let servers = five();
    let ttl = 2 * SEC;
    let redlock = redlock(&servers, quick().node_timeout(Duration::from_millis(200))).await;
    servers[2].pause();
    let sent = Instant::now();
    let acquired = redlock.acquire("job", ttl).await;
    let took = sent.elapsed();
    servers[2].resume();
    let guard = acquired.expect("four of five answered");
    assert_eq!(
        guard.fences()[2],
        None,
        "the stopped node did not answer in time"
    );
    assert_eq!(guard.fences().iter().flatten().count(), 4);
    // Within the validity: the node timeout bounded the wait for the stopped one.
    assert!(took < ttl, "acquire took {took:?}, longer than the ttl");
    assert!(!guard.is_lost());
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_fence_grows_across_successive_holders() {
    let mut servers = five();
    let redlock = redlock(&servers, quick()).await;
    let mut check = FenceCheck::new(5);
    let mut previous = 0;
    let mut first_fences = None;
    for holder in 0..6 {
        // Different majorities: kill one node half-way through.
        if holder == 3 {
            servers[1].kill();
        }
        let guard = redlock.acquire("job", 2 * SEC).await.expect("majority");
        let combined = guard.combined_fence();
        assert!(
            combined > previous,
            "holder {holder}: {combined} after {previous}"
        );
        assert!(
            check.admit(guard.fences()),
            "holder {holder}'s fences are admitted"
        );
        first_fences.get_or_insert_with(|| guard.fences().to_vec());
        previous = combined;
        assert!(guard.release().await.unwrap());
    }
    // The first holder, were it to come back now, is refused.
    assert!(!check.admit(&first_fences.unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_majority_fires_lost() {
    let mut servers = five();
    let redlock = redlock(&servers, quick()).await;
    let guard = redlock.acquire("job", SEC).await.unwrap();
    // It holds through a few extend rounds first.
    tokio::time::sleep(2 * SEC).await;
    assert!(!guard.is_lost());
    for i in [0, 2, 4] {
        servers[i].kill();
    }
    let reason = timeout(5 * SEC, guard.lost()).await.expect("lost() fired");
    assert_eq!(reason, LostReason::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_redlock_is_refused_to_others_and_with_lock_runs_once() {
    let servers = five();
    let a = redlock(&servers, quick()).await;
    let b = redlock(&servers, quick()).await;
    let guard = a.acquire("job", 2 * SEC).await.unwrap();
    assert!(
        matches!(b.acquire("job", 2 * SEC).await, Err(Error::NotAcquired)),
        "refused: held by a"
    );
    assert!(matches!(
        b.with_lock("job", 2 * SEC, |_| async {}).await,
        Err(Error::NotAcquired)
    ));
    let combined = guard.combined_fence();
    assert!(guard.release().await.unwrap());
    let fence = b
        .with_lock("job", 2 * SEC, |held| async move { held.fence })
        .await
        .unwrap();
    assert!(fence > combined);
}
