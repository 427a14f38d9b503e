//! Fences never go back: across keys, expiries, deletes, flushes, restarts,
//! reloads, promotions, failovers and migrations, and they stop below 2^53.
//!
//! Fences follow the wall clock, so "the next fence did not go back" would
//! hold even if the high-water mark were lost. Each such test therefore first
//! pushes the high-water mark to `H`, far above the clock, by RESTOREing a lock
//! whose fence is `H`; only a server that kept (or relearned) `H` can then
//! issue a fence above it.

mod common;
use common::payload::*;
use common::*;

use std::net::TcpListener;
use std::time::Duration;

/// A fence far above the clock in µs (≈1.8e15 today) and below 2^53.
const H: u64 = 8_000_000_000_000_000;

/// Put a lock held by `token` with fence `H` on `key`: this raises the
/// server's high-water mark to `H`.
fn restore_lock_at_h(con: &mut Connection, key: &str, token: &str) {
    let payload = lock_payload(con, token, H);
    restore(con, key, 600_000, &payload).expect("RESTORE");
    assert_eq!(info(con, key).unwrap()["fence"], H as i64);
}

/// The fence of a fresh grant on a key nobody holds.
fn next_fence(con: &mut Connection) -> u64 {
    let key = format!("next-{}", now_us());
    acquire(con, &key, 60_000, None)
        .expect("free key granted")
        .1
}

fn assert_above_h(fence: u64) {
    assert!(
        fence > H,
        "fence {fence} is not above the high-water mark {H}"
    );
    assert!(fence <= MAX_FENCE);
}

// ---------------------------------------------------------------------------
// The payload helper itself

#[test]
fn restore_checks_the_payload_checksum_and_accepts_a_patched_one() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    let server = Server::start();
    let mut con = server.conn();
    let mut payload = lock_payload(&mut con, "t", H);
    assert_eq!(fence_in_payload(&payload), H);
    // Checksum validation is on: a payload with a wrong CRC is refused, so the
    // patched payloads below are accepted on their own merit.
    let last = payload.len() - 1;
    payload[last] ^= 0xff;
    let err = error_of(
        &mut con,
        redis::cmd("RESTORE").arg("k").arg(0).arg(&payload),
    );
    assert!(err.contains("checksum"), "{err}");
    payload[last] ^= 0xff;
    restore(&mut con, "k", 0, &payload).expect("RESTORE");
    assert_eq!(info(&mut con, "k").unwrap()["fence"], H as i64);
    assert_eq!(release(&mut con, "k", "t"), 1);
}

// ---------------------------------------------------------------------------
// 1. Strictly increasing

