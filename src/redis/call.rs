//! Running a Redis command from inside a module command (`LOCK.GUARD`):
//! what the server says of a command (its flags, its keys), and the call
//! itself, whose reply goes to the client unchanged (now, or later from a
//! copy: `kept_reply.rs`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicU32, Ordering};

use redis_lock_core::decide::CommandFlags;
use redis_lock_core::errors::LockError;
use redis_module::{raw, Context, RedisString};

pub use super::kept_reply::KeptReply;

/// Longest command name (or `name|subcommand`) looked up; longer ones are
/// unknown to any server.
const MAX_NAME: usize = 64;

/// FNV-1a: command names are short and chosen by the server's own table,
/// so a cheap hash does (SipHash cost more than the rest of the lookup).
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

type FlagTable = HashMap<Box<[u8]>, Option<CommandFlags>, BuildHasherDefault<Fnv>>;

thread_local! {
    /// What `COMMAND INFO` said of each command (and `container|subcommand`)
    /// asked about so far. Command flags do not change while the server
    /// runs; a module loaded later adds names, which are looked up then.
    static FLAGS: RefCell<FlagTable> = RefCell::new(FlagTable::default());
}

/// The flags of the command `argv[0]` (`argv[1]` names its subcommand when
/// it is a container such as `CONFIG`); `None` when the server does not
/// know it.
pub fn command_flags(ctx: &Context, argv: &[RedisString]) -> Option<CommandFlags> {
    let mut buffer = [0u8; MAX_NAME];
    let name = lowercase(argv.first()?, &mut buffer)?;
    let (flags, container) = cached_or_asked(ctx, name)?;
    if !container {
        return Some(flags);
    }
    // A container's flags say little: its subcommand's do.
    let sub = argv.get(1)?;
    let mut full = [0u8; MAX_NAME];
    let total = name.len() + 1 + sub.len();
    if total > MAX_NAME {
        return None;
    }
    full[..name.len()].copy_from_slice(name);
    full[name.len()] = b'|';
    full[name.len() + 1..total].copy_from_slice(sub);
    full[..total].make_ascii_lowercase();
    cached_or_asked(ctx, &full[..total]).map(|(flags, _)| flags)
}

/// `name` in lower case in `buffer`, if it fits.
fn lowercase<'a>(name: &RedisString, buffer: &'a mut [u8; MAX_NAME]) -> Option<&'a [u8]> {
    let bytes = name.as_slice();
    let out = buffer.get_mut(..bytes.len())?;
    out.copy_from_slice(bytes);
    out.make_ascii_lowercase();
    Some(out)
}

/// `(flags, is a container)` of `name` (lower case), from the cache or
/// from `COMMAND INFO`.
fn cached_or_asked(ctx: &Context, name: &[u8]) -> Option<(CommandFlags, bool)> {
    if let Some(known) = FLAGS.with(|f| f.borrow().get(name).copied()) {
        return known.map(|flags| (flags, false));
    }
    let (flags, container) = ask(ctx, name)?;
    // Containers are not cached as such: their subcommands are.
    if !container {
        FLAGS.with(|f| f.borrow_mut().insert(name.into(), Some(flags)));
    }
    Some((flags, container))
}

/// `COMMAND INFO name`: its flags, and whether it has subcommands.
fn ask(ctx: &Context, name: &[u8]) -> Option<(CommandFlags, bool)> {
    let name = super::string(ctx, name);
    unsafe {
        let call = raw::RedisModule_Call?;
        let reply = call(
            ctx.get_raw(),
            c"COMMAND".as_ptr(),
            c"cs".as_ptr(),
            c"INFO".as_ptr(),
            name.inner,
        );
        if reply.is_null() {
            return None;
        }
        let info = element(reply, 0);
        let parsed = (!info.is_null() && length(info) >= 3).then(|| {
            let mut flags = CommandFlags::default();
            let list = element(info, 2);
            for i in 0..length(list) {
                match text(element(list, i)) {
                    Some(b"blocking") => flags.blocking = true,
                    Some(b"noscript") => flags.noscript = true,
                    Some(b"readonly") => flags.readonly = true,
                    _ => {}
                }
            }
            // Element 10 (from Redis 7) lists the subcommands.
            let subcommands = element(info, 9);
            (flags, !subcommands.is_null() && length(subcommands) > 0)
        });
        if let Some(free) = raw::RedisModule_FreeCallReply {
            free(reply);
        }
        parsed
    }
}

