//! Replication: a replica ends up with exactly the master's locks (token,
//! fence, absolute deadline), because the master sends effects, never the
//! commands that decide them.

mod common;
use common::*;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Run `write` on the master while the replica is busy in `DEBUG SLEEP`, so
/// that the replica applies it a few hundred ms late: a deadline the replica
/// computed from its own clock would then differ from the master's.
fn while_replica_is_busy(replica: &Server, write: impl FnOnce()) {
    let mut busy = replica.conn();
    let sleeper = std::thread::spawn(move || {
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.3")
            .query(&mut busy)
            .expect("DEBUG SLEEP");
    });
    std::thread::sleep(Duration::from_millis(100));
    write();
    sleeper.join().unwrap();
}

/// The master and the replica agree on `key`: same fence, same absolute
/// deadline, and a TTL within a generous tolerance.
fn assert_same_lock(m: &mut Connection, r: &mut Connection, key: &str) {
    let on_master: HashMap<String, i64> =
        info(m, key).unwrap_or_else(|| panic!("{key} free on master"));
    let on_replica = info(r, key).unwrap_or_else(|| panic!("{key} free on replica"));
    assert_eq!(on_replica["fence"], on_master["fence"], "{key}");
    assert_eq!(on_replica["deadline"], on_master["deadline"], "{key}");
    assert!(
        (on_replica["ttl"] - on_master["ttl"]).abs() < 2_000,
        "{key}: ttl {} on replica, {} on master",
        on_replica["ttl"],
        on_master["ttl"]
    );
}

/// A raw replication link: `SYNC`, the RDB skipped, then the command stream.
struct ReplicationStream {
    reader: BufReader<TcpStream>,
    /// Packed effects read so far.
    packed: usize,
}

impl ReplicationStream {
    fn open(master: &Server) -> Self {
        let mut stream = TcpStream::connect(("127.0.0.1", master.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(b"SYNC\r\n").unwrap();
        let mut link = Self {
            reader: BufReader::new(stream),
            packed: 0,
        };
        link.skip_rdb();
        link
    }

    /// One line without its line ending.
    fn line(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).unwrap();
        assert!(line.ends_with(b"\n"), "link closed: {line:?}");
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        line
    }

    fn skip_rdb(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(Instant::now() < deadline, "no RDB from the master");
            let line = self.line();
            if line.is_empty() {
                continue; // keepalive while the master prepares the RDB
            }
            let header = String::from_utf8_lossy(&line).to_string();
            if let Some(mark) = header.strip_prefix("$EOF:") {
                // Diskless form: the payload ends with the 40-byte mark.
                let mark = mark.as_bytes().to_vec();
                let mut tail = Vec::new();
                let mut byte = [0u8; 1];
                while !tail.ends_with(&mark) {
                    self.reader.read_exact(&mut byte).unwrap();
                    tail.push(byte[0]);
                }
            } else if let Some(len) = header.strip_prefix('$') {
                let len: usize = len.parse().unwrap();
                let mut rdb = vec![0u8; len];
                self.reader.read_exact(&mut rdb).unwrap();
                assert!(is_rdb(&rdb), "not an RDB");
            } else {
                panic!("unexpected reply to SYNC: {header:?}");
            }
            return;
        }
    }

