//! The helpers the test files share, over a real server per test:
//! [`Server`] (from `redis-lock-testsupport`) is `redis-server` (or
//! `$LOCK_TEST_SERVER`, e.g. Valkey) with the freshly built module, on a free
//! loopback port, in its own directory, killed and cleaned up on drop, even
//! when the test panics. DUMP/RESTORE payload helpers are in [`payload`]
//! (`use common::payload::*;`), a client that keeps every byte of a reply
//! in [`resp`].
#![allow(dead_code)]

use std::thread::sleep;
use std::time::{Duration, Instant};

pub use redis::{Connection, Value};
pub use redis_lock_testsupport::{memcheck, Server};

pub mod payload;
pub mod resp;

/// Replication set up from a test.
pub trait ReplicaOf {
    /// Make this server a replica of `master` and wait until it has synced
    /// (see [`sync_replica`]).
    fn replicate_from(&self, master: &Server);
}

impl ReplicaOf for Server {
    fn replicate_from(&self, master: &Server) {
        let _: String = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master.port)
            .query(&mut self.conn())
            .expect("REPLICAOF");
        sync_replica(master, self);
    }
}

/// A master that starts a replica's full sync at once (Redis waits 5 s by
/// default, for more replicas to join the same diskless transfer).
pub fn start_master() -> Server {
    Server::start_with(&["--repl-diskless-sync-delay", "0"])
}

/// A master and a replica that has synced with it.
pub fn pair() -> (Server, Server) {
    let master = start_master();
    let replica = Server::start();
    replica.replicate_from(&master);
    (master, replica)
}

/// Wait (bounded) until `replica` has a live link to its master and has
/// applied everything `master` had sent when this was called, by replication
/// offsets. Not `WAIT`: it counts only the writes of the connection it runs
/// on, so on a fresh connection (on Redis 7.0) it returns at once without
/// waiting for anything.
pub fn sync_replica(master: &Server, replica: &Server) {
    let mut m = master.conn();
    let mut r = replica.conn();
    let target: i64 = info_field(&mut m, "replication", "master_repl_offset")
        .parse()
        .unwrap();
    wait_until(Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status") == "up"
            && info_field(&mut r, "replication", "slave_repl_offset")
                .parse::<i64>()
                .unwrap()
                >= target
    });
}

/// `REPLICAOF NO ONE`: the replica becomes a master.
pub fn promote(con: &mut Connection) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(con)
        .expect("REPLICAOF NO ONE");
}

/// A bounded wait on the server, longer under memcheck (where the server
/// runs 20 to 50 times slower): `wait` times [`memcheck::slowdown`].
pub fn scaled(wait: Duration) -> Duration {
    wait * memcheck::slowdown()
}

/// [`scaled`] for a duration in milliseconds given to the server (a lease
/// that must outlast a test's few commands).
pub fn scaled_ms(ms: i64) -> i64 {
    ms * i64::from(memcheck::slowdown())
}

/// Under memcheck, whether to skip a test that is timing-sensitive by
/// nature (`why` says how), printing why; run it otherwise.
pub fn skip_under_memcheck(why: &str) -> bool {
    let skip = memcheck::enabled();
    if skip {
        eprintln!("skipped under memcheck: {why}");
    }
    skip
}

/// Poll `cond` every 10 ms until it holds; panic after `timeout` ([`scaled`]).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) {
    let timeout = scaled(timeout);
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "condition not met within {timeout:?}"
        );
        sleep(Duration::from_millis(10));
    }
}

/// `LOCK.ACQUIRE key ttl [TOKEN token]` → `Some((token, fence))` or `None`.
pub fn acquire(
    con: &mut Connection,
    key: &str,
    ttl: i64,
    token: Option<&str>,
) -> Option<(String, u64)> {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(ttl);
    if let Some(token) = token {
        cmd.arg("TOKEN").arg(token);
    }
    cmd.query::<Option<(String, u64)>>(con)
        .expect("LOCK.ACQUIRE")
}