unsafe fn element(
    reply: *mut raw::RedisModuleCallReply,
    i: usize,
) -> *mut raw::RedisModuleCallReply {
    match raw::RedisModule_CallReplyArrayElement {
        Some(at) if !reply.is_null() => at(reply, i),
        _ => std::ptr::null_mut(),
    }
}

unsafe fn length(reply: *mut raw::RedisModuleCallReply) -> usize {
    match raw::RedisModule_CallReplyLength {
        Some(len) if !reply.is_null() => len(reply),
        _ => 0,
    }
}

unsafe fn text<'a>(reply: *mut raw::RedisModuleCallReply) -> Option<&'a [u8]> {
    let ptr_of = raw::RedisModule_CallReplyStringPtr?;
    if reply.is_null() {
        return None;
    }
    let mut len = 0usize;
    let ptr = ptr_of(reply, &mut len);
    (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr.cast::<u8>(), len))
}

/// Tell Redis where the keys of `LOCK.GUARD key token command …` are: the
/// lock key (read only: GUARD does not change the lock), then every key of
/// the guarded command `args[first..]` with the access the server says that
/// command needs, so that ACL key patterns (`%R~`, `%W~`) and Cluster see
/// them all.
pub fn report_keys(ctx: &Context, args: &[RedisString], first: usize) {
    let (Some(key_at), Some(keys_of), Some(free)) = (
        unsafe { raw::RedisModule_KeyAtPosWithFlags },
        unsafe { raw::RedisModule_GetCommandKeysWithFlags },
        unsafe { raw::RedisModule_Free },
    ) else {
        return;
    };
    if args.len() < 2 {
        return;
    }
    let read = (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as c_int;
    unsafe { key_at(ctx.get_raw(), 1, read) };
    if args.len() <= first {
        return;
    }
    let mut argv: Vec<*mut raw::RedisModuleString> =
        args[first..].iter().map(|a| a.inner).collect();
    let mut count: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    unsafe {
        let positions = keys_of(
            ctx.get_raw(),
            argv.as_mut_ptr(),
            argv.len() as c_int,
            &mut count,
            &mut flags,
        );
        if positions.is_null() {
            return;
        }
        for i in 0..usize::try_from(count).unwrap_or(0) {
            let at = *positions.add(i) as usize + first;
            let key_flags = if flags.is_null() { 0 } else { *flags.add(i) };
            if at < args.len() {
                key_at(ctx.get_raw(), at as c_int, key_flags);
            }
        }
        free(positions.cast());
        if !flags.is_null() {
            free(flags.cast());
        }
    }
}

/// How deep the module is inside a guarded command's `RM_Call`: a lock
/// command called from there (a script run by `LOCK.GUARD … EVAL` that
/// calls `LOCK.RELEASE`) is refused, as it is at the top level. Main thread
/// only; an atomic rather than a thread-local, because every command asks
/// and a thread-local in a shared object costs a call to find.
static GUARDING: AtomicU32 = AtomicU32::new(0);

/// Whether a guarded command is running now (see [`call_and_reply`]).
pub fn guarding() -> bool {
    GUARDING.load(Ordering::Relaxed) > 0
}

/// While alive, a guarded command runs.
struct Guarding;

impl Guarding {
    fn start() -> Guarding {
        GUARDING.fetch_add(1, Ordering::Relaxed);
        Guarding
    }
}

impl Drop for Guarding {
    fn drop(&mut self) {
        GUARDING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A command's reply, as the server gave it, freed when dropped. It points
/// into the context of the command that made it (Redis 7.0 reads that
/// context again when it frees the reply), so it lives no longer than that
/// command's `Context`: it is sent now ([`CallReply::reply`]), or copied
/// ([`CallReply::keep`]) for an answer sent later. Main thread only, as
/// everything here.
pub struct CallReply<'ctx> {
    reply: *mut raw::RedisModuleCallReply,
    command: PhantomData<&'ctx Context>,
}

impl CallReply<'_> {
    /// Whether it is an error reply.
    pub fn is_error(&self) -> bool {
        unsafe {
            raw::RedisModule_CallReplyType
                .is_some_and(|kind| kind(self.reply) == raw::REDISMODULE_REPLY_ERROR as i32)
        }
    }

    /// Send it to the client of `ctx`, as it is.
    pub fn reply(&self, ctx: &Context) {
        unsafe {
            if let Some(reply_with) = raw::RedisModule_ReplyWithCallReply {
                reply_with(ctx.get_raw(), self.reply);
            }
        }
    }

    /// A copy of our own, to be sent once the command has returned; the
    /// server's reply is freed now.
    pub fn keep(self) -> KeptReply {
        // SAFETY: a live reply of `RedisModule_Call`, freed after the copy
        // (when `self` drops).
        unsafe { KeptReply::copy(self.reply) }
    }
}

impl Drop for CallReply<'_> {
    fn drop(&mut self) {
        unsafe {
            if let Some(free) = raw::RedisModule_FreeCallReply {
                free(self.reply);
            }
        }
    }
}

