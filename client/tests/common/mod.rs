//! Real servers for the client's tests: `redis-server` (or
//! `$LOCK_TEST_SERVER`) with the module (`$LOCK_MODULE`, or the workspace's
//! debug build, built once per test binary), each on a free loopback port in
//! its own directory, killed on drop even when a test panics. Modelled on the
//! module's own `tests/common/mod.rs`, plus SIGSTOP/SIGCONT and a 3-master
//! cluster.
#![allow(dead_code)]

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis_lock_client::Locks;

pub fn server_binary() -> String {
    std::env::var("LOCK_TEST_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// The module: `$LOCK_MODULE`, or the workspace's debug build (built here
/// once, so a plain `cargo test -p redis-lock-client` never loads a stale one).
pub fn module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Ok(path) = std::env::var("LOCK_MODULE") {
            return PathBuf::from(path);
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let status = Command::new(cargo)
            .args(["build", "--lib", "--quiet", "-p", "redis-lock"])
            .current_dir(&root)
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
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "redis-lock-client-test-{}-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed),
                port
            ));
            std::fs::create_dir_all(&dir).expect("create server dir");
            let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            for arg in extra.iter_mut() {
                if arg == "{free_port}" {
                    *arg = free_port().to_string();
                }
            }
            let mut server = Server {
                port,
                dir,
                extra,
                child: None,
            };
            if server.spawn() {
                return server;
            }
            last_log = server.log();
        }
        panic!("server did not start; last log:\n{last_log}");
    }

    fn spawn(&mut self) -> bool {
        let child = Command::new(server_binary())
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""])
            .args(["--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "server.log"])
            .arg("--loadmodule")
            .arg(module_path())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", server_binary()));
        let ours = format!("process_id:{}\r\n", child.id());
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
                let info: redis::RedisResult<String> =
                    redis::cmd("INFO").arg("server").query(&mut con);
                if matches!(info, Ok(info) if info.contains(&ours)) {
                    return true;
                }
            }
            sleep(Duration::from_millis(10));
        }
        self.kill();
        false
    }

    fn try_connect(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        con.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(con)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    /// A synchronous connection for the test's own checks.
    pub fn conn(&self) -> redis::Connection {
        self.try_connect()
            .unwrap_or_else(|e| panic!("connect to {}: {e}\n{}", self.port, self.log()))
    }

    /// A [`Locks`] on this server through its own connection manager.
    pub async fn locks(&self) -> Locks {
        Locks::connect(self.client()).await.expect("Locks::connect")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// SIGKILL, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A clean `SHUTDOWN NOSAVE`, then wait (bounded) for the process to end.
    pub fn shutdown(&mut self) {
        if let Ok(mut con) = self.try_connect() {
            let _: redis::RedisResult<redis::Value> =
                redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut con);
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

    /// SIGSTOP: the process hangs, its sockets stay open.
    pub fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// SIGCONT after [`Server::pause`].
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
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

/// A free port that no other server of this test process has had.
pub fn free_port() -> u16 {
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

/// Poll `cond` every 20 ms until it holds; panic after `timeout`.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "condition not met within {timeout:?}"
        );
        sleep(Duration::from_millis(20));
    }
}

/// `LOCK.INFO key` as a map, `None` when free.
pub fn info(
    con: &mut redis::Connection,
    key: &str,
) -> Option<std::collections::HashMap<String, i64>> {
    redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO")
}

/// A 3-master Redis Cluster (no replicas), each master with the module,
/// created with `redis-cli --cluster create`; ready once every node reports
/// `cluster_state:ok`.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                // The bus port defaults to port + 10000, which may be taken
                // or out of range for an ephemeral port: pick one.
                Server::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                    "--cluster-port",
                    "{free_port}",
                ])
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success() && text.contains("[OK] All 16384 slots covered"),
            "redis-cli --cluster create failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes };
        for node in &cluster.nodes {
            let mut con = node.conn();
            wait_until(Duration::from_secs(30), || {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut con)
                    .expect("CLUSTER INFO");
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
        }
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }
}