    /// The next command in the stream, as strings, a packed effect spelled
    /// out (`expand_effect`; counted in `packed`).
    fn command(&mut self) -> Vec<String> {
        let header = self.line();
        let header = String::from_utf8_lossy(&header).to_string();
        let n: usize = header
            .strip_prefix('*')
            .unwrap_or_else(|| panic!("not a command: {header:?}"))
            .parse()
            .unwrap();
        let raw: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = self.line();
                let len: usize = String::from_utf8_lossy(&len)
                    .strip_prefix('$')
                    .expect("bulk string")
                    .parse()
                    .unwrap();
                let mut arg = vec![0u8; len + 2];
                self.reader.read_exact(&mut arg).unwrap();
                arg.truncate(len);
                arg
            })
            .collect();
        let expanded = expand_effect(raw.clone());
        if expanded != raw {
            self.packed += 1;
        }
        expanded
            .iter()
            .map(|arg| String::from_utf8_lossy(arg).to_string())
            .collect()
    }

    /// Commands that change data (no PING, SELECT, REPLCONF, MULTI, EXEC),
    /// up to and including the first for which `last` holds.
    fn effects_until(&mut self, last: impl Fn(&[String]) -> bool) -> Vec<Vec<String>> {
        self.until(&["PING", "SELECT", "REPLCONF", "MULTI", "EXEC"], last)
    }

    /// The commands of the stream but those named in `skip`, up to and
    /// including the first for which `last` holds.
    fn until(&mut self, skip: &[&str], last: impl Fn(&[String]) -> bool) -> Vec<Vec<String>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut effects = Vec::new();
        loop {
            assert!(Instant::now() < deadline, "stream so far: {effects:?}");
            let mut cmd = self.command();
            cmd[0] = cmd[0].to_uppercase();
            if skip.contains(&cmd[0].as_str()) {
                continue;
            }
            let done = last(&cmd);
            effects.push(cmd);
            if done {
                return effects;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 1–3. The replica holds the master's state

#[test]
fn replica_info_equals_the_masters() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let mut fence = 0;
    while_replica_is_busy(&replica, || {
        fence = acquire(&mut m, "k", 30_000, None).unwrap().1;
    });
    sync_replica(&master, &replica);
    assert_same_lock(&mut m, &mut r, "k");
    assert_eq!(info(&mut r, "k").unwrap()["fence"], fence as i64);
    assert_eq!(digest(&mut r), digest(&mut m));
}

#[test]
fn renew_reaches_the_replica_as_the_same_absolute_deadline() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let (_, fence) = acquire(&mut m, "k", 10_000, Some("me")).unwrap();
    sync_replica(&master, &replica);
    let (_, first_deadline) = fence_and_deadline(&mut r, "k");
    while_replica_is_busy(&replica, || {
        let renewed = acquire(&mut m, "k", 60_000, Some("me")).unwrap();
        assert_eq!(renewed.1, fence);
    });
    sync_replica(&master, &replica);
    assert_same_lock(&mut m, &mut r, "k");
    let (replica_fence, deadline) = fence_and_deadline(&mut r, "k");
    assert_eq!(replica_fence, fence as i64);
    assert!(deadline >= first_deadline + 40_000, "deadline did not move");
}

#[test]
fn extend_reaches_the_replica_as_the_same_absolute_deadline() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "k", 10_000, Some("me")).unwrap();
    sync_replica(&master, &replica);
    let (_, first_deadline) = fence_and_deadline(&mut r, "k");
    while_replica_is_busy(&replica, || {
        assert_eq!(extend(&mut m, "k", "me", 90_000), 1);
    });
    sync_replica(&master, &replica);
    assert_same_lock(&mut m, &mut r, "k");
    let (_, deadline) = fence_and_deadline(&mut r, "k");
    assert!(deadline >= first_deadline + 70_000, "deadline did not move");
    // Shortening travels the same way.
    assert_eq!(extend(&mut m, "k", "me", 20_000), 1);
    sync_replica(&master, &replica);
    assert_same_lock(&mut m, &mut r, "k");
}

#[test]
fn release_on_the_master_removes_the_lock_on_the_replica() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "k", 60_000, Some("me")).unwrap();
    sync_replica(&master, &replica);
    assert!(info(&mut r, "k").is_some());
    assert_eq!(release(&mut m, "k", "me"), 1);
    sync_replica(&master, &replica);
    assert_eq!(info(&mut r, "k"), None);
    assert_eq!(dbsize(&mut r), 0);
}

#[test]
fn expiry_on_the_master_removes_the_lock_on_the_replica() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "k", 200, Some("me")).unwrap();
    sync_replica(&master, &replica);
    // The master's active expiry deletes the key and sends DEL; a replica
    // never deletes a master's key by itself, so its DBSIZE drops only then.
    wait_until(Duration::from_secs(10), || dbsize(&mut m) == 0);
    sync_replica(&master, &replica);
    assert_eq!(dbsize(&mut r), 0);
    assert_eq!(info(&mut r, "k"), None);
}

// ---------------------------------------------------------------------------
// 4–5. Promotion and read-only replicas

#[test]
fn promoted_replica_releases_for_the_original_token_only() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let (token, fence) = acquire(&mut m, "k", 60_000, None).unwrap();
    sync_replica(&master, &replica);
    promote(&mut r);
    assert_eq!(release(&mut r, "k", "foreign"), 0);
    assert_eq!(extend(&mut r, "k", "foreign", 1_000), 0);
    assert_eq!(acquire(&mut r, "k", 1_000, Some("foreign")), None);
    assert_eq!(info(&mut r, "k").unwrap()["fence"], fence as i64);
    assert_eq!(release(&mut r, "k", &token), 1);
    assert_eq!(info(&mut r, "k"), None);
    let (_, next) = acquire(&mut r, "k", 1_000, None).unwrap();
    assert!(next > fence, "fence {next} after {fence}");
}