#[test]
fn fences_strictly_increase_across_keys_with_expiries_in_between() {
    let server = Server::start();
    let mut con = server.conn();
    let mut last = 0;
    for round in 0..5 {
        // Short leases on some keys, long ones on others; the short ones run
        // out between rounds, so grants alternate between fresh keys, keys
        // freed by expiry, and keys still held (refused).
        for i in 0..6 {
            let key = format!("k{i}");
            let ttl = if i % 2 == 0 { 30 } else { 60_000 };
            if let Some((_, fence)) = acquire(&mut con, &key, ttl, None) {
                assert!(
                    fence > last,
                    "round {round} {key}: fence {fence} after {last}"
                );
                last = fence;
            } else {
                assert!(i % 2 == 1 && round > 0, "round {round}: {key} refused");
            }
        }
        std::thread::sleep(Duration::from_millis(80));
        for i in (0..6).step_by(2) {
            assert_eq!(
                info(&mut con, &format!("k{i}")),
                None,
                "k{i} did not expire"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 2. The next fence stays above H whatever removed the lock

#[test]
fn next_fence_is_above_h_after_release() {
    let server = Server::start();
    let mut con = server.conn();
    restore_lock_at_h(&mut con, "k", "t");
    assert_eq!(release(&mut con, "k", "t"), 1);
    assert_above_h(next_fence(&mut con));
}

#[test]
fn release_leaves_no_key_behind() {
    let server = Server::start();
    let mut con = server.conn();
    restore_lock_at_h(&mut con, "k", "t");
    let (token, _) = acquire(&mut con, "j", 60_000, None).unwrap();
    assert_eq!(release(&mut con, "k", "t"), 1);
    assert_eq!(release(&mut con, "j", &token), 1);
    // No per-lock fence key, no counter key: the history lives in the module.
    assert_eq!(dbsize(&mut con), 0);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    assert_above_h(next_fence(&mut con));
}

#[test]
fn next_fence_is_above_h_after_expiry() {
    let server = Server::start();
    let mut con = server.conn();
    let payload = lock_payload(&mut con, "t", H);
    restore(&mut con, "k", 50, &payload).expect("RESTORE");
    // Redis' active expiry deletes the key (DBSIZE counts expired keys until
    // they are actually deleted).
    wait_until(Duration::from_secs(10), || dbsize(&mut con) == 0);
    assert_eq!(info(&mut con, "k"), None);
    assert_above_h(acquire(&mut con, "k", 60_000, None).unwrap().1);
}

/// Raise the fence to H with a lock on `k`, remove the key with `command`,
/// and check the next fence on the same key is still above H.
fn assert_next_fence_above_h_after_removing_with(command: &str) {
    let server = Server::start();
    let mut con = server.conn();
    restore_lock_at_h(&mut con, "k", "t");
    let deleted: i64 = redis::cmd(command).arg("k").query(&mut con).unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(dbsize(&mut con), 0);
    assert_above_h(acquire(&mut con, "k", 60_000, None).unwrap().1);
}

#[test]
fn next_fence_is_above_h_after_del() {
    assert_next_fence_above_h_after_removing_with("DEL");
}

#[test]
fn next_fence_is_above_h_after_unlink() {
    assert_next_fence_above_h_after_removing_with("UNLINK");
}

#[test]
fn next_fence_is_above_h_after_flushall() {
    let server = Server::start();
    let mut con = server.conn();
    restore_lock_at_h(&mut con, "k", "t");
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    assert_eq!(dbsize(&mut con), 0);
    assert_above_h(acquire(&mut con, "k", 60_000, None).unwrap().1);
}

#[test]
fn next_fence_is_above_h_after_restart_from_rdb_written_by_save() {
    let mut server = Server::start();
    let mut con = server.conn();
    restore_lock_at_h(&mut con, "k", "t");
    assert_eq!(release(&mut con, "k", "t"), 1);
    // The RDB holds no lock: only its aux field can carry H.
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    server.kill();
    server.restart();
    let mut con = server.conn();
    assert_eq!(dbsize(&mut con), 0);
    assert_above_h(next_fence(&mut con));
}

#[test]
fn next_fence_is_above_h_after_restart_from_rdb_written_by_shutdown() {
    let mut server = Server::start_with(&["--save", "3600 1"]);
    let mut con = server.conn();
    restore_lock_at_h(&mut con, "k", "t");
    assert_eq!(release(&mut con, "k", "t"), 1);
    server.shutdown();
    assert!(
        server.dir.join("dump.rdb").exists(),
        "SHUTDOWN did not save"
    );
    server.restart();
    let mut con = server.conn();
    assert_eq!(dbsize(&mut con), 0);
    assert_above_h(next_fence(&mut con));
}

#[test]
fn a_held_lock_keeps_its_fence_and_deadline_across_restart_from_rdb() {
    let mut server = Server::start();
    let mut con = server.conn();
    restore_lock_at_h(&mut con, "k", "t");
    let before = info(&mut con, "k").unwrap();
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    server.kill();
    server.restart();
    let mut con = server.conn();
    let after = info(&mut con, "k").unwrap();
    assert_eq!(after["fence"], H as i64);
    assert_eq!(after["deadline"], before["deadline"]);
    assert_eq!(acquire(&mut con, "k", 1_000, Some("other")), None);
    assert_eq!(release(&mut con, "k", "t"), 1);
    assert_above_h(next_fence(&mut con));
}

#[test]
fn next_fence_is_above_h_after_restart_from_aof_without_rewrite() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    // Let any startup rewrite of the (empty) base finish first, so that
    // everything below is only in the incremental AOF.
    wait_for_aof_rewrite(&mut con);
    restore_lock_at_h(&mut con, "k", "t");
    assert_eq!(release(&mut con, "k", "t"), 1);
    // SIGKILL: no final save or rewrite; the AOF is already written.
    server.kill();
    server.restart();
    let mut con = server.conn();
    assert_eq!(dbsize(&mut con), 0);
    assert_above_h(next_fence(&mut con));
}

#[test]
fn a_held_lock_keeps_its_fence_and_deadline_across_restart_from_aof() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    wait_for_aof_rewrite(&mut con);
    // With the mark at H the grant gets H + 1, so after the restart only the
    // replayed grant itself can put the next fence above it.
    restore_lock_at_h(&mut con, "k", "t");
    assert_eq!(release(&mut con, "k", "t"), 1);
    let (token, fence) = acquire(&mut con, "held", 60_000, None).unwrap();
    assert_above_h(fence);
    assert_eq!(extend(&mut con, "held", &token, 120_000), 1);
    let before = info(&mut con, "held").unwrap();
    server.kill();
    server.restart();
    let mut con = server.conn();
    let after = info(&mut con, "held").unwrap();
    assert_eq!(after["fence"], fence as i64);
    assert_eq!(after["deadline"], before["deadline"]);
    assert_eq!(acquire(&mut con, "held", 1_000, None), None);
    assert_eq!(release(&mut con, "held", &token), 1);
    let next = next_fence(&mut con);
    assert!(next > fence, "fence {next} after {fence}");
}

#[test]
fn next_fence_is_above_h_after_restart_from_aof_after_bgrewriteaof() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    wait_for_aof_rewrite(&mut con);
    restore_lock_at_h(&mut con, "k", "t");
    assert_eq!(release(&mut con, "k", "t"), 1);
    rewrite_aof(&mut con);
    // The rewritten AOF holds no lock: only the aux field of its RDB
    // preamble can carry H.
    server.kill();
    server.restart();
    let mut con = server.conn();
    assert_eq!(dbsize(&mut con), 0);
    assert_above_h(next_fence(&mut con));
}

/// With `aof-use-rdb-preamble no` the rewritten AOF is commands only: it
/// has no RDB aux field to carry the high-water mark. As docs/guarantees.md says, the
/// rewrite then keeps the fences of the locks that are live, and the rest of
/// the history rests on the clock.
#[test]
fn aof_rewrite_without_rdb_preamble_keeps_live_fences_and_falls_back_to_the_clock() {
    let mut server = Server::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut con = server.conn();
    wait_for_aof_rewrite(&mut con);

    // (a) A lock at H that is still held is in the rewritten AOF, fence and
    // all: it keeps H, and the next grant is above it.
    restore_lock_at_h(&mut con, "k", "t");
    rewrite_aof(&mut con);
    server.kill();
    server.restart();
    let mut con = server.conn();
    assert_eq!(info(&mut con, "k").unwrap()["fence"], H as i64);
    assert_eq!(acquire(&mut con, "k", 1_000, Some("other")), None);
    let (token, fence) = acquire(&mut con, "j", 60_000, None).unwrap();
    assert_above_h(fence);

    // (b) Once no lock is live, a rewrite keeps no fence: after a restart
    // the next fence rests on the clock.
    assert_eq!(release(&mut con, "k", "t"), 1);
    assert_eq!(release(&mut con, "j", &token), 1);
    assert_eq!(dbsize(&mut con), 0);
    rewrite_aof(&mut con);
    server.kill();
    server.restart();
    let mut con = server.conn();
    assert_eq!(dbsize(&mut con), 0);
    let before = now_us();
    let (_, fence) = acquire(&mut con, "k", 60_000, None).unwrap();
    assert!(fence >= before, "fence {fence} below clock {before}");
    assert!(fence <= MAX_FENCE);
}

#[test]
fn next_fence_is_above_h_after_debug_reload() {
    let server = Server::start();
    let mut con = server.conn();
    restore_lock_at_h(&mut con, "k", "t");
    assert_eq!(release(&mut con, "k", "t"), 1);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(dbsize(&mut con), 0);
    assert_above_h(next_fence(&mut con));
}

#[test]
fn next_fence_is_above_h_on_a_promoted_replica_that_saw_h_replicated() {
    let (master, replica) = pair();
    let mut m = master.conn();
    restore_lock_at_h(&mut m, "k", "t");
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut m).unwrap();
    sync_replica(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(dbsize(&mut r), 0);
    promote(&mut r);
    assert_above_h(next_fence(&mut r));
}

#[test]
fn next_fence_on_a_promoted_replica_is_above_the_last_replicated_grant() {
    let (master, replica) = pair();
    let mut m = master.conn();
    restore_lock_at_h(&mut m, "k", "t");
    assert_eq!(release(&mut m, "k", "t"), 1);
    // Granted above H (the clock is far below): only the replicated grant
    // (LOCK.SETSTATE) tells the replica about this fence.
    let (token, granted) = acquire(&mut m, "g", 60_000, None).unwrap();
    assert_above_h(granted);
    assert_eq!(release(&mut m, "g", &token), 1);
    sync_replica(&master, &replica);
    let mut r = replica.conn();
    promote(&mut r);
    let next = next_fence(&mut r);
    assert!(
        next > granted,
        "fence {next} after replicated grant {granted}"
    );
}

#[test]
fn next_fence_is_above_h_on_a_promoted_replica_that_learned_h_by_full_sync() {
    let master = start_master();
    let mut m = master.conn();
    restore_lock_at_h(&mut m, "k", "t");
    assert_eq!(release(&mut m, "k", "t"), 1);
    // The replica syncs after the lock is gone: only the aux field of the
    // sync RDB can carry H.
    let replica = Server::start();
    replica.replicate_from(&master);
    let mut r = replica.conn();
    assert_eq!(dbsize(&mut r), 0);
    promote(&mut r);
    assert_above_h(next_fence(&mut r));
}

// ---------------------------------------------------------------------------
// 3. Grants lost in a failover

#[test]
fn promoted_replica_issues_fences_above_grants_it_never_received() {
    let mut master = start_master();
    let replica = Server::start();
    replica.replicate_from(&master);
    let mut m = master.conn();
    let mut r = replica.conn();
    let (_, seen) = acquire(&mut m, "seen", 60_000, None).unwrap();
    sync_replica(&master, &replica);
    assert_eq!(info(&mut r, "seen").unwrap()["fence"], seen as i64);

    // Cut the link: point the replica at a port that never answers (held
    // here, so no other server can take it).
    let black_hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = black_hole.local_addr().unwrap().port();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(port)
        .query(&mut r)
        .unwrap();
    assert_eq!(
        info_field(&mut r, "replication", "master_link_status"),
        "down"
    );

    let mut lost = Vec::new();
    for i in 0..5 {
        let key = format!("lost{i}");
        lost.push((key.clone(), acquire(&mut m, &key, 60_000, None).unwrap().1));
    }
    std::thread::sleep(Duration::from_millis(200));
    for (key, _) in &lost {
        assert!(!exists(&mut r, key), "{key} reached the replica");
    }
    master.kill();
    promote(&mut r);

    let highest_lost = lost.iter().map(|(_, f)| *f).max().unwrap();
    for (key, _) in &lost {
        let (_, fence) = acquire(&mut r, key, 60_000, None).unwrap();
        assert!(
            fence > highest_lost,
            "{key}: fence {fence} not above lost fence {highest_lost}"
        );
    }
    assert_eq!(info(&mut r, "seen").unwrap()["fence"], seen as i64);
    drop(black_hole);
}

// ---------------------------------------------------------------------------
// 4. The 2^53 ceiling

#[test]
fn acquire_at_the_fence_ceiling_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let payload = lock_payload(&mut con, "holder", MAX_FENCE);
    restore(&mut con, "top", 600_000, &payload).expect("RESTORE");
    assert_eq!(info(&mut con, "top").unwrap()["fence"], MAX_FENCE as i64);

    let before_size = dbsize(&mut con);
    let before_digest = digest(&mut con);
    for cmd in [
        redis::cmd("LOCK.ACQUIRE").arg("other").arg(1_000).clone(),
        redis::cmd("LOCK.ACQUIRE")
            .arg("other")
            .arg(1_000)
            .arg("TOKEN")
            .arg("x")
            .clone(),
    ] {
        let err = error_of(&mut con, &cmd);
        assert!(err.starts_with("ERR fence space exhausted"), "{err}");
    }
    assert_eq!(dbsize(&mut con), before_size);
    assert_eq!(digest(&mut con), before_digest);
    assert!(!exists(&mut con, "other"));
}

