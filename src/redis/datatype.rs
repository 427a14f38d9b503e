//! The module's data types, with every callback Redis makes on them: RDB
//! save and load, AOF rewrite, digest, memory usage, free, unlink, and the
//! aux field that carries the fence high-water mark in an RDB. Three types,
//! one skeleton: `redislock` keeps an exclusive lock's one hold packed
//! ([`StoredLock`]), `redisshrd` (a lock held in shared mode) and
//! `redissema` (a semaphore) keep a list of holds ([`Holders`]); each
//! callback is written once, over the [`Storage`] they share, and each hold
//! is saved, loaded, rewritten and digested by the same functions whichever
//! type holds it. What the module does with the high-water mark and with an
//! unlinked key is the layer above's: it registers [`Hooks`] at load.

use std::cell::Cell;
use std::ffi::c_void;
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

use redis_lock_core::decide::Removal;
use redis_lock_core::effect::Permits;
use redis_lock_core::hold::Holders;
use redis_lock_core::hold::{Hold, Holds, Kind};
use redis_lock_core::lock::StoredLock;
use redis_lock_core::rules;
use redis_lock_core::token::UUID_LEN;
use redis_module::native_types::RedisType;
use redis_module::raw;

use super::guard::guarded;
use super::server;

/// A key's database and name.
pub type KeyName<'a> = (i32, &'a [u8]);

