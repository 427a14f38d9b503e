//! The conformance driver of this crate: the client under the harness of
//! `conformance/run.py`, which runs the same scenarios against every
//! client of the repository.
//!
//! ```text
//! cargo build --example conformance_driver -p redis-lock-client
//! target/debug/examples/conformance_driver redis://127.0.0.1:PORT
//! ```
//!
//! It speaks the harness's JSON-lines protocol (`conformance/PROTOCOL.md`):
//! `ready` once connected, then one command a line on stdin (`acquire`,
//! `release`, `guard`, `held`, `cancel`, `quit`), one answer or event a line
//! on stdout, flushed after each; logs go to stderr.
//! It uses the crate's public API only, as a user would, so that the harness
//! tests the crate and not this file:
//!
//! - each command runs in a task of its own, so that an acquire waiting in
//!   the server's queue does not hold back the commands after it;
//! - `mode` picks the `Locks`: `session` is [`KeepAlive::Session`] (one
//!   server lease for every hold), `watchdog` is [`KeepAlive::Watchdog`]
//!   (an extend every ttl/3 for each hold);
//! - each guard has a task waiting on its loss signal, which prints the
//!   `lost` event the moment the crate signals it;
//! - `cancel` drops the waiting acquire's future, which is how this crate
//!   gives up a wait (its dedicated connection closes, and the server takes
//!   the waiter out of the queue).
//!
//! The crate has no JSON dependency, so the few shapes the protocol needs
//! are read and written by hand below.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_lock_client::redis::{self, Value};
use redis_lock_client::{Error, Guard, KeepAlive, LockOptions, Locks, LostReason, LostSignal};
use tokio::sync::{mpsc, oneshot, RwLock};
use tokio::task::AbortHandle;

#[tokio::main]
async fn main() {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: conformance_driver redis://HOST:PORT");
        std::process::exit(2);
    };
    let driver = match Driver::connect(&url).await {
        Ok(driver) => Arc::new(driver),
        Err(e) => {
            eprintln!("conformance_driver: cannot connect to {url}: {e}");
            std::process::exit(1);
        }
    };
    write_line(&[("ev", "ready".into())]);
    // stdin is read on a thread of its own: a blocking read must not hold
    // a runtime worker (the crate's keepers run on them).
    let (lines, mut commands) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // A name is used by one acquire per driver process: checked here, in the
    // order of the lines.
    let mut names = std::collections::HashSet::new();
    while let Some(line) = commands.recv().await {
        if line.trim().is_empty() {
            continue;
        }
        let command = match Json::parse(&line) {
            Some(command @ Json::Object(_)) => command,
            _ => {
                eprintln!("conformance_driver: not a JSON object: {line}");
                continue;
            }
        };
        if command.str("op") == Some("quit") {
            write_line(&[("re", command.get("re").clone()), ("ev", "bye".into())]);
            break;
        }
        if command.str("op") == Some("acquire")
            && !names.insert(command.str("name").unwrap_or("").to_string())
        {
            write_line(&[
                ("re", command.get("re").clone()),
                ("ev", "error".into()),
                ("name", command.get("name").clone()),
                ("kind", "invalid".into()),
                ("message", "the name was used by an acquire before".into()),
            ]);
            continue;
        }
        tokio::spawn(Arc::clone(&driver).run(command));
    }
    // Holds still open are left to their ttl, as a process that exits
    // leaves them; waits in flight end with the process.
    std::process::exit(0);
}

/// A named guard. The guard is behind a lock so that guarded commands run
/// side by side and a release, which takes the guard, waits for them.
struct Hold {
    guard: Arc<RwLock<Option<Guard>>>,
    signal: LostSignal,
    watcher: AbortHandle,
}

struct Driver {
    session: Locks,
    watchdog: Locks,
    holds: Mutex<HashMap<String, Hold>>,
    /// The acquires in flight, by name: a `cancel` sends each one the
    /// sender through which it says it has answered.
    waiting: Mutex<HashMap<String, oneshot::Sender<oneshot::Sender<()>>>>,
}

/// An answer's fields after `re`, or an error of a kind.
type Answer = Result<Vec<(&'static str, Json)>, (&'static str, String)>;

