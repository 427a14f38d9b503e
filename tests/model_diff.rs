//! Differential test (issue 5, scenario 9): random ACQUIRE / EXTEND /
//! RELEASE / INFO / DEL / FLUSHALL / DEBUG RELOAD sequences, with valid and
//! invalid arguments and short and long leases, against a real server and
//! against the core's own decisions (`core/src/sim.rs` runs the same parsers
//! and `decide` functions the module runs, over a plain map). Every reply must be the model's: grant, renewal, refusal,
//! 1/0, the exact error text, the fence of the current holder; and every
//! grant's fence is above every earlier one.
//!
//! Time is the one thing the two do not share. A lease's deadline is known
//! only within the interval between sending the command and reading its
//! reply; a lease that is certainly live or certainly over is applied to the
//! model as such, and an uncertain one (a short lease near its end) is run
//! both ways, and the server's reply must match one of them, which the model
//! then follows. Fence values differ (the server's follow its clock), so the
//! test maps each model grant to the server's fence.
//!
//! `LOCK_DIFF_SEED` (default fixed, always printed) and `LOCK_DIFF_OPS`
//! (default 3000) choose the run.

mod common;

use std::collections::HashMap;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis_lock_core::errors::LockError;
use redis_lock_core::rules;
use redis_lock_core::sim::LockTable;

const KEYS: usize = 5;
const TOKENS: usize = 3;

/// What a command returned, in a form both sides can produce.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    /// ACQUIRE granted or renewed: token and the server's fence.
    Granted(String, u64),
    Refused,
    Int(i64),
    /// INFO of a held lock: its fence and waiters.
    Held(u64, i64),
    Free,
    Error(String),
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        key: usize,
        ttl: i64,
        token: Option<Vec<u8>>,
    },
    Extend {
        key: usize,
        token: Vec<u8>,
        ttl: i64,
    },
    Release {
        key: usize,
        token: Vec<u8>,
    },
    Info {
        key: usize,
    },
    Del {
        key: usize,
    },
    Flush,
    Reload,
    Sleep(u64),
}

impl Op {
    fn key(&self) -> Option<usize> {
        match self {
            Op::Acquire { key, .. }
            | Op::Extend { key, .. }
            | Op::Release { key, .. }
            | Op::Info { key }
            | Op::Del { key } => Some(*key),
            _ => None,
        }
    }
}

fn key_name(k: usize) -> String {
    format!("diff:{k}")
}

fn random_ttl(rng: &mut StdRng) -> i64 {
    match rng.gen_range(0..20) {
        0 => 0,
        1 => -5,
        2 => rules::DEFAULT_MAX_TTL_MS + 1,
        3..=6 => rng.gen_range(1..=25),
        _ => 60_000 + rng.gen_range(0..1_000),
    }
}

fn random_token(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..30) {
        0 => Vec::new(),
        1 => vec![b'x'; rules::MAX_TOKEN_LEN + 1],
        2 => vec![0, 0xff, b'\r', b'\n'],
        _ => format!("t{}", rng.gen_range(0..TOKENS)).into_bytes(),
    }
}

fn random_op(rng: &mut StdRng) -> Op {
    let key = rng.gen_range(0..KEYS);
    match rng.gen_range(0..100) {
        0..=34 => Op::Acquire {
            key,
            ttl: random_ttl(rng),
            token: Some(random_token(rng)),
        },
        35..=39 => Op::Acquire {
            key,
            ttl: random_ttl(rng),
            token: None,
        },
        40..=54 => Op::Extend {
            key,
            token: random_token(rng),
            ttl: random_ttl(rng),
        },
        55..=72 => Op::Release {
            key,
            token: random_token(rng),
        },
        73..=88 => Op::Info { key },
        89..=92 => Op::Del { key },
        93 => Op::Flush,
        94 => Op::Reload,
        _ => Op::Sleep(rng.gen_range(10..40)),
    }
}

fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

