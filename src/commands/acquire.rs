//! `LOCK.ACQUIRE key ttl-ms [TOKEN token] [WAIT timeout-ms] [SESSION]
//! [OWNER label] [SHARED] [SYNC n timeout-ms] [LEASE id]` → `[token, fence]`, or null when the key is busy
//! (another holder, others queued before the caller, or a lock-delay after
//! an expiry). With `WAIT`, a busy key queues the caller instead (see
//! `waiting.rs`); with `SESSION`, the hold is also released when the
//! connection closes (see `sessions.rs`). `SEM.ACQUIRE` ([`run_sem`])
//! parses its own arguments and comes here too: one path for every kind of
//! hold.

use redis_lock_core::args::{parse_acquire, parse_sem_acquire, AcquireArgs};
use redis_lock_core::decide::{self, Acquire, AcquireCase};
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{self, Want};
use redis_lock_core::sync::Stands;
use redis_lock_core::token::{self, UUID_LEN};
use redis_module::{Context, RedisString};

use crate::lease::{self, Grantee};
use crate::metrics::{self, Counter};
use crate::redis::key::LockKey;
use crate::redis::{self, reply, server};
use crate::sync::{self, Answer, Grant};
use crate::waiting::{self, WaitRequest};
use crate::{config, expiry, groups, sessions};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_acquire(redis::args(args), config::max_ttl_ms())?;
    let want = if parsed.shared {
        Want::Shared
    } else {
        Want::Exclusive
    };
    acquire(ctx, &args[1], &parsed, want)
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
    acquire(ctx, &args[1], &parsed.lock, want)
}

/// The caller wants `want` of `name`: an exclusive lock, a read lease, or a
/// semaphore's permits.
fn acquire(
    ctx: &Context,
    name: &RedisString,
    parsed: &AcquireArgs,
    want: Want,
) -> Result<(), LockError> {
    super::refuse_local_write_on_replica(ctx)?;
    super::may_sync(ctx, parsed.sync)?;
    let session = super::session_of(ctx, parsed.session)?;
    let db = server::selected_db(ctx);
    let (key, now_ms) = super::open_write(ctx, name);
    let holds = key.held()?;
    hold::admits(want.family(), holds.kind())?;
    // `LEASE id`: a lease that is gone (or another server's) grants nothing.
    let lease = match &parsed.lease {
        Some(id) => Some(groups::attach_to(id, now_ms)?),
        None => None,
    };
    let state = holds.state(now_ms);
    let case = AcquireCase {
        key: state,
        mine: super::live_mine(&holds, parsed.token, now_ms),
        want,
        ttl_ms: parsed.ttl_ms,
        now_ms,
        others_waiting: waiting::waiters(db, name) > 0,
        // A lock-delay keeps everyone off a free key, readers and permits
        // too (the core reads it only for a free key).
        delayed_until_ms: expiry::delayed_until(db, name, now_ms),
        hold: config::hold_policy(),
        may_wait: parsed.wait_ms.is_some() && server::can_block(ctx),
        max_holders: config::max_holders(),
        lease,
    };
    drop(holds);
    let caller = Caller {
        parsed,
        want,
        session,
        db,
        now_ms,
        lease: lease.map(|a| a.number),
    };
    apply(ctx, key, name, &caller, decide::acquire(&case))
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

/// Execute the core's decision for `caller` on `name` (open as `key`): the
/// one place an ACQUIRE replies, queues, renews or grants.
fn apply(
    ctx: &Context,
    mut key: LockKey,
    name: &RedisString,
    caller: &Caller,
    decision: Result<Acquire, LockError>,
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
        Acquire::Refuse => {
            metrics::count(Counter::Refused);
            reply::null(ctx);
        }
        Acquire::Queue { wake_at_ms } => {
            drop(key);
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
            waiting::enqueue(ctx, db, name, &request, wake_at_ms)?;
        }
        Acquire::Held { fence } => {
            // Renewed by its lease group alone: its grant, nothing moved.
            drop(key);
            sync::confirm(fence);
            let token = parsed.token.unwrap_or_default();
            metrics::count(Counter::Renewals);
            if let Some(client) = caller.session {
                sessions::bind(ctx, client, db, name, fence);
            }
            match parsed.sync {
                Some(sync) => {
                    let answer = Answer::Grant {
                        token: token.into(),
                        fence,
                    };
                    sync::block(ctx, sync, answer, Stands::Extension, None)?;
                }
                None => reply::grant(ctx, token, fence),
            }
        }
        Acquire::Renew(renewal) => {
            // Renew is only decided for a caller-supplied token.
            let token = parsed.token.unwrap_or_default();
            lease::renew(ctx, &mut key, name, token, &renewal, parsed.owner)?;
            drop(key);
            metrics::count(Counter::Renewals);
            waiting::wake_at(ctx, db, name, renewal.wake_at_ms());
            if let Some(client) = caller.session {
                sessions::bind(ctx, client, db, name, renewal.fence);
            }
            match parsed.sync {
                // A renewal is an extension: it stands whatever the replicas.
                Some(sync) => {
                    let answer = Answer::Grant {
                        token: token.into(),
                        fence: renewal.fence,
                    };
                    sync::block(ctx, sync, answer, Stands::Extension, None)?;
                }
                None => reply::grant(ctx, token, renewal.fence),
            }
        }
        Acquire::Grant { deadline_ms } => {
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
            let fence = lease::grant(ctx, &mut key, name, &grantee, caller.want)?;
            drop(key);
            if let Some(client) = caller.session {
                sessions::bind(ctx, client, db, name, fence);
            }
            match parsed.sync {
                Some(sync) => {
                    let grant = Grant::new(db, &[name.as_slice()], token, fence);
                    let answer = Answer::Grant {
                        token: token.into(),
                        fence,
                    };
                    sync::block(ctx, sync, answer, Stands::Undone, Some(grant))?;
                }
                None => reply::grant(ctx, token, fence),
            }
        }
    }
    Ok(())
}