/// What the module does when Redis hands it module-wide state or tells it a
/// key is leaving the keyspace.
pub struct Hooks {
    /// The fence high-water mark, saved in the RDB aux field.
    pub high_water: fn() -> u64,
    /// A high-water mark read from an RDB aux field.
    pub observe_fence: fn(u64),
    /// What Redis' removal of these holds means (asked first, so that the
    /// common case, a live lease deleted or released, costs no key-name
    /// lookup); see `decide::removed`.
    pub removed: fn(&Holds) -> Option<Removal>,
    /// Redis is removing a key of `kind` from the db (an expiry, `DEL`,
    /// eviction, an overwrite) whose removal means this; its name is the
    /// slice.
    pub unlinked: fn(i32, &[u8], Kind, Removal),
    /// A hold with this fence on this key (database and name, if the
    /// server says), attached to the lease group of this number, leaves the
    /// keyspace (not by the module's hand).
    pub lease_unlinked: fn(Option<KeyName<'_>>, u64, u64),
    /// A hold was loaded (an RDB, `RESTORE`) into the key of this database
    /// and name, with this fence, attached to the lease group of this
    /// number, its key running to this horizon, its lease ending at this
    /// deadline when it was saved, while the server loads a whole dataset
    /// or not (a `RESTORE`, which the server may still drop): whether that
    /// lease exists here (if not, the hold keeps that deadline).
    pub lease_loaded: fn(i32, &[u8], u64, u64, i64, i64, bool) -> bool,
    /// When the lease group of this number ends, if it exists.
    pub lease_deadline: fn(u64) -> Option<i64>,
    /// The lease groups, saved in the RDB's aux field.
    pub leases: fn() -> Vec<SavedLease>,
    /// The lease groups an RDB's aux field holds: this server's now.
    pub load_leases: fn(Vec<SavedLease>),
    /// The lease group of this number as `LOCK.LEASESET` spells it (its id,
    /// ttl, deadline and label), for an AOF rewrite.
    pub lease_spelled: fn(u64) -> Option<SpelledLease>,
}

/// A lease group as the RDB's aux field keeps it: `[id: 16 bytes][number:
/// unsigned][ttl-ms: signed][deadline-ms: signed][owner: string, empty for
/// none]`, after their count.
pub struct SavedLease {
    pub id: [u8; 16],
    pub number: u64,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
    pub owner: Option<Box<[u8]>>,
}

/// The most lease groups an aux field may carry (a corrupt count must not
/// make the loader run for ever).
const MAX_LOADED_LEASES: u64 = 10_000_000;

fn save_leases(rdb: *mut raw::RedisModuleIO, leases: &[SavedLease]) {
    raw::save_unsigned(rdb, leases.len() as u64);
    for lease in leases {
        raw::save_slice(rdb, &lease.id);
        raw::save_unsigned(rdb, lease.number);
        raw::save_signed(rdb, lease.ttl_ms);
        raw::save_signed(rdb, lease.deadline_ms);
        raw::save_slice(rdb, lease.owner.as_deref().unwrap_or_default());
    }
}

/// The lease groups [`save_leases`] wrote, each checked; `None` for a short
/// or corrupt payload.
fn load_leases(rdb: *mut raw::RedisModuleIO) -> Option<Vec<SavedLease>> {
    let n = raw::load_unsigned(rdb).ok()?;
    if n > MAX_LOADED_LEASES {
        return None;
    }
    let mut leases = Vec::new();
    for _ in 0..n {
        let id = raw::load_string_buffer(rdb).ok()?;
        let id: [u8; 16] = id.as_ref().try_into().ok()?;
        let number = raw::load_unsigned(rdb).ok()?;
        let ttl_ms = raw::load_signed(rdb).ok()?;
        let deadline_ms = raw::load_signed(rdb).ok()?;
        let owner = raw::load_string_buffer(rdb).ok()?;
        let owner = match owner.as_ref() {
            [] => None,
            label => Some(Box::from(rules::check_owner(label).ok()?)),
        };
        if number == 0 || ttl_ms <= 0 || deadline_ms < 0 {
            return None;
        }
        leases.push(SavedLease {
            id,
            number,
            ttl_ms,
            deadline_ms,
            owner,
        });
    }
    Some(leases)
}

/// A lease group as `LOCK.LEASESET` spells it.
pub struct SpelledLease {
    /// Its id's text.
    pub id: Vec<u8>,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
    pub owner: Option<Box<[u8]>>,
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

/// Register the hooks (once, at load, before any RDB is read).
pub fn set_hooks(hooks: Hooks) {
    let _ = HOOKS.set(hooks);
}

/// Values of the module's types in memory (locks, shared locks,
/// semaphores): created by grants, the master's effects and RDB loads,
/// gone when Redis frees them.
static LIVE_VALUES: AtomicI64 = AtomicI64::new(0);

pub fn live_values() -> i64 {
    LIVE_VALUES.load(Ordering::Relaxed).max(0)
}

/// A value on the heap, for Redis to own.
pub fn new_value<T: Storage>(value: T) -> *mut T {
    LIVE_VALUES.fetch_add(1, Ordering::Relaxed);
    Box::into_raw(Box::new(value))
}

/// Free a value Redis did not take (or is done with).
///
/// # Safety
/// `value` came from [`new_value`] and nothing else owns it any more.
pub unsafe fn free_value<T: Storage>(value: *mut T) {
    if !value.is_null() {
        LIVE_VALUES.fetch_sub(1, Ordering::Relaxed);
        drop(Box::from_raw(value));
    }
}

/// Which of the three types a callback serves: [`LOCK`], [`SHARED`] or
/// [`SEMAPHORE`] (a const parameter of the shared callbacks).
type TypeId = u8;
const LOCK: TypeId = 0;
const SHARED: TypeId = 1;
const SEMAPHORE: TypeId = 2;

/// What a type keeps, as the shared callbacks need it.
pub trait Storage: Sized {
    /// Read one value of encoding `encver` for the type `of`; `None` for a
    /// short, corrupt or unknown payload, or one of another type.
    fn load(rdb: *mut raw::RedisModuleIO, encver: c_int, of: TypeId) -> Option<Self>;
    fn save(&self, rdb: *mut raw::RedisModuleIO);
    /// Its holds as the lock commands see them.
    fn holds(&self) -> Holds<'_>;
    /// Bytes outside the value's own allocation.
    fn heap_len(&self) -> usize;
}

/// Version of the RDB encoding of a lock: its hold ([`save_hold`], without a
/// count); the aux field (which Redis tags with the same version) is
/// `[fence high-water mark: unsigned]`, then, from version 4, the lease
/// groups (`lease_registry::save`). Version 3 (no lease), version 2 (no owner) and
/// version 1 (token and fence only) still load.
const LOCK_ENCODING: i32 = 4;

/// Version of the RDB encoding of a key with several holders: `[limit:
/// unsigned][holders: unsigned]`, then each hold ([`save_hold`], with its
/// count). Version 1 (no lease) still loads.
const HOLDERS_ENCODING: i32 = 2;

/// What a loaded hold may carry, by the version it was saved with.
#[derive(Clone, Copy)]
struct Saved {
    count: bool,
    owner: bool,
    lease: bool,
}

/// The most holders an RDB payload may carry (a corrupt count must not make
/// the loader reserve memory for it).
const MAX_LOADED_HOLDERS: u64 = 1_000_000;

impl Storage for StoredLock {
    fn load(rdb: *mut raw::RedisModuleIO, encver: c_int, of: TypeId) -> Option<Self> {
        if of != LOCK || !(1..=LOCK_ENCODING).contains(&encver) {
            return None;
        }
        let hold = if encver == 1 {
            // Token and fence only: the hold counts from the load, with no
            // known deadline.
            let token = raw::load_string_buffer(rdb).ok()?;
            let token = rules::check_token(token.as_ref()).ok()?;
            let fence = rules::check_fence(raw::load_unsigned(rdb).ok()?).ok()?;
            Hold::granted(token, fence, server::now_ms(), -1)
        } else {
            let saved = Saved {
                count: false,
                owner: encver >= 3,
                lease: encver >= 4,
            };
            load_hold(rdb, saved)?
        };
        // The fence high-water mark is not raised here: Redis may still
        // refuse this value. A full RDB load restores it from the aux field,
        // and a RESTORE raises it once the key is stored (`events.rs`).
        Some(StoredLock::new(hold))
    }

