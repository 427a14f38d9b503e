//! The server's facts: its clock, the selected database, whether writes are
//! paused, its role, what kind of context a command runs in, its
//! configuration and its log.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{raw, Context, ContextFlags, RedisValue};

/// The server's clock in unix ms, as Redis reads it for expiry.
pub fn now_ms() -> i64 {
    unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) }
}

/// The wall clock in microseconds since the unix epoch (0 before it, or if
/// it cannot be read), for the fence rule. One `clock_gettime` (a vDSO
/// call, no system call): `SystemTime::now` and `duration_since` take three
/// calls and 128-bit arithmetic to give the same number, on every grant.
pub fn wall_clock_us() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid `timespec` for the call to write.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) } != 0 {
        return 0;
    }
    let (Ok(seconds), Ok(nanos)) = (u64::try_from(now.tv_sec), u64::try_from(now.tv_nsec)) else {
        return 0;
    };
    seconds
        .saturating_mul(1_000_000)
        .saturating_add(nanos / 1_000)
}

/// The database the context works in.
pub fn selected_db(ctx: &Context) -> i32 {
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx.get_raw())) }
}

/// Make the context work in `db` (timers and events start in another one).
pub fn select_db(ctx: &Context, db: i32) {
    unsafe {
        if let Some(select) = raw::RedisModule_SelectDb {
            select(ctx.get_raw(), db);
        }
    }
}

/// Whether writes are paused now (`CLIENT PAUSE`, or the pause of a
/// `FAILOVER` or a cluster manual failover). Then Redis neither expires keys
/// nor lets anything be replicated: an expired lock still sits in the
/// keyspace although it reads as free, and writing over it would abort Redis
/// 7.0 (`dbAdd` of a key that is there) or Valkey 8.1 (propagation during a
/// pause). The module's timers, which Redis runs through a pause, check this
/// and come back later (`wait_queue/`).
pub fn writes_paused() -> bool {
    unsafe { raw::RedisModule_AvoidReplicaTraffic.is_some_and(|f| f() != 0) }
}

/// Whether this node is a master now (timers and callbacks run on replicas
/// too; only a master changes lock state on its own).
pub fn is_master(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::MASTER)
}

/// Whether the command came from the master's link or the AOF being loaded.
pub fn is_replicated_or_loading(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

/// Whether the server is loading a whole dataset (an RDB, the AOF, a
/// replica's full sync, also into a temporary database): outside any
/// command, where no context is at hand (a data type's `rdb_load`).
pub fn is_loading() -> bool {
    let loading = raw::REDISMODULE_CTX_FLAGS_LOADING | raw::REDISMODULE_CTX_FLAGS_ASYNC_LOADING;
    // The server reads no client of a null context: only its own state.
    let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(std::ptr::null_mut())) };
    flags as u32 & loading != 0
}

/// Whether the command runs inside a Lua script or function.
pub fn in_script(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::LUA)
}

/// MULTI/EXEC, Lua and other contexts that must not block.
pub fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING)
}

/// Whether this server is a replica now: set at load and by the role-change
/// server event, so the write commands pay nothing to ask on a master.
static IS_REPLICA: AtomicBool = AtomicBool::new(false);

pub fn is_replica() -> bool {
    IS_REPLICA.load(Ordering::Relaxed)
}

pub fn set_replica(is_replica: bool) {
    IS_REPLICA.store(is_replica, Ordering::Relaxed);
}

/// Read the role from the context (at load).
pub fn read_role(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::SLAVE)
}

/// The server's `(major, minor, patch)`.
pub fn version(ctx: &Context) -> Result<(i32, i32, i32), String> {
    ctx.get_redis_version()
        .map(|v| (v.major, v.minor, v.patch))
        .map_err(|e| e.to_string())
}

/// `CONFIG GET name`, as text.
pub fn config_get(ctx: &Context, name: &str) -> Option<String> {
    match ctx.call("CONFIG", &["GET", name]) {
        Ok(RedisValue::Array(values)) => match values.get(1) {
            Some(RedisValue::SimpleString(s)) | Some(RedisValue::BulkString(s)) => Some(s.clone()),
            Some(RedisValue::BulkRedisString(s)) => Some(s.to_string_lossy()),
            _ => None,
        },
        _ => None,
    }
}

/// Write `message` to the server log at level `warning`, as it is: passed as
/// an argument to a `%s` format (never as the format itself, so a `%` in a
/// key name cannot crash the server), with any NUL byte replaced.
pub fn log_warning(message: &str) {
    log_at(c"warning", message);
}

/// [`log_warning`] at level `notice`.
pub fn log_notice(message: &str) {
    log_at(c"notice", message);
}

fn log_at(level: &std::ffi::CStr, message: &str) {
    let Ok(text) = CString::new(message.replace('\0', "\\0")) else {
        return;
    };
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(
                std::ptr::null_mut(),
                level.as_ptr(),
                c"%s".as_ptr(),
                text.as_ptr(),
            );
        }
    }
}

/// Whether anything reads what this node propagates, now: the AOF, a
/// replica (connected, or waiting for its sync), or the replication backlog,
/// which Redis keeps for a while after the last replica left so that it can
/// resync from it. A replica, and a node of a cluster (where a slot
/// migration may stream writes to another node), always count as read, and
/// so does a server whose state cannot be read.
pub fn propagation_is_read(ctx: &Context) -> bool {
    let flags = ctx.get_flags();
    if flags.intersects(ContextFlags::AOF | ContextFlags::CLUSTER)
        || !flags.contains(ContextFlags::MASTER)
    {
        return true;
    }
    unsafe {
        let (Some(get), Some(field), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldSigned,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return true;
        };
        let info = get(ctx.get_raw(), c"replication".as_ptr());
        if info.is_null() {
            return true;
        }
        let read = [c"connected_slaves", c"repl_backlog_active"]
            .iter()
            .any(|name| {
                let mut error: std::os::raw::c_int = 0;
                let value = field(info, name.as_ptr(), &mut error);
                error != 0 || value != 0
            });
        free(ctx.get_raw(), info);
        read
    }
}

/// The master's replication offset, and each online replica's acknowledged
/// offset, from `INFO replication` (what `SYNC` waits on: no module API
/// shows either otherwise); `None` if the server cannot say.
pub fn replication(ctx: &Context) -> Option<(i64, Vec<i64>)> {
    unsafe {
        let (Some(get), Some(signed), Some(text), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldSigned,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return None;
        };
        let info = get(ctx.get_raw(), c"replication".as_ptr());
        if info.is_null() {
            return None;
        }
        let mut error: std::os::raw::c_int = 0;
        let offset = signed(info, c"master_repl_offset".as_ptr(), &mut error);
        let mut missing: std::os::raw::c_int = 0;
        let replicas = signed(info, c"connected_slaves".as_ptr(), &mut missing).max(0);
        let mut acked = Vec::with_capacity(replicas as usize);
        let mut name = [0u8; 24];
        for i in 0..replicas {
            // `slave<i>`, NUL-terminated.
            let mut field = itoa::Buffer::new();
            let digits = field.format(i).as_bytes();
            name[..5].copy_from_slice(b"slave");
            name[5..5 + digits.len()].copy_from_slice(digits);
            name[5 + digits.len()] = 0;
            let line = text(info, name.as_ptr().cast());
            if !line.is_null() {
                let line = std::ffi::CStr::from_ptr(line).to_bytes();
                if let Some(acknowledged) = redis_lock_core::sync::acked_offset(line) {
                    acked.push(acknowledged);
                }
            }
        }
        free(ctx.get_raw(), info);
        (error == 0).then_some((offset, acked))
    }
}