impl Driver {
    async fn connect(url: &str) -> Result<Driver, Error> {
        let locks = Locks::connect(redis::Client::open(url)?).await?;
        let with = |mode| LockOptions::default().keepalive(mode);
        Ok(Driver {
            session: locks.clone().with_options(with(KeepAlive::Session)),
            watchdog: locks.with_options(with(KeepAlive::Watchdog)),
            holds: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashMap::new()),
        })
    }

    /// Runs one command and writes its answer.
    async fn run(self: Arc<Self>, command: Json) {
        let name = command.get("name").clone();
        let answer = match command.str("op").unwrap_or("") {
            "acquire" => return self.acquire(command).await,
            "release" => self.release(&command).await,
            "guard" => self.guard(&command).await,
            "held" => self.held(&command),
            "cancel" => self.cancel(&command).await,
            op => Err(("invalid", format!("unknown op {op:?}"))),
        };
        let mut fields = vec![("re", command.get("re").clone())];
        match answer {
            Ok(rest) => fields.extend(rest),
            Err((kind, message)) => fields.extend([
                ("ev", "error".into()),
                ("name", name),
                ("kind", kind.into()),
                ("message", Json::String(message)),
            ]),
        }
        write_line(&fields);
    }

    async fn acquire(self: Arc<Self>, command: Json) {
        let re = command.get("re").clone();
        let name = command.str("name").unwrap_or("").to_string();
        let (cancel, mut cancelled) = oneshot::channel();
        lock(&self.waiting).insert(name.clone(), cancel);
        let answer = tokio::select! {
            answer = self.try_acquire(&name, &command) => answer,
            Ok(answered) = &mut cancelled => {
                // The acquire's future is dropped here: a wait leaves the
                // server's queue as its connection closes.
                write_line(&[
                    ("re", re),
                    ("ev", "error".into()),
                    ("name", Json::String(name)),
                    ("kind", "cancelled".into()),
                    ("message", "cancelled by the harness".into()),
                ]);
                let _ = answered.send(());
                return;
            }
        };
        let mut fields = vec![("re", re), ("name", Json::String(name.clone()))];
        match answer {
            Ok(Some(guard)) => {
                fields.insert(1, ("ev", "acquired".into()));
                fields.push(("fence", Json::Number(guard.fence() as f64)));
                let signal = guard.lost_signal();
                // The answer goes out before the watcher starts: `lost`
                // always follows `acquired`.
                write_line(&fields);
                let watcher = tokio::spawn(watch(name.clone(), signal.clone())).abort_handle();
                let hold = Hold {
                    guard: Arc::new(RwLock::new(Some(guard))),
                    signal,
                    watcher,
                };
                if let Some(old) = lock(&self.holds).insert(name, hold) {
                    old.watcher.abort();
                }
            }
            Ok(None) => {
                fields.insert(1, ("ev", "not_acquired".into()));
                write_line(&fields);
            }
            Err((kind, message)) => {
                fields.insert(1, ("ev", "error".into()));
                fields.push(("kind", kind.into()));
                fields.push(("message", Json::String(message)));
                write_line(&fields);
            }
        }
    }

    /// The guard, or None when the lock is busy or the wait ran out.
    async fn try_acquire(
        &self,
        name: &str,
        command: &Json,
    ) -> Result<Option<Guard>, (&'static str, String)> {
        let locks = match command.str("mode").unwrap_or("session") {
            "session" => &self.session,
            "watchdog" => &self.watchdog,
            mode => return Err(("invalid", format!("unknown mode {mode:?}"))),
        };
        let keys: Vec<&str> = match command.get("keys") {
            Json::Array(keys) => keys.iter().filter_map(Json::as_str).collect(),
            _ => Vec::new(),
        };
        let Some(ttl_ms) = command.get("ttl_ms").as_u64() else {
            return Err(("invalid", "ttl_ms is a whole number".to_string()));
        };
        let mut request = if keys.len() == 1 {
            locks.lock(keys[0])
        } else {
            locks.lock_many(keys)
        };
        request = request.ttl(Duration::from_millis(ttl_ms));
        if let Some(wait_ms) = command.get("wait_ms").as_u64() {
            request = request.wait(Duration::from_millis(wait_ms));
        }
        if let Json::Array(sync) = command.get("sync") {
            let replicas = sync.first().and_then(Json::as_u64).unwrap_or(0);
            let timeout_ms = sync.get(1).and_then(Json::as_u64).unwrap_or(0);
            let replicas = u32::try_from(replicas).unwrap_or(u32::MAX);
            request = request.sync(replicas, Duration::from_millis(timeout_ms));
        }
        let outcome = request.acquire().await;
        lock(&self.waiting).remove(name);
        match outcome {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::NotAcquired | Error::TimedOut) => Ok(None),
            Err(e) => Err(error_kind(&e)),
        }
    }

    async fn release(&self, command: &Json) -> Answer {
        let name = command.get("name").clone();
        let (slot, watcher) =
            self.hold(command, |hold| (hold.guard.clone(), hold.watcher.clone()))?;
        let taken = slot.write().await.take();
        let Some(guard) = taken else {
            return Ok(vec![
                ("ev", "released".into()),
                ("name", name),
                ("result", Json::Bool(false)),
            ]);
        };
        let released = guard.release().await;
        // A released guard's signal never fires: its watcher is done.
        watcher.abort();
        let released = released.map_err(|e| error_kind(&e))?;
        Ok(vec![
            ("ev", "released".into()),
            ("name", name),
            ("result", Json::Bool(released)),
        ])
    }

    async fn guard(&self, command: &Json) -> Answer {
        let words: Vec<&str> = match command.get("command") {
            Json::Array(words) => words.iter().filter_map(Json::as_str).collect(),
            _ => Vec::new(),
        };
        let Some((first, rest)) = words.split_first() else {
            return Err(("server", "guard needs a command".to_string()));
        };
        let mut cmd = redis::cmd(first);
        for word in rest {
            cmd.arg(*word);
        }
        let slot = self.hold(command, |hold| hold.guard.clone())?;
        let guard = slot.read().await;
        let Some(guard) = guard.as_ref() else {
            return Err(("lost", "the lock was released".to_string()));
        };
        let reply: Value = guard.guarded(&cmd).await.map_err(|e| error_kind(&e))?;
        Ok(vec![
            ("ev", "guarded".into()),
            ("name", command.get("name").clone()),
            ("reply", value_json(reply)),
        ])
    }

    fn held(&self, command: &Json) -> Answer {
        let signal = self.hold(command, |hold| hold.signal.clone())?;
        let held = signal.held();
        let reason = signal.reason();
        Ok(vec![
            ("ev", "held".into()),
            ("name", command.get("name").clone()),
            ("held", Json::Bool(held)),
            (
                "reason",
                reason.map_or(Json::Null, |r| reason_name(&r).into()),
            ),
        ])
    }

    async fn cancel(&self, command: &Json) -> Answer {
        let name = command.str("name").unwrap_or("");
        let cancel = lock(&self.waiting).remove(name);
        if let Some(cancel) = cancel {
            let (answered, done) = oneshot::channel();
            // Err: the acquire answered before it saw the cancel.
            if cancel.send(answered).is_ok() {
                let _ = done.await;
            }
        }
        Ok(vec![
            ("ev", "cancelled".into()),
            ("name", command.get("name").clone()),
        ])
    }

    /// Something of the hold named by the command, or the error to answer.
    fn hold<T>(
        &self,
        command: &Json,
        part: impl FnOnce(&Hold) -> T,
    ) -> Result<T, (&'static str, String)> {
        let name = command.str("name").unwrap_or("");
        lock(&self.holds)
            .get(name)
            .map(part)
            .ok_or(("invalid", format!("no lock named {name:?} was acquired")))
    }
}