    fn save(&self, rdb: *mut raw::RedisModuleIO) {
        save_hold(rdb, &self.get(), false);
    }

    fn holds(&self) -> Holds<'_> {
        Holds::One(self.get())
    }

    fn heap_len(&self) -> usize {
        StoredLock::heap_len(self)
    }
}

impl Storage for Holders {
    fn load(rdb: *mut raw::RedisModuleIO, encver: c_int, of: TypeId) -> Option<Self> {
        if !(1..=HOLDERS_ENCODING).contains(&encver) {
            return None;
        }
        let saved = Saved {
            count: true,
            owner: true,
            lease: encver >= 2,
        };
        let kind = match of {
            SHARED => Kind::Shared,
            SEMAPHORE => Kind::Semaphore { limit: 1 },
            _ => return None,
        };
        let limit = u32::try_from(raw::load_unsigned(rdb).ok()?).ok()?;
        let n = raw::load_unsigned(rdb).ok()?;
        if n > MAX_LOADED_HOLDERS {
            return None;
        }
        let mut holders = Holders::new(limit);
        for _ in 0..n {
            holders.put(load_hold(rdb, saved)?);
        }
        holders.is_whole(kind, n).then_some(holders)
    }

    fn save(&self, rdb: *mut raw::RedisModuleIO) {
        raw::save_unsigned(rdb, u64::from(self.limit));
        raw::save_unsigned(rdb, self.list.len() as u64);
        for hold in &self.list {
            save_hold(rdb, hold, true);
        }
    }

    fn holds(&self) -> Holds<'_> {
        Holds::Many(self)
    }

    fn heap_len(&self) -> usize {
        self.list.capacity() * std::mem::size_of::<Hold>()
            + self.list.iter().map(Hold::heap_len).sum::<usize>()
    }
}

