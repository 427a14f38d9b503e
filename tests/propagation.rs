//! Effects nothing reads are not built: with no AOF, no replica and no
//! replication backlog, a master skips building each effect (it still counts
//! the change for the `save` points), and builds them again from the moment
//! anything could read them. These tests attach readers at every point where
//! one can appear (a replica's full sync, a partial resync from the backlog,
//! an AOF switched on at run time) after writes whose effects were not built,
//! and check that the reader ends with exactly the master's state.

mod common;
use common::*;

use std::time::Duration;

/// `INFO lock`'s `lock_<field>` as a number.
fn lock_stat(con: &mut Connection, field: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{field}"))
        .parse()
        .unwrap()
}

/// Wait (bounded) until the master has seen, at its once-a-second check,
/// that nothing reads its effects.
fn wait_unread(con: &mut Connection) {
    wait_until(Duration::from_secs(10), || {
        lock_stat(con, "propagation_read") == 0
    });
}

/// Changes since the last save, as the `save` points count them.
fn dirty(con: &mut Connection) -> i64 {
    info_field(con, "persistence", "rdb_changes_since_last_save")
        .parse()
        .unwrap()
}

fn cmd(con: &mut Connection, args: &[&str]) -> Value {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
}

/// A mix of every kind of write: grants (drawn and given tokens, one
/// labelled), a renewal, an extension, a release, shared holders and
/// semaphore permits, one of them given back. `tag` keeps the keys of two
/// rounds apart.
fn writes(con: &mut Connection, tag: &str) {
    for i in 0..4 {
        acquire(con, &format!("{tag}:lock:{i}"), 60_000 + i * 1_000, None).unwrap();
    }
    let given = format!("{tag}-token");
    let lock = format!("{tag}:given");
    acquire(con, &lock, 30_000, Some(&given)).unwrap();
    acquire(con, &lock, 40_000, Some(&given)).unwrap(); // renews
    assert_eq!(extend(con, &lock, &given, 90_000), 1);
    let (gone, _) = acquire(con, &format!("{tag}:gone"), 30_000, None).unwrap();
    assert_eq!(release(con, &format!("{tag}:gone"), &gone), 1);
    cmd(
        con,
        &[
            "LOCK.ACQUIRE",
            &format!("{tag}:owned"),
            "50000",
            "OWNER",
            "pod-7",
        ],
    );
    let read = format!("{tag}:read");
    cmd(
        con,
        &["LOCK.ACQUIRE", &read, "50000", "TOKEN", "r1", "SHARED"],
    );
    cmd(
        con,
        &["LOCK.ACQUIRE", &read, "55000", "TOKEN", "r2", "SHARED"],
    );
    let sem = format!("{tag}:sem");
    cmd(con, &["SEM.ACQUIRE", &sem, "3", "50000", "TOKEN", "p1"]);
    cmd(
        con,
        &[
            "SEM.ACQUIRE",
            &sem,
            "3",
            "60000",
            "TOKEN",
            "p2",
            "COUNT",
            "2",
        ],
    );
    assert_eq!(cmd(con, &["SEM.RELEASE", &sem, "p1"]), Value::Int(1));
}

/// The reader has the master's whole keyspace: the same digest (tokens,
/// fences, deadlines, holders), and the same fence and deadline per lock.
fn assert_same_state(m: &mut Connection, r: &mut Connection, tags: &[&str]) {
    assert_eq!(digest(r), digest(m));
    assert_eq!(dbsize(r), dbsize(m));
    for tag in tags {
        for key in (0..4)
            .map(|i| format!("{tag}:lock:{i}"))
            .chain([format!("{tag}:given"), format!("{tag}:owned")])
        {
            assert_eq!(
                fence_and_deadline(r, &key),
                fence_and_deadline(m, &key),
                "{key}"
            );
        }
        assert!(!exists(r, &format!("{tag}:gone")));
    }
}

#[test]
fn with_nothing_reading_effects_are_not_built_but_each_counts_for_the_save_points() {
    let master = start_master();
    let mut m = master.conn();
    wait_unread(&mut m);
    let (unbuilt, changes) = (lock_stat(&mut m, "effects_unbuilt"), dirty(&mut m));
    writes(&mut m, "a");
    let skipped = lock_stat(&mut m, "effects_unbuilt") - unbuilt;
    // 4 + 2 + 1 + 2 (grant, release) + 1 + 2 + 3 effects.
    assert!(skipped >= 15, "{skipped} effects skipped");
    assert_eq!(dirty(&mut m) - changes, skipped, "one change per effect");
    // Refusals change nothing and count nothing.
    assert!(acquire(&mut m, "a:lock:0", 1_000, None).is_none());
    assert_eq!(lock_stat(&mut m, "effects_unbuilt") - unbuilt, skipped);
}

