//! `LOCK.EXTEND key token ttl-ms` → 1 when `token` holds the key and its lease
//! now ends `ttl-ms` from now; 0 otherwise, with nothing changed. A `LIMIT`
//! error when `lock.max-hold-ms` or `lock.max-extends` forbids the extension
//! (the lease is left as it was).

use redis_module::{Context, RedisString};

use crate::args::parse_extend;
use crate::errors::LockError;
use crate::grant::extend_lease;
use crate::metrics::{self, Counter};
use crate::store::LockKey;
use crate::token::UUID_LEN;
use crate::{config, reply, rules};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_extend(args)?;
    super::refuse_local_write_on_replica(ctx)?;
    rules::check_ttl_limit(parsed.ttl_ms, config::max_ttl_ms())?;
    let name = &args[1];

    let mut key = LockKey::open_write(ctx, name);
    let held = key.lock()?;
    let mut holder = [0u8; UUID_LEN];
    if !rules::is_holder(
        held.map(|l| l.holder_token.bytes(&mut holder)),
        parsed.token,
    ) {
        metrics::count(Counter::StaleExtends);
        reply::integer(ctx, 0);
        return Ok(());
    }
    extend_lease(ctx, &mut key, name, parsed.token, parsed.ttl_ms)?;
    metrics::count(Counter::Extends);
    reply::integer(ctx, 1);
    Ok(())
}
