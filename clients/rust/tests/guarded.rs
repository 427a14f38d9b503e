//! `Guard::guarded` (`LOCK.GUARD`): a command that runs only while the guard
//! holds the lock, with its own typed reply; `Error::Lost(NotHeld)`, the loss
//! signal and nothing written once the lease is gone; refusals and the
//! command's own errors as server errors. Against a real redis-server with
//! the module.

mod common;

use std::time::Duration;

use common::{info, LocksOn, Server};
use redis_lock_client::{Error, Guard, LostReason};
use tokio::time::timeout;

const SEC: Duration = Duration::from_secs(1);
const LOCK: &str = "{acct}:lock";
const TOTAL: &str = "{acct}:total";
const NAME: &str = "{acct}:name";

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

fn set(con: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(con)
        .expect("SET");
}

/// A guard on `LOCK`, which must be free.
async fn hold(server: &Server, ttl: Duration) -> Guard {
    let locks = server.locks().await;
    locks.lock(LOCK).ttl(ttl).acquire().await.expect("free")
}

/// A guarded `INCRBY TOTAL 1` that must be refused with `LOST`, mark the
/// lease lost, and leave the total as it was.
async fn assert_guarded_write_is_lost(guard: &Guard, admin: &mut redis::Connection) {
    let before = get(admin, TOTAL);
    let outcome = guard
        .guarded::<i64>(redis::cmd("INCRBY").arg(TOTAL).arg(1))
        .await;
    assert!(
        matches!(outcome, Err(Error::Lost(LostReason::NotHeld))),
        "got {outcome:?}"
    );
    assert!(guard.is_lost(), "a LOST reply marks the lease lost");
    assert_eq!(get(admin, TOTAL), before, "nothing written");
}

/// How many `LOCK.EXTEND` calls the server has served.
fn extend_calls(con: &mut redis::Connection) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO commandstats");
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_lock.extend:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_runs_the_command_while_held_and_returns_its_typed_reply() {
    let server = Server::start();
    let guard = hold(&server, 10 * SEC).await;

    // Simple string, integer, bulk string, nil.
    let () = guard
        .guarded(redis::cmd("SET").arg(NAME).arg("acme"))
        .await
        .unwrap();
    let total: i64 = guard
        .guarded(redis::cmd("INCRBY").arg(TOTAL).arg(5))
        .await
        .unwrap();
    assert_eq!(total, 5);
    let total: u64 = guard
        .guarded(redis::cmd("INCRBY").arg(TOTAL).arg(7))
        .await
        .unwrap();
    assert_eq!(total, 12);
    let name: String = guard.guarded(redis::cmd("GET").arg(NAME)).await.unwrap();
    assert_eq!(name, "acme");
    let raw: Vec<u8> = guard.guarded(redis::cmd("GET").arg(NAME)).await.unwrap();
    assert_eq!(raw, b"acme");
    let missing: Option<String> = guard
        .guarded(redis::cmd("GET").arg("{acct}:missing"))
        .await
        .unwrap();
    assert_eq!(missing, None);
    let both: Vec<Option<String>> = guard
        .guarded(redis::cmd("MGET").arg(NAME).arg("{acct}:missing"))
        .await
        .unwrap();
    assert_eq!(both, vec![Some("acme".to_string()), None]);

    let mut admin = server.admin();
    assert_eq!(get(&mut admin, TOTAL).as_deref(), Some("12"));
    assert!(!guard.is_lost());
    let held = info(&mut admin, LOCK).expect("still held");
    assert_eq!(held["fence"], guard.fence() as i64, "no new fence taken");
    assert!(guard.release().await.unwrap());
}

