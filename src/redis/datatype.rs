//! The lock as a Redis data type (`redislock`), with every callback Redis
//! makes on it: RDB save and load, AOF rewrite, digest, memory usage, free,
//! unlink, and the aux field that carries the fence high-water mark in an
//! RDB. What the module does with the high-water mark and with an unlinked
//! lock is the layer above's: it registers [`Hooks`] at load.

use std::cell::Cell;
use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

use redis_lock_core::holders::Holders;
use redis_lock_core::lock::{Lock, StoredLock};
use redis_lock_core::rules;
use redis_lock_core::token::UUID_LEN;
use redis_module::native_types::RedisType;
use redis_module::raw;

use super::guard::guarded;
use super::server;

/// What the module does when Redis hands it module-wide state or tells it a
/// lock is leaving the keyspace.
pub struct Hooks {
    /// The fence high-water mark, saved in the RDB aux field.
    pub high_water: fn() -> u64,
    /// A high-water mark read from an RDB aux field.
    pub observe_fence: fn(u64),
    /// Whether the module wants to hear of `lock` leaving the keyspace
    /// (asked first, so that the common case costs no key-name lookup).
    pub wants_unlinked: fn(&Lock) -> bool,
    /// Redis is removing `lock` from `db` (release, `DEL`, expiry,
    /// eviction, overwrite); its key name is the slice.
    pub unlinked: fn(i32, &[u8], &Lock),
    /// Redis is removing a key with several holders from `db`; its key
    /// name is the slice.
    pub holders_unlinked: fn(i32, &[u8], &Holders),
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();

thread_local! {
    /// Set while the module itself deletes or replaces a value (main
    /// thread only).
    static OWN_WRITE: Cell<bool> = const { Cell::new(false) };
}

/// Run `write`, the module's own delete or replacement of a key's value:
/// the unlink hooks it triggers are not told of it, since a value the
/// module removes (a release, a hand-off, the master's state) never leaves
/// by an expiry.
pub fn own_write<R>(write: impl FnOnce() -> R) -> R {
    let was = OWN_WRITE.with(|w| w.replace(true));
    let result = write();
    OWN_WRITE.with(|w| w.set(was));
    result
}

/// The database and name of the key that an unlink callback is about,
/// unless the module itself is removing it ([`own_write`]).
///
/// # Safety
/// `ctx` is the callback's own context, and the slice does not outlive it.
pub(super) unsafe fn unlinked_key<'a>(
    ctx: *mut raw::RedisModuleKeyOptCtx,
) -> Option<(i32, &'a [u8])> {
    if OWN_WRITE.with(Cell::get) {
        return None;
    }
    let (Some(name_of), Some(db_of), Some(ptr_len)) = (
        raw::RedisModule_GetKeyNameFromOptCtx,
        raw::RedisModule_GetDbIdFromOptCtx,
        raw::RedisModule_StringPtrLen,
    ) else {
        return None;
    };
    let name = name_of(ctx);
    if name.is_null() {
        return None;
    }
    let mut len = 0usize;
    let bytes = ptr_len(name, &mut len);
    if bytes.is_null() {
        return None;
    }
    Some((
        db_of(ctx),
        std::slice::from_raw_parts(bytes.cast::<u8>(), len),
    ))
}

/// Register the hooks (once, at load, before any RDB is read).
pub fn set_hooks(hooks: Hooks) {
    let _ = HOOKS.set(hooks);
}

pub(super) fn hooks() -> Option<&'static Hooks> {
    HOOKS.get()
}

/// Values of the module's types in memory (locks, shared locks,
/// semaphores): created by grants, `LOCK.SETSTATE`/`SETHOLDER` and RDB
/// loads, gone when Redis frees them.
static LIVE_VALUES: AtomicI64 = AtomicI64::new(0);

pub fn live_values() -> i64 {
    LIVE_VALUES.load(Ordering::Relaxed).max(0)
}

pub(super) fn value_created() {
    LIVE_VALUES.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn value_freed() {
    LIVE_VALUES.fetch_sub(1, Ordering::Relaxed);
}

/// A lock value on the heap, for Redis to own.
pub fn new_value(lock: Lock) -> *mut StoredLock {
    value_created();
    Box::into_raw(Box::new(StoredLock::new(lock)))
}

/// Free a value Redis did not take (or is done with).
///
/// # Safety
/// `value` came from [`new_value`] and nothing else owns it any more.
pub unsafe fn free_value(value: *mut StoredLock) {
    if !value.is_null() {
        value_freed();
        drop(Box::from_raw(value));
    }
}

pub fn raw_type() -> *mut raw::RedisModuleType {
    *LOCK_TYPE.raw_type.borrow()
}

/// Version of the RDB encoding: a lock is `[token: string buffer][fence:
/// unsigned][granted-ms: signed][deadline-ms: signed][extends: unsigned]
/// [owner: string buffer, empty for none]`, and the aux field (which Redis
/// tags with the same version) is `[fence high-water mark: unsigned]`.
/// Version 2 (no owner) and version 1 (token and fence only) still load.
const ENCODING_VERSION: i32 = 3;

pub static LOCK_TYPE: RedisType = RedisType::new(
    "redislock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save2: None,
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        // COPY of a lock would put one fence under two keys; Redis refuses COPY
        // for a module type without this callback, which is what we want.
        copy: None,
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: Some(unlink),
    },
);