/// Prints `lost` when the crate signals the loss of the guard.
async fn watch(name: String, signal: LostSignal) {
    let reason = signal.wait().await;
    let revoked = match &reason {
        LostReason::Revoked(text) => Json::String(text.clone()),
        _ => Json::Null,
    };
    write_line(&[
        ("ev", "lost".into()),
        ("name", Json::String(name)),
        ("reason", reason_name(&reason).into()),
        ("revoked_reason", revoked),
    ]);
}

/// The protocol's reason. `NotHeld` (a guarded command answered `LOST`) is
/// the server saying the token no longer holds the lock, as `Refused` is;
/// `NotReplicated` is a deadline that came, as `Expired` is.
fn reason_name(reason: &LostReason) -> &'static str {
    match reason {
        LostReason::Revoked(_) => "revoked",
        LostReason::Expired | LostReason::NotReplicated => "expired",
        LostReason::Limit => "limit",
        _ => "refused",
    }
}

/// The protocol's error kind, and the message.
fn error_kind(e: &Error) -> (&'static str, String) {
    let kind = match e {
        Error::Lost(LostReason::Revoked(_)) => "revoked",
        Error::Lost(_) => "lost",
        Error::NotReplicated { .. } => "nosync",
        Error::TimedOut => "timeout",
        Error::InvalidArgument(_) => "not_supported",
        Error::Connection(e) if e.is_timeout() => "timeout",
        Error::Connection(_) | Error::NoQuorum { .. } => "connection",
        Error::Server(e) => match e.code() {
            Some("WRONGTYPE") => "wrongtype",
            Some("LIMIT") => "limit",
            Some("NOSYNC") => "nosync",
            _ => "server",
        },
        _ => "server",
    };
    (kind, e.to_string())
}

