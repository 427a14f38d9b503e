//! Several locks taken in one step (`Locks::lock_many`, `LOCK.MACQUIRE`,
//! issue 28): one guard, one token, one fence and one deadline for the
//! whole set, all or nothing; kept alive by the session (`LEASE`, a hold
//! per key) or a watchdog (`LOCK.MEXTEND`), lost when any key is, released
//! together
//! (`LOCK.MRELEASE`). Against a real server with the module.

mod common;

use std::time::Duration;

use common::{info, info_field, LocksOn, Server};
use redis_lock_client::{redis, Error, LostReason};
use tokio::time::timeout;

const SEC: Duration = Duration::from_secs(1);
const KEYS: [&str; 3] = ["{order}:stock", "{order}:payment", "{order}:mail"];

/// A command's `calls=` in `INFO commandstats` (0 when never called).
fn calls(con: &mut redis::Connection, command: &str) -> u64 {
    info_field(con, "commandstats", &format!("cmdstat_{command}"))
        .split(',')
        .find_map(|kv| kv.strip_prefix("calls="))
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_granted_with_one_fence_and_released_together() {
    let server = Server::start();
    let mut admin = server.admin();
    for locks in [server.locks().await, server.watchdog_locks().await] {
        let guard = locks.lock_many(KEYS).acquire().await.unwrap();
        assert_eq!(
            guard.keys(),
            KEYS.map(str::as_bytes).to_vec(),
            "the keys, in order"
        );
        assert_eq!(guard.key(), KEYS[0].as_bytes());
        for key in KEYS {
            let fields = info(&mut admin, key).expect("held");
            assert_eq!(fields["fence"] as u64, guard.fence(), "{key}");
        }
        // All or nothing: a set that overlaps it is refused and takes none.
        let other = locks.lock_many(["{order}:mail", "{order}:other"]);
        assert!(matches!(other.acquire().await, Err(Error::NotAcquired)));
        assert!(info(&mut admin, "{order}:other").is_none());
        assert!(guard.release().await.unwrap(), "every key released");
        for key in KEYS {
            assert!(info(&mut admin, key).is_none(), "{key} free");
        }
    }
    assert_eq!(calls(&mut admin, "lock.mrelease"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_every_key_alive_with_mextend() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.watchdog_locks().await;
    let ttl = Duration::from_millis(600);
    let guard = locks.lock_many(KEYS).ttl(ttl).acquire().await.unwrap();
    tokio::time::sleep(4 * ttl).await;
    assert!(guard.held(), "kept alive past four ttls");
    assert!(
        calls(&mut admin, "lock.mextend") >= 3,
        "a MEXTEND each ttl/3"
    );
    for key in KEYS {
        assert!(info(&mut admin, key).is_some(), "{key} still held");
    }
    guard.extend(ttl).await.unwrap();
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_key_loses_the_set_in_both_modes() {
    let server = Server::start();
    let mut admin = server.admin();
    let ttl = Duration::from_millis(900);
    for (n, locks) in [server.locks().await, server.watchdog_locks().await]
        .into_iter()
        .enumerate()
    {
        let keys = KEYS.map(|k| format!("{k}:{n}"));
        let guard = locks.lock_many(&keys).ttl(ttl).acquire().await.unwrap();
        let _: i64 = redis::cmd("DEL").arg(&keys[1]).query(&mut admin).unwrap();
        let reason = timeout(10 * SEC, guard.lost()).await.expect("lost");
        assert_eq!(reason, LostReason::Refused, "mode {n}");
        assert!(!guard.held());
        // The other keys are the token's still: the release gives them back,
        // and says not every key was there.
        assert!(!guard.release().await.unwrap(), "mode {n}");
        for key in &keys {
            assert!(info(&mut admin, key).is_none(), "{key} free");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_in_a_session_counts_one_hold_per_key() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;
    let ttl = Duration::from_millis(900);
    let guard = locks.lock_many(KEYS).ttl(ttl).acquire().await.unwrap();
    let single = locks
        .lock("{order}:alone")
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let session = guard.session().expect("attached to the session").clone();
    assert_eq!(session.holds(), 2, "the set is one member of the session");
    for key in KEYS {
        assert!(
            info(&mut admin, key).unwrap().contains_key("lease"),
            "{key}"
        );
    }
    tokio::time::sleep(3 * ttl).await;
    assert!(guard.held() && single.held(), "the keepalives kept both");
    assert_eq!(
        calls(&mut admin, "lock.mextend"),
        0,
        "no watchdog of its own"
    );
    // A key gone behind the session's back: the server counts 3 holds, the
    // client 4 (3 keys and one), and the next keepalive asks the set.
    let _: i64 = redis::cmd("DEL").arg(KEYS[2]).query(&mut admin).unwrap();
    let reason = timeout(10 * SEC, guard.lost()).await.expect("lost");
    assert_eq!(reason, LostReason::Refused);
    assert!(!single.is_lost(), "the other hold is not");
    assert!(!guard.release().await.unwrap());
    assert!(single.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_set_is_granted_when_the_last_key_is_free() {
    let server = Server::start();
    let locks = server.locks().await;
    let holder = locks.lock(KEYS[2]).acquire().await.unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .lock_many(KEYS)
                .wait(10 * SEC)
                .acquire()
                .await
                .map(|g| (g.fence(), g))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "waits while one key is held");
    let before = holder.fence();
    assert!(holder.release().await.unwrap());
    let (fence, guard) = timeout(10 * SEC, waiter).await.unwrap().unwrap().unwrap();
    assert!(fence > before, "a fence above the last holder's");
    assert!(guard.held());
    // The wait ran out: TimedOut, and nothing was taken.
    let other = locks.lock_many(["{order}:stock", "{order}:spare"]);
    let timed_out = other.wait(Duration::from_millis(100)).acquire().await;
    assert!(matches!(timed_out, Err(Error::TimedOut)));
    let mut admin = server.admin();
    assert!(info(&mut admin, "{order}:spare").is_none());
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_under_a_set_and_bad_requests() {
    let server = Server::start();
    let locks = server.locks().await;
    let fence = locks
        .lock_many(KEYS)
        .run(|held| async move { held.fence })
        .await
        .unwrap();
    assert!(fence > 0);
    let mut admin = server.admin();
    assert!(info(&mut admin, KEYS[0]).is_none(), "released after run");
    let none: [&str; 0] = [];
    assert!(matches!(
        locks.lock_many(none).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    // A sync with no replica to hold it: undone on every key.
    assert!(matches!(
        locks
            .lock_many(KEYS)
            .sync(1, Duration::from_millis(100))
            .acquire()
            .await,
        Err(Error::NotReplicated { .. })
    ));
    assert!(info(&mut admin, KEYS[0]).is_none() && info(&mut admin, KEYS[2]).is_none());
    // One key is a plain lock.
    let one = locks.lock_many(["{order}:one"]).acquire().await.unwrap();
    assert_eq!(one.keys(), vec![b"{order}:one".as_slice()]);
    assert!(one.release().await.unwrap());
    // Binary keys, a NUL and \r\n inside.
    let binary: [&[u8]; 2] = [b"{b}\x00\r\n\xff", b"{b}\x01"];
    let guard = locks.lock_many(binary).acquire().await.unwrap();
    assert_eq!(guard.keys(), binary.to_vec());
    assert!(guard.release().await.unwrap());
}
