//! What the server tells the module, and what the module does about it:
//! keyspace events, server events, the data type's hooks and the `INFO lock`
//! section. Like the commands, these are entry points: they decide through
//! the core and act through the state and flow files below them.

use std::ffi::CStr;

use redis_lock_core::decide::{self, Removal};
use redis_lock_core::hold::{Event, Holds, Kind};
use redis_lock_core::settings;
use redis_module::{Context, NotifyEvent};

use crate::redis::datatype::{self, Hooks, SavedLease, SpelledLease};
use crate::redis::events::ServerEvent;
use crate::redis::guard::guarded;
use crate::redis::key::LockKey;
use crate::redis::{replicate, server, timer};
use crate::state::metrics::{self, Counter};
use crate::state::{config, expiry, fence, lease_registry, revocations, sessions};
use crate::{holds, lease_groups, observers, sync, wait_queue};

/// The data type's hooks: the fence high-water mark in the RDB, and the
/// expiry note when Redis removes a key of the module's.
pub const TYPE_HOOKS: Hooks = Hooks {
    high_water: fence::high_water,
    observe_fence: fence::observe,
    removed,
    unlinked,
    lease_unlinked: lease_registry::detached_unlinked,
    lease_loaded: lease_registry::loaded,
    lease_deadline: lease_registry::deadline,
    leases,
    load_leases,
    lease_spelled,
};

/// Every lease group, for the RDB's aux field.
fn leases() -> Vec<SavedLease> {
    lease_registry::all()
        .into_iter()
        .map(|(number, lease)| SavedLease {
            id: lease.id.0,
            number,
            ttl_ms: lease.ttl_ms,
            deadline_ms: lease.deadline_ms,
            owner: lease.owner,
        })
        .collect()
}

/// The lease groups of a full load.
fn load_leases(saved: Vec<SavedLease>) {
    let leases = saved
        .into_iter()
        .map(|lease| {
            let state = lease_registry::LeaseState {
                id: redis_lock_core::group::LeaseId(lease.id),
                ttl_ms: lease.ttl_ms,
                deadline_ms: lease.deadline_ms,
                owner: lease.owner,
            };
            (lease.number, state)
        })
        .collect();
    lease_registry::replace_all(leases);
}

/// Lease group `number` as `LOCK.LEASESET` spells it, for an AOF rewrite.
fn lease_spelled(number: u64) -> Option<SpelledLease> {
    let state = lease_registry::state(number)?;
    let mut text = [0u8; redis_lock_core::group::LEASE_ID_LEN];
    Some(SpelledLease {
        id: state.id.text(&mut text).to_vec(),
        ttl_ms: state.ttl_ms,
        deadline_ms: state.deadline_ms,
        owner: state.owner,
    })
}

/// What Redis' removal of these holds means: the leases that had run out
/// (or were in their last millisecond: Redis 8 expires a key as its expiry
/// millisecond begins) count as expiries if the `expired` event follows,
/// and the lock-delay after them (`decide::removed`).
fn removed(holds: &Holds) -> Option<Removal> {
    let delay_ms = config::expiry_delay_ms();
    decide::removed(holds, server::now_ms(), delay_ms, server::is_replica())
}

/// A key whose leases ran out is leaving the keyspace (not by the module's
/// own hand): note it for the `expired` event, and start its lock-delay now.
/// The delay cannot wait for that event: inside a command (an ACQUIRE that
/// opens the key and so expires it), Redis 8.2 may deliver the event only
/// after the command has replied, which would let the ACQUIRE grant the key
/// during the delay. A provisional delay (a lease removed in its last
/// millisecond) ends again if the event is not `expired` (see `state/expiry.rs`).
fn unlinked(db: i32, key: &[u8], kind: Kind, removal: Removal) {
    expiry::note_unlinked(db, key, kind, removal, server::now_ms());
}

