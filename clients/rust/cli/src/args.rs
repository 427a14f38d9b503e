//! The command line, parsed by hand into a [`Command`]: no parsing crate
//! for one subcommand and six options. Everything here is pure, so the unit
//! tests below cover it without a server.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

pub const USAGE: &str = "\
usage: redis-lock run KEY [OPTIONS] [--] COMMAND [ARG...]
       redis-lock --help | --version

Takes the lock KEY (the redis-lock module's LOCK.ACQUIRE), keeps it alive
while COMMAND runs, and releases it when COMMAND exits. COMMAND gets
LOCK_KEY, LOCK_FENCE and LOCK_TOKEN in its environment. COMMAND runs in a
process group of its own: if the lock is lost (deleted, overwritten,
expired, or the server's hold limit refuses an extend), the whole group
(COMMAND and whatever it started) gets SIGTERM, then SIGKILL after the
grace period. SIGINT, SIGTERM and SIGHUP sent to redis-lock (Ctrl-C too)
are passed on to the group. If redis-lock itself dies, COMMAND gets
SIGKILL.

options:
  --ttl DURATION    the lease, extended every ttl/3 (default 30s)
  --wait DURATION   wait up to this long in the server's queue (default 0:
                    do not wait; `forever`: without limit)
  --grace DURATION  after SIGTERM on a lost lock, wait this long before
                    SIGKILL (default ttl/20, half the safety margin: the
                    command is gone before the lock's deadline)
  --url URL         the server (default $REDIS_URL, else redis://127.0.0.1:6379/)
  --owner LABEL     the public label LOCK.INFO shows (default HOST:PID)
DURATION is a number with a unit, ms, s, m or h (30s, 1.5m, 500ms); a bare
number is seconds.

exit status: COMMAND's own, or 128+N when a signal N ended it; else
  64   usage error (a malformed --url too)
  69   the server could not be reached or answered with an error
  75   not acquired: the lock is held (and --wait, if given, ran out)
  124  the lock was lost while COMMAND ran; COMMAND was stopped
  126  COMMAND could not be executed
  127  COMMAND was not found
";

/// What `redis-lock` was asked to do.
#[derive(Debug, PartialEq)]
pub enum Command {
    Help,
    Version,
    Run(RunArgs),
}

/// `redis-lock run`'s arguments.
#[derive(Debug, PartialEq)]
pub struct RunArgs {
    pub key: Vec<u8>,
    pub ttl: Duration,
    /// `Duration::MAX`: without limit (`--wait forever`).
    pub wait: Duration,
    /// `None`: the default, ttl/20.
    pub grace: Option<Duration>,
    pub url: Option<String>,
    pub owner: Option<String>,
    /// The program and its arguments (at least the program).
    pub command: Vec<OsString>,
}

/// Parse the arguments after the program's name. The error is a line for
/// stderr (the usage follows it).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let mut args = args.into_iter();
    let Some(first) = args.next() else {
        return Err("a subcommand is needed".to_string());
    };
    match first.to_str() {
        Some("run") => {}
        Some("--help" | "-h" | "help") => return Ok(Command::Help),
        Some("--version" | "-V") => return Ok(Command::Version),
        _ => return Err(format!("unknown subcommand {first:?} (run)")),
    }
    let Some(key) = args.next() else {
        return Err("run needs a KEY and a COMMAND".to_string());
    };
    if key.is_empty() {
        return Err("the KEY is empty".to_string());
    }
    let mut run = RunArgs {
        key: key.as_bytes().to_vec(),
        ttl: Duration::from_secs(30),
        wait: Duration::ZERO,
        grace: None,
        url: None,
        owner: None,
        command: Vec::new(),
    };
    let mut seen: Vec<&'static str> = Vec::new();
    while let Some(arg) = args.next() {
        let text = arg.to_str().unwrap_or("");
        if text == "--" {
            break;
        }
        if !text.starts_with('-') || text == "-" {
            run.command.push(arg);
            break;
        }
        let (name, inline) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (text, None),
        };
        let name: &'static str = match name {
            "--ttl" => "--ttl",
            "--wait" => "--wait",
            "--grace" => "--grace",
            "--url" => "--url",
            "--owner" => "--owner",
            "--help" | "-h" => return Ok(Command::Help),
            _ => return Err(format!("unknown option {arg:?}")),
        };
        if seen.contains(&name) {
            return Err(format!("{name} is given more than once"));
        }
        seen.push(name);
        let value = match inline {
            Some(value) => value,
            None => match args.next() {
                Some(value) => value
                    .into_string()
                    .map_err(|v| format!("{name}: {v:?} is not UTF-8"))?,
                None => return Err(format!("{name} needs a value")),
            },
        };
        match name {
            "--ttl" => run.ttl = duration(name, &value)?,
            "--wait" if matches!(value.as_str(), "forever" | "inf") => run.wait = Duration::MAX,
            "--wait" => run.wait = duration(name, &value)?,
            "--grace" => run.grace = Some(duration(name, &value)?),
            "--url" => run.url = Some(value),
            _ => {
                if value.is_empty() || value.len() > redis_lock_client::MAX_OWNER_LEN {
                    return Err("--owner must be 1 to 128 bytes".to_string());
                }
                run.owner = Some(value);
            }
        }
    }
    run.command.extend(args);
    if run.command.is_empty() || run.command[0].is_empty() {
        return Err("run needs a COMMAND to run under the lock".to_string());
    }
    if run.ttl < Duration::from_millis(1) || run.ttl > redis_lock_client::MAX_TTL {
        return Err("--ttl must be 1ms to 24h".to_string());
    }
    if run.wait > redis_lock_client::MAX_WAIT && run.wait != Duration::MAX {
        return Err("--wait must be at most 365 days, or forever".to_string());
    }
    Ok(Command::Run(run))
}

