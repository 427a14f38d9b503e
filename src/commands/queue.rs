//! `LOCK.QUEUE key [COUNT n]` → the clients waiting for `key`, in queue
//! order (at most `n`, default 10), each a map of `ttl` (the lease it asked
//! for), `waited` (ms so far), `timeout` (ms left, 0 for none), `client`
//! (its id, for `CLIENT KILL ID`), `mode` (`exclusive`, `shared`, or
//! `permits` for a semaphore, with `count`), `keys` (a multi-key waiter:
//! how many keys it waits for at once, which is why a free key can be kept
//! for it), and `owner` (when it gave one). Never a token. An empty array
//! when nobody waits.

use redis_lock_core::args::parse_queue;
use redis_lock_core::errors::LockError;
use redis_lock_core::hold::Want;
use redis_lock_core::rules;
use redis_module::{Context, RedisString};

use crate::redis::key::LockKey;
use crate::redis::reply::{self, Field};
use crate::redis::{self, server};
use crate::wait_queue;

pub fn run(ctx: &Context, args: &[RedisString]) -> Result<(), LockError> {
    let parsed = parse_queue(redis::args(args))?;
    // A key of another type is refused, as every lock command refuses it.
    LockKey::open_read(ctx, &args[1]).held()?;
    let queued = wait_queue::queued(server::selected_db(ctx), &args[1], parsed.count);
    let now_ms = server::now_ms();
    reply::array(ctx, queued.len());
    for waiter in &queued {
        let (mode, count) = (waiter.want.mode(), waiter.want.count());
        let mut fields = vec![
            (c"ttl", Field::Int(waiter.ttl_ms)),
            (c"waited", Field::Int((now_ms - waiter.queued_ms).max(0))),
            (
                c"timeout",
                Field::Int(rules::wait_left_ms(waiter.ends_ms, now_ms)),
            ),
            (c"client", Field::Int(waiter.client as i64)),
            (c"mode", Field::Bytes(mode)),
        ];
        if let Want::Permits { .. } = waiter.want {
            fields.push((c"count", Field::Int(i64::from(count))));
        }
        // Absent for a single key, as before multi-key requests.
        if waiter.keys > 1 {
            fields.push((c"keys", Field::Int(waiter.keys as i64)));
        }
        if let Some(owner) = waiter.owner.as_deref() {
            fields.push((c"owner", Field::Bytes(owner)));
        }
        reply::map(ctx, &fields);
    }
    Ok(())
}
