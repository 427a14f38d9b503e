//! Every new option on every grant path (issue 33): `SYNC numreplicas
//! timeout-ms` and `LEASE id` on a direct `LOCK.ACQUIRE`, a `WAIT` waiter
//! (queued, and granted from the queue), a renewal (`LOCK.ACQUIRE` by the
//! holder's token, `LOCK.EXTEND`, `SEM.EXTEND`, `LOCK.MEXTEND`), `SHARED`,
//! `SEM.ACQUIRE`, `LOCK.MACQUIRE` and `LOCK.GUARD`, crossed with every way
//! its client can leave while it waits or after it was told: it closes its
//! connection, `CLIENT KILL`, `CLIENT UNBLOCK` (with and without `ERROR`),
//! the server becomes a replica (`REPLICAOF`: of a master it syncs with, or
//! of one that never answers, then a master again), its own timeout
//! (`SYNC`'s, `WAIT`'s), its lease's end, a restart from the AOF, and the
//! same token retried on a second connection while the first waits.
//!
//! [`ROWS`] is the table: one row per path and option, with what each
//! way of leaving must leave behind, as docs/commands.md and
//! docs/guarantees.md say. Each `#[test]` is one way of leaving, run on
//! every row, each cell on a fresh server; a failing cell names its row,
//! and every failing cell is reported. The `…_then_restart` tests restart
//! the server from its AOF once the client has left: the same state must
//! come back.
//! In every cell: a client never told it holds a key does not keep it (a
//! `SYNC` grant it never learned of is undone; a renewal, an extension or
//! a guarded write stands); nothing a client was told it holds vanishes
//! but by release, expiry, revocation or its lease's end; the key is then
//! grantable to another token exactly when the docs say; the server still
//! answers, `lock_sync_waiting` is back to 0, no client is left blocked
//! and no waiter is left in `LOCK.QUEUE`.
//!
//! A server with no replica never acknowledges anything, so `SYNC 1 t`
//! keeps its client waiting for all of `t`: the cheap way to have a client
//! granted and not told. No assertion is on a duration: every wait is
//! bounded, and a short lease that ran out before its hold was even taken
//! (a stall) makes the cell run again with a longer one.

mod common;
use common::*;

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver};
use std::thread;
use std::time::{Duration, Instant};

/// How a client leaves, or what ends its wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leave {
    /// It closes its connection.
    Close,
    /// `CLIENT KILL ID <id>`.
    Kill,
    /// `CLIENT UNBLOCK <id>`.
    Unblock,
    /// `CLIENT UNBLOCK <id> ERROR`.
    UnblockError,
    /// The server becomes a replica of another (empty) server, and syncs
    /// with it.
    ReplicaOf,
    /// The server becomes a replica of a master that never answers (its
    /// dataset stays as it is), then a master again (`REPLICAOF NO ONE`).
    Demoted,
    /// Its own clock runs out: `SYNC`'s timeout, or `WAIT`'s for a waiter.
    Timeout,
    /// Its lease group runs out.
    LeaseEnd,
    /// The server is killed (SIGKILL) and restarts from its AOF.
    Restart,
    /// The same token asks again on a second connection (a client's retry
    /// after a socket timeout), then the first connection closes.
    Retry,
}

/// What the leaving client is doing when it leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Its command did its work (a grant, a renewal, a guarded write) and
    /// it waits for its replicas: not told yet.
    Syncing,
    /// It waits in the key's queue (`WAIT`), granted nothing.
    Queued,
    /// It was answered: it knows it holds.
    Told,
}

/// What the leaving client's token holds once it left and the server
/// settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    /// Nothing: every key of the row is grantable to another token (once
    /// the row's other holders gave theirs back).
    Free,
    /// Every key, until released (or its lease's end).
    Held,
    /// The server became a replica: its dataset is its new master's.
    Replaced,
}

/// One cell: what the leaving client reads (any of these prefixes; errors
/// are `-CODE …`, a closed connection `closed`, a grant `grant`; empty:
/// it already read its answer), and what its token holds after.
#[derive(Clone, Copy)]
struct Outcome {
    reply: &'static [&'static str],
    after: After,
}

/// A row's cell for each way of leaving (`None`: does not apply).
struct Outcomes {
    close: Option<Outcome>,
    kill: Option<Outcome>,
    unblock: Option<Outcome>,
    replicaof: Option<Outcome>,
    demoted: Option<Outcome>,
    timeout: Option<Outcome>,
    lease_end: Option<Outcome>,
    restart: Option<Outcome>,
    retry: Option<Outcome>,
}

impl Outcomes {
    fn of(&self, leave: Leave) -> Option<Outcome> {
        match leave {
            Leave::Close => self.close,
            Leave::Kill => self.kill,
            Leave::Unblock | Leave::UnblockError => self.unblock,
            Leave::ReplicaOf => self.replicaof,
            Leave::Demoted => self.demoted,
            Leave::Timeout => self.timeout,
            Leave::LeaseEnd => self.lease_end,
            Leave::Restart => self.restart,
            Leave::Retry => self.retry,
        }
    }
}

const fn expect(reply: &'static [&'static str], after: After) -> Option<Outcome> {
    Some(Outcome { reply, after })
}