#[test]
fn writes_on_a_replica_get_readonly_errors() {
    let (master, replica) = pair();
    assert_lock_writes_are_refused_on(&master, &replica);
}

/// Even where the operator made the replica writable, a local grant or
/// release would diverge from the master: the module refuses them itself.
#[test]
fn lock_writes_are_refused_on_a_writable_replica_too() {
    let master = start_master();
    let replica = Server::start_with(&["--replica-read-only", "no"]);
    replica.replicate_from(&master);
    assert_lock_writes_are_refused_on(&master, &replica);
    // Plain writes do work there, so the setting really is in effect.
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("1")
        .query(&mut replica.conn())
        .unwrap();
    // And after promotion the replica grants normally.
    let mut r = replica.conn();
    promote(&mut r);
    assert!(acquire(&mut r, "free", 1_000, None).is_some());
    assert_eq!(release(&mut r, "held", "me"), 1);
}

fn assert_lock_writes_are_refused_on(master: &Server, replica: &Server) {
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "held", 60_000, Some("me")).unwrap();
    sync_replica(master, replica);
    let before = digest(&mut r);
    for cmd in [
        redis::cmd("LOCK.ACQUIRE").arg("free").arg(1_000).clone(),
        redis::cmd("LOCK.ACQUIRE")
            .arg("held")
            .arg(1_000)
            .arg("TOKEN")
            .arg("me")
            .clone(),
        redis::cmd("LOCK.EXTEND")
            .arg("held")
            .arg("me")
            .arg(1_000)
            .clone(),
        redis::cmd("LOCK.RELEASE").arg("held").arg("me").clone(),
    ] {
        let err = error_of(&mut r, &cmd);
        assert!(err.starts_with("READONLY"), "{err}");
    }
    let err = error_of(
        &mut r,
        redis::cmd("LOCK.SETSTATE").arg("x").arg("t").arg(5).arg(-1),
    );
    // Redis refuses it on a read-only replica; the module on a writable one.
    assert!(
        err.starts_with("READONLY") || err.starts_with("ERR LOCK.SETSTATE is internal"),
        "{err}"
    );
    assert_eq!(digest(&mut r), before);
    // Reading works.
    assert_same_lock(&mut m, &mut r, "held");
    assert_eq!(
        info(&mut m, "held").map(|i| i["fence"]),
        info(&mut r, "held").map(|i| i["fence"])
    );
}

// ---------------------------------------------------------------------------
// 6. The stream carries effects only