/// `30s`, `1.5m`, `500ms`, `2h`, or a bare number of seconds.
pub fn duration(name: &str, text: &str) -> Result<Duration, String> {
    let bad = || format!("{name}: {text:?} is not a duration (such as 30s, 500ms, 1.5m, 2h)");
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| bad())
}

/// `key` for messages: printable as is when it is plain text, escaped
/// otherwise (a key is any bytes).
pub fn shown(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) if !text.chars().any(char::is_control) => text.to_string(),
        _ => format!("{:?}", OsStr::from_bytes(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(OsString::from))
    }

    fn run(args: &[&str]) -> RunArgs {
        match parse_str(args) {
            Ok(Command::Run(run)) => run,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn defaults_and_a_command_after_the_separator() {
        let run = run(&["run", "nightly", "--", "backup", "--full"]);
        assert_eq!(run.key, b"nightly");
        assert_eq!(run.ttl, Duration::from_secs(30));
        assert_eq!(run.wait, Duration::ZERO);
        assert_eq!(run.grace, None);
        assert_eq!((run.url, run.owner), (None, None));
        assert_eq!(run.command, ["backup", "--full"]);
    }

    #[test]
    fn options_with_spaces_or_equals_and_a_command_without_separator() {
        let run = run(&[
            "run",
            "k",
            "--ttl",
            "1.5m",
            "--wait=500ms",
            "--grace",
            "2",
            "--url",
            "redis://h:1/",
            "--owner=cron@a",
            "sh",
            "-c",
            "exit 3",
        ]);
        assert_eq!(run.ttl, Duration::from_secs(90));
        assert_eq!(run.wait, Duration::from_millis(500));
        assert_eq!(run.grace, Some(Duration::from_secs(2)));
        assert_eq!(run.url.as_deref(), Some("redis://h:1/"));
        assert_eq!(run.owner.as_deref(), Some("cron@a"));
        assert_eq!(run.command, ["sh", "-c", "exit 3"]);
    }

    #[test]
    fn wait_forever_is_without_limit() {
        assert_eq!(
            run(&["run", "k", "--wait", "forever", "true"]).wait,
            Duration::MAX
        );
        assert_eq!(run(&["run", "k", "--wait=inf", "true"]).wait, Duration::MAX);
        assert!(parse_str(&["run", "k", "--wait", "366d", "true"]).is_err());
    }

    #[test]
    fn a_key_is_any_bytes() {
        let key = OsStr::from_bytes(b"job\xff\n").to_os_string();
        let args = ["run".into(), key, "--".into(), "true".into()];
        match parse(args) {
            Ok(Command::Run(run)) => assert_eq!(run.key, b"job\xff\n"),
            other => panic!("{other:?}"),
        }
        assert_eq!(shown(b"job\xff\n"), "\"job\\xFF\\n\"");
        assert_eq!(shown(b"nightly"), "nightly");
    }

    #[test]
    fn help_and_version() {
        assert_eq!(parse_str(&["--help"]), Ok(Command::Help));
        assert_eq!(parse_str(&["run", "k", "-h"]), Ok(Command::Help));
        assert_eq!(parse_str(&["--version"]), Ok(Command::Version));
    }

    #[test]
    fn garbage_is_a_usage_error() {
        for args in [
            &[][..],
            &["lock"],
            &["run"],
            &["run", ""],
            &["run", "k"],
            &["run", "k", "--"],
            &["run", "k", "--", ""],
            &["run", "k", "--ttl"],
            &["run", "k", "--ttl", "--", "true"],
            &["run", "k", "--ttl", "0", "true"],
            &["run", "k", "--ttl", "25h", "true"],
            &["run", "k", "--ttl", "-1s", "true"],
            &["run", "k", "--ttl", "1x", "true"],
            &["run", "k", "--ttl", "1e3", "true"],
            &["run", "k", "--ttl", ".5s", "true"],
            &["run", "k", "--ttl", "", "true"],
            &["run", "k", "--wait", "366d", "true"],
            &["run", "k", "--wait", "8761h", "true"],
            &["run", "k", "--ttl", "1s", "--ttl", "2s", "true"],
            &["run", "k", "--owner", "", "true"],
            &["run", "k", "--frobnicate", "true"],
        ] {
            assert!(parse_str(args).is_err(), "{args:?} was accepted");
        }
        let long = "x".repeat(129);
        assert!(parse_str(&["run", "k", "--owner", &long, "true"]).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(duration("t", "250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("t", "10"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("t", "2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(duration("t", "0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("t", "0"), Ok(Duration::ZERO));
        for bad in ["", "s", "1.2.3s", "1 s", "1S", "ms", "1..s", "-5"] {
            assert!(duration("t", bad).is_err(), "{bad:?}");
        }
    }
}
