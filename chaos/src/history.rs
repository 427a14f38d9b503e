//! The history of a run and the fenced resource that records it.
//!
//! Workers (separate processes, possibly in other network namespaces) talk to
//! the [`Recorder`] over a Unix socket, one JSON [`Event`] per line. A `Write`
//! is the fenced resource: it is accepted only if its fence is strictly above
//! the highest fence accepted so far for its lock key (each key protects a
//! resource of its own), and the recorder answers `OK` or `NO`.
//! (A leader's writes also pass with the fence of the last accepted one:
//! its term goes on.) Every other event is only recorded (the guarded list, the second
//! resource, lives in Redis: `guarded.rs`). All times are CLOCK_MONOTONIC
//! nanoseconds ([`mono_ns`]), the one clock every process on this host shares.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;

use serde::{Deserialize, Serialize};

/// CLOCK_MONOTONIC in nanoseconds: shared by every process on this host, in
/// every network namespace.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub const MS: u64 = 1_000_000;

/// What an ACQUIRE returned.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Granted (and, in `WAIT 1` mode, acknowledged by a replica).
    Granted,
    /// Granted by the server, but `WAIT 1` did not confirm it: the worker
    /// did not use it. Its fence still counts for uniqueness.
    Unconfirmed,
    /// Null: held by someone else, or the WAIT timed out.
    Refused,
    /// An error or a timeout: the grant may or may not have happened.
    Unknown,
    /// `NOSYNC`: the server granted it, its replicas did not hold it in
    /// time, and the server undid it before telling the worker: not held.
    Undone,
}

/// How a grant holds its key: the default, exclusive (`LOCK.ACQUIRE`), a
/// read lease (`LOCK.ACQUIRE … SHARED`), or `count` of a semaphore's
/// `limit` permits (`SEM.ACQUIRE`). Histories written before shared holders
/// existed have none, and read as exclusive.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Hold {
    #[default]
    Exclusive,
    Shared,
    Permits {
        count: u64,
        limit: u64,
    },
}

impl Hold {
    pub fn is_default(&self) -> bool {
        *self == Hold::Exclusive
    }

    /// The permits this holder takes (1 for the lock's two modes).
    pub fn permits(&self) -> u64 {
        match self {
            Hold::Permits { count, .. } => *count,
            _ => 1,
        }
    }

    pub fn label(&self) -> String {
        match self {
            Hold::Exclusive => "exclusive".into(),
            Hold::Shared => "shared".into(),
            Hold::Permits { count, limit } => format!("{count} of {limit} permits"),
        }
    }
}

/// The `LOCK.LEASE` subcommands a history records.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LeaseOp {
    Grant,
    Keepalive,
    Revoke,
}

