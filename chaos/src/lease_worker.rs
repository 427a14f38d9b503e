//! A worker that holds many locks through one lease group (scenario 14,
//! issue 27): `lock-chaos worker --lease-keys=n --lease-ttl-ms=t …`.
//!
//! It grants a lease (`LOCK.LEASE GRANT t OWNER w<id>`), takes the keys
//! `<key>:0` … `<key>:<n-1>` under it (`LOCK.ACQUIRE k t TOKEN … LEASE id
//! WAIT …`), and keeps all of them alive with one `LOCK.LEASE KEEPALIVE`
//! every third of `t`, from a thread of its own. While it holds them it
//! works on each key in turn: a section that appends `begin-<n>` to the
//! key's guarded list through `LOCK.GUARD`, writes to the key's fenced
//! resource (which, as for a leader, also takes the fence it accepted last:
//! one hold writes many times), and appends `end-<n>`. After 1.5-2.5 s it releases them all, lets the other
//! workers have them for a moment, and takes them again, under the same
//! lease while it lives.
//!
//! Like a careful client, it writes to the fenced resource only while its
//! lease is certainly live by its own clock: before the request time of its
//! last successful `GRANT` or `KEEPALIVE` plus `t`, minus a margin. (Asked
//! by the harness through `stop_file`, it stops itself right after that
//! check, the moment a fence exists for.) Its guarded `end` goes out
//! whatever that check said: `LOCK.GUARD` checks on the server.
//!
//! What tells it that it lost its holds: a `KEEPALIVE` answered 0, a
//! `NOLEASE`, a `LOST`, or `REVOKED lease revoked` mean the lease is gone,
//! and every hold with it; `REVOKED <another reason>` (`LOCK.REVOKE key`)
//! ends the hold of that key only. Once it knows its lease is gone it sends
//! one more guarded append (`stale`) to each key it held, as the worst
//! client would with work queued before it knew (each must be refused),
//! releases them (each must answer 0), and grants a new lease.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

use crate::guarded;
use crate::history::{mono_ns, Event, GuardResult, Hold, LeaseOp, Outcome, RecorderClient, MS};
use crate::worker::{int_reply, open, reconnect, release_by, WorkerArgs};

/// How long before the earliest end of its lease the worker stops writing.
const LEASE_MARGIN_NS: u64 = 5 * MS;

/// The reason `LOCK.LEASE REVOKE` gives the holds it ends.
const LEASE_REVOKED: &str = "lease revoked";

/// The lease as both threads see it.
#[derive(Default)]
struct LeaseState {
    /// (id, label) of the lease in use; None between leases.
    current: Option<(String, String)>,
    /// The earliest the lease can end, by this worker's clock.
    certain_end: u64,
    /// The lease is gone: a KEEPALIVE answered 0, or a reply said so.
    gone: bool,
}

type Shared = Arc<Mutex<LeaseState>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, LeaseState> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// One key held under the lease.
struct Held {
    key: String,
    token: String,
    fence: u64,
}

