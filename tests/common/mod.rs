//! A real server per test: `redis-server` (or `$LOCK_TEST_SERVER`, e.g.
//! Valkey) with the freshly built module, on a free loopback port, in its own
//! directory, killed and cleaned up on drop, even when the test panics; and
//! the helpers the test files share. DUMP/RESTORE payload helpers are in
//! [`payload`] (`use common::payload::*;`).
#![allow(dead_code)]

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub use redis::{Connection, Value};

pub mod payload;

/// The server binary: `$LOCK_TEST_SERVER`, or `redis-server` from `PATH`.
pub fn server_binary() -> String {
    std::env::var("LOCK_TEST_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// The module to load: `$LOCK_MODULE`, or this crate's debug build, which is
/// (re)built once per test binary so a plain `cargo test` never tests a stale
/// `.so`.
pub fn module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Ok(path) = std::env::var("LOCK_MODULE") {
            return PathBuf::from(path);
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let status = Command::new(cargo)
            .args(["build", "--lib", "--quiet"])
            .current_dir(root)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build of the module failed");
        let path = root.join("target/debug/libredis_lock.so");
        assert!(path.exists(), "{} is missing", path.display());
        path
    })
    .clone()
}

pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// A fresh server with no persistence.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A fresh server; `extra` are config arguments such as
    /// `["--appendonly", "yes"]`, applied after the defaults.
    pub fn start_with(extra: &[&str]) -> Server {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "redis-lock-test-{}-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed),
                port
            ));
            std::fs::create_dir_all(&dir).expect("create server dir");
            let mut server = Server {
                port,
                dir,
                extra: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
            };
            if server.spawn() {
                return server;
            }
            last_log = server.log();
        }
        panic!("server did not start; last log:\n{last_log}");
    }

    /// Start the process on this server's port and directory; true once it
    /// answers PING.
    fn spawn(&mut self) -> bool {
        let module = module_path();
        let child = Command::new(server_binary())
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""])
            .args(["--appendonly", "no", "--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "server.log"])
            .arg("--loadmodule")
            .arg(&module)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", server_binary()));
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            if let Ok(mut con) = self.try_connect() {
                // Answered by the process this server just started, not by
                // anything else on the port.
                let ours = self
                    .child
                    .as_ref()
                    .map(|c| format!("process_id:{}\r\n", c.id()));
                // Redis accepts connections while it still loads the RDB or
                // AOF and answers commands with LOADING until it is done;
                // INFO is one of the few it serves meanwhile.
                let info: redis::RedisResult<String> = redis::cmd("INFO")
                    .arg("server")
                    .arg("persistence")
                    .query(&mut con);
                if let (Ok(info), Some(ours)) = (info, ours) {
                    if info.contains(&ours) && info.contains("\nloading:0\r\n") {
                        return true;
                    }
                }
            }
            sleep(Duration::from_millis(10));
        }
        self.kill();
        false
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        con.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(con)
    }

    /// A new connection (RESP2).
    pub fn conn(&self) -> Connection {
        self.try_connect()
            .unwrap_or_else(|e| panic!("connect to {}: {e}\n{}", self.port, self.log()))
    }

    /// SIGKILL: no final save, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A clean `SHUTDOWN` (which saves if persistence is on), then wait.
    pub fn shutdown(&mut self) {
        if let Ok(mut con) = self.try_connect() {
            let _: redis::RedisResult<Value> = redis::cmd("SHUTDOWN").query(&mut con);
        }
        if let Some(mut child) = self.child.take() {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same port and directory, with the same arguments.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart a stopped server only");
        assert!(self.spawn(), "server did not restart:\n{}", self.log());
    }

    /// Start again with other arguments (same port and directory).
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        self.restart();
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Make this server a replica of `master` and wait until it has synced
    /// (see [`sync_replica`]).
    pub fn replicate_from(&self, master: &Server) {
        let _: String = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master.port)
            .query(&mut self.conn())
            .expect("REPLICAOF");
        sync_replica(master, self);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!(
                "--- last lines of the server log (port {}) ---\n{}",
                self.port,
                tail.join("\n")
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
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

/// A free port that no other server of this test process has had: a test
/// that kills and restarts its server keeps its port, and must never find
/// another test's server there.
fn free_port() -> u16 {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("find a free port");
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if handed_out.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// Poll `cond` every 10 ms until it holds; panic after `timeout`.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) {
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

/// `LOCK.INFO key` as field → value pairs, or `None` when free.
pub fn info(con: &mut Connection, key: &str) -> Option<std::collections::HashMap<String, i64>> {
    redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO")
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

/// Wait (bounded) until no AOF rewrite is running or scheduled.
pub fn wait_for_aof_rewrite(con: &mut Connection) {
    wait_until(Duration::from_secs(30), || {
        info_field(con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
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
