//! What the server shows about a key, typed: `LOCK.INFO` ([`LockInfo`]),
//! `LOCK.QUEUE` ([`Waiter`]) and `SEM.INFO` ([`SemaphoreInfo`]). Never a
//! token: the server does not show one.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::{unexpected_reply, Result};

/// The fields of one map in a reply: a RESP3 map, or a RESP2 flat array of
/// name/value pairs (the `redis` crate reads both into this).
pub(crate) struct Fields {
    fields: HashMap<String, Value>,
    command: &'static str,
}

impl Fields {
    pub(crate) fn new(fields: HashMap<String, Value>, command: &'static str) -> Fields {
        Fields { fields, command }
    }

    fn missing(&self, name: &str) -> crate::Error {
        unexpected_reply(self.command, name)
    }

    /// An integer field that must be there.
    pub(crate) fn int(&self, name: &str) -> Result<i64> {
        self.opt_int(name)?.ok_or_else(|| self.missing(name))
    }

    /// An integer field that may be absent.
    pub(crate) fn opt_int(&self, name: &str) -> Result<Option<i64>> {
        match self.fields.get(name) {
            None => Ok(None),
            Some(Value::Int(n)) => Ok(Some(*n)),
            Some(_) => Err(self.missing(name)),
        }
    }

    /// A non-negative integer field that must be there.
    pub(crate) fn count<T: TryFrom<i64>>(&self, name: &str) -> Result<T> {
        T::try_from(self.int(name)?).map_err(|_| self.missing(name))
    }

    /// A non-negative integer field, or `default` when absent.
    pub(crate) fn count_or<T: TryFrom<i64>>(&self, name: &str, default: T) -> Result<T> {
        match self.opt_int(name)? {
            None => Ok(default),
            Some(n) => T::try_from(n).map_err(|_| self.missing(name)),
        }
    }

    /// Milliseconds, or `None` for a negative value (`-1`: no TTL).
    pub(crate) fn millis(&self, name: &str) -> Result<Option<Duration>> {
        Ok(u64::try_from(self.int(name)?)
            .ok()
            .map(Duration::from_millis))
    }

    /// A string field, as bytes, that may be absent.
    pub(crate) fn bytes(&self, name: &str) -> Result<Option<Vec<u8>>> {
        match self.fields.get(name) {
            None => Ok(None),
            Some(Value::BulkString(b)) => Ok(Some(b.clone())),
            Some(Value::SimpleString(s)) => Ok(Some(s.as_bytes().to_vec())),
            Some(Value::VerbatimString { text, .. }) => Ok(Some(text.as_bytes().to_vec())),
            Some(_) => Err(self.missing(name)),
        }
    }
}

/// A unix time in milliseconds, or `None` for a negative one.
fn unix_ms(ms: i64) -> Option<SystemTime> {
    u64::try_from(ms)
        .ok()
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
}

/// How a lock key is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockMode {
    /// One holder, alone.
    Exclusive,
    /// Readers, together (`LOCK.ACQUIRE … SHARED`).
    Shared,
}

/// A held lock as `LOCK.INFO` shows it ([`Locks::info`](crate::Locks::info)).
/// For a shared lock, `fence`, `granted` and `extends` are those of the
/// reader with the highest fence, and `ttl`/`deadline` the latest lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The holder's fence.
    pub fence: u64,
    /// What is left of the lease when the server answered; `None` if the
    /// key's TTL was removed (`PERSIST`).
    pub ttl: Option<Duration>,
    /// The lease's end on the server's clock; `None` without a TTL.
    pub deadline: Option<SystemTime>,
    /// When the holder was granted the lock, on the server's clock
    /// (`lock.max-hold-ms` counts from here).
    pub granted: Option<SystemTime>,
    /// How many times the holder extended or renewed its lease.
    pub extends: u64,
    /// How many clients wait for the lock.
    pub waiters: u64,
    /// Exclusive or shared.
    pub mode: LockMode,
    /// How many tokens hold the key (1 unless shared).
    pub holders: u64,
    /// The holder's `OWNER` label, as sent (any bytes); `None` if it gave
    /// none.
    pub owner: Option<Vec<u8>>,
    /// The public number of the lease group the holder is attached to (a
    /// [`Session`](crate::Session)'s lease); `None` when it has none.
    /// `ttl` and `deadline` are then the lease's. Never its id.
    pub lease: Option<u64>,
}

