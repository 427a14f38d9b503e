//! Keyspace events the module listens to.

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{Context, NotifyEvent};

use crate::store::LockKey;
use crate::{expiry, fence, waiting};

/// Every generic event (`del`, `restore`, `rename_from`, `expire`, …) and
/// eviction on any key. Redis calls this for every such event on every key;
/// only `restore`, `expire` and `persist` look the key up (one dictionary
/// lookup), and only keys that clients wait for do more.
///
/// - `expire`, `persist`, `restore` on a lock: keep the lock's copy of its
///   deadline equal to the key's TTL (see [`crate::expiry`]).
/// - Any other event: an unlinked lock was not an expiry.
/// - `restore` (also the target side of `MIGRATE`, and a `RESTORE` replayed
///   from the AOF or the replication stream): if the key is a lock, raise the
///   fence high-water mark to its fence, so this server's later fences stay
///   above it. This is not done in `rdb_load`, because Redis may still refuse
///   the payload after the module decoded it; a refused payload must not move
///   the fences.
/// - Any event on a key that clients wait for: it may have become free (see
///   [`waiting::on_key_event`]).
pub fn on_key_event(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    // Nothing here can panic today; a bug must still stop here.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        match event {
            "restore" => {
                let name = ctx.create_string(key);
                let lock_key = LockKey::open_read(ctx, &name);
                if let Ok(Some(lock)) = lock_key.lock() {
                    fence::observe(lock.fence);
                }
                lock_key.mirror_deadline();
            }
            // A TTL changed by a client (`PEXPIRE`, `PERSIST`; also Redis'
            // own `PEXPIREAT` after each lock in a rewritten AOF).
            "expire" | "persist" => {
                LockKey::open_read(ctx, &ctx.create_string(key)).mirror_deadline();
            }
            _ => {}
        }
        if event != "expire" && event != "persist" {
            expiry::forget_noted();
        }
        waiting::on_key_event(ctx, key);
    }));
}
