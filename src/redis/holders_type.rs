//! The data types of keys with several holders: `redisshrd` (a lock held in
//! shared mode by readers) and `redissema` (a counting semaphore), both
//! holding a [`Holders`] value, with every callback Redis makes on them: RDB
//! save and load, AOF rewrite (as `LOCK.SETHOLDER`, one per holder),
//! digest, memory usage, free and unlink. A lock key in shared mode is a
//! `redisshrd`: `LOCK.*` commands accept it, `SEM.*` refuse it, and the
//! other way round for a `redissema`.

use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;

use redis_lock_core::holders::{Holder, Holders};
use redis_lock_core::lock::OwnerLabel;
use redis_lock_core::rules;
use redis_lock_core::token::UUID_LEN;
use redis_module::native_types::RedisType;
use redis_module::raw;

use super::datatype::{self, value_created, value_freed};
use super::guard::guarded;

/// Version of the RDB encoding of both types: `[limit: unsigned][holders:
/// unsigned]`, then per holder `[token: string buffer][fence: unsigned]
/// [granted-ms: signed][deadline-ms: signed][extends: unsigned][count:
/// unsigned][owner: string buffer, empty for none]`.
const ENCODING_VERSION: i32 = 1;

/// The most holders an RDB payload may carry (a corrupt count must not make
/// the loader reserve memory for it).
const MAX_LOADED_HOLDERS: u64 = 1_000_000;

macro_rules! holders_type {
    ($name:literal) => {
        RedisType::new(
            $name,
            ENCODING_VERSION,
            raw::RedisModuleTypeMethods {
                version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
                rdb_load: Some(rdb_load),
                rdb_save: Some(rdb_save),
                aof_rewrite: Some(aof_rewrite),
                mem_usage: Some(mem_usage),
                digest: Some(digest),
                free: Some(free),
                aux_load: None,
                aux_save: None,
                aux_save2: None,
                aux_save_triggers: 0,
                free_effort: None,
                unlink: None,
                // COPY would put one fence under two keys: refused.
                copy: None,
                defrag: None,
                copy2: None,
                free_effort2: None,
                mem_usage2: None,
                unlink2: Some(unlink),
            },
        )
    };
}

pub static SHARED_TYPE: RedisType = holders_type!("redisshrd");
pub static SEMAPHORE_TYPE: RedisType = holders_type!("redissema");

pub fn shared_type() -> *mut raw::RedisModuleType {
    *SHARED_TYPE.raw_type.borrow()
}

pub fn semaphore_type() -> *mut raw::RedisModuleType {
    *SEMAPHORE_TYPE.raw_type.borrow()
}

/// The type of a value: a semaphore has a limit, a shared lock none.
pub fn type_of(holders: &Holders) -> *mut raw::RedisModuleType {
    if holders.limit == 0 {
        shared_type()
    } else {
        semaphore_type()
    }
}

pub fn new_value(holders: Holders) -> *mut Holders {
    value_created();
    Box::into_raw(Box::new(holders))
}

/// # Safety
/// `value` came from [`new_value`] and nothing else owns it any more.
pub unsafe fn free_value(value: *mut Holders) {
    if !value.is_null() {
        value_freed();
        drop(Box::from_raw(value));
    }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guarded(|| load_holders(rdb, encver))
        .flatten()
        .map_or(ptr::null_mut(), |h| new_value(h).cast())
}

