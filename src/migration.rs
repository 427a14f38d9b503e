//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`), as the module
//! takes part in it. Valkey refuses the command while a loaded module has not
//! declared that it handles it; the module declares it at load on Valkey 9
//! and newer ([`declare`]), and keeps that promise as follows.
//!
//! - On the source, the slots' keys go to the target as the AOF rewrite of
//!   each (`LOCK.SETSTATE` or `LOCK.SETHOLDER` with token, fence and absolute
//!   deadline, then Valkey's `PEXPIREAT`), then every change to them as the
//!   effects the module replicates anyway. Grants and hand-offs go on here
//!   meanwhile; while Valkey pauses writes for the hand-over, the module's
//!   timers wait (`server::writes_paused`).
//! - On the target, those effects arrive from the import client, which
//!   `LOCK.SETSTATE`, `SETHOLDER` and `DELHOLDER` accept as from a master
//!   (`server::is_replicated_or_loading`); each raises the fence high-water
//!   mark to the fences it carries, so the target's later fences are above
//!   every migrated one. Valkey hides the keys until the import completes,
//!   and deletes them if it is aborted.
//! - When the export completes, the keys of those slots are the target's:
//!   Valkey deletes them here. Each client waiting here for one of them
//!   (`LOCK.ACQUIRE`/`SEM.ACQUIRE … WAIT`, `LOCK.OBSERVE`) is answered at
//!   once with `MOVED <slot> <target>` (as Valkey answers `BLPOP`), which
//!   cluster clients follow to queue again there; their hand-off and
//!   deadline timers stop, and lock-delays of those keys end ([`on_event`]).
//!   Before that moment nothing has left: an aborted export changes nothing.
//! - Where the server tells nothing, the module looks itself: a hand-off
//!   from a timer (a lease that ran out, a deleted key) first checks that
//!   this node still serves the key's slot, and redirects the waiters if
//!   not (a source whose hand-over pause ran out before it heard of the new
//!   owner ends its export as aborted, and loses the slot later); an observed
//!   key that leaves a replica of the source (by its master's `DEL`)
//!   redirects its observers if the replica knows the new owner by then.

use std::collections::HashMap;
use std::ffi::CString;

use redis_module::Context;

use crate::redis::migration::{self, Migration, Phase, Support};
use crate::redis::server;
use crate::state::expiry;
use crate::{observers, wait_queue};

/// Declare, together with the module's other `options`, that the module
/// handles atomic slot migration, where the server has it (Valkey 9 and
/// newer); elsewhere set `options` alone.
pub fn declare(ctx: &Context, options: i32) {
    match migration::support(ctx) {
        Support::Available => {
            migration::declare(ctx, options, on_event);
            if migration::declared() {
                server::log_notice(
                    "redis-lock: declared support for atomic slot migration (CLUSTER MIGRATESLOTS)",
                );
            } else {
                server::log_warning(
                    "redis-lock: could not subscribe to slot migration events: \
                     CLUSTER MIGRATESLOTS stays refused while this module is loaded",
                );
            }
        }
        Support::Lacking(what) => server::log_warning(&format!(
            "redis-lock: this Valkey lacks {what}: atomic slot migration not declared, \
             CLUSTER MIGRATESLOTS stays refused while this module is loaded"
        )),
        Support::NotHere => {}
    }
}

/// A migration event (see `redis/migration.rs`).
fn on_event(ctx: &Context, event: Migration) {
    let what = match event.phase {
        Phase::ExportStarted => "export started",
        Phase::ExportAborted => "export aborted",
        Phase::ImportStarted => "import started",
        Phase::ImportCompleted => "import completed",
        Phase::ImportAborted => "import aborted",
        Phase::ExportCompleted => "",
    };
    if event.phase != Phase::ExportCompleted {
        server::log_notice(&format!(
            "redis-lock: slot migration {what}: slots {}",
            ranges_text(&event.slots)
        ));
        return;
    }
    let (waiters, observers) = moved_away(ctx, &event.slots);
    server::log_notice(&format!(
        "redis-lock: slots {} moved to another node: {waiters} waiting and {observers} \
         observing clients answered with a redirect",
        ranges_text(&event.slots)
    ));
}

/// The keys of `slots` are another node's now: answer their waiters and
/// observers with a redirect to it, end their lock-delays. Returns how many
/// waiters and observers were answered.
fn moved_away(ctx: &Context, slots: &[(u16, u16)]) -> (usize, usize) {
    let in_slots = |slot: u16| slots.iter().any(|&(a, b)| a <= slot && slot <= b);
    let mut redirects: HashMap<u16, CString> = HashMap::new();
    let mut redirect = |key: &[u8]| {
        let slot = migration::slot_of(ctx, key);
        in_slots(slot).then(|| {
            redirects
                .entry(slot)
                .or_insert_with(|| migration::redirect(ctx, slot))
                .clone()
        })
    };
    let waiters = wait_queue::moved_away(ctx, &mut redirect);
    let observers = observers::moved_away(ctx, &mut redirect);
    expiry::forget_where(|key| in_slots(migration::slot_of(ctx, key)));
    (waiters, observers)
}

fn ranges_text(slots: &[(u16, u16)]) -> String {
    slots
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::ranges_text;

    #[test]
    fn ranges_read_as_valkey_writes_them() {
        assert_eq!(ranges_text(&[(5, 5), (10, 20)]), "5,10-20");
        assert_eq!(ranges_text(&[]), "");
    }
}
