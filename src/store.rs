//! An open lock key: the only place that touches Redis' key API, so the
//! commands read as rules and effects.

use std::os::raw::c_int;

use redis_module::{raw, Context, RedisString};

use crate::errors::LockError;
use crate::lock_type::{Lock, LOCK_TYPE};

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
                    == *LOCK_TYPE.raw_type.borrow();
            if !is_lock {
                return Err(LockError::WrongType);
            }
            let value = raw::RedisModule_ModuleTypeGetValue
                .map_or(std::ptr::null_mut(), |f| f(self.key))
                .cast::<Lock>();
            Ok(value.as_ref())
        }
    }

    /// The lock on the key, to change in place (its deadline mirror and
    /// extension count); `None` when the key is free or not a lock.
    pub fn lock_mut(&mut self) -> Option<&mut Lock> {
        if !self.writable || !matches!(self.lock(), Ok(Some(_))) {
            return None;
        }
        unsafe {
            raw::RedisModule_ModuleTypeGetValue
                .map_or(std::ptr::null_mut(), |f| f(self.key))
                .cast::<Lock>()
                .as_mut()
        }
    }

    /// Make the lock's copy of its deadline equal the key's TTL again, after
    /// something other than the module changed the TTL. Works on a key open
    /// for reading too: only the module's own value is touched.
    pub fn mirror_deadline(&self) {
        if !matches!(self.lock(), Ok(Some(_))) {
            return;
        }
        let deadline = self.deadline().unwrap_or(-1);
        unsafe {
            let value = raw::RedisModule_ModuleTypeGetValue
                .map_or(std::ptr::null_mut(), |f| f(self.key))
                .cast::<Lock>();
            if let Some(lock) = value.as_mut() {
                lock.deadline_ms = deadline;
            }
        }
    }

    /// Put `lock` in the key, replacing whatever lock was there (and its TTL:
    /// call [`LockKey::set_deadline`] after). `&mut`: it frees the old value,
    /// so no `&Lock` from [`LockKey::lock`] may outlive it.
    pub fn set(&mut self, lock: Lock) -> Result<(), LockError> {
        if !self.writable || self.key.is_null() {
            return Err(LockError::Internal);
        }
        let value = Box::into_raw(Box::new(lock));
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.map_or(raw::Status::Err as c_int, |f| {
                f(self.key, *LOCK_TYPE.raw_type.borrow(), value.cast())
            })
        };
        if status == raw::Status::Ok as c_int {
            Ok(())
        } else {
            // Redis did not take ownership.
            drop(unsafe { Box::from_raw(value) });
            Err(LockError::Internal)
        }
    }

    /// Set the key's absolute expiry (unix ms), or remove it with `None`.
    pub fn set_deadline(&self, deadline_ms: Option<i64>) {
        if !self.writable || self.key.is_null() {
            return;
        }
        unsafe {
            if let Some(set) = raw::RedisModule_SetAbsExpire {
                set(
                    self.key,
                    deadline_ms.unwrap_or(raw::REDISMODULE_NO_EXPIRE as i64),
                );
            }
        }
    }

    /// The key's absolute expiry in unix ms, if it has one.
    pub fn deadline(&self) -> Option<i64> {
        let deadline = unsafe { raw::RedisModule_GetAbsExpire.map_or(-1, |f| f(self.key)) };
        (deadline >= 0).then_some(deadline)
    }

    /// Delete the key. `&mut`: it frees the value, as [`LockKey::set`] does.
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
/// pause). The module's own timers, which Redis runs through a pause, check
/// this and come back later.
pub fn writes_paused() -> bool {
    unsafe { raw::RedisModule_AvoidReplicaTraffic.is_some_and(|f| f() != 0) }
}

/// The server's clock in unix ms, as Redis reads it for expiry.
pub fn now_ms() -> i64 {
    unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) }
}