fn load_holders(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Holders> {
    if encver != ENCODING_VERSION {
        return None;
    }
    let limit = u32::try_from(raw::load_unsigned(rdb).ok()?).ok()?;
    let n = raw::load_unsigned(rdb).ok()?;
    if n == 0 || n > MAX_LOADED_HOLDERS {
        return None;
    }
    let mut holders = Holders::new(limit);
    let mut used = 0u64;
    for _ in 0..n {
        let token = raw::load_string_buffer(rdb).ok()?;
        let token = rules::check_token(token.as_ref()).ok()?;
        let fence = rules::check_fence(raw::load_unsigned(rdb).ok()?).ok()?;
        let granted_ms = raw::load_signed(rdb).ok()?;
        let deadline_ms = raw::load_signed(rdb).ok()?;
        let extends = u32::try_from(raw::load_unsigned(rdb).ok()?).ok()?;
        let count = u32::try_from(raw::load_unsigned(rdb).ok()?).ok()?;
        let owner = raw::load_string_buffer(rdb).ok()?;
        let owner = match owner.as_ref() {
            [] => None,
            label => Some(rules::check_owner(label).ok()?),
        };
        let count_ok = if limit == 0 { count == 1 } else { count >= 1 };
        if granted_ms < 0 || deadline_ms < 0 || !count_ok {
            return None;
        }
        used += u64::from(count);
        let mut holder = Holder::new(token, fence, granted_ms, deadline_ms, count);
        holder.extends = extends;
        holder.owner = OwnerLabel::new(owner);
        holders.put(holder);
    }
    // Two holders with one token, or more permits than the limit: corrupt.
    let over_limit = limit > 0 && used > u64::from(limit);
    if holders.list.len() as u64 != n || over_limit {
        return None;
    }
    Some(holders)
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let holders = &*value.cast::<Holders>();
    raw::save_unsigned(rdb, u64::from(holders.limit));
    raw::save_unsigned(rdb, holders.list.len() as u64);
    for h in &holders.list {
        let mut buffer = [0u8; UUID_LEN];
        raw::save_slice(rdb, h.token(&mut buffer));
        raw::save_unsigned(rdb, h.fence);
        raw::save_signed(rdb, h.granted_ms);
        raw::save_signed(rdb, h.deadline_ms);
        raw::save_unsigned(rdb, u64::from(h.extends));
        raw::save_unsigned(rdb, u64::from(h.count));
        raw::save_slice(rdb, h.owner.get().unwrap_or_default());
    }
}

/// One `LOCK.SETHOLDER key limit count token fence deadline granted extends
/// [OWNER label]` per holder (absolute times); Redis then appends the key's
/// `PEXPIREAT`.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let holders = &*value.cast::<Holders>();
    let Some(emit) = raw::RedisModule_EmitAOF else {
        return;
    };
    for h in &holders.list {
        let mut buffer = [0u8; UUID_LEN];
        let token = h.token(&mut buffer);
        let owner = h.owner.get().unwrap_or_default();
        let format = if h.owner.get().is_some() {
            c"sllbllllcb"
        } else {
            c"sllbllll"
        };
        emit(
            aof,
            c"LOCK.SETHOLDER".as_ptr(),
            format.as_ptr(),
            key,
            c_longlong::from(holders.limit),
            c_longlong::from(h.count),
            token.as_ptr().cast::<c_char>(),
            token.len(),
            h.fence as c_longlong,
            h.deadline_ms as c_longlong,
            h.granted_ms as c_longlong,
            c_longlong::from(h.extends),
            c"OWNER".as_ptr(),
            owner.as_ptr().cast::<c_char>(),
            owner.len(),
        );
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    let holders = &*value.cast::<Holders>();
    std::mem::size_of::<Holders>()
        + holders.list.capacity() * std::mem::size_of::<Holder>()
        + holders
            .list
            .iter()
            .map(|h| h.token.heap_len() + h.owner.heap_len())
            .sum::<usize>()
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let holders = &*value.cast::<Holders>();
    let (Some(add_buffer), Some(add_ll), Some(end)) = (
        raw::RedisModule_DigestAddStringBuffer,
        raw::RedisModule_DigestAddLongLong,
        raw::RedisModule_DigestEndSequence,
    ) else {
        return;
    };
    add_ll(md, c_longlong::from(holders.limit));
    for h in &holders.list {
        let mut buffer = [0u8; UUID_LEN];
        let token = h.token(&mut buffer);
        add_buffer(md, token.as_ptr().cast::<c_char>(), token.len());
        add_ll(md, h.fence as c_longlong);
        add_ll(md, h.granted_ms as c_longlong);
        add_ll(md, c_longlong::from(h.extends));
        add_ll(md, c_longlong::from(h.count));
        if let Some(owner) = h.owner.get() {
            add_buffer(md, owner.as_ptr().cast::<c_char>(), owner.len());
        }
    }
    end(md);
}

unsafe extern "C" fn free(value: *mut c_void) {
    free_value(value.cast::<Holders>());
}

/// Redis removes the whole key (its latest lease ran out, `DEL`, a
/// rename): the module notes the holders whose lease had run out, which
/// count as expiries if Redis' `expired` event follows.
unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let Some(holders) = value.cast::<Holders>().as_ref() else {
        return;
    };
    let (Some(hooks), Some((db, key))) = (datatype::hooks(), datatype::unlinked_key(ctx)) else {
        return;
    };
    guarded(|| (hooks.holders_unlinked)(db, key, holders));
}
