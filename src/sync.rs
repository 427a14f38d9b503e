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
//! `SYNC`: `wait_queue/` answers it). What to answer them with, and how to
//! undo a grant, the floors above give as values and functions: this file
//! calls nothing above it.
//!
//! Module-wide state (main thread only, hence thread-locals): the waiting
//! requests, the poll timer, and when acknowledgements were last asked for.

use std::cell::{Cell, RefCell};
use std::ffi::CString;

use redis_lock_core::args::Sync;
use redis_lock_core::errors::LockError;
use redis_lock_core::sync::{Finished, Looked, Stands, Waiting};
use redis_module::Context;

use crate::redis::blocked::{self, BlockedId, Waits};
use crate::redis::call::{self, KeptReply};
use crate::redis::timer::{self, TimerId};
use crate::redis::{reply, server};
use crate::state::metrics::{self, Counter};

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

impl Grant {
    /// The grant of `token` with `fence` on `keys` (each key's name) in
    /// `db`: the one place one is made.
    pub fn new<K: AsRef<[u8]>>(db: i32, keys: &[K], token: &[u8], fence: u64) -> Grant {
        Grant {
            db,
            keys: keys.iter().map(|k| k.as_ref().into()).collect(),
            token: token.into(),
            fence,
        }
    }
}

/// Give back a grant: release each of its keys if it is still that hold,
/// and hand it on (`wait_queue/handoff.rs`'s, registered at load: this file calls
/// nothing above it).
pub type Undo = fn(&Context, &Grant);

/// Answer a waiting client: with its answer once synced, or the `NOSYNC`
/// error; with the hold it is answered about, if any.
pub type AnswerBy = fn(BlockedId, Result<Answer, CString>, Option<Grant>);

/// A client waiting for its replicas.
pub struct Pending {
    pub client: BlockedId,
    pub answer: Answer,
    /// The hold it is about (a grant, a renewal), if any.
    pub grant: Option<Grant>,
    pub answer_by: AnswerBy,
}

/// How often the waiting requests are looked at while any wait.
const POLL_MS: i64 = 1;
/// How often replicas are asked for acknowledgements again while requests
/// still wait (a reply to a request may be lost, a replica may reconnect).
const ASK_AGAIN_MS: i64 = 100;

thread_local! {
    /// The waiting requests and the grants no reply has confirmed yet
    /// (`core::sync::Waiting`: what to answer, what to undo).
    static WAITING: RefCell<Waiting<Pending>> = RefCell::new(Waiting::new());
    static UNDO: Cell<Option<Undo>> = const { Cell::new(None) };
    /// The poll timer, and when it is due (unix ms).
    static POLL: Cell<Option<(TimerId, i64)>> = const { Cell::new(None) };
    static ASKED_MS: Cell<i64> = const { Cell::new(0) };
}

/// At load: how a grant is given back.
pub fn register_undo(undo: Undo) {
    UNDO.with(|u| u.set(Some(undo)));
}

/// Requests waiting for their replicas (`INFO lock`).
pub fn waiting() -> usize {
    WAITING.with(|w| w.borrow().len())
}

/// Whether the new grant with `fence` still waits for its replicas, no
/// reply having confirmed it yet.
pub fn syncing(fence: u64) -> bool {
    WAITING.with(|w| w.borrow().syncing(fence))
}

/// A new grant with `fence` was made for a client that is told of it only
/// later (a waiter granted from the queue): until its reply, or a reply to
/// its token from another request, it may be undone.
pub fn granted(fence: u64) {
    WAITING.with(|w| w.borrow_mut().granted(fence));
}

/// A reply told the token of the hold with `fence` that it holds it (its
/// grant's own reply, a renewal, an extension, a guarded write, a lease
/// group's answer): nothing undoes that hold any more.
pub fn confirm(fence: u64) {
    WAITING.with(|w| w.borrow_mut().confirm(fence));
}

/// Whether the grant with `fence` may still be given back (no reply
/// confirmed it); if so, it is forgotten, for the caller gives it back now.
pub fn take_unconfirmed(fence: u64) -> bool {
    WAITING.with(|w| w.borrow_mut().undo(fence))
}

/// Undo `grant` unless a reply has confirmed it (see `core::sync::Waiting`).
pub fn undo(ctx: &Context, grant: &Grant) {
    if !take_unconfirmed(grant.fence) {
        return;
    }
    metrics::count(Counter::SyncsUndone);
    if let Some(undo) = UNDO.with(Cell::get) {
        undo(ctx, grant);
    }
}

/// Block the calling client until `sync.replicas` replicas hold what its
/// command did, then answer `answer` (or `NOSYNC`, with `stands`; a new
/// grant, `Stands::Undone`, is then undone). If the server would not block
/// the client, a new grant is undone at once (never answered, so never
/// held) and the error returned (the caller has checked that the context
/// may block).
pub fn block(
    ctx: &Context,
    sync: Sync,
    answer: Answer,
    stands: Stands,
    grant: Option<Grant>,
) -> Result<(), LockError> {
    let Some(client) = blocked::block::<Syncing>(ctx) else {
        if let (Stands::Undone, Some(grant)) = (stands, &grant) {
            WAITING.with(|w| w.borrow_mut().granted(grant.fence));
            undo(ctx, grant);
        }
        return Err(LockError::Internal);
    };
    let pending = Pending {
        client,
        answer,
        grant,
        answer_by: answer_directly,
    };
    wait(ctx, sync, stands, pending);
    Ok(())
}

