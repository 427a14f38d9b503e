//! A worker process: acquire -> write (fence, worker, t_start, t_end) to the
//! fenced resource -> release, in a loop, reporting every step to the
//! recorder. With `--shared=p` each grant is a read lease (`SHARED`) with
//! probability p; with `--limit=n` the worker takes 1 to `--max-count`
//! permits of a semaphore of n (`SEM.*`) instead of the lock. With `--guard=true` the critical section also appends its
//! `begin` and `end` to the guarded list in Redis through `LOCK.GUARD`
//! (`guarded.rs`). With `--lease-keys=n` the process is instead a worker
//! that holds n keys at once through one lease group (`lease_worker.rs`,
//! chosen in `main.rs`); with `--multi-keys=n` a worker that takes 2-4 keys
//! of a pool of n at once (`multi_worker.rs`). Run as
//! `lock-chaos worker --key value ...` by the scenarios, so that a worker can
//! be SIGSTOPped or run in another network namespace.

use std::collections::HashMap;
use std::path::PathBuf;
use std::thread::sleep;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

use crate::guarded;
use crate::history::{mono_ns, Event, GuardResult, Hold, Outcome, RecorderClient, MS};

/// How long before the earliest end of its lease a worker stops writing.
const LEASE_MARGIN_NS: u64 = 5 * MS;

