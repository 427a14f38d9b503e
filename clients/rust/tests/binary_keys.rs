//! Keys are bytes: a key with NUL, `\r\n` and a high byte goes through every
//! path (acquire, the watchdog, extend, guard, info, queue, a waiting
//! hand-off, release, semaphores, elections) as the same key on the server,
//! never cut at the NUL nor confused with its prefix.

mod common;

use std::time::Duration;

use common::{info, LocksOn, Server};
use redis_lock_client::{redis, Election, Error, Semaphore};

const SEC: Duration = Duration::from_secs(1);
const KEY: &[u8] = b"{bin}lock\0with\r\nbytes\xff";
/// What a client that cuts at the NUL or at the line break would use.
const PREFIXES: [&[u8]; 2] = [b"{bin}lock", b"{bin}lock\0with"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_nul_and_crlf_is_one_key_everywhere() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;

    let guard = locks
        .lock(KEY)
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    assert_eq!(guard.key(), KEY);
    let held = info(&mut admin, KEY).expect("held under the whole key");
    assert_eq!(held["fence"], guard.fence() as i64);
    for prefix in PREFIXES {
        assert!(info(&mut admin, prefix).is_none(), "{prefix:?} is free");
    }
    let exists: i64 = redis::cmd("EXISTS").arg(KEY).query(&mut admin).unwrap();
    assert_eq!(exists, 1);

    // The session keeps it past three ttls; a manual extend too (with the
    // session's ttl).
    tokio::time::sleep(2 * SEC).await;
    assert!(!guard.is_lost(), "{:?}", guard.lost_signal().reason());
    guard.extend(Duration::from_millis(600)).await.unwrap();
    assert_eq!(
        info(&mut admin, KEY).unwrap()["fence"],
        guard.fence() as i64,
        "the same lease"
    );

    // A guarded write to another binary key of the same hash tag.
    let data: &[u8] = b"{bin}data\0\r\n";
    let () = guard
        .guarded(redis::cmd("SET").arg(data).arg(b"v\0\r\n"))
        .await
        .unwrap();
    let stored: Vec<u8> = redis::cmd("GET").arg(data).query(&mut admin).unwrap();
    assert_eq!(stored, b"v\0\r\n");

    // Typed info and queue, and a waiter handed the lock on release.
    let typed = locks.info(KEY).await.unwrap().expect("held");
    assert_eq!(typed.fence, guard.fence());
    let waiter = tokio::spawn(locks.lock(KEY).ttl(10 * SEC).wait(30 * SEC).acquire());
    common::wait_until(5 * SEC, || {
        info(&mut admin, KEY).is_some_and(|i| i["waiters"] == 1)
    });
    assert_eq!(locks.queue(KEY, 10).await.unwrap().len(), 1);
    assert!(locks.queue(PREFIXES[0], 10).await.unwrap().is_empty());
    let fence = guard.fence();
    assert!(guard.release().await.unwrap());
    let next = waiter.await.unwrap().expect("handed the lock");
    assert!(next.fence() > fence);
    assert!(matches!(
        locks.lock(KEY).acquire().await,
        Err(Error::NotAcquired)
    ));
    assert!(next.release().await.unwrap());
    assert!(info(&mut admin, KEY).is_none());
    assert!(locks.lock(Vec::from(KEY)).acquire().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_elections_take_binary_keys() {
    let server = Server::start();
    let locks = server.locks().await;
    let sem_key: &[u8] = b"renders\0\r\n\xfe";
    let renders = Semaphore::new(locks.clone(), sem_key, 2);
    let permit = renders.permits(2).ttl(10 * SEC).acquire().await.unwrap();
    assert_eq!(permit.key(), sem_key);
    let sem = renders.info().await.unwrap().expect("permits out");
    assert_eq!((sem.used, sem.fence), (2, permit.fence()));
    assert!(Semaphore::new(locks.clone(), &b"renders"[..], 2)
        .info()
        .await
        .unwrap()
        .is_none());
    assert!(permit.release().await.unwrap());

    let election_key: &[u8] = b"leader\0\r\n";
    let election = Election::new(locks.clone(), election_key, 10 * SEC);
    let leadership = election.campaign().await.unwrap();
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.fence, leadership.fence());
    let mut admin = server.admin();
    assert!(info(&mut admin, election_key).is_some());
    assert!(info(&mut admin, "leader").is_none());
    assert!(leadership.resign().await.unwrap());
}
