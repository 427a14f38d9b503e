//! A command's reply copied out of the server's call reply into memory of
//! our own, for an answer sent after the command that made it has returned
//! (`LOCK.GUARD … SYNC`). The server's call reply cannot wait that long: it
//! points into the context of the command that made it, which Redis 7.0
//! reads again when the reply is freed (a dead stack frame by then: the
//! server crashed on it).
//!
//! The copy is the reply's tree written out in order (each collection
//! before its elements, an element's attributes before it), with every
//! string's bytes in one buffer: two allocations whatever its size, and
//! neither the copy nor the answer recurses, however deep a script nests
//! its reply. Each kind is sent back through the module API call that the
//! server itself writes it with, in the protocol the call ran in (the
//! client's own), so the client gets the bytes it would have had at once.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_long};

use redis_lock_core::errors::LockError;
use redis_module::{raw, Context};

/// One node of the tree; a string's bytes are the next `len` of the
/// buffer (a simple string's and an error's, then a NUL).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Part {
    /// `+…` (the server's module API gives a simple string and a bulk the
    /// same type: the protocol's first byte tells them apart).
    Simple(usize),
    Error(usize),
    Bulk(usize),
    Integer(i64),
    /// `$-1` in RESP2, `_` in RESP3.
    Null,
    /// `*-1` in RESP2 (`_` in RESP3).
    NullArray,
    Array(usize),
    /// That many key-value pairs follow.
    Map(usize),
    Set(usize),
    /// That many key-value pairs follow, then the value they describe.
    Attribute(usize),
    Bool(bool),
    Double(f64),
    BigNumber(usize),
    /// Its 3-byte format (`txt`, `mkd`), then the text.
    Verbatim([u8; 3], usize),
}

/// A reply of our own, sent with [`KeptReply::reply`].
pub struct KeptReply {
    parts: Vec<Part>,
    bytes: Vec<u8>,
}

/// A call reply to copy, and whether its attributes are copied already.
struct Pending {
    reply: *mut raw::RedisModuleCallReply,
    attributes_done: bool,
}

impl KeptReply {
    /// Copy `reply` and everything in it. It stays the caller's to free.
    ///
    /// # Safety
    /// `reply` is a live call reply from `RedisModule_Call`, on the main
    /// thread.
    pub(super) unsafe fn copy(reply: *mut raw::RedisModuleCallReply) -> KeptReply {
        let mut kept = KeptReply {
            parts: Vec::new(),
            bytes: Vec::new(),
        };
        let Some(api) = ReadApi::get() else {
            kept.internal_error();
            return kept;
        };
        let mut todo = vec![Pending {
            reply,
            attributes_done: false,
        }];
        while let Some(Pending {
            reply,
            attributes_done,
        }) = todo.pop()
        {
            if !attributes_done {
                let attributes = (api.attribute)(reply);
                if !attributes.is_null() {
                    let pairs = (api.length)(attributes);
                    kept.parts.push(Part::Attribute(pairs));
                    // The value after its attributes: pushed first, popped last.
                    todo.push(Pending {
                        reply,
                        attributes_done: true,
                    });
                    push_pairs(&mut todo, attributes, pairs, api.attribute_element);
                    continue;
                }
            }
            kept.copy_one(&api, reply, &mut todo);
        }
        kept
    }