/// `LOCK.ACQUIRE key ttl TOKEN token WAIT wait-ms`: a waiter's request.
pub fn acquire_wait(key: &str, ttl: i64, token: &str, wait_ms: i64) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key)
        .arg(ttl)
        .arg("TOKEN")
        .arg(token)
        .arg("WAIT")
        .arg(wait_ms);
    cmd
}

pub fn extend(con: &mut Connection, key: &str, token: &str, ttl: i64) -> i64 {
    redis::cmd("LOCK.EXTEND")
        .arg(key)
        .arg(token)
        .arg(ttl)
        .query(con)
        .expect("LOCK.EXTEND")
}

pub fn release(con: &mut Connection, key: &str, token: &str) -> i64 {
    redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(token)
        .query(con)
        .expect("LOCK.RELEASE")
}

/// `LOCK.INFO key`'s integer fields as field → value pairs, or `None` when
/// free (the text field `owner` is read with [`owner`]).
pub fn info(con: &mut Connection, key: &str) -> Option<std::collections::HashMap<String, i64>> {
    let fields: Option<std::collections::HashMap<String, Value>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO");
    fields.map(|fields| {
        fields
            .into_iter()
            .filter_map(|(name, value)| match value {
                Value::Int(n) => Some((name, n)),
                _ => None,
            })
            .collect()
    })
}

/// The `owner` label `LOCK.INFO key` shows, if any.
pub fn owner(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    let fields: Option<std::collections::HashMap<String, Value>> = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO");
    match fields?.remove("owner")? {
        Value::BulkString(label) => Some(label),
        other => panic!("owner is not a string: {other:?}"),
    }
}

/// Fence and absolute deadline of a held lock, as LOCK.INFO shows them;
/// panics when the key is free.
pub fn fence_and_deadline(con: &mut Connection, key: &str) -> (i64, i64) {
    let info = info(con, key).unwrap_or_else(|| panic!("{key} is not held"));
    (info["fence"], info["deadline"])
}

/// The error text of a command that must fail.
pub fn error_of(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => {
            let code = e.code().unwrap_or("");
            let detail = e.detail().unwrap_or("");
            if code.is_empty() {
                e.to_string()
            } else {
                format!("{code} {detail}")
            }
        }
    }
}

/// `DEBUG DIGEST`: one hash of the whole keyspace, to prove nothing changed.
pub fn digest(con: &mut Connection) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(con)
        .expect("DEBUG DIGEST")
}

pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}

pub fn dbsize(con: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}

pub fn exists(con: &mut Connection, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(con)
        .expect("EXISTS")
        == 1
}

/// One `field:value` line of `INFO section`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}:\n{text}"))
        .trim()
        .to_string()
}

/// Wait (bounded) until no AOF rewrite is running or scheduled. Both fields
/// come from one `INFO` reply: read from two, a rewrite that the server cron
/// starts between them (scheduled, then running) looks like neither, and a
/// `DEBUG LOADAOF` then finds no manifest on disk.
pub fn wait_for_aof_rewrite(con: &mut Connection) {
    wait_until(Duration::from_secs(30), || {
        let text: String = redis::cmd("INFO")
            .arg("persistence")
            .query(con)
            .expect("INFO");
        ["aof_rewrite_in_progress:0", "aof_rewrite_scheduled:0"]
            .iter()
            .all(|want| text.lines().any(|l| l.trim() == *want))
    });
}

/// BGREWRITEAOF once no rewrite is running or scheduled, then wait until it
/// is done and check that it succeeded.
pub fn rewrite_aof(con: &mut Connection) {
    wait_for_aof_rewrite(con);
    let _: Value = redis::cmd("BGREWRITEAOF").query(con).expect("BGREWRITEAOF");
    wait_for_aof_rewrite(con);
    assert_eq!(
        info_field(con, "persistence", "aof_last_bgrewrite_status"),
        "ok"
    );
}

/// Whether `bytes` start like an RDB file (also the AOF's RDB preamble and a
/// full sync's payload): `REDIS0011` on Redis and Valkey 8, `VALKEY080` on
/// Valkey 9, whose RDBs older servers cannot read.
pub fn is_rdb(bytes: &[u8]) -> bool {
    bytes.starts_with(b"REDIS") || bytes.starts_with(b"VALKEY")
}

