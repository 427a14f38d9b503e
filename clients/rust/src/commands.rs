//! Every command this client sends, built in one place, and how it reads
//! the replies that decide a lease's fate (grant, extend, release).
//!
//! Keys are bytes throughout (`&[u8]`): binary-safe, as the module is.

use std::time::Duration;

use redis::{Arg, Cmd, RedisError};

use crate::error::{Error, Result};
use crate::options::{ttl_ms, wait_ms, ReplicaSync};

/// What a lease holds on one node, and so which commands take, extend and
/// give it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `LOCK.ACQUIRE`: the key alone.
    Exclusive,
    /// `LOCK.ACQUIRE … SHARED`: a read lease beside other readers.
    Shared,
    /// `SEM.ACQUIRE key limit ttl COUNT count`: permits of a semaphore.
    Permits { limit: u32, count: u32 },
}

/// How long an acquire waits in the server's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// One try (no `WAIT`).
    No,
    /// `WAIT ms`, at least 1 ms.
    For(Duration),
    /// `WAIT 0`: as long as it takes.
    Forever,
}

impl Kind {
    /// `LOCK.ACQUIRE` / `SEM.ACQUIRE` with the client's token, the wait,
    /// the owner label, the sync and the session's lease (`LEASE id`); for
    /// a `set` of keys taken in one step (issue 28), `LOCK.MACQUIRE
    /// numkeys key… ttl …` instead (`key` is then the set's first).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire_cmd(
        self,
        key: &[u8],
        set: &[Vec<u8>],
        ttl: Duration,
        token: &str,
        wait: Wait,
        owner: Option<&str>,
        sync: Option<ReplicaSync>,
        lease: Option<&str>,
    ) -> Result<Cmd> {
        let mut cmd = match self {
            Kind::Exclusive | Kind::Shared if !set.is_empty() => {
                let mut cmd = redis::cmd("LOCK.MACQUIRE");
                cmd.arg(set.len()).arg(set).arg(ttl_ms(ttl)?);
                cmd
            }
            Kind::Exclusive | Kind::Shared => {
                let mut cmd = redis::cmd("LOCK.ACQUIRE");
                cmd.arg(key).arg(ttl_ms(ttl)?);
                cmd
            }
            Kind::Permits { limit, count } => {
                let mut cmd = redis::cmd("SEM.ACQUIRE");
                cmd.arg(key)
                    .arg(limit)
                    .arg(ttl_ms(ttl)?)
                    .arg("COUNT")
                    .arg(count);
                cmd
            }
        };
        cmd.arg("TOKEN").arg(token);
        match wait {
            Wait::No => {}
            Wait::For(wait) => {
                cmd.arg("WAIT").arg(wait_ms(wait)?);
            }
            Wait::Forever => {
                cmd.arg("WAIT").arg(0);
            }
        }
        if let Some(owner) = owner {
            cmd.arg("OWNER").arg(owner);
        }
        if self == Kind::Shared {
            cmd.arg("SHARED");
        }
        sync_args(&mut cmd, sync)?;
        if let Some(lease) = lease {
            cmd.arg("LEASE").arg(lease);
        }
        Ok(cmd)
    }

    /// `LOCK.EXTEND` / `SEM.EXTEND`; for a `set`, `LOCK.MEXTEND numkeys
    /// key… token ttl`, which replies 1 only when the token held every key
    /// (all extended), else 0 (nothing changed).
    pub(crate) fn extend_cmd(
        self,
        key: &[u8],
        set: &[Vec<u8>],
        token: &str,
        ttl: Duration,
        sync: Option<ReplicaSync>,
    ) -> Result<Cmd> {
        let mut cmd = match self {
            Kind::Exclusive | Kind::Shared if !set.is_empty() => {
                let mut cmd = redis::cmd("LOCK.MEXTEND");
                cmd.arg(set.len()).arg(set);
                cmd
            }
            Kind::Exclusive | Kind::Shared => {
                let mut cmd = redis::cmd("LOCK.EXTEND");
                cmd.arg(key);
                cmd
            }
            Kind::Permits { .. } => {
                let mut cmd = redis::cmd("SEM.EXTEND");
                cmd.arg(key);
                cmd
            }
        };
        cmd.arg(token).arg(ttl_ms(ttl)?);
        sync_args(&mut cmd, sync)?;
        Ok(cmd)
    }

    /// `LOCK.RELEASE` / `SEM.RELEASE`; for a `set`, `LOCK.MRELEASE numkeys
    /// key… token`, which replies how many keys it released.
    pub(crate) fn release_cmd(self, key: &[u8], set: &[Vec<u8>], token: &str) -> Cmd {
        let mut cmd = match self {
            Kind::Exclusive | Kind::Shared if !set.is_empty() => {
                let mut cmd = redis::cmd("LOCK.MRELEASE");
                cmd.arg(set.len()).arg(set);
                cmd
            }
            Kind::Exclusive | Kind::Shared => {
                let mut cmd = redis::cmd("LOCK.RELEASE");
                cmd.arg(key);
                cmd
            }
            Kind::Permits { .. } => {
                let mut cmd = redis::cmd("SEM.RELEASE");
                cmd.arg(key);
                cmd
            }
        };
        cmd.arg(token);
        cmd
    }
}

