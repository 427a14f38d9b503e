//! `LOCK.EXTEND key token ttl-ms` → 1 when `token` holds the key and its lease
//! now ends `ttl-ms` from now; 0 otherwise, with nothing changed. A `LIMIT`
//! error when `lock.max-hold-ms` or `lock.max-extends` forbids the extension
//! (the lease is left as it was).

use redis_lock_core::args::parse_extend;
use redis_lock_core::decide::{self, Extend};
use redis_lock_core::errors::LockError;
use redis_module::{Context, RedisString};

use crate::metrics::{self, Counter};
use crate::redis::key::LockKey;
use crate::redis::{self, reply, server};
use crate::{config, lease, waiting};

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_extend(redis::args(args), config::max_ttl_ms())?;
    super::refuse_local_write_on_replica(ctx)?;
    let name = &args[1];

    let mut key = LockKey::open_write(ctx, name);
    let decision = decide::extend(
        key.lock()?,
        parsed.token,
        parsed.ttl_ms,
        server::now_ms(),
        config::hold_policy(),
    );
    match decision {
        Ok(Extend::NotHolder) => {
            metrics::count(Counter::StaleExtends);
            reply::integer(ctx, 0);
        }
        Ok(Extend::Renewed(renewal)) => {
            lease::renew(ctx, &mut key, name, parsed.token, &renewal, None)?;
            drop(key);
            // A shorter lease brings the hand-off to waiters forward.
            waiting::wake_at(ctx, server::selected_db(ctx), name, renewal.wake_at_ms());
            metrics::count(Counter::Extends);
            reply::integer(ctx, 1);
        }
        Err(error @ (LockError::HoldLimit | LockError::ExtendLimit)) => {
            metrics::count(Counter::ExtendsLimited);
            return Err(error);
        }
        Err(error) => return Err(error),
    }
    Ok(())
}
