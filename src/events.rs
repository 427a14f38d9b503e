//! Keyspace events the module listens to.

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{Context, NotifyEvent};

use crate::store::LockKey;
use crate::{fence, waiting};

/// Every generic event (`del`, `restore`, `rename_from`, `expire`, …) and
/// eviction on any key. Redis calls this for every such event on every key,
/// so it returns at once unless the event is a `restore` or clients wait.
///
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
        if event == "restore" {
            let name = ctx.create_string(key);
            if let Ok(Some(lock)) = LockKey::open_read(ctx, &name).lock() {
                fence::observe(lock.fence);
            }
        }
        waiting::on_key_event(ctx, key);
    }));
}