/// `SYNC numreplicas timeout-ms`, when there is a sync (of at least one
/// replica) to send.
fn sync_args(cmd: &mut Cmd, sync: Option<ReplicaSync>) -> Result<()> {
    if let Some(sync) = ReplicaSync::checked(sync)? {
        cmd.arg("SYNC").arg(sync.replicas()).arg(sync.timeout_ms());
    }
    Ok(())
}

/// What an extend's reply says about the lease.
pub(crate) enum Extended {
    /// `1`: the lease now ends ttl after the send.
    Yes,
    /// `0`, or `WRONGTYPE` (the key was overwritten): the token holds
    /// nothing there any more.
    NotHeld,
    /// `LIMIT …`: the hold policy refuses; the lease ends at its current
    /// deadline.
    Limit(RedisError),
    /// `REVOKED <reason>`: the hold was taken away (`LOCK.REVOKE`, or its
    /// session's lease revoked).
    Revoked(String),
    /// `NOSYNC …`: extended on the master, but fewer replicas than asked
    /// acknowledged it in time.
    NotReplicated { acked: u32, wanted: u32 },
    /// No answer to act on: a connection error, or a server error that may
    /// pass (`OOM`, `LOADING`, `TRYAGAIN`, …).
    Failed(Error),
}

impl Extended {
    pub(crate) fn of(reply: Result<i64, RedisError>) -> Extended {
        match reply {
            Ok(1) => Extended::Yes,
            Ok(_) => Extended::NotHeld,
            Err(e) if e.code() == Some("WRONGTYPE") => Extended::NotHeld,
            Err(e) if e.code() == Some("LIMIT") => Extended::Limit(e),
            Err(e) if e.code() == Some(REVOKED) => Extended::Revoked(revoked_reason(&e)),
            Err(e) => match Error::from(e) {
                Error::NotReplicated { acked, wanted, .. } => {
                    Extended::NotReplicated { acked, wanted }
                }
                e => Extended::Failed(e),
            },
        }
    }

    /// [`Extended::of`] for a reply already read as this crate's error.
    pub(crate) fn of_result(reply: Result<i64>) -> Extended {
        match reply {
            Ok(n) => Extended::of(Ok(n)),
            Err(Error::Server(e)) => Extended::of(Err(e)),
            Err(Error::NotReplicated { acked, wanted, .. }) => {
                Extended::NotReplicated { acked, wanted }
            }
            Err(e) => Extended::Failed(e),
        }
    }
}

/// The error code of a revoked hold's token (`REVOKED <reason>`), from
/// `LOCK.EXTEND`, `SEM.EXTEND` and `LOCK.GUARD`.
pub(crate) const REVOKED: &str = "REVOKED";

/// The error code of an acquire whose `LEASE id` the server does not know
/// (expired, revoked, or another server's).
pub(crate) const NOLEASE: &str = "NOLEASE";

