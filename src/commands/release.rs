//! `LOCK.RELEASE key token` → 1 when `token` held the key and the lock is now
//! gone (or handed to the first waiter); 0 otherwise, with nothing changed.

use redis_module::{Context, RedisString};

use crate::args::parse_release;
use crate::errors::LockError;
use crate::metrics::{self, Counter};
use crate::rules;
use crate::store::{self, LockKey};
use crate::token::UUID_LEN;
use crate::{effects, reply, waiting};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_release(args)?;
    super::refuse_local_write_on_replica(ctx)?;
    let name = &args[1];

    let mut key = LockKey::open_write(ctx, name);
    let held = key.lock()?;
    let mut holder = [0u8; UUID_LEN];
    if !rules::is_holder(
        held.map(|l| l.holder_token.bytes(&mut holder)),
        parsed.token,
    ) {
        metrics::count(Counter::StaleReleases);
        reply::integer(ctx, 0);
        return Ok(());
    }
    key.delete();
    drop(key);
    effects::released(ctx, name);
    metrics::count(Counter::Releases);
    // Within this command: the next holder's grant replicates right after
    // the release, and the key is never free while someone waits.
    let db = store::selected_db(ctx);
    if waiting::waiters(db, name.as_slice()) > 0 {
        waiting::hand_off(ctx, db, name.as_slice(), waiting::Cause::Release);
    }
    reply::integer(ctx, 1);
    Ok(())
}
