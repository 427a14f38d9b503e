//! Shared guards (read leases) and semaphore permits through the client:
//! readers together, a writer excluded, the watchdog and the loss signal for
//! both, the limit, and waiting acquires handed what they wait for.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{info, LocksOn, Server};
use redis_lock_client::{Error, LostReason, Semaphore};
use tokio::time::timeout;

const SEC: Duration = Duration::from_secs(1);

/// `LOCK.INFO key`'s `mode`, `None` when free.
fn mode(con: &mut redis::Connection, key: &str) -> Option<String> {
    let fields: Option<HashMap<String, redis::Value>> =
        redis::cmd("LOCK.INFO").arg(key).query(con).unwrap();
    match fields?.remove("mode")? {
        redis::Value::BulkString(b) => Some(String::from_utf8(b).unwrap()),
        redis::Value::SimpleString(s) => Some(s),
        other => panic!("mode {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_hold_a_key_together_and_a_writer_is_excluded() {
    let server = Server::start();
    let locks = server.locks().await;
    let mut con = server.admin();
    let first = locks
        .lock("catalog")
        .ttl(10 * SEC)
        .shared()
        .acquire()
        .await
        .expect("a reader");
    let second = locks
        .lock("catalog")
        .ttl(10 * SEC)
        .shared()
        .acquire()
        .await
        .expect("another reader");
    assert!(first.is_shared() && second.is_shared());
    assert!(second.fence() > first.fence(), "each reader its own fence");
    assert_ne!(first.token(), second.token());
    assert_eq!(mode(&mut con, "catalog").as_deref(), Some("shared"));
    assert_eq!(info(&mut con, "catalog").unwrap()["holders"], 2);

    assert!(matches!(
        locks.lock("catalog").ttl(SEC).acquire().await,
        Err(Error::NotAcquired)
    ));
    assert!(matches!(
        locks.lock("catalog").ttl(SEC).run(|_| async {}).await,
        Err(Error::NotAcquired)
    ));
    // One reader leaving keeps the writer out; the last one lets it in.
    assert!(first.release().await.unwrap());
    assert_eq!(info(&mut con, "catalog").unwrap()["holders"], 1);
    assert!(matches!(
        locks.lock("catalog").ttl(SEC).acquire().await,
        Err(Error::NotAcquired)
    ));
    let reader_fence = second.fence();
    assert!(second.release().await.unwrap());
    let writer = locks.lock("catalog").ttl(10 * SEC).acquire().await.unwrap();
    assert!(!writer.is_shared());
    assert!(writer.fence() > reader_fence);
    assert!(matches!(
        locks.lock("catalog").ttl(SEC).shared().acquire().await,
        Err(Error::NotAcquired)
    ));
    assert!(matches!(
        locks
            .lock("catalog")
            .ttl(SEC)
            .shared()
            .run(|_| async {})
            .await,
        Err(Error::NotAcquired)
    ));
    let writer_fence = writer.fence();
    assert!(writer.release().await.unwrap());
    let fence = locks
        .lock("catalog")
        .ttl(SEC)
        .shared()
        .run(|held| async move { held.fence })
        .await
        .unwrap();
    assert!(fence > writer_fence);
    assert!(
        info(&mut con, "catalog").is_none(),
        "released after the work"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_readers_are_handed_the_key_together_when_the_writer_leaves() {
    let server = Server::start();
    let locks = server.locks().await;
    let writer = locks.lock("catalog").ttl(10 * SEC).acquire().await.unwrap();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                locks
                    .lock("catalog")
                    .ttl(SEC)
                    .shared()
                    .wait(10 * SEC)
                    .acquire()
                    .await
            })
        })
        .collect();
    let mut con = server.admin();
    common::wait_until(5 * SEC, || {
        info(&mut con, "catalog").is_some_and(|i| i["waiters"] == 2)
    });
    let writer_fence = writer.fence();
    assert!(writer.release().await.unwrap());
    let mut guards = Vec::new();
    for reader in readers {
        guards.push(reader.await.unwrap().expect("handed a read lease"));
    }
    assert!(guards.iter().all(|g| g.fence() > writer_fence));
    assert_eq!(info(&mut con, "catalog").unwrap()["holders"], 2);
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_reader_and_a_permit_past_four_ttls() {
    let server = Server::start();
    let locks = server.locks().await;
    let reader = locks
        .lock("catalog")
        .ttl(SEC)
        .shared()
        .acquire()
        .await
        .unwrap();
    let renders = Semaphore::new(locks.clone(), "renders", 2);
    let permit = renders.permits(1).ttl(SEC).acquire().await.unwrap();
    tokio::select! {
        reason = reader.lost() => panic!("reader lost: {reason}"),
        reason = permit.lost() => panic!("permit lost: {reason}"),
        _ = tokio::time::sleep(4 * SEC) => {}
    }
    assert!(!reader.is_lost() && !permit.is_lost());
    let held = info(&mut server.admin(), "catalog").expect("still read-locked");
    assert_eq!(held["fence"], reader.fence() as i64, "never re-granted");
    let sem = renders.info().await.unwrap().expect("a permit is out");
    assert_eq!((sem.used, sem.holders), (1, 1));
    assert_eq!(sem.fence, permit.fence());
    assert!(reader.release().await.unwrap());
    assert!(permit.release().await.unwrap());
    assert!(renders.info().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_fires_lost_for_a_reader_and_a_permit() {
    let server = Server::start();
    let locks = server.locks().await;
    let reader = locks
        .lock("catalog")
        .ttl(SEC)
        .shared()
        .acquire()
        .await
        .unwrap();
    let permit = Semaphore::new(locks.clone(), "renders", 3)
        .permits(2)
        .ttl(SEC)
        .acquire()
        .await
        .unwrap();
    assert_eq!(permit.count(), 2);
    let _: i64 = redis::cmd("DEL")
        .arg("catalog")
        .arg("renders")
        .query(&mut server.admin())
        .unwrap();
    let reader_lost = timeout(5 * SEC, reader.lost()).await.expect("fired");
    let permit_lost = timeout(5 * SEC, permit.lost()).await.expect("fired");
    assert_eq!(
        (reader_lost, permit_lost),
        (LostReason::Refused, LostReason::Refused)
    );
    assert!(!reader.release().await.unwrap(), "nothing left to release");
    assert!(!permit.release().await.unwrap(), "nothing left to release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_has_more_than_limit_permits_out() {
    let server = Server::start();
    let locks = server.locks().await;
    let renders = Semaphore::new(locks, "renders", 3);
    let two = renders.permits(2).ttl(10 * SEC).acquire().await.unwrap();
    assert!(
        matches!(
            renders.permits(2).ttl(SEC).acquire().await,
            Err(Error::NotAcquired)
        ),
        "one left"
    );
    let one = renders.permits(1).ttl(10 * SEC).acquire().await.unwrap();
    assert!(one.fence() > two.fence());
    assert!(
        matches!(
            renders.permits(1).ttl(SEC).acquire().await,
            Err(Error::NotAcquired)
        ),
        "none left"
    );
    let info = renders.info().await.unwrap().unwrap();
    assert_eq!((info.limit, info.used, info.holders), (3, 3, 2));
    assert!(two.release().await.unwrap());
    assert!(one.release().await.unwrap());

    // Eight workers, each waiting for a permit and holding it a while: at
    // no time more than three at work.
    let running = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let renders = renders.clone();
            let (running, most) = (running.clone(), most.clone());
            tokio::spawn(async move {
                let permit = renders.permits(1).ttl(SEC).wait(30 * SEC).acquire().await?;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(300)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                permit.release().await
            })
        })
        .collect();
    for worker in workers {
        assert!(worker.await.unwrap().expect("a permit in time"));
    }
    assert_eq!(most.load(Ordering::SeqCst), 3, "the limit, and no more");
    assert!(renders.info().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_is_handed_a_permit_on_release() {
    let server = Server::start();
    let locks = server.locks().await;
    let renders = Semaphore::new(locks, "renders", 2);
    let all = renders.permits(2).ttl(10 * SEC).acquire().await.unwrap();
    let waiter = {
        let renders = renders.clone();
        tokio::spawn(async move { renders.permits(1).ttl(SEC).wait(10 * SEC).acquire().await })
    };
    let timed_out = renders
        .permits(1)
        .ttl(SEC)
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(
        matches!(timed_out, Err(Error::TimedOut)),
        "got {timed_out:?}"
    );
    assert_eq!(renders.info().await.unwrap().unwrap().waiters, 1);
    let all_fence = all.fence();
    assert!(all.release().await.unwrap());
    let permit = waiter.await.unwrap().expect("handed a permit");
    assert!(permit.fence() > all_fence);
    assert_eq!(renders.info().await.unwrap().unwrap().used, 1);
    assert!(permit.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_counts_other_limits_and_other_types_are_errors() {
    let server = Server::start();
    let locks = server.locks().await;
    let renders = Semaphore::new(locks.clone(), "renders", 2);
    for count in [0, 3] {
        assert!(matches!(
            renders.permits(count).ttl(SEC).acquire().await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        Semaphore::new(locks.clone(), "renders", 0)
            .permits(1)
            .ttl(SEC)
            .acquire()
            .await,
        Err(Error::InvalidArgument(_))
    ));
    let _held = renders.permits(1).ttl(10 * SEC).acquire().await.unwrap();
    match Semaphore::new(locks.clone(), "renders", 5)
        .permits(1)
        .ttl(SEC)
        .acquire()
        .await
    {
        Err(Error::Server(e)) => assert!(e.to_string().contains("limit differs"), "{e}"),
        other => panic!("expected ERR limit differs, got {other:?}"),
    }
    // A semaphore is not a lock, and a lock is not a semaphore.
    match locks.lock("renders").ttl(SEC).shared().acquire().await {
        Err(Error::Server(e)) => assert_eq!(e.code(), Some("WRONGTYPE")),
        other => panic!("expected WRONGTYPE, got {other:?}"),
    }
    let _lock = locks.lock("job").ttl(10 * SEC).acquire().await.unwrap();
    match Semaphore::new(locks, "job", 2)
        .permits(1)
        .ttl(SEC)
        .acquire()
        .await
    {
        Err(Error::Server(e)) => assert_eq!(e.code(), Some("WRONGTYPE")),
        other => panic!("expected WRONGTYPE, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_guards_reads_but_not_writes() {
    let server = Server::start();
    let locks = server.locks().await;
    let _: () = redis::cmd("SET")
        .arg("{catalog}:items")
        .arg("12")
        .query(&mut server.admin())
        .unwrap();
    let reader = locks
        .lock("{catalog}")
        .ttl(10 * SEC)
        .shared()
        .acquire()
        .await
        .unwrap();
    let items: String = reader
        .guarded(redis::cmd("GET").arg("{catalog}:items"))
        .await
        .unwrap();
    assert_eq!(items, "12");
    let write = reader
        .guarded::<()>(redis::cmd("SET").arg("{catalog}:items").arg("13"))
        .await;
    assert!(matches!(write, Err(Error::Server(_))), "got {write:?}");
    assert!(!reader.is_lost(), "a refused write does not lose the lease");
    assert!(reader.release().await.unwrap());
}
