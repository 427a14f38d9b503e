//! Sessions: every hold taken through one `Locks` is attached to one server
//! lease (`LOCK.LEASE`) and kept alive by one keepalive, whatever their
//! number; when the lease ends, every hold ends at once, each through its
//! own loss signal, with the reason (`Revoked` and the server's reason
//! after a revocation). Against a real server with the module.

mod common;

use std::time::Duration;

use common::{info_field, LocksOn, Server};
use redis_lock_client::{
    redis, Error, Guard, KeepAlive, LockOptions, Locks, LostReason, Semaphore,
};
use tokio::time::{timeout, Instant};

const SEC: Duration = Duration::from_secs(1);

/// A command's `calls=` and `failed_calls=` in `INFO commandstats` (0 when
/// it was never called).
fn calls(con: &mut redis::Connection, command: &str) -> (u64, u64) {
    let line = info_field(con, "commandstats", &format!("cmdstat_{command}"));
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .map_or(0, |n| n.parse().unwrap())
    };
    (field("calls="), field("failed_calls="))
}

/// A command's `rejected_calls=` (refused before it ran: an ACL, …).
fn rejected(con: &mut redis::Connection, command: &str) -> u64 {
    let line = info_field(con, "commandstats", &format!("cmdstat_{command}"));
    line.split(',')
        .find_map(|kv| kv.strip_prefix("rejected_calls="))
        .map_or(0, |n| n.parse().unwrap())
}

/// `INFO lock`'s counter `name` (`lock_` and the name).
fn lock_counter(con: &mut redis::Connection, name: &str) -> u64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap_or_else(|_| panic!("INFO lock has lock_{name}"))
}

/// A `Locks` of its own mode.
async fn locks_in(server: &Server, mode: KeepAlive) -> Locks {
    server
        .locks()
        .await
        .with_options(LockOptions::default().keepalive(mode))
}

