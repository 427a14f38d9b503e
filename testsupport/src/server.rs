//! One server process: what to start ([`Launch`]), then the running
//! [`Server`], on its own port and in its own directory, ready only once it
//! serves commands, killed on drop even when a test panics, and restarted,
//! stopped or resumed on the same port and directory when a test asks.
//! Under memcheck ([`memcheck`]) it runs inside valgrind, is shut down
//! cleanly on drop instead, and fails the test if valgrind saw an error.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Connection;

use crate::memcheck;
use crate::setup::{connect, free_port, module_path, server_binary};

/// An argument given as this is replaced by a free port of its own, chosen
/// anew at each attempt to start (e.g. `["--cluster-port", FREE_PORT]`: the
/// default bus port, port + 10000, may be taken or out of range).
pub const FREE_PORT: &str = "{free_port}";

/// How often a server on a port of our choosing is tried before giving up:
/// another process may take the port between our check and the server's bind.
const ATTEMPTS: usize = 5;
/// The lines of `server.log` that an error, or a panicking test, shows.
const LOG_TAIL_LINES: usize = 40;
/// How long a clean `SHUTDOWN` may take before the process is killed.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// The readiness probe's timeouts: it is retried until `ready_timeout`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Under memcheck, how long a server may take to exit once asked to (it
/// takes well under a second), before it is asked harder.
const MEMCHECK_EXIT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone)]
enum Module {
    /// `$LOCK_MODULE`, or the workspace's debug build ([`module_path`]).
    Default,
    Path(PathBuf),
    /// A bare server, without the module.
    None,
}

/// What to start. [`Launch::new`] is a `$LOCK_TEST_SERVER` (or
/// `redis-server`) with the module, on 127.0.0.1 on a free port, in a fresh
/// directory under the system's temp dir that is removed on drop; the
/// builder methods change that. Every server runs with `--daemonize no
/// --save "" --appendonly no --enable-debug-command yes --logfile server.log`,
/// then the [`args`](Launch::args), which may override any of them.
#[derive(Clone)]
pub struct Launch {
    binary: PathBuf,
    module: Module,
    host: String,
    port: Option<u16>,
    netns: Option<String>,
    work_dir: PathBuf,
    name: Option<String>,
    keep_dir: bool,
    args: Vec<String>,
    ready_timeout: Duration,
    connect_timeout: Duration,
    io_timeout: Option<Duration>,
}

impl Default for Launch {
    fn default() -> Launch {
        Launch::new()
    }
}

impl Launch {
    pub fn new() -> Launch {
        Launch {
            binary: server_binary(),
            module: Module::Default,
            host: "127.0.0.1".to_string(),
            port: None,
            netns: None,
            work_dir: std::env::temp_dir(),
            name: None,
            keep_dir: false,
            args: Vec::new(),
            ready_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(5),
            io_timeout: Some(Duration::from_secs(30)),
        }
    }

    /// The server binary, instead of [`server_binary`].
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Launch {
        self.binary = binary.into();
        self
    }

    /// The module to load, instead of [`module_path`].
    pub fn module(mut self, module: impl Into<PathBuf>) -> Launch {
        self.module = Module::Path(module.into());
        self
    }

    /// Load no module at all.
    pub fn without_module(mut self) -> Launch {
        self.module = Module::None;
        self
    }

    /// Bind `host:port` instead of a free loopback port (one attempt only).
    pub fn at(mut self, host: &str, port: u16) -> Launch {
        self.host = host.to_string();
        self.port = Some(port);
        self
    }

    /// Run inside network namespace `netns` (`ip netns exec`, as root).
    pub fn netns(mut self, netns: &str) -> Launch {
        self.netns = Some(netns.to_string());
        self
    }

    /// The server's directory is `<work_dir>/<name>-<port>` (emptied first).
    pub fn dir_in(mut self, work_dir: &Path, name: &str) -> Launch {
        self.work_dir = work_dir.to_path_buf();
        self.name = Some(name.to_string());
        self
    }