#[derive(Clone, Debug)]
pub struct WorkerArgs {
    pub id: u32,
    pub socket: PathBuf,
    /// The master, when no Sentinel answers (or none is given).
    pub addr: String,
    pub sentinels: Vec<String>,
    pub key: String,
    pub ttl_ms: u64,
    pub hold_ms: (u64, u64),
    /// ACQUIRE ... WAIT this many ms; 0: no WAIT, retry after a short sleep.
    pub wait_ms: u64,
    /// Probability of an EXTEND in the middle of the critical section.
    pub extend: f64,
    pub duration_ms: u64,
    pub max_acquires: u64,
    pub seed: u64,
    /// `WAIT n` after a grant; a grant n replicas did not acknowledge is not used.
    pub replicas: u64,
    /// `SYNC n` on every grant, extension and guarded write (the server
    /// answers once n replicas hold it, and undoes a grant they do not).
    pub sync: u64,
    pub op_timeout_ms: u64,
    /// Probability of SIGSTOPping itself between the lease check and the
    /// write (scenario 2: the harness sends SIGCONT).
    pub stop_before_write: f64,
    /// Append the section's begin and end to the guarded list.
    pub guard: bool,
    /// Probability of asking for a read lease (`LOCK.ACQUIRE … SHARED`).
    pub shared: f64,
    /// A semaphore of this many permits (`SEM.*`) instead of the lock; 0:
    /// the lock.
    pub limit: u64,
    /// With `limit`: permits per grant, 1 to this (half the grants take 1).
    pub max_count: u64,
    /// With `wait_ms`: the probability that one ACQUIRE queues with WAIT.
    pub wait_p: f64,
    /// More than 0: hold this many keys (`<key>:0`, `<key>:1` …) at once
    /// through one lease group of `lease_ttl_ms`, kept alive by one
    /// `LOCK.LEASE KEEPALIVE` every third of it (`lease_worker.rs`).
    pub lease_keys: u64,
    pub lease_ttl_ms: u64,
    /// With `lease_keys`: the file where the worker keeps its lease's label
    /// and id (for the harness' `LOCK.LEASE REVOKE`), and the file whose
    /// appearance asks it to stop itself between its lease check and its
    /// next write. Empty: none.
    pub lease_file: String,
    pub stop_file: String,
    /// More than 0: a multi-key worker (`multi_worker.rs`) over a pool of
    /// this many keys `{<key>}:0` … (one hash tag, one Cluster slot): each
    /// grant takes a random 2-4 of them at once with `LOCK.MACQUIRE`.
    pub multi_keys: u64,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "worker".into(),
            format!("--id={}", self.id),
            format!("--socket={}", self.socket.display()),
            format!("--addr={}", self.addr),
            format!("--sentinels={}", self.sentinels.join(",")),
            format!("--key={}", self.key),
            format!("--ttl-ms={}", self.ttl_ms),
            format!("--hold-ms={}-{}", self.hold_ms.0, self.hold_ms.1),
            format!("--wait-ms={}", self.wait_ms),
            format!("--extend={}", self.extend),
            format!("--duration-ms={}", self.duration_ms),
            format!("--max-acquires={}", self.max_acquires),
            format!("--seed={}", self.seed),
            format!("--replicas={}", self.replicas),
            format!("--sync={}", self.sync),
            format!("--op-timeout-ms={}", self.op_timeout_ms),
            format!("--stop-before-write={}", self.stop_before_write),
            format!("--guard={}", self.guard),
            format!("--shared={}", self.shared),
            format!("--limit={}", self.limit),
            format!("--max-count={}", self.max_count),
            format!("--wait-p={}", self.wait_p),
            format!("--lease-keys={}", self.lease_keys),
            format!("--lease-ttl-ms={}", self.lease_ttl_ms),
            format!("--lease-file={}", self.lease_file),
            format!("--stop-file={}", self.stop_file),
            format!("--multi-keys={}", self.multi_keys),
        ]
    }

    pub fn parse(args: &[String]) -> Result<WorkerArgs, String> {
        let f = Flags::parse(args)?;
        let get = |k: &str| f.get(k);
        let num = |k: &str| f.num(k);
        let (lo, hi) = f.range("hold-ms")?;
        Ok(WorkerArgs {
            id: num("id")? as u32,
            socket: PathBuf::from(get("socket")?),
            addr: get("addr")?,
            sentinels: f.list("sentinels")?,
            key: get("key")?,
            ttl_ms: num("ttl-ms")?,
            hold_ms: (lo, hi),
            wait_ms: num("wait-ms")?,
            extend: get("extend")?.parse().map_err(|_| "--extend")?,
            duration_ms: num("duration-ms")?,
            max_acquires: num("max-acquires")?,
            seed: num("seed")?,
            replicas: num("replicas")?,
            sync: num("sync")?,
            op_timeout_ms: num("op-timeout-ms")?,
            stop_before_write: get("stop-before-write")?
                .parse()
                .map_err(|_| "--stop-before-write")?,
            guard: get("guard")?.parse().map_err(|_| "--guard")?,
            shared: get("shared")?.parse().map_err(|_| "--shared")?,
            limit: num("limit")?,
            max_count: num("max-count")?,
            wait_p: get("wait-p")?.parse().map_err(|_| "--wait-p")?,
            lease_keys: num("lease-keys")?,
            lease_ttl_ms: num("lease-ttl-ms")?,
            lease_file: get("lease-file")?,
            stop_file: get("stop-file")?,
            multi_keys: num("multi-keys")?,
        })
    }

    /// How the next grant will hold the key. Draws nothing for the plain
    /// lock, so its scenarios replay as before.
    fn next_hold(&self, rng: &mut StdRng) -> Hold {
        if self.limit > 0 {
            let count = if rng.gen_bool(0.5) {
                1
            } else {
                rng.gen_range(1..=self.max_count.clamp(1, self.limit))
            };
            Hold::Permits {
                count,
                limit: self.limit,
            }
        } else if self.shared > 0.0 && rng.gen_bool(self.shared.min(1.0)) {
            Hold::Shared
        } else {
            Hold::Exclusive
        }
    }

    /// The ACQUIRE for `hold`, with WAIT when `wait`.
    fn acquire_cmd(&self, hold: Hold, token: &str, wait: bool) -> redis::Cmd {
        let mut cmd = match hold {
            Hold::Permits { count, limit } => {
                let mut cmd = redis::cmd("SEM.ACQUIRE");
                cmd.arg(&self.key)
                    .arg(limit)
                    .arg(self.ttl_ms)
                    .arg("COUNT")
                    .arg(count);
                cmd
            }
            _ => {
                let mut cmd = redis::cmd("LOCK.ACQUIRE");
                cmd.arg(&self.key).arg(self.ttl_ms);
                cmd
            }
        };
        cmd.arg("TOKEN").arg(token);
        if wait {
            cmd.arg("WAIT").arg(self.wait_ms);
        }
        if hold == Hold::Shared {
            cmd.arg("SHARED");
        }
        self.sync_args(&mut cmd);
        cmd
    }

    /// `SYNC n t` on `cmd`, when the worker syncs (`t`: half the operation
    /// timeout, as its WAIT would take).
    pub fn sync_args(&self, cmd: &mut redis::Cmd) {
        if self.sync > 0 {
            cmd.arg("SYNC").arg(self.sync).arg(self.op_timeout_ms / 2);
        }
    }

    /// `LOCK.EXTEND`/`LOCK.RELEASE`, or `SEM.…` for a semaphore.
    fn verb(&self, verb: &str) -> String {
        let family = if self.limit > 0 { "SEM" } else { "LOCK" };
        format!("{family}.{verb}")
    }
}