#[test]
fn replication_stream_carries_effects_with_absolute_values_only() {
    let master = Server::start();
    let mut link = ReplicationStream::open(&master);
    let mut con = master.conn();

    let t0 = now_ms();
    let (auto_token, auto_fence) = acquire(&mut con, "auto", 10_000, None).unwrap();
    let t1 = now_ms();
    let (_, mine_fence) = acquire(&mut con, "mine", 20_000, Some("mine-token")).unwrap();
    let t2 = now_ms();
    // Refusals and failures change nothing, so they send nothing.
    assert_eq!(acquire(&mut con, "mine", 20_000, Some("intruder")), None);
    assert_eq!(extend(&mut con, "mine", "intruder", 1_000), 0);
    assert_eq!(release(&mut con, "mine", "intruder"), 0);
    let t3 = now_ms();
    assert_eq!(extend(&mut con, "mine", "mine-token", 30_000), 1);
    let t4 = now_ms();
    let renewed = acquire(&mut con, "mine", 40_000, Some("mine-token")).unwrap();
    assert_eq!(renewed.1, mine_fence);
    let t5 = now_ms();
    assert_eq!(release(&mut con, "auto", &auto_token), 1);
    assert_eq!(release(&mut con, "mine", "mine-token"), 1);

    let effects =
        link.effects_until(|c| c[0] == "DEL" && c.get(1).map(String::as_str) == Some("mine"));
    for cmd in &effects {
        assert!(
            ![
                "LOCK.ACQUIRE",
                "LOCK.EXTEND",
                "LOCK.RELEASE",
                "PEXPIRE",
                "EXPIRE"
            ]
            .contains(&cmd[0].as_str()),
            "a non-effect was replicated: {cmd:?}"
        );
    }
    assert_eq!(effects.len(), 6, "{effects:?}");
    // The four states went out packed: `LOCK.SETSTATE key token state`.
    assert_eq!(link.packed, 4);

    let deadline_in = |cmd: &[String], at: usize, from: i64, to: i64| {
        let d: i64 = cmd[at].parse().unwrap();
        assert!(
            d >= from && d <= to,
            "{cmd:?}: deadline not in [{from}, {to}]"
        );
    };
    // `LOCK.SETSTATE key token fence deadline granted [extends]`, without
    // `extends` for a grant.
    let setstate = |cmd: &[String], key: &str, token: &str, fence: u64, extends: &str| {
        assert_eq!(&cmd[..4], ["LOCK.SETSTATE", key, token, &fence.to_string()]);
        if extends == "0" {
            assert_eq!(cmd.len(), 6, "{cmd:?}");
        } else {
            assert_eq!(cmd.len(), 7, "{cmd:?}");
            assert_eq!(cmd[6], extends, "{cmd:?}");
        }
    };
    setstate(&effects[0], "auto", &auto_token, auto_fence, "0");
    deadline_in(&effects[0], 4, t0 + 10_000, t1 + 10_000);
    deadline_in(&effects[0], 5, t0, t1);
    setstate(&effects[1], "mine", "mine-token", mine_fence, "0");
    deadline_in(&effects[1], 4, t1 + 20_000, t2 + 20_000);
    deadline_in(&effects[1], 5, t1, t2);
    // Extend and renew: the same grant time, one more extension each.
    setstate(&effects[2], "mine", "mine-token", mine_fence, "1");
    deadline_in(&effects[2], 4, t3 + 30_000, t4 + 30_000);
    assert_eq!(effects[2][5], effects[1][5]);
    setstate(&effects[3], "mine", "mine-token", mine_fence, "2");
    deadline_in(&effects[3], 4, t4 + 40_000, t5 + 40_000);
    assert_eq!(effects[3][5], effects[1][5]);
    assert_eq!(effects[4], ["DEL", "auto"]);
    assert_eq!(effects[5], ["DEL", "mine"]);
}

/// LOCK.GUARD sends what the guarded command changed, as Redis itself
/// replicates it (`SET … EX` as `SET … PXAT`, an absolute time), after the
/// grant that allowed it; a refused or read-only guard sends nothing, and
/// LOCK.GUARD itself never appears in the stream.
#[test]
fn guarded_writes_are_replicated_as_their_effects_after_the_grant() {
    let master = Server::start();
    let mut link = ReplicationStream::open(&master);
    let mut con = master.conn();
    let (_, fence) = acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let guard = |con: &mut Connection, token: &str, args: &[&str]| -> redis::RedisResult<Value> {
        redis::cmd("LOCK.GUARD")
            .arg("lk")
            .arg(token)
            .arg(args)
            .query(con)
    };
    guard(&mut con, "intruder", &["SET", "data", "lost"]).unwrap_err();
    guard(&mut con, "me", &["GET", "data"]).unwrap();
    let t0 = now_ms();
    guard(&mut con, "me", &["SET", "data", "v", "EX", "100"]).unwrap();
    let t1 = now_ms();
    guard(&mut con, "me", &["INCRBY", "total", "5"]).unwrap();
    assert_eq!(release(&mut con, "lk", "me"), 1);

    let effects = link.effects_until(|c| c[0] == "DEL");
    assert_eq!(effects.len(), 4, "{effects:?}");
    assert_eq!(
        &effects[0][..4],
        ["LOCK.SETSTATE", "lk", "me", &fence.to_string()]
    );
    assert_eq!(effects[1][0].to_uppercase(), "SET");
    assert_eq!(&effects[1][1..3], ["data", "v"]);
    assert_eq!(effects[1][3].to_uppercase(), "PXAT", "{:?}", effects[1]);
    let at: i64 = effects[1][4].parse().unwrap();
    assert!(at >= t0 + 100_000 && at <= t1 + 100_000, "{:?}", effects[1]);
    assert_eq!(effects[2][0].to_uppercase(), "INCRBY");
    assert_eq!(effects[3], ["DEL", "lk"]);
    for cmd in &effects {
        assert_ne!(cmd[0].to_uppercase(), "LOCK.GUARD", "{cmd:?}");
    }
}

