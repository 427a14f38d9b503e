//! `redis-lock run` end to end: the binary against a real redis-server with
//! the module (one per test, from testsupport), with `sh` commands that
//! report through files what they saw. Every wait is bounded (a hung
//! wrapper fails the test), and no assertion depends on how long anything
//! took.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis_lock_client::redis;
use redis_lock_testsupport::{Launch, Server};

/// The documented exit codes.
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;
const NOT_ACQUIRED: i32 = 75;
const LOST: i32 = 124;
const NOT_FOUND: i32 = 127;

/// A scratch directory for one test's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("redis-lock-run-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.path(name)).ok()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn admin(server: &Server) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// `redis-lock run KEY --url <server> ARGS…` in `dir`.
fn wrapper(server_url: &str, key: &str, args: &[&str], dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    command
        .arg("run")
        .arg(key)
        .arg("--url")
        .arg(server_url)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Wait (bounded) for the wrapper to exit; its status and its stderr.
fn finish(mut child: Child) -> (ExitStatus, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                use std::io::Read;
                stderr.read_to_string(&mut err).unwrap();
            }
            return (status, err);
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("redis-lock run did not exit within 60 s");
        }
        sleep(Duration::from_millis(20));
    }
}

fn code(status: ExitStatus) -> i32 {
    status.code().expect("redis-lock exits, it is not killed")
}

/// Poll `cond` every 20 ms until it holds; panic after 20 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
        sleep(Duration::from_millis(20));
    }
}

fn lock_info(con: &mut redis::Connection, key: &str) -> Option<Vec<redis::Value>> {
    redis::cmd("LOCK.INFO").arg(key).query(con).unwrap()
}

fn waiters(con: &mut redis::Connection, key: &str) -> usize {
    let queue: Vec<redis::Value> = redis::cmd("LOCK.QUEUE").arg(key).query(con).unwrap();
    queue.len()
}

/// A command that writes what it was given and waits for `go` before it
/// exits with `status`.
const REPORT_AND_WAIT: &str = r#"printf '%s\n%s\n%s\n' "$LOCK_FENCE" "$LOCK_TOKEN" "$LOCK_KEY" > env.tmp
mv env.tmp env
while [ ! -e go ]; do sleep 0.02; done
exit "$1""#;

