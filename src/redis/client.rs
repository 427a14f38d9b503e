//! The calling client: its id (for SESSION) and its ACL user, and whether a
//! user may still use a key (checked again when a waiter is granted).

use std::os::raw::c_int;

use redis_module::{raw, Context, RedisString};

/// The id of the client running the command.
pub fn id(ctx: &Context) -> u64 {
    unsafe { raw::RedisModule_GetClientId.map_or(0, |f| f(ctx.get_raw())) }
}

/// The name of the ACL user the calling client runs as.
pub fn user(ctx: &Context) -> Option<Box<[u8]>> {
    unsafe {
        let (Some(user_name), Some(ptr_len), Some(free)) = (
            raw::RedisModule_GetCurrentUserName,
            raw::RedisModule_StringPtrLen,
            raw::RedisModule_FreeString,
        ) else {
            return None;
        };
        let name = user_name(ctx.get_raw());
        if name.is_null() {
            return None;
        }
        let mut len = 0usize;
        let bytes = ptr_len(name, &mut len);
        let owned = (!bytes.is_null())
            .then(|| Box::from(std::slice::from_raw_parts(bytes.cast::<u8>(), len)));
        free(ctx.get_raw(), name);
        owned
    }
}

/// Whether `user` may still read and write `key`: an operator may have
/// changed its key patterns (`ACL SETUSER … resetkeys`) while it waited. A
/// user that no longer exists may not (Redis closes its clients anyway).
/// `None` (no user known): yes.
pub fn may_access(ctx: &Context, user: Option<&[u8]>, key: &RedisString) -> bool {
    let Some(user) = user else {
        return true;
    };
    let name = super::string(ctx, user);
    unsafe {
        let (Some(lookup), Some(check), Some(free)) = (
            raw::RedisModule_GetModuleUserFromUserName,
            raw::RedisModule_ACLCheckKeyPermissions,
            raw::RedisModule_FreeModuleUser,
        ) else {
            return true;
        };
        let acl_user = lookup(name.inner);
        if acl_user.is_null() {
            return false;
        }
        // Read (ACCESS) and write (UPDATE) access, as the command's own key
        // needs; Redis accepts only these operation flags here.
        let flags = raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;
        let allowed = check(acl_user, key.inner, flags as c_int) == raw::Status::Ok as c_int;
        free(acl_user);
        allowed
    }
}