/// Run `args[0] args[1..]` (or `name args[1..]`, a read-only twin of the
/// command) as the calling client's ACL user, in the client's protocol,
/// replicated to replicas and the AOF as Redis replicates it (its effects),
/// and reply with its reply as it is. See [`call`].
pub fn call_and_reply(
    ctx: &Context,
    args: &[RedisString],
    name: Option<&CStr>,
    script_mode: bool,
    read_only: bool,
) {
    match call(ctx, args, name, script_mode, read_only) {
        Ok(reply) => reply.reply(ctx),
        Err(error) => reply_error(ctx, error),
    }
}

/// Run `args[0] args[1..]` (or `name args[1..]`) as the calling client's
/// ACL user, in the client's protocol, replicated to replicas and the AOF as
/// Redis replicates it (its effects), and give its reply, to be sent now or
/// later. `script_mode`: refuse, as a script would, what scripts may not do;
/// `read_only`: refuse every write command (a reader's guard). An ACL
/// refusal is `NOPERM`; every other error is the command's own, in its
/// reply. The caller has refused a name with a NUL byte: the server reads
/// the name as a C string.
pub fn call<'ctx>(
    ctx: &'ctx Context,
    args: &[RedisString],
    name: Option<&CStr>,
    script_mode: bool,
    read_only: bool,
) -> Result<CallReply<'ctx>, LockError> {
    let flags: &[u8] = match (script_mode, read_only) {
        (true, false) => b"0CSME!",
        (false, false) => b"0CME!",
        (true, true) => b"0CSWME!",
        (false, true) => b"0CWME!",
    };
    let Some(first) = args.first() else {
        return Err(LockError::Internal);
    };
    let rest = &args[1..];
    // Up to 8 arguments go one by one (`s`): the server sizes its argument
    // vector from the format, once, where a vector (`v`) costs it a second
    // allocation and a copy, about 350 instructions of a guarded `SET`.
    let mut format = [0u8; 16];
    format[..flags.len()].copy_from_slice(flags);
    let one_by_one = rest.len() <= 8;
    let kinds = if one_by_one { rest.len() } else { 1 };
    let spec = if one_by_one { b's' } else { b'v' };
    format[flags.len()..flags.len() + kinds].fill(spec);
    // The format ends with the buffer's NUL (at most 7 + 8 bytes are used).
    let format = format.as_ptr().cast::<c_char>();
    unsafe {
        let (Some(call), Some(free), Some(ptr_len)) = (
            raw::RedisModule_Call,
            raw::RedisModule_FreeCallReply,
            raw::RedisModule_StringPtrLen,
        ) else {
            return Err(LockError::Internal);
        };
        let mut len = 0usize;
        // An sds: NUL-terminated, as RM_Call reads a command name.
        let command = match name {
            Some(name) => name.as_ptr(),
            None => ptr_len(first.inner, &mut len).cast::<c_char>(),
        };
        let c = ctx.get_raw();
        let guarding = Guarding::start();
        let a = |i: usize| rest[i].inner;
        set_errno(0);
        let reply = match rest.len() {
            0 => call(c, command, format),
            1 => call(c, command, format, a(0)),
            2 => call(c, command, format, a(0), a(1)),
            3 => call(c, command, format, a(0), a(1), a(2)),
            4 => call(c, command, format, a(0), a(1), a(2), a(3)),
            5 => call(c, command, format, a(0), a(1), a(2), a(3), a(4)),
            6 => call(c, command, format, a(0), a(1), a(2), a(3), a(4), a(5)),
            7 => call(c, command, format, a(0), a(1), a(2), a(3), a(4), a(5), a(6)),
            8 => call(
                c,
                command,
                format,
                a(0),
                a(1),
                a(2),
                a(3),
                a(4),
                a(5),
                a(6),
                a(7),
            ),
            count => {
                let mut argv: Vec<*mut raw::RedisModuleString> =
                    rest.iter().map(|arg| arg.inner).collect();
                call(c, command, format, argv.as_mut_ptr(), count)
            }
        };
        let refused_by_acl = errno() == libc::EACCES;
        drop(guarding);
        if reply.is_null() {
            return Err(if refused_by_acl {
                LockError::GuardNoPerm
            } else {
                LockError::Internal
            });
        }
        if refused_by_acl {
            free(reply);
            return Err(LockError::GuardNoPerm);
        }
        Ok(CallReply {
            reply,
            command: PhantomData,
        })
    }
}

