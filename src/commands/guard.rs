//! `LOCK.GUARD key token [SYNC numreplicas timeout-ms] command [arg ...]` →
//! the guarded command's own reply (with `SYNC`, once that many replicas
//! hold what it did),
//! when `token` holds `key`; otherwise `LOST …` (`REVOKED <reason>` when its
//! hold was revoked) and nothing runs. The check
//! and the command are one step on Redis' thread: no other client can run
//! between them, so the write lands only while the lease is live. The
//! command runs as the caller's ACL user, in the caller's protocol, and is
//! replicated as Redis replicates it (its effects), after the grant that
//! allowed it. It renews nothing and takes no fence.

use redis_lock_core::args::{guarded_command_at, parse_guard};
use redis_lock_core::decide;
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::{self, Family};
use redis_lock_core::sync::Stands;
use redis_module::{Context, RedisString};

use crate::redis::key::LockKey;
use crate::redis::{self, call, reply, server};
use crate::state::lease_registry;
use crate::state::metrics::{self, Counter};
use crate::sync::{self, Answer};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    guard(ctx, args, Access::Write)
}

/// `LOCK.GUARD_RO`: the same check, for a command that only reads. It is a
/// read command itself, so it also runs where writes are refused (a
/// replica, `CLIENT PAUSE WRITE`, `min-replicas-to-write` not met, and
/// inside `EVAL_RO`/`FCALL_RO`); on a replica it checks the replica's copy of
/// the lock, which lags its master's (docs/commands.md).
pub fn run_ro(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    guard(ctx, args, Access::Read)
}

/// What the guarded command may do: anything the holder's mode allows, or
/// only read (`LOCK.GUARD_RO`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Write,
    Read,
}

fn guard(ctx: &Context, args: &[RedisString], access: Access) -> Result<(), LockError> {
    // Redis asks where the keys are (ACL key patterns, Cluster routing,
    // `COMMAND GETKEYS`): the lock key and the guarded command's keys.
    if ctx.is_keys_position_request() {
        call::report_keys(ctx, args, guarded_command_at(redis::args(args)));
        return Ok(());
    }
    let parsed = parse_guard(redis::args(args))?;
    match access {
        Access::Write => super::refuse_local_write_on_replica(ctx)?,
        // A read replicates nothing to wait for.
        Access::Read if parsed.sync.is_some() => return Err(LockError::SyncReadOnly),
        Access::Read => {}
    }
    super::may_sync(ctx, parsed.sync)?;
    let command = &args[parsed.command_at..];
    let flags = call::command_flags(ctx, command);
    let words = redis::args(command);
    let run = decide::guarded_command(&command[0], &words[1..], flags, server::in_script(ctx))?;

    let key = LockKey::open_read(ctx, &args[1]);
    let now_ms = server::now_ms();
    let holds = key.held()?;
    // A semaphore's permits guard nothing: WRONGTYPE.
    hold::admits(Family::Lock, holds.kind())?;
    let mine = super::live_mine(&holds, Some(parsed.token), now_ms);
    // A leased hold whose lease ran out is nobody's, the caller's too
    // (on a replica, until its master's effects end it): not "another
    // token".
    let allowed = decide::guard(mine, lease_registry::count_live(&holds, now_ms));
    drop(holds);
    let read_only = match allowed {
        Ok(read_only) => {
            // The guarded command runs: its token is told it holds the key.
            if let Some(mine) = mine {
                sync::confirm(mine.fence);
            }
            read_only || access == Access::Read
        }
        Err(lost) => {
            metrics::count(Counter::GuardsLost);
            // Taken away: `REVOKED <reason>`, not `LOST`.
            if matches!(lost, LockError::LostFree | LockError::LostOther) {
                if let Some(revoked) = super::revoked(ctx, &args[1], parsed.token, now_ms) {
                    reply::error_text(ctx, &revoked);
                    return Ok(());
                }
            }
            return Err(lost);
        }
    };
    drop(key);
    metrics::count(Counter::Guards);
    let name = if read_only {
        run.name_for_reader()
    } else {
        None
    };
    let Some(sync) = parsed.sync else {
        call::call_and_reply(ctx, command, name, run.script_mode, read_only);
        return Ok(());
    };
    // Answered once the replicas hold what the command did; at once if it
    // failed or only read (it replicated nothing).
    let reply = call::call(ctx, command, name, run.script_mode, read_only)?;
    if !decide::guard_sync_waits(flags, &run, reply.is_error()) {
        reply.reply(ctx);
        return Ok(());
    }
    // Sent after this command has returned: copied now, and the server's
    // reply freed here, while the context it points into still lives.
    let answer = Answer::Call(reply.keep());
    sync::block(ctx, sync, answer, Stands::Guarded, None)
}
