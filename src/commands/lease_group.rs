//! Lease groups and revocation.
//!
//! - `LOCK.LEASE GRANT ttl-ms [OWNER label]` → the new lease's id, a secret
//!   like a token.
//! - `LOCK.LEASE KEEPALIVE id` → 1 when the lease lives (it now ends `ttl-ms`
//!   from now, and so does every hold attached to it), 0 when it is gone.
//! - `LOCK.LEASE END id` → how many holds it ended: the holder's own end of
//!   its lease, each hold released as its `LOCK.RELEASE` would release it
//!   (not `@dangerous`: whoever has the id keeps the holds alive anyway).
//! - `LOCK.LEASE REVOKE id` → how many holds it ended, each released as
//!   `LOCK.RELEASE` would release it and marked revoked (`lease revoked`):
//!   an operator's command.
//! - `LOCK.LEASE INFO id` → null when gone, else a map of `lease` (its public
//!   number, which `LOCK.INFO` shows on its holds), `ttl`, `deadline`,
//!   `owner` (when labelled), `holds` and `keys` (up to 100).
//! - `LOCK.REVOKE key [REASON text]` → how many holds of `key` it ended (0
//!   when free), each released as a release would, waiters served, and the
//!   old token told `REVOKED <reason>` by `LOCK.EXTEND` and `LOCK.GUARD`
//!   until its hold would have ended anyway.
//! - `LOCK.LEASE HELP` → the subcommands, one line each and a line of
//!   description, as Redis' own container commands answer `HELP`.
//!
//! What a lease is and how it ends its holds: `lease_groups.rs`.

use redis_lock_core::args::{parse_lease_grant, parse_lease_help, parse_lease_id, parse_revoke};
use redis_lock_core::errors::LockError;
use redis_lock_core::group::LEASE_ID_LEN;
use redis_lock_core::rules;
use redis_lock_core::token::UUID_LEN;
use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::redis::reply::{self, Field};
use crate::redis::{self, server};
use crate::state::{config, lease_registry, revocations};
use crate::{lease_groups, wait_queue};

/// Keys `LOCK.LEASE INFO` lists at most.
const MAX_SHOWN_KEYS: usize = 100;

pub fn run_grant(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_lease_grant(redis::args(args), config::max_ttl_ms())?;
    super::refuse_local_write_on_replica(ctx)?;
    let id = lease_groups::grant(ctx, parsed.ttl_ms, parsed.owner)?;
    let mut text = [0u8; LEASE_ID_LEN];
    reply::bytes(ctx, id.text(&mut text));
    Ok(())
}

pub fn run_keepalive(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let id = parse_lease_id(redis::args(args))?;
    super::refuse_local_write_on_replica(ctx)?;
    let alive = lease_groups::keepalive(ctx, &id)?;
    reply::integer(ctx, i64::from(alive));
    Ok(())
}

pub fn run_end_lease(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let id = parse_lease_id(redis::args(args))?;
    super::refuse_local_write_on_replica(ctx)?;
    let ended = lease_groups::end_own(ctx, &id);
    reply::integer(ctx, ended as i64);
    Ok(())
}

/// What `LOCK.LEASE HELP` answers: each subcommand, then what it does.
const HELP: &[&CStr] = &[
    c"LOCK.LEASE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    c"GRANT <ttl-ms> [OWNER <label>]",
    c"    Grant a lease of ttl-ms; reply its id, a secret. LEASE <id> on an acquire attaches a hold to it.",
    c"KEEPALIVE <id>",
    c"    The lease and every hold attached to it now end ttl-ms from now: 1, or 0 when it is gone.",
    c"END <id>",
    c"    End your lease: release every hold attached to it, waiters served. Reply how many.",
    c"REVOKE <id>",
    c"    An operator's: end the lease, its holds released and marked revoked. Reply how many.",
    c"INFO <id>",
    c"    The lease's number, ttl, deadline, label, holds and keys; null when it is gone.",
    c"HELP",
    c"    Print this help.",
];

pub fn run_lease_help(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    parse_lease_help(redis::args(args))?;
    reply::lines(ctx, HELP);
    Ok(())
}

pub fn run_revoke_lease(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let id = parse_lease_id(redis::args(args))?;
    super::refuse_local_write_on_replica(ctx)?;
    let ended = lease_groups::revoke(ctx, &id);
    reply::integer(ctx, ended as i64);
    Ok(())
}

pub fn run_lease_info(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let id = parse_lease_id(redis::args(args))?;
    let now_ms = server::now_ms();
    let Some(shown) = lease_registry::shown(&id, MAX_SHOWN_KEYS) else {
        reply::null(ctx);
        return Ok(());
    };
    let keys: Vec<&[u8]> = shown.keys.iter().map(|(_, key)| &**key).collect();
    let mut fields = vec![
        (c"lease", Field::Int(shown.number as i64)),
        (
            c"ttl",
            Field::Int(rules::ms_left(Some(shown.deadline_ms), now_ms)),
        ),
        (c"deadline", Field::Int(shown.deadline_ms)),
        (c"lease_ttl", Field::Int(shown.ttl_ms)),
        (c"holds", Field::Int(shown.holds as i64)),
        (c"keys", Field::List(&keys)),
    ];
    if let Some(owner) = shown.owner.as_deref() {
        fields.push((c"owner", Field::Bytes(owner)));
    }
    reply::map(ctx, &fields);
    Ok(())
}

pub fn run_revoke(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let reason = parse_revoke(redis::args(args))?.unwrap_or(revocations::NO_REASON);
    super::refuse_local_write_on_replica(ctx)?;
    let name = &args[1];
    let db = server::selected_db(ctx);
    let (key, now_ms) = super::open_write(ctx, name);
    let holds = key.held()?;
    let Some(kind) = holds.kind() else {
        drop(holds);
        reply::integer(ctx, 0);
        return Ok(());
    };
    // Every live hold, with the end it would have had: its lease group's,
    // or its own (none: never, and the mark lasts as long as marks can).
    let revoked: Vec<(Vec<u8>, u64, i64)> = holds
        .live(now_ms)
        .map(|hold| {
            let mut buffer = [0u8; UUID_LEN];
            let until = lease_registry::shown_deadline(hold).unwrap_or(i64::MAX);
            (hold.token(&mut buffer).to_vec(), hold.fence, until)
        })
        .collect();
    drop(holds);
    for (token, fence, until) in &revoked {
        revocations::mark(db, name, token, *fence, *until, reason);
    }
    let tokens: Vec<&[u8]> = revoked
        .iter()
        .map(|(token, _, _)| token.as_slice())
        .collect();
    wait_queue::revoke(ctx, db, key, name, kind, &tokens);
    reply::integer(ctx, revoked.len() as i64);
    Ok(())
}
