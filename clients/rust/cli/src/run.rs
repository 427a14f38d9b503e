//! `redis-lock run`: take the lock, run the command under it, keep the lock
//! alive while it runs, stop it if the lock is lost, release when it exits,
//! and say how it went as an exit status ([`Exit`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use redis_lock_client::redis::aio::ConnectionManagerConfig;
use redis_lock_client::{redis, Error, Guard, KeepAlive, LockOptions, Locks, LostReason};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::args::{shown, RunArgs};

/// How `redis-lock run` ends: the exit status and its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The command's own status, or 128 + the signal that ended it.
    Command(i32),
    /// 64: a usage error.
    Usage,
    /// 69: the server could not be reached or answered with an error.
    Unavailable,
    /// 75: the lock is held (and the wait, if any, ran out).
    NotAcquired,
    /// 124: the lock was lost while the command ran; it was stopped.
    Lost,
    /// 126: the command could not be executed.
    CannotExecute,
    /// 127: the command was not found.
    NotFound,
}

impl Exit {
    pub fn code(self) -> i32 {
        match self {
            Exit::Command(code) => code,
            Exit::Usage => 64,
            Exit::Unavailable => 69,
            Exit::NotAcquired => 75,
            Exit::Lost => 124,
            Exit::CannotExecute => 126,
            Exit::NotFound => 127,
        }
    }
}

/// The status a shell would report for `status`.
fn status_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

fn say(message: std::fmt::Arguments<'_>) {
    eprintln!("redis-lock: {message}");
}

pub async fn run(args: RunArgs) -> Exit {
    let key = shown(&args.key);
    let url = args
        .url
        .clone()
        .or_else(|| std::env::var("REDIS_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_string());
    let locks = match connect(&url).await {
        Ok(locks) => locks,
        Err(e) => {
            say(format_args!("cannot connect to the server: {e}"));
            return Exit::Unavailable;
        }
    };
    let owner = args.owner.clone().unwrap_or_else(default_owner);
    let guard = match locks
        .lock(&args.key)
        .ttl(args.ttl)
        .wait(args.wait)
        .owner(owner)
        .acquire()
        .await
    {
        Ok(guard) => guard,
        Err(Error::NotAcquired) => {
            say(format_args!("{key} is held by someone else"));
            return Exit::NotAcquired;
        }
        Err(Error::TimedOut) => {
            say(format_args!(
                "{key} is still held after waiting {:?}",
                args.wait
            ));
            return Exit::NotAcquired;
        }
        Err(Error::InvalidArgument(what)) => {
            say(format_args!("{what}"));
            return Exit::Usage;
        }
        Err(e) => {
            say(format_args!("cannot take {key}: {e}"));
            return Exit::Unavailable;
        }
    };
    let exit = supervise(&args, &key, &guard).await;
    let lost = guard.is_lost();
    match guard.release().await {
        Ok(_) => {}
        // After a loss the lock is gone or going (an overwritten key even
        // answers WRONGTYPE): nothing to say.
        Err(_) if lost => {}
        Err(e) => say(format_args!(
            "could not release {key} ({e}): it expires at the end of its lease"
        )),
    }
    exit
}

/// A connection that gives up quickly when the server is not there: a
/// command under a lock should not start late because of a dead server.
///
/// The one lock keeps its own watchdog rather than a session: for one hold
/// an extend every ttl/3 is the fewest calls (a session adds its check),
/// and the server's hold policy (`lock.max-hold-ms`, which a hold in a
/// session is not subject to) applies to the command it runs.
async fn connect(url: &str) -> Result<Locks, Error> {
    let client = redis::Client::open(url)?;
    let config = ConnectionManagerConfig::new().set_number_of_retries(1);
    let locks = Locks::connect_with(client, config).await?;
    Ok(locks.with_options(LockOptions::default().keepalive(KeepAlive::Watchdog)))
}

/// `host:pid`, for `LOCK.INFO`'s owner: who holds the lock.
fn default_owner() -> String {
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most name.len() bytes into the buffer.
    let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let host = if ok && end > 0 {
        String::from_utf8_lossy(&name[..end]).into_owned()
    } else {
        "unknown-host".to_string()
    };
    let mut owner = format!("{host}:{}", std::process::id());
    while owner.len() > redis_lock_client::MAX_OWNER_LEN {
        owner.remove(0);
    }
    owner
}

/// Run the command under `guard`; stop it if the lock is lost.
async fn supervise(args: &RunArgs, key: &str, guard: &Guard) -> Exit {
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LOCK_KEY", OsStr::from_bytes(&args.key))
        .env("LOCK_FENCE", guard.fence().to_string())
        .env("LOCK_TOKEN", guard.token())
        .kill_on_drop(true);
    // Watched before the command starts, so that none is missed (nor
    // kills redis-lock, leaving the command to run without the lock).
    let Ok(mut signals) = Signals::new() else {
        say(format_args!("cannot watch signals"));
        return Exit::Unavailable;
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let program = args.command[0].to_string_lossy();
            say(format_args!("cannot run {program}: {e}"));
            return match e.kind() {
                std::io::ErrorKind::NotFound => Exit::NotFound,
                _ => Exit::CannotExecute,
            };
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => Exit::Command(status_code(status)),
                    Err(e) => {
                        say(format_args!("lost track of the command: {e}"));
                        Exit::Unavailable
                    }
                };
            }
            reason = guard.lost() => {
                say(format_args!("lost the lock on {key} ({}): stopping the command", describe(&reason)));
                stop(&mut child, args.grace).await;
                return Exit::Lost;
            }
            signal = signals.next() => send(&child, signal),
        }
    }
}

fn describe(reason: &LostReason) -> String {
    let text = match reason {
        LostReason::Refused => {
            "the server no longer has it: deleted, expired, taken or overwritten"
        }
        LostReason::Limit => "the server's hold limit refused to extend it",
        LostReason::Expired => "no extend succeeded before its deadline",
        LostReason::Revoked(why) => return format!("revoked: {why}"),
        _ => "the server no longer has it",
    };
    text.to_string()
}

/// SIGTERM, then SIGKILL if the command is still running after `grace`.
async fn stop(child: &mut Child, grace: Duration) {
    send(child, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        say(format_args!(
            "the command did not stop within {grace:?} of SIGTERM: SIGKILL"
        ));
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

fn send(child: &Child, signal: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill has no memory effects; the pid is our own child,
        // not yet reaped (tokio reaps it in `wait`).
        unsafe {
            libc::kill(pid as libc::pid_t, signal);
        }
    }
}

/// The signals passed on to the command.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}
