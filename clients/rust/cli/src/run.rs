//! `redis-lock run`: take the lock, run the command under it, keep the lock
//! alive while it runs, stop it if the lock is lost, release when it exits,
//! and say how it went as an exit status ([`Exit`]).
//!
//! The command runs in a process group of its own, and every signal goes
//! to the group: a shell that runs `sleep` would otherwise die on SIGTERM
//! and leave the `sleep` (or a worker it started) running without the
//! lock. Being in its own group, it no longer gets the terminal's Ctrl-C:
//! redis-lock does, and passes it on. Should redis-lock die (SIGKILL, a
//! crash), the kernel kills the command (`PR_SET_PDEATHSIG`).

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
    let client = match redis::Client::open(url.as_str()) {
        Ok(client) => client,
        Err(e) => {
            say(format_args!("--url: not a server URL: {e}"));
            return Exit::Usage;
        }
    };
    let locks = match connect(client).await {
        Ok(locks) => locks,
        // Connected, but to a server whose module this client cannot use:
        // the error says which versions and what to do.
        Err(e @ Error::ModuleVersion { .. }) => {
            say(format_args!("{e}"));
            return Exit::Unavailable;
        }
        Err(e) => {
            say(format_args!("cannot connect to the server: {e}"));
            return Exit::Unavailable;
        }
    };
    let owner = args.owner.clone().unwrap_or_else(default_owner);
    let guard = match acquire(&locks, &args, owner).await {
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

/// The lock, waiting as `--wait` says: `forever` is the server's longest
/// wait, asked again each time it runs out.
async fn acquire(locks: &Locks, args: &RunArgs, owner: String) -> Result<Guard, Error> {
    let forever = args.wait == Duration::MAX;
    loop {
        let wait = args.wait.min(redis_lock_client::MAX_WAIT);
        let request = locks.lock(&args.key).ttl(args.ttl).wait(wait);
        match request.owner(owner.clone()).acquire().await {
            Err(Error::TimedOut) if forever => continue,
            outcome => return outcome,
        }
    }
}

/// A connection that gives up quickly when the server is not there: a
/// command under a lock should not start late because of a dead server.
///
/// The one lock keeps its own watchdog rather than a session: for one hold
/// an extend every ttl/3 is the fewest calls (a session adds its check),
/// and the server's hold policy (`lock.max-hold-ms`, which a hold in a
/// session is not subject to) applies to the command it runs.
async fn connect(client: redis::Client) -> Result<Locks, Error> {
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
        .process_group(0)
        .kill_on_drop(true);
    let parent = std::process::id();
    // SAFETY: between fork and exec only async-signal-safe calls (prctl,
    // getppid, _exit), no allocation.
    unsafe {
        command.pre_exec(move || {
            // Killed with redis-lock: nobody would stop it on a loss.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // redis-lock died before the prctl: no signal will come.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let grace = args.grace.unwrap_or(args.ttl / 20);
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
                stop(&mut child, grace).await;
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

/// SIGTERM to the command's group, then SIGKILL to the group if anything
/// of it (the command, or what it started) is still there after `grace`.
async fn stop(child: &mut Child, grace: Duration) {
    let Some(group) = child.id().map(|pid| pid as libc::pid_t) else {
        return; // already reaped
    };
    signal_group(group, libc::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    let exited = tokio::time::timeout_at(deadline, child.wait())
        .await
        .is_ok();
    // The command may be gone while what it started lingers in its group.
    while group_alive(group) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if !exited || group_alive(group) {
        say(format_args!(
            "the command did not stop within {grace:?} of SIGTERM: SIGKILL"
        ));
        signal_group(group, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

/// A signal to the command's process group (its pid: it leads the group).
fn send(child: &Child, signal: libc::c_int) {
    if let Some(pid) = child.id() {
        signal_group(pid as libc::pid_t, signal);
    }
}

fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill has no memory effects. The group is the command's,
    // which this process started as its leader: while any member lives
    // (or the leader is not reaped) the id is not reused.
    unsafe {
        libc::kill(-group, signal);
    }
}

/// Whether any process of the group is left (a zombie not yet reaped by
/// its new parent counts).
fn group_alive(group: libc::pid_t) -> bool {
    // SAFETY: signal 0 only asks whether the group exists.
    unsafe { libc::kill(-group, 0) == 0 }
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