#[test]
fn the_holder_at_the_fence_ceiling_can_still_renew_extend_and_release() {
    let server = Server::start();
    let mut con = server.conn();
    let payload = lock_payload(&mut con, "holder", MAX_FENCE);
    restore(&mut con, "top", 600_000, &payload).expect("RESTORE");

    let renewed = acquire(&mut con, "top", 5_000, Some("holder")).unwrap();
    assert_eq!(renewed, ("holder".to_string(), MAX_FENCE));
    let ttl = pttl(&mut con, "top");
    assert!(ttl > 0 && ttl <= 5_000, "PTTL {ttl}");
    assert_eq!(extend(&mut con, "top", "holder", 90_000), 1);
    assert!(pttl(&mut con, "top") > 80_000);
    assert_eq!(release(&mut con, "top", "holder"), 1);
    // The ceiling outlives the lock.
    let err = error_of(&mut con, redis::cmd("LOCK.ACQUIRE").arg("top").arg(1_000));
    assert!(err.starts_with("ERR fence space exhausted"), "{err}");
    assert_eq!(dbsize(&mut con), 0);
}

// ---------------------------------------------------------------------------
// 5. Migration

#[test]
fn a_restored_lock_puts_this_servers_next_fence_above_its_own() {
    let source = Server::start();
    let target = Server::start();
    let mut s = source.conn();
    let mut t = target.conn();
    let payload = lock_payload(&mut s, "t", H);
    restore(&mut t, "k", 600_000, &payload).expect("RESTORE");
    let got = info(&mut t, "k").unwrap();
    assert_eq!(got["fence"], H as i64);
    assert_above_h(next_fence(&mut t));
    // The restored lock is a real lock: its holder still owns it.
    assert_eq!(acquire(&mut t, "k", 1_000, Some("other")), None);
    assert_eq!(release(&mut t, "k", "t"), 1);
    assert_above_h(next_fence(&mut t));
}

#[test]
fn a_migrated_lock_puts_the_targets_next_fence_above_its_own() {
    let source = Server::start();
    let target = Server::start();
    let mut s = source.conn();
    restore_lock_at_h(&mut s, "k", "t");
    let moved: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("k")
        .arg(0)
        .arg(5_000)
        .query(&mut s)
        .unwrap();
    assert_eq!(moved, "OK");
    assert!(!exists(&mut s, "k"));
    let mut t = target.conn();
    assert_eq!(info(&mut t, "k").unwrap()["fence"], H as i64);
    assert_eq!(release(&mut t, "k", "t"), 1);
    assert_above_h(next_fence(&mut t));
}