/// The `--key=value` arguments of a process the scenarios start.
pub struct Flags(HashMap<String, String>);

impl Flags {
    pub fn parse(args: &[String]) -> Result<Flags, String> {
        let mut map = HashMap::new();
        for arg in args {
            let (k, v) = arg
                .strip_prefix("--")
                .and_then(|a| a.split_once('='))
                .ok_or_else(|| format!("bad argument {arg:?}"))?;
            map.insert(k.to_string(), v.to_string());
        }
        Ok(Flags(map))
    }

    pub fn get(&self, k: &str) -> Result<String, String> {
        self.0
            .get(k)
            .cloned()
            .ok_or_else(|| format!("missing --{k}"))
    }

    pub fn num(&self, k: &str) -> Result<u64, String> {
        self.get(k)?.parse().map_err(|e| format!("--{k}: {e}"))
    }

    /// `--k=lo-hi`.
    pub fn range(&self, k: &str) -> Result<(u64, u64), String> {
        let v = self.get(k)?;
        let (lo, hi) = v.split_once('-').ok_or(format!("--{k}=lo-hi"))?;
        let n = |s: &str| s.parse().map_err(|_| format!("--{k}=lo-hi"));
        Ok((n(lo)?, n(hi)?))
    }

    /// `--k=a,b,c` (empty: none).
    pub fn list(&self, k: &str) -> Result<Vec<String>, String> {
        Ok(self
            .get(k)?
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect())
    }
}

pub fn open(addr: &str, connect_ms: u64, read_ms: u64) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://{addr}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_millis(connect_ms))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_millis(read_ms)))
        .ok()?;
    con.set_write_timeout(Some(Duration::from_millis(read_ms)))
        .ok()?;
    Some(con)
}

/// The master's address according to the first Sentinel that answers.
pub fn ask_sentinels(sentinels: &[String]) -> Option<String> {
    for s in sentinels {
        let Some(mut con) = open(s, 200, 300) else {
            continue;
        };
        let reply: Result<Vec<String>, _> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("mymaster")
            .query(&mut con);
        if let Ok(v) = reply {
            if v.len() == 2 {
                return Some(format!("{}:{}", v[0], v[1]));
            }
        }
    }
    None
}

/// A connection to the master (by the Sentinels, else `addr`), with a read
/// timeout of `read_ms`.
pub fn open_master(sentinels: &[String], addr: &str, read_ms: u64) -> Option<(Connection, String)> {
    let addr = ask_sentinels(sentinels).unwrap_or_else(|| addr.to_string());
    open(&addr, 300, read_ms).map(|c| (c, addr))
}

pub fn reconnect(a: &WorkerArgs) -> Option<(Connection, String)> {
    open_master(&a.sentinels, &a.addr, a.wait_ms + a.op_timeout_ms)
}

/// What an ACQUIRE's reply means; with `replicas` > 0 a grant counts only
/// once `WAIT replicas wait_ms` confirms it. The flag: the connection broke.
pub fn grant_outcome(
    c: &mut Connection,
    reply: &redis::RedisResult<Value>,
    replicas: u64,
    wait_ms: u64,
) -> (Outcome, Option<u64>, bool) {
    let (mut outcome, fence) = match reply {
        Ok(Value::Nil) => (Outcome::Refused, None),
        // SYNC: the server undid the grant before anyone was told of it.
        Err(e) if e.code() == Some("NOSYNC") => return (Outcome::Undone, None, false),
        Ok(Value::Array(items)) if items.len() == 2 => match items[1] {
            Value::Int(f) if f > 0 => (Outcome::Granted, Some(f as u64)),
            _ => (Outcome::Unknown, None),
        },
        _ => (Outcome::Unknown, None),
    };
    let mut broken = reply.is_err();
    if outcome == Outcome::Granted {
        let (acked, wait_broke) = confirmed(c, replicas, wait_ms);
        broken |= wait_broke;
        if !acked {
            outcome = Outcome::Unconfirmed;
        }
    }
    (outcome, fence, broken)
}