#[test]
fn a_replica_that_syncs_after_unbuilt_effects_gets_them_all_and_every_later_one() {
    let master = start_master();
    let mut m = master.conn();
    wait_unread(&mut m);
    writes(&mut m, "before");
    let unbuilt = lock_stat(&mut m, "effects_unbuilt");
    assert!(unbuilt > 0);

    let replica = Server::start();
    replica.replicate_from(&master);
    let mut r = replica.conn();
    assert_eq!(lock_stat(&mut m, "propagation_read"), 1);
    assert_same_state(&mut m, &mut r, &["before"]);

    // From the sync on, every effect is built and sent, also a second later
    // (the replica and the backlog keep the once-a-second check at "read").
    std::thread::sleep(Duration::from_millis(1_500));
    writes(&mut m, "after");
    sync_replica(&master, &replica);
    assert_eq!(lock_stat(&mut m, "effects_unbuilt"), unbuilt);
    assert_eq!(lock_stat(&mut m, "propagation_read"), 1);
    assert_same_state(&mut m, &mut r, &["before", "after"]);
}

#[test]
fn the_backlog_keeps_effects_built_after_the_replica_left_and_its_partial_resync_is_whole() {
    let master = start_master();
    let mut m = master.conn();
    let replica = Server::start();
    replica.replicate_from(&master);
    let mut r = replica.conn();

    // The replica leaves (for a master that does not answer, so that it
    // keeps its place in this master's history); the master keeps its
    // backlog (repl-backlog-ttl).
    cmd(&mut r, &["REPLICAOF", "127.0.0.1", "1"]);
    wait_until(Duration::from_secs(10), || {
        info_field(&mut m, "replication", "connected_slaves") == "0"
    });
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(lock_stat(&mut m, "propagation_read"), 1);
    let unbuilt = lock_stat(&mut m, "effects_unbuilt");
    writes(&mut m, "away");
    assert_eq!(lock_stat(&mut m, "effects_unbuilt"), unbuilt);

    // It comes back and resyncs from the backlog, without a full sync.
    let partial: i64 = info_field(&mut m, "stats", "sync_partial_ok")
        .parse()
        .unwrap();
    replica.replicate_from(&master);
    let now: i64 = info_field(&mut m, "stats", "sync_partial_ok")
        .parse()
        .unwrap();
    assert_eq!(now, partial + 1, "a partial resync");
    assert_same_state(&mut m, &mut r, &["away"]);

    // Once the backlog is gone, effects are skipped again, and the next
    // replica needs (and gets) a full sync.
    cmd(&mut m, &["CONFIG", "SET", "repl-backlog-ttl", "1"]);
    promote(&mut r);
    wait_unread(&mut m);
    writes(&mut m, "alone");
    assert!(lock_stat(&mut m, "effects_unbuilt") > unbuilt);
    let full: i64 = info_field(&mut m, "stats", "sync_full").parse().unwrap();
    replica.replicate_from(&master);
    let now: i64 = info_field(&mut m, "stats", "sync_full").parse().unwrap();
    assert_eq!(now, full + 1, "a full sync");
    assert_same_state(&mut m, &mut r, &["away", "alone"]);
}

#[test]
fn an_aof_switched_on_at_run_time_keeps_the_locks_granted_before_and_after() {
    let mut master = Server::start();
    let mut m = master.conn();
    wait_unread(&mut m);
    writes(&mut m, "before");
    assert!(lock_stat(&mut m, "effects_unbuilt") > 0);

    cmd(&mut m, &["CONFIG", "SET", "appendonly", "yes"]);
    // Every write reaches the file before its reply: with `everysec`, a
    // busy machine's slow fsync makes Redis hold writes back (up to 2 s),
    // and the kill below would lose them for that reason alone.
    cmd(&mut m, &["CONFIG", "SET", "appendfsync", "always"]);
    wait_for_aof_rewrite(&mut m);
    assert_eq!(lock_stat(&mut m, "propagation_read"), 1);
    let unbuilt = lock_stat(&mut m, "effects_unbuilt");
    writes(&mut m, "after");
    assert_eq!(lock_stat(&mut m, "effects_unbuilt"), unbuilt);
    let digest_before = digest(&mut m);
    let locks: Vec<(i64, i64)> = ["before:given", "after:given", "after:lock:3"]
        .iter()
        .map(|k| fence_and_deadline(&mut m, k))
        .collect();

    // Killed, not shut down: only the AOF can bring the locks back.
    master.kill();
    master.restart_with(&["--appendonly", "yes"]);
    let mut m = master.conn();
    assert_eq!(digest(&mut m), digest_before);
    let reloaded: Vec<(i64, i64)> = ["before:given", "after:given", "after:lock:3"]
        .iter()
        .map(|k| fence_and_deadline(&mut m, k))
        .collect();
    assert_eq!(reloaded, locks);
}
