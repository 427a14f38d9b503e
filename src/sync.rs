//! `SYNC numreplicas timeout-ms`: clients whose grant (extension, guarded
//! write) is answered only once that many replicas have acknowledged the
//! replication offset that carries it, and the grants undone when they do
//! not in time.
//!
//! How, since no module API shows a replica's acknowledged offset:
//! - the command does its work as usual (its effects are replicated when it
//!   returns) and blocks its client;
//! - one poll timer, every millisecond while anyone waits, reads `INFO
//!   replication` once for all of them (`server::replication`): the
//!   master's offset, first read after the command, is what each waits for
//!   (at least the offset of its own effects), and each replica's
//!   acknowledged offset is compared with it (`core::sync`);
//! - right after reading new offsets to wait for, the poll asks every
//!   replica for a fresh acknowledgement (`call::request_replica_acks`:
//!   `REPLCONF GETACK *`, which replicas otherwise send once a second), so
//!   that the answers cover them;
//! - a request whose replicas are enough is answered; one whose time ran
//!   out undoes its grant as a release would (the next waiter is served,
//!   the fence stays used) and is answered `NOSYNC …`; a client that leaves
//!   while it waits has its grant undone too (it never learned of it).
//!
//! Clients waiting here are blocked clients: directly ([`Syncing`], for the
//! commands) or still in their wait queue (a `WAIT` waiter granted with
//! `SYNC`: `waiting.rs` answers it). What to answer them with, and how to
//! undo a grant, the floors above give as values and functions: this file
//! calls nothing above it.
//!
//! Module-wide state (main thread only, hence thread-locals): the waiting
//! requests, the poll timer, and when acknowledgements were last asked for.

use std::cell::{Cell, RefCell};
use std::ffi::CString;

use redis_lock_core::args::Sync;
use redis_lock_core::errors::LockError;
use redis_lock_core::sync::{self as rules, Stands, Waited};
use redis_module::Context;

use crate::metrics::{self, Counter};
use crate::redis::blocked::{self, BlockedId, Waits};
use crate::redis::call::{self, KeptReply};
use crate::redis::timer::{self, TimerId};
use crate::redis::{reply, server};

/// What a client is answered with once its replicas hold it.
pub enum Answer {
    /// `[token, fence]`.
    Grant { token: Box<[u8]>, fence: u64 },
    /// An integer (`LOCK.EXTEND`'s `1`).
    Integer(i64),
    /// A guarded command's own reply, copied out of the server's (which
    /// must not outlive the command that made it).
    Call(KeptReply),
}

/// A grant to undo if its replicas do not hold it in time: the holds of
/// `token` with `fence` on `keys` in `db` (one key, or every key of a
/// multi-key grant, which all have its one fence).
#[derive(Clone)]
pub struct Grant {
    pub db: i32,
    pub keys: Vec<Box<[u8]>>,
    pub token: Box<[u8]>,
    pub fence: u64,
}

/// Undo a grant (release each of its keys, if it is still that hold, and
/// hand it on): `waiting.rs`'s, given with each request.
pub type Undo = fn(&Context, &Grant);

/// Answer a waiting client: with its answer once synced, or the `NOSYNC`
/// error; with the hold it is answered about (none after `NOSYNC`), to be
/// given back (`Undo`) if the client leaves before its reply.
pub type AnswerBy = fn(BlockedId, Result<Answer, CString>, Option<Grant>, Undo);

/// A client waiting for its replicas.
pub struct Pending {
    pub client: BlockedId,
    pub sync: Sync,
    pub answer: Answer,
    /// What stands if its time runs out: a new grant is undone then, and
    /// when its client leaves while it waits.
    pub stands: Stands,
    /// The hold it is about (a grant, a renewal), if any.
    pub grant: Option<Grant>,
    pub undo: Undo,
    pub answer_by: AnswerBy,
}

impl Pending {
    /// The grant to give back if it is undone: a new one only.
    fn undoable(&self) -> Option<(Grant, Undo)> {
        match (&self.grant, self.stands) {
            (Some(grant), Stands::Undone) => Some((grant.clone(), self.undo)),
            _ => None,
        }
    }
}

struct Entry {
    pending: Pending,
    /// When its wait ends (unix ms).
    deadline_ms: i64,
    /// The master's replication offset it waits for: read at the first
    /// poll after its command, when its effects are in the stream.
    target: Option<i64>,
}

/// How often the waiting requests are looked at while any wait.
const POLL_MS: i64 = 1;
/// How often replicas are asked for acknowledgements again while requests
/// still wait (a reply to a request may be lost, a replica may reconnect).
const ASK_AGAIN_MS: i64 = 100;

