//! The processes of the leader-election scenario (8), run as `lock-chaos
//! candidate …` and `lock-chaos observer …` so that the harness can SIGSTOP
//! or kill -9 one, or run one in another network namespace.
//!
//! A candidate campaigns with `LOCK.ACQUIRE key ttl TOKEN t OWNER cand-<id>
//! WAIT 0` (queued until granted; with `--replicas`, a grant counts once
//! `WAIT` confirms it) and keeps the lease with `LOCK.EXTEND` every third of
//! the TTL, and at once after a grant that came later than that. It acts as leader only while its own monotonic deadline minus a
//! margin has not passed: the deadline moves only with a confirmed EXTEND,
//! and an EXTEND that returns 0 ends the term at once. While leader it does
//! units of leader work, each a write carrying its fence to the fenced
//! resource; a write the resource refuses also ends the term. After a term
//! of the given length it resigns (RELEASE hands the lease to the next
//! candidate), unless the quiet file exists. It marks each term in the
//! history when it ends ([`Event::Leader`]).
//!
//! An observer loops on `LOCK.OBSERVE key <last fence> <timeout>` and records
//! every reply ([`Event::Observed`]).

use std::path::PathBuf;
use std::thread::sleep;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

use crate::history::{mono_ns, Event, Hold, Outcome, RecorderClient, MS};
use crate::scenarios::{map_pairs, text};
use crate::worker::{confirmed, grant_outcome, int_reply, open_master, release, Flags};

#[derive(Clone, Debug)]
pub struct ElectArgs {
    pub id: u32,
    pub socket: PathBuf,
    /// The master, when no Sentinel answers.
    pub addr: String,
    pub sentinels: Vec<String>,
    pub key: String,
    pub ttl_ms: u64,
    /// A leader stops acting this long before its deadline.
    pub margin_ms: u64,
    /// One unit of leader work, then its write.
    pub work_ms: (u64, u64),
    /// Resign after a term of this length.
    pub term_ms: (u64, u64),
    /// A blocked ACQUIRE (WAIT 0) or OBSERVE gives up after this long
    /// without a reply, and the process reconnects (by the Sentinels): a
    /// failed-over master does not answer.
    pub read_ms: u64,
    /// The OBSERVE timeout.
    pub observe_ms: u64,
    pub duration_ms: u64,
    pub seed: u64,
    /// `WAIT n` after a grant and after each EXTEND; what n replicas did not
    /// acknowledge does not count.
    pub replicas: u64,
    pub op_timeout_ms: u64,
    /// When this file exists and the candidate manages to remove it, it
    /// SIGSTOPs itself between its lease check and its next write (the
    /// harness sends SIGCONT).
    pub stop_file: PathBuf,
    /// While this file exists, leaders do not resign.
    pub quiet_file: PathBuf,
}

impl ElectArgs {
    pub fn to_args(&self, role: &str) -> Vec<String> {
        vec![
            role.into(),
            format!("--id={}", self.id),
            format!("--socket={}", self.socket.display()),
            format!("--addr={}", self.addr),
            format!("--sentinels={}", self.sentinels.join(",")),
            format!("--key={}", self.key),
            format!("--ttl-ms={}", self.ttl_ms),
            format!("--margin-ms={}", self.margin_ms),
            format!("--work-ms={}-{}", self.work_ms.0, self.work_ms.1),
            format!("--term-ms={}-{}", self.term_ms.0, self.term_ms.1),
            format!("--read-ms={}", self.read_ms),
            format!("--observe-ms={}", self.observe_ms),
            format!("--duration-ms={}", self.duration_ms),
            format!("--seed={}", self.seed),
            format!("--replicas={}", self.replicas),
            format!("--op-timeout-ms={}", self.op_timeout_ms),
            format!("--stop-file={}", self.stop_file.display()),
            format!("--quiet-file={}", self.quiet_file.display()),
        ]
    }

    pub fn parse(args: &[String]) -> Result<ElectArgs, String> {
        let f = Flags::parse(args)?;
        Ok(ElectArgs {
            id: f.num("id")? as u32,
            socket: PathBuf::from(f.get("socket")?),
            addr: f.get("addr")?,
            sentinels: f.list("sentinels")?,
            key: f.get("key")?,
            ttl_ms: f.num("ttl-ms")?,
            margin_ms: f.num("margin-ms")?,
            work_ms: f.range("work-ms")?,
            term_ms: f.range("term-ms")?,
            read_ms: f.num("read-ms")?,
            observe_ms: f.num("observe-ms")?,
            duration_ms: f.num("duration-ms")?,
            seed: f.num("seed")?,
            replicas: f.num("replicas")?,
            op_timeout_ms: f.num("op-timeout-ms")?,
            stop_file: PathBuf::from(f.get("stop-file")?),
            quiet_file: PathBuf::from(f.get("quiet-file")?),
        })
    }