/// Load one lock; any short, corrupt or unknown payload gives null, which
/// Redis turns into an error (`RESTORE`) instead of a crash.
unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guarded(|| load_lock(rdb, encver))
        .flatten()
        .map_or(ptr::null_mut(), |lock| new_value(lock).cast())
}

fn load_lock(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Lock> {
    if !(1..=ENCODING_VERSION).contains(&encver) {
        return None;
    }
    let token = raw::load_string_buffer(rdb).ok()?;
    let token = rules::check_token(token.as_ref()).ok()?;
    let fence = raw::load_unsigned(rdb).ok()?;
    let fence = rules::check_fence(fence).ok()?;
    let (granted_ms, deadline_ms, extends) = if encver == 1 {
        // Unknown: the hold counts from the load.
        (server::now_ms(), -1, 0)
    } else {
        let granted = raw::load_signed(rdb).ok()?;
        let deadline = raw::load_signed(rdb).ok()?;
        let extends = u32::try_from(raw::load_unsigned(rdb).ok()?).ok()?;
        if granted < 0 || deadline < -1 {
            return None;
        }
        (granted, deadline, extends)
    };
    let owner = if encver >= 3 {
        Some(raw::load_string_buffer(rdb).ok()?)
    } else {
        None
    };
    let owner = match owner.as_ref().map(|o| o.as_ref()) {
        None | Some([]) => None,
        Some(label) => Some(rules::check_owner(label).ok()?),
    };
    // The fence high-water mark is not raised here: Redis may still refuse
    // this value. A full RDB load restores it from the aux field, and a
    // RESTORE raises it once the key is stored (`events.rs`).
    Some(Lock::new(token, fence, granted_ms, deadline_ms, extends).with_owner(owner))
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let lock = (*value.cast::<StoredLock>()).get();
    let mut buffer = [0u8; UUID_LEN];
    raw::save_slice(rdb, lock.token(&mut buffer));
    raw::save_unsigned(rdb, lock.fence);
    raw::save_signed(rdb, lock.granted_ms);
    raw::save_signed(rdb, lock.deadline_ms);
    raw::save_unsigned(rdb, u64::from(lock.extends));
    raw::save_slice(rdb, lock.owner.get().unwrap_or_default());
}

/// Rewritten as `LOCK.SETSTATE key token fence deadline granted extends
/// [OWNER label]` (absolute times); Redis itself appends `PEXPIREAT key
/// <deadline>` after it, from the key's TTL.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let lock = (*value.cast::<StoredLock>()).get();
    let mut buffer = [0u8; UUID_LEN];
    let token = lock.token(&mut buffer);
    let Some(emit) = raw::RedisModule_EmitAOF else {
        return;
    };
    match lock.owner.get() {
        None => emit(
            aof,
            c"LOCK.SETSTATE".as_ptr(),
            c"sbllll".as_ptr(),
            key,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            lock.fence as c_longlong,
            lock.deadline_ms as c_longlong,
            lock.granted_ms as c_longlong,
            c_longlong::from(lock.extends),
        ),
        Some(owner) => emit(
            aof,
            c"LOCK.SETSTATE".as_ptr(),
            c"sbllllcb".as_ptr(),
            key,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            lock.fence as c_longlong,
            lock.deadline_ms as c_longlong,
            lock.granted_ms as c_longlong,
            c_longlong::from(lock.extends),
            c"OWNER".as_ptr(),
            owner.as_ptr().cast::<c_char>(),
            owner.len(),
        ),
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    let stored = &*value.cast::<StoredLock>();
    std::mem::size_of::<StoredLock>() + stored.heap_len()
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let lock = (*value.cast::<StoredLock>()).get();
    let mut buffer = [0u8; UUID_LEN];
    let token = lock.token(&mut buffer);
    if let (Some(add_buffer), Some(add_ll), Some(end)) = (
        raw::RedisModule_DigestAddStringBuffer,
        raw::RedisModule_DigestAddLongLong,
        raw::RedisModule_DigestEndSequence,
    ) {
        add_buffer(md, token.as_ptr().cast::<c_char>(), token.len());
        add_ll(md, lock.fence as c_longlong);
        add_ll(md, lock.granted_ms as c_longlong);
        add_ll(md, c_longlong::from(lock.extends));
        if let Some(owner) = lock.owner.get() {
            add_buffer(md, owner.as_ptr().cast::<c_char>(), owner.len());
        }
        end(md);
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    free_value(value.cast::<StoredLock>());
}

unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let Some(stored) = value.cast::<StoredLock>().as_ref() else {
        return;
    };
    let lock = &*stored.get();
    let Some(hooks) = HOOKS.get() else {
        return;
    };
    if !guarded(|| (hooks.wants_unlinked)(lock)).unwrap_or(false) {
        return;
    }
    let Some((db, key)) = unlinked_key(ctx) else {
        return;
    };
    guarded(|| (hooks.unlinked)(db, key, lock));
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    let high_water = HOOKS.get().map_or(0, |hooks| (hooks.high_water)());
    raw::save_unsigned(rdb, high_water);
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    if encver > ENCODING_VERSION {
        return raw::Status::Err as c_int;
    }
    match raw::load_unsigned(rdb) {
        Ok(high_water) => {
            if let Some(hooks) = HOOKS.get() {
                guarded(|| (hooks.observe_fence)(high_water));
            }
            raw::Status::Ok as c_int
        }
        Err(_) => raw::Status::Err as c_int,
    }
}