/// One hold in an RDB: `[token: string buffer][fence: unsigned][granted-ms:
/// signed][deadline-ms: signed][extends: unsigned]`, then `[count:
/// unsigned]` in a key with several holders, then `[owner: string buffer,
/// empty for none]`, then `[lease group: unsigned, 0 for none]` and, for a
/// hold attached to one, `[the group's deadline: signed]` (a hold restored
/// where its group does not exist lives to that deadline).
fn save_hold(rdb: *mut raw::RedisModuleIO, hold: &Hold, with_count: bool) {
    let mut buffer = [0u8; UUID_LEN];
    raw::save_slice(rdb, hold.token(&mut buffer));
    raw::save_unsigned(rdb, hold.fence);
    raw::save_signed(rdb, hold.granted_ms);
    raw::save_signed(rdb, hold.deadline_ms);
    raw::save_unsigned(rdb, u64::from(hold.extends));
    if with_count {
        raw::save_unsigned(rdb, u64::from(hold.count));
    }
    raw::save_slice(rdb, hold.tags.owner().unwrap_or_default());
    let Some(lease) = hold.tags.lease() else {
        return raw::save_unsigned(rdb, 0);
    };
    let lease_deadline = HOOKS
        .get()
        .and_then(|hooks| (hooks.lease_deadline)(lease))
        .unwrap_or(hold.deadline_ms);
    raw::save_unsigned(rdb, lease);
    raw::save_signed(rdb, lease_deadline);
}

/// One hold as [`save_hold`] wrote it (without what its version did not
/// save), every value checked as the commands check it.
fn load_hold(rdb: *mut raw::RedisModuleIO, saved: Saved) -> Option<Hold> {
    let (with_count, with_owner) = (saved.count, saved.owner);
    let token = raw::load_string_buffer(rdb).ok()?;
    let token = rules::check_token(token.as_ref()).ok()?;
    let fence = rules::check_fence(raw::load_unsigned(rdb).ok()?).ok()?;
    let granted_ms = raw::load_signed(rdb).ok()?;
    let deadline_ms = raw::load_signed(rdb).ok()?;
    let extends = u32::try_from(raw::load_unsigned(rdb).ok()?).ok()?;
    let count = match with_count {
        true => u32::try_from(raw::load_unsigned(rdb).ok()?).ok()?,
        false => 1,
    };
    let owner = match with_owner {
        true => Some(raw::load_string_buffer(rdb).ok()?),
        false => None,
    };
    let owner = match owner.as_ref().map(|o| o.as_ref()) {
        None | Some([]) => None,
        Some(label) => Some(rules::check_owner(label).ok()?),
    };
    let mut hold = Hold::new(token, fence, granted_ms, deadline_ms, extends)
        .with_count(count)
        .with_owner(owner);
    if saved.lease {
        let number = raw::load_unsigned(rdb).ok()?;
        if number > 0 {
            let lease_deadline = raw::load_signed(rdb).ok()?;
            if attach_loaded(rdb, &hold, number, lease_deadline) {
                hold.tags.set_lease(Some(number));
            } else {
                // Its lease group is not here (another server's, or gone):
                // it lives to the deadline its lease had.
                hold.deadline_ms = lease_deadline;
            }
        }
    }
    hold.is_whole().then_some(hold)
}

/// Tell the layer above a hold of lease group `number` is loaded, by the
/// name and database of the key being loaded, and whether the server loads
/// a whole dataset (then it attaches the hold at once) or a `RESTORE` (then
/// once the key is stored): whether that lease exists here.
fn attach_loaded(
    rdb: *mut raw::RedisModuleIO,
    hold: &Hold,
    number: u64,
    lease_deadline_ms: i64,
) -> bool {
    let (Some(hooks), Some(name_of), Some(db_of), Some(ptr_len)) = (
        HOOKS.get(),
        unsafe { raw::RedisModule_GetKeyNameFromIO },
        unsafe { raw::RedisModule_GetDbIdFromIO },
        unsafe { raw::RedisModule_StringPtrLen },
    ) else {
        return false;
    };
    // SAFETY: the IO Redis passed to this load; the name lives as long.
    unsafe {
        let name = name_of(rdb);
        if name.is_null() {
            return false;
        }
        let mut len = 0usize;
        let bytes = ptr_len(name, &mut len);
        if bytes.is_null() {
            return false;
        }
        let key = std::slice::from_raw_parts(bytes.cast::<u8>(), len);
        let db = db_of(rdb);
        (hooks.lease_loaded)(
            db,
            key,
            hold.fence,
            number,
            hold.deadline_ms,
            lease_deadline_ms,
            server::is_loading(),
        )
    }
}