/// What a server does with the ACL categories of module commands, by its
/// name and version (`INFO server`); the module's `startup.rs` decides the
/// same by the API the server exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclSupport {
    /// Redis 7.0: module commands have no category.
    None,
    /// Redis 7.2: the standard categories, no `@lock`.
    Standard,
    /// Redis 7.4+ and Valkey 8+: the standard categories and `@lock`.
    ModuleCategory,
}

/// The server's name (`redis` or `valkey`) and `(major, minor)` version.
pub fn server_version(con: &mut Connection) -> (String, (u32, u32)) {
    let text: String = redis::cmd("INFO").arg("server").query(con).expect("INFO");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
    };
    // Valkey reports `redis_version:7.2.4` for compatibility, and its own
    // version in `valkey_version`.
    let (name, version) = match field("valkey_version") {
        Some(v) => ("valkey", v),
        None => ("redis", field("redis_version").expect("redis_version")),
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (name.to_string(), (major, minor))
}

pub fn acl_support(con: &mut Connection) -> AclSupport {
    match server_version(con) {
        (name, _) if name == "valkey" => AclSupport::ModuleCategory,
        (_, version) if version >= (7, 4) => AclSupport::ModuleCategory,
        (_, version) if version >= (7, 2) => AclSupport::Standard,
        _ => AclSupport::None,
    }
}

/// Run `ACL SETUSER` with a recipe written as one space-separated string.
pub fn acl_setuser(con: &mut Connection, recipe: &str) -> redis::RedisResult<()> {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER");
    for word in recipe.split_whitespace() {
        cmd.arg(word);
    }
    cmd.query(con)
}

/// A connection authenticated as `user`.
pub fn conn_as(server: &Server, user: &str, password: &str) -> Connection {
    let client = redis::Client::open(format!(
        "redis://{user}:{password}@127.0.0.1:{}/",
        server.port
    ))
    .expect("client");
    let con = client
        .get_connection_with_timeout(scaled(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
    con.set_read_timeout(Some(scaled(Duration::from_secs(30))))
        .unwrap();
    con
}

/// Microseconds since the unix epoch on this host.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Milliseconds since the unix epoch on this host.
pub fn now_ms() -> i64 {
    (now_us() / 1000) as i64
}

/// A packed effect as a master sends it, `LOCK.SETSTATE key token state` or
/// `LOCK.SETHOLDER key token state`, spelled out in the text form with one
/// value per argument (`LOCK.SETSTATE key token fence deadline granted
/// [extends [OWNER label]]`, `LOCK.SETHOLDER key limit count token fence
/// deadline granted extends [OWNER label]`), which the tests read; any other
/// command as it is.
pub fn expand_effect(command: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    match redis_lock_core::effect::spell_out(&command) {
        Some(spelled) => spelled.expect("a packed state"),
        None => command,
    }
}

/// Every keyspace event of db 0 on the keys that match `pattern` (a
/// `PSUBSCRIBE` pattern after `__keyspace@0__:`), as (key, event), from a
/// subscriber that is listening when this returns and stops after
/// `for_at_most`. The caller sets `notify-keyspace-events`.
pub fn keyspace_events(
    server: &Server,
    pattern: &str,
    for_at_most: Duration,
) -> std::sync::mpsc::Receiver<(String, String)> {
    let (tx, events) = std::sync::mpsc::channel::<(String, String)>();
    let mut sub = server.conn();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let channel = format!("__keyspace@0__:{pattern}");
    std::thread::spawn(move || {
        let mut pubsub = sub.as_pubsub();
        pubsub.psubscribe(&channel).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let start = Instant::now();
        while start.elapsed() < for_at_most {
            if let Ok(msg) = pubsub.get_message() {
                let key = msg.get_channel_name().trim_start_matches("__keyspace@0__:");
                let event = (key.to_string(), msg.get_payload::<String>().unwrap());
                if tx.send(event).is_err() {
                    return;
                }
            }
        }
    });
    ready
        .recv_timeout(Duration::from_secs(30))
        .expect("the subscriber listens");
    events
}