/// Every generic event (`del`, `restore`, `rename_from`, `move_from`,
/// `expire`, …) and eviction on any key. Redis calls this for every such
/// event on every key; only `restore`, `expire`, `persist`, `rename_to` and
/// `move_to` look the key up (one dictionary lookup), and only keys that
/// clients wait for do more.
///
/// - `expire`, `persist`, `restore` on a lock: keep the lock's copy of its
///   deadline equal to the key's TTL (see `redis/key.rs`).
/// - `rename_to`, `move_to`, `restore`: the key arrived under this name (in
///   this database), and Redis unlinked it from the old one, which detached
///   its holds from their lease groups: they are attached again here
///   (`lease_registry::arrived`), so they still end with their lease, are kept by
///   its keepalive and shown by `LOCK.LEASE INFO` under the new name. A
///   restored copy of a hold its lease has under another key is detached
///   instead (`lease_registry::take_copies`): it lives to its own deadline.
/// - Any other event: an unlinked lock was not an expiry.
/// - `restore` (also the target side of `MIGRATE`, and a `RESTORE` replayed
///   from the AOF or the replication stream): if the key is a lock, raise the
///   fence high-water mark to its fence, so this server's later fences stay
///   above it. This is not done in `rdb_load`, because Redis may still refuse
///   the payload after the module decoded it; a refused payload must not move
///   the fences.
/// - Any event on a key that clients wait for: it may have become free.
/// - `del` of a key that clients wait for (or observe), in cluster mode: if
///   this node migrates the key's slot out (`MIGRATE` deleted it after
///   sending it to the target of a `CLUSTER SETSLOT … MIGRATING`) or no
///   longer serves it, the lock is the target's now: its clients here are
///   answered with a redirect (`ASK`, `MOVED`), never granted here. Only
///   then is `CLUSTER NODES` read; never outside cluster mode.
pub fn on_key_event(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    guarded(|| {
        match event {
            "restore" => {
                let name = crate::redis::string(ctx, key);
                let lock_key = LockKey::open_read(ctx, &name);
                if let Ok(holds) = lock_key.held() {
                    holds.all().for_each(|hold| fence::observe(hold.fence));
                }
                let db = server::selected_db(ctx);
                for copy in lease_registry::take_copies(db, key) {
                    lease_registry::detached(db, key, copy.fence, copy.number);
                    lock_key.detach_lease(copy.fence, copy.number, copy.lease_deadline_ms);
                }
                follow_ttl(ctx, &lock_key, key);
                if let Ok(holds) = lock_key.held() {
                    lease_registry::arrived(db, key, &holds);
                }
            }
            "rename_to" | "move_to" => {
                let name = crate::redis::string(ctx, key);
                if let Ok(holds) = LockKey::open_read(ctx, &name).held() {
                    lease_registry::arrived(server::selected_db(ctx), key, &holds);
                }
            }
            // A TTL changed by a client (`PEXPIRE`, `PERSIST`; also Redis'
            // own `PEXPIREAT` after each lock in a rewritten AOF).
            "expire" | "persist" => {
                let name = crate::redis::string(ctx, key);
                follow_ttl(ctx, &LockKey::open_read(ctx, &name), key);
            }
            _ => {}
        }
        if event != "expire" && event != "persist" {
            expiry::forget_note();
        }
        let db = server::selected_db(ctx);
        let waited = wait_queue::waiters(db, key) > 0;
        if event == "del" && (waited || observers::observing(db, key)) {
            if let Some(error) = wait_queue::redirect_if_elsewhere(ctx, key) {
                wait_queue::redirect(ctx, db, key, &error);
                return;
            }
        }
        if waited {
            // Observers hear of it after the hand-off (see `wait_queue/`).
            wait_queue::look_again(ctx, db, key);
        } else if observers::total() > 0 {
            observers::changed(ctx, db, &crate::redis::string(ctx, key));
        }
    });
}

/// A client changed the TTL of a lock key (`PEXPIRE`, `PERSIST`, `RESTORE`
/// with a TTL of its own). A lock's value takes the key's TTL as its
/// deadline (see `redis/key.rs`). A key with several holders keeps a
/// deadline per holder, and its TTL must stay the latest of them, or an
/// empty holder set would outlive its last lease (after a `PERSIST`, for
/// good): a key written from inside an event is not allowed, so a timer due
/// now puts it back.
fn follow_ttl(ctx: &Context, key: &LockKey, name: &[u8]) {
    key.mirror_deadline();
    if key.ttl_strayed() && server::is_master(ctx) {
        let db = server::selected_db(ctx);
        timer::start(ctx, 0, (db, Box::<[u8]>::from(name)), holders_ttl);
    }
}

/// The timer of [`follow_ttl`]: holders whose lease ran out go, and the
/// key's TTL is its latest holder's deadline again, replicated as
/// `PEXPIREAT`.
fn holders_ttl(ctx: &Context, (db, key): (i32, Box<[u8]>)) {
    if !server::is_master(ctx) {
        return;
    }
    server::select_db(ctx, db);
    let name = crate::redis::string(ctx, &key);
    let mut lock_key = LockKey::open_write(ctx, &name);
    holds::expire(ctx, &mut lock_key, &name, server::now_ms());
    holds::follow_latest_holder(ctx, &mut lock_key, &name);
}