/// A key with several holders replicates each holder as its effect:
/// `LOCK.SETHOLDER key limit count token fence deadline granted extends`
/// with absolute times, `LOCK.DELHOLDER key token` when one goes, and `DEL`
/// for the last.
#[test]
fn holders_are_replicated_one_by_one_with_absolute_values() {
    let master = Server::start();
    let mut link = ReplicationStream::open(&master);
    let mut con = master.conn();
    let t0 = now_ms();
    let (_, f1): (String, u64) = redis::cmd("LOCK.ACQUIRE")
        .arg("rw")
        .arg(10_000)
        .arg("TOKEN")
        .arg("r1")
        .arg("SHARED")
        .query(&mut con)
        .unwrap();
    let (_, f2): (String, u64) = redis::cmd("SEM.ACQUIRE")
        .arg("s")
        .arg(4)
        .arg(20_000)
        .arg("COUNT")
        .arg(3)
        .arg("TOKEN")
        .arg("p")
        .arg("OWNER")
        .arg("pod-1")
        .query(&mut con)
        .unwrap();
    let t1 = now_ms();
    let (_, f3): (String, u64) = redis::cmd("LOCK.ACQUIRE")
        .arg("rw")
        .arg(10_000)
        .arg("TOKEN")
        .arg("r2")
        .arg("SHARED")
        .query(&mut con)
        .unwrap();
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    let effects = link.effects_until(|c| c[0] == "DEL");
    assert_eq!(effects.len(), 5, "{effects:?}");
    assert_eq!(link.packed, 3, "every holder's state went out packed");
    let absolute = |cmd: &[String], at: usize, from: i64, to: i64| {
        let t: i64 = cmd[at].parse().unwrap();
        assert!(t >= from && t <= to, "{cmd:?}: {t} not in [{from}, {to}]");
    };
    assert_eq!(
        &effects[0][..6],
        ["LOCK.SETHOLDER", "rw", "0", "1", "r1", &f1.to_string()]
    );
    absolute(&effects[0], 6, t0 + 10_000, t1 + 10_000);
    absolute(&effects[0], 7, t0, t1);
    assert_eq!(effects[0][8], "0");
    assert_eq!(effects[0].len(), 9);
    assert_eq!(
        &effects[1][..6],
        ["LOCK.SETHOLDER", "s", "4", "3", "p", &f2.to_string()]
    );
    absolute(&effects[1], 6, t0 + 20_000, t1 + 20_000);
    assert_eq!(&effects[1][9..], ["OWNER", "pod-1"]);
    assert_eq!(
        &effects[2][..6],
        ["LOCK.SETHOLDER", "rw", "0", "1", "r2", &f3.to_string()]
    );
    assert_eq!(effects[3], ["LOCK.DELHOLDER", "rw", "r1"]);
    assert_eq!(effects[4], ["DEL", "rw"]);
}

// ---------------------------------------------------------------------------
// 7–8. Full sync, transactions and scripts

#[test]
fn a_replica_that_syncs_after_the_grants_gets_the_same_locks() {
    let master = start_master();
    let mut m = master.conn();
    for i in 0..5 {
        let key = format!("k{i}");
        let (token, _) = acquire(&mut m, &key, 60_000 + i * 1_000, None).unwrap();
        if i % 2 == 0 {
            assert_eq!(extend(&mut m, &key, &token, 120_000), 1);
        }
    }
    let replica = Server::start();
    replica.replicate_from(&master);
    let mut r = replica.conn();
    assert_eq!(dbsize(&mut r), 5);
    for i in 0..5 {
        assert_same_lock(&mut m, &mut r, &format!("k{i}"));
    }
    // Tokens too: the whole keyspace hashes the same.
    assert_eq!(digest(&mut r), digest(&mut m));
}

#[test]
fn a_grant_inside_multi_exec_reaches_the_replica_unchanged() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let (a, b, extended): ((String, u64), (String, u64), i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("a")
        .arg(30_000)
        .arg("TOKEN")
        .arg("ta")
        .cmd("LOCK.ACQUIRE")
        .arg("b")
        .arg(30_000)
        .cmd("LOCK.EXTEND")
        .arg("a")
        .arg("ta")
        .arg(50_000)
        .query(&mut m)
        .unwrap();
    assert!(b.1 > a.1);
    assert_eq!(extended, 1);
    sync_replica(&master, &replica);
    assert_same_lock(&mut m, &mut r, "a");
    assert_same_lock(&mut m, &mut r, "b");
    assert_eq!(info(&mut r, "b").unwrap()["fence"], b.1 as i64);
    assert_eq!(digest(&mut r), digest(&mut m));
}