    fn op_timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(self.op_timeout_ms))
    }
}

/// The owner label of candidate `id`: public, shown by LOCK.INFO and OBSERVE.
pub fn owner_label(id: u32) -> String {
    format!("cand-{id}")
}

/// The candidate an owner label names.
pub fn candidate_of(owner: &str) -> Option<u32> {
    owner.strip_prefix("cand-")?.parse().ok()
}

type Link = Option<(Connection, String)>;

/// The connection to the master, opened (by the Sentinels) if needed, and
/// the master's address; None after a short pause if there is none.
fn connect<'a>(link: &'a mut Link, a: &ElectArgs) -> Option<(&'a mut Connection, String)> {
    if link.is_none() {
        *link = open_master(&a.sentinels, &a.addr, a.op_timeout_ms);
        if link.is_none() {
            sleep(Duration::from_millis(50));
        }
    }
    link.as_mut().map(|(c, server)| (c, server.clone()))
}

pub fn run_candidate(a: ElectArgs) -> Result<(), String> {
    let mut rec = RecorderClient::connect(&a.socket)?;
    let mut rng = StdRng::seed_from_u64(a.seed);
    let deadline = mono_ns() + a.duration_ms * MS;
    let pid = std::process::id();
    let mut link: Link = None;
    let mut seq = 0u64;
    while mono_ns() < deadline {
        let Some((c, server)) = connect(&mut link, &a) else {
            continue;
        };
        seq += 1;
        // The pid keeps the tokens of a restarted candidate apart.
        let token = format!("c{}-{pid}-{seq}", a.id);
        let _ = c.set_read_timeout(Some(Duration::from_millis(a.read_ms)));
        let t_inv = mono_ns();
        let reply: redis::RedisResult<Value> = redis::cmd("LOCK.ACQUIRE")
            .arg(&a.key)
            .arg(a.ttl_ms)
            .arg("TOKEN")
            .arg(&token)
            .arg("OWNER")
            .arg(owner_label(a.id))
            .arg("WAIT")
            .arg(0)
            .query(c);
        // The lease is held from the reply on, confirmed or not: the
        // history keeps the reply's time (scenario 8's convergence times
        // are measured from it, not from the end of the WAIT).
        let t_comp = mono_ns();
        let _ = c.set_read_timeout(a.op_timeout());
        let (outcome, fence, broken) = grant_outcome(c, &reply, a.replicas, a.op_timeout_ms / 2);
        rec.record(&Event::Acquire {
            worker: a.id,
            key: a.key.clone(),
            token: token.clone(),
            ttl_ms: a.ttl_ms,
            t_inv,
            t_comp,
            outcome: outcome.clone(),
            fence,
            server,
            hold: Hold::Exclusive,
            lease: None,
        })?;
        match (outcome, fence) {
            (Outcome::Granted, Some(fence)) => {
                let term = Term {
                    token,
                    fence,
                    t_inv,
                    t_comp,
                };
                lead(&mut link, &mut rec, &a, &mut rng, &term)?;
            }
            (Outcome::Unconfirmed, _) => {
                // Not acknowledged by a replica: most likely a master cut
                // off from the others. Give it back, and ask the Sentinels.
                release(&mut link, &mut rec, a.id, &a.key, &token)?;
                link = None;
            }
            // An error (say NOREPLICAS from a master just promoted) or a
            // timeout: a short pause, then the Sentinels again.
            _ if broken => {
                link = None;
                sleep(Duration::from_millis(20));
            }
            _ => sleep(Duration::from_millis(10)),
        }
    }
    Ok(())
}

struct Term {
    token: String,
    fence: u64,
    t_inv: u64,
    t_comp: u64,
}