/// `pending`'s client (already blocked) waits for its replicas; `stands`
/// says what stands if they do not hold it in time.
pub fn wait(ctx: &Context, sync: Sync, stands: Stands, pending: Pending) {
    let fence = pending.grant.as_ref().map(|g| g.fence);
    let now_ms = server::now_ms();
    WAITING.with(|w| w.borrow_mut().push(pending, sync, now_ms, stands, fence));
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
    let looked = answer_ready(ctx, true);
    let ask_again = server::now_ms() - ASKED_MS.with(Cell::get) >= ASK_AGAIN_MS;
    if looked.waiting && (looked.new_targets || ask_again) {
        ask(ctx);
    }
    if WAITING.with(|w| !w.borrow().is_empty()) {
        arm(ctx, POLL_MS);
    }
}

/// Once per turn of the event loop, before it sleeps, while any request
/// waits: answer those whose acknowledgements came in this turn, in it (the
/// server answers its own `WAIT` there too), not up to a millisecond later
/// at the next poll. Nothing is asked or armed here: the poll does that.
pub fn before_sleep(ctx: &Context) {
    if WAITING.with(|w| w.borrow().is_empty()) {
        return;
    }
    answer_ready(ctx, false);
}

/// Answer every request whose replicas are enough or whose time ran out
/// (a request not yet looked at gets its target offset, the master's now,
/// only from the poll: `targets`, which then asks the replicas for it).
fn answer_ready(ctx: &Context, targets: bool) -> Looked {
    let now_ms = server::now_ms();
    let (master, acked) = server::replication(ctx).unwrap_or((i64::MAX, Vec::new()));
    let (finished, looked) = WAITING.with(|w| w.borrow_mut().look(master, &acked, now_ms, targets));
    for done in finished {
        finish(ctx, done);
    }
    looked
}

/// Answer a request that is done waiting; undo its grant if its time ran
/// out on a grant no reply confirmed.
fn finish(ctx: &Context, done: Finished<Pending>) {
    let pending = done.request;
    match done.synced {
        Ok(()) => (pending.answer_by)(pending.client, Ok(pending.answer), pending.grant),
        Err(text) => {
            metrics::count(Counter::SyncTimeouts);
            if let (true, Some(grant)) = (done.undo, &pending.grant) {
                undo(ctx, grant);
            }
            let text = CString::new(text).unwrap_or_else(|_| CString::from(c"NOSYNC"));
            (pending.answer_by)(pending.client, Err(text), None);
        }
    }
}

/// A waiting client's connection closed (or the server became a replica
/// and Redis unblocked it): if it is one of these, it leaves now (unblocked
/// without a reply, as Redis requires of a disconnect), and its grant,
/// which it never learned of, is undone from a timer due now (the keyspace
/// is not written from inside a disconnect), unless a reply confirmed it
/// meanwhile. Whether it was one of these.
pub fn client_gone(ctx: &Context, client: BlockedId) -> bool {
    let left = WAITING.with(|w| w.borrow_mut().leave(|p| p.client == client));
    let Some((pending, undoes)) = left else {
        return false;
    };
    blocked::unblock_without_reply(client);
    if let (true, Some(grant)) = (undoes, pending.grant) {
        undo_later(ctx, grant);
    }
    true
}

/// Undo a grant from a timer due now, unless a reply confirms it before.
pub fn undo_later(ctx: &Context, grant: Grant) {
    timer::start(ctx, 0, grant, |ctx, grant| undo(ctx, &grant));
}

/// This node became a replica: whoever still waits is answered
/// `READONLY` (a replica grants nothing; Redis has unblocked most of them
/// itself already, see [`client_gone`]).
pub fn demoted(ctx: &Context) {
    let all = WAITING.with(|w| w.borrow_mut().drain());
    for pending in all {
        let text = CString::from(LockError::WaitDemoted.as_cstr());
        (pending.answer_by)(pending.client, Err(text), None);
    }
    if let Some((poll, _)) = POLL.with(|p| p.take()) {
        timer::stop::<()>(ctx, poll);
    }
}

/// A command's client, answered once synced.
fn answer_directly(client: BlockedId, result: Result<Answer, CString>, grant: Option<Grant>) {
    blocked::unblock::<Syncing>(client, Answered { result, grant });
}

/// What a directly waiting client is unblocked with, and the grant it is
/// about (given back if the client leaves before its reply, unless a reply
/// confirmed it).
pub struct Answered {
    result: Result<Answer, CString>,
    grant: Option<Grant>,
}

/// The commands' clients waiting for their replicas.
struct Syncing;

impl Waits for Syncing {
    type Outcome = Answered;

    fn reply(ctx: &Context, answered: &Answered) {
        match &answered.result {
            Ok(Answer::Grant { token, fence }) => {
                confirm(*fence);
                reply::grant(ctx, token, *fence)
            }
            Ok(Answer::Integer(n)) => reply::integer(ctx, *n),
            Ok(Answer::Call(kept)) => kept.reply(ctx),
            Err(text) => reply::error_text(ctx, text),
        }
    }

    fn disconnected(ctx: &Context, client: BlockedId, answered: Option<&Answered>) {
        match answered {
            // Answered, but gone before the reply: a grant it never
            // learned of is given back (unless confirmed since).
            Some(Answered {
                result: Ok(Answer::Grant { .. }),
                grant: Some(grant),
            }) => undo_later(ctx, grant.clone()),
            Some(_) => {}
            None => {
                client_gone(ctx, client);
            }
        }
    }
}