/// A key's holds rewritten into the AOF, each as the text form of its effect
/// with absolute times (`LOCK.SETSTATE key token fence deadline granted
/// extends [OWNER label]` for a lock, `LOCK.SETHOLDER key limit count token
/// fence deadline granted extends [OWNER label]` for each of several); Redis
/// appends the key's `PEXPIREAT` from its TTL.
fn rewrite(aof: *mut raw::RedisModuleIO, key: *mut raw::RedisModuleString, holds: &Holds) {
    let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
        return;
    };
    let limit = holds.kind().and_then(Kind::limit);
    for hold in holds.all() {
        let lease = hold.tags.lease();
        if let Some(number) = lease {
            // Its lease group first, whole (again for each of its holds: a
            // rewrite sees one key at a time; replaying it twice is the
            // same).
            rewrite_lease(aof, emit, number);
        }
        let mut buffer = [0u8; UUID_LEN];
        let token = hold.token(&mut buffer);
        let (token_ptr, token_len) = (token.as_ptr().cast::<c_char>(), token.len());
        // The tags, `OWNER label` and `LEASE number`, as many `cb` pairs
        // as the hold has; the unused pairs are passed and never read.
        let lease_text = lease.map(|n| n.to_string()).unwrap_or_default();
        let mut tags: Vec<(*const c_char, &[u8])> = Vec::with_capacity(2);
        if let Some(owner) = hold.tags.owner() {
            tags.push((c"OWNER".as_ptr(), owner));
        }
        if lease.is_some() {
            tags.push((c"LEASE".as_ptr(), lease_text.as_bytes()));
        }
        let tag = |i: usize| {
            let (keyword, value) = tags.get(i).copied().unwrap_or((c"".as_ptr(), &[]));
            (keyword, value.as_ptr().cast::<c_char>(), value.len())
        };
        let (tag0, tag1) = (tag(0), tag(1));
        let times = (
            hold.fence as c_longlong,
            hold.deadline_ms as c_longlong,
            hold.granted_ms as c_longlong,
            c_longlong::from(hold.extends),
        );
        let permits = limit.map(|limit| Permits {
            limit,
            count: hold.count,
        });
        // SAFETY: each format names exactly the arguments that follow it,
        // up to the pairs it reads.
        unsafe {
            match permits {
                None => emit(
                    aof,
                    c"LOCK.SETSTATE".as_ptr(),
                    [c"sbllll", c"sbllllcb", c"sbllllcbcb"][tags.len()].as_ptr(),
                    key,
                    token_ptr,
                    token_len,
                    times.0,
                    times.1,
                    times.2,
                    times.3,
                    tag0.0,
                    tag0.1,
                    tag0.2,
                    tag1.0,
                    tag1.1,
                    tag1.2,
                ),
                Some(p) => emit(
                    aof,
                    c"LOCK.SETHOLDER".as_ptr(),
                    [c"sllbllll", c"sllbllllcb", c"sllbllllcbcb"][tags.len()].as_ptr(),
                    key,
                    c_longlong::from(p.limit),
                    c_longlong::from(p.count),
                    token_ptr,
                    token_len,
                    times.0,
                    times.1,
                    times.2,
                    times.3,
                    tag0.0,
                    tag0.1,
                    tag0.2,
                    tag1.0,
                    tag1.1,
                    tag1.2,
                ),
            };
        }
    }
}

/// `LOCK.LEASESET id number ttl-ms deadline-ms [OWNER label]` for lease
/// group `number`, in an AOF rewrite, if it exists.
fn rewrite_lease(
    aof: *mut raw::RedisModuleIO,
    emit: unsafe extern "C" fn(*mut raw::RedisModuleIO, *const c_char, *const c_char, ...),
    number: u64,
) {
    let Some(SpelledLease {
        id,
        ttl_ms,
        deadline_ms,
        owner,
    }) = HOOKS.get().and_then(|hooks| (hooks.lease_spelled)(number))
    else {
        return;
    };
    let owner = owner.unwrap_or_default();
    let format = if owner.is_empty() { c"blll" } else { c"blllcb" };
    // SAFETY: the format names exactly the arguments it reads.
    unsafe {
        emit(
            aof,
            c"LOCK.LEASESET".as_ptr(),
            format.as_ptr(),
            id.as_ptr().cast::<c_char>(),
            id.len(),
            number as c_longlong,
            ttl_ms as c_longlong,
            deadline_ms as c_longlong,
            c"OWNER".as_ptr(),
            owner.as_ptr().cast::<c_char>(),
            owner.len(),
        );
    }
}