    /// Copy the node `reply`, and queue its elements, if any.
    unsafe fn copy_one(
        &mut self,
        api: &ReadApi,
        reply: *mut raw::RedisModuleCallReply,
        todo: &mut Vec<Pending>,
    ) {
        let kind = (api.kind)(reply);
        match kind as isize {
            raw::REDISMODULE_REPLY_STRING => {
                let (ptr, len) = string_of(api, reply);
                if first_byte(api, reply) == Some(b'+') {
                    self.text(Part::Simple, ptr, len);
                } else {
                    self.bytes(Part::Bulk, ptr, len);
                }
            }
            raw::REDISMODULE_REPLY_ERROR => {
                let (ptr, len) = string_of(api, reply);
                self.text(Part::Error, ptr, len);
            }
            raw::REDISMODULE_REPLY_INTEGER => self.parts.push(Part::Integer((api.integer)(reply))),
            raw::REDISMODULE_REPLY_NULL => self.parts.push(match first_byte(api, reply) {
                Some(b'*') => Part::NullArray,
                _ => Part::Null,
            }),
            raw::REDISMODULE_REPLY_BOOL => self.parts.push(Part::Bool((api.boolean)(reply) != 0)),
            raw::REDISMODULE_REPLY_DOUBLE => self.parts.push(Part::Double((api.double)(reply))),
            raw::REDISMODULE_REPLY_BIG_NUMBER => {
                let mut len = 0usize;
                let ptr = (api.big_number)(reply, &mut len);
                self.bytes(Part::BigNumber, ptr, len);
            }
            raw::REDISMODULE_REPLY_VERBATIM_STRING => {
                let mut len = 0usize;
                let mut format: *const c_char = std::ptr::null();
                let ptr = (api.verbatim)(reply, &mut len, &mut format);
                let mut ext = *b"txt";
                if !format.is_null() {
                    // SAFETY: the server's verbatim format is 3 bytes.
                    ext.copy_from_slice(std::slice::from_raw_parts(format.cast::<u8>(), 3));
                }
                self.bytes(|len| Part::Verbatim(ext, len), ptr, len);
            }
            raw::REDISMODULE_REPLY_ARRAY | raw::REDISMODULE_REPLY_SET => {
                let len = (api.length)(reply);
                let (part, element) = if kind as isize == raw::REDISMODULE_REPLY_ARRAY {
                    (Part::Array(len), api.array_element)
                } else {
                    (Part::Set(len), api.set_element)
                };
                self.parts.push(part);
                // In reverse: the first element is popped first.
                for i in (0..len).rev() {
                    todo.push(Pending {
                        reply: element(reply, i),
                        attributes_done: false,
                    });
                }
            }
            raw::REDISMODULE_REPLY_MAP => {
                let pairs = (api.length)(reply);
                self.parts.push(Part::Map(pairs));
                push_pairs(todo, reply, pairs, api.map_element);
            }
            // Unknown to this module (or a promise, which `RM_Call` gives
            // only with a flag it is not called with).
            _ => self.internal_error(),
        }
    }

    /// A bulk-like part: the bytes as they are.
    fn bytes(&mut self, part: impl FnOnce(usize) -> Part, ptr: *const c_char, len: usize) {
        let bytes = unsafe { slice(ptr, len) };
        self.bytes.extend_from_slice(bytes);
        self.parts.push(part(bytes.len()));
    }

    /// A simple string or an error, sent as a C string: up to a NUL byte
    /// (the server's own replies of these kinds never hold one), then a NUL.
    fn text(&mut self, part: impl FnOnce(usize) -> Part, ptr: *const c_char, len: usize) {
        let bytes = unsafe { slice(ptr, len) };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        self.bytes.extend_from_slice(&bytes[..end]);
        self.bytes.push(0);
        self.parts.push(part(end));
    }

    fn internal_error(&mut self) {
        let text = LockError::Internal.as_cstr().to_bytes();
        self.text(Part::Error, text.as_ptr().cast::<c_char>(), text.len());
    }