/// One term as leader, until it resigns, loses the lease or is fenced off.
fn lead(
    link: &mut Link,
    rec: &mut RecorderClient,
    a: &ElectArgs,
    rng: &mut StdRng,
    term: &Term,
) -> Result<(), String> {
    let ttl = a.ttl_ms * MS;
    let margin = a.margin_ms * MS;
    // The earliest the lease can end: the server set its deadline after the
    // request left.
    let mut lease_end = term.t_inv + ttl;
    let mut next_extend = term.t_inv + ttl / 3;
    let resign_at = term.t_comp + rng.gen_range(a.term_ms.0..=a.term_ms.1) * MS;
    let mut last_accepted = term.t_comp;
    let reason = loop {
        let now = mono_ns();
        // First, so that a candidate granted after a long wait in the
        // queue (the server counts the TTL from the grant, which the
        // client cannot see) learns its deadline at once, and a leader
        // resumed after a pause learns that it lost the lease.
        if now >= next_extend {
            match extend(link, rec, a, &term.token)? {
                Some(true) => {
                    lease_end = lease_end.max(now + ttl);
                    next_extend = now + ttl / 3;
                }
                Some(false) => break "extend-0",
                // Unknown or unconfirmed: the deadline stays; try again soon.
                None => next_extend = now + 50 * MS,
            }
            continue;
        }
        if now + margin >= lease_end {
            break "deadline";
        }
        if now >= resign_at && !a.quiet_file.exists() {
            break "resigned";
        }
        let t_start = mono_ns();
        sleep(Duration::from_millis(
            rng.gen_range(a.work_ms.0..=a.work_ms.1),
        ));
        let t_end = mono_ns();
        if t_end + margin >= lease_end {
            continue;
        }
        // Only the one that removes the file stops: the harness takes it
        // back when it gives up waiting.
        if std::fs::remove_file(&a.stop_file).is_ok() {
            // SAFETY: stops this process until the harness continues it.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        let accepted = rec.write(&Event::Write {
            worker: a.id,
            key: a.key.clone(),
            fence: term.fence,
            t_start,
            t_end,
            t_recv: 0,
            accepted: false,
            term: true,
            hold: Hold::Exclusive,
        })?;
        if !accepted {
            break "fenced-off";
        }
        last_accepted = t_end;
    };
    rec.record(&Event::Leader {
        worker: a.id,
        key: a.key.clone(),
        fence: term.fence,
        t_start: term.t_comp,
        t_end: last_accepted,
        reason: reason.into(),
    })?;
    // Hands the lease to the next candidate at once (0 if it is gone).
    release(link, rec, a.id, &a.key, &term.token)
}

/// `LOCK.EXTEND` (reconnecting first if needed), confirmed by `WAIT` when
/// asked: Some(true) extended and confirmed, Some(false) refused, None
/// unknown or unconfirmed. The history records an unconfirmed 1 as unknown:
/// the extension may be lost with the master that made it.
fn extend(
    link: &mut Link,
    rec: &mut RecorderClient,
    a: &ElectArgs,
    token: &str,
) -> Result<Option<bool>, String> {
    let Some((c, _)) = connect(link, a) else {
        return Ok(None);
    };
    let t_inv = mono_ns();
    let r: redis::RedisResult<Value> = redis::cmd("LOCK.EXTEND")
        .arg(&a.key)
        .arg(token)
        .arg(a.ttl_ms)
        .query(c);
    let mut result = int_reply(&r);
    let mut broken = r.is_err();
    if result == Some(1) {
        let (acked, wait_broke) = confirmed(c, a.replicas, a.op_timeout_ms / 2);
        broken |= wait_broke;
        if !acked {
            result = None;
        }
    }
    rec.record(&Event::Extend {
        worker: a.id,
        key: a.key.clone(),
        token: token.to_string(),
        ttl_ms: a.ttl_ms,
        t_inv,
        t_comp: mono_ns(),
        result,
    })?;
    if broken {
        *link = None;
    }
    Ok(result.map(|n| n == 1))
}

/// The holder in an OBSERVE or LOCK.INFO reply: (fence, owner), (0, "")
/// when free.
pub fn holder(v: &Value) -> Option<(u64, String)> {
    if *v == Value::Nil {
        return Some((0, String::new()));
    }
    let mut fence = None;
    let mut owner = String::new();
    for (k, val) in map_pairs(v)? {
        match (text(k).as_deref(), val) {
            (Some("fence"), Value::Int(n)) => fence = Some(*n as u64),
            (Some("owner"), v) => owner = text(v).unwrap_or_default(),
            _ => {}
        }
    }
    fence.map(|f| (f, owner))
}

pub fn run_observer(a: ElectArgs) -> Result<(), String> {
    let mut rec = RecorderClient::connect(&a.socket)?;
    let deadline = mono_ns() + a.duration_ms * MS;
    let mut link: Link = None;
    let mut last = 0u64;
    while mono_ns() < deadline {
        let Some((c, server)) = connect(&mut link, &a) else {
            continue;
        };
        let _ = c.set_read_timeout(Some(Duration::from_millis(a.read_ms)));
        let t_inv = mono_ns();
        let reply: redis::RedisResult<Value> = redis::cmd("LOCK.OBSERVE")
            .arg(&a.key)
            .arg(last)
            .arg(a.observe_ms)
            .query(c);
        let t_comp = mono_ns();
        let Some((fence, owner)) = reply.as_ref().ok().and_then(holder) else {
            link = None;
            sleep(Duration::from_millis(20));
            continue;
        };
        rec.record(&Event::Observed {
            worker: a.id,
            key: a.key.clone(),
            fence,
            owner,
            t_inv,
            t_comp,
            server,
        })?;
        last = fence;
    }
    Ok(())
}