/// Make the server ask every replica for its acknowledged offset now
/// (`REPLCONF GETACK *`, after what the current context replicates),
/// instead of waiting for the ack a replica sends once a second by itself.
/// No module API does that. A `WAIT` that must block does, and `RM_Call`
/// may let one block (the `K` flag, Redis 7.2+ and Valkey): one for more
/// replicas than can exist, its promise abandoned at once. Where `K` does
/// not exist (Redis 7.0), the request is replicated as the master itself
/// sends it, `REPLCONF GETACK *` in the replication stream (a replica
/// answers it; it also lands in the AOF, where replaying it does nothing on
/// a master, and a rewrite drops it).
pub fn request_replica_acks(ctx: &Context) {
    if !wait_to_ask(ctx) {
        unsafe {
            if let Some(replicate) = raw::RedisModule_Replicate {
                replicate(
                    ctx.get_raw(),
                    c"REPLCONF".as_ptr(),
                    c"cc".as_ptr(),
                    c"GETACK".as_ptr(),
                    c"*".as_ptr(),
                );
            }
        }
    }
}

/// The blocking `WAIT` of [`request_replica_acks`]: whether the server
/// took it.
fn wait_to_ask(ctx: &Context) -> bool {
    unsafe {
        let (Some(call), Some(kind), Some(abort), Some(free)) = (
            raw::RedisModule_Call,
            raw::RedisModule_CallReplyType,
            raw::RedisModule_CallReplyPromiseAbort,
            raw::RedisModule_FreeCallReply,
        ) else {
            return false;
        };
        let reply = call(
            ctx.get_raw(),
            c"WAIT".as_ptr(),
            c"Kcc".as_ptr(),
            c"2147483647".as_ptr(),
            c"1".as_ptr(),
        );
        if reply.is_null() {
            return false;
        }
        let promised = kind(reply) == raw::REDISMODULE_REPLY_PROMISE as c_int;
        if promised {
            abort(reply, std::ptr::null_mut());
        }
        free(reply);
        promised
    }
}

fn reply_error(ctx: &Context, error: LockError) {
    super::reply::error(ctx, error);
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_errno(value: c_int) {
    unsafe { *libc::__errno_location() = value };
}
