//! `Locks::info` (`LOCK.INFO`) and `Locks::queue` (`LOCK.QUEUE`), typed,
//! against a real redis-server with the module: the holder of an exclusive
//! and of a shared lock, the waiters in queue order with what each asked
//! for, and the errors.

mod common;

use std::time::{Duration, SystemTime};

use common::{LocksOn, Server};
use redis_lock_client::{redis, Error, LockMode, Semaphore, WaiterMode};

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_shows_the_holder_typed() {
    // Its own watchdog: a lease of its own (`extends`, its own deadline).
    let server = Server::start();
    let locks = server.watchdog_locks().await;
    assert_eq!(locks.info("job").await.unwrap(), None, "free");

    let before = SystemTime::now() - SEC;
    let guard = locks
        .lock("job")
        .ttl(10 * SEC)
        .owner("host-a:42")
        .acquire()
        .await
        .unwrap();
    let info = locks.info("job").await.unwrap().expect("held");
    assert_eq!(info.fence, guard.fence());
    assert_eq!(info.mode, LockMode::Exclusive);
    assert_eq!((info.holders, info.waiters, info.extends), (1, 0, 0));
    assert_eq!(info.owner.as_deref(), Some(&b"host-a:42"[..]));
    let ttl = info.ttl.expect("a TTL");
    assert!(ttl > Duration::ZERO && ttl <= 10 * SEC, "{ttl:?}");
    let granted = info.granted.expect("a grant time");
    let deadline = info.deadline.expect("a deadline");
    assert!(granted > before, "granted on the server's (same) clock");
    assert_eq!(deadline.duration_since(granted).unwrap(), 10 * SEC);

    guard.extend(10 * SEC).await.unwrap();
    assert_eq!(locks.info("job").await.unwrap().unwrap().extends, 1);

    // PERSIST removes the TTL: no ttl and no deadline.
    let _: i64 = redis::cmd("PERSIST")
        .arg("job")
        .query(&mut server.admin())
        .unwrap();
    let info = locks.info("job").await.unwrap().unwrap();
    assert_eq!((info.ttl, info.deadline), (None, None));
    assert!(guard.release().await.unwrap());

    let first = locks.lock("catalog").shared().acquire().await.unwrap();
    let second = locks.lock("catalog").shared().acquire().await.unwrap();
    let info = locks.info("catalog").await.unwrap().unwrap();
    assert_eq!((info.mode, info.holders), (LockMode::Shared, 2));
    assert_eq!(info.fence, second.fence(), "the highest reader fence");
    assert_eq!(info.owner, None);
    drop((first, second));

    // Another type is WRONGTYPE, a semaphore's key included.
    let _permit = Semaphore::new(locks.clone(), "renders", 2)
        .permits(1)
        .acquire()
        .await
        .unwrap();
    match locks.info("renders").await {
        Err(Error::Server(e)) => assert_eq!(e.code(), Some("WRONGTYPE")),
        other => panic!("expected WRONGTYPE, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_lists_the_waiters_in_order_with_what_they_asked_for() {
    let server = Server::start();
    let locks = server.locks().await;
    assert!(locks.queue("job", 10).await.unwrap().is_empty());
    let holder = locks.lock("job").ttl(10 * SEC).acquire().await.unwrap();

    // A writer waiting 30 s, then a reader waiting without limit: queued in
    // that order (each is queued before the next one starts).
    let writer = {
        let request = locks
            .lock("job")
            .ttl(5 * SEC)
            .wait(30 * SEC)
            .owner("writer");
        tokio::spawn(request.acquire())
    };
    common::wait_until(5 * SEC, || queued(&server, "job") == 1);
    let reader = tokio::spawn(
        locks
            .lock("job")
            .ttl(7 * SEC)
            .shared()
            .wait_forever()
            .owner("reader")
            .acquire(),
    );
    common::wait_until(5 * SEC, || queued(&server, "job") == 2);

    let waiters = locks.queue("job", 10).await.unwrap();
    assert_eq!(waiters.len(), 2);
    let (first, second) = (&waiters[0], &waiters[1]);
    assert_eq!(first.mode, WaiterMode::Exclusive);
    assert_eq!(first.owner.as_deref(), Some(&b"writer"[..]));
    assert_eq!(first.ttl, 5 * SEC);
    let left = first.timeout.expect("a 30 s wait");
    assert!(left > Duration::ZERO && left <= 30 * SEC, "{left:?}");
    assert_eq!(second.mode, WaiterMode::Shared);
    assert_eq!(second.owner.as_deref(), Some(&b"reader"[..]));
    assert_eq!((second.ttl, second.timeout), (7 * SEC, None));
    assert_ne!(first.client, second.client);
    assert!(first.waited >= second.waited, "the first has waited longer");
    assert_eq!(locks.info("job").await.unwrap().unwrap().waiters, 2);

    let only_first = locks.queue("job", 1).await.unwrap();
    assert_eq!(only_first.len(), 1);
    assert_eq!(only_first[0].client, first.client);
    for count in [0, 1001] {
        assert!(matches!(
            locks.queue("job", count).await,
            Err(Error::InvalidArgument(_))
        ));
    }

    // Handed over in that order.
    assert!(holder.release().await.unwrap());
    let writer = writer
        .await
        .unwrap()
        .expect("the writer is handed the lock");
    assert_eq!(locks.queue("job", 10).await.unwrap().len(), 1);
    assert!(writer.release().await.unwrap());
    let reader = reader.await.unwrap().expect("then the reader");
    assert!(reader.is_shared());
    assert!(locks.queue("job", 10).await.unwrap().is_empty());
    drop(reader);

    // A semaphore's waiters, with their count.
    let renders = Semaphore::new(locks.clone(), "renders", 3);
    let _all = renders.permits(3).ttl(10 * SEC).acquire().await.unwrap();
    let waiting = tokio::spawn(renders.permits(2).wait(30 * SEC).acquire());
    common::wait_until(5 * SEC, || queued(&server, "renders") == 1);
    let waiters = locks.queue("renders", 10).await.unwrap();
    assert_eq!(waiters[0].mode, WaiterMode::Permits { count: 2 });
    waiting.abort();
}

/// How many clients wait for `key`, from the server's own view.
fn queued(server: &Server, key: &str) -> usize {
    let waiters: Vec<redis::Value> = redis::cmd("LOCK.QUEUE")
        .arg(key)
        .query(&mut server.admin())
        .expect("LOCK.QUEUE");
    waiters.len()
}
