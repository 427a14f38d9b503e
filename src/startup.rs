//! What happens once, when Redis loads the module.

use redis_module::{Context, ModuleOptions, RedisString, Status};

use crate::redis::acl::{self, AclSupport};
use crate::redis::{datatype, events, guard, info, server, timer};
use crate::{config, events as handlers, migration};

/// The oldest server the module runs on: it needs the 7.0 module API
/// (absolute expiry, RESP3 map replies, module configs).
const MIN_SERVER: (i32, i32, i32) = (7, 0, 0);

/// The module's own ACL category, `@lock`, on servers that can add one.
const LOCK_CATEGORY: &str = "lock";

/// Each command's ACL categories (its flags are in `lib.rs`' table), and
/// whether it is in `@lock` too. Redis puts each of its own commands in
/// `@fast` or `@slow`; so do these. `LOCK.SETSTATE`, `LOCK.SETHOLDER` and
/// `LOCK.DELHOLDER` are internal (replication and the AOF): they are not in
/// `@lock`, and they are `@dangerous` like `RESTORE`, which can forge a key's
/// state the same way.
const COMMAND_CATEGORIES: &[(&str, &str, bool)] = &[
    ("lock.acquire", "write fast blocking", true),
    ("lock.extend", "write fast", true),
    ("lock.release", "write fast", true),
    ("lock.guard", "write slow", true),
    ("lock.guard_ro", "read slow", true),
    ("lock.info", "read fast", true),
    ("lock.queue", "read fast", true),
    ("lock.observe", "read slow blocking", true),
    ("sem.acquire", "write fast blocking", true),
    ("sem.extend", "write fast", true),
    ("sem.release", "write fast", true),
    ("sem.info", "read fast", true),
    ("lock.setstate", "write fast dangerous", false),
    ("lock.setholder", "write fast dangerous", false),
    ("lock.delholder", "write fast dangerous", false),
];

pub fn init(ctx: &Context, args: &[RedisString]) -> Status {
    match server::version(ctx) {
        Ok(v) if is_supported(v) => {}
        Ok(v) => {
            server::log_warning(&format!(
                "redis-lock needs Redis {}.{}.{} or newer; this server is {}.{}.{}: not loading",
                MIN_SERVER.0, MIN_SERVER.1, MIN_SERVER.2, v.0, v.1, v.2
            ));
            return Status::Err;
        }
        Err(e) => {
            server::log_warning(&format!(
                "redis-lock could not read the server version ({e}): not loading"
            ));
            return Status::Err;
        }
    }

    if let Err(reason) = config::register(ctx, args) {
        server::log_warning(&format!("redis-lock: {reason}: not loading"));
        return Status::Err;
    }

    declare_acl_categories(ctx);

    datatype::set_hooks(handlers::TYPE_HOOKS);
    info::register(ctx, handlers::info_fields);

    // A corrupt RESTORE payload must become an error reply, not a crash; and
    // only real changes should wake WATCH (see `redis/replicate.rs`).
    let options = ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED;
    let bits = options.bits();
    ctx.set_module_options(options);
    // On Valkey 9, also that it handles atomic slot migration.
    migration::declare(ctx, bits);

    server::set_replica(server::read_role(ctx));

    // Flushes and swaps change keys that clients wait for, a demotion ends
    // every wait, a closed connection releases its SESSION locks, and a new
    // eviction policy is checked.
    events::subscribe(ctx, handlers::on_server_event);
    // Eviction can drop a live lock: say so now and whenever the policy changes.
    handlers::check_eviction_policy(ctx);

    // Hand-offs after an expiry run as the lease ends, not a Redis timer's
    // 0-2 ms later (`redis/timer.rs`).
    if !timer::init(ctx) {
        server::log_notice(
            "redis-lock: no timerfd in the event loop: hand-offs after an expiry \
             run from Redis timers, up to 2 ms after the lease ends",
        );
    }

    // A panic is a bug. Every entry point catches it (`redis/guard.rs`) so it
    // never unwinds into Redis; this hook makes sure it is in the server log.
    guard::install_panic_hook();
    Status::Ok
}

/// Put the commands in their ACL categories, as far as the server can:
/// [`COMMAND_CATEGORIES`] with `@lock` where it can add that category, without
/// it where it can only set the standard ones (Redis 7.2), none on Redis 7.0,
/// where the lock commands are granted by name only. A refusal is logged, not
/// fatal: the module then runs as it does on 7.0.
fn declare_acl_categories(ctx: &Context) {
    let support = acl::support();
    if support == AclSupport::None {
        server::log_notice(
            "redis-lock: this server cannot give module commands ACL categories \
             (Redis 7.0): @write, @read and the like do not cover the lock commands; \
             grant them by name (+lock.acquire …)",
        );
        return;
    }
    let module_category = support == AclSupport::ModuleCategory
        && match acl::add_category(ctx, LOCK_CATEGORY) {
            Ok(()) => true,
            Err(e) => {
                server::log_warning(&format!("redis-lock: {e}: no @{LOCK_CATEGORY}"));
                false
            }
        };
    for (command, categories, in_lock) in COMMAND_CATEGORIES {
        let categories = categories_for(categories, *in_lock && module_category);
        if let Err(e) = acl::set_command_categories(ctx, command, &categories) {
            server::log_warning(&format!("redis-lock: {e}"));
        }
    }
}

/// A command's categories, with `@lock` when it is in it and the server has
/// it: one string, because the server takes all of a command's categories in
/// one call and refuses them all if it does not know one.
fn categories_for(categories: &str, with_lock: bool) -> String {
    if with_lock {
        format!("{categories} {LOCK_CATEGORY}")
    } else {
        categories.to_string()
    }
}

/// Whether a server version (major, minor, patch) can run the module.
fn is_supported(version: (i32, i32, i32)) -> bool {
    version >= MIN_SERVER
}

#[cfg(test)]
mod tests {
    use super::{categories_for, is_supported, COMMAND_CATEGORIES};

    #[test]
    fn refuses_servers_older_than_7_0() {
        assert!(!is_supported((6, 2, 14)));
        assert!(!is_supported((6, 99, 99)));
        assert!(is_supported((7, 0, 0)));
        assert!(is_supported((7, 0, 15)));
        // Valkey 8 reports the Redis-compatible version 7.2.4.
        assert!(is_supported((7, 2, 4)));
        assert!(is_supported((8, 4, 0)));
    }

    #[test]
    fn lock_category_is_added_only_where_the_server_has_it() {
        assert_eq!(categories_for("write fast", true), "write fast lock");
        assert_eq!(categories_for("write fast", false), "write fast");
    }

    #[test]
    fn every_client_command_is_in_lock_and_the_internal_one_is_not() {
        for (command, categories, in_lock) in COMMAND_CATEGORIES {
            let internal = ["lock.setstate", "lock.setholder", "lock.delholder"];
            assert_eq!(*in_lock, !internal.contains(command), "{command}");
            let words: Vec<&str> = categories.split(' ').collect();
            assert!(
                words.contains(&"read") != words.contains(&"write"),
                "{command}: read or write"
            );
            assert!(
                words.contains(&"fast") != words.contains(&"slow"),
                "{command}: fast or slow"
            );
        }
    }
}