/// Send `op` to the server.
fn on_server(con: &mut Connection, op: &Op) -> Reply {
    let as_reply = |r: redis::RedisResult<Value>| -> Reply {
        match r {
            Err(e) => Reply::Error(error_text(&e)),
            Ok(Value::Nil) => Reply::Refused,
            Ok(Value::Int(n)) => Reply::Int(n),
            Ok(Value::Array(items)) => match &items[..] {
                [Value::BulkString(t), Value::Int(f)] => {
                    Reply::Granted(String::from_utf8_lossy(t).to_string(), *f as u64)
                }
                other => panic!("unexpected ACQUIRE reply {other:?}"),
            },
            Ok(other) => panic!("unexpected reply {other:?}"),
        }
    };
    match op {
        Op::Acquire { key, ttl, token } => {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(key_name(*key)).arg(*ttl);
            if let Some(t) = token {
                cmd.arg("TOKEN").arg(t.as_slice());
            }
            as_reply(cmd.query(con))
        }
        Op::Extend { key, token, ttl } => as_reply(
            redis::cmd("LOCK.EXTEND")
                .arg(key_name(*key))
                .arg(token.as_slice())
                .arg(*ttl)
                .query(con),
        ),
        Op::Release { key, token } => as_reply(
            redis::cmd("LOCK.RELEASE")
                .arg(key_name(*key))
                .arg(token.as_slice())
                .query(con),
        ),
        Op::Info { key } => {
            let r: redis::RedisResult<Option<HashMap<String, Value>>> =
                redis::cmd("LOCK.INFO").arg(key_name(*key)).query(con);
            let int = |m: &HashMap<String, Value>, name: &str| match m.get(name) {
                Some(Value::Int(n)) => *n,
                other => panic!("LOCK.INFO {name}: {other:?}"),
            };
            match r {
                Err(e) => Reply::Error(error_text(&e)),
                Ok(None) => Reply::Free,
                Ok(Some(m)) => Reply::Held(int(&m, "fence") as u64, int(&m, "waiters")),
            }
        }
        Op::Del { key } => as_reply(redis::cmd("DEL").arg(key_name(*key)).query(con)),
        Op::Flush => {
            let _: () = redis::cmd("FLUSHALL").query(con).expect("FLUSHALL");
            Reply::Int(0)
        }
        Op::Reload => {
            let _: () = redis::cmd("DEBUG")
                .arg("RELOAD")
                .query(con)
                .expect("RELOAD");
            Reply::Int(0)
        }
        Op::Sleep(ms) => {
            std::thread::sleep(std::time::Duration::from_millis(*ms));
            Reply::Int(0)
        }
    }
}

/// The model's state plus the server fence of each key's current grant.
#[derive(Clone)]
struct World {
    table: LockTable,
    server_fence: HashMap<usize, u64>,
    /// Each held key's deadline is within `[min, max]` (unix ms).
    deadline: HashMap<usize, (i64, i64)>,
    /// The last op was a new grant (not a renewal).
    new_grant: bool,
}

fn model_err(e: LockError) -> Reply {
    Reply::Error(e.as_str().to_string())
}

impl World {
    /// What the model replies to `op`, and the state after it. The model's
    /// clock stands at 0: expiry is applied from outside ([`step`]).
    /// `server` is the server's reply, used only for what the model cannot
    /// know: a drawn token and the fence value of a new grant.
    fn apply(&mut self, op: &Op, server: &Reply, sent: i64, received: i64) -> Reply {
        let name = |k: usize| key_name(k).into_bytes();
        self.new_grant = false;
        match op {
            Op::Acquire { key, ttl, token } => {
                // A drawn token matches no holder; if granted, it is the
                // server's.
                let token = match (token, server) {
                    (Some(t), _) => t.clone(),
                    (None, Reply::Granted(t, _)) => t.clone().into_bytes(),
                    (None, _) => b"a token no one holds".to_vec(),
                };
                let before = self.table.live(&name(*key), 0).cloned();
                match self.table.acquire(&name(*key), *ttl, &token, 0, 0) {
                    Err(e) => model_err(e),
                    Ok(None) => Reply::Refused,
                    Ok(Some(_)) => {
                        self.deadline.insert(*key, (sent + ttl, received + ttl));
                        let token = String::from_utf8_lossy(&token).to_string();
                        if before.is_some() {
                            Reply::Granted(token, self.server_fence[key])
                        } else {
                            // A new grant: its fence is the server's, checked
                            // against every earlier one by the caller.
                            let fence = match server {
                                Reply::Granted(_, f) => *f,
                                _ => 0,
                            };
                            self.server_fence.insert(*key, fence);
                            self.new_grant = true;
                            Reply::Granted(token, fence)
                        }
                    }
                }
            }
            Op::Extend { key, token, ttl } => {
                match self.table.extend(&name(*key), token, *ttl, 0) {
                    Err(e) => model_err(e),
                    Ok(extended) => {
                        if extended {
                            self.deadline.insert(*key, (sent + ttl, received + ttl));
                        }
                        Reply::Int(i64::from(extended))
                    }
                }
            }
            Op::Release { key, token } => match self.table.release(&name(*key), token, 0) {
                Err(e) => model_err(e),
                Ok(released) => Reply::Int(i64::from(released)),
            },
            Op::Info { key } => match self.table.live(&name(*key), 0) {
                None => Reply::Free,
                Some(_) => Reply::Held(self.server_fence[key], 0),
            },
            Op::Del { key } => {
                let held = self.table.live(&name(*key), 0).is_some();
                self.table.delete(&name(*key));
                Reply::Int(i64::from(held))
            }
            Op::Flush => {
                self.table.flush();
                Reply::Int(0)
            }
            Op::Reload | Op::Sleep(_) => Reply::Int(0),
        }
    }