/// `n` exclusive locks `prefix:0`…, each held through `locks`.
async fn hold_many(locks: &Locks, prefix: &str, n: usize, ttl: Duration) -> Vec<Guard> {
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        let guard = locks
            .lock(format!("{prefix}:{i}"))
            .ttl(ttl)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{prefix}:{i} is free: {e}"));
        guards.push(guard);
    }
    guards
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_holds_share_one_lease_and_one_keepalive() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;
    let ttl = Duration::from_millis(1500);
    let started = Instant::now();
    let mut guards = hold_many(&locks, "job", 100, ttl).await;
    // Readers, permits and a waited grant attach to the same lease.
    guards.push(
        locks
            .lock("catalog")
            .shared()
            .ttl(ttl)
            .acquire()
            .await
            .unwrap(),
    );
    guards.push(
        locks
            .lock("catalog")
            .shared()
            .ttl(ttl)
            .acquire()
            .await
            .unwrap(),
    );
    guards.push(
        locks
            .lock("waited")
            .ttl(ttl)
            .wait(SEC)
            .acquire()
            .await
            .unwrap(),
    );
    let renders = Semaphore::new(locks.clone(), "renders", 4);
    let permit = renders.permits(2).ttl(ttl).acquire().await.unwrap();

    assert_eq!(lock_counter(&mut admin, "leases"), 1, "one lease");
    assert_eq!(lock_counter(&mut admin, "leases_granted"), 1);
    let sessions = locks.sessions();
    assert_eq!(sessions.len(), 1);
    let session = &sessions[0];
    assert_eq!((session.holds(), session.ttl()), (104, ttl));
    assert!(guards
        .iter()
        .all(|g| g.session().is_some_and(|s| s.id() == session.id())));
    assert_eq!(permit.session().map(|s| s.id()), Some(session.id()));
    let number = locks.info("job:7").await.unwrap().unwrap().lease;
    assert!(number.is_some(), "LOCK.INFO shows the lease's number");
    assert_eq!(locks.info("catalog").await.unwrap().unwrap().lease, number);
    assert!(
        !format!("{session:?}").contains(session.id()),
        "no lease id in Debug"
    );

    // Three ttls and more: every hold lives on one keepalive a round.
    tokio::time::sleep(5 * ttl).await;
    assert!(guards.iter().all(|g| !g.is_lost() && g.held()));
    assert!(!permit.is_lost());
    let elapsed = started.elapsed();
    let (keepalives, failed) = calls(&mut admin, "lock.lease|keepalive");
    assert_eq!(failed, 0);
    // At least one a ttl (or the lease would have ended), at most one a
    // third of a ttl (and one more for the round in flight).
    let most = (elapsed.as_millis() / (ttl / 3).as_millis()) as u64 + 1;
    let least = (5 * ttl).as_millis() as u64 / ttl.as_millis() as u64;
    assert!(
        (least..=most).contains(&keepalives),
        "{keepalives} keepalives in {elapsed:?}"
    );
    assert_eq!(calls(&mut admin, "lock.extend").0, 0, "no per-lock extend");
    assert_eq!(calls(&mut admin, "sem.extend").0, 0);
    assert!(lock_counter(&mut admin, "keepalives") >= least);
    // One connection for all of it (and the admin's); the wait's own
    // connection was closed after its grant.
    common::wait_until(5 * SEC, || {
        info_field(&mut admin, "clients", "connected_clients") == "2"
    });

    let fence = guards[0].fence();
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
    assert!(permit.release().await.unwrap());
    assert_eq!(session.holds(), 0);
    assert_eq!(
        info_field(&mut admin, "keyspace", "db0"),
        "",
        "every key released"
    );
    // The next hold attaches to the same lease while it lives.
    let again = locks.lock("job:0").ttl(ttl).acquire().await.unwrap();
    assert!(again.fence() > fence);
    assert_eq!(again.session().unwrap().id(), session.id());
    assert_eq!(lock_counter(&mut admin, "leases_granted"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_session_lease_loses_every_hold_with_revoked() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;
    let guards = hold_many(&locks, "job", 20, 10 * SEC).await;
    let id = guards[0].session().unwrap().id().to_string();
    let rival = locks_in(&server, KeepAlive::Watchdog).await;
    let waiter = tokio::spawn(async move {
        rival
            .lock("job:3")
            .ttl(10 * SEC)
            .wait(30 * SEC)
            .acquire()
            .await
    });
    common::wait_until(5 * SEC, || {
        common::info(&mut admin, "job:3").is_some_and(|i| i["waiters"] == 1)
    });

    let ended: i64 = redis::cmd("LOCK.LEASE")
        .arg("REVOKE")
        .arg(&id)
        .query(&mut admin)
        .unwrap();
    assert_eq!(ended, 20);
    // The waiter was served at once, by the server.
    let next = timeout(5 * SEC, waiter).await.unwrap().unwrap().unwrap();
    // Every hold learns it at the next keepalive (ttl/3), with the reason.
    for guard in &guards {
        let reason = timeout(10 * SEC, guard.lost()).await.expect("lost");
        assert_eq!(reason, LostReason::Revoked("lease revoked".into()));
        assert!(!guard.held());
    }
    let session = guards[0].session().unwrap();
    assert_eq!(
        session.ended(),
        Some(LostReason::Revoked("lease revoked".into()))
    );
    assert_eq!(session.holds(), 0);
    assert_eq!(
        guards[5]
            .guarded::<i64>(redis::cmd("INCR").arg("job:5:count"))
            .await
            .unwrap_err()
            .to_string(),
        Error::Lost(LostReason::Revoked("lease revoked".into())).to_string()
    );
    // A new hold gets a new lease.
    let fresh = locks
        .lock("job:fresh")
        .ttl(10 * SEC)
        .acquire()
        .await
        .unwrap();
    assert_ne!(fresh.session().unwrap().id(), id);
    assert_eq!(lock_counter(&mut admin, "leases_granted"), 2);
    assert_eq!(lock_counter(&mut admin, "leases"), 1, "the old one is gone");
    for guard in guards {
        assert!(!guard.release().await.unwrap(), "nothing left to release");
    }
    assert!(next.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_revoke_reaches_its_holder_with_the_reason_and_no_other() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;
    // The server tells a revoked token so until the lease's deadline as it
    // was at the revocation (two thirds of a ttl or more after it): the
    // keepalive's check comes within a third of one.
    let ttl = 3 * SEC;
    let guards = hold_many(&locks, "{acct}:job", 10, ttl).await;

    let ended = locks
        .revoke("{acct}:job:4", b"stuck since 03:00\r\n\0\xff")
        .await
        .unwrap();
    assert_eq!(ended, 1);
    assert_eq!(locks.revoke("{acct}:job:4", "again").await.unwrap(), 0);
    // Found by the session's check at its next keepalive.
    let reason = timeout(10 * SEC, guards[4].lost()).await.expect("lost");
    assert_eq!(
        reason,
        LostReason::Revoked("stuck since 03:00\\x0d\\x0a\\x00\\xff".into())
    );
    assert!(reason.to_string().contains("revoked: stuck since 03:00"));
    // Its guarded writes are refused with the reason (the server keeps
    // the mark until the lease's deadline as it was at the revocation).
    let refused = guards[4]
        .guarded::<()>(redis::cmd("SET").arg("{acct}:total").arg(1))
        .await;
    assert!(
        matches!(&refused, Err(Error::Lost(LostReason::Revoked(r))) if r.starts_with("stuck")),
        "got {refused:?}"
    );
    assert_eq!(
        redis::cmd("EXISTS")
            .arg("{acct}:total")
            .query::<i64>(&mut admin)
            .unwrap(),
        0,
        "nothing written"
    );

    // The others hold on, on the same lease.
    tokio::time::sleep(ttl).await;
    for (i, guard) in guards.iter().enumerate() {
        assert_eq!(guard.is_lost(), i == 4, "job:{i}");
    }
    assert_eq!(guards[0].session().unwrap().holds(), 9);
    // The reason is checked before anything is sent.
    for bad in [&b""[..], &[b'x'; 129][..]] {
        assert!(matches!(
            locks.revoke("{acct}:job:1", bad).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(!guards[1].is_lost());
    // A worker's user cannot revoke: no @dangerous, and (Redis 7.0 gives a
    // module command no category) no LOCK.REVOKE by name.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("worker")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .arg("-@dangerous")
        .arg("-lock.revoke")
        .query(&mut admin)
        .unwrap();
    let worker = Locks::connect(
        redis::Client::open(format!("redis://worker:pw@{}/", server.addr())).unwrap(),
    )
    .await
    .unwrap();
    match worker.revoke("{acct}:job:1", "mine now").await {
        Err(Error::Server(e)) => assert_eq!(e.code(), Some("NOPERM")),
        other => panic!("expected NOPERM, got {other:?}"),
    }
    assert!(!guards[1].is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_keepalives_lose_every_hold_at_once_as_expired() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;
    let ttl = Duration::from_millis(1200);
    let guards = hold_many(&locks, "job", 30, ttl).await;
    let session = guards[0].session().unwrap().clone();
    // Every keepalive from now on is refused (NOPERM): tried again until
    // the lease's deadline less the margin, then every hold is lost.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-lock.lease|keepalive")
        .query(&mut admin)
        .unwrap();
    let first = timeout(10 * SEC, guards[17].lost()).await.expect("lost");
    assert_eq!(first, LostReason::Expired);
    // Ended in the same step as every hold's loss.
    assert_eq!(session.ended(), Some(LostReason::Expired));
    for guard in &guards {
        assert_eq!(guard.lost_signal().reason(), Some(LostReason::Expired));
    }
    assert!(rejected(&mut admin, "lock.lease|keepalive") > 0);
    assert_eq!(calls(&mut admin, "lock.extend").0, 0);

    // Keepalives allowed again: the next hold gets a new lease.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("+lock.lease|keepalive")
        .query(&mut admin)
        .unwrap();
    drop(guards);
    let guard = locks.lock("fresh").ttl(ttl).acquire().await.unwrap();
    assert_ne!(guard.session().unwrap().id(), session.id());
    tokio::time::sleep(2 * ttl).await;
    assert!(!guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_gone_before_an_acquire_is_granted_again_once() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;
    let first = locks.lock("a").ttl(10 * SEC).acquire().await.unwrap();
    let id = first.session().unwrap().id().to_string();
    assert!(first.release().await.unwrap());
    // The lease, idle, is revoked behind the client's back.
    let ended: i64 = redis::cmd("LOCK.LEASE")
        .arg("REVOKE")
        .arg(&id)
        .query(&mut admin)
        .unwrap();
    assert_eq!(ended, 0);

    // NOLEASE, a new lease, the acquire again: one call to the caller.
    let second = locks.lock("b").ttl(10 * SEC).acquire().await.unwrap();
    assert_ne!(second.session().unwrap().id(), id);
    assert_eq!(calls(&mut admin, "lock.acquire"), (3, 1));
    assert_eq!(lock_counter(&mut admin, "leases_granted"), 2);

    // The same while waiting in the queue: the lease goes, the server
    // answers NOLEASE when the waiter's turn comes, the client waits again
    // with a new lease.
    let holder = locks_in(&server, KeepAlive::Watchdog)
        .await
        .lock("c")
        .ttl(10 * SEC)
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("c").ttl(10 * SEC).wait(30 * SEC).acquire().await })
    };
    common::wait_until(5 * SEC, || {
        common::info(&mut admin, "c").is_some_and(|i| i["waiters"] == 1)
    });
    let id = second.session().unwrap().id().to_string();
    let ended: i64 = redis::cmd("LOCK.LEASE")
        .arg("REVOKE")
        .arg(&id)
        .query(&mut admin)
        .unwrap();
    assert_eq!(ended, 1, "b");
    assert!(holder.release().await.unwrap());
    let granted = timeout(20 * SEC, waiter).await.unwrap().unwrap().unwrap();
    let session = granted.session().unwrap();
    assert_ne!(session.id(), id);
    assert!(session.ended().is_none());
    let reason = timeout(10 * SEC, second.lost()).await.expect("b is lost");
    assert_eq!(reason, LostReason::Revoked("lease revoked".into()));
    assert!(granted.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_gone_behind_the_session_is_found_at_its_next_keepalive() {
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;
    let ttl = Duration::from_millis(900);
    let guards = hold_many(&locks, "job", 5, ttl).await;
    let _: i64 = redis::cmd("DEL").arg("job:2").query(&mut admin).unwrap();
    let _: () = redis::cmd("SET")
        .arg("job:3")
        .arg("overwritten")
        .query(&mut admin)
        .unwrap();
    for i in [2, 3] {
        let reason = timeout(10 * SEC, guards[i].lost()).await.expect("lost");
        assert_eq!(reason, LostReason::Refused, "job:{i}");
    }
    tokio::time::sleep(2 * ttl).await;
    for i in [0, 1, 4] {
        assert!(!guards[i].is_lost(), "job:{i}");
    }
    assert_eq!(guards[0].session().unwrap().holds(), 3);
    // A manual extend keeps the session alive and asks the hold; a ttl
    // other than the session's is refused.
    guards[0].extend(ttl).await.unwrap();
    assert!(matches!(
        guards[0].extend(10 * SEC).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        guards[2].extend(ttl).await,
        Err(Error::Lost(LostReason::Refused))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_lease_rights_auto_keeps_a_watchdog_per_hold() {
    let server = Server::start();
    let mut admin = server.admin();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("worker")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .arg("-lock.lease")
        .query(&mut admin)
        .unwrap();
    let client = redis::Client::open(format!("redis://worker:pw@{}/", server.addr())).unwrap();
    let locks = Locks::connect(client.clone()).await.unwrap();
    let ttl = Duration::from_millis(600);
    let guards = hold_many(&locks, "job", 3, ttl).await;
    assert!(guards.iter().all(|g| g.session().is_none()));
    assert!(locks.sessions().is_empty());
    tokio::time::sleep(3 * ttl).await;
    assert!(guards.iter().all(|g| !g.is_lost()));
    assert!(calls(&mut admin, "lock.extend").0 >= 6, "watchdogs extend");
    // Asked once (refused by the ACL): the next hold goes straight to its
    // watchdog.
    assert_eq!(rejected(&mut admin, "lock.lease|grant"), 1);
    let more = locks.lock("job:more").ttl(ttl).acquire().await.unwrap();
    assert!(more.session().is_none());
    assert_eq!(rejected(&mut admin, "lock.lease|grant"), 1);

    // KeepAlive::Session insists.
    let strict = Locks::connect(client)
        .await
        .unwrap()
        .with_options(LockOptions::default().keepalive(KeepAlive::Session));
    match strict.lock("job:strict").acquire().await {
        Err(Error::Server(e)) => assert_eq!(e.code(), Some("NOPERM")),
        other => panic!("expected NOPERM, got {other:?}"),
    }
}

/// A release that got no answer (the link went silent, then was reset)
/// is sent again by the session: the hold does not stay on the server,
/// kept alive by the keepalives the session goes on sending for its other
/// hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_got_no_answer_is_sent_again_by_the_session() {
    let server = Server::start();
    let proxy = common::Proxy::to(&server);
    let options = LockOptions::default()
        .keepalive(KeepAlive::Session)
        .release_timeout(SEC / 2);
    let locks = common::locks_at(&proxy.url()).await.with_options(options);
    let kept = locks.lock("kept").ttl(3 * SEC).acquire().await.unwrap();
    let released = locks.lock("billing").ttl(3 * SEC).acquire().await.unwrap();
    let session = kept.session().cloned().expect("a session");

    proxy.blackhole();
    let outcome = released.release().await;
    assert!(matches!(outcome, Err(Error::Connection(_))), "{outcome:?}");
    proxy.cut();
    proxy.pass();
    let started = Instant::now();
    let mut admin = server.admin();
    tokio::task::spawn_blocking(move || {
        common::wait_until(20 * SEC, || common::info(&mut admin, "billing").is_none());
    })
    .await
    .unwrap();
    println!(
        "released again by the session after {:?}",
        started.elapsed()
    );
    assert!(kept.held(), "the other hold is kept");
    let mut admin = server.admin();
    assert!(common::info(&mut admin, "kept").is_some());
    common::wait_until(10 * SEC, || session.orphans() == 0);
    assert!(kept.release().await.unwrap());
}

/// A dropped guard whose background release got no answer: the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_whose_release_got_no_answer_is_released_by_the_session() {
    let server = Server::start();
    let proxy = common::Proxy::to(&server);
    let options = LockOptions::default()
        .keepalive(KeepAlive::Session)
        .release_timeout(SEC / 2);
    let locks = common::locks_at(&proxy.url()).await.with_options(options);
    let kept = locks.lock("kept").ttl(3 * SEC).acquire().await.unwrap();
    let dropped = locks.lock("billing").ttl(3 * SEC).acquire().await.unwrap();
    let session = kept.session().cloned().expect("a session");

    proxy.blackhole();
    drop(dropped);
    let orphaned = Instant::now();
    while session.orphans() == 0 {
        assert!(
            orphaned.elapsed() < 10 * SEC,
            "the release was not orphaned"
        );
        tokio::time::sleep(SEC / 50).await;
    }
    proxy.cut();
    proxy.pass();
    let mut admin = server.admin();
    tokio::task::spawn_blocking(move || {
        common::wait_until(20 * SEC, || common::info(&mut admin, "billing").is_none());
    })
    .await
    .unwrap();
    println!("released by the session after {:?}", orphaned.elapsed());
    assert!(kept.held());
    assert!(kept.release().await.unwrap());
}

/// A release after the key was overwritten with another type: already
/// gone (`Ok(false)`), not `WRONGTYPE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_key_was_overwritten_is_already_gone() {
    let server = Server::start();
    for mode in [KeepAlive::Session, KeepAlive::Watchdog] {
        let locks = locks_in(&server, mode).await;
        let guard = locks.lock("billing").ttl(30 * SEC).acquire().await.unwrap();
        let _: () = redis::cmd("SET")
            .arg("billing")
            .arg("another program's value")
            .query(&mut server.admin())
            .unwrap();
        assert!(!guard.release().await.unwrap(), "{mode:?}");
        let _: i64 = redis::cmd("DEL")
            .arg("billing")
            .query(&mut server.admin())
            .unwrap();
    }
}