/// A guarded command's reply as JSON: text as strings, aggregates as lists
/// (a map flattened to key, value, …).
fn value_json(value: Value) -> Json {
    match value {
        Value::Nil => Json::Null,
        Value::Int(n) => Json::Number(n as f64),
        Value::BulkString(bytes) => Json::String(String::from_utf8_lossy(&bytes).into_owned()),
        Value::SimpleString(text) => Json::String(text),
        Value::Okay => "OK".into(),
        Value::Array(items) | Value::Set(items) => {
            Json::Array(items.into_iter().map(value_json).collect())
        }
        Value::Map(pairs) => Json::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [value_json(k), value_json(v)])
                .collect(),
        ),
        Value::Double(x) => Json::Number(x),
        Value::Boolean(b) => Json::Bool(b),
        Value::VerbatimString { text, .. } => Json::String(text),
        other => Json::String(format!("{other:?}")),
    }
}

/// A std mutex whose poisoning (a task that panicked) is not the
/// driver's concern: the map stays usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes one JSON object as a line on stdout, flushed, one line at a time.
fn write_line(fields: &[(&str, Json)]) {
    let mut line = String::from("{");
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        write_string(&mut line, key);
        line.push(':');
        value.write(&mut line);
    }
    line.push_str("}\n");
    let mut out = std::io::stdout().lock();
    if out
        .write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        // The harness is gone: nobody is left to answer.
        std::process::exit(1);
    }
}

/// The JSON the protocol needs: no more than that.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl From<&str> for Json {
    fn from(text: &str) -> Json {
        Json::String(text.to_string())
    }
}

static NULL: Json = Json::Null;

impl Json {
    fn parse(text: &str) -> Option<Json> {
        let mut reader = Reader {
            bytes: text.as_bytes(),
            at: 0,
        };
        let value = reader.value()?;
        reader.skip_space();
        (reader.at == reader.bytes.len()).then_some(value)
    }

    /// A field of an object; `null` when it has none.
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(fields) => fields
                .iter()
                .find(|(k, _)| k == key)
                .map_or(&NULL, |(_, v)| v),
            _ => &NULL,
        }
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.get(key).as_str()
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(text) => Some(text),
            _ => None,
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Number(n) if *n >= 0.0 && n.fract() == 0.0 && *n < 1.8e19 => Some(*n as u64),
            _ => None,
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            // Integers (fences, counters) without a fraction; others as
            // Rust prints them, which JSON reads.
            Json::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => {
                out.push_str(&format!("{}", *n as i64))
            }
            Json::Number(n) if n.is_finite() => out.push_str(&format!("{n}")),
            Json::Number(_) => out.push_str("null"),
            Json::String(text) => write_string(out, text),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, key);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A recursive-descent reader over one line; None on anything malformed.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn skip_space(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &str, value: Json) -> Option<Json> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word.as_bytes()).then(|| {
            self.at = end;
            value
        })
    }

    fn value(&mut self) -> Option<Json> {
        self.skip_space();
        match *self.bytes.get(self.at)? {
            b'n' => self.literal("null", Json::Null),
            b't' => self.literal("true", Json::Bool(true)),
            b'f' => self.literal("false", Json::Bool(false)),
            b'"' => self.string().map(Json::String),
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return Some(Json::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    if self.eat(b']') {
                        return Some(Json::Array(items));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'{' => {
                self.at += 1;
                let mut fields = Vec::new();
                if self.eat(b'}') {
                    return Some(Json::Object(fields));
                }
                loop {
                    self.skip_space();
                    let key = self.string()?;
                    if !self.eat(b':') {
                        return None;
                    }
                    fields.push((key, self.value()?));
                    if self.eat(b'}') {
                        return Some(Json::Object(fields));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            _ => self.number(),
        }
    }

    fn number(&mut self) -> Option<Json> {
        let start = self.at;
        while matches!(
            self.bytes.get(self.at),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).ok()?;
        text.parse().ok().map(Json::Number)
    }

    fn string(&mut self) -> Option<String> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let byte = *self.bytes.get(self.at)?;
            self.at += 1;
            match byte {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let escape = *self.bytes.get(self.at)?;
                    self.at += 1;
                    let c = match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode()?,
                        _ => return None,
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                byte => out.push(byte),
            }
        }
    }

    /// The character of a `\u` escape (after the `u`), a surrogate pair
    /// read as one; a lone surrogate as U+FFFD.
    fn unicode(&mut self) -> Option<char> {
        let high = self.hex4()?;
        if (0xD800..0xDC00).contains(&high) && self.bytes.get(self.at..self.at + 2) == Some(b"\\u")
        {
            self.at += 2;
            let low = self.hex4()?;
            if (0xDC00..0xE000).contains(&low) {
                let c = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                return char::from_u32(c);
            }
            return Some('\u{FFFD}');
        }
        Some(char::from_u32(high).unwrap_or('\u{FFFD}'))
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        self.at += 4;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    }
}
