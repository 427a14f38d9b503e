//! Registering the module's commands, and the entry every call of one goes
//! through.
//!
//! `redis-module`'s own command wrapper copies the arguments into a `Vec`,
//! taking a reference on each one and giving it back after the command
//! (`decode_args`): a heap allocation and two calls into the server per
//! argument, on every request, about 750 instructions of a `SEM.ACQUIRE`'s
//! 12,700 (callgrind, `bench/profile.sh`). The server keeps a command's
//! arguments alive until the command returns, and a command body only
//! borrows them (`&[RedisString]`: anything kept longer is copied), so here
//! they are lent as they are, from the stack.

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::raw::c_int;
use std::sync::OnceLock;

use redis_lock_core::errors::LockError;
use redis_module::{raw, Context, RedisString};

use super::guard::guarded;
use super::{replicate, reply};

/// A command body (`commands/*.rs`): it replies itself on success; an `Err`
/// is replied here.
pub type Body = fn(&Context, &[RedisString]) -> Result<(), LockError>;

/// Where a command's keys are, for Cluster routing, ACL key patterns and
/// `COMMAND GETKEYS`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// Argument 1 (first 1, last 1, step 1).
    First,
    /// None: the command touches no key of its own (`LOCK.LEASE`).
    None,
    /// `numkeys key [key ...]` from argument 1 (`LOCK.MACQUIRE`): the
    /// first key is argument 2 (first 2, last 2, step 1, for clients that
    /// route by it), and the command, flagged `getkeys-api`, reports every
    /// key when the server asks ([`report_numkeys`]).
    Numkeys,
}

/// Tell the server where the keys of `command numkeys key [key ...] …` are
/// (Cluster routing and `CROSSSLOT`, ACL key patterns, `COMMAND GETKEYS`):
/// every key, each written. Nothing when `numkeys` is not valid; the
/// command itself then refuses it.
pub fn report_numkeys(ctx: &Context, args: &[RedisString]) {
    let Some(key_at) = (unsafe { raw::RedisModule_KeyAtPos }) else {
        return;
    };
    if let Some(keys) = redis_lock_core::args::numkeys_range(super::args(args)) {
        for at in keys {
            let Ok(at) = c_int::try_from(at) else {
                return;
            };
            unsafe { key_at(ctx.get_raw(), at) };
        }
    }
}

/// A command of the module: its name, flags, ACL categories and body, and
/// where its key is. A subcommand names its container (`LOCK.LEASE GRANT`:
/// name `grant`, parent `lock.lease`); a container has no body.
pub struct Spec {
    pub name: &'static CStr,
    /// The container command, for a subcommand.
    pub parent: Option<&'static CStr>,
    pub keys: Keys,
    pub flags: &'static CStr,
    /// Its standard ACL categories, space-separated (`write fast`).
    pub categories: &'static str,
    /// Whether it is in the module's own category too, where the server
    /// can add one.
    pub in_lock_category: bool,
    /// `None` for a container, whose subcommands have the bodies.
    pub body: Option<Body>,
}

impl Spec {
    /// The name ACL rules and `COMMAND INFO` know it by: `lock.lease|grant`
    /// for a subcommand.
    pub fn full_name(&self) -> String {
        match self.parent {
            Some(parent) => format!(
                "{}|{}",
                parent.to_string_lossy(),
                self.name.to_string_lossy()
            ),
            None => self.name.to_string_lossy().into_owned(),
        }
    }
}

/// The bodies, by the index of their command's entry in [`ENTRIES`]; set
/// once, while the module loads.
static BODIES: OnceLock<Vec<Option<Body>>> = OnceLock::new();

/// The entry the server calls for the command of index `I`.
extern "C" fn entry<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    if let Some(Some(body)) = BODIES.get().and_then(|bodies| bodies.get(I)) {
        // SAFETY: the server's own arguments of this call.
        unsafe { dispatch(ctx, argv, argc, *body) };
    }
    raw::REDISMODULE_OK as c_int
}

type Entry =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// One entry per command, at most this many commands.
#[rustfmt::skip]
const ENTRIES: [Entry; 32] = [
    entry::<0>, entry::<1>, entry::<2>, entry::<3>, entry::<4>, entry::<5>, entry::<6>, entry::<7>,
    entry::<8>, entry::<9>, entry::<10>, entry::<11>, entry::<12>, entry::<13>, entry::<14>,
    entry::<15>, entry::<16>, entry::<17>, entry::<18>, entry::<19>, entry::<20>, entry::<21>,
    entry::<22>, entry::<23>, entry::<24>, entry::<25>, entry::<26>, entry::<27>, entry::<28>,
    entry::<29>, entry::<30>, entry::<31>,
];