#[test]
fn a_grant_inside_a_lua_script_reaches_the_replica_unchanged() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let script = r#"
        local mine = redis.call('LOCK.ACQUIRE', KEYS[1], 30000, 'TOKEN', ARGV[1])
        local drawn = redis.call('LOCK.ACQUIRE', KEYS[2], 30000)
        redis.call('LOCK.EXTEND', KEYS[1], ARGV[1], 50000)
        return {mine[2], drawn[1], drawn[2]}
    "#;
    let (mine_fence, drawn_token, drawn_fence): (u64, String, u64) = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("ta")
        .query(&mut m)
        .unwrap();
    sync_replica(&master, &replica);
    assert_same_lock(&mut m, &mut r, "a");
    assert_same_lock(&mut m, &mut r, "b");
    assert_eq!(info(&mut r, "a").unwrap()["fence"], mine_fence as i64);
    assert_eq!(info(&mut r, "b").unwrap()["fence"], drawn_fence as i64);
    assert_eq!(digest(&mut r), digest(&mut m));
    // The drawn token is the replica's holder too.
    promote(&mut r);
    assert_eq!(release(&mut r, "b", &drawn_token), 1);
}

/// Lease groups travel as their effects: `LOCK.LEASESET` with the lease's
/// whole state and an absolute deadline at the grant and at each keepalive,
/// the attached hold with `LEASE number`, its end as the holds' own effects
/// then `LOCK.LEASEDEL`; `LOCK.LEASE` and `LOCK.REVOKE` themselves never.
#[test]
fn lease_groups_are_replicated_as_their_effects_with_absolute_times() {
    let master = Server::start();
    let mut link = ReplicationStream::open(&master);
    let mut con = master.conn();
    let t0 = now_ms();
    let id: String = redis::cmd("LOCK.LEASE")
        .arg("GRANT")
        .arg(30_000)
        .arg("OWNER")
        .arg("pod")
        .query(&mut con)
        .unwrap();
    let t1 = now_ms();
    let shown: std::collections::HashMap<String, Value> = redis::cmd("LOCK.LEASE")
        .arg("INFO")
        .arg(&id)
        .query(&mut con)
        .unwrap();
    let number = match shown["lease"] {
        Value::Int(n) => n,
        ref other => panic!("{other:?}"),
    };
    let (_, fence) = redis::cmd("LOCK.ACQUIRE")
        .arg("lk")
        .arg(1_000)
        .arg("TOKEN")
        .arg("me")
        .arg("LEASE")
        .arg(&id)
        .query::<(String, u64)>(&mut con)
        .unwrap();
    let t2 = now_ms();
    let alive: i64 = redis::cmd("LOCK.LEASE")
        .arg("KEEPALIVE")
        .arg(&id)
        .query(&mut con)
        .unwrap();
    assert_eq!(alive, 1);
    let t3 = now_ms();
    let revoked: i64 = redis::cmd("LOCK.LEASE")
        .arg("REVOKE")
        .arg(&id)
        .query(&mut con)
        .unwrap();
    assert_eq!(revoked, 1);
    acquire(&mut con, "op", 60_000, Some("o")).unwrap();
    let _: i64 = redis::cmd("LOCK.REVOKE").arg("op").query(&mut con).unwrap();

    let effects =
        link.effects_until(|c| c[0] == "DEL" && c.get(1).map(String::as_str) == Some("op"));
    let names: Vec<&str> = effects.iter().map(|c| c[0].as_str()).collect();
    assert_eq!(
        names,
        [
            "LOCK.LEASESET",
            "LOCK.SETSTATE",
            "LOCK.LEASESET",
            "DEL",
            "LOCK.LEASEDEL",
            "LOCK.SETSTATE",
            "DEL"
        ],
        "{effects:?}"
    );
    let within = |cmd: &[String], at: usize, from: i64, to: i64| {
        let d: i64 = cmd[at].parse().unwrap();
        assert!(d >= from && d <= to, "{cmd:?}: {d} not in [{from}, {to}]");
    };
    // `LOCK.LEASESET id number ttl deadline OWNER pod`.
    assert_eq!(
        &effects[0][1..4],
        [id.as_str(), &number.to_string(), "30000"]
    );
    within(&effects[0], 4, t0 + 30_000, t1 + 30_000);
    assert_eq!(&effects[0][5..], ["OWNER", "pod"]);
    // The hold: its key runs to the lease's horizon, and it names the lease.
    let hold = &effects[1];
    assert_eq!(
        &hold[..4],
        ["LOCK.SETSTATE", "lk", "me", &fence.to_string()]
    );
    let horizon: i64 = hold[4].parse().unwrap();
    assert!(horizon >= t0 + 30_000 + 64 * 30_000, "{hold:?}");
    assert_eq!(&hold[hold.len() - 2..], ["LEASE", &number.to_string()]);
    within(&effects[2], 4, t2 + 30_000, t3 + 30_000);
    assert_eq!(effects[3], ["DEL", "lk"]);
    assert_eq!(effects[4], ["LOCK.LEASEDEL", &id]);
}