const CLOSED: &[&str] = &["closed"];
/// Demoted: Redis ends every blocked client's wait, a waiter's as a
/// `SYNC` client's, with its own `UNBLOCKED force unblock from blocking
/// operation, instance state changed (master -> replica?)`, and closes the
/// connection. Never a grant.
const DEMOTED: &[&str] = &["-UNBLOCKED force unblock"];
const UNDONE: &[&str] = &["-NOSYNC 0 of 1 replicas acknowledged; the grant was undone"];
const EXTENSION_STANDS: &[&str] = &["-NOSYNC 0 of 1 replicas acknowledged; the extension stands"];
const GUARD_RAN: &[&str] = &["-NOSYNC 0 of 1 replicas acknowledged; the guarded command ran"];
/// `CLIENT UNBLOCK` does not apply to a module's blocked client (it
/// replies `0`): the client goes on waiting until its own timeout.
const NOT_ANSWERED: &[&str] = &[];

/// A new grant that waits for its replicas: undone unless its client is
/// told, or a reply to its token confirms it; kept by a restart (it is in
/// the AOF) for its whole lease, and so by a demotion that keeps the
/// dataset (a replica gives nothing back; its new master's data replaces
/// it, and one promoted again without a sync keeps it: docs/commands.md).
const NEW_GRANT: Outcomes = Outcomes {
    close: expect(CLOSED, After::Free),
    kill: expect(CLOSED, After::Free),
    unblock: expect(UNDONE, After::Free),
    replicaof: expect(DEMOTED, After::Replaced),
    demoted: expect(DEMOTED, After::Held),
    timeout: expect(UNDONE, After::Free),
    lease_end: None,
    restart: expect(CLOSED, After::Held),
    retry: expect(CLOSED, After::Held),
};

/// [`NEW_GRANT`] attached to a lease: its lease's end while it waits ends
/// the hold (another token may take the key); the `SYNC` timeout after it
/// undoes nothing of the next holder's.
const NEW_LEASED_GRANT: Outcomes = Outcomes {
    lease_end: expect(&["-NOSYNC 0 of 1 replicas acknowledged"], After::Free),
    ..NEW_GRANT
};

/// A renewal or an extension that waits for its replicas: it stands.
const RENEWAL: Outcomes = Outcomes {
    close: expect(CLOSED, After::Held),
    kill: expect(CLOSED, After::Held),
    unblock: expect(EXTENSION_STANDS, After::Held),
    replicaof: expect(DEMOTED, After::Replaced),
    demoted: expect(DEMOTED, After::Held),
    timeout: expect(EXTENSION_STANDS, After::Held),
    lease_end: None,
    restart: expect(CLOSED, After::Held),
    retry: expect(CLOSED, After::Held),
};

/// A guarded write that waits for its replicas: it ran, and stands.
const GUARDED_WRITE: Outcomes = Outcomes {
    unblock: expect(GUARD_RAN, After::Held),
    timeout: expect(GUARD_RAN, After::Held),
    ..RENEWAL
};

/// A waiter still in the queue: it leaves it, granted nothing; a waiter
/// whose lease ended is told `NOLEASE` when its turn comes.
const QUEUED: Outcomes = Outcomes {
    close: expect(CLOSED, After::Free),
    kill: expect(CLOSED, After::Free),
    unblock: expect(&["nil"], After::Free),
    replicaof: expect(DEMOTED, After::Replaced),
    demoted: expect(DEMOTED, After::Free),
    timeout: expect(&["nil"], After::Free),
    lease_end: None,
    restart: expect(CLOSED, After::Free),
    retry: expect(CLOSED, After::Free),
};

const QUEUED_LEASED: Outcomes = Outcomes {
    lease_end: expect(&["-NOLEASE"], After::Free),
    ..QUEUED
};

/// A hold its client was told of, attached to a lease: it lives as long
/// as the lease, whoever leaves.
const TOLD_LEASED: Outcomes = Outcomes {
    close: expect(NOT_ANSWERED, After::Held),
    kill: expect(NOT_ANSWERED, After::Held),
    unblock: expect(NOT_ANSWERED, After::Held),
    replicaof: expect(NOT_ANSWERED, After::Replaced),
    demoted: expect(NOT_ANSWERED, After::Held),
    timeout: None,
    lease_end: expect(NOT_ANSWERED, After::Free),
    restart: expect(NOT_ANSWERED, After::Held),
    retry: expect(NOT_ANSWERED, After::Held),
};

/// What kind of key a row is about: how another token asks for it, how
/// a token gives it back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    /// A semaphore of 2 permits.
    Sem,
}

/// One path × option. The leaving client's token is `t`; `$lease`,
/// `$sync` and `$wait` are filled in per cell (the lease's id, the `SYNC`
/// and `WAIT` timeouts: short when that timeout is how the cell leaves).
struct Row {
    name: &'static str,
    kind: Kind,
    keys: &'static [&'static str],
    /// Run first, on another connection.
    setup: &'static [&'static [&'static str]],
    /// The leaving client's command.
    request: &'static [&'static str],
    /// Once the request is queued: what grants it (the holder releases).
    trigger: &'static [&'static [&'static str]],
    stage: Stage,
    /// What a [`Stage::Told`] client was answered.
    told: &'static str,
    /// The same token's request on a second connection while the first
    /// waits, and what it is answered.
    retry: &'static [&'static str],
    retry_reply: &'static str,
    /// The other tokens' holds (from `setup`) to give back before another
    /// token may be granted; each replies `1`, as they must still hold.
    cleanup: &'static [&'static [&'static str]],
    outcomes: &'static Outcomes,
    /// Row-specific assertions on the state the client left.
    extra: Option<fn(&mut Connection, &Row, After, &str)>,
}