    /// Send it to the client of `ctx` (a blocked client's reply context).
    pub fn reply(&self, ctx: &Context) {
        let Some(api) = WriteApi::get() else {
            super::reply::error(ctx, LockError::Internal);
            return;
        };
        let c = ctx.get_raw();
        let mut at = 0usize;
        let mut take = |len: usize| {
            let bytes = self.bytes.get(at..at + len).unwrap_or_default();
            at += len;
            bytes
        };
        for part in &self.parts {
            unsafe {
                match *part {
                    Part::Simple(len) => {
                        (api.simple)(c, c_text(take(len + 1)).as_ptr());
                    }
                    Part::Error(len) => {
                        (api.error)(c, c_text(take(len + 1)).as_ptr());
                    }
                    Part::Bulk(len) => {
                        let bytes = take(len);
                        (api.bulk)(c, bytes.as_ptr().cast::<c_char>(), bytes.len());
                    }
                    Part::Integer(n) => {
                        (api.integer)(c, n);
                    }
                    Part::Null => {
                        (api.null)(c);
                    }
                    Part::NullArray => {
                        (api.null_array)(c);
                    }
                    Part::Array(len) => {
                        (api.array)(c, count(len));
                    }
                    Part::Map(len) => {
                        (api.map)(c, count(len));
                    }
                    Part::Set(len) => {
                        (api.set)(c, count(len));
                    }
                    Part::Attribute(len) => {
                        (api.attribute)(c, count(len));
                    }
                    Part::Bool(b) => {
                        (api.boolean)(c, c_int::from(b));
                    }
                    Part::Double(d) => {
                        (api.double)(c, d);
                    }
                    Part::BigNumber(len) => {
                        let bytes = take(len);
                        (api.big_number)(c, bytes.as_ptr().cast::<c_char>(), bytes.len());
                    }
                    Part::Verbatim(ext, len) => {
                        let bytes = take(len);
                        (api.verbatim)(
                            c,
                            bytes.as_ptr().cast::<c_char>(),
                            bytes.len(),
                            ext.as_ptr().cast::<c_char>(),
                        );
                    }
                }
            }
        }
    }
}

/// Queue the `pairs` key-value pairs of a map or an attribute set, in
/// reverse, so that the first key is popped first.
unsafe fn push_pairs(
    todo: &mut Vec<Pending>,
    reply: *mut raw::RedisModuleCallReply,
    pairs: usize,
    element: MapElement,
) {
    for i in (0..pairs).rev() {
        let mut key = std::ptr::null_mut();
        let mut value = std::ptr::null_mut();
        element(reply, i, &mut key, &mut value);
        for reply in [value, key] {
            todo.push(Pending {
                reply,
                attributes_done: false,
            });
        }
    }
}

unsafe fn string_of(
    api: &ReadApi,
    reply: *mut raw::RedisModuleCallReply,
) -> (*const c_char, usize) {
    let mut len = 0usize;
    let ptr = (api.string)(reply, &mut len);
    (ptr, len)
}

/// The first byte of the node's own protocol (after its attributes, which
/// its protocol starts with).
unsafe fn first_byte(api: &ReadApi, reply: *mut raw::RedisModuleCallReply) -> Option<u8> {
    let mut len = 0usize;
    let proto = slice((api.proto)(reply, &mut len), len);
    let attributes = (api.attribute)(reply);
    let skip = if attributes.is_null() {
        0
    } else {
        let mut len = 0usize;
        (api.proto)(attributes, &mut len);
        len
    };
    proto.get(skip).copied()
}

/// `len` bytes at `ptr` (none when it is null).
unsafe fn slice<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if ptr.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// Bytes that end with their only NUL (as [`KeptReply::text`] keeps them),
/// as a C string.
fn c_text(bytes: &[u8]) -> &CStr {
    CStr::from_bytes_with_nul(bytes).unwrap_or_default()
}

fn count(len: usize) -> c_long {
    c_long::try_from(len).unwrap_or(c_long::MAX)
}

type Reply = *mut raw::RedisModuleCallReply;
type MapElement = unsafe extern "C" fn(Reply, usize, *mut Reply, *mut Reply) -> c_int;