/// The reason of a `REVOKED <reason>` error reply.
pub(crate) fn revoked_reason(e: &RedisError) -> String {
    e.detail().unwrap_or("").to_string()
}

/// A fresh random token: the client picks it so that it can release after a
/// lost reply, and so that Redlock can use one token on every node.
pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `LOCK.GUARD key token [SYNC n ms]` followed by `cmd`'s name and
/// arguments.
pub(crate) fn guard_cmd(
    key: &[u8],
    token: &str,
    cmd: &Cmd,
    sync: Option<ReplicaSync>,
) -> Result<Cmd> {
    if cmd.args_iter().len() == 0 {
        return Err(Error::InvalidArgument("guarded needs a command to run"));
    }
    let mut guarded = redis::cmd("LOCK.GUARD");
    guarded.arg(key).arg(token);
    sync_args(&mut guarded, sync)?;
    for arg in cmd.args_iter() {
        match arg {
            Arg::Simple(bytes) => guarded.arg(bytes),
            _ => {
                return Err(Error::InvalidArgument(
                    "a cursor argument (Cmd::cursor_arg) cannot be guarded: pass the cursor as a plain argument",
                ))
            }
        };
    }
    Ok(guarded)
}

pub(crate) fn info_cmd(key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("LOCK.INFO");
    cmd.arg(key);
    cmd
}

pub(crate) fn sem_info_cmd(key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("SEM.INFO");
    cmd.arg(key);
    cmd
}

/// The most waiters one `LOCK.QUEUE` lists.
pub(crate) const MAX_QUEUE_COUNT: usize = 1000;

pub(crate) fn queue_cmd(key: &[u8], count: usize) -> Result<Cmd> {
    if !(1..=MAX_QUEUE_COUNT).contains(&count) {
        return Err(Error::InvalidArgument(
            "a queue listing's count must be 1 to 1000",
        ));
    }
    let mut cmd = redis::cmd("LOCK.QUEUE");
    cmd.arg(key).arg("COUNT").arg(count);
    Ok(cmd)
}

pub(crate) fn observe_cmd(key: &[u8], seen: u64, timeout: Duration) -> Cmd {
    let mut cmd = redis::cmd("LOCK.OBSERVE");
    cmd.arg(key).arg(seen).arg(timeout.as_millis() as u64);
    cmd
}

/// `LOCK.LEASE GRANT ttl-ms [OWNER label]`: a session's server lease.
pub(crate) fn lease_grant_cmd(ttl: Duration, owner: Option<&str>) -> Result<Cmd> {
    let mut cmd = redis::cmd("LOCK.LEASE");
    cmd.arg("GRANT").arg(ttl_ms(ttl)?);
    if let Some(owner) = owner {
        cmd.arg("OWNER").arg(owner);
    }
    Ok(cmd)
}

/// `LOCK.LEASE KEEPALIVE id`: `1` (renewed) or `0` (gone).
pub(crate) fn lease_keepalive_cmd(id: &str) -> Cmd {
    let mut cmd = redis::cmd("LOCK.LEASE");
    cmd.arg("KEEPALIVE").arg(id);
    cmd
}

/// `LOCK.LEASE INFO id`: null when gone, else a map with `holds`.
pub(crate) fn lease_info_cmd(id: &str) -> Cmd {
    let mut cmd = redis::cmd("LOCK.LEASE");
    cmd.arg("INFO").arg(id);
    cmd
}

/// The longest reason `LOCK.REVOKE` takes, in bytes.
pub(crate) const MAX_REASON_LEN: usize = 128;

/// `LOCK.REVOKE key REASON reason`.
pub(crate) fn revoke_cmd(key: &[u8], reason: &[u8]) -> Result<Cmd> {
    if reason.is_empty() || reason.len() > MAX_REASON_LEN {
        return Err(Error::InvalidArgument(
            "a revocation's reason must be 1 to 128 bytes",
        ));
    }
    let mut cmd = redis::cmd("LOCK.REVOKE");
    cmd.arg(key).arg("REASON").arg(reason);
    Ok(cmd)
}