#[test]
fn the_command_runs_under_the_lock_with_its_fence_and_token_and_its_status_comes_back() {
    let server = Server::start();
    let scratch = Scratch::new("status");
    let mut con = admin(&server);
    let child = wrapper(
        &server.url(),
        "nightly",
        &[
            "--ttl",
            "2s",
            "--owner",
            "cron@test",
            "--",
            "sh",
            "-c",
            REPORT_AND_WAIT,
            "sh",
            "3",
        ],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    wait_until("the command started", || scratch.read("env").is_some());
    let env = scratch.read("env").unwrap();
    let lines: Vec<&str> = env.lines().collect();
    let (fence, token, key) = (lines[0], lines[1], lines[2]);
    assert_eq!(key, "nightly");
    assert_eq!(token.len(), 36, "a UUID");

    // While it runs, the lock is held with that fence and that token.
    let info: std::collections::HashMap<String, redis::Value> = redis::cmd("LOCK.INFO")
        .arg("nightly")
        .query(&mut con)
        .unwrap();
    assert_eq!(info["fence"], redis::Value::Int(fence.parse().unwrap()));
    assert_eq!(
        info["owner"],
        redis::Value::BulkString(b"cron@test".to_vec())
    );
    let pong: String = redis::cmd("LOCK.GUARD")
        .arg("nightly")
        .arg(token)
        .arg("PING")
        .query(&mut con)
        .expect("the token holds the lock");
    assert_eq!(pong, "PONG");
    // Past the 2 s ttl: the wrapper keeps the lease alive.
    sleep(Duration::from_millis(2500));
    let still: Option<std::collections::HashMap<String, redis::Value>> = redis::cmd("LOCK.INFO")
        .arg("nightly")
        .query(&mut con)
        .unwrap();
    assert_eq!(still.expect("still held")["fence"], info["fence"]);

    std::fs::write(scratch.path("go"), "").unwrap();
    let (status, err) = finish(child);
    assert_eq!(code(status), 3, "the command's status: {err}");
    assert!(!err.contains(token), "the token is never printed");
    assert!(lock_info(&mut con, "nightly").is_none(), "released at exit");
}

#[test]
fn a_command_killed_by_a_signal_gives_128_plus_the_signal_and_the_lock_is_released() {
    let server = Server::start();
    let scratch = Scratch::new("signal");
    let child = wrapper(
        &server.url(),
        "job",
        &["--", "sh", "-c", "kill -KILL $$"],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    let (status, err) = finish(child);
    assert_eq!(code(status), 128 + 9, "{err}");
    assert!(lock_info(&mut admin(&server), "job").is_none());
}

#[test]
fn a_held_lock_is_not_acquired_and_the_command_does_not_run() {
    let server = Server::start();
    let scratch = Scratch::new("held");
    let mut con = admin(&server);
    let _: redis::Value = redis::cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(30_000)
        .arg("TOKEN")
        .arg("other")
        .query(&mut con)
        .unwrap();
    let child = wrapper(&server.url(), "job", &["--", "touch", "ran"], &scratch.0)
        .spawn()
        .unwrap();
    let (status, err) = finish(child);
    assert_eq!(code(status), NOT_ACQUIRED, "{err}");
    assert!(err.contains("held"), "{err}");
    assert!(!scratch.path("ran").exists(), "the command did not run");

    // A wait that runs out is the same.
    let child = wrapper(
        &server.url(),
        "job",
        &["--wait", "300ms", "--", "touch", "ran"],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    let (status, err) = finish(child);
    assert_eq!(code(status), NOT_ACQUIRED, "{err}");
    assert!(!scratch.path("ran").exists());
}

#[test]
fn wait_gets_the_lock_when_the_holder_releases_it() {
    let server = Server::start();
    let scratch = Scratch::new("wait");
    let mut con = admin(&server);
    let _: redis::Value = redis::cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(30_000)
        .arg("TOKEN")
        .arg("other")
        .query(&mut con)
        .unwrap();
    let child = wrapper(
        &server.url(),
        "job",
        &["--wait", "30s", "--", "sh", "-c", "echo $LOCK_FENCE > ran"],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    wait_until("the wrapper queued", || waiters(&mut con, "job") == 1);
    assert!(!scratch.path("ran").exists(), "not before the release");
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg("job")
        .arg("other")
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    let (status, err) = finish(child);
    assert_eq!(code(status), 0, "{err}");
    let fence: u64 = scratch.read("ran").unwrap().trim().parse().unwrap();
    assert!(fence > 0);
    assert!(lock_info(&mut con, "job").is_none());
}

/// A command that says when it started and when it got SIGTERM.
const TRAP_TERM: &str = r#"trap 'echo term > term; exit 0' TERM
touch started
while :; do sleep 0.02; done"#;

#[test]
fn deleting_the_key_stops_the_command_with_sigterm() {
    let server = Server::start();
    let scratch = Scratch::new("del");
    let mut con = admin(&server);
    let child = wrapper(
        &server.url(),
        "job",
        &["--ttl", "1s", "--", "sh", "-c", TRAP_TERM],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    wait_until("the command started", || scratch.path("started").exists());
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut con).unwrap();
    let (status, err) = finish(child);
    assert_eq!(code(status), LOST, "{err}");
    assert_eq!(scratch.read("term").as_deref(), Some("term\n"));
    assert!(err.contains("lost the lock"), "{err}");
}

#[test]
fn overwriting_the_key_stops_the_command_and_sigkill_follows_the_grace() {
    let server = Server::start();
    let scratch = Scratch::new("set");
    let mut con = admin(&server);
    let ignore_term = r#"trap '' TERM
echo $$ > pid
while :; do sleep 0.02; done"#;
    let child = wrapper(
        &server.url(),
        "job",
        &[
            "--ttl",
            "1s",
            "--grace",
            "200ms",
            "--",
            "sh",
            "-c",
            ignore_term,
        ],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    wait_until("the command started", || scratch.read("pid").is_some());
    let pid: i32 = scratch.read("pid").unwrap().trim().parse().unwrap();
    let _: () = redis::cmd("SET")
        .arg("job")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let (status, err) = finish(child);
    assert_eq!(code(status), LOST, "{err}");
    assert!(err.contains("SIGKILL"), "{err}");
    // SAFETY: signal 0 only asks whether the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(!alive, "the command was killed");
    let value: String = redis::cmd("GET").arg("job").query(&mut con).unwrap();
    assert_eq!(value, "x", "the overwrite stays");
}

/// Whether `pid` runs (a zombie, dead but not reaped by its new parent,
/// does not).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Kills a process the test left behind, when dropped (a failing test
/// must not leave its `sleep` holding the test's output open).
struct Reap(i32);

impl Drop for Reap {
    fn drop(&mut self) {
        if running(self.0) {
            // SAFETY: a process this test's command started.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}

/// A command whose `sleep` runs in a process of its own (it writes its
/// pid), which the shell waits for.
const GRANDCHILD: &str = r#"sleep 300 &
echo $! > grandchild.tmp
mv grandchild.tmp grandchild
wait"#;

#[test]
fn a_lost_lock_stops_what_the_command_started_too() {
    let server = Server::start();
    let scratch = Scratch::new("group");
    let mut con = admin(&server);
    let child = wrapper(
        &server.url(),
        "job",
        &["--ttl", "1s", "--", "sh", "-c", GRANDCHILD],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    wait_until("the command started", || {
        scratch.read("grandchild").is_some()
    });
    let grandchild: i32 = scratch.read("grandchild").unwrap().trim().parse().unwrap();
    let _reap = Reap(grandchild);
    assert!(running(grandchild));
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut con).unwrap();
    let (status, err) = finish(child);
    assert_eq!(code(status), LOST, "{err}");
    let stopped = Instant::now();
    wait_until("the grandchild is gone", || !running(grandchild));
    println!(
        "the grandchild was gone {:?} after redis-lock exited",
        stopped.elapsed()
    );
}

#[test]
fn the_command_is_killed_when_redis_lock_dies() {
    let server = Server::start();
    let scratch = Scratch::new("pdeathsig");
    let report_pid = r#"echo $$ > pid.tmp
mv pid.tmp pid
while :; do sleep 0.02; done"#;
    let mut child = wrapper(
        &server.url(),
        "job",
        &["--ttl", "1s", "--", "sh", "-c", report_pid],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    wait_until("the command started", || scratch.read("pid").is_some());
    let pid: i32 = scratch.read("pid").unwrap().trim().parse().unwrap();
    let _reap = Reap(pid);
    child.kill().unwrap(); // SIGKILL: redis-lock cannot stop the command itself
    child.wait().unwrap();
    wait_until("the command is gone", || !running(pid));
}

#[test]
fn a_hold_limit_stops_the_command() {
    let server = Server::start();
    let scratch = Scratch::new("limit");
    let mut con = admin(&server);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lock.max-extends")
        .arg(1)
        .query(&mut con)
        .unwrap();
    let child = wrapper(
        &server.url(),
        "job",
        &["--ttl", "1500ms", "--", "sh", "-c", TRAP_TERM],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    let (status, err) = finish(child);
    assert_eq!(code(status), LOST, "{err}");
    assert!(err.contains("hold limit"), "{err}");
    assert_eq!(scratch.read("term").as_deref(), Some("term\n"));
}

#[test]
fn sigterm_to_the_wrapper_is_passed_on_and_the_lock_released() {
    let server = Server::start();
    let scratch = Scratch::new("forward");
    let trap_and_exit = r#"trap 'echo term > term; exit 7' TERM
touch started
while :; do sleep 0.02; done"#;
    let child = wrapper(
        &server.url(),
        "job",
        &["--", "sh", "-c", trap_and_exit],
        &scratch.0,
    )
    .spawn()
    .unwrap();
    wait_until("the command started", || scratch.path("started").exists());
    // SAFETY: a signal to the wrapper this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let (status, err) = finish(child);
    assert_eq!(code(status), 7, "the command's status: {err}");
    assert_eq!(scratch.read("term").as_deref(), Some("term\n"));
    assert!(lock_info(&mut admin(&server), "job").is_none());
}

#[test]
fn usage_connection_and_command_errors_have_their_codes() {
    let server = Server::start();
    let scratch = Scratch::new("errors");
    let url = server.url();
    for args in [&[][..], &["--ttl", "soon", "--", "true"], &["--frob"]] {
        let (status, err) = finish(wrapper(&url, "job", args, &scratch.0).spawn().unwrap());
        assert_eq!(code(status), USAGE, "{args:?}: {err}");
        assert!(err.contains("usage:"), "{err}");
    }
    let (status, err) = finish(
        wrapper(&url, "job", &["--", "/nonexistent/command"], &scratch.0)
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(status), NOT_FOUND, "{err}");
    assert!(lock_info(&mut admin(&server), "job").is_none(), "released");

    // A malformed URL is the caller's mistake, not an unreachable server.
    let (status, err) = finish(
        wrapper("not a url", "job", &["--", "touch", "ran"], &scratch.0)
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(status), USAGE, "{err}");
    assert!(!scratch.path("ran").exists());

    // Nothing listens on a port just freed.
    let port = redis_lock_testsupport::free_port().unwrap();
    let closed = format!("redis://127.0.0.1:{port}/");
    let (status, err) = finish(
        wrapper(&closed, "job", &["--", "true"], &scratch.0)
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(status), UNAVAILABLE, "{err}");

    // A server without the module is refused at connect, saying so.
    let bare = Launch::new().without_module().start();
    let (status, err) = finish(
        wrapper(&bare.url(), "job", &["--", "touch", "ran"], &scratch.0)
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(status), UNAVAILABLE, "{err}");
    assert!(err.contains("no lock module loaded"), "{err}");
    assert!(!scratch.path("ran").exists());
}