impl LockInfo {
    pub(crate) fn of(reply: Option<HashMap<String, Value>>) -> Result<Option<LockInfo>> {
        let Some(fields) = reply else {
            return Ok(None);
        };
        let f = Fields::new(fields, "unexpected reply to LOCK.INFO");
        let mode = match f.bytes("mode")?.as_deref() {
            None | Some(b"exclusive") => LockMode::Exclusive,
            Some(b"shared") => LockMode::Shared,
            Some(_) => return Err(f.missing("mode")),
        };
        Ok(Some(LockInfo {
            fence: f.count("fence")?,
            ttl: f.millis("ttl")?,
            deadline: f.opt_int("deadline")?.and_then(unix_ms),
            granted: f.opt_int("granted")?.and_then(unix_ms),
            extends: f.count_or("extends", 0)?,
            waiters: f.count_or("waiters", 0)?,
            mode,
            holders: f.count_or("holders", 1)?,
            owner: f.bytes("owner")?,
            lease: f
                .opt_int("lease")?
                .map(|n| u64::try_from(n).map_err(|_| f.missing("lease")))
                .transpose()?,
        }))
    }
}

/// What a waiter asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaiterMode {
    /// An exclusive lock.
    Exclusive,
    /// A read lease (`SHARED`).
    Shared,
    /// Permits of a semaphore.
    Permits {
        /// How many.
        count: u32,
    },
}

/// A client waiting for a key, as `LOCK.QUEUE` shows it
/// ([`Locks::queue`](crate::Locks::queue)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The lease it asked for (it counts from the grant).
    pub ttl: Duration,
    /// How long it has waited.
    pub waited: Duration,
    /// What is left of its wait; `None` for no limit (`WAIT 0`).
    pub timeout: Option<Duration>,
    /// Its client id: `CLIENT KILL ID <id>` removes a stuck waiter.
    pub client: u64,
    /// What it waits for.
    pub mode: WaiterMode,
    /// Its `OWNER` label, if it gave one.
    pub owner: Option<Vec<u8>>,
}

impl Waiter {
    pub(crate) fn of(fields: HashMap<String, Value>) -> Result<Waiter> {
        let f = Fields::new(fields, "unexpected reply to LOCK.QUEUE");
        let mode = match f.bytes("mode")?.as_deref() {
            Some(b"exclusive") => WaiterMode::Exclusive,
            Some(b"shared") => WaiterMode::Shared,
            Some(b"permits") => WaiterMode::Permits {
                count: f.count("count")?,
            },
            _ => return Err(f.missing("mode")),
        };
        let timeout = f.count::<u64>("timeout")?;
        Ok(Waiter {
            ttl: Duration::from_millis(f.count("ttl")?),
            waited: Duration::from_millis(f.count("waited")?),
            timeout: (timeout > 0).then(|| Duration::from_millis(timeout)),
            client: f.count("client")?,
            mode,
            owner: f.bytes("owner")?,
        })
    }
}

/// A semaphore as `SEM.INFO` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The number of permits.
    pub limit: u32,
    /// Permits out now.
    pub used: u32,
    /// Tokens that hold permits.
    pub holders: u32,
    /// Requests in the queue.
    pub waiters: u32,
    /// The highest holder fence.
    pub fence: u64,
    /// What is left of the latest lease; `None` without a TTL.
    pub ttl: Option<Duration>,
}

impl SemaphoreInfo {
    pub(crate) fn of(reply: Option<HashMap<String, Value>>) -> Result<Option<SemaphoreInfo>> {
        let Some(fields) = reply else {
            return Ok(None);
        };
        let f = Fields::new(fields, "unexpected reply to SEM.INFO");
        Ok(Some(SemaphoreInfo {
            limit: f.count("limit")?,
            used: f.count("used")?,
            holders: f.count("holders")?,
            waiters: f.count("waiters")?,
            fence: f.count("fence")?,
            ttl: f.millis("ttl")?,
        }))
    }
}
