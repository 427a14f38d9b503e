//! A benchmark server: `redis-server` or `valkey-server` with the module, on a
//! free loopback port, with no persistence, killed on drop (started by
//! `redis-lock-testsupport`), and the helpers the benchmarks share.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redis::Connection;
use redis_lock_testsupport::Launch;

/// Run one of the benchmark's commands against the server on `port`:
/// `program` with `argv[1..]` (as the report shows them), `$PORT` replaced by
/// the port. Its standard output, or an error with all it printed.
pub fn run_against(program: &Path, argv: &[String], port: u16) -> Result<String, String> {
    let name = program.file_name().unwrap_or_default().to_string_lossy();
    let port = port.to_string();
    let output = Command::new(program)
        .args(
            argv[1..]
                .iter()
                .map(|a| if a == "$PORT" { &port } else { a }),
        )
        .output()
        .map_err(|e| format!("run {name}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "{name} failed ({}): {stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(stdout)
}

pub struct Server {
    /// "Redis 7.0.15" or "Valkey 8.1.8".
    pub label: String,
    process: redis_lock_testsupport::Server,
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
        let process = Launch::new()
            .binary(binary)
            .module(module)
            .dir_in(work_dir, "server")
            .args(&["--maxmemory-policy", "noeviction"])
            .args(extra)
            // A bulk load or FLUSHALL may take long: no read timeout.
            .conn_timeouts(Duration::from_secs(5), None)
            .try_start()?;
        let mut server = Server {
            label: String::new(),
            process,
        };
        server.label = server.version_label()? + label_suffix;
        Ok(server)
    }

    /// Make this server a replica of `master` and wait (bounded) until its
    /// link is up and its first sync is done.
    pub fn replicate_from(&self, master: &Server) -> Result<(), String> {
        let mut conn = self.conn()?;
        redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master.port())
            .query::<()>(&mut conn)
            .map_err(|e| format!("REPLICAOF: {e}"))?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if info_field(&mut conn, "replication", "master_link_status")?.as_deref() == Some("up")
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("the replica on port {} did not sync", self.port()))
    }

    pub fn port(&self) -> u16 {
        self.process.port
    }

    pub fn url(&self) -> String {
        self.process.url()
    }

    pub fn conn(&self) -> Result<Connection, String> {
        self.process.try_conn()
    }

    /// CPU time the server's main thread has used, in nanoseconds, from
    /// `/proc/<pid>/schedstat` (the scheduler's own accounting, ns precision).
    pub fn cpu_ns(&self) -> u64 {
        let Some(pid) = self.process.pid() else {
            return 0;
        };
        std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
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

    /// The allocator it was built with (`INFO memory` `mem_allocator`,
    /// e.g. `jemalloc-5.3.0` or `libc`).
    pub fn allocator(&self) -> Result<String, String> {
        Ok(info_field(&mut self.conn()?, "memory", "mem_allocator")?
            .unwrap_or_else(|| "allocator unknown".into()))
    }

    pub fn is_valkey(&self) -> bool {
        self.label.starts_with("Valkey")
    }

    pub fn log(&self) -> String {
        self.process.log()
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
