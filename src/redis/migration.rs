//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`, valkey#2593):
//! the module option that declares the module handles it, the server event
//! that tells of each migration (started, completed, aborted; export on the
//! source, import on the target), a key's slot, and the nodes that serve a
//! slot (for the `MOVED` a waiter is answered with). Also, on every server,
//! whether it runs in cluster mode and its `CLUSTER NODES` (where a classic
//! reshard, `CLUSTER SETSLOT … MIGRATING` and `MIGRATE`, shows).
//!
//! redis-module 2.0.8 knows neither the option nor the event: they are raw
//! calls, with the values of Valkey's `valkeymodule.h` (9.0). Nothing here
//! acts unless [`declare`] declared the option, on a Valkey 9 in cluster
//! mode ([`support`]).

use std::ffi::{c_char, c_void, CString};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use redis_module::{raw, Context, ContextFlags, RedisValue};

use super::guard::guarded;

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`.
const HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;
/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION`.
const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;
/// Its sub-events (`VALKEYMODULE_SUBEVENT_ATOMIC_SLOT_MIGRATION_*`).
const IMPORT_STARTED: u64 = 0;
const EXPORT_STARTED: u64 = 1;
const IMPORT_ABORTED: u64 = 2;
const EXPORT_ABORTED: u64 = 3;
const IMPORT_COMPLETED: u64 = 4;
const EXPORT_COMPLETED: u64 = 5;

