//! The lock as a Redis data type (`redislock`), with every callback Redis
//! calls on it: RDB save and load, AOF rewrite, digest, memory usage, free,
//! and the aux field that carries the fence high-water mark in an RDB.

use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::rules;
use crate::token::{StoredToken, UUID_LEN};
use crate::{fence, metrics};

/// The value of a lock key. The lease deadline is the key's own Redis TTL,
/// which `PTTL` shows and Redis expires; `deadline_ms` mirrors it so that a
/// lock Redis removes can tell an expiry from a delete (see [`crate::expiry`]).
#[derive(Debug)]
pub struct Lock {
    pub fence: u64,
    /// When this holder was granted the lock (unix ms): `lock.max-hold-ms`
    /// counts from here.
    pub granted_ms: i64,
    /// The lease deadline (unix ms) as the module last set it; -1 if unknown
    /// (a lock loaded from the first encoding).
    pub deadline_ms: i64,
    /// Extensions since the grant: `lock.max-extends` counts these.
    pub extends: u32,
    pub holder_token: StoredToken,
}

impl Lock {
    pub fn new(token: &[u8], fence: u64, granted_ms: i64, deadline_ms: i64, extends: u32) -> Self {
        metrics::lock_created();
        Lock {
            fence,
            granted_ms,
            deadline_ms,
            extends,
            holder_token: StoredToken::new(token),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        metrics::lock_freed();
    }
}

/// Version of the RDB encoding: a lock is `[token: string buffer][fence:
/// unsigned][granted-ms: signed][deadline-ms: signed][extends: unsigned]`,
/// and the aux field (which Redis tags with the same version) is `[fence
/// high-water mark: unsigned]`. Version 1 (token and fence only) still loads.
const ENCODING_VERSION: i32 = 2;

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
        unlink2: Some(crate::expiry::on_unlink),
    },
);

/// Load one lock; any short, corrupt or unknown payload gives null, which
/// Redis turns into an error (`RESTORE`) instead of a crash.
unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != 1 && encver != ENCODING_VERSION {
        return ptr::null_mut();
    }
    let Ok(token) = raw::load_string_buffer(rdb) else {
        return ptr::null_mut();
    };
    let Ok(token) = rules::check_token(token.as_ref()) else {
        return ptr::null_mut();
    };
    let Ok(fence) = raw::load_unsigned(rdb)
        .map_err(|_| ())
        .and_then(|f| rules::check_fence(f).map_err(|_| ()))
    else {
        return ptr::null_mut();
    };
    let (granted_ms, deadline_ms, extends) = if encver == 1 {
        // Unknown: the hold counts from the load.
        (crate::store::now_ms(), -1, 0)
    } else {
        let (Ok(granted), Ok(deadline), Ok(extends)) = (
            raw::load_signed(rdb),
            raw::load_signed(rdb),
            raw::load_unsigned(rdb),
        ) else {
            return ptr::null_mut();
        };
        let Ok(extends) = u32::try_from(extends) else {
            return ptr::null_mut();
        };
        if granted < 0 || deadline < -1 {
            return ptr::null_mut();
        }
        (granted, deadline, extends)
    };
    // The fence high-water mark is not raised here: Redis may still refuse
    // this value. A full RDB load restores it from the aux field, and a
    // RESTORE raises it once the key is stored (`events::on_key_event`).
    Box::into_raw(Box::new(Lock::new(
        token,
        fence,
        granted_ms,
        deadline_ms,
        extends,
    )))
    .cast()
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let lock = &*value.cast::<Lock>();
    let mut buffer = [0u8; UUID_LEN];
    raw::save_slice(rdb, lock.holder_token.bytes(&mut buffer));
    raw::save_unsigned(rdb, lock.fence);
    raw::save_signed(rdb, lock.granted_ms);
    raw::save_signed(rdb, lock.deadline_ms);
    raw::save_unsigned(rdb, u64::from(lock.extends));
}

/// Rewritten as `LOCK.SETSTATE key token fence deadline granted extends`
/// (absolute times); Redis itself appends `PEXPIREAT key <deadline>` after it,
/// from the key's TTL.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let lock = &*value.cast::<Lock>();
    let mut buffer = [0u8; UUID_LEN];
    let token = lock.holder_token.bytes(&mut buffer);
    if let Some(emit) = raw::RedisModule_EmitAOF {
        emit(
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
        );
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    let lock = &*value.cast::<Lock>();
    std::mem::size_of::<Lock>() + lock.holder_token.heap_len()
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let lock = &*value.cast::<Lock>();
    let mut buffer = [0u8; UUID_LEN];
    let token = lock.holder_token.bytes(&mut buffer);
    if let (Some(add_buffer), Some(add_ll), Some(end)) = (
        raw::RedisModule_DigestAddStringBuffer,
        raw::RedisModule_DigestAddLongLong,
        raw::RedisModule_DigestEndSequence,
    ) {
        add_buffer(md, token.as_ptr().cast::<c_char>(), token.len());
        add_ll(md, lock.fence as c_longlong);
        add_ll(md, lock.granted_ms as c_longlong);
        add_ll(md, c_longlong::from(lock.extends));
        end(md);
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    drop(Box::from_raw(value.cast::<Lock>()));
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    raw::save_unsigned(rdb, fence::high_water());
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    if encver > ENCODING_VERSION {
        return raw::Status::Err as c_int;
    }
    match raw::load_unsigned(rdb) {
        Ok(high_water) => {
            fence::observe(high_water);
            raw::Status::Ok as c_int
        }
        Err(_) => raw::Status::Err as c_int,
    }
}