thread_local! {
    static PENDING: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    /// The poll timer, and when it is due (unix ms).
    static POLL: Cell<Option<(TimerId, i64)>> = const { Cell::new(None) };
    static ASKED_MS: Cell<i64> = const { Cell::new(0) };
}

/// Requests waiting for their replicas (`INFO lock`).
pub fn waiting() -> usize {
    PENDING.with(|p| p.borrow().len())
}

/// Block the calling client until `sync.replicas` replicas hold what its
/// command did, then answer `answer` (or `NOSYNC`, with `stands`, undoing
/// `undo`'s grant). `Err` if the server would not block it (the caller
/// has checked that the context may block).
pub fn block(
    ctx: &Context,
    sync: Sync,
    answer: Answer,
    stands: Stands,
    grant: Option<Grant>,
    undo: Undo,
) -> Result<(), LockError> {
    let client = blocked::block::<Syncing>(ctx).ok_or(LockError::Internal)?;
    let pending = Pending {
        client,
        sync,
        answer,
        stands,
        grant,
        undo,
        answer_by: answer_directly,
    };
    wait(ctx, pending);
    Ok(())
}

/// `pending`'s client (already blocked) waits for its replicas.
pub fn wait(ctx: &Context, pending: Pending) {
    let deadline_ms = server::now_ms().saturating_add(pending.sync.timeout_ms);
    PENDING.with(|p| {
        p.borrow_mut().push(Entry {
            pending,
            deadline_ms,
            target: None,
        })
    });
    metrics::count(Counter::Syncs);
    // The first look comes as soon as the event loop runs timers, after this
    // command's effects are in the replication stream.
    arm(ctx, 0);
}

/// Make sure the poll runs in `delay_ms` at the latest.
fn arm(ctx: &Context, delay_ms: i64) {
    match POLL.with(Cell::get) {
        Some((_, due)) if due <= server::now_ms() + delay_ms => {}
        armed => {
            if let Some((timer, _)) = armed {
                timer::stop::<()>(ctx, timer);
            }
            let timer = timer::start(ctx, delay_ms, (), poll);
            POLL.with(|p| p.set(Some((timer, server::now_ms() + delay_ms))));
        }
    }
}

/// Ask every replica for its acknowledged offset (see the file's comment).
/// The request is itself part of the replication stream, and a replica
/// acknowledges the offset before it: so it is made only once the offsets
/// waited for are read, and each answer covers them.
fn ask(ctx: &Context) {
    ASKED_MS.with(|a| a.set(server::now_ms()));
    call::request_replica_acks(ctx);
}

/// The poll: answer every request whose replicas are enough or whose time
/// ran out, ask the replicas again if it is time, then look again in a
/// millisecond while any wait.
fn poll(ctx: &Context, (): ()) {
    POLL.with(|p| p.set(None));
    let (waiting, new_targets) = answer_ready(ctx, true);
    if waiting && (new_targets || server::now_ms() - ASKED_MS.with(Cell::get) >= ASK_AGAIN_MS) {
        ask(ctx);
    }
    if PENDING.with(|p| !p.borrow().is_empty()) {
        arm(ctx, POLL_MS);
    }
}

/// Once per turn of the event loop, before it sleeps, while any request
/// waits: answer those whose acknowledgements came in this turn, in it (the
/// server answers its own `WAIT` there too), not up to a millisecond later
/// at the next poll. Nothing is asked or armed here: the poll does that.
pub fn before_sleep(ctx: &Context) {
    if PENDING.with(|p| p.borrow().is_empty()) {
        return;
    }
    answer_ready(ctx, false);
}

/// Answer every request whose replicas are enough or whose time ran out.
/// A request not yet looked at gets its target offset (the master's now)
/// only from the poll (`targets`), which then asks the replicas for it.
/// Whether any still waits, and whether one got its target offset now.
fn answer_ready(ctx: &Context, targets: bool) -> (bool, bool) {
    let now_ms = server::now_ms();
    let (master, acked) = server::replication(ctx).unwrap_or((i64::MAX, Vec::new()));
    let mut done = Vec::new();
    let mut waiting = false;
    let mut new_targets = false;
    PENDING.with(|p| {
        let mut pending = p.borrow_mut();
        let mut i = 0;
        while i < pending.len() {
            let entry = &mut pending[i];
            if entry.target.is_none() && !targets {
                waiting = true;
                i += 1;
                continue;
            }
            new_targets |= entry.target.is_none();
            let target = *entry.target.get_or_insert(master);
            let count = rules::acked(&acked, target);
            match rules::waited(
                count,
                entry.pending.sync.replicas,
                entry.deadline_ms,
                now_ms,
            ) {
                Waited::Waiting => {
                    waiting = true;
                    i += 1;
                }
                outcome => done.push((pending.swap_remove(i), outcome)),
            }
        }
    });
    for (entry, outcome) in done {
        finish(ctx, entry.pending, outcome);
    }
    (waiting, new_targets)
}

