//! What happens once, when Redis loads the module.

use redis_module::{Context, ModuleOptions, RedisString, Status};

use crate::redis::acl::{self, AclSupport};
use crate::redis::command::Spec;
use crate::redis::{datatype, events, guard, info, server, timer};
use crate::state::config;
use crate::{events as handlers, migration};

/// The oldest server the module runs on: it needs the 7.0 module API
/// (absolute expiry, RESP3 map replies, module configs).
const MIN_SERVER: (i32, i32, i32) = (7, 0, 0);

/// The module's own ACL category, `@lock`, on servers that can add one.
const LOCK_CATEGORY: &str = "lock";

pub fn init(ctx: &Context, args: &[RedisString], commands: &[Spec]) -> Status {
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

    declare_acl_categories(ctx, commands);

    datatype::set_hooks(handlers::TYPE_HOOKS);
    // How a grant whose replicas did not hold it in time is given back.
    crate::sync::register_undo(crate::wait_queue::undo);
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

/// Put the commands in their ACL categories (the table in `lib.rs`), as far
/// as the server can: with `@lock` where it can add that category, without
/// it where it can only set the standard ones (Redis 7.2), none on Redis
/// 7.0, where the lock commands are granted by name only. A refusal is
/// logged, not fatal: the module then runs as it does on 7.0.
fn declare_acl_categories(ctx: &Context, commands: &[Spec]) {
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
    for spec in commands {
        // A container has no categories of its own: its subcommands do.
        if spec.body.is_none() {
            continue;
        }
        let categories = categories_for(spec.categories, spec.in_lock_category && module_category);
        let name = spec.full_name();
        if let Err(e) = acl::set_command_categories(ctx, &name, &categories) {
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
    use super::{categories_for, is_supported};

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
}