    /// Leave the directory and its log behind on drop.
    pub fn keep_dir(mut self) -> Launch {
        self.keep_dir = true;
        self
    }

    /// More configuration arguments, after the defaults and those given
    /// before; [`FREE_PORT`] stands for a free port.
    pub fn args(mut self, args: &[&str]) -> Launch {
        self.args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// How long a start may take until the server is ready (default 20 s).
    pub fn ready_timeout(mut self, timeout: Duration) -> Launch {
        self.ready_timeout = timeout;
        self
    }

    /// The timeouts of [`Server::try_conn`]: to connect (default 5 s), and for
    /// any one read or write (default 30 s; `None` waits for ever).
    pub fn conn_timeouts(mut self, connect: Duration, io: Option<Duration>) -> Launch {
        self.connect_timeout = connect;
        self.io_timeout = io;
        self
    }

    /// Start the server and wait until it is ready, or say why it did not
    /// start (with the end of its log). On a port of its own choosing it tries
    /// a few times, each on another port.
    pub fn try_start(&self) -> Result<Server, String> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let mut launch = self.clone();
        if let Module::Default = launch.module {
            launch.module = Module::Path(module_path()?);
        }
        let attempts = if self.port.is_some() { 1 } else { ATTEMPTS };
        let mut failure = String::new();
        for _ in 0..attempts {
            let port = match self.port {
                Some(port) => port,
                None => free_port()?,
            };
            let name = self.name.clone().unwrap_or_else(|| {
                let seq = SEQ.fetch_add(1, Ordering::Relaxed);
                format!("redis-lock-test-{}-{seq}", std::process::id())
            });
            let dir = self.work_dir.join(format!("{name}-{port}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            launch.args = self
                .args
                .iter()
                .map(|arg| match arg.as_str() {
                    FREE_PORT => free_port().map(|port| port.to_string()),
                    _ => Ok(arg.clone()),
                })
                .collect::<Result<_, _>>()?;
            let mut server = Server {
                host: self.host.clone(),
                port,
                dir,
                launch: launch.clone(),
                child: None,
            };
            // A binary that cannot be run fails every attempt alike.
            server.spawn()?;
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(e) => failure = e,
            }
        }
        Err(failure)
    }

    /// [`Launch::try_start`], panicking (at the caller) with the reason and
    /// the log.
    #[track_caller]
    pub fn start(&self) -> Server {
        match self.try_start() {
            Ok(server) => server,
            Err(e) => panic!("server did not start: {e}"),
        }
    }
}

/// A running server (or one a test has stopped, to restart it). Dropping it
/// kills the process and, unless [`Launch::keep_dir`], removes its directory;
/// when the thread is panicking it first prints the end of the log.
pub struct Server {
    pub host: String,
    pub port: u16,
    pub dir: PathBuf,
    launch: Launch,
    child: Option<Child>,
}

impl Server {
    /// A fresh server with no persistence ([`Launch::new`]); panics if it
    /// does not start.
    #[track_caller]
    pub fn start() -> Server {
        Launch::new().start()
    }

