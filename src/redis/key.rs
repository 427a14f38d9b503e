//! An open lock key: the only place that touches Redis' key API.
//!
//! A key holds [`Holds`] (`core/src/hold.rs`): one exclusive hold, packed in
//! a `redislock` value, or several in a `redisshrd` or `redissema` list.
//! Above this file nobody tells the storages apart: [`LockKey::put`],
//! [`LockKey::renew`] and [`LockKey::take`] work on a hold of any kind.
//!
//! The deadline has one writer: these set the holds and the key's TTL
//! together (a lock's TTL is its deadline, a list's is its latest hold's),
//! and [`LockKey::mirror_deadline`] brings a lock's copy back in step when a
//! client changed the TTL itself (`PEXPIRE`, `PERSIST`, `RESTORE`). The TTL
//! is the truth that Redis expires and `PTTL` shows.

use std::borrow::Cow;
use std::ffi::c_void;
use std::os::raw::c_int;

use redis_lock_core::errors::LockError;
use redis_lock_core::hold::Holders;
use redis_lock_core::hold::{Hold, Holds, Kind, Want};
use redis_lock_core::lock::StoredLock;
use redis_module::{raw, Context, RedisString};

use super::datatype::{self, Storage, Stored};

/// A hold taken off a key ([`LockKey::take`]).
pub struct Taken {
    /// The key went with it.
    pub gone: bool,
    pub fence: u64,
    /// The lease group it was attached to.
    pub lease: Option<u64>,
}

pub struct LockKey {
    key: *mut raw::RedisModuleKey,
    writable: bool,
    /// The key's value as it was looked up when the key was opened, kept
    /// in step by every change made through this key (the only writer while
    /// it is open): one lookup per command, however often it is read.
    value: Value,
}

