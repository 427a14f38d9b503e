//! Keyspace events the module listens to.

use redis_module::{Context, NotifyEvent};

use crate::fence;
use crate::store::LockKey;

/// After Redis has stored a `RESTORE`d key (also the target side of `MIGRATE`,
/// and a `RESTORE` replayed from the AOF or the replication stream): if it is a
/// lock, raise the fence high-water mark to its fence, so this server's later
/// fences stay above it.
///
/// This is not done in `rdb_load`, because Redis may still refuse the payload
/// after the module has decoded it (a bad EOF marker, say); a refused payload
/// must not move the fences.
pub fn on_generic_event(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    if event != "restore" {
        return;
    }
    let name = ctx.create_string(key);
    if let Ok(Some(lock)) = LockKey::open_read(ctx, &name).lock() {
        fence::observe(lock.fence);
    }
}
