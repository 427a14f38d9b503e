//! Replies, written straight to the client without building a `RedisValue`.

use std::ffi::CStr;
use std::os::raw::{c_char, c_long, c_longlong};

use redis_lock_core::errors::LockError;
use redis_module::{raw, Context};

/// `[token, fence]`
#[inline]
pub fn grant(ctx: &Context, token: &[u8], fence: u64) {
    unsafe {
        if let (Some(array), Some(buffer), Some(integer)) = (
            raw::RedisModule_ReplyWithArray,
            raw::RedisModule_ReplyWithStringBuffer,
            raw::RedisModule_ReplyWithLongLong,
        ) {
            array(ctx.get_raw(), 2);
            buffer(ctx.get_raw(), token.as_ptr().cast::<c_char>(), token.len());
            integer(ctx.get_raw(), fence as c_longlong);
        }
    }
}

/// A bulk string.
pub fn bytes(ctx: &Context, value: &[u8]) {
    unsafe {
        if let Some(buffer) = raw::RedisModule_ReplyWithStringBuffer {
            buffer(ctx.get_raw(), value.as_ptr().cast::<c_char>(), value.len());
        }
    }
}

pub fn null(ctx: &Context) {
    unsafe {
        if let Some(null) = raw::RedisModule_ReplyWithNull {
            null(ctx.get_raw());
        }
    }
}

pub fn integer(ctx: &Context, value: i64) {
    unsafe {
        if let Some(integer) = raw::RedisModule_ReplyWithLongLong {
            integer(ctx.get_raw(), value);
        }
    }
}

pub fn ok(ctx: &Context) {
    unsafe {
        if let Some(simple) = raw::RedisModule_ReplyWithSimpleString {
            simple(ctx.get_raw(), c"OK".as_ptr());
        }
    }
}

pub fn error(ctx: &Context, error: LockError) {
    unsafe {
        if let Some(reply) = raw::RedisModule_ReplyWithError {
            reply(ctx.get_raw(), error.as_cstr().as_ptr());
        }
    }
}

/// An error reply with this text (its first word is the error code).
pub fn error_text(ctx: &Context, text: &CStr) {
    unsafe {
        if let Some(reply) = raw::RedisModule_ReplyWithError {
            reply(ctx.get_raw(), text.as_ptr());
        }
    }
}

/// A value in a [`map`].
pub enum Field<'a> {
    Int(i64),
    Bytes(&'a [u8]),
    /// An array of maps (`LOCK.INFO`'s `holds`).
    Maps(&'a [Vec<(&'static CStr, Field<'a>)>]),
    /// An array of strings (`LOCK.LEASE INFO`'s `keys`).
    List(&'a [&'a [u8]]),
}

/// A map of names to values: a RESP3 map, or a flat name/value array on
/// RESP2 (Redis' `ReplyWithMap` picks by the client's protocol).
pub fn map(ctx: &Context, fields: &[(&CStr, Field)]) {
    unsafe {
        if let (Some(reply_map), Some(name), Some(integer), Some(buffer)) = (
            raw::RedisModule_ReplyWithMap,
            raw::RedisModule_ReplyWithCString,
            raw::RedisModule_ReplyWithLongLong,
            raw::RedisModule_ReplyWithStringBuffer,
        ) {
            reply_map(ctx.get_raw(), fields.len() as c_long);
            for (field, value) in fields {
                name(ctx.get_raw(), field.as_ptr());
                match value {
                    Field::Int(n) => integer(ctx.get_raw(), *n),
                    Field::Bytes(b) => buffer(ctx.get_raw(), b.as_ptr().cast::<c_char>(), b.len()),
                    Field::Maps(maps) => {
                        array(ctx, maps.len());
                        for fields in maps.iter() {
                            map(ctx, fields);
                        }
                        0
                    }
                    Field::List(items) => {
                        array(ctx, items.len());
                        for item in items.iter() {
                            buffer(ctx.get_raw(), item.as_ptr().cast::<c_char>(), item.len());
                        }
                        0
                    }
                };
            }
        }
    }
}

/// An array of simple strings (`HELP`'s lines).
pub fn lines(ctx: &Context, lines: &[&CStr]) {
    array(ctx, lines.len());
    unsafe {
        if let Some(simple) = raw::RedisModule_ReplyWithSimpleString {
            for line in lines {
                simple(ctx.get_raw(), line.as_ptr());
            }
        }
    }
}

/// An array of `len` elements; the caller replies each.
pub fn array(ctx: &Context, len: usize) {
    unsafe {
        if let Some(array) = raw::RedisModule_ReplyWithArray {
            array(ctx.get_raw(), len as c_long);
        }
    }
}