/// Create every command of `specs` (once, while the module loads).
pub fn create_all(ctx: &Context, specs: &[Spec]) -> Result<(), String> {
    if specs.len() > ENTRIES.len() {
        return Err(format!("more than {} commands", ENTRIES.len()));
    }
    BODIES
        .set(specs.iter().map(|spec| spec.body).collect())
        .map_err(|_| "the commands were already created".to_string())?;
    let create = unsafe { raw::RedisModule_CreateCommand }
        .ok_or("the server has no RedisModule_CreateCommand")?;
    for (spec, entry) in specs.iter().zip(ENTRIES) {
        let (first, last, step) = match spec.keys {
            Keys::First => (1, 1, 1),
            Keys::None => (0, 0, 0),
            Keys::Numkeys => (2, 2, 1),
        };
        let entry: raw::RedisModuleCmdFunc = match spec.body {
            Some(_) => Some(entry),
            None => None,
        };
        let status = match spec.parent {
            None => unsafe {
                create(
                    ctx.get_raw(),
                    spec.name.as_ptr(),
                    entry,
                    spec.flags.as_ptr(),
                    first,
                    last,
                    step,
                )
            },
            Some(parent) => create_subcommand(ctx, parent, spec, entry, (first, last, step)),
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not create the command {}", spec.full_name()));
        }
    }
    Ok(())
}

/// Create `spec` as a subcommand of `parent` (created before it).
fn create_subcommand(
    ctx: &Context,
    parent: &CStr,
    spec: &Spec,
    entry: raw::RedisModuleCmdFunc,
    (first, last, step): (c_int, c_int, c_int),
) -> c_int {
    let error = raw::REDISMODULE_ERR as c_int;
    let (Some(get), Some(create)) = (unsafe {
        (
            raw::RedisModule_GetCommand,
            raw::RedisModule_CreateSubcommand,
        )
    }) else {
        return error;
    };
    let container = unsafe { get(ctx.get_raw(), parent.as_ptr()) };
    if container.is_null() {
        return error;
    }
    unsafe {
        create(
            container,
            spec.name.as_ptr(),
            entry,
            spec.flags.as_ptr(),
            first,
            last,
            step,
        )
    }
}

/// Most arguments lent from the stack; a longer command (a `LOCK.GUARD` of
/// a long `MSET`) has them in a `Vec`.
const STACK_ARGS: usize = 16;

/// Run `body` with the command's context and its arguments, borrowed: no
/// reference is taken on them and none given back. Nothing escapes into
/// Redis: its error becomes the reply, and a panic (a bug) becomes `ERR
/// internal error` instead of aborting the server (the panic hook has
/// already logged it).
///
/// # Safety
/// `argv` must be the server's `argc` arguments of the command it is running
/// on `ctx`.
unsafe fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    body: Body,
) {
    let context = Context::new(ctx);
    let count = usize::try_from(argc).unwrap_or(0);
    let raw_args: &[*mut raw::RedisModuleString] = if argv.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: the server passes `argc` valid argument pointers.
        unsafe { std::slice::from_raw_parts(argv, count) }
    };
    // `from_redis_module_string` takes no reference; `MaybeUninit` (and
    // `ManuallyDrop` below) never drop, so none is given back either.
    let borrow =
        |arg: &*mut raw::RedisModuleString| RedisString::from_redis_module_string(ctx, *arg);
    if raw_args.len() <= STACK_ARGS {
        let mut on_stack: [MaybeUninit<RedisString>; STACK_ARGS] =
            [const { MaybeUninit::uninit() }; STACK_ARGS];
        for (slot, arg) in on_stack.iter_mut().zip(raw_args) {
            slot.write(borrow(arg));
        }
        // SAFETY: the first `raw_args.len()` slots were written just above.
        let args = unsafe {
            std::slice::from_raw_parts(on_stack.as_ptr().cast::<RedisString>(), raw_args.len())
        };
        run(&context, args, body);
    } else {
        let on_heap: Vec<std::mem::ManuallyDrop<RedisString>> = raw_args
            .iter()
            .map(|arg| std::mem::ManuallyDrop::new(borrow(arg)))
            .collect();
        // SAFETY: `ManuallyDrop<T>` is `repr(transparent)` over `T`.
        let args = unsafe {
            std::slice::from_raw_parts(on_heap.as_ptr().cast::<RedisString>(), on_heap.len())
        };
        run(&context, args, body);
    }
}

#[inline(always)]
fn run(ctx: &Context, args: &[RedisString], body: Body) {
    // Lock commands are not guarded commands, at any depth: a script that
    // `LOCK.GUARD` runs may not call one either.
    if super::call::guarding() && !ctx.is_keys_position_request() {
        return reply::error(ctx, LockError::GuardLockCommand);
    }
    // Its effects may be left unbuilt while nothing reads them (`replicate.rs`).
    match replicate::in_command(ctx, || guarded(|| body(ctx, args))) {
        Some(Ok(())) => {}
        Some(Err(error)) => reply::error(ctx, error),
        None => reply::error(ctx, LockError::Internal),
    }
}