/// What one `LOCK.GUARD … RPUSH` to the guarded list got.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum GuardResult {
    /// The command ran (and, in `WAIT` mode, a replica acknowledged it).
    Written,
    /// The command ran, but `WAIT` did not confirm it.
    Unconfirmed,
    /// `LOST …`: the token did not hold the lock, nothing ran.
    Lost,
    /// `REVOKED <reason>`: the token's hold was taken away (`LOCK.REVOKE`,
    /// `LOCK.LEASE REVOKE`), nothing ran.
    Revoked,
    /// Another error or a timeout: it may or may not have run.
    Unknown,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    Acquire {
        worker: u32,
        key: String,
        token: String,
        ttl_ms: u64,
        t_inv: u64,
        t_comp: u64,
        outcome: Outcome,
        fence: Option<u64>,
        /// host:port the worker sent it to.
        server: String,
        #[serde(default, skip_serializing_if = "Hold::is_default")]
        hold: Hold,
        /// The lease group the hold is attached to (`LEASE id`), by the
        /// worker's label for it (scenario 14): such a hold lives exactly as
        /// long as its lease, whatever `ttl_ms` says (see [`Event::Lease`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease: Option<String>,
    },
    /// A write to the fenced resource over the critical section
    /// [t_start, t_end]; `accepted` and `t_recv` are set by the resource.
    Write {
        worker: u32,
        key: String,
        fence: u64,
        t_start: u64,
        t_end: u64,
        #[serde(default)]
        t_recv: u64,
        #[serde(default)]
        accepted: bool,
        /// A leader's work (scenario 8), or a lease worker's (scenario 14):
        /// a fence equal to the highest accepted also passes, since one term
        /// (one hold) writes many times.
        #[serde(default)]
        term: bool,
        /// The mode of the grant whose section this is: a shared holder's
        /// section is a read, a semaphore holder's uses `count` permits.
        #[serde(default, skip_serializing_if = "Hold::is_default")]
        hold: Hold,
    },
    /// EXTEND or RELEASE: `result` is the integer reply, None on an error.
    Extend {
        worker: u32,
        key: String,
        token: String,
        ttl_ms: u64,
        t_inv: u64,
        t_comp: u64,
        result: Option<i64>,
    },
    Release {
        worker: u32,
        key: String,
        token: String,
        t_inv: u64,
        t_comp: u64,
        result: Option<i64>,
    },
    /// A `LOCK.GUARD key token RPUSH <key>:log record` by a worker in the
    /// critical section of the grant with `fence` (see `guarded.rs`).
    Guarded {
        worker: u32,
        key: String,
        token: String,
        fence: u64,
        record: String,
        t_inv: u64,
        t_comp: u64,
        result: GuardResult,
        /// The reason of a `REVOKED <reason>` reply.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The guarded list of `key` as the harness read it after the run from
    /// `server`, the one that survived the faults.
    Survived {
        key: String,
        server: String,
        t: u64,
        records: Vec<String>,
    },
    /// What a `LOCK.OBSERVE` by an observer (scenario 8) replied: the
    /// holder's fence and owner label, fence 0 when the key was free.
    Observed {
        worker: u32,
        key: String,
        fence: u64,
        owner: String,
        t_inv: u64,
        t_comp: u64,
        server: String,
    },
    /// A candidate's term as leader (scenario 8), as it marks it when it
    /// stops acting as leader: from the grant's reply to the end of its last
    /// accepted write (the grant's reply if none), and why it stopped.
    Leader {
        worker: u32,
        key: String,
        fence: u64,
        t_start: u64,
        t_end: u64,
        reason: String,
    },
    /// A `LOCK.LEASE` call on lease `lease` (the worker's label for it, not
    /// its id): `GRANT` and `KEEPALIVE` by the worker that holds it
    /// (`result` 1: granted or renewed, 0: gone), `REVOKE` by the harness as
    /// an operator (`result`: the holds it ended). None on an error.
    Lease {
        worker: u32,
        lease: String,
        op: LeaseOp,
        ttl_ms: u64,
        t_inv: u64,
        t_comp: u64,
        result: Option<i64>,
    },
    /// `LOCK.REVOKE key REASON reason` by the harness as an operator, in one
    /// `MULTI` with the `LOCK.INFO` that named the holds it ended (`fences`);
    /// `result`: the number it ended, None on an error.
    Revoke {
        key: String,
        reason: String,
        fences: Vec<u64>,
        t_inv: u64,
        t_comp: u64,
        result: Option<i64>,
    },
    /// A fault the harness injected, from `t_start` to `t_heal`. C5 measures
    /// from `t_ref` (the heal, or the start of a holder's pause).
    Fault {
        kind: String,
        detail: String,
        t_start: u64,
        t_heal: u64,
        t_ref: u64,
    },
}

#[derive(Default)]
struct State {
    events: Vec<Event>,
    /// The fenced resource of each lock key: fences are compared per key.
    resources: HashMap<String, Resource>,
    /// worker -> the keys it holds according to its own reports.
    holders: HashMap<u32, HashSet<String>>,
}

/// The fenced resource's memory, and its rule for each kind of holder.
///
/// - An exclusive holder's write needs a fence above every fence accepted
///   so far, reads and permit holders' writes included: any grant after it
///   has a larger fence, so one that has already acted proves its lease over.
/// - A shared holder's section is a read: it needs a fence above the last
///   accepted exclusive write's, and raises only the floor for writers, so
///   readers granted together pass in any order, and a reader paused past
///   its lease is refused once a writer has written.
/// - A semaphore holder's write (`count` of `limit` permits) is refused when
///   the permits of later grants (larger fences) that have written and not yet
///   been released, plus its own, exceed `limit`: those holders were granted
///   after it, so they could not all have been granted while it still held.
///   The resource knows fences, not leases: a live holder outnumbered by
///   later holders that expired unreleased is refused too (safe, counted
///   among the rejected writes).
#[derive(Default)]
pub struct Resource {
    highest_accepted: u64,
    /// The floor for readers: the fence of the last accepted exclusive write.
    last_write: u64,
    /// Semaphore holders that have written and not yet reported a release:
    /// worker -> (fence, permits).
    unreleased: HashMap<u32, (u64, u64)>,
}

impl Resource {
    /// Decide on a section reported by `worker` with `fence`, and remember it
    /// if accepted.
    pub fn admits(&mut self, worker: u32, fence: u64, hold: Hold, term: bool) -> bool {
        let accepted = match hold {
            Hold::Exclusive => {
                fence > self.highest_accepted || (term && fence == self.highest_accepted)
            }
            Hold::Shared => fence > self.last_write,
            Hold::Permits { count, limit } => {
                let later: u64 = self
                    .unreleased
                    .iter()
                    .filter(|(w, (f, _))| **w != worker && *f > fence)
                    .map(|(_, (_, n))| n)
                    .sum();
                later + count <= limit
            }
        };
        if accepted {
            self.highest_accepted = self.highest_accepted.max(fence);
            match hold {
                Hold::Exclusive => self.last_write = fence,
                Hold::Shared => {}
                Hold::Permits { count, .. } => {
                    self.unreleased.insert(worker, (fence, count));
                }
            }
        }
        accepted
    }

