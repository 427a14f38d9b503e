//! `CLIENT UNBLOCK` of a client whose grant waits for its replicas
//! (`SYNC`): it does not apply (it replies `0`, as for a `WAIT` waiter or
//! an observer: the module times the wait itself), so the client goes on
//! waiting and is answered as it would have been: here `NOSYNC` once its
//! `timeout-ms` runs out, its grant undone. Never a grant the client was
//! not told of, never a reply that says it holds. The replica is paused
//! (SIGSTOP) so that nothing acknowledges; no test asserts a duration.

mod common;
use common::*;

use std::thread;
use std::time::Duration;

/// The replicas' wait: long enough for `CLIENT UNBLOCK` to come first.
const SYNC_TIMEOUT_MS: &str = "1500";

/// The three forms of `CLIENT UNBLOCK id`.
const FORMS: [&[&str]; 3] = [&[], &["TIMEOUT"], &["ERROR"]];

fn counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap()
}

fn client_id(con: &mut Connection) -> i64 {
    redis::cmd("CLIENT").arg("ID").query(con).unwrap()
}

fn client_unblock(con: &mut Connection, id: i64, form: &[&str]) -> i64 {
    redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(id)
        .arg(form)
        .query(con)
        .unwrap()
}

/// The fence of `key`'s hold now (LOCK.INFO shows no token: the fence
/// names the hold), if it is held.
fn holder(con: &mut Connection, key: &str) -> Option<i64> {
    info(con, key).map(|held| held["fence"])
}

/// A master whose replica is paused: a `SYNC 1` wait runs to its timeout.
fn master_with_a_paused_replica() -> (Server, Server) {
    let (master, replica) = pair();
    replica.pause();
    (master, replica)
}

/// The reply of a `SYNC` request whose replicas never answered: `NOSYNC`,
/// and not `UNBLOCKED` nor a grant.
fn assert_nosync(reply: redis::RedisResult<Option<(String, u64)>>, form: &[&str]) {
    let error = reply.expect_err("no replica acknowledged: not a grant");
    assert_eq!(
        error.code(),
        Some("NOSYNC"),
        "after CLIENT UNBLOCK {form:?}: {error}"
    );
    assert!(
        error.to_string().contains("the grant was undone"),
        "after CLIENT UNBLOCK {form:?}: {error}"
    );
}

#[test]
fn client_unblock_does_not_apply_to_a_sync_wait_which_ends_as_it_would() {
    let (master, replica) = master_with_a_paused_replica();
    let mut m = master.conn();
    for (n, form) in FORMS.iter().enumerate() {
        let key = format!("k{n}");
        let mut waiting = master.conn();
        let id = client_id(&mut waiting);
        let undone_before = counter(&mut m, "syncs_undone");
        let request = {
            let key = key.clone();
            thread::spawn(move || {
                redis::cmd("LOCK.ACQUIRE")
                    .arg(&[
                        &key,
                        "60000",
                        "TOKEN",
                        "waiting",
                        "SYNC",
                        "1",
                        SYNC_TIMEOUT_MS,
                    ])
                    .query::<Option<(String, u64)>>(&mut waiting)
            })
        };
        wait_until(Duration::from_secs(10), || {
            counter(&mut m, "sync_waiting") == 1
        });
        let granted = holder(&mut m, &key).expect("granted, not yet answered");
        assert_eq!(
            client_unblock(&mut m, id, form),
            0,
            "CLIENT UNBLOCK {form:?} of a SYNC wait"
        );
        // Still waiting, still its grant.
        assert_eq!(counter(&mut m, "sync_waiting"), 1, "{form:?}");
        assert_eq!(holder(&mut m, &key), Some(granted), "{form:?}");
        assert_nosync(request.join().unwrap(), form);
        assert_eq!(holder(&mut m, &key), None, "{form:?}: the grant is undone");
        assert_eq!(counter(&mut m, "sync_waiting"), 0, "{form:?}");
        assert_eq!(
            counter(&mut m, "syncs_undone"),
            undone_before + 1,
            "{form:?}"
        );
        // The key is free for anyone.
        let (token, _) = acquire(&mut m, &key, 1000, Some("next")).expect("free");
        assert_eq!(token, "next");
    }
    replica.resume();
}

#[test]
fn client_unblock_does_not_apply_to_a_waiter_granted_with_sync() {
    let (master, replica) = master_with_a_paused_replica();
    let mut m = master.conn();
    for (n, form) in FORMS.iter().enumerate() {
        let key = format!("q{n}");
        acquire(&mut m, &key, 60_000, Some("holder")).expect("free");
        let mut waiting = master.conn();
        let id = client_id(&mut waiting);
        let undone_before = counter(&mut m, "syncs_undone");
        let request = {
            let key = key.clone();
            thread::spawn(move || {
                redis::cmd("LOCK.ACQUIRE")
                    .arg(&[
                        &key,
                        "60000",
                        "TOKEN",
                        "waiting",
                        "WAIT",
                        "30000",
                        "SYNC",
                        "1",
                        SYNC_TIMEOUT_MS,
                    ])
                    .query::<Option<(String, u64)>>(&mut waiting)
            })
        };
        wait_until(Duration::from_secs(10), || {
            info(&mut m, &key).is_some_and(|i| i["waiters"] == 1)
        });
        // Queued: CLIENT UNBLOCK does not apply to a waiter either.
        assert_eq!(client_unblock(&mut m, id, form), 0, "queued, {form:?}");
        assert_eq!(info(&mut m, &key).unwrap()["waiters"], 1, "{form:?}");
        // Granted at the release, it now waits for its replica.
        assert_eq!(release(&mut m, &key, "holder"), 1);
        wait_until(Duration::from_secs(10), || {
            counter(&mut m, "sync_waiting") == 1
        });
        let granted = holder(&mut m, &key).expect("granted, not yet answered");
        assert_eq!(client_unblock(&mut m, id, form), 0, "syncing, {form:?}");
        assert_eq!(counter(&mut m, "sync_waiting"), 1, "{form:?}");
        assert_eq!(holder(&mut m, &key), Some(granted), "{form:?}");
        assert_nosync(request.join().unwrap(), form);
        assert_eq!(holder(&mut m, &key), None, "{form:?}: the grant is undone");
        assert_eq!(
            counter(&mut m, "syncs_undone"),
            undone_before + 1,
            "{form:?}"
        );
    }
    replica.resume();
}