/// The module API calls that read a call reply, all present on every
/// server the module loads on (Redis 7.0+, Valkey 8+).
struct ReadApi {
    kind: unsafe extern "C" fn(Reply) -> c_int,
    length: unsafe extern "C" fn(Reply) -> usize,
    proto: unsafe extern "C" fn(Reply, *mut usize) -> *const c_char,
    string: unsafe extern "C" fn(Reply, *mut usize) -> *const c_char,
    integer: unsafe extern "C" fn(Reply) -> i64,
    boolean: unsafe extern "C" fn(Reply) -> c_int,
    double: unsafe extern "C" fn(Reply) -> f64,
    big_number: unsafe extern "C" fn(Reply, *mut usize) -> *const c_char,
    verbatim: unsafe extern "C" fn(Reply, *mut usize, *mut *const c_char) -> *const c_char,
    array_element: unsafe extern "C" fn(Reply, usize) -> Reply,
    set_element: unsafe extern "C" fn(Reply, usize) -> Reply,
    map_element: MapElement,
    attribute: unsafe extern "C" fn(Reply) -> Reply,
    attribute_element: MapElement,
}

impl ReadApi {
    fn get() -> Option<ReadApi> {
        unsafe {
            Some(ReadApi {
                kind: raw::RedisModule_CallReplyType?,
                length: raw::RedisModule_CallReplyLength?,
                proto: raw::RedisModule_CallReplyProto?,
                string: raw::RedisModule_CallReplyStringPtr?,
                integer: raw::RedisModule_CallReplyInteger?,
                boolean: raw::RedisModule_CallReplyBool?,
                double: raw::RedisModule_CallReplyDouble?,
                big_number: raw::RedisModule_CallReplyBigNumber?,
                verbatim: raw::RedisModule_CallReplyVerbatim?,
                array_element: raw::RedisModule_CallReplyArrayElement?,
                set_element: raw::RedisModule_CallReplySetElement?,
                map_element: raw::RedisModule_CallReplyMapElement?,
                attribute: raw::RedisModule_CallReplyAttribute?,
                attribute_element: raw::RedisModule_CallReplyAttributeElement?,
            })
        }
    }
}

type Ctx = *mut raw::RedisModuleCtx;

/// The module API calls that write a reply: each the one the server writes
/// that kind with, in either protocol.
struct WriteApi {
    simple: unsafe extern "C" fn(Ctx, *const c_char) -> c_int,
    error: unsafe extern "C" fn(Ctx, *const c_char) -> c_int,
    bulk: unsafe extern "C" fn(Ctx, *const c_char, usize) -> c_int,
    integer: unsafe extern "C" fn(Ctx, i64) -> c_int,
    null: unsafe extern "C" fn(Ctx) -> c_int,
    null_array: unsafe extern "C" fn(Ctx) -> c_int,
    array: unsafe extern "C" fn(Ctx, c_long) -> c_int,
    map: unsafe extern "C" fn(Ctx, c_long) -> c_int,
    set: unsafe extern "C" fn(Ctx, c_long) -> c_int,
    attribute: unsafe extern "C" fn(Ctx, c_long) -> c_int,
    boolean: unsafe extern "C" fn(Ctx, c_int) -> c_int,
    double: unsafe extern "C" fn(Ctx, f64) -> c_int,
    big_number: unsafe extern "C" fn(Ctx, *const c_char, usize) -> c_int,
    verbatim: unsafe extern "C" fn(Ctx, *const c_char, usize, *const c_char) -> c_int,
}

impl WriteApi {
    fn get() -> Option<WriteApi> {
        unsafe {
            Some(WriteApi {
                simple: raw::RedisModule_ReplyWithSimpleString?,
                error: raw::RedisModule_ReplyWithError?,
                bulk: raw::RedisModule_ReplyWithStringBuffer?,
                integer: raw::RedisModule_ReplyWithLongLong?,
                null: raw::RedisModule_ReplyWithNull?,
                null_array: raw::RedisModule_ReplyWithNullArray?,
                array: raw::RedisModule_ReplyWithArray?,
                map: raw::RedisModule_ReplyWithMap?,
                set: raw::RedisModule_ReplyWithSet?,
                attribute: raw::RedisModule_ReplyWithAttribute?,
                boolean: raw::RedisModule_ReplyWithBool?,
                double: raw::RedisModule_ReplyWithDouble?,
                big_number: raw::RedisModule_ReplyWithBigNumber?,
                verbatim: raw::RedisModule_ReplyWithVerbatimStringType?,
            })
        }
    }
}