pub fn run(a: WorkerArgs) -> Result<(), String> {
    let mut rec = RecorderClient::connect(&a.socket)?;
    let mut rng = StdRng::seed_from_u64(a.seed);
    let shared: Shared = Arc::new(Mutex::new(LeaseState::default()));
    {
        let (a, shared) = (a.clone(), shared.clone());
        std::thread::spawn(move || keepalive_loop(&a, &shared));
    }
    let keys: Vec<String> = (0..a.lease_keys)
        .map(|i| format!("{}:{i}", a.key))
        .collect();
    let ttl = a.lease_ttl_ms;
    let deadline = mono_ns() + a.duration_ms * MS;
    let mut con: Option<(Connection, String)> = None;
    let mut leases = 0u64;
    let mut seq = 0u64;
    let mut sections = 0u64;
    while mono_ns() < deadline {
        if con.is_none() {
            con = reconnect(&a);
            if con.is_none() {
                sleep(Duration::from_millis(50));
                continue;
            }
        }
        // The lease it has, or a new one.
        let current = lock(&shared).current.clone();
        let lease = match current {
            Some(lease) => lease,
            None => {
                let Some((c, _)) = con.as_mut() else { continue };
                leases += 1;
                let label = format!("w{}-L{leases}", a.id);
                let t_inv = mono_ns();
                let reply: redis::RedisResult<String> = redis::cmd("LOCK.LEASE")
                    .arg("GRANT")
                    .arg(ttl)
                    .arg("OWNER")
                    .arg(format!("w{}", a.id))
                    .query(c);
                let t_comp = mono_ns();
                rec.record(&Event::Lease {
                    worker: a.id,
                    lease: label.clone(),
                    op: LeaseOp::Grant,
                    ttl_ms: ttl,
                    t_inv,
                    t_comp,
                    result: reply.is_ok().then_some(1),
                })?;
                let Ok(id) = reply else {
                    con = None;
                    continue;
                };
                *lock(&shared) = LeaseState {
                    current: Some((id.clone(), label.clone())),
                    certain_end: t_inv + ttl * MS,
                    gone: false,
                };
                publish(&a.lease_file, &label, &id);
                (id, label)
            }
        };
        let (id, label) = lease;

        // Take every key under it.
        let mut held: Vec<Held> = Vec::new();
        for key in &keys {
            if lock(&shared).gone {
                break;
            }
            let Some((c, server)) = con.as_mut() else {
                break;
            };
            let server = server.clone();
            seq += 1;
            let token = format!("w{}-{seq}", a.id);
            let t_inv = mono_ns();
            let reply: redis::RedisResult<Value> = redis::cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(ttl)
                .arg("TOKEN")
                .arg(&token)
                .arg("LEASE")
                .arg(&id)
                .arg("WAIT")
                .arg(a.wait_ms)
                .query(c);
            let t_comp = mono_ns();
            let (outcome, fence) = match &reply {
                Ok(Value::Array(items)) if items.len() == 2 => match items[1] {
                    Value::Int(f) if f > 0 => (Outcome::Granted, Some(f as u64)),
                    _ => (Outcome::Unknown, None),
                },
                Ok(Value::Nil) => (Outcome::Refused, None),
                // Nothing granted, nothing queued: the lease is gone.
                Err(e) if e.code() == Some("NOLEASE") => {
                    lock(&shared).gone = true;
                    (Outcome::Refused, None)
                }
                _ => (Outcome::Unknown, None),
            };
            rec.record(&Event::Acquire {
                worker: a.id,
                key: key.clone(),
                token: token.clone(),
                ttl_ms: ttl,
                t_inv,
                t_comp,
                outcome: outcome.clone(),
                fence,
                server,
                hold: Hold::Exclusive,
                lease: Some(label.clone()),
            })?;
            if reply.is_err() && outcome == Outcome::Unknown {
                con = None;
                break;
            }
            if let (Outcome::Granted, Some(fence)) = (outcome, fence) {
                held.push(Held {
                    key: key.clone(),
                    token,
                    fence,
                });
            }
        }

        // Work on them in turn until it is time to give them back, or they
        // are gone.
        let hold_until = mono_ns() + rng.gen_range(1500..=2500) * MS;
        let mut next = 0;
        while mono_ns() < hold_until && !held.is_empty() && !lock(&shared).gone {
            next %= held.len();
            let h = &held[next];
            sections += 1;
            let (ended, revoked) = section(&a, &mut con, &mut rec, &mut rng, &shared, h, sections)?;
            if ended {
                // Taken away alone: give it up, keep the others.
                let h = held.remove(next);
                let verb = "LOCK.RELEASE";
                release_by(&mut con, &mut rec, a.id, &h.key, &h.token, verb)?;
            } else {
                next += 1;
            }
            if revoked {
                lock(&shared).gone = true;
            }
        }

        // A reply cut by a stop (Linux fails a socket read with a timeout
        // with EINTR once the process is continued) left no connection:
        // the releases below must reach the server, and the recorder.
        if con.is_none() {
            con = reconnect(&a);
        }
        let gone = lock(&shared).gone;
        if gone {
            // The worst client's last try: work queued before it knew.
            for h in &held {
                guarded_append(&a, &mut con, &mut rec, h, "stale")?;
            }
        }
        for h in &held {
            release_by(&mut con, &mut rec, a.id, &h.key, &h.token, "LOCK.RELEASE")?;
        }
        if gone {
            let mut state = lock(&shared);
            if state.current.as_ref().is_some_and(|(i, _)| *i == id) {
                *state = LeaseState::default();
            }
        }
        // The others' turn.
        sleep(Duration::from_millis(300));
    }
    Ok(())
}

/// Section `n` on `h`: guarded `begin-<n>`, work, the fenced write if the
/// lease is certainly live, guarded `end-<n>` (a hold has many sections,
/// and each record must be unique for C6 to tie it to its reply). Returns
/// (this hold ended alone, the lease is gone) from what the guarded appends
/// were told.
fn section(
    a: &WorkerArgs,
    con: &mut Option<(Connection, String)>,
    rec: &mut RecorderClient,
    rng: &mut StdRng,
    shared: &Shared,
    h: &Held,
    n: u64,
) -> Result<(bool, bool), String> {
    let live = |now: u64| {
        let state = lock(shared);
        !state.gone && now + LEASE_MARGIN_NS < state.certain_end
    };
    if !live(mono_ns()) {
        // Not certainly live: wait for the keepalive's answer.
        sleep(Duration::from_millis(5));
        return Ok((false, false));
    }
    let t_start = mono_ns();
    let begin = guarded_append(a, con, rec, h, &format!("begin-{n}"))?;
    if begin != Told::Holds {
        return Ok(begin.ends());
    }
    let work = rng.gen_range(a.hold_ms.0..=a.hold_ms.1.max(a.hold_ms.0));
    sleep(Duration::from_millis(work));
    let t_end = mono_ns();
    if live(t_end) {
        if !a.stop_file.is_empty() && std::fs::remove_file(&a.stop_file).is_ok() {
            // SAFETY: stops this process until the harness continues it.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        rec.write(&Event::Write {
            worker: a.id,
            key: h.key.clone(),
            fence: h.fence,
            t_start,
            t_end,
            t_recv: 0,
            accepted: false,
            // One hold writes many times, as a leader's term does.
            term: true,
            hold: Hold::Exclusive,
        })?;
    }
    Ok(guarded_append(a, con, rec, h, &format!("end-{n}"))?.ends())
}