/// The multi-key commands travel as each key's own effect, with absolute
/// times and one fence, all of one command's in one `MULTI`/`EXEC`, so that
/// a replica never holds part of a multi-key grant: `LOCK.MACQUIRE` (direct
/// and handed from the queue, in a release or from the hand-off timer) as
/// `LOCK.SETSTATE` per key, `LOCK.MEXTEND` as
/// each key's new state, `LOCK.MRELEASE` as `DEL` per key; never the
/// commands themselves.
#[test]
fn multi_key_commands_are_replicated_as_each_keys_effects_in_one_transaction() {
    let master = Server::start();
    let mut link = ReplicationStream::open(&master);
    let mut con = master.conn();
    let macquire = |keys: &[&str], rest: &[&str]| {
        let mut cmd = redis::cmd("LOCK.MACQUIRE");
        cmd.arg(keys.len()).arg(keys).arg(rest);
        cmd
    };
    let t0 = now_ms();
    let (_, fence): (String, u64) = macquire(&["a", "b", "c"], &["10000", "TOKEN", "t"])
        .query(&mut con)
        .unwrap();
    let t1 = now_ms();
    let extended: i64 = redis::cmd("LOCK.MEXTEND")
        .arg(&["3", "a", "b", "c", "t", "20000"])
        .query(&mut con)
        .unwrap();
    assert_eq!(extended, 1);
    let t2 = now_ms();
    // Refused, or not the holder: nothing is sent.
    let refused: Option<(String, u64)> = macquire(&["c", "d"], &["1000"]).query(&mut con).unwrap();
    assert_eq!(refused, None);
    let stale: i64 = redis::cmd("LOCK.MRELEASE")
        .arg(&["2", "a", "b", "intruder"])
        .query(&mut con)
        .unwrap();
    assert_eq!(stale, 0);
    let released: i64 = redis::cmd("LOCK.MRELEASE")
        .arg(&["2", "a", "b", "t"])
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 2);
    // A request handed both keys from the queue, inside the release.
    acquire(&mut con, "q", 60_000, Some("holder")).unwrap();
    let mut waiting = master.conn();
    let waiter = std::thread::spawn(move || {
        redis::cmd("LOCK.MACQUIRE")
            .arg(&["2", "p", "q", "30000", "TOKEN", "w", "WAIT", "20000"])
            .query::<(String, u64)>(&mut waiting)
            .unwrap()
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut con, "q").is_some_and(|i| i["waiters"] == 1)
    });
    let t3 = now_ms();
    assert_eq!(release(&mut con, "q", "holder"), 1);
    let (_, handed) = waiter.join().unwrap();
    let t4 = now_ms();

    // From a timer: the holder's lease runs out, the queued request gets
    // both keys.
    acquire(&mut con, "y", 500, Some("short")).unwrap();
    let mut waiting = master.conn();
    let waiter = std::thread::spawn(move || {
        redis::cmd("LOCK.MACQUIRE")
            .arg(&["2", "x", "y", "30000", "TOKEN", "v", "WAIT", "20000"])
            .query::<(String, u64)>(&mut waiting)
            .unwrap()
    });
    waiter.join().unwrap();
    // Up to the last grant, then the end of its transaction.
    let skip = ["PING", "SELECT", "REPLCONF"];
    let mut stream = link.until(&skip, |c| {
        c[0] == "LOCK.SETSTATE" && c[1] == "y" && c[2] == "v"
    });
    stream.extend(link.until(&skip, |c| c[0] == "EXEC"));
    let names: Vec<String> = stream
        .iter()
        .map(|c| match c[0].as_str() {
            "MULTI" | "EXEC" => c[0].clone(),
            // Valkey expires lazily: its expiry's effect is UNLINK.
            "UNLINK" => format!("DEL {}", c[1]),
            _ => format!("{} {}", c[0], c[1]),
        })
        .collect();
    assert_eq!(
        names,
        [
            "MULTI",
            "LOCK.SETSTATE a",
            "LOCK.SETSTATE b",
            "LOCK.SETSTATE c",
            "EXEC",
            "MULTI",
            "LOCK.SETSTATE a",
            "LOCK.SETSTATE b",
            "LOCK.SETSTATE c",
            "EXEC",
            "MULTI",
            "DEL a",
            "DEL b",
            "EXEC",
            "LOCK.SETSTATE q",
            "MULTI",
            "DEL q",
            "LOCK.SETSTATE p",
            "LOCK.SETSTATE q",
            "EXEC",
            "LOCK.SETSTATE y",
            "MULTI",
            "DEL y",
            "LOCK.SETSTATE x",
            "LOCK.SETSTATE y",
            "EXEC",
        ],
        "{stream:?}"
    );
    let within = |cmd: &[String], at: usize, from: i64, to: i64| {
        let t: i64 = cmd[at].parse().unwrap();
        assert!(t >= from && t <= to, "{cmd:?}: {t} not in [{from}, {to}]");
    };
    let grants = &stream[1..4];
    for grant in grants {
        // `LOCK.SETSTATE key token fence deadline granted`: one fence, one
        // absolute deadline and grant time for every key.
        assert_eq!(&grant[2..4], ["t", &fence.to_string()], "{grant:?}");
        assert_eq!(grant.len(), 6, "{grant:?}");
        within(grant, 4, t0 + 10_000, t1 + 10_000);
        assert_eq!(grant[4..], grants[0][4..], "{grant:?}");
    }
    for extension in &stream[6..9] {
        assert_eq!(&extension[2..4], ["t", &fence.to_string()]);
        within(extension, 4, t1 + 20_000, t2 + 20_000);
        assert_eq!(extension[5], grants[0][5], "the grant time stays");
        assert_eq!(extension[6], "1", "one extension");
    }
    for handed_over in &stream[17..19] {
        assert_eq!(&handed_over[2..4], ["w", &handed.to_string()]);
        within(handed_over, 4, t3 + 30_000, t4 + 30_000);
    }
    for cmd in &stream {
        assert!(
            !cmd[0].starts_with("LOCK.M"),
            "a command, not its effect: {cmd:?}"
        );
    }
}