    /// A fresh server; `extra` are configuration arguments such as
    /// `["--appendonly", "yes"]`, applied after the defaults.
    #[track_caller]
    pub fn start_with(extra: &[&str]) -> Server {
        Launch::new().args(extra).start()
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    /// A new connection (RESP2) with the launch's timeouts (longer under
    /// memcheck, by [`memcheck::slowdown`]).
    pub fn try_conn(&self) -> Result<Connection, String> {
        connect(
            &self.addr(),
            scaled(self.launch.connect_timeout),
            self.launch.io_timeout.map(scaled),
        )
        .map_err(|e| format!("connect to {}: {e}", self.addr()))
    }

    /// [`Server::try_conn`], panicking with the log.
    #[track_caller]
    pub fn conn(&self) -> Connection {
        match self.try_conn() {
            Ok(con) => con,
            Err(e) => panic!("{e}\n{}", self.log()),
        }
    }

    /// The process id while the process runs (or has ended unreaped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The process has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Start the process and wait until it is ready.
    fn spawn(&mut self) -> Result<(), String> {
        let launch = &self.launch;
        // valgrind runs the server in its own process, and `ip netns exec`
        // execs what it runs: the pid stays the server's.
        let mut command = match memcheck::enabled() {
            true => memcheck::command(&launch.binary, &self.dir),
            false => Command::new(&launch.binary),
        };
        if let Some(netns) = &launch.netns {
            let mut inside = Command::new("ip");
            inside
                .args(["netns", "exec", netns])
                .arg(command.get_program())
                .args(command.get_args());
            command = inside;
        }
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", &self.host, "--daemonize", "no", "--save", ""])
            .args(["--appendonly", "no", "--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "server.log"]);
        if let Module::Path(module) = &launch.module {
            command.arg("--loadmodule").arg(module);
        }
        let child = command
            .args(&launch.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", launch.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Wait until [`Server::is_ready`]; kill the process if it never is.
    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok()?) {
                self.child = None;
                return Err(self.failure(&format!("exited ({status})")));
            }
            if self.is_ready() {
                return Ok(());
            }
            if start.elapsed() > scaled(self.launch.ready_timeout) {
                self.kill();
                let timeout = scaled(self.launch.ready_timeout);
                return Err(self.failure(&format!("was not ready after {timeout:?}")));
            }
            sleep(Duration::from_millis(10));
        }
    }

    /// PONG, from the process this server started (not from anything else on
    /// the port), with nothing left to load: Redis accepts connections while
    /// it loads the RDB or AOF and answers commands with LOADING until it is
    /// done; INFO is one of the few it serves meanwhile.
    fn is_ready(&self) -> bool {
        let Some(pid) = self.pid() else {
            return false;
        };
        let probe = scaled(PROBE_TIMEOUT);
        let Ok(mut con) = connect(&self.addr(), probe, Some(probe)) else {
            return false;
        };
        let pong = redis::cmd("PING").query::<String>(&mut con);
        let info = redis::cmd("INFO")
            .arg("server")
            .arg("persistence")
            .query::<String>(&mut con);
        match (pong, info) {
            (Ok(pong), Ok(info)) => {
                pong == "PONG"
                    && info.contains(&format!("process_id:{pid}\r\n"))
                    && info.contains("\nloading:0\r\n")
            }
            _ => false,
        }
    }

    fn failure(&self, what: &str) -> String {
        format!(
            "{} on {} {what}; the end of {}:\n{}",
            self.launch.binary.display(),
            self.addr(),
            self.dir.join("server.log").display(),
            self.log_tail(LOG_TAIL_LINES)
        )
    }

    /// SIGKILL, and reap: no final save, as in a crash. A stopped (SIGSTOP)
    /// process dies of it too.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A clean `SHUTDOWN` (which saves if persistence is on), then wait
    /// (bounded) for the process to end; killed if it does not.
    pub fn shutdown(&mut self) {
        if let Ok(mut con) = self.try_conn() {
            let _: redis::RedisResult<redis::Value> = redis::cmd("SHUTDOWN").query(&mut con);
        }
        if let Some(mut child) = self.child.take() {
            if exited_within(&mut child, scaled(SHUTDOWN_TIMEOUT)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Under memcheck: stop the process so that valgrind writes its
    /// report (`SHUTDOWN NOSAVE NOW FORCE`, as the test is over; SIGTERM
    /// if refused, SIGKILL last, each bounded), and give the errors it
    /// logged (of every process this server ran), if any.
    fn stop_for_memcheck(&mut self) -> Option<String> {
        if let Some(mut child) = self.child.take() {
            // A paused server (SIGSTOP) must run to exit.
            self.signal_pid(child.id(), libc::SIGCONT);
            if let Ok(mut con) = self.try_conn() {
                let _: redis::RedisResult<redis::Value> = redis::cmd("SHUTDOWN")
                    .arg("NOSAVE")
                    .arg("NOW")
                    .arg("FORCE")
                    .query(&mut con);
            }
            let mut status = exited_within(&mut child, MEMCHECK_EXIT_TIMEOUT);
            if status.is_none() {
                self.signal_pid(child.id(), libc::SIGTERM);
                status = exited_within(&mut child, MEMCHECK_EXIT_TIMEOUT);
            }
            if status.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            if let Some(errors) = memcheck::errors_in(&self.dir) {
                return Some(errors);
            }
            if status.and_then(|s| s.code()) == Some(memcheck::ERROR_EXIT_CODE) {
                return Some(format!(
                    "valgrind exited with {}: see the logs in {}",
                    memcheck::ERROR_EXIT_CODE,
                    self.dir.display()
                ));
            }
            return None;
        }
        // Killed or shut down by the test: what its runs logged.
        memcheck::errors_in(&self.dir)
    }

    /// Start a stopped (killed or shut down) server again, on the same port
    /// and directory with the same arguments, and wait until it is ready.
    pub fn try_restart(&mut self) -> Result<(), String> {
        if self.child.is_some() {
            return Err(format!("restart a stopped server only ({})", self.addr()));
        }
        self.spawn()?;
        self.wait_ready()
    }

    /// [`Server::try_restart`], panicking with the log.
    #[track_caller]
    pub fn restart(&mut self) {
        if let Err(e) = self.try_restart() {
            panic!("server did not restart: {e}");
        }
    }

    /// Restart with other arguments in place of the launch's `args` (same
    /// port and directory).
    #[track_caller]
    pub fn restart_with(&mut self, args: &[&str]) {
        self.launch.args = args.iter().map(|s| s.to_string()).collect();
        self.restart();
    }

    /// Send `signal` to the process; false if it is not running or the
    /// signal could not be sent.
    pub fn signal(&self, signal: libc::c_int) -> bool {
        match self.pid() {
            Some(pid) => self.signal_pid(pid, signal),
            None => false,
        }
    }

    fn signal_pid(&self, pid: u32, signal: libc::c_int) -> bool {
        // SAFETY: kill(2) on the process this server spawned (and has not
        // reaped, so the pid is still ours).
        unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
    }

    /// SIGSTOP: the process hangs and its sockets stay open.
    #[track_caller]
    pub fn pause(&self) {
        assert!(self.signal(libc::SIGSTOP), "SIGSTOP to {}", self.addr());
    }

    /// SIGCONT after [`Server::pause`].
    #[track_caller]
    pub fn resume(&self) {
        assert!(self.signal(libc::SIGCONT), "SIGCONT to {}", self.addr());
    }

    /// The whole `server.log`.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// The last `lines` lines of `server.log`.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let memory_errors = match memcheck::enabled() {
            true => self.stop_for_memcheck(),
            false => {
                self.kill();
                None
            }
        };
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!(
                "--- last lines of the server log (port {}) ---\n{}",
                self.port,
                self.log_tail(LOG_TAIL_LINES)
            );
        }
        // A memory error's logs stay for a look.
        if !self.launch.keep_dir && memory_errors.is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if let Some(errors) = memory_errors {
            let text = format!("valgrind (server on port {}): {errors}", self.port);
            // A second panic while unwinding would abort the whole run.
            if panicking {
                eprintln!("{text}");
            } else {
                panic!("{text}");
            }
        }
    }
}

/// A wait the harness makes on a server, longer under memcheck.
fn scaled(wait: Duration) -> Duration {
    wait * memcheck::slowdown()
}

/// Wait (bounded) for `child` to exit; its status, if it did.
fn exited_within(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        sleep(Duration::from_millis(10));
    }
    None
}