    /// Drop the model's leases on `key` that are certainly over at `sent`;
    /// `Some(true)` if it holds a lease that may or may not be over by
    /// `received`.
    fn uncertain(&mut self, key: usize, sent: i64, received: i64) -> bool {
        let name = key_name(key).into_bytes();
        if self.table.live(&name, 0).is_none() {
            return false;
        }
        let (min, max) = self.deadline[&key];
        // Redis: a key is gone once its clock passes the deadline. One ms of
        // slack either way for truncation.
        if sent > max + 1 {
            self.table.delete(&name);
            false
        } else {
            received + 1 >= min
        }
    }
}

#[test]
fn module_and_model_agree_on_random_histories() {
    let seed = std::env::var("LOCK_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x10c4_d1ff_u64);
    let ops: usize = std::env::var("LOCK_DIFF_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000);
    println!("model_diff: LOCK_DIFF_SEED={seed} LOCK_DIFF_OPS={ops}");
    let mut rng = StdRng::seed_from_u64(seed);
    let server = Server::start();
    let mut con = server.conn();
    let mut world = World {
        table: LockTable::new(),
        server_fence: HashMap::new(),
        deadline: HashMap::new(),
        new_grant: false,
    };
    let mut last_fence = 0u64;
    let (mut uncertain, mut grants, mut errors) = (0usize, 0usize, 0usize);
    for i in 0..ops {
        let op = random_op(&mut rng);
        // Leases that ended before the op was sent are over in the model too.
        let sent = now_ms();
        for k in 0..KEYS {
            world.uncertain(k, sent, sent);
        }
        let got = on_server(&mut con, &op);
        let received = now_ms();
        if let Op::Reload = op {
            // Leases ran on while the server saved and loaded.
            for k in 0..KEYS {
                if world.uncertain(k, sent, received) {
                    // Whether it outlived the reload, INFO tells.
                    let mut both = world.clone();
                    both.table.delete(&key_name(k).into_bytes());
                    let probe = Op::Info { key: k };
                    let live = on_server(&mut con, &probe);
                    if live == Reply::Free {
                        world = both;
                    }
                }
            }
        }
        let ambiguous = op.key().is_some_and(|k| world.uncertain(k, sent, received));
        let want = if ambiguous {
            uncertain += 1;
            let k = op.key().unwrap_or(0);
            let mut expired = world.clone();
            expired.table.delete(&key_name(k).into_bytes());
            let if_live = world.apply(&op, &got, sent, received);
            let if_expired = expired.apply(&op, &got, sent, received);
            // Keep the lease when both agree: a lease kept too long is
            // dropped once it is certainly over, one dropped too early
            // would never come back.
            if got == if_live {
                if_live
            } else {
                world = expired;
                if_expired
            }
        } else {
            world.apply(&op, &got, sent, received)
        };
        assert_eq!(
            got, want,
            "op {i} {op:?} (seed {seed}): the server and the model disagree"
        );
        match &got {
            Reply::Granted(_, fence) if world.new_grant => {
                assert!(
                    *fence > last_fence,
                    "op {i} {op:?} (seed {seed}): fence {fence} after {last_fence}"
                );
                last_fence = *fence;
                grants += 1;
            }
            Reply::Error(_) => errors += 1,
            _ => {}
        }
    }
    println!(
        "model_diff: {ops} ops, {grants} new grants, {errors} error replies, \
         {uncertain} ops on a lease near its end (both outcomes allowed), 0 disagreements"
    );
    assert!(grants > ops / 20, "too few grants to prove anything");
}