/// `LOCK.LEASE END` (issue 33) travels as what it did: each hold's release
/// (`DEL`) and the hand-off to its waiter, then `LOCK.LEASEDEL`; never the
/// command itself.
#[test]
fn ending_a_lease_is_replicated_as_its_releases_and_hand_offs() {
    let master = Server::start();
    let mut link = ReplicationStream::open(&master);
    let mut con = master.conn();
    let id: String = redis::cmd("LOCK.LEASE")
        .arg("GRANT")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    let _: (String, u64) = redis::cmd("LOCK.ACQUIRE")
        .arg("lk")
        .arg(1_000)
        .arg("TOKEN")
        .arg("me")
        .arg("LEASE")
        .arg(&id)
        .query(&mut con)
        .unwrap();
    let mut waiting = master.conn();
    let waiter = std::thread::spawn(move || {
        acquire_wait("lk", 60_000, "next", 20_000)
            .query::<Option<(String, u64)>>(&mut waiting)
            .unwrap()
    });
    wait_until(Duration::from_secs(10), || {
        info_field(&mut con, "lock", "lock_waiters") == "1"
    });
    let ended: i64 = redis::cmd("LOCK.LEASE")
        .arg("END")
        .arg(&id)
        .query(&mut con)
        .unwrap();
    assert_eq!(ended, 1);
    let (_, fence) = waiter.join().unwrap().expect("handed on");
    let effects = link.effects_until(|c| c[0] == "LOCK.LEASEDEL");
    let names: Vec<&str> = effects.iter().map(|c| c[0].as_str()).collect();
    assert_eq!(
        names,
        [
            "LOCK.LEASESET",
            "LOCK.SETSTATE",
            "DEL",
            "LOCK.SETSTATE",
            "LOCK.LEASEDEL"
        ],
        "{effects:?}"
    );
    assert_eq!(effects[2], ["DEL", "lk"]);
    assert_eq!(
        &effects[3][..4],
        ["LOCK.SETSTATE", "lk", "next", &fence.to_string()]
    );
    assert_eq!(effects[4], ["LOCK.LEASEDEL", &id]);
}