/// `WAIT replicas wait_ms` after a write (nothing when `replicas` is 0):
/// did enough replicas acknowledge it, and did the connection break.
pub fn confirmed(c: &mut Connection, replicas: u64, wait_ms: u64) -> (bool, bool) {
    if replicas == 0 {
        return (true, false);
    }
    let acked = redis::cmd("WAIT")
        .arg(replicas)
        .arg(wait_ms)
        .query::<Value>(c);
    (
        int_reply(&acked).unwrap_or(0) >= replicas as i64,
        acked.is_err(),
    )
}

pub fn int_reply(r: &redis::RedisResult<Value>) -> Option<i64> {
    match r {
        Ok(Value::Int(n)) => Some(*n),
        _ => None,
    }
}

pub fn run(a: WorkerArgs) -> Result<(), String> {
    let mut rec = RecorderClient::connect(&a.socket)?;
    let mut rng = StdRng::seed_from_u64(a.seed);
    let deadline = mono_ns() + a.duration_ms * MS;
    let mut con: Option<(Connection, String)> = None;
    let mut acquires = 0;
    let mut seq = 0u64;
    while mono_ns() < deadline && acquires < a.max_acquires {
        if con.is_none() {
            con = reconnect(&a);
            if con.is_none() {
                sleep(Duration::from_millis(50));
                continue;
            }
        }
        let Some((c, addr)) = con.as_mut() else {
            continue;
        };
        let server = addr.clone();
        seq += 1;
        acquires += 1;
        let token = format!("w{}-{}", a.id, seq);
        let holding = a.next_hold(&mut rng);
        // Draws only when some ACQUIREs go without WAIT.
        let wait = a.wait_ms > 0 && (a.wait_p >= 1.0 || rng.gen_bool(a.wait_p.max(0.0)));
        let cmd = a.acquire_cmd(holding, &token, wait);
        let t_inv = mono_ns();
        let reply: redis::RedisResult<Value> = cmd.query(c);
        let t_comp = mono_ns();
        let (outcome, fence, broken) = grant_outcome(c, &reply, a.replicas, a.op_timeout_ms / 2);
        let t_comp = if a.replicas > 0 { mono_ns() } else { t_comp };
        let ev = Event::Acquire {
            worker: a.id,
            key: a.key.clone(),
            token: token.clone(),
            ttl_ms: a.ttl_ms,
            t_inv,
            t_comp,
            outcome: outcome.clone(),
            fence,
            server,
            hold: holding,
            lease: None,
        };
        rec.record(&ev)?;
        if broken {
            con = None;
            continue;
        }
        match outcome {
            Outcome::Granted => {}
            Outcome::Unconfirmed => {
                release_by(&mut con, &mut rec, a.id, &a.key, &token, &a.verb("RELEASE"))?;
                continue;
            }
            _ => {
                if !wait {
                    sleep(Duration::from_micros(rng.gen_range(500..3000)));
                }
                continue;
            }
        }
        let Some(fence) = fence else { continue };
        // The critical section.
        let hold = rng.gen_range(a.hold_ms.0..=a.hold_ms.1.max(a.hold_ms.0));
        // The earliest the lease can end, by this worker's clock.
        let mut lease_end = t_inv + a.ttl_ms * MS;
        let t_start = mono_ns();
        if a.guard {
            guarded_append(&mut con, &mut rec, &a, &token, fence, "begin")?;
        }
        sleep(Duration::from_millis(hold / 2));
        if rng.gen_bool(a.extend.clamp(0.0, 1.0)) {
            if let Some((c, _)) = con.as_mut() {
                let t_inv = mono_ns();
                let mut extend = redis::cmd(&a.verb("EXTEND"));
                extend.arg(&a.key).arg(&token).arg(a.ttl_ms);
                a.sync_args(&mut extend);
                let r: redis::RedisResult<Value> = extend.query(c);
                let t_comp = mono_ns();
                if int_reply(&r) == Some(1) {
                    lease_end = lease_end.max(t_inv + a.ttl_ms * MS);
                }
                rec.record(&Event::Extend {
                    worker: a.id,
                    key: a.key.clone(),
                    token: token.clone(),
                    ttl_ms: a.ttl_ms,
                    t_inv,
                    t_comp,
                    result: int_reply(&r),
                })?;
                // NOSYNC: the extension stands but is not counted on.
                if r.as_ref().is_err_and(|e| e.code() != Some("NOSYNC")) {
                    con = None;
                }
            }
        }
        sleep(Duration::from_millis(hold - hold / 2));
        let t_end = mono_ns();
        // A careful client: no write once its lease may have run out. (A
        // pause after this check is what the fence is for.)
        if t_end + LEASE_MARGIN_NS < lease_end {
            if rng.gen_bool(a.stop_before_write.clamp(0.0, 1.0)) {
                // SAFETY: stops this process until the harness continues it.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            rec.write(&Event::Write {
                worker: a.id,
                key: a.key.clone(),
                fence,
                t_start,
                t_end,
                t_recv: 0,
                accepted: false,
                term: false,
                hold: holding,
            })?;
        }
        // The guarded end goes out whatever the lease check said: GUARD
        // makes its own check, on the server, and that is what C6 tests.
        if a.guard {
            guarded_append(&mut con, &mut rec, &a, &token, fence, "end")?;
        }
        release_by(&mut con, &mut rec, a.id, &a.key, &token, &a.verb("RELEASE"))?;
    }
    Ok(())
}

