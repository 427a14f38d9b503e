//! An open lock key: the only place that touches Redis' key API.
//!
//! The deadline has one writer: [`LockKey::store`] and [`LockKey::renew`]
//! set the lock value and the key's TTL together, and
//! [`LockKey::mirror_deadline`] brings the value's copy back in step when a
//! client changed the TTL itself (`PEXPIRE`, `PERSIST`, `RESTORE`). The TTL
//! is the truth that Redis expires and `PTTL` shows.

use std::os::raw::c_int;

use redis_lock_core::decide::{MyHold, Want};
use redis_lock_core::errors::LockError;
use redis_lock_core::holders::Holders;
use std::borrow::Cow;

use redis_lock_core::lock::{Lock, OwnerLabel, StoredLock};
use redis_module::{raw, Context, RedisString};

use super::{datatype, holders_type};

/// What a key holds, for the lock commands.
pub enum Held<'a> {
    Free,
    Exclusive(Cow<'a, Lock>),
    /// A lock held in shared mode (`redisshrd`).
    Shared(&'a Holders),
    /// A semaphore (`redissema`).
    Semaphore(&'a Holders),
}

impl Held<'_> {
    /// The live hold that `token` has on the key, if it has one: what the
    /// core's decisions call `mine`.
    pub fn hold_of(&self, token: Option<&[u8]>, now_ms: i64) -> Option<MyHold> {
        let token = token?;
        match self {
            Held::Exclusive(lock) if lock.held_by(token) => Some(MyHold {
                want: Want::Exclusive,
                fence: lock.fence,
                granted_ms: lock.granted_ms,
                extends: lock.extends,
            }),
            Held::Shared(h) | Held::Semaphore(h) => h.find(token, now_ms).map(|mine| MyHold {
                want: if h.limit == 0 {
                    Want::Shared
                } else {
                    Want::Permits {
                        limit: h.limit,
                        count: mine.count,
                    }
                },
                fence: mine.fence,
                granted_ms: mine.granted_ms,
                extends: mine.extends,
            }),
            _ => None,
        }
    }
}

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

    /// The exclusive lock on the key: `Ok(None)` when the key is free,
    /// `WRONGTYPE` when it holds anything else (a shared lock included).
    pub fn lock(&self) -> Result<Option<Cow<'_, Lock>>, LockError> {
        Ok(self.value()?.map(|value| unsafe { (*value).get() }))
    }

    /// What the key holds: free, an exclusive lock, a shared lock or a
    /// semaphore; `WRONGTYPE` for any other type.
    pub fn held(&self) -> Result<Held<'_>, LockError> {
        let Some((kind, value)) = self.raw_value()? else {
            return Ok(Held::Free);
        };
        // SAFETY: the value belongs to this open key and has the type Redis
        // says it has.
        unsafe {
            Ok(match kind {
                Kind::Exclusive => Held::Exclusive((*value.cast::<StoredLock>()).get()),
                Kind::Shared => Held::Shared(&*value.cast::<Holders>()),
                Kind::Semaphore => Held::Semaphore(&*value.cast::<Holders>()),
            })
        }
    }

    /// The holders of a shared lock or semaphore, to change in place (then
    /// call [`LockKey::holders_changed`]).
    pub fn holders_mut(&mut self) -> Option<&mut Holders> {
        match self.raw_value() {
            Ok(Some((Kind::Shared | Kind::Semaphore, value))) if self.writable => {
                // SAFETY: as in `held`, and `&mut self` holds the key.
                Some(unsafe { &mut *value.cast::<Holders>() })
            }
            _ => None,
        }
    }

    /// After a change of holders: the key's TTL follows the latest lease,
    /// and a key with no holder left is deleted.
    pub fn holders_changed(&mut self) {
        let latest = match self.holders_mut() {
            Some(holders) if holders.list.is_empty() => None,
            Some(holders) => Some(holders.latest_deadline()),
            None => return,
        };
        match latest {
            None => self.delete(),
            Some(deadline) => self.set_ttl(deadline),
        }
    }

    /// Put `holders` in the key (a shared lock or a semaphore, by its limit)
    /// with the latest lease as the key's TTL.
    pub fn store_holders(&mut self, holders: Holders) -> Result<(), LockError> {
        if !self.writable || self.key.is_null() {
            return Err(LockError::Internal);
        }
        let deadline = holders.latest_deadline();
        let value_type = holders_type::type_of(&holders);
        let value = holders_type::new_value(holders);
        let status = datatype::own_write(|| unsafe {
            raw::RedisModule_ModuleTypeSetValue.map_or(raw::Status::Err as c_int, |f| {
                f(self.key, value_type, value.cast())
            })
        });
        if status != raw::Status::Ok as c_int {
            // SAFETY: Redis did not take ownership; nothing else has it.
            unsafe { holders_type::free_value(value) };
            return Err(LockError::Internal);
        }
        self.set_ttl(deadline);
        Ok(())
    }

    fn value(&self) -> Result<Option<*mut StoredLock>, LockError> {
        match self.raw_value()? {
            None => Ok(None),
            Some((Kind::Exclusive, value)) => Ok(Some(value.cast::<StoredLock>())),
            Some(_) => Err(LockError::WrongType),
        }
    }

    /// The module value of the key and its kind; `WRONGTYPE` for a key of
    /// another type.
    fn raw_value(&self) -> Result<Option<(Kind, *mut std::ffi::c_void)>, LockError> {
        if self.key.is_null() {
            return Ok(None);
        }
        unsafe {
            let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(self.key)) as isize;
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY {
                return Ok(None);
            }
            if key_type != raw::REDISMODULE_KEYTYPE_MODULE {
                return Err(LockError::WrongType);
            }
            let value_type =
                raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(self.key));
            let kind = if value_type == datatype::raw_type() {
                Kind::Exclusive
            } else if value_type == holders_type::shared_type() {
                Kind::Shared
            } else if value_type == holders_type::semaphore_type() {
                Kind::Semaphore
            } else {
                return Err(LockError::WrongType);
            };
            let value =
                raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(self.key));
            Ok((!value.is_null()).then_some((kind, value)))
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
        let status = datatype::own_write(|| unsafe {
            raw::RedisModule_ModuleTypeSetValue.map_or(raw::Status::Err as c_int, |f| {
                f(self.key, datatype::raw_type(), value.cast())
            })
        });
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
    ) -> Result<Cow<'_, Lock>, LockError> {
        let value = match self.value()? {
            Some(value) if self.writable => value,
            _ => return Err(LockError::Internal),
        };
        // SAFETY: the value belongs to this open key, which `&mut self` holds.
        let stored = unsafe { &mut *value };
        stored.update(|lock| {
            lock.deadline_ms = deadline_ms;
            lock.extends = extends;
            if owner.is_some() {
                lock.owner = OwnerLabel::new(owner);
            }
        });
        self.set_ttl(Some(deadline_ms));
        Ok(stored.get())
    }

    /// Make the lock's copy of its deadline equal the key's TTL again, after
    /// something other than the module changed the TTL. Works on a key open
    /// for reading too: only the module's own value is touched. (A key with
    /// several holders keeps a deadline per holder; its TTL is theirs.)
    pub fn mirror_deadline(&self) {
        if let Ok(Some(value)) = self.value() {
            let deadline_ms = self.deadline().unwrap_or(-1);
            // SAFETY: the value belongs to this open key.
            unsafe { (*value).update(|lock| lock.deadline_ms = deadline_ms) };
        }
    }

    /// The key's absolute expiry in unix ms, if it has one.
    pub fn deadline(&self) -> Option<i64> {
        if self.key.is_null() {
            return None;
        }
        let deadline = unsafe { raw::RedisModule_GetAbsExpire.map_or(-1, |f| f(self.key)) };
        (deadline >= 0).then_some(deadline)
    }

    fn set_ttl(&self, deadline_ms: Option<i64>) {
        if self.key.is_null() {
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

    /// Delete the key. `&mut`: it frees the value, as [`LockKey::store`] does.
    pub fn delete(&mut self) {
        if !self.writable || self.key.is_null() {
            return;
        }
        datatype::own_write(|| unsafe {
            if let Some(delete) = raw::RedisModule_DeleteKey {
                delete(self.key);
            }
        });
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Exclusive,
    Shared,
    Semaphore,
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            raw::close_key(self.key);
        }
    }
}
