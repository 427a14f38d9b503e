//! ACL categories: what the server can do with them, adding the module's own
//! category (`@lock`), and setting a command's categories. Only at load:
//! the server refuses both calls once `RedisModule_OnLoad` has returned.
//!
//! Why not the `redis_module!` command table's optional-category field: the
//! crate passes it in one `SetCommandACLCategories` call, so on a server that
//! has that call but cannot add a module category (Redis 7.2), naming `lock`
//! there makes the server refuse the whole string, and the command would be
//! left with no category at all. `startup.rs` picks the string instead.

use std::ffi::CString;

use redis_module::{raw, Context};

/// What the server can do with the categories of module commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclSupport {
    /// Redis 7.0: a module command has no category, so `+@write`/`-@write`
    /// and the like never reach it; it is granted by name only.
    None,
    /// Redis 7.2: the standard categories (`@write`, `@fast`, …).
    Standard,
    /// Redis 7.4+, Valkey 8+: the standard ones and a module category.
    ModuleCategory,
}

/// What this server offers, from the module API functions it exports.
pub fn support() -> AclSupport {
    let can_set = unsafe { raw::RedisModule_SetCommandACLCategories }.is_some();
    let can_add = unsafe { raw::RedisModule_AddACLCategory }.is_some();
    match (can_set, can_add) {
        (true, true) => AclSupport::ModuleCategory,
        (true, false) => AclSupport::Standard,
        (false, _) => AclSupport::None,
    }
}

/// Add the category `@name`, to be named in [`set_command_categories`].
pub fn add_category(ctx: &Context, name: &str) -> Result<(), String> {
    let add = unsafe { raw::RedisModule_AddACLCategory }
        .ok_or("this server cannot add ACL categories")?;
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    match unsafe { add(ctx.get_raw(), c_name.as_ptr()) } {
        status if status == raw::Status::Ok as i32 => Ok(()),
        _ => Err(format!(
            "the server refused to add the ACL category @{name}"
        )),
    }
}

/// Set the categories of `command` (a space-separated list, e.g. `write fast
/// lock`), replacing any it had.
pub fn set_command_categories(
    ctx: &Context,
    command: &str,
    categories: &str,
) -> Result<(), String> {
    let set = unsafe { raw::RedisModule_SetCommandACLCategories }
        .ok_or("this server cannot set ACL categories")?;
    let get =
        unsafe { raw::RedisModule_GetCommand }.ok_or("this server cannot look up commands")?;
    let c_command = CString::new(command).map_err(|e| e.to_string())?;
    let c_categories = CString::new(categories).map_err(|e| e.to_string())?;
    let handle = unsafe { get(ctx.get_raw(), c_command.as_ptr()) };
    if handle.is_null() {
        return Err(format!("no command {command}"));
    }
    match unsafe { set(handle, c_categories.as_ptr()) } {
        status if status == raw::Status::Ok as i32 => Ok(()),
        _ => Err(format!(
            "the server refused the ACL categories `{categories}` for {command}"
        )),
    }
}
