//! `LOCK.GUARD key token command [arg ...]` → the guarded command's own reply,
//! when `token` holds `key`; otherwise `LOST …` and nothing runs. The check
//! and the command are one step on Redis' thread: no other client can run
//! between them, so the write lands only while the lease is live. The
//! command runs as the caller's ACL user, in the caller's protocol, and is
//! replicated as Redis replicates it (its effects), after the grant that
//! allowed it. It renews nothing and takes no fence.

use redis_lock_core::args::{parse_guard, GUARDED_COMMAND};
use redis_lock_core::decide;
use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use super::acquire::my_hold;
use crate::metrics::{self, Counter};
use crate::redis::key::{Held, LockKey};
use crate::redis::{self, call, server};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    // Redis asks where the keys are (ACL key patterns, Cluster routing,
    // `COMMAND GETKEYS`): the lock key and the guarded command's keys.
    if ctx.is_keys_position_request() {
        call::report_keys(ctx, args, GUARDED_COMMAND);
        return Ok(());
    }
    let parsed = parse_guard(redis::args(args))?;
    super::refuse_local_write_on_replica(ctx)?;
    let command = &args[GUARDED_COMMAND..];
    let flags = call::command_flags(ctx, command);
    let run = decide::guarded_command(&command[0], flags, server::in_script(ctx))?;

    let key = LockKey::open_read(ctx, &args[1]);
    let now_ms = server::now_ms();
    let allowed = match key.held()? {
        // A reader of a key held in shared mode may only read.
        Held::Shared(h) => decide::guard_shared(
            my_hold(&Held::Shared(h), Some(parsed.token), now_ms),
            h.count_live(now_ms),
        ),
        Held::Semaphore(_) => return Err(LockError::WrongType),
        Held::Free => decide::guard(None, parsed.token).map(|()| false),
        Held::Exclusive(lock) => decide::guard(Some(&lock), parsed.token).map(|()| false),
    };
    let read_only = match allowed {
        Ok(read_only) => read_only,
        Err(lost) => {
            metrics::count(Counter::GuardsLost);
            return Err(lost);
        }
    };
    drop(key);
    metrics::count(Counter::Guards);
    call::call_and_reply(ctx, command, run.script_mode, read_only);
    Ok(())
}
