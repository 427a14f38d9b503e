//! Every acquire, of one key or many, one path:
//! - `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION]
//!   [OWNER label] [SHARED] [SYNC n timeout-ms] [LEASE id]` → `[token,
//!   fence]`, or null when the key is busy (another holder, others queued
//!   before the caller, or a lock-delay after an expiry). With `WAIT`, a
//!   busy key queues the caller instead (see `wait_queue/`); with `SESSION`,
//!   the hold is also released when the connection closes (see
//!   `state/sessions.rs`).
//! - `SEM.ACQUIRE` ([`run_sem`]) parses its own arguments and comes here
//!   too.
//! - `LOCK.MACQUIRE numkeys key [key ...] ttl-ms [TOKEN token] [WAIT
//!   timeout-ms] [SHARED] [OWNER label] [SESSION] [SYNC n timeout-ms]
//!   [LEASE id]` ([`run_many`]) → `[token, fence]` when every key was
//!   granted to `token` in one step, with one fence and one deadline; null
//!   when any key is busy (or the wait ran out). With `WAIT` the request
//!   queues on every key, holding none. `LEASE` attaches every key to the
//!   lease group, each key a hold of its own there; `SYNC` answers once
//!   that many replicas hold every key, else `NOSYNC` with the grant undone
//!   on every key. Each key is then a hold like any other: `LOCK.RELEASE`,
//!   `EXTEND`, `GUARD` and `INFO` work on it alone. The keys are declared
//!   through `getkeys-api` (`redis/command.rs`), so Cluster refuses keys of
//!   several slots (`CROSSSLOT`) and ACL key patterns see every key.
//!
//! One key is the slice of one (`std::slice::from_ref`), kept inline
//! (`Few`): the one-key path allocates nothing. Every decision is the
//! core's (`decide::acquire_many`, key by key from `decide::acquire`);
//! everything is checked on every key before any key changes.

use redis_lock_core::args::{parse_acquire, parse_macquire, parse_sem_acquire, AcquireArgs};
use redis_lock_core::decide::{self, AcquireMany, AcquireManyCase, ManyKey};
use redis_lock_core::errors::LockError;
use redis_lock_core::few::Few;
use redis_lock_core::hold::{self, Want};
use redis_lock_core::sync::Stands;
use redis_lock_core::token::{self, UUID_LEN};
use redis_module::{Context, RedisString};

use crate::holds::{self, Grantee};
use crate::redis::command::report_numkeys;
use crate::redis::key::LockKey;
use crate::redis::{self, reply, server};
use crate::state::metrics::{self, Counter};
use crate::state::{config, expiry, lease_registry, sessions};
use crate::sync::{self, Answer, Grant};
use crate::wait_queue::{self, WaitRequest};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_acquire(redis::args(args), config::max_ttl_ms())?;
    let want = exclusive_or_shared(&parsed);
    acquire(ctx, std::slice::from_ref(&args[1]), &parsed, want)
}

/// `SEM.ACQUIRE key limit ttl-ms [COUNT n] [TOKEN token] [WAIT timeout-ms]
/// [SESSION] [OWNER label] [SYNC …] [LEASE id]` → `[token, fence]`, or
/// null when fewer than `n` of the semaphore's `limit` permits are free (or
/// others queued before the caller). At most `limit` permits are out at
/// once; each token's permits have their own lease and fence. The key
/// exists while it has holders. A `limit` other than the one the key was
/// created with is refused. With `WAIT`, the caller queues, first in, first
/// out across counts: a request at the head that needs more permits than
/// are free blocks smaller ones behind it. Its own arguments, then the
/// acquire every hold takes.
pub fn run_sem(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_sem_acquire(redis::args(args), config::max_ttl_ms())?;
    let want = Want::Permits {
        limit: parsed.limit,
        count: parsed.count,
    };
    acquire(ctx, std::slice::from_ref(&args[1]), &parsed.lock, want)
}

/// `LOCK.MACQUIRE`: its keys, then the acquire every hold takes.
pub fn run_many(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    if ctx.is_keys_position_request() {
        report_numkeys(ctx, args);
        return Ok(());
    }
    let parsed = parse_macquire(redis::args(args), config::max_keys(), config::max_ttl_ms())?;
    let want = exclusive_or_shared(&parsed.lock);
    acquire(ctx, &args[parsed.keys.clone()], &parsed.lock, want)
}

fn exclusive_or_shared(parsed: &AcquireArgs) -> Want {
    match parsed.shared {
        true => Want::Shared,
        false => Want::Exclusive,
    }
}

