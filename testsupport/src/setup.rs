//! What a server is started from: a free loopback port, the server binary
//! (`$LOCK_TEST_SERVER`), the module (`$LOCK_MODULE`, or the workspace's debug
//! build, built once per process), and how to connect to it.

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use redis::Connection;

/// The server binary: `$LOCK_TEST_SERVER` (e.g. a `valkey-server`), or
/// `redis-server` from `PATH`.
pub fn server_binary() -> PathBuf {
    std::env::var_os("LOCK_TEST_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

/// The module to load: `$LOCK_MODULE`, or the workspace's debug build of
/// `redis-lock`, (re)built once per process so that a plain `cargo test`
/// never loads a stale `.so`.
pub fn module_path() -> Result<PathBuf, String> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(|| match std::env::var_os("LOCK_MODULE") {
        Some(path) => Ok(PathBuf::from(path)),
        None => build_module(),
    })
    .clone()
}

/// `cargo build --lib -p redis-lock` in the workspace this crate belongs to
/// (asked of cargo, so it does not matter where this crate sits in it), and
/// the path of the debug `.so` it made.
fn build_module() -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let located = Command::new(&cargo)
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .current_dir(here)
        .output()
        .map_err(|e| format!("run cargo locate-project: {e}"))?;
    let manifest = PathBuf::from(String::from_utf8_lossy(&located.stdout).trim());
    let root = match manifest.parent() {
        Some(root) if located.status.success() => root.to_path_buf(),
        _ => return Err(format!("no workspace above {}", here.display())),
    };
    let status = Command::new(&cargo)
        .args(["build", "--lib", "--quiet", "-p", "redis-lock"])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("run cargo build: {e}"))?;
    if !status.success() {
        return Err("cargo build of the module failed".to_string());
    }
    // The nested cargo honours $CARGO_TARGET_DIR too (relative to `root`).
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|dir| root.join(dir))
        .unwrap_or_else(|| root.join("target"));
    let path = target.join("debug/libredis_lock.so");
    if path.exists() {
        Ok(path)
    } else {
        Err(format!("{} is missing", path.display()))
    }
}

/// A loopback port that was free a moment ago and that no other server of
/// this process has had: a test that kills and restarts its server keeps its
/// port, and must never find another test's server there.
pub fn free_port() -> Result<u16, String> {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("find a free port: {e}"))?;
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if handed_out.get_or_insert_with(HashSet::new).insert(port) {
            return Ok(port);
        }
    }
}

/// A connection to `addr` (`host:port`, RESP2) that waits at most `timeout`
/// to connect and, when `io_timeout` is given, that long for any one read or
/// write.
pub fn connect(
    addr: &str,
    timeout: Duration,
    io_timeout: Option<Duration>,
) -> redis::RedisResult<Connection> {
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    let con = client.get_connection_with_timeout(timeout)?;
    if io_timeout.is_some() {
        con.set_read_timeout(io_timeout)?;
        con.set_write_timeout(io_timeout)?;
    }
    Ok(con)
}