/// A paused process: the test blocks the runtime's only thread, so the
/// watchdog cannot extend and the lease expires on the server.
#[tokio::test(flavor = "current_thread")]
async fn guarded_after_the_lease_expired_is_lost_and_writes_nothing() {
    let server = Server::start();
    let mut admin = server.admin();
    set(&mut admin, TOTAL, "100");
    let guard = hold(&server, Duration::from_millis(300)).await;
    std::thread::sleep(Duration::from_millis(800));
    assert!(info(&mut admin, LOCK).is_none(), "expired on the server");

    assert_guarded_write_is_lost(&guard, &mut admin).await;
    // The watchdog may have declared the expiry first: either reason fires.
    timeout(5 * SEC, guard.lost()).await.expect("lost() fired");
    assert!(!guard.release().await.unwrap(), "nothing left to release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_after_release_is_lost_fires_the_signal_and_stops_the_watchdog() {
    let server = Server::start();
    let mut admin = server.admin();
    set(&mut admin, TOTAL, "100");
    // Extends every 500 ms: none is due before the LOST reply.
    let guard = hold(&server, Duration::from_millis(1500)).await;
    let signal = guard.lost_signal();
    let waiter = tokio::spawn(async move { signal.wait().await });
    // Another process with the token (a cleanup job, say) releases it.
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg(LOCK)
        .arg(guard.token())
        .query(&mut admin)
        .unwrap();
    assert_eq!(released, 1);

    assert_guarded_write_is_lost(&guard, &mut admin).await;
    let reason = timeout(5 * SEC, waiter).await.expect("the signal fired");
    assert_eq!(reason.unwrap(), LostReason::NotHeld);
    assert_eq!(guard.lost_signal().reason(), Some(LostReason::NotHeld));

    // The watchdog stopped: no extend in two of its periods.
    let extends = extend_calls(&mut admin);
    tokio::time::sleep(SEC).await;
    assert_eq!(extend_calls(&mut admin), extends, "no extend after LOST");
    assert!(!guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_after_del_of_the_lock_key_is_lost_and_the_new_holders_data_stays() {
    let server = Server::start();
    let mut admin = server.admin();
    let stale = hold(&server, 10 * SEC).await;
    let _: i64 = redis::cmd("DEL").arg(LOCK).query(&mut admin).unwrap();
    let fresh = hold(&server, 10 * SEC).await;
    let total: i64 = fresh
        .guarded(redis::cmd("INCRBY").arg(TOTAL).arg(40))
        .await
        .unwrap();
    assert_eq!(total, 40);

    assert_guarded_write_is_lost(&stale, &mut admin).await;
    assert_eq!(
        timeout(5 * SEC, stale.lost()).await.expect("lost() fired"),
        LostReason::NotHeld
    );
    assert_eq!(get(&mut admin, TOTAL).as_deref(), Some("40"));
    assert!(!fresh.is_lost(), "the new holder is untouched");
    assert!(!stale.release().await.unwrap());
    assert!(fresh.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_failing_commands_are_server_errors_and_keep_the_lease() {
    let server = Server::start();
    let guard = hold(&server, 10 * SEC).await;
    let mut admin = server.admin();
    set(&mut admin, NAME, "acme");
    let _: i64 = redis::cmd("RPUSH")
        .arg("{acct}:list")
        .arg("a")
        .query(&mut admin)
        .unwrap();

    // Refused by LOCK.GUARD itself.
    for refused in [
        redis::cmd("BLPOP").arg("{acct}:list").arg(0).clone(),
        redis::cmd("MULTI").clone(),
        redis::cmd("LOCK.RELEASE")
            .arg(LOCK)
            .arg(guard.token())
            .clone(),
    ] {
        match guard.guarded::<redis::Value>(&refused).await {
            Err(Error::Server(e)) => {
                assert_eq!(e.code(), Some("ERR"), "{e}");
                assert!(e.to_string().contains("not allowed in LOCK.GUARD"), "{e}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // The command's own errors.
    match guard.guarded::<i64>(redis::cmd("INCR").arg(NAME)).await {
        Err(Error::Server(e)) => assert_eq!(e.code(), Some("ERR"), "{e}"),
        other => panic!("expected ERR not an integer, got {other:?}"),
    }
    match guard
        .guarded::<String>(redis::cmd("GET").arg("{acct}:list"))
        .await
    {
        Err(Error::Server(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e}"),
        other => panic!("expected WRONGTYPE, got {other:?}"),
    }
    // Refused before sending.
    assert!(matches!(
        guard.guarded::<()>(&redis::Cmd::new()).await,
        Err(Error::InvalidArgument(_))
    ));

    assert!(!guard.is_lost(), "none of these is a loss");
    let () = guard
        .guarded(redis::cmd("SET").arg(NAME).arg("globex"))
        .await
        .unwrap();
    assert_eq!(get(&mut admin, NAME).as_deref(), Some("globex"));
    assert!(guard.release().await.unwrap());
}
