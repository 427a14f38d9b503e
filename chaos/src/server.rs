//! redis-server processes the harness starts itself: loopback (or a network
//! namespace), their own port and directory, the freshly built module, killed
//! on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Connection;

pub struct Config {
    pub binary: String,
    pub module: PathBuf,
    pub work: PathBuf,
}

pub struct Server {
    pub host: String,
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    netns: Option<String>,
    binary: String,
    child: Option<Child>,
}

pub fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

pub fn connect(addr: &str, timeout: Duration) -> Result<Connection, String> {
    let client = redis::Client::open(format!("redis://{addr}/")).map_err(|e| e.to_string())?;
    let con = client
        .get_connection_with_timeout(timeout)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    con.set_read_timeout(Some(timeout.max(Duration::from_secs(2))))
        .map_err(|e| e.to_string())?;
    con.set_write_timeout(Some(timeout.max(Duration::from_secs(2))))
        .map_err(|e| e.to_string())?;
    Ok(con)
}

impl Server {
    /// A server on 127.0.0.1 on a free port with the module and `extra`
    /// config arguments (after the defaults: no persistence, debug commands
    /// on).
    pub fn start(cfg: &Config, name: &str, extra: &[&str]) -> Result<Server, String> {
        let port = free_port()?;
        Server::start_at(cfg, name, "127.0.0.1", port, None, extra)
    }

    /// A server bound to `host:port`, inside network namespace `netns` if given.
    pub fn start_at(
        cfg: &Config,
        name: &str,
        host: &str,
        port: u16,
        netns: Option<&str>,
        extra: &[&str],
    ) -> Result<Server, String> {
        let dir = cfg.work.join(format!("{name}-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            host,
            "--daemonize",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
            "--repl-diskless-sync",
            "no",
            "--logfile",
            "server.log",
            "--dir",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(dir.display().to_string());
        args.push("--loadmodule".into());
        args.push(cfg.module.display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = Server {
            host: host.to_string(),
            port,
            dir,
            args,
            netns: netns.map(str::to_string),
            binary: cfg.binary.clone(),
            child: None,
        };
        server.spawn()?;
        Ok(server)
    }

    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, &self.binary]);
                c
            }
            None => Command::new(&self.binary),
        };
        let child = cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.binary))?;
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(30))
    }

    /// Wait until the server answers PING with PONG (not LOADING).
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Ok(mut con) = connect(&self.addr(), Duration::from_millis(500)) {
                if let Ok(reply) = redis::cmd("PING").query::<String>(&mut con) {
                    if reply == "PONG" {
                        return Ok(());
                    }
                }
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "server {} exited ({status}); log tail:\n{}",
                        self.addr(),
                        self.log_tail()
                    ));
                }
            }
            if start.elapsed() > timeout {
                return Err(format!(
                    "server {} not ready after {timeout:?}",
                    self.addr()
                ));
            }
            sleep(Duration::from_millis(20));
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    pub fn conn(&self) -> Result<Connection, String> {
        connect(&self.addr(), Duration::from_secs(2))
    }

    /// kill -9, and reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same port, directory and arguments.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill9();
        self.spawn()
    }

    /// The process has not exited.
    pub fn is_alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: sends a signal to the server process we spawned.
            unsafe { libc::kill(pid, sig) };
        }
    }

    /// Make this server a replica of `master` and wait until it is in sync.
    pub fn replicate(&self, master: &Server) -> Result<(), String> {
        let mut con = self.conn()?;
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
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("replica {} never synced", self.addr()));
            }
            sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        self.kill9();
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