/// A key's value: none, one of the module's storages, or another type.
type Value = Result<Option<(Stored, *mut c_void)>, LockError>;

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
            value: look_up(key),
        }
    }

    /// What the key holds; `WRONGTYPE` for a key of any other type.
    pub fn held(&self) -> Result<Holds<'_>, LockError> {
        // SAFETY: the value belongs to this open key and is of the storage
        // its type says; `&self` keeps the key open while it is borrowed.
        Ok(match self.value()? {
            None => Holds::Free,
            Some((Stored::Packed, value)) => unsafe { &*value.cast::<StoredLock>() }.holds(),
            Some((Stored::List, value)) => Holds::Many(unsafe { &*value.cast::<Holders>() }),
        })
    }

    /// The module value of the key and how it keeps its holds; `WRONGTYPE`
    /// for a key of another type.
    fn value(&self) -> Value {
        self.value
    }

    /// Whether the key keeps a list of holds (a shared lock or a semaphore).
    pub fn is_list(&self) -> bool {
        matches!(self.value, Ok(Some((Stored::List, _))))
    }

    /// The key's list of holds, to change in place (a key open for writing).
    fn list_mut(&mut self) -> Option<&mut Holders> {
        match self.value() {
            // SAFETY: as in `held`, and `&mut self` holds the key.
            Ok(Some((Stored::List, value))) if self.writable => {
                Some(unsafe { &mut *value.cast::<Holders>() })
            }
            _ => None,
        }
    }

    /// The key's packed lock, to change in place (a key open for writing).
    fn packed_mut(&mut self) -> Option<&mut StoredLock> {
        match self.value() {
            // SAFETY: as in `held`, and `&mut self` holds the key.
            Ok(Some((Stored::Packed, value))) if self.writable => {
                Some(unsafe { &mut *value.cast::<StoredLock>() })
            }
            _ => None,
        }
    }

    /// Put `hold` on the key as `want` says: an exclusive hold replaces
    /// whatever the key held; a reader or permits join the key's other
    /// holds of the same kind (replacing the one with the same token), or
    /// replace anything else. The TTL follows. `&mut`: it may free the old
    /// value, so no view from [`LockKey::held`] may outlive it.
    pub fn put(&mut self, want: Want, hold: Hold) -> Result<(), LockError> {
        let kind = want.kind();
        let Some(limit) = kind.limit() else {
            let deadline = hold.deadline();
            self.set_value(kind, StoredLock::new(hold))?;
            self.set_ttl(deadline);
            return Ok(());
        };
        match self.list_mut() {
            Some(holders) if holders.kind() == kind => holders.put(hold),
            _ => {
                let mut holders = Holders::new(limit);
                holders.put(hold);
                self.set_value(kind, holders)?;
            }
        }
        self.follow_latest();
        Ok(())
    }

    /// Store `value` as the key's value, of the type of `kind`.
    fn set_value<T: Storage>(&mut self, kind: Kind, value: T) -> Result<(), LockError> {
        if !self.writable || self.key.is_null() {
            return Err(LockError::Internal);
        }
        let value = datatype::new_value(value);
        let status = datatype::own_write(|| unsafe {
            raw::RedisModule_ModuleTypeSetValue.map_or(raw::Status::Err as c_int, |f| {
                f(self.key, datatype::type_of(kind), value.cast())
            })
        });
        if status != raw::Status::Ok as c_int {
            // SAFETY: Redis did not take ownership; nothing else has it.
            unsafe { datatype::free_value(value) };
            self.value = look_up(self.key);
            return Err(LockError::Internal);
        }
        let stored = match kind {
            Kind::Exclusive => Stored::Packed,
            _ => Stored::List,
        };
        self.value = Ok(Some((stored, value.cast())));
        Ok(())
    }

    /// `token`'s lease moves to `deadline_ms`, its `extends`-th extension,
    /// with `owner` as its new label if given; the key's TTL follows. The
    /// hold as it is now, and the key's kind (for its effect).
    pub fn renew(
        &mut self,
        token: &[u8],
        deadline_ms: i64,
        extends: u32,
        owner: Option<&[u8]>,
    ) -> Result<(Kind, Cow<'_, Hold>), LockError> {
        let change = |hold: &mut Hold| {
            hold.deadline_ms = deadline_ms;
            hold.extends = extends;
            if owner.is_some() {
                hold.tags.set_owner(owner);
            }
        };
        if let Some(stored) = self.packed_mut() {
            stored.update(change);
            self.set_ttl(Some(deadline_ms));
            // SAFETY: as in `packed_mut`; the key stays open while borrowed.
            let stored = self.packed_mut().ok_or(LockError::Internal)?;
            return Ok((Kind::Exclusive, stored.get()));
        }
        let holders = self.list_mut().ok_or(LockError::Internal)?;
        holders
            .find_mut(token)
            .map(change)
            .ok_or(LockError::Internal)?;
        self.follow_latest();
        let holders = self.list_mut().ok_or(LockError::Internal)?;
        let kind = holders.kind();
        let hold = holders.find_mut(token).ok_or(LockError::Internal)?;
        Ok((kind, Cow::Borrowed(&*hold)))
    }

    /// Take `token`'s hold off the key, as the caller decided it may: a
    /// lock's key goes; one of several holds goes (its TTL then follows the
    /// latest of the others). What went, or `None` when it held nothing.
    pub fn take(&mut self, token: &[u8]) -> Option<Taken> {
        if let Some(stored) = self.packed_mut() {
            let hold = stored.get();
            let taken = Taken {
                gone: true,
                fence: hold.fence,
                lease: hold.tags.lease(),
            };
            self.delete();
            return Some(taken);
        }
        let holders = self.list_mut()?;
        let hold = holders.remove(token)?;
        let mut taken = Taken {
            gone: false,
            fence: hold.fence,
            lease: hold.tags.lease(),
        };
        if holders.list.is_empty() {
            self.delete();
            taken.gone = true;
            return Some(taken);
        }
        // The TTL follows the latest lease: set again only if it differs,
        // which a replica's and the AOF's `LOCK.DELHOLDER` also make sure of.
        let latest = holders.latest_deadline();
        if self.deadline() != latest {
            self.set_ttl(latest);
        }
        Some(taken)
    }

    /// The hold with `fence`, attached to a lease group that ended at
    /// `deadline_ms`, ends there too: its deadline (and a lock's TTL)
    /// becomes that, so that opening the key again expires it as any lease
    /// that ran out. `None` if there is no such hold.
    pub fn end_lease(&mut self, fence: u64, deadline_ms: i64) -> Option<()> {
        let end = |hold: &mut Hold| hold.deadline_ms = deadline_ms;
        if let Some(stored) = self.packed_mut() {
            if stored.get().fence != fence {
                return None;
            }
            stored.update(end);
            self.set_ttl(Some(deadline_ms));
            return Some(());
        }
        let holders = self.list_mut()?;
        let hold = holders.list.iter_mut().find(|h| h.fence == fence)?;
        end(hold);
        self.follow_latest();
        Some(())
    }

    /// Take out the holds of a key with several whose lease ran out by
    /// `now_ms` (a lock's key is expired by Redis itself): the key's kind,
    /// those holds, and whether the key went with the last of them; `None`
    /// when none ran out.
    pub fn expire(&mut self, now_ms: i64) -> Option<(Kind, Vec<Hold>, bool)> {
        let holders = self.list_mut()?;
        let expired = holders.take_expired(now_ms);
        if expired.is_empty() {
            return None;
        }
        let kind = holders.kind();
        let gone = holders.list.is_empty();
        self.follow_latest();
        Some((kind, expired, gone))
    }

    /// A key with several holds whose TTL is not its latest hold's deadline
    /// (a client moved it).
    pub fn ttl_strayed(&self) -> bool {
        match self.value {
            // SAFETY: as in `held`.
            Ok(Some((Stored::List, value))) => {
                let holders = unsafe { &*value.cast::<Holders>() };
                self.deadline() != holders.latest_deadline()
            }
            _ => false,
        }
    }

    /// A key with several holds: its TTL becomes its latest hold's
    /// deadline, and it goes when none is left. The deadline, if the TTL
    /// moved.
    pub fn follow_latest(&mut self) -> Option<i64> {
        let latest = match self.list_mut() {
            Some(holders) if holders.list.is_empty() => None,
            Some(holders) => holders.latest_deadline(),
            None => return None,
        };
        match latest {
            None => {
                self.delete();
                None
            }
            Some(deadline) => {
                let moved = self.deadline() != Some(deadline);
                self.set_ttl(Some(deadline));
                moved.then_some(deadline)
            }
        }
    }

    /// Make a lock's copy of its deadline equal the key's TTL again, after
    /// something other than the module changed the TTL. Works on a key open
    /// for reading too: only the module's own value is touched. (A key with
    /// several holders keeps a deadline per holder; its TTL is theirs.)
    pub fn mirror_deadline(&self) {
        if let Ok(Some((Stored::Packed, value))) = self.value() {
            let deadline_ms = self.deadline().unwrap_or(-1);
            // SAFETY: the value belongs to this open key.
            unsafe { (*value.cast::<StoredLock>()).update(|hold| hold.deadline_ms = deadline_ms) };
        }
    }

    /// The hold with `fence`, attached to lease group `number`, is no longer
    /// attached: it runs to `deadline_ms` on its own (a restored copy, see
    /// `events.rs`; a lock's deadline then follows its TTL, as after any
    /// `RESTORE`). Works on a key open for reading too, as
    /// [`LockKey::mirror_deadline`] does.
    pub fn detach_lease(&self, fence: u64, number: u64, deadline_ms: i64) {
        let detach = |hold: &mut Hold| {
            if hold.fence == fence && hold.tags.lease() == Some(number) {
                hold.tags.set_lease(None);
                hold.deadline_ms = deadline_ms;
            }
        };
        // SAFETY: the value belongs to this open key; nothing borrows it.
        match self.value() {
            Ok(Some((Stored::Packed, value))) => unsafe {
                (*value.cast::<StoredLock>()).update(detach)
            },
            Ok(Some((Stored::List, value))) => unsafe {
                (*value.cast::<Holders>()).list.iter_mut().for_each(detach)
            },
            _ => {}
        }
    }

    /// The key's absolute expiry in unix ms, if it has one.
    pub fn deadline(&self) -> Option<i64> {
        if self.key.is_null() {
            return None;
        }
        let no_expire = raw::REDISMODULE_NO_EXPIRE as i64;
        let deadline = unsafe { raw::RedisModule_GetAbsExpire.map_or(no_expire, |f| f(self.key)) };
        (deadline != no_expire).then_some(deadline)
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

    /// Delete the key. `&mut`: it frees the value, as [`LockKey::put`] does.
    pub fn delete(&mut self) {
        if !self.writable || self.key.is_null() {
            return;
        }
        datatype::own_write(|| unsafe {
            if let Some(delete) = raw::RedisModule_DeleteKey {
                delete(self.key);
            }
        });
        self.value = Ok(None);
    }
}

/// The module value of an open `key` and how it keeps its holds; `WRONGTYPE`
/// for a key of another type.
fn look_up(key: *mut raw::RedisModuleKey) -> Value {
    if key.is_null() {
        return Ok(None);
    }
    unsafe {
        let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(key)) as isize;
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY {
            return Ok(None);
        }
        if key_type != raw::REDISMODULE_KEYTYPE_MODULE {
            return Err(LockError::WrongType);
        }
        let value_type =
            raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(key));
        let stored = datatype::stored_as(value_type).ok_or(LockError::WrongType)?;
        let value = raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(key));
        Ok((!value.is_null()).then_some((stored, value)))
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            raw::close_key(self.key);
        }
    }
}
