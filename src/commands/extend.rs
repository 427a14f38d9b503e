//! `LOCK.EXTEND key token ttl-ms` → 1 when `token` holds the key and its lease
//! now ends `ttl-ms` from now; 0 otherwise, with nothing changed.

use redis_module::{Context, RedisString};

use crate::args::parse_extend;
use crate::errors::LockError;
use crate::rules;
use crate::store::{self, LockKey};
use crate::token::UUID_LEN;
use crate::{effects, reply, waiting};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_extend(args)?;
    super::refuse_local_write_on_replica(ctx)?;
    let name = &args[1];
    let deadline_ms = rules::deadline_ms(store::now_ms(), parsed.ttl_ms)?;

    let key = LockKey::open_write(ctx, name);
    let held = key.lock()?;
    let mut holder = [0u8; UUID_LEN];
    if rules::is_holder(
        held.map(|l| l.holder_token.bytes(&mut holder)),
        parsed.token,
    ) {
        key.set_deadline(Some(deadline_ms));
        drop(key);
        effects::deadline_moved(ctx, name, deadline_ms);
        // A shorter lease brings the handoff to waiters forward.
        waiting::wake_at(ctx, store::selected_db(ctx), name.as_slice(), deadline_ms);
        reply::integer(ctx, 1);
    } else {
        reply::integer(ctx, 0);
    }
    Ok(())
}