/// The caller wants `want` of every key of `names`: an exclusive lock, a
/// read lease, or a semaphore's permits.
fn acquire(
    ctx: &Context,
    names: &[RedisString],
    parsed: &AcquireArgs,
    want: Want,
) -> Result<(), LockError> {
    super::refuse_local_write_on_replica(ctx)?;
    super::may_sync(ctx, parsed.sync)?;
    let session = super::session_of(ctx, parsed.session)?;
    let db = server::selected_db(ctx);
    let (opened, now_ms) = super::open_each(ctx, names);
    let mut many = Few::with_capacity(names.len());
    for (key, name) in opened.iter().zip(names) {
        let holds = key.held()?;
        hold::admits(want.family(), holds.kind())?;
        many.push(ManyKey {
            key: holds.state(now_ms),
            mine: super::live_mine(&holds, parsed.token, now_ms),
            others_waiting: wait_queue::waiters(db, name) > 0,
            // A lock-delay keeps everyone off a free key, readers and
            // permits too (the core reads it only for a free key).
            delayed_until_ms: expiry::delayed_until(db, name, now_ms),
        });
    }
    // `LEASE id`: a lease that is gone (or another server's) grants nothing.
    let lease = match &parsed.lease {
        Some(id) => Some(lease_registry::attach_to(id, now_ms)?),
        None => None,
    };
    let case = AcquireManyCase {
        keys: &many,
        want,
        ttl_ms: parsed.ttl_ms,
        now_ms,
        hold: config::hold_policy(),
        may_wait: parsed.wait_ms.is_some() && server::can_block(ctx),
        max_holders: config::max_holders(),
        lease,
        queued: false,
    };
    let caller = Caller {
        parsed,
        want,
        session,
        db,
        now_ms,
        lease: lease.map(|a| a.number),
    };
    apply(ctx, opened, names, &caller, decide::acquire_many(&case))
}

/// Who asks, and for what.
struct Caller<'a> {
    parsed: &'a AcquireArgs<'a>,
    want: Want,
    session: Option<u64>,
    db: i32,
    now_ms: i64,
    /// The number of the lease group a grant is attached to.
    lease: Option<u64>,
}

/// Execute the core's decision for `caller` on `names` (open as `opened`):
/// the one place an acquire replies, queues, renews or grants.
fn apply(
    ctx: &Context,
    mut opened: Few<LockKey>,
    names: &[RedisString],
    caller: &Caller,
    decision: Result<AcquireMany, LockError>,
) -> Result<(), LockError> {
    let (parsed, db) = (caller.parsed, caller.db);
    let decision = match decision {
        Ok(decision) => decision,
        Err(error) => {
            if error.is_hold_limit() {
                metrics::count(Counter::ExtendsLimited);
            }
            return Err(error);
        }
    };
    match decision {
        AcquireMany::Refuse => {
            metrics::count(Counter::Refused);
            reply::null(ctx);
        }
        AcquireMany::Queue { wake } => {
            drop(opened);
            let request = WaitRequest {
                token: parsed.token,
                ttl_ms: parsed.ttl_ms,
                wait_ms: parsed.wait_ms.unwrap_or(0),
                session: caller.session,
                owner: parsed.owner,
                want: caller.want,
                sync: parsed.sync,
                lease: parsed.lease,
            };
            wait_queue::enqueue(ctx, db, names, &request, &wake)?;
        }
        AcquireMany::Held { fence } => {
            // Held through its lease group, which alone moves it: its
            // grant, nothing moved.
            drop(opened);
            sync::confirm(fence);
            metrics::count(Counter::Renewals);
            let token = parsed.token.unwrap_or_default();
            granted(ctx, caller, names, token, fence, Stands::Extension)?;
        }
        AcquireMany::Renew { fence, renewals } => {
            // Renew is only decided for a caller-supplied token.
            let token = parsed.token.unwrap_or_default();
            for ((key, name), renewal) in opened.iter_mut().zip(names).zip(&renewals) {
                holds::renew(ctx, key, name, token, renewal, parsed.owner)?;
            }
            drop(opened);
            metrics::count(Counter::Renewals);
            for (name, renewal) in names.iter().zip(&renewals) {
                wait_queue::wake_at(ctx, db, name, renewal.wake_at_ms());
            }
            // A renewal is an extension: it stands whatever the replicas.
            granted(ctx, caller, names, token, fence, Stands::Extension)?;
        }
        AcquireMany::Grant { deadline_ms } => {
            let mut drawn = [0u8; UUID_LEN];
            let token = match parsed.token {
                Some(token) => token,
                None => token::draw(&mut drawn),
            };
            let grantee = Grantee {
                token,
                owner: parsed.owner,
                now_ms: caller.now_ms,
                deadline_ms,
                lease: caller.lease,
            };
            let fence = holds::grant(ctx, &mut opened, names, &grantee, caller.want)?;
            drop(opened);
            if names.len() > 1 {
                metrics::count(Counter::MultiGrants);
            }
            granted(ctx, caller, names, token, fence, Stands::Undone)?;
        }
    }
    Ok(())
}

/// `token` holds every key of `names` with `fence`: bound to the caller's
/// SESSION, then answered `[token, fence]` now, or with `SYNC` once that
/// many replicas hold the grant (`stands`: a new grant is undone, on every
/// key, if they do not in time). The grant's copy of every key name is made
/// only for `SYNC`, which keeps it until it is answered.
fn granted(
    ctx: &Context,
    caller: &Caller,
    names: &[RedisString],
    token: &[u8],
    fence: u64,
    stands: Stands,
) -> Result<(), LockError> {
    if let Some(client) = caller.session {
        for name in names {
            sessions::bind(ctx, client, caller.db, name, fence);
        }
    }
    let Some(sync) = caller.parsed.sync else {
        reply::grant(ctx, token, fence);
        return Ok(());
    };
    let keys: Few<&[u8]> = names.iter().map(|name| name.as_slice()).collect();
    let grant = Grant::new(caller.db, &keys, token, fence);
    let answer = Answer::Grant {
        token: token.into(),
        fence,
    };
    sync::block(ctx, sync, answer, stands, Some(grant))
}