/// What a guarded append told the worker about its hold.
#[derive(PartialEq)]
enum Told {
    Holds,
    /// `REVOKED <reason>` from `LOCK.REVOKE key`: this hold only.
    KeyRevoked,
    /// `LOST`, or `REVOKED lease revoked`: the lease and every hold.
    LeaseGone,
    /// No answer: the connection broke.
    Unknown,
}

impl Told {
    /// (this hold ended alone, the lease is gone)
    fn ends(self) -> (bool, bool) {
        match self {
            Told::KeyRevoked => (true, false),
            Told::LeaseGone => (false, true),
            Told::Holds | Told::Unknown => (false, false),
        }
    }
}

/// `LOCK.GUARD key token RPUSH <key>:log <worker>:<fence>:<token>:<phase>`,
/// reported.
fn guarded_append(
    a: &WorkerArgs,
    con: &mut Option<(Connection, String)>,
    rec: &mut RecorderClient,
    h: &Held,
    phase: &str,
) -> Result<Told, String> {
    if con.is_none() {
        *con = reconnect(a);
    }
    let Some((c, _)) = con.as_mut() else {
        return Ok(Told::Unknown);
    };
    let record = guarded::record(a.id, h.fence, &h.token, phase);
    let confirm = guarded::Confirm {
        replicas: 0,
        sync: 0,
        wait_ms: 0,
    };
    let t_inv = mono_ns();
    let (result, reason) = guarded::append(c, &h.key, &confirm, &h.token, &record);
    let t_comp = mono_ns();
    let told = match (result, reason.as_deref()) {
        (GuardResult::Written | GuardResult::Unconfirmed, _) => Told::Holds,
        (GuardResult::Revoked, Some(r)) if r != LEASE_REVOKED => Told::KeyRevoked,
        (GuardResult::Lost | GuardResult::Revoked, _) => Told::LeaseGone,
        (GuardResult::Unknown, _) => {
            *con = None;
            Told::Unknown
        }
    };
    rec.record(&Event::Guarded {
        worker: a.id,
        key: h.key.clone(),
        token: h.token.clone(),
        fence: h.fence,
        record,
        t_inv,
        t_comp,
        result,
        reason,
    })?;
    Ok(told)
}

/// The keepalive thread: one `LOCK.LEASE KEEPALIVE` every third of the
/// lease's ttl, on a connection of its own, for every hold at once.
fn keepalive_loop(a: &WorkerArgs, shared: &Shared) {
    let mut rec = match RecorderClient::connect(&a.socket) {
        Ok(rec) => rec,
        Err(e) => {
            eprintln!("lock-chaos: lease worker {}: no keepalives: {e}", a.id);
            return;
        }
    };
    let ttl = a.lease_ttl_ms;
    let period = (ttl / 3).max(1);
    let mut con: Option<Connection> = None;
    loop {
        sleep(Duration::from_millis(period));
        let (id, label) = {
            let state = lock(shared);
            match &state.current {
                Some(lease) if !state.gone => lease.clone(),
                _ => continue,
            }
        };
        if con.is_none() {
            con = open(&a.addr, 300, period);
        }
        let Some(c) = con.as_mut() else { continue };
        let t_inv = mono_ns();
        let reply: redis::RedisResult<Value> =
            redis::cmd("LOCK.LEASE").arg("KEEPALIVE").arg(&id).query(c);
        let t_comp = mono_ns();
        let result = int_reply(&reply);
        {
            let mut state = lock(shared);
            if state.current.as_ref().is_some_and(|(i, _)| *i == id) {
                match result {
                    Some(1) => state.certain_end = state.certain_end.max(t_inv + ttl * MS),
                    Some(0) => state.gone = true,
                    _ => {}
                }
            }
        }
        if reply.is_err() {
            con = None;
        }
        let event = Event::Lease {
            worker: a.id,
            lease: label,
            op: LeaseOp::Keepalive,
            ttl_ms: ttl,
            t_inv,
            t_comp,
            result,
        };
        if let Err(e) = rec.record(&event) {
            eprintln!("lock-chaos: lease worker {}: keepalives stop: {e}", a.id);
            return;
        }
    }
}

/// Keep the lease's label and id where the harness reads them (written
/// whole, then renamed into place).
fn publish(path: &str, label: &str, id: &str) {
    if path.is_empty() {
        return;
    }
    let tmp = format!("{path}.tmp");
    if std::fs::write(&tmp, format!("{label} {id}")).is_ok() {
        let _ = std::fs::rename(&tmp, Path::new(path));
    }
}
