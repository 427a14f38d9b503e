//! A worker that takes several locks in one step (scenario 15, issue 28):
//! `lock-chaos worker --multi-keys=n …`.
//!
//! Its keys are a pool of n, `{<key>}:0` … `{<key>}:<n-1>`: one hash tag,
//! so one Cluster slot, as `LOCK.MACQUIRE` requires there. Each round it
//! draws 2-4 of them in a random order and asks for all of them at once,
//! `LOCK.MACQUIRE k <keys> ttl TOKEN t [WAIT w]`. Each key guards a fenced
//! resource of its own, and the history records everything per key, as if
//! the worker had sent one command per key with the same token and fence:
//! one `Acquire` per key (same times, outcome and fence), one `Write` per
//! key (the same section), one `Extend` per key for an `LOCK.MEXTEND` (its
//! 1 or 0 is every key's), one `Release` per key for an `LOCK.MRELEASE`
//! (its count says which keys only when it is all or none: otherwise the
//! per-key result is unknown). C1-C3 and C5 then check every key as they
//! check one lock: no two holders of a key act at once, and each
//! resource's fences only grow.
//!
//! All or nothing, seen from outside: when a `LOCK.MACQUIRE` answers null
//! (busy, or its WAIT ran out) the worker sends `LOCK.MRELEASE` with that
//! token, which must release nothing (`multi.rs` checks it): a request
//! that was refused holds no key, not even for a moment that outlived it.

use std::thread::sleep;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

use crate::history::{mono_ns, Event, Hold, Outcome, RecorderClient, MS};
use crate::worker::{grant_outcome, int_reply, reconnect, WorkerArgs};

/// How long before the earliest end of its lease a worker stops writing.
const LEASE_MARGIN_NS: u64 = 5 * MS;

/// The `i`th key of the pool `base`: `{base}:i`.
pub fn pool_key(base: &str, i: u64) -> String {
    format!("{{{base}}}:{i}")
}

/// `command numkeys key… <rest>`.
fn multi_cmd(command: &str, keys: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(keys.len()).arg(keys);
    cmd
}

