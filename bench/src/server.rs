//! A benchmark server: `redis-server` or `valkey-server` with the module, on a
//! free loopback port, with no persistence, killed on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Connection;

pub struct Server {
    /// "Redis 7.0.15" or "Valkey 8.1.8".
    pub label: String,
    pub binary: PathBuf,
    pub port: u16,
    pub dir: PathBuf,
    child: Child,
}

impl Server {
    /// Start `binary` with `module` loaded; `work_dir` holds its log.
    pub fn start(binary: &Path, module: &Path, work_dir: &Path) -> Result<Server, String> {
        Server::start_with(binary, module, work_dir, &[], "")
    }

    /// Start with extra configuration arguments (applied after the defaults);
    /// `label_suffix` is appended to the version label, e.g. " + AOF".
    pub fn start_with(
        binary: &Path,
        module: &Path,
        work_dir: &Path,
        extra: &[&str],
        label_suffix: &str,
    ) -> Result<Server, String> {
        let port = free_port()?;
        let dir = work_dir.join(format!("server-{port}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let child = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--daemonize", "no", "--save", "", "--appendonly", "no"])
            .args(["--maxmemory-policy", "noeviction"])
            .arg("--dir")
            .arg(&dir)
            .args(["--logfile", "server.log"])
            .arg("--loadmodule")
            .arg(module)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", binary.display()))?;
        let mut server = Server {
            label: String::new(),
            binary: binary.to_path_buf(),
            port,
            dir,
            child,
        };
        let start = Instant::now();
        loop {
            if let Ok(mut conn) = server.try_connect() {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    break;
                }
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "{} exited ({status}); log:\n{}",
                    binary.display(),
                    server.log()
                ));
            }
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("{} did not answer PING", binary.display()));
            }
            sleep(Duration::from_millis(20));
        }
        server.label = server.version_label()? + label_suffix;
        Ok(server)
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn conn(&self) -> Result<Connection, String> {
        self.try_connect()
            .map_err(|e| format!("connect to {}: {e}", self.port))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time the server's main thread has used, in nanoseconds, from
    /// `/proc/<pid>/schedstat` (the scheduler's own accounting, ns precision).
    pub fn cpu_ns(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/schedstat", self.pid()))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0)
    }

    fn version_label(&self) -> Result<String, String> {
        let mut conn = self.conn()?;
        let valkey = info_field(&mut conn, "server", "valkey_version")?;
        Ok(match valkey {
            Some(version) => format!("Valkey {version}"),
            None => format!(
                "Redis {}",
                info_field(&mut conn, "server", "redis_version")?.unwrap_or_default()
            ),
        })
    }

    pub fn is_valkey(&self) -> bool {
        self.label.starts_with("Valkey")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One `field:value` line of `INFO section`.
pub fn info_field(
    conn: &mut Connection,
    section: &str,
    field: &str,
) -> Result<Option<String>, String> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(conn)
        .map_err(|e| format!("INFO {section}: {e}"))?;
    let prefix = format!("{field}:");
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|v| v.trim().to_string()))
}

/// An integer `INFO` field.
pub fn info_int(conn: &mut Connection, section: &str, field: &str) -> Result<i64, String> {
    info_field(conn, section, field)?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("INFO {section} has no integer {field}"))
}

pub fn query<T: redis::FromRedisValue>(
    conn: &mut Connection,
    cmd: &mut redis::Cmd,
) -> Result<T, String> {
    cmd.query(conn).map_err(|e| format!("{e}"))
}

pub fn flushall(conn: &mut Connection) -> Result<(), String> {
    query::<()>(conn, redis::cmd("FLUSHALL").arg("SYNC"))
}

pub fn dbsize(conn: &mut Connection) -> Result<u64, String> {
    query(conn, &mut redis::cmd("DBSIZE"))
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("find a free port: {e}"))
}

/// `lk:000000000042`: the key names `redis-benchmark -r` draws for
/// `lk:__rand_int__` (twelve zero-padded digits).
pub fn bench_key(prefix: &str, index: u64) -> String {
    format!("{prefix}{index:012}")
}

/// Send `commands` in pipelined batches, ignoring the replies (errors still
/// fail the batch).
pub fn pipelined<I>(conn: &mut Connection, commands: I) -> Result<(), String>
where
    I: IntoIterator<Item = redis::Cmd>,
{
    const BATCH: usize = 5000;
    let mut pipe = redis::pipe();
    let mut queued = 0;
    for cmd in commands {
        pipe.add_command(cmd).ignore();
        queued += 1;
        if queued == BATCH {
            pipe.query::<()>(conn)
                .map_err(|e| format!("pipeline: {e}"))?;
            pipe.clear();
            queued = 0;
        }
    }
    if queued > 0 {
        pipe.query::<()>(conn)
            .map_err(|e| format!("pipeline: {e}"))?;
    }
    Ok(())
}