    /// The worker gave its grant back (whatever the reply): it acts no more.
    pub fn released(&mut self, worker: u32) {
        self.unreleased.remove(&worker);
    }
}

/// The fenced resource and history recorder, serving a Unix socket.
#[derive(Clone)]
pub struct Recorder {
    state: Arc<Mutex<State>>,
    pub socket: PathBuf,
}

impl Recorder {
    pub fn start(socket: &Path) -> Result<Recorder, String> {
        let _ = std::fs::remove_file(socket);
        let listener =
            UnixListener::bind(socket).map_err(|e| format!("bind {}: {e}", socket.display()))?;
        let recorder = Recorder {
            state: Arc::new(Mutex::new(State::default())),
            socket: socket.to_path_buf(),
        };
        let served = recorder.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let conn = served.clone();
                thread::spawn(move || conn.serve(stream));
            }
        });
        Ok(recorder)
    }

    fn serve(&self, stream: UnixStream) {
        let Ok(mut out) = stream.try_clone() else {
            return;
        };
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            let Ok(event) = serde_json::from_str::<Event>(&line) else {
                eprintln!("recorder: bad line {line:?}");
                continue;
            };
            if let Some(reply) = self.record(event) {
                if out.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
        }
    }

    /// Record an event; a write gets the resource's answer.
    pub fn record(&self, mut event: Event) -> Option<&'static str> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut reply = None;
        match &mut event {
            Event::Write {
                worker,
                key,
                fence,
                t_recv,
                accepted,
                term,
                hold,
                ..
            } => {
                *t_recv = mono_ns();
                let resource = state.resources.entry(key.clone()).or_default();
                *accepted = resource.admits(*worker, *fence, *hold, *term);
                reply = Some(if *accepted { "OK\n" } else { "NO\n" });
            }
            Event::Acquire {
                worker,
                outcome,
                key,
                ..
            } => {
                // A worker asking again has stopped acting on its last grant
                // (its release may not have reached the server).
                for resource in state.resources.values_mut() {
                    resource.released(*worker);
                }
                if *outcome == Outcome::Granted {
                    state
                        .holders
                        .entry(*worker)
                        .or_default()
                        .insert(key.clone());
                }
            }
            Event::Release { worker, key, .. } => {
                if let Some(keys) = state.holders.get_mut(worker) {
                    keys.remove(key);
                }
                if let Some(resource) = state.resources.get_mut(key) {
                    resource.released(*worker);
                }
            }
            _ => {}
        }
        state.events.push(event);
        reply
    }

    pub fn fault(&self, kind: &str, detail: String, t_start: u64, t_heal: u64, t_ref: u64) {
        self.record(Event::Fault {
            kind: kind.to_string(),
            detail,
            t_start,
            t_heal,
            t_ref,
        });
    }

    /// Workers that hold a lock by their own last report.
    pub fn holders(&self) -> Vec<u32> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut workers: Vec<u32> = state
            .holders
            .iter()
            .filter(|(_, keys)| !keys.is_empty())
            .map(|(w, _)| *w)
            .collect();
        workers.sort_unstable();
        workers
    }

    /// The keys `worker` holds by its own reports, sorted.
    pub fn held_keys(&self, worker: u32) -> Vec<String> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<String> = state
            .holders
            .get(&worker)
            .map(|k| k.iter().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }

    /// A copy of the history recorded so far.
    pub fn snapshot(&self) -> Vec<Event> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.events.clone()
    }

    /// Take the history recorded so far, leaving the recorder empty.
    pub fn take(&self) -> Vec<Event> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.holders.clear();
        state.resources.clear();
        std::mem::take(&mut state.events)
    }
}

/// Write a history as JSON lines.
pub fn save(path: &Path, events: &[Event]) -> Result<(), String> {
    let mut text = String::new();
    for event in events {
        text.push_str(&serde_json::to_string(event).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

pub fn load(path: &Path) -> Result<Vec<Event>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{}: {e}", path.display())))
        .collect()
}

/// A worker's connection to the recorder.
pub struct RecorderClient {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

impl RecorderClient {
    pub fn connect(socket: &Path) -> Result<RecorderClient, String> {
        let writer = UnixStream::connect(socket)
            .map_err(|e| format!("connect {}: {e}", socket.display()))?;
        let reader = BufReader::new(writer.try_clone().map_err(|e| e.to_string())?);
        Ok(RecorderClient { writer, reader })
    }

    fn send(&mut self, event: &Event) -> Result<(), String> {
        let mut line = serde_json::to_string(event).map_err(|e| e.to_string())?;
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| format!("recorder: {e}"))
    }

    pub fn record(&mut self, event: &Event) -> Result<(), String> {
        self.send(event)
    }

    /// Send a write to the fenced resource: true if it was accepted.
    pub fn write(&mut self, event: &Event) -> Result<bool, String> {
        self.send(event)?;
        let mut reply = String::new();
        self.reader
            .read_line(&mut reply)
            .map_err(|e| format!("recorder: {e}"))?;
        Ok(reply.trim() == "OK")
    }
}