/// Append `<worker>:<fence>:<token>:<phase>` to the guarded list through
/// `LOCK.GUARD`, and report what it got.
///
/// Like a client that reconnects and retries (redis-py does by default), a
/// section whose connection broke goes on, on a fresh connection, to the
/// restarted or promoted server, for up to twice the operation timeout, and
/// sends the record once more as `<phase>-retry`. A `LOST` does not stop
/// the section either: the worker is the worst client, and GUARD's own check
/// on the server is what C6 tests.
fn guarded_append(
    con: &mut Option<(Connection, String)>,
    rec: &mut RecorderClient,
    a: &WorkerArgs,
    token: &str,
    fence: u64,
    phase: &str,
) -> Result<(), String> {
    let give_up = mono_ns() + 2 * a.op_timeout_ms * MS;
    for record_phase in [phase.to_string(), format!("{phase}-retry")] {
        while con.is_none() && mono_ns() < give_up {
            *con = reconnect(a);
            if con.is_none() {
                sleep(Duration::from_millis(50));
            }
        }
        let Some((c, _)) = con.as_mut() else {
            return Ok(());
        };
        let record = guarded::record(a.id, fence, token, &record_phase);
        let t_inv = mono_ns();
        let confirm = guarded::Confirm {
            replicas: a.replicas,
            sync: a.sync,
            wait_ms: a.op_timeout_ms / 2,
        };
        let (result, reason) = guarded::append(c, &a.key, &confirm, token, &record);
        let t_comp = mono_ns();
        rec.record(&Event::Guarded {
            worker: a.id,
            key: a.key.clone(),
            token: token.to_string(),
            fence,
            record,
            t_inv,
            t_comp,
            result,
            reason,
        })?;
        if result != GuardResult::Unknown {
            return Ok(());
        }
        *con = None;
    }
    Ok(())
}

/// `LOCK.RELEASE key token`, reported; a connection that broke is dropped.
pub fn release(
    con: &mut Option<(Connection, String)>,
    rec: &mut RecorderClient,
    worker: u32,
    key: &str,
    token: &str,
) -> Result<(), String> {
    release_by(con, rec, worker, key, token, "LOCK.RELEASE")
}

/// `<command> key token` (`LOCK.RELEASE` or `SEM.RELEASE`), reported.
pub fn release_by(
    con: &mut Option<(Connection, String)>,
    rec: &mut RecorderClient,
    worker: u32,
    key: &str,
    token: &str,
    command: &str,
) -> Result<(), String> {
    let Some((c, _)) = con.as_mut() else {
        return Ok(());
    };
    let t_inv = mono_ns();
    let r: redis::RedisResult<Value> = redis::cmd(command).arg(key).arg(token).query(c);
    let t_comp = mono_ns();
    rec.record(&Event::Release {
        worker,
        key: key.to_string(),
        token: token.to_string(),
        t_inv,
        t_comp,
        result: int_reply(&r),
    })?;
    if r.is_err() {
        *con = None;
    }
    Ok(())
}