pub fn run(a: WorkerArgs) -> Result<(), String> {
    let mut rec = RecorderClient::connect(&a.socket)?;
    let mut rng = StdRng::seed_from_u64(a.seed);
    let pool: Vec<String> = (0..a.multi_keys).map(|i| pool_key(&a.key, i)).collect();
    let deadline = mono_ns() + a.duration_ms * MS;
    let mut con: Option<(Connection, String)> = None;
    let mut seq = 0u64;
    while mono_ns() < deadline && seq < a.max_acquires {
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
        let token = format!("w{}-{}", a.id, seq);
        let size = rng.gen_range(2..=4usize).min(pool.len());
        let keys: Vec<String> = pool.choose_multiple(&mut rng, size).cloned().collect();
        let wait = a.wait_ms > 0 && (a.wait_p >= 1.0 || rng.gen_bool(a.wait_p.max(0.0)));
        let mut cmd = multi_cmd("LOCK.MACQUIRE", &keys);
        cmd.arg(a.ttl_ms).arg("TOKEN").arg(&token);
        if wait {
            cmd.arg("WAIT").arg(a.wait_ms);
        }
        a.sync_args(&mut cmd);
        let t_inv = mono_ns();
        let reply: redis::RedisResult<Value> = cmd.query(c);
        let t_comp = mono_ns();
        let (outcome, fence, broken) = grant_outcome(c, &reply, a.replicas, a.op_timeout_ms / 2);
        let t_comp = if a.replicas > 0 { mono_ns() } else { t_comp };
        for key in &keys {
            rec.record(&Event::Acquire {
                worker: a.id,
                key: key.clone(),
                token: token.clone(),
                ttl_ms: a.ttl_ms,
                t_inv,
                t_comp,
                outcome: outcome.clone(),
                fence,
                server: server.clone(),
                hold: Hold::Exclusive,
                lease: None,
            })?;
        }
        if broken {
            con = None;
            continue;
        }
        match outcome {
            Outcome::Granted => {}
            Outcome::Refused => {
                // All or nothing: the refused token must hold no key.
                release_all(&mut con, &mut rec, a.id, &keys, &token, true)?;
                if !wait {
                    sleep(Duration::from_micros(rng.gen_range(500..3000)));
                }
                continue;
            }
            Outcome::Unconfirmed => {
                release_all(&mut con, &mut rec, a.id, &keys, &token, false)?;
                continue;
            }
            _ => continue,
        }
        let Some(fence) = fence else { continue };
        let hold = rng.gen_range(a.hold_ms.0..=a.hold_ms.1.max(a.hold_ms.0));
        // The earliest the keys' common lease can end, by this worker's clock.
        let mut lease_end = t_inv + a.ttl_ms * MS;
        let t_start = mono_ns();
        sleep(Duration::from_millis(hold / 2));
        if rng.gen_bool(a.extend.clamp(0.0, 1.0)) {
            if let Some((c, _)) = con.as_mut() {
                let mut extend = multi_cmd("LOCK.MEXTEND", &keys);
                extend.arg(&token).arg(a.ttl_ms);
                a.sync_args(&mut extend);
                let t_inv = mono_ns();
                let r: redis::RedisResult<Value> = extend.query(c);
                let t_comp = mono_ns();
                if int_reply(&r) == Some(1) {
                    lease_end = lease_end.max(t_inv + a.ttl_ms * MS);
                }
                for key in &keys {
                    rec.record(&Event::Extend {
                        worker: a.id,
                        key: key.clone(),
                        token: token.clone(),
                        ttl_ms: a.ttl_ms,
                        t_inv,
                        t_comp,
                        result: int_reply(&r),
                    })?;
                }
                if r.as_ref().is_err_and(|e| e.code() != Some("NOSYNC")) {
                    con = None;
                }
            }
        }
        sleep(Duration::from_millis(hold - hold / 2));
        let t_end = mono_ns();
        // A careful client: no write once its lease may have run out.
        if t_end + LEASE_MARGIN_NS < lease_end {
            if rng.gen_bool(a.stop_before_write.clamp(0.0, 1.0)) {
                // SAFETY: stops this process until the harness continues it.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            for key in &keys {
                rec.write(&Event::Write {
                    worker: a.id,
                    key: key.clone(),
                    fence,
                    t_start,
                    t_end,
                    t_recv: 0,
                    accepted: false,
                    term: false,
                    hold: Hold::Exclusive,
                })?;
            }
        }
        release_all(&mut con, &mut rec, a.id, &keys, &token, false)?;
    }
    Ok(())
}

/// `LOCK.MRELEASE k <keys> token`, reported per key: 1 each when it
/// released all of them, 0 each when none, unknown (None) when some. A
/// `probe` (the token of a refused request) reports the count itself on
/// each key, for `multi.rs` to check that it is 0.
fn release_all(
    con: &mut Option<(Connection, String)>,
    rec: &mut RecorderClient,
    worker: u32,
    keys: &[String],
    token: &str,
    probe: bool,
) -> Result<(), String> {
    let Some((c, _)) = con.as_mut() else {
        return Ok(());
    };
    let mut cmd = multi_cmd("LOCK.MRELEASE", keys);
    cmd.arg(token);
    let t_inv = mono_ns();
    let r: redis::RedisResult<Value> = cmd.query(c);
    let t_comp = mono_ns();
    let released = int_reply(&r);
    let per_key = match released {
        _ if probe => released,
        Some(n) if n == keys.len() as i64 => Some(1),
        Some(0) => Some(0),
        _ => None,
    };
    for key in keys {
        rec.record(&Event::Release {
            worker,
            key: key.clone(),
            token: token.to_string(),
            t_inv,
            t_comp,
            result: per_key,
        })?;
    }
    if r.is_err() {
        *con = None;
    }
    Ok(())
}