/// Answer a request that is done waiting; undo its grant if its time ran
/// out.
fn finish(ctx: &Context, pending: Pending, outcome: Waited) {
    match outcome {
        Waited::TimedOut { acked } => {
            metrics::count(Counter::SyncTimeouts);
            if let Some((grant, undo)) = pending.undoable() {
                metrics::count(Counter::SyncsUndone);
                undo(ctx, &grant);
            }
            let text = rules::no_sync(acked, pending.sync.replicas, pending.stands);
            let text = CString::new(text).unwrap_or_else(|_| CString::from(c"NOSYNC"));
            (pending.answer_by)(pending.client, Err(text), None, pending.undo);
        }
        _ => (pending.answer_by)(
            pending.client,
            Ok(pending.answer),
            pending.grant,
            pending.undo,
        ),
    }
}

/// A waiting client's connection closed (or the server became a replica
/// and Redis unblocked it): if it is one of these, it leaves now (unblocked
/// without a reply, as Redis requires of a disconnect), and its grant,
/// which it never learned of, is undone from a timer due now (the keyspace
/// is not written from inside a disconnect). Whether it was one of these.
pub fn client_gone(ctx: &Context, client: BlockedId) -> bool {
    let entry = PENDING.with(|p| {
        let mut pending = p.borrow_mut();
        let at = pending.iter().position(|e| e.pending.client == client)?;
        Some(pending.swap_remove(at))
    });
    let Some(entry) = entry else {
        return false;
    };
    blocked::unblock_without_reply(client);
    if let Some(undo) = entry.pending.undoable() {
        undo_later(ctx, undo);
    }
    true
}

/// Undo a grant from a timer due now.
pub fn undo_later(ctx: &Context, undo: (Grant, Undo)) {
    timer::start(ctx, 0, undo, |ctx, (grant, undo)| {
        metrics::count(Counter::SyncsUndone);
        undo(ctx, &grant);
    });
}

/// This node became a replica: whoever still waits is answered
/// `READONLY` (a replica grants nothing; Redis has unblocked most of them
/// itself already, see [`client_gone`]).
pub fn demoted(ctx: &Context) {
    let all: Vec<Entry> = PENDING.with(|p| p.borrow_mut().drain(..).collect());
    for entry in all {
        let text = CString::from(LockError::WaitDemoted.as_cstr());
        let pending = entry.pending;
        (pending.answer_by)(pending.client, Err(text), None, pending.undo);
    }
    if let Some((poll, _)) = POLL.with(|p| p.take()) {
        timer::stop::<()>(ctx, poll);
    }
}

/// A command's client, answered once synced.
fn answer_directly(
    client: BlockedId,
    result: Result<Answer, CString>,
    grant: Option<Grant>,
    undo: Undo,
) {
    blocked::unblock::<Syncing>(
        client,
        Answered {
            result,
            grant: grant.map(|grant| (grant, undo)),
        },
    );
}

/// What a directly waiting client is unblocked with, and the grant it is
/// about (given back if the client leaves before its reply).
pub struct Answered {
    result: Result<Answer, CString>,
    grant: Option<(Grant, Undo)>,
}

/// The commands' clients waiting for their replicas.
struct Syncing;

impl Waits for Syncing {
    type Outcome = Answered;

    fn reply(ctx: &Context, answered: &Answered) {
        match &answered.result {
            Ok(Answer::Grant { token, fence }) => reply::grant(ctx, token, *fence),
            Ok(Answer::Integer(n)) => reply::integer(ctx, *n),
            Ok(Answer::Call(kept)) => kept.reply(ctx),
            Err(text) => reply::error_text(ctx, text),
        }
    }

    fn disconnected(ctx: &Context, client: BlockedId, answered: Option<&Answered>) {
        match answered {
            // Answered, but gone before the reply: a grant it never
            // learned of is given back.
            Some(answered) => {
                if let (Ok(Answer::Grant { .. }), Some((grant, undo))) =
                    (&answered.result, &answered.grant)
                {
                    undo_later(ctx, (grant.clone(), *undo));
                }
            }
            None => {
                client_gone(ctx, client);
            }
        }
    }
}
