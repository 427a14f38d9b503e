//! The redis-server processes the harness starts itself, through
//! `redis-lock-testsupport`: on loopback (or in a network namespace), each
//! with its own port and directory (kept, for the crash scan) and the freshly
//! built module, killed on drop; and the checks it makes of them.

use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Connection;
use redis_lock_testsupport::Launch;
pub use redis_lock_testsupport::Server;

pub struct Config {
    pub binary: String,
    pub module: PathBuf,
    pub work: PathBuf,
}

impl Config {
    /// A server on 127.0.0.1 on a free port with the module and `extra`
    /// config arguments (after the defaults: no persistence, debug commands
    /// on, disk-based replication sync), in `<work>/<name>-<port>`.
    pub fn start(&self, name: &str, extra: &[&str]) -> Result<Server, String> {
        self.launch(name, extra).try_start()
    }

    /// A server bound to `host:port` inside network namespace `netns`.
    pub fn start_at(
        &self,
        name: &str,
        host: &str,
        port: u16,
        netns: &str,
        extra: &[&str],
    ) -> Result<Server, String> {
        self.launch(name, extra)
            .at(host, port)
            .netns(netns)
            .try_start()
    }

    fn launch(&self, name: &str, extra: &[&str]) -> Launch {
        Launch::new()
            .binary(&self.binary)
            .module(&self.module)
            .dir_in(&self.work, name)
            .keep_dir()
            .args(&["--repl-diskless-sync", "no"])
            .args(extra)
            .ready_timeout(Duration::from_secs(30))
            .conn_timeouts(Duration::from_secs(2), Some(Duration::from_secs(2)))
    }
}

pub fn connect(addr: &str, timeout: Duration) -> Result<Connection, String> {
    redis_lock_testsupport::connect(addr, timeout, Some(timeout.max(Duration::from_secs(2))))
        .map_err(|e| format!("connect {addr}: {e}"))
}

/// Make `replica` a replica of `master` and wait until its link is up.
pub fn replicate(replica: &Server, master: &Server) -> Result<(), String> {
    let mut con = replica.try_conn()?;
    redis::cmd("REPLICAOF")
        .arg(&master.host)
        .arg(master.port)
        .query::<()>(&mut con)
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        if info.contains("master_link_status:up") {
            return Ok(());
        }
        // (Far beyond a busy machine's delays: a replica that never syncs
        // is a fault.)
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "replica {} never synced within 60 s",
                replica.addr()
            ));
        }
        sleep(Duration::from_millis(50));
    }
}

/// `DEBUG DIGEST` of a server.
pub fn digest(con: &mut Connection) -> Result<String, String> {
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(con)
        .map_err(|e| e.to_string())
}

/// C4: after quiescence, every replica's digest equals the master's (retried
/// for up to `timeout` while the last DELs and expiries propagate).
pub fn digests_agree(master: &str, replicas: &[String], timeout: Duration) -> Vec<String> {
    let start = Instant::now();
    loop {
        let result = (|| -> Result<Option<String>, String> {
            let mut m = connect(master, Duration::from_secs(2))?;
            let _: redis::Value = redis::cmd("WAIT")
                .arg(replicas.len())
                .arg(1000)
                .query(&mut m)
                .map_err(|e| e.to_string())?;
            let want = digest(&mut m)?;
            for r in replicas {
                let got = digest(&mut connect(r, Duration::from_secs(2))?)?;
                if got != want {
                    return Ok(Some(format!(
                        "replica {r} digest {got} != master {master} digest {want}"
                    )));
                }
            }
            Ok(None)
        })();
        let msg = match result {
            Ok(None) => return Vec::new(),
            Ok(Some(msg)) | Err(msg) => msg,
        };
        if start.elapsed() > timeout {
            return vec![msg];
        }
        sleep(Duration::from_millis(200));
    }
}

pub fn module_path(root: &Path) -> PathBuf {
    root.join("target/release/libredis_lock.so")
}

/// Servers under `work` whose directory starts with `prefix` and whose log
/// has a crash report: one message each, with the assertion or signal line.
pub fn crashes(work: &Path, prefix: &str) -> Vec<String> {
    let Ok(dirs) = std::fs::read_dir(work) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for dir in dirs.flatten() {
        let name = dir.file_name().to_string_lossy().to_string();
        if !name.starts_with(prefix) {
            continue;
        }
        let log = dir.path().join("server.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("BUG REPORT START") {
            let why = text
                .lines()
                .find(|l| l.contains("==> ") || l.contains("crashed by signal"))
                .unwrap_or("crash report")
                .to_string();
            out.push(format!("server crashed ({}): {why}", log.display()));
        }
    }
    out.sort();
    out
}