const HOLDER: &[&str] = &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "h"];
const RELEASE_HOLDER: &[&str] = &["LOCK.RELEASE", "k", "h"];
const READER: &[&str] = &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "r", "SHARED"];
const RELEASE_READER: &[&str] = &["LOCK.RELEASE", "k", "r"];
const PERMIT: &[&str] = &["SEM.ACQUIRE", "k", "2", "60000", "TOKEN", "r"];
const RELEASE_PERMIT: &[&str] = &["SEM.RELEASE", "k", "r"];

/// The table. Rows are kept one field a line, each command on one line, so
/// that a row reads as a sentence (hence no rustfmt here).
#[rustfmt::skip]
const ROWS: &[Row] = &[
    // ---- SYNC ----
    Row {
        name: "SYNC: direct LOCK.ACQUIRE",
        kind: Kind::Lock, keys: &["k"], setup: &[],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t"], retry_reply: "grant",
        cleanup: &[], outcomes: &NEW_GRANT, extra: None,
    },
    Row {
        name: "SYNC: WAIT waiter, still queued",
        kind: Kind::Lock, keys: &["k"], setup: &[HOLDER],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "WAIT", "$wait", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Queued, told: "",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t"], retry_reply: "nil",
        cleanup: &[RELEASE_HOLDER], outcomes: &QUEUED, extra: None,
    },
    Row {
        name: "SYNC: WAIT waiter granted from the queue",
        kind: Kind::Lock, keys: &["k"], setup: &[HOLDER],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "WAIT", "$wait", "SYNC", "1", "$sync"],
        trigger: &[RELEASE_HOLDER], stage: Stage::Syncing, told: "",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t"], retry_reply: "grant",
        cleanup: &[], outcomes: &NEW_GRANT, extra: None,
    },
    Row {
        name: "SYNC: renewal by LOCK.ACQUIRE with the holder's token",
        kind: Kind::Lock, keys: &["k"], setup: &[&["LOCK.ACQUIRE", "k", "30000", "TOKEN", "t"]],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t"], retry_reply: "grant",
        cleanup: &[], outcomes: &RENEWAL, extra: Some(extended),
    },
    Row {
        name: "SYNC: LOCK.EXTEND",
        kind: Kind::Lock, keys: &["k"], setup: &[&["LOCK.ACQUIRE", "k", "30000", "TOKEN", "t"]],
        request: &["LOCK.EXTEND", "k", "t", "60000", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.EXTEND", "k", "t", "60000"], retry_reply: "1",
        cleanup: &[], outcomes: &RENEWAL, extra: Some(extended),
    },
    Row {
        name: "SYNC: SHARED, beside another reader",
        kind: Kind::Lock, keys: &["k"], setup: &[READER],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "SHARED", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "SHARED"], retry_reply: "grant",
        cleanup: &[RELEASE_READER], outcomes: &NEW_GRANT, extra: None,
    },
    Row {
        name: "SYNC: SEM.ACQUIRE, beside another holder",
        kind: Kind::Sem, keys: &["k"], setup: &[PERMIT],
        request: &["SEM.ACQUIRE", "k", "2", "60000", "TOKEN", "t", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["SEM.ACQUIRE", "k", "2", "60000", "TOKEN", "t"], retry_reply: "grant",
        cleanup: &[RELEASE_PERMIT], outcomes: &NEW_GRANT, extra: None,
    },
    Row {
        name: "SYNC: SEM.EXTEND",
        kind: Kind::Sem, keys: &["k"], setup: &[&["SEM.ACQUIRE", "k", "2", "30000", "TOKEN", "t"]],
        request: &["SEM.EXTEND", "k", "t", "60000", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["SEM.EXTEND", "k", "t", "60000"], retry_reply: "1",
        cleanup: &[], outcomes: &RENEWAL, extra: None,
    },
    Row {
        name: "SYNC: LOCK.MACQUIRE of two keys",
        kind: Kind::Lock, keys: &["k", "j"], setup: &[],
        request: &["LOCK.MACQUIRE", "2", "k", "j", "60000", "TOKEN", "t", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.MACQUIRE", "2", "k", "j", "60000", "TOKEN", "t"], retry_reply: "grant",
        cleanup: &[], outcomes: &NEW_GRANT, extra: None,
    },
    Row {
        name: "SYNC: LOCK.MACQUIRE renewal by the holder",
        kind: Kind::Lock, keys: &["k", "j"], setup: &[&["LOCK.MACQUIRE", "2", "k", "j", "30000", "TOKEN", "t"]],
        request: &["LOCK.MACQUIRE", "2", "k", "j", "60000", "TOKEN", "t", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.MACQUIRE", "2", "k", "j", "60000", "TOKEN", "t"], retry_reply: "grant",
        cleanup: &[], outcomes: &RENEWAL, extra: Some(extended),
    },
    Row {
        name: "SYNC: LOCK.MEXTEND",
        kind: Kind::Lock, keys: &["k", "j"], setup: &[&["LOCK.MACQUIRE", "2", "k", "j", "30000", "TOKEN", "t"]],
        request: &["LOCK.MEXTEND", "2", "k", "j", "t", "60000", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.MEXTEND", "2", "k", "j", "t", "60000"], retry_reply: "1",
        cleanup: &[], outcomes: &RENEWAL, extra: Some(extended),
    },
    Row {
        name: "SYNC: LOCK.GUARD of a write",
        kind: Kind::Lock, keys: &["k"], setup: &[&["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t"]],
        request: &["LOCK.GUARD", "k", "t", "SYNC", "1", "$sync", "SET", "data", "v"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.GUARD", "k", "t", "SET", "data", "v"], retry_reply: "OK",
        cleanup: &[], outcomes: &GUARDED_WRITE, extra: Some(guarded_write_stands),
    },
    // ---- LEASE ----
    Row {
        name: "LEASE: direct LOCK.ACQUIRE",
        kind: Kind::Lock, keys: &["k"], setup: &[],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"],
        trigger: &[], stage: Stage::Told, told: "grant",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[], outcomes: &TOLD_LEASED, extra: None,
    },
    Row {
        name: "LEASE: WAIT waiter, still queued",
        kind: Kind::Lock, keys: &["k"], setup: &[HOLDER],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "WAIT", "$wait", "LEASE", "$lease"],
        trigger: &[], stage: Stage::Queued, told: "",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "nil",
        cleanup: &[RELEASE_HOLDER], outcomes: &QUEUED_LEASED, extra: None,
    },
    Row {
        name: "LEASE: WAIT waiter granted from the queue",
        kind: Kind::Lock, keys: &["k"], setup: &[HOLDER],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "WAIT", "$wait", "LEASE", "$lease"],
        trigger: &[RELEASE_HOLDER], stage: Stage::Told, told: "grant",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[], outcomes: &TOLD_LEASED, extra: None,
    },
    Row {
        name: "LEASE: renewal by LOCK.ACQUIRE with the holder's token",
        kind: Kind::Lock, keys: &["k"], setup: &[&["LOCK.ACQUIRE", "k", "30000", "TOKEN", "t", "LEASE", "$lease"]],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"],
        trigger: &[], stage: Stage::Told, told: "grant",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[], outcomes: &TOLD_LEASED, extra: None,
    },
    Row {
        name: "LEASE: LOCK.EXTEND of a leased hold",
        kind: Kind::Lock, keys: &["k"], setup: &[&["LOCK.ACQUIRE", "k", "30000", "TOKEN", "t", "LEASE", "$lease"]],
        request: &["LOCK.EXTEND", "k", "t", "60000"],
        trigger: &[], stage: Stage::Told, told: "1",
        retry: &["LOCK.EXTEND", "k", "t", "60000"], retry_reply: "1",
        cleanup: &[], outcomes: &TOLD_LEASED, extra: None,
    },
    Row {
        name: "LEASE: SHARED, beside another reader",
        kind: Kind::Lock, keys: &["k"], setup: &[READER],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "SHARED", "LEASE", "$lease"],
        trigger: &[], stage: Stage::Told, told: "grant",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "SHARED", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[RELEASE_READER], outcomes: &TOLD_LEASED, extra: None,
    },
    Row {
        name: "LEASE: SEM.ACQUIRE, beside another holder",
        kind: Kind::Sem, keys: &["k"], setup: &[PERMIT],
        request: &["SEM.ACQUIRE", "k", "2", "60000", "TOKEN", "t", "LEASE", "$lease"],
        trigger: &[], stage: Stage::Told, told: "grant",
        retry: &["SEM.ACQUIRE", "k", "2", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[RELEASE_PERMIT], outcomes: &TOLD_LEASED, extra: None,
    },
    Row {
        name: "LEASE: LOCK.MACQUIRE of two keys",
        kind: Kind::Lock, keys: &["k", "j"], setup: &[],
        request: &["LOCK.MACQUIRE", "2", "k", "j", "60000", "TOKEN", "t", "LEASE", "$lease"],
        trigger: &[], stage: Stage::Told, told: "grant",
        retry: &["LOCK.MACQUIRE", "2", "k", "j", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[], outcomes: &TOLD_LEASED, extra: None,
    },
    Row {
        // GUARD has no LEASE option (`guard_takes_sync_but_no_lease`):
        // this is the guarded write of a hold attached to a lease.
        name: "LEASE: LOCK.GUARD by a leased hold",
        kind: Kind::Lock, keys: &["k"], setup: &[&["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"]],
        request: &["LOCK.GUARD", "k", "t", "SET", "data", "v"],
        trigger: &[], stage: Stage::Told, told: "OK",
        retry: &["LOCK.GUARD", "k", "t", "SET", "data", "v"], retry_reply: "OK",
        cleanup: &[], outcomes: &TOLD_LEASED, extra: Some(guarded_write_stands),
    },
    // ---- SYNC and LEASE together ----
    Row {
        name: "SYNC+LEASE: direct LOCK.ACQUIRE",
        kind: Kind::Lock, keys: &["k"], setup: &[],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[], outcomes: &NEW_LEASED_GRANT, extra: None,
    },
    Row {
        name: "SYNC+LEASE: WAIT waiter granted from the queue",
        kind: Kind::Lock, keys: &["k"], setup: &[HOLDER],
        request: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "WAIT", "$wait", "LEASE", "$lease", "SYNC", "1", "$sync"],
        trigger: &[RELEASE_HOLDER], stage: Stage::Syncing, told: "",
        retry: &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[], outcomes: &NEW_LEASED_GRANT, extra: None,
    },
    Row {
        name: "SYNC+LEASE: LOCK.MACQUIRE of two keys",
        kind: Kind::Lock, keys: &["k", "j"], setup: &[],
        request: &["LOCK.MACQUIRE", "2", "k", "j", "60000", "TOKEN", "t", "LEASE", "$lease", "SYNC", "1", "$sync"],
        trigger: &[], stage: Stage::Syncing, told: "",
        retry: &["LOCK.MACQUIRE", "2", "k", "j", "60000", "TOKEN", "t", "LEASE", "$lease"], retry_reply: "grant",
        cleanup: &[], outcomes: &NEW_LEASED_GRANT, extra: None,
    },
];

// ---------------------------------------------------------------------------
// Row-specific checks
// ---------------------------------------------------------------------------

/// A renewal that stands shows its extension.
fn extended(con: &mut Connection, row: &Row, after: After, what: &str) {
    if after != After::Held {
        return;
    }
    for key in row.keys {
        let shown = info(con, key).unwrap_or_else(|| panic!("{what}: {key} is free"));
        assert!(
            shown["extends"] >= 1,
            "{what}: the extension of {key} stands: {shown:?}"
        );
    }
}

/// The guarded write stands, whatever happened to the client after.
fn guarded_write_stands(con: &mut Connection, _: &Row, after: After, what: &str) {
    let data: Option<String> = redis::cmd("GET").arg("data").query(con).unwrap();
    let want = (after != After::Replaced).then(|| "v".to_string());
    assert_eq!(data, want, "{what}: the guarded write");
}

// ---------------------------------------------------------------------------
// Talking to the server
// ---------------------------------------------------------------------------

/// A reply as the table spells it: `nil`, `OK`, an integer, `grant` (a
/// `[token, fence]`), a bulk string's text, `-CODE detail` for an error,
/// `closed` when the connection ended, `timed out`.
fn render(result: redis::RedisResult<Value>) -> String {
    match result.and_then(Value::extract_error) {
        Ok(Value::Nil) => "nil".to_string(),
        Ok(Value::Okay) => "OK".to_string(),
        Ok(Value::Int(n)) => n.to_string(),
        Ok(Value::SimpleString(s)) => s,
        Ok(Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(Value::Array(parts))
            if matches!(parts.as_slice(), [Value::BulkString(_), Value::Int(_)]) =>
        {
            "grant".to_string()
        }
        Ok(other) => format!("{other:?}"),
        Err(e) if e.is_timeout() => "timed out".to_string(),
        Err(e) => match e.code() {
            Some(code) => format!("-{code} {}", e.detail().unwrap_or("")),
            None => format!("closed ({e})"),
        },
    }
}

fn run(con: &mut Connection, parts: &[String]) -> String {
    let mut cmd = redis::cmd(&parts[0]);
    cmd.arg(&parts[1..]);
    render(cmd.query::<Value>(con))
}

fn run_strs(con: &mut Connection, parts: &[&str]) -> String {
    run(
        con,
        &parts.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
    )
}

/// `parts` as one RESP request.
fn request(parts: &[String]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The client that leaves: a raw socket (so that it can be closed while
/// its command blocks), its client id, and its one reply, read by a
/// thread.
struct Leaving {
    socket: Option<TcpStream>,
    id: String,
    replies: Receiver<String>,
    reply: Option<String>,
}

impl Leaving {
    fn send(server: &Server, parts: &[String]) -> Leaving {
        let mut socket = TcpStream::connect(server.addr()).expect("connect");
        socket
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut reader = BufReader::new(socket.try_clone().unwrap());
        let mut parser = redis::Parser::new();
        socket
            .write_all(&request(&["CLIENT".into(), "ID".into()]))
            .unwrap();
        let id = render(parser.parse_value(&mut reader));
        assert!(id.parse::<i64>().is_ok(), "CLIENT ID: {id}");
        socket.write_all(&request(parts)).unwrap();
        let (tx, replies) = channel();
        thread::spawn(move || {
            let _ = tx.send(render(parser.parse_value(&mut reader)));
        });
        Leaving {
            socket: Some(socket),
            id,
            replies,
            reply: None,
        }
    }

    /// Its reply, if it came.
    fn answered(&mut self) -> Option<&str> {
        if self.reply.is_none() {
            self.reply = self.replies.try_recv().ok();
        }
        self.reply.as_deref()
    }

    /// Its reply, waited for (bounded).
    fn reply(&mut self, what: &str) -> String {
        if self.reply.is_none() {
            let got = self
                .replies
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{what}: no reply, and the connection is open"));
            self.reply = Some(got);
        }
        self.reply.clone().unwrap()
    }

    fn close(&mut self) {
        if let Some(socket) = self.socket.take() {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap()
}

fn queued(con: &mut Connection, key: &str) -> usize {
    let queue: Vec<Value> = redis::cmd("LOCK.QUEUE").arg(key).query(con).unwrap();
    queue.len()
}

fn lease_info(con: &mut Connection, id: &str) -> Option<HashMap<String, Value>> {
    redis::cmd("LOCK.LEASE")
        .arg("INFO")
        .arg(id)
        .query(con)
        .expect("LOCK.LEASE INFO")
}

/// Another token's request for all of `key` (every permit of a
/// semaphore).
fn other(kind: Kind, key: &str) -> Vec<&str> {
    match kind {
        Kind::Lock => vec!["LOCK.ACQUIRE", key, "60000", "TOKEN", "other"],
        Kind::Sem => vec![
            "SEM.ACQUIRE",
            key,
            "2",
            "60000",
            "COUNT",
            "2",
            "TOKEN",
            "other",
        ],
    }
}

fn release<'a>(kind: Kind, key: &'a str, token: &'a str) -> Vec<&'a str> {
    match kind {
        Kind::Lock => vec!["LOCK.RELEASE", key, token],
        Kind::Sem => vec!["SEM.RELEASE", key, token],
    }
}

// ---------------------------------------------------------------------------
// One cell
// ---------------------------------------------------------------------------

/// A lease that ran out before its hold was taken (the machine stalled):
/// the cell is run again with a longer lease.
struct Stall;

/// The timeouts and the lease of one cell.
struct Fill {
    lease: String,
    sync: String,
    wait: String,
}

impl Fill {
    fn apply(&self, parts: &[&str]) -> Vec<String> {
        parts
            .iter()
            .map(|&p| match p {
                "$lease" => self.lease.clone(),
                "$sync" => self.sync.clone(),
                "$wait" => self.wait.clone(),
                p => p.to_string(),
            })
            .collect()
    }
}

impl Row {
    fn uses_lease(&self) -> bool {
        self.setup
            .iter()
            .chain([self.request].iter())
            .any(|parts| parts.contains(&"$lease"))
    }
}

/// Wait (bounded) until `cond`; `Err(reply)` if the leaving client was
/// answered first.
fn until_or_answered(
    leaving: &mut Leaving,
    what: &str,
    waiting_for: &str,
    mut cond: impl FnMut() -> bool,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if cond() {
            return Ok(());
        }
        if let Some(reply) = leaving.answered() {
            return Err(reply.to_string());
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: {waiting_for} within 20 s"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// One cell on a fresh server; with `restart_after`, the server is then
/// killed and restarted from its AOF before the state is looked at, which
/// must be the same.
fn cell_run(row: &Row, leave: Leave, restart_after: bool, lease_ttl: i64) -> Result<(), Stall> {
    let what = match restart_after {
        false => format!("[{} | {leave:?}]", row.name),
        true => format!("[{} | {leave:?}, then a restart]", row.name),
    };
    let want = row.outcomes.of(leave).expect("a cell that applies");
    let mut server = match leave == Leave::Restart || restart_after {
        // `always`: what the server did is in the file when the next
        // command runs (`everysec` may postpone a write while an fsync runs,
        // and a SIGKILL then loses it: Redis' durability, not ours to test).
        true => Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]),
        false => Server::start(),
    };
    let new_master = (leave == Leave::ReplicaOf).then(start_master);
    let mut con = server.conn();
    let short = matches!(leave, Leave::Timeout | Leave::Unblock | Leave::UnblockError);
    let short_ms = if leave == Leave::Timeout {
        "300"
    } else {
        "400"
    };
    let lease = if row.uses_lease() {
        redis::cmd("LOCK.LEASE")
            .arg("GRANT")
            .arg(lease_ttl)
            .query::<String>(&mut con)
            .expect("LOCK.LEASE GRANT")
    } else {
        String::new()
    };
    let fill = Fill {
        lease: lease.clone(),
        sync: match leave {
            _ if short && row.stage == Stage::Syncing => short_ms.to_string(),
            // Long enough for the lease to end and the key to change hands.
            Leave::LeaseEnd => (lease_ttl * 6).to_string(),
            _ => "30000".to_string(),
        },
        wait: match leave {
            _ if short && row.stage == Stage::Queued => short_ms.to_string(),
            _ => "30000".to_string(),
        },
    };
    let stalled = |reply: &str| leave == Leave::LeaseEnd && reply.starts_with("-NOLEASE");
    for step in row.setup {
        let got = run(&mut con, &fill.apply(step));
        if stalled(&got) {
            return Err(Stall);
        }
        assert!(!got.starts_with('-'), "{what}: setup {step:?}: {got}");
    }

    // The client, up to the moment it leaves.
    let mut leaving = Leaving::send(&server, &fill.apply(row.request));
    let key = row.keys[0];
    // Answered before it was seen waiting: a stall ate a short lease (run
    // the cell again), or a short timeout ran out first on a slow machine,
    // which is the end the cell expects anyway.
    let early = |reply: &str| -> Result<(), Stall> {
        if stalled(reply) {
            return Err(Stall);
        }
        let expected_end = short && want.reply.iter().any(|p| reply.starts_with(p));
        assert!(
            expected_end,
            "{what}: answered before it could leave: {reply}"
        );
        Ok(())
    };
    let mut triggered = true;
    if !row.trigger.is_empty() {
        match until_or_answered(&mut leaving, &what, "queued", || queued(&mut con, key) == 1) {
            Ok(()) => {
                for step in row.trigger {
                    let got = run(&mut con, &fill.apply(step));
                    assert!(!got.starts_with('-'), "{what}: trigger {step:?}: {got}");
                }
            }
            Err(reply) => {
                early(&reply)?;
                triggered = false;
            }
        }
    }
    let ready = match row.stage {
        _ if !triggered => Ok(()),
        Stage::Syncing => until_or_answered(&mut leaving, &what, "waiting for replicas", || {
            counter(&mut con, "sync_waiting") == 1
        }),
        Stage::Queued => {
            until_or_answered(&mut leaving, &what, "queued", || queued(&mut con, key) == 1)
        }
        Stage::Told => {
            let told = leaving.reply(&what);
            if stalled(&told) {
                return Err(Stall);
            }
            assert_eq!(told, row.told, "{what}: what the client is told");
            Ok(())
        }
    };
    if let Err(reply) = ready {
        early(&reply)?;
    }

    // It leaves.
    let mut cleaned = false;
    match leave {
        Leave::Close => leaving.close(),
        Leave::Kill => {
            let killed = run_strs(&mut con, &["CLIENT", "KILL", "ID", &leaving.id]);
            assert_eq!(killed, "1", "{what}: CLIENT KILL");
        }
        Leave::Unblock | Leave::UnblockError => {
            let mut unblock = vec!["CLIENT", "UNBLOCK", &leaving.id];
            if leave == Leave::UnblockError {
                unblock.push("ERROR");
            }
            let unblocked = run_strs(&mut con, &unblock);
            assert_eq!(
                unblocked, "0",
                "{what}: CLIENT UNBLOCK does not apply to a module's waiter"
            );
        }
        Leave::ReplicaOf => {
            let master = new_master.as_ref().unwrap();
            let port = master.port.to_string();
            let got = run_strs(&mut con, &["REPLICAOF", "127.0.0.1", &port]);
            assert_eq!(got, "OK", "{what}: REPLICAOF");
            sync_replica(master, &server);
        }
        Leave::Demoted => {
            let nowhere = redis_lock_testsupport::free_port().unwrap().to_string();
            let got = run_strs(&mut con, &["REPLICAOF", "127.0.0.1", &nowhere]);
            assert_eq!(got, "OK", "{what}: REPLICAOF");
        }
        Leave::Timeout => {}
        Leave::LeaseEnd => {
            wait_until(Duration::from_secs(30), || {
                lease_info(&mut con, &lease).is_none()
            });
            cleanup(&mut con, row, &what, After::Free);
            cleaned = true;
            // The lease's end ended the hold, as an expiry: another token
            // takes the key, whatever the first request still waits for.
            thread::sleep(Duration::from_millis(50));
            for key in row.keys {
                let got = run_strs(&mut con, &other(row.kind, key));
                assert_eq!(got, "grant", "{what}: {key} after the lease's end");
            }
        }
        Leave::Restart => {
            server.kill();
            server.restart();
            con = server.conn();
        }
        Leave::Retry => {
            let mut second = server.conn();
            let got = run(&mut second, &fill.apply(row.retry));
            assert_eq!(
                got, row.retry_reply,
                "{what}: the retry on a second connection"
            );
            leaving.close();
        }
    }
    if !want.reply.is_empty() {
        let reply = leaving.reply(&what);
        assert!(
            want.reply.iter().any(|p| reply.starts_with(p)),
            "{what}: the leaving client read {reply:?}, expected one of {:?}",
            want.reply
        );
    }

    // The server settles: nobody waits, any undo due now has run.
    if let Some(master) = &new_master {
        sync_replica(master, &server);
        assert_eq!(
            digest(&mut con),
            digest(&mut master.conn()),
            "{what}: the demoted server holds its new master's dataset"
        );
        if row.uses_lease() {
            assert_eq!(
                lease_info(&mut con, &lease),
                None,
                "{what}: the demoted server keeps a lease its master does not have"
            );
        }
        promote(&mut con);
    }
    if leave == Leave::Demoted {
        // Whatever a replica does with it runs while it is one.
        wait_until(Duration::from_secs(20), || {
            counter(&mut con, "sync_waiting") == 0
        });
        thread::sleep(Duration::from_millis(50));
        promote(&mut con);
    }
    assert!(server.is_running(), "{what}: the server died");
    let pong = run_strs(&mut con, &["PING"]);
    assert_eq!(pong, "PONG", "{what}: PING");
    wait_until(Duration::from_secs(20), || {
        counter(&mut con, "sync_waiting") == 0
    });
    wait_until(Duration::from_secs(20), || {
        info_field(&mut con, "clients", "blocked_clients") == "0"
    });
    thread::sleep(Duration::from_millis(50));
    leaving.close();
    if restart_after {
        let before = digest(&mut con);
        server.kill();
        server.restart();
        con = server.conn();
        assert_eq!(
            digest(&mut con),
            before,
            "{what}: the AOF holds the dataset as it was"
        );
    }

    // What the token holds now.
    let after = want.after;
    for key in row.keys {
        assert_eq!(queued(&mut con, key), 0, "{what}: {key}'s queue");
    }
    if leave == Leave::LeaseEnd {
        for key in row.keys {
            let got = run_strs(&mut con, &release(row.kind, key, "other"));
            assert_eq!(got, "1", "{what}: the next holder of {key} kept it");
        }
    } else if row.uses_lease() && after != After::Replaced {
        let holds = lease_info(&mut con, &lease)
            .map(|shown| redis::from_redis_value::<i64>(&shown["holds"]).unwrap());
        let want_holds = if after == After::Held {
            row.keys.len() as i64
        } else {
            0
        };
        assert_eq!(holds, Some(want_holds), "{what}: the lease's holds");
    }
    if let Some(extra) = row.extra {
        extra(&mut con, row, after, &what);
    }
    for key in row.keys {
        if after == After::Held {
            if row.kind == Kind::Lock {
                let syncing = info(&mut con, key).and_then(|i| i.get("syncing").copied());
                assert_eq!(syncing, None, "{what}: {key} still shown as syncing");
            }
            let got = run_strs(&mut con, &other(row.kind, key));
            assert_eq!(got, "nil", "{what}: {key} is held, not grantable");
        }
        let released = run_strs(&mut con, &release(row.kind, key, "t"));
        let want_released = if after == After::Held { "1" } else { "0" };
        assert_eq!(
            released, want_released,
            "{what}: t's release of {key} (1: it held it)"
        );
    }
    if !cleaned {
        cleanup(&mut con, row, &what, after);
    }
    for key in row.keys {
        let got = run_strs(&mut con, &other(row.kind, key));
        assert_eq!(got, "grant", "{what}: {key} is grantable to another token");
    }
    Ok(())
}

/// The other tokens give their holds back: each still held its own,
/// unless the dataset was replaced.
fn cleanup(con: &mut Connection, row: &Row, what: &str, after: After) {
    let want = if after == After::Replaced { "0" } else { "1" };
    for step in row.cleanup {
        let got = run_strs(con, step);
        assert_eq!(got, want, "{what}: cleanup {step:?}");
    }
}

/// One cell, again with a longer lease after a stall.
fn cell(row: &Row, leave: Leave, restart_after: bool) {
    for lease_ttl in [500, 2000, 8000] {
        let ttl = if leave == Leave::LeaseEnd {
            lease_ttl
        } else {
            60_000
        };
        if cell_run(row, leave, restart_after, ttl).is_ok() {
            return;
        }
    }
    panic!(
        "[{} | {leave:?}]: the lease ran out before its hold was taken, three times",
        row.name
    );
}

/// Every cell of `leave`; the failures are
/// reported together.
fn every_row(leave: Leave, restart_after: bool) {
    let cells = ROWS
        .iter()
        .filter(|row| row.outcomes.of(leave).is_some())
        .map(|row| (row, leave, restart_after));
    run_cells(cells);
}

/// Run each cell, and report every failure at once.
fn run_cells<'a>(cells: impl Iterator<Item = (&'a Row, Leave, bool)>) {
    let failures: Vec<String> = cells
        .filter_map(|(row, leave, restart_after)| {
            catch_unwind(AssertUnwindSafe(|| cell(row, leave, restart_after)))
                .err()
                .map(|panic| panic_text(&*panic))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} cell(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".to_string())
}

#[test]
fn close() {
    every_row(Leave::Close, false);
}

#[test]
fn client_kill() {
    every_row(Leave::Kill, false);
}

#[test]
fn client_unblock() {
    every_row(Leave::Unblock, false);
}

#[test]
fn client_unblock_error() {
    every_row(Leave::UnblockError, false);
}

#[test]
fn replicaof() {
    every_row(Leave::ReplicaOf, false);
}

#[test]
fn demoted_then_promoted() {
    every_row(Leave::Demoted, false);
}

#[test]
fn timeout() {
    every_row(Leave::Timeout, false);
}

#[test]
fn lease_end() {
    every_row(Leave::LeaseEnd, false);
}

#[test]
fn restart_from_the_aof() {
    every_row(Leave::Restart, false);
}

#[test]
fn retry_on_a_second_connection() {
    every_row(Leave::Retry, false);
}

/// What a client's leaving did is in the AOF: a restart after it finds
/// the same dataset, and the same holds.
#[test]
fn close_then_restart() {
    every_row(Leave::Close, true);
}

#[test]
fn client_kill_then_restart() {
    every_row(Leave::Kill, true);
}

#[test]
fn timeout_then_restart() {
    every_row(Leave::Timeout, true);
}

#[test]
fn lease_end_then_restart() {
    every_row(Leave::LeaseEnd, true);
}

#[test]
fn retry_then_restart() {
    every_row(Leave::Retry, true);
}

/// `LOCK.GUARD key token [SYNC n t] command …` has no `LEASE`: the word
/// after the token is the command's name, and `LEASE` is no command, so
/// nothing runs and nothing changes.
#[test]
fn guard_takes_sync_but_no_lease() {
    let server = Server::start();
    let mut con = server.conn();
    let lease: String = redis::cmd("LOCK.LEASE")
        .arg("GRANT")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let got = run_strs(
        &mut con,
        &["LOCK.ACQUIRE", "k", "60000", "TOKEN", "t", "LEASE", &lease],
    );
    assert_eq!(got, "grant");
    let before = digest(&mut con);
    for parts in [
        vec!["LOCK.GUARD", "k", "t", "LEASE", &lease, "SET", "data", "v"],
        vec![
            "LOCK.GUARD",
            "k",
            "t",
            "SYNC",
            "1",
            "100",
            "LEASE",
            &lease,
            "SET",
            "data",
            "v",
        ],
    ] {
        let got = run_strs(&mut con, &parts);
        assert!(
            got.starts_with("-ERR unknown command 'LEASE'"),
            "{parts:?}: {got}"
        );
    }
    assert_eq!(digest(&mut con), before, "nothing ran");
    assert_eq!(counter(&mut con, "syncs"), 0, "nothing waited");
    // GUARD_RO takes neither.
    let got = run_strs(
        &mut con,
        &["LOCK.GUARD_RO", "k", "t", "SYNC", "1", "100", "GET", "data"],
    );
    assert!(got.starts_with("-ERR SYNC is not an option"), "{got}");
}