/// A key's holds in `DEBUG DIGEST`: the limit of a key with several
/// holders, then each hold's token, fence, grant time, extensions, count
/// (several holders) and label.
fn digest(md: *mut raw::RedisModuleDigest, holds: &Holds) {
    let (Some(add_buffer), Some(add_ll), Some(end)) = (unsafe {
        (
            raw::RedisModule_DigestAddStringBuffer,
            raw::RedisModule_DigestAddLongLong,
            raw::RedisModule_DigestEndSequence,
        )
    }) else {
        return;
    };
    let limit = holds.kind().and_then(Kind::limit);
    // SAFETY: the digest Redis passed, and buffers that live for each call.
    unsafe {
        if let Some(limit) = limit {
            add_ll(md, c_longlong::from(limit));
        }
        for hold in holds.all() {
            let mut buffer = [0u8; UUID_LEN];
            let token = hold.token(&mut buffer);
            add_buffer(md, token.as_ptr().cast::<c_char>(), token.len());
            add_ll(md, hold.fence as c_longlong);
            add_ll(md, hold.granted_ms as c_longlong);
            add_ll(md, c_longlong::from(hold.extends));
            if limit.is_some() {
                add_ll(md, c_longlong::from(hold.count));
            }
            if let Some(owner) = hold.tags.owner() {
                add_buffer(md, owner.as_ptr().cast::<c_char>(), owner.len());
            }
            if let Some(lease) = hold.tags.lease() {
                add_ll(md, lease as c_longlong);
            }
        }
        end(md);
    }
}

/// Load one value; any short, corrupt or unknown payload gives null, which
/// Redis turns into an error (`RESTORE`) instead of a crash.
unsafe extern "C" fn rdb_load<T: Storage, const OF: TypeId>(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
) -> *mut c_void {
    guarded(|| T::load(rdb, encver, OF))
        .flatten()
        .map_or(ptr::null_mut(), |value| new_value(value).cast())
}

unsafe extern "C" fn rdb_save<T: Storage>(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    (*value.cast::<T>()).save(rdb);
}

unsafe extern "C" fn aof_rewrite<T: Storage>(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    rewrite(aof, key, &(*value.cast::<T>()).holds());
}

unsafe extern "C" fn mem_usage<T: Storage>(value: *const c_void) -> usize {
    std::mem::size_of::<T>() + (*value.cast::<T>()).heap_len()
}

unsafe extern "C" fn digest_of<T: Storage>(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    digest(md, &(*value.cast::<T>()).holds());
}

unsafe extern "C" fn free<T: Storage>(value: *mut c_void) {
    free_value(value.cast::<T>());
}

/// Redis removes the key (its lease ran out, `DEL`, a rename, an
/// overwrite): the module hears of it unless it removes the value itself
/// ([`own_write`]), and only when the hooks say the removal means anything
/// (see `decide::removed`).
unsafe extern "C" fn unlink<T: Storage>(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let (Some(stored), Some(hooks)) = (value.cast::<T>().as_ref(), HOOKS.get()) else {
        return;
    };
    if OWN_WRITE.with(Cell::get) {
        return;
    }
    let holds = stored.holds();
    for hold in holds.all() {
        if let Some(number) = hold.tags.lease() {
            let key = unlinked_key(ctx);
            guarded(|| (hooks.lease_unlinked)(key, hold.fence, number));
        }
    }
    let Some(removal) = guarded(|| (hooks.removed)(&holds)).flatten() else {
        return;
    };
    let (Some(kind), Some((db, key))) = (holds.kind(), unlinked_key(ctx)) else {
        return;
    };
    guarded(|| (hooks.unlinked)(db, key, kind, removal));
}

