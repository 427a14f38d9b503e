//! An open lock key: the only place that touches Redis' key API.
//!
//! The deadline has one writer: [`LockKey::store`] and [`LockKey::renew`]
//! set the lock value and the key's TTL together, and
//! [`LockKey::mirror_deadline`] brings the value's copy back in step when a
//! client changed the TTL itself (`PEXPIRE`, `PERSIST`, `RESTORE`). The TTL
//! is the truth that Redis expires and `PTTL` shows.

use std::os::raw::c_int;

use redis_lock_core::errors::LockError;
use redis_lock_core::lock::{Lock, OwnerLabel};
use redis_module::{raw, Context, RedisString};

use super::datatype;

pub struct LockKey {
    key: *mut raw::RedisModuleKey,
    writable: bool,
}

impl LockKey {
    /// Open for reading and writing. On a master an expired key is deleted
    /// here, so a lease that ran out is seen as free.
    pub fn open_write(ctx: &Context, name: &RedisString) -> Self {
        Self::open(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)
    }

    /// Open for reading only; an expired key reads as empty (also on replicas).
    pub fn open_read(ctx: &Context, name: &RedisString) -> Self {
        Self::open(ctx, name, raw::REDISMODULE_READ)
    }

    fn open(ctx: &Context, name: &RedisString, mode: u32) -> Self {
        let key = unsafe {
            raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |open| {
                open(ctx.get_raw(), name.inner, mode as c_int)
            })
        };
        Self {
            key,
            writable: mode & raw::REDISMODULE_WRITE != 0,
        }
    }

    /// The lock on the key: `Ok(None)` when the key is free, `WRONGTYPE` when
    /// it holds anything else.
    pub fn lock(&self) -> Result<Option<&Lock>, LockError> {
        Ok(self.value()?.map(|value| unsafe { &*value }))
    }

    fn value(&self) -> Result<Option<*mut Lock>, LockError> {
        if self.key.is_null() {
            return Ok(None);
        }
        unsafe {
            let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(self.key)) as isize;
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY {
                return Ok(None);
            }
            let is_lock = key_type == raw::REDISMODULE_KEYTYPE_MODULE
                && raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(self.key))
                    == datatype::raw_type();
            if !is_lock {
                return Err(LockError::WrongType);
            }
            let value = raw::RedisModule_ModuleTypeGetValue
                .map_or(std::ptr::null_mut(), |f| f(self.key))
                .cast::<Lock>();
            Ok((!value.is_null()).then_some(value))
        }
    }

    /// Put `lock` in the key with its deadline as the key's TTL, replacing
    /// whatever lock was there. `&mut`: it frees the old value, so no `&Lock`
    /// from [`LockKey::lock`] may outlive it.
    pub fn store(&mut self, lock: Lock) -> Result<(), LockError> {
        if !self.writable || self.key.is_null() {
            return Err(LockError::Internal);
        }
        let deadline = lock.deadline();
        let value = datatype::new_value(lock);
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.map_or(raw::Status::Err as c_int, |f| {
                f(self.key, datatype::raw_type(), value.cast())
            })
        };
        if status != raw::Status::Ok as c_int {
            // SAFETY: Redis did not take ownership; nothing else has it.
            unsafe { datatype::free_value(value) };
            return Err(LockError::Internal);
        }
        self.set_ttl(deadline);
        Ok(())
    }

    /// The holder's lease moves to `deadline_ms`, its `extends`-th extension:
    /// the value and the TTL together; with `owner`, a new label.
    pub fn renew(
        &mut self,
        deadline_ms: i64,
        extends: u32,
        owner: Option<&[u8]>,
    ) -> Result<&Lock, LockError> {
        let value = match self.value()? {
            Some(value) if self.writable => value,
            _ => return Err(LockError::Internal),
        };
        // SAFETY: the value belongs to this open key, which `&mut self` holds.
        let lock = unsafe { &mut *value };
        lock.deadline_ms = deadline_ms;
        lock.extends = extends;
        if owner.is_some() {
            lock.owner = OwnerLabel::new(owner);
        }
        self.set_ttl(Some(deadline_ms));
        Ok(lock)
    }

    /// Make the lock's copy of its deadline equal the key's TTL again, after
    /// something other than the module changed the TTL. Works on a key open
    /// for reading too: only the module's own value is touched.
    pub fn mirror_deadline(&self) {
        if let Ok(Some(value)) = self.value() {
            // SAFETY: the value belongs to this open key.
            unsafe { (*value).deadline_ms = self.deadline().unwrap_or(-1) };
        }
    }

    /// The key's absolute expiry in unix ms, if it has one.
    pub fn deadline(&self) -> Option<i64> {
        let deadline = unsafe { raw::RedisModule_GetAbsExpire.map_or(-1, |f| f(self.key)) };
        (deadline >= 0).then_some(deadline)
    }

    fn set_ttl(&self, deadline_ms: Option<i64>) {
        unsafe {
            if let Some(set) = raw::RedisModule_SetAbsExpire {
                set(
                    self.key,
                    deadline_ms.unwrap_or(raw::REDISMODULE_NO_EXPIRE as i64),
                );
            }
        }
    }

    /// Delete the key. `&mut`: it frees the value, as [`LockKey::store`] does.
    pub fn delete(&mut self) {
        if !self.writable || self.key.is_null() {
            return;
        }
        unsafe {
            if let Some(delete) = raw::RedisModule_DeleteKey {
                delete(self.key);
            }
        }
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            raw::close_key(self.key);
        }
    }
}