/// Redis' `expired` keyspace event, for any key: if it is the lock just
/// noted by the unlink hook, its lease ran out while held: count it,
/// announce it (its lock-delay started as it was unlinked).
pub fn on_expired(ctx: &Context, _class: NotifyEvent, _event: &str, key: &[u8]) {
    guarded(|| {
        let db = server::selected_db(ctx);
        // Any key's expiry comes here: only a noted lease goes further.
        let Some(removed) = expiry::take_note(db, key, server::now_ms()) else {
            return;
        };
        let name = crate::redis::string(ctx, key);
        let event = removed.kind.event(Event::Expired);
        for _ in 0..removed.expiries {
            metrics::count(Counter::Expiries);
            replicate::notify(ctx, event, &name);
        }
        if wait_queue::waiters(db, key) > 0 {
            // Hand the key over from a timer due now, and only then tell its
            // observers: they see the next holder, never the instant between
            // (Redis' own expiry cycle may run before the hand-off timer).
            // When the hand-off itself expired it, opening the key, it grants
            // the key right after: no timer.
            wait_queue::lease_expired(db, key);
            wait_queue::look_again(ctx, db, key);
        } else {
            observers::changed(ctx, db, &name);
        }
    });
}

/// Server events (see `redis/events.rs`).
pub fn on_server_event(ctx: &Context, event: ServerEvent) {
    match event {
        // A flush frees every key of the flushed databases and ends their
        // lock-delays; a swap changes what every key of both databases
        // holds. The queues belong to database numbers, as their clients
        // do: serve each as soon as its key is free there.
        ServerEvent::Flushed { db } => {
            expiry::forget(db);
            lease_registry::flushed(db);
            revocations::forget(db);
            wait_queue::look_again_in(ctx, db);
            observers::changed_in(ctx, db);
        }
        ServerEvent::Swapped { a, b } => {
            lease_registry::swapped(a, b);
            wait_queue::look_again_in(ctx, Some(a));
            wait_queue::look_again_in(ctx, Some(b));
            observers::changed_in(ctx, Some(a));
            observers::changed_in(ctx, Some(b));
        }
        ServerEvent::RoleChanged { now_replica } => {
            server::set_replica(now_replica);
            if now_replica {
                wait_queue::demoted(ctx);
                sync::demoted(ctx);
                lease_groups::demoted(ctx);
            } else {
                lease_groups::tick(ctx);
            }
        }
        ServerEvent::ClientClosed { client } => {
            if let Some(bound) = sessions::take(client) {
                wait_queue::session_closed(ctx, bound);
            }
        }
        // A master with lease groups and no lease timer (after a load, or a
        // promotion) arms one.
        ServerEvent::Cron => lease_groups::tick(ctx),
        // Clients waiting for their replicas (`SYNC`) whose acknowledgement
        // came in this turn are answered in it, as `WAIT`'s are.
        ServerEvent::BeforeSleep => sync::before_sleep(ctx),
        ServerEvent::ConfigChanged { names } => {
            if names
                .iter()
                .any(|name| name.to_bytes().eq_ignore_ascii_case(b"maxmemory-policy"))
            {
                check_eviction_policy(ctx);
            }
        }
    }
}

/// Warn, and flag it in `INFO lock`, when `maxmemory-policy` can evict lock
/// keys: an evicted lock is free at once, before its lease ran out, so two
/// clients can hold it. The module still grants (refusing would turn memory
/// pressure into a lock outage the operator did not ask for); the operator
/// is told, in the log and in `lock_eviction_risk`.
pub fn check_eviction_policy(ctx: &Context) {
    let Some(policy) = server::config_get(ctx, "maxmemory-policy") else {
        return;
    };
    let at_risk = settings::policy_evicts_locks(&policy);
    metrics::set_eviction_risk(at_risk);
    if at_risk {
        server::log_warning(&format!(
            "redis-lock: maxmemory-policy is {policy}: under memory pressure Redis may evict \
             lock keys before their lease ends, and then two clients can hold the same lock. \
             Use maxmemory-policy noeviction on a lock server."
        ));
    }
}

/// The `lock` section of `INFO`: gauges, then every counter. Redis prefixes
/// each field with the module name: `lock_grants:12`.
pub fn info_fields() -> Vec<(&'static CStr, i64)> {
    let gauges = [
        (c"locks", datatype::live_values()),
        (c"waiters", wait_queue::total_waiters() as i64),
        (c"observers", observers::total() as i64),
        (c"sync_waiting", sync::waiting() as i64),
        (c"leases", lease_registry::live() as i64),
        (c"fence_high_water", fence::high_water() as i64),
        (c"eviction_risk", i64::from(metrics::eviction_risk())),
        // Whether anything (AOF, replica, backlog) reads the effects, and how
        // many were not built because nothing did (`redis/replicate.rs`).
        (c"propagation_read", i64::from(replicate::is_read())),
        (c"effects_unbuilt", replicate::unbuilt() as i64),
    ];
    gauges.into_iter().chain(metrics::counters()).collect()
}