/// `ValkeyModuleSlotRange`.
#[repr(C)]
struct RawSlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1`.
#[repr(C)]
struct RawMigrationInfo {
    version: u64,
    job_name: [c_char; 41],
    slot_ranges: *const RawSlotRange,
    num_slot_ranges: u32,
}

/// What happened to a migration, from this node's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// This node started sending the slots (it is the source).
    ExportStarted,
    /// The target owns the slots now; this node deletes their keys.
    ExportCompleted,
    /// The slots stay here.
    ExportAborted,
    /// This node started receiving the slots (it is the target).
    ImportStarted,
    /// This node owns the slots now.
    ImportCompleted,
    /// The slots stay with the source; this node deletes what it received.
    ImportAborted,
}

/// A migration event: its phase and its slots, as inclusive ranges.
#[derive(Debug)]
pub struct Migration {
    pub phase: Phase,
    pub slots: Vec<(u16, u16)>,
}

pub type Handler = fn(&Context, Migration);

static HANDLER: OnceLock<Handler> = OnceLock::new();

/// Whether [`declare`] declared the option: the rest of this file is only
/// used then.
static DECLARED: AtomicBool = AtomicBool::new(false);

pub fn declared() -> bool {
    DECLARED.load(Ordering::Relaxed)
}

/// Whether the module can declare atomic slot migration here.
#[derive(Debug, PartialEq, Eq)]
pub enum Support {
    /// Valkey 9 or newer, in cluster mode, with the whole API.
    Available,
    /// Redis (which may give the same option bit another meaning), Valkey
    /// 8, or no cluster: there is no such migration.
    NotHere,
    /// A Valkey 9 in cluster mode that lacks a call the module needs.
    Lacking(&'static str),
}

/// Whether the server is Valkey 9 or newer in cluster mode that knows the
/// option, a key's slot, and the calls to subscribe and declare.
pub fn support(ctx: &Context) -> Support {
    if valkey_major(ctx).is_none_or(|major| major < 9)
        || !ctx.get_flags().contains(ContextFlags::CLUSTER)
    {
        return Support::NotHere;
    }
    let options = unsafe { raw::RedisModule_GetModuleOptionsAll.map_or(0, |f| f()) };
    if options & HANDLE_ATOMIC_SLOT_MIGRATION == 0 {
        return Support::Lacking("the module option HANDLE_ATOMIC_SLOT_MIGRATION");
    }
    // (`IsSubEventSupported` cannot tell: Valkey 9.1 answers 0 for this
    // event, yet fires it; `declare` checks the subscription instead.)
    let calls = unsafe {
        (
            raw::RedisModule_SetModuleOptions,
            raw::RedisModule_SubscribeToServerEvent,
            raw::RedisModule_ClusterKeySlot,
            raw::RedisModule_GetMyClusterID,
        )
    };
    if !matches!(calls, (Some(_), Some(_), Some(_), Some(_))) {
        return Support::Lacking("a module API call");
    }
    Support::Available
}

/// The major Valkey version, `None` on Redis (`INFO server` has no
/// `valkey_version`).
fn valkey_major(ctx: &Context) -> Option<u32> {
    let text = match ctx.call("INFO", &["server"]) {
        Ok(RedisValue::SimpleString(s)) | Ok(RedisValue::BulkString(s)) => s,
        Ok(RedisValue::BulkRedisString(s)) => s.to_string_lossy(),
        Ok(RedisValue::StringBuffer(b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => return None,
    };
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))?;
    version.trim().split('.').next()?.parse().ok()
}

/// Declare, with the module's other `options`, that it handles atomic slot
/// migration, and pass every migration event to `handler`; if the server
/// refuses the subscription, set `options` alone. Only where [`support`] is
/// [`Support::Available`].
pub fn declare(ctx: &Context, options: c_int, handler: Handler) {
    let _ = HANDLER.set(handler);
    let event = raw::RedisModuleEvent {
        id: EVENT_ATOMIC_SLOT_MIGRATION,
        dataver: 1,
    };
    let subscribed = unsafe {
        raw::RedisModule_SubscribeToServerEvent.map_or(raw::Status::Err as c_int, |f| {
            f(ctx.get_raw(), event, Some(on_event))
        }) == raw::Status::Ok as c_int
    };
    let options = if subscribed {
        options | HANDLE_ATOMIC_SLOT_MIGRATION
    } else {
        options
    };
    unsafe {
        if let Some(set) = raw::RedisModule_SetModuleOptions {
            set(ctx.get_raw(), options);
        }
    }
    DECLARED.store(subscribed, Ordering::Relaxed);
}

unsafe extern "C" fn on_event(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let Some(handler) = HANDLER.get() else {
        return;
    };
    let ctx = Context::new(ctx);
    guarded(|| {
        if let Some(migration) = decode(subevent, data) {
            handler(&ctx, migration);
        }
    });
}

fn decode(subevent: u64, data: *mut c_void) -> Option<Migration> {
    let phase = match subevent {
        IMPORT_STARTED => Phase::ImportStarted,
        EXPORT_STARTED => Phase::ExportStarted,
        IMPORT_ABORTED => Phase::ImportAborted,
        EXPORT_ABORTED => Phase::ExportAborted,
        IMPORT_COMPLETED => Phase::ImportCompleted,
        EXPORT_COMPLETED => Phase::ExportCompleted,
        _ => return None,
    };
    // SAFETY: for this event the server passes its migration info, valid
    // for the callback's duration.
    let info = unsafe { data.cast::<RawMigrationInfo>().as_ref()? };
    let ranges: &[RawSlotRange] = if info.slot_ranges.is_null() {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize) }
    };
    let slots = ranges
        .iter()
        .filter_map(|r| Some((u16::try_from(r.start).ok()?, u16::try_from(r.end).ok()?)))
        .collect();
    Some(Migration { phase, slots })
}

/// Whether the server runs in cluster mode (`cluster-enabled`, fixed at
/// start-up: read once).
pub fn in_cluster(ctx: &Context) -> bool {
    static CLUSTER: OnceLock<bool> = OnceLock::new();
    *CLUSTER.get_or_init(|| ctx.get_flags().contains(ContextFlags::CLUSTER))
}

/// `CLUSTER NODES` as this node sees it (its own line shows the slots it
/// migrates out, `[slot->-<target id>]`); `None` if the call fails.
pub fn cluster_nodes(ctx: &Context) -> Option<String> {
    match ctx.call("CLUSTER", &["NODES"]) {
        Ok(RedisValue::SimpleString(s)) | Ok(RedisValue::BulkString(s)) => Some(s),
        Ok(RedisValue::BulkRedisString(s)) => Some(s.to_string_lossy()),
        Ok(RedisValue::StringBuffer(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
        Ok(RedisValue::VerbatimString((_, b))) => Some(String::from_utf8_lossy(&b).into_owned()),
        _ => None,
    }
}

/// The hash slot of `key`.
pub fn slot_of(ctx: &Context, key: &[u8]) -> u16 {
    let name = super::string(ctx, key);
    let slot = unsafe { raw::RedisModule_ClusterKeySlot.map_or(0, |f| f(name.inner)) };
    u16::try_from(slot).unwrap_or(0)
}

/// The `MOVED <slot> <endpoint>:<port>` error that names the master that
/// serves `slot` now (`CLUSTER SLOTS`), as Valkey answers a client blocked
/// in `BLPOP` when its slot moved; `TRYAGAIN …` if no master is known yet.
pub fn redirect(ctx: &Context, slot: u16) -> CString {
    match shard_of(ctx, slot).as_deref() {
        Some([master, ..]) => moved(slot, &master.host, master.port),
        _ => CString::from(c"TRYAGAIN the key's slot moved to another node; retry"),
    }
}

/// For a key that just left this node: the [`redirect`] to the master
/// that serves its slot now, if that master's shard (master and replicas)
/// does not include this node, as `CLUSTER SLOTS` shows it; `None` while the
/// slot is still this shard's, or where nothing was declared.
pub fn moved_from_here(ctx: &Context, key: &[u8]) -> Option<CString> {
    if !declared() {
        return None;
    }
    let slot = slot_of(ctx, key);
    let shard = shard_of(ctx, slot)?;
    let me = my_id()?;
    if shard.iter().any(|node| node.id == me) {
        return None;
    }
    let master = shard.first()?;
    Some(moved(slot, &master.host, master.port))
}

fn moved(slot: u16, host: &str, port: i64) -> CString {
    CString::new(format!("MOVED {slot} {host}:{port}"))
        .unwrap_or_else(|_| CString::from(c"TRYAGAIN slot moved; retry"))
}

/// This node's cluster id.
fn my_id() -> Option<String> {
    let id = unsafe { raw::RedisModule_GetMyClusterID.map_or(std::ptr::null(), |f| f()) };
    if id.is_null() {
        return None;
    }
    // SAFETY: the server's node name, `REDISMODULE_NODE_ID_LEN` (40) bytes
    // with no NUL after them, which it keeps.
    let id = unsafe { std::slice::from_raw_parts(id.cast::<u8>(), NODE_ID_LEN) };
    Some(String::from_utf8_lossy(id).into_owned())
}

/// `VALKEYMODULE_NODE_ID_LEN`.
const NODE_ID_LEN: usize = 40;

/// A node as `CLUSTER SLOTS` lists it.
struct Node {
    host: String,
    port: i64,
    id: String,
}

/// The nodes that serve `slot` (master first), from `CLUSTER SLOTS`.
fn shard_of(ctx: &Context, slot: u16) -> Option<Vec<Node>> {
    let Ok(RedisValue::Array(ranges)) = ctx.call("CLUSTER", &["SLOTS"]) else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let RedisValue::Array(fields) = range else {
            return None;
        };
        let (Some(RedisValue::Integer(start)), Some(RedisValue::Integer(end))) =
            (fields.first(), fields.get(1))
        else {
            return None;
        };
        if !(*start..=*end).contains(&i64::from(slot)) {
            return None;
        }
        let nodes: Vec<Node> = fields[2..].iter().filter_map(node).collect();
        (!nodes.is_empty()).then_some(nodes)
    })
}

fn node(value: &RedisValue) -> Option<Node> {
    let RedisValue::Array(fields) = value else {
        return None;
    };
    let text = |value: &RedisValue| match value {
        RedisValue::SimpleString(s) | RedisValue::BulkString(s) => Some(s.clone()),
        RedisValue::BulkRedisString(s) => Some(s.to_string_lossy()),
        RedisValue::StringBuffer(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let host = text(fields.first()?)?;
    let RedisValue::Integer(port) = fields.get(1)? else {
        return None;
    };
    let id = text(fields.get(2)?)?;
    Some(Node {
        host,
        port: *port,
        id,
    })
}