/// The database and name of the key that an unlink callback is about.
///
/// # Safety
/// `ctx` is the callback's own context, and the slice does not outlive it.
unsafe fn unlinked_key<'a>(ctx: *mut raw::RedisModuleKeyOptCtx) -> Option<(i32, &'a [u8])> {
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

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    let high_water = HOOKS.get().map_or(0, |hooks| (hooks.high_water)());
    raw::save_unsigned(rdb, high_water);
    let leases = HOOKS.get().map_or_else(Vec::new, |hooks| (hooks.leases)());
    save_leases(rdb, &leases);
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    if encver > LOCK_ENCODING {
        return raw::Status::Err as c_int;
    }
    let Ok(high_water) = raw::load_unsigned(rdb) else {
        return raw::Status::Err as c_int;
    };
    let Some(hooks) = HOOKS.get() else {
        return raw::Status::Err as c_int;
    };
    guarded(|| (hooks.observe_fence)(high_water));
    // The lease groups, from version 4.
    if encver >= 4 {
        let Some(leases) = load_leases(rdb) else {
            return raw::Status::Err as c_int;
        };
        guarded(|| (hooks.load_leases)(leases));
    }
    raw::Status::Ok as c_int
}

/// Every callback of the type `OF`, storing `T`; the aux field (the fence
/// high-water mark) rides on the lock type alone.
const fn methods<T: Storage, const OF: TypeId>() -> raw::RedisModuleTypeMethods {
    let with_aux = OF == LOCK;
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load::<T, OF>),
        rdb_save: Some(rdb_save::<T>),
        aof_rewrite: Some(aof_rewrite::<T>),
        mem_usage: Some(mem_usage::<T>),
        digest: Some(digest_of::<T>),
        free: Some(free::<T>),
        aux_load: if with_aux { Some(aux_load) } else { None },
        aux_save: if with_aux { Some(aux_save) } else { None },
        aux_save2: None,
        aux_save_triggers: if with_aux {
            raw::REDISMODULE_AUX_BEFORE_RDB as c_int
        } else {
            0
        },
        free_effort: None,
        unlink: None,
        // COPY would put one fence under two keys; Redis refuses COPY for
        // a module type without this callback, which is what we want.
        copy: None,
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: Some(unlink::<T>),
    }
}

/// An exclusive lock (its name is persisted in RDB files: 9 characters).
pub static LOCK_TYPE: RedisType =
    RedisType::new("redislock", LOCK_ENCODING, methods::<StoredLock, LOCK>());
/// A lock held in shared mode by readers.
pub static SHARED_TYPE: RedisType =
    RedisType::new("redisshrd", HOLDERS_ENCODING, methods::<Holders, SHARED>());
/// A counting semaphore.
pub static SEMAPHORE_TYPE: RedisType = RedisType::new(
    "redissema",
    HOLDERS_ENCODING,
    methods::<Holders, SEMAPHORE>(),
);

/// The registered type of each kind of key.
pub fn type_of(kind: Kind) -> *mut raw::RedisModuleType {
    let registered = match kind {
        Kind::Exclusive => &LOCK_TYPE,
        Kind::Shared => &SHARED_TYPE,
        Kind::Semaphore { .. } => &SEMAPHORE_TYPE,
    };
    *registered.raw_type.borrow()
}

/// How a key of the module's types keeps its holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// One hold, packed: a [`StoredLock`].
    Packed,
    /// A list: a [`Holders`] (a shared lock or a semaphore, by its limit).
    List,
}

/// How a value of type `value_type` keeps its holds, if the type is one of
/// the module's.
pub fn stored_as(value_type: *mut raw::RedisModuleType) -> Option<Stored> {
    if value_type.is_null() {
        None
    } else if value_type == type_of(Kind::Exclusive) {
        Some(Stored::Packed)
    } else if value_type == type_of(Kind::Shared)
        || value_type == type_of(Kind::Semaphore { limit: 1 })
    {
        Some(Stored::List)
    } else {
        None
    }
}
