//! Sessions, after etcd's `concurrency.Session`: one server lease
//! (`LOCK.LEASE GRANT`) per connection (per node in a cluster) and per
//! ttl, granted when the first hold needs it, kept alive by one task
//! (`LOCK.LEASE KEEPALIVE` every ttl/3) for every hold attached to it
//! (`LEASE id` on the acquire). The holds keep their own cells (their loss
//! signals, `held()`, `remaining()`): the task reports to each of them, as
//! a watchdog reports to its one lease ([`crate::lease`]).
//!
//! - [`Sessions`]: the sessions of one [`Locks`](crate::Locks) (shared by
//!   its clones): which lease a new hold attaches to, granting one when
//!   there is none alive, and whether the server has `LOCK.LEASE` at all
//!   ([`KeepAlive::Auto`]).
//! - [`Session`]: one server lease, its attached holds and its keeper
//!   ([`keeper`]).
//! - [`slots`]: in a cluster, which node serves a key.
//!
//! A release that got no answer (a connection error, the release timeout)
//! leaves an orphan: the hold is detached (the session no longer counts it
//! as its own), but it may still be on the server, attached to the lease,
//! so its release is sent again with each of the session's rounds until
//! one is answered, or until the session ends (the lease's end ends the
//! hold on the server). Orphans alone are not kept alive: with no hold and
//! no acquire left, the keeper only sends their releases (after a pause
//! each) until the term's end, and the lease runs out with them.
//!
//! A lease that ends ends every hold attached to it at once: `KEEPALIVE`
//! answered `0` (expired or revoked on the server), an acquire answered
//! `NOLEASE`, or no keepalive succeeded before the lease's deadline less
//! the safety margin. The next hold gets a new lease.

mod keeper;
mod slots;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Cmd, RedisError, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::commands::{lease_grant_cmd, lease_info_cmd, lease_keepalive_cmd, Extended, NOLEASE};
use crate::conn::LockConnection;
use crate::error::{Error, LostReason, Result};
use crate::lease::{LeaseCell, Term};
use crate::options::{KeepAlive, LockOptions};
use slots::Topology;

/// Lock a std mutex whose holder cannot leave it half-done (every critical
/// section here only moves values in and out).
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether the server has `LOCK.LEASE` for this connection's user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Support {
    Unknown,
    Yes,
    No,
}

/// Which lease a hold attaches to: the node that serves its key (`None`
/// outside a cluster), its ttl and its safety margin (the holds of one
/// lease share its term).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SessionKey {
    node: Option<String>,
    ttl: Duration,
    margin: Duration,
}

/// The sessions of one [`Locks`](crate::Locks) and its clones.
pub(crate) struct Sessions {
    conn: LockConnection,
    /// In a cluster: which node serves a key.
    topology: Option<Arc<Topology>>,
    support: Mutex<Support>,
    /// The lease each kind of hold attaches to now (it may have ended: a
    /// new one is granted then).
    current: Mutex<HashMap<SessionKey, Session>>,
    /// One grant at a time, so that the holds asked for at once share one
    /// lease.
    granting: tokio::sync::Mutex<()>,
}

impl Sessions {
    pub(crate) fn new(conn: LockConnection) -> Sessions {
        let topology = conn
            .is_cluster()
            .then(|| Arc::new(Topology::new(conn.clone())));
        Sessions {
            conn,
            topology,
            support: Mutex::new(Support::Unknown),
            current: Mutex::new(HashMap::new()),
            granting: tokio::sync::Mutex::new(()),
        }
    }

    /// The live session a hold of `key` with this ttl and margin attaches
    /// to, granted now if there is none; `None` when the hold keeps its own
    /// watchdog ([`KeepAlive::Watchdog`], or [`KeepAlive::Auto`] and a
    /// server without `LOCK.LEASE`).
    pub(crate) async fn session_for(
        &self,
        key: &[u8],
        ttl: Duration,
        margin: Duration,
        options: &LockOptions,
    ) -> Result<Option<Session>> {
        let mode = options.keepalive;
        if mode == KeepAlive::Watchdog
            || (mode == KeepAlive::Auto && *locked(&self.support) == Support::No)
        {
            return Ok(None);
        }
        let (node, route) = match &self.topology {
            Some(topology) => match topology.node_of(key).await {
                Ok((node, route)) => (Some(node), Some(route)),
                // A user that may not read the slot map (`CLUSTER SLOTS`).
                Err(Error::Server(e)) if mode == KeepAlive::Auto && lacks_leases(&e) => {
                    *locked(&self.support) = Support::No;
                    return Ok(None);
                }
                Err(e) => return Err(e),
            },
            None => (None, None),
        };
        let which = SessionKey { node, ttl, margin };
        let _one = self.granting.lock().await;
        if let Some(session) = locked(&self.current).get(&which) {
            if session.core.usable() {
                return Ok(Some(session.clone()));
            }
        }
        let grant = lease_grant_cmd(ttl, options.owner_label()?)?;
        let sent = Instant::now();
        match self.conn.query_node::<String>(&grant, route).await {
            Ok(id) => {
                *locked(&self.support) = Support::Yes;
                let session = Session::start(SessionParts {
                    id,
                    conn: self.conn.clone(),
                    topology: self.topology.clone(),
                    node: which.node.clone(),
                    route,
                    term: Term {
                        sent,
                        valid_until: sent + ttl,
                        ttl,
                        margin,
                    },
                });
                locked(&self.current).insert(which, session.clone());
                Ok(Some(session))
            }
            Err(e) if mode == KeepAlive::Auto && lacks_leases(&e) => {
                *locked(&self.support) = Support::No;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// An acquire with `session`'s lease was answered `NOLEASE`: the lease
    /// is gone from the key's node. In a cluster the key may be another
    /// node's than this client thought (the slot map is read again, and the
    /// session is left alone when it was); otherwise the session has
    /// ended, and so has every hold attached to it.
    pub(crate) async fn no_lease(&self, session: &Session, key: &[u8]) {
        if let Some(topology) = &self.topology {
            if topology.refresh().await.is_ok() {
                let node = topology.node_of(key).await.ok().map(|(node, _)| node);
                if node != session.core.node {
                    return;
                }
            }
        }
        session.core.ended_by_server().await;
    }

    /// Every session granted so far that has not been replaced.
    pub(crate) fn sessions(&self) -> Vec<Session> {
        locked(&self.current).values().cloned().collect()
    }
}

/// An error that says the server (or this connection's ACL user) has no
/// `LOCK.LEASE`: a module without lease groups, or `NOPERM`.
fn lacks_leases(e: &RedisError) -> bool {
    match e.code() {
        Some("NOPERM") => true,
        Some("ERR") => e
            .detail()
            .is_some_and(|detail| detail.starts_with("unknown command")),
        _ => false,
    }
}

/// Whether a reply is the server's `NOLEASE`.
pub(crate) fn is_no_lease(e: &Error) -> bool {
    matches!(e, Error::Server(e) if e.code() == Some(NOLEASE))
}

/// A session: one server lease (`LOCK.LEASE`), kept alive by one task for
/// every hold attached to it. Cheap to clone.
///
/// Every hold taken through a [`Locks`](crate::Locks) in session mode
/// ([`KeepAlive`](crate::KeepAlive)) is attached to the session of its
/// node and ttl: [`Guard::session`](crate::Guard::session),
/// [`Locks::sessions`](crate::Locks::sessions). When the session's lease
/// ends (revoked, expired on the server, or not kept alive in time), every
/// hold attached to it is lost at once, each through its own loss signal,
/// and the next hold gets a new session.
#[derive(Clone)]
pub struct Session {
    core: Arc<Core>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the id: it is a secret.
        f.debug_struct("Session")
            .field("ttl", &self.core.term().ttl)
            .field("holds", &self.holds())
            .field("ended", &self.ended())
            .finish()
    }
}

impl Session {
    fn start(parts: SessionParts) -> Session {
        let core = Arc::new(Core::new(parts));
        keeper::spawn(core.clone());
        Session { core }
    }

    /// The lease's id, as `LOCK.LEASE GRANT` answered it: a secret like a
    /// token (whoever knows it can keep every hold of this session alive,
    /// or revoke them all with `LOCK.LEASE REVOKE`): keep it out of logs.
    pub fn id(&self) -> &str {
        &self.core.id
    }

    /// The lease's ttl: a hold of this session lives until the lease is
    /// not kept alive for that long.
    pub fn ttl(&self) -> Duration {
        self.core.term().ttl
    }

    /// How many holds are attached now.
    pub fn holds(&self) -> usize {
        locked(&self.core.state).members.len()
    }

    /// How many releases of its former holds got no answer and are sent
    /// again with its rounds (until answered, or until the session ends).
    pub fn orphans(&self) -> usize {
        locked(&self.core.state).orphans.len()
    }

    /// Why the session ended, once it has: [`LostReason::Expired`] (not
    /// kept alive in time, or unused past its term),
    /// [`LostReason::Refused`] (the server no longer had the lease), or
    /// [`LostReason::Revoked`] (`LOCK.LEASE REVOKE`).
    pub fn ended(&self) -> Option<LostReason> {
        match &locked(&self.core.state).status {
            Status::Ended(reason) => Some(reason.clone()),
            Status::Live | Status::Ending => None,
        }
    }

    /// Count an acquire in flight with this session's lease: the keeper
    /// keeps the lease alive while any is (a waiting one may wait long).
    pub(crate) fn pending(&self) -> Pending {
        let core = self.core.clone();
        locked(&core.state).pending += 1;
        core.wake();
        Pending { core }
    }

    /// Attach a hold just granted with this lease: its cell (the lease's
    /// term), and what detaches it when dropped. `probe` is the hold's
    /// extend (`LOCK.EXTEND key token ttl`), which for an attached hold
    /// moves nothing and tells whether it still holds, or why not; `keys`
    /// the holds it counts for on the server (a multi-key hold's keys). The
    /// reason when the lease ended before the reply came.
    pub(crate) fn attach(
        &self,
        probe: Cmd,
        keys: usize,
    ) -> std::result::Result<Attached, LostReason> {
        let mut state = locked(&self.core.state);
        match &state.status {
            Status::Live => {}
            Status::Ending => return Err(LostReason::Refused),
            Status::Ended(reason) => return Err(reason.clone()),
        }
        if Instant::now() >= state.term.lost_at() {
            return Err(LostReason::Expired);
        }
        let cell = LeaseCell::new(state.term);
        state.next_member += 1;
        let member = state.next_member;
        state.members.insert(
            member,
            Member {
                cell: cell.clone(),
                probe,
                keys,
            },
        );
        drop(state);
        self.core.wake();
        Ok(Attached {
            cell,
            detach: Detach {
                core: self.core.clone(),
                member,
            },
        })
    }

    /// A keepalive now, outside the keeper's rounds (a hold's manual
    /// extend): the lease's new term, or why not.
    pub(crate) async fn keepalive_now(&self) -> std::result::Result<Term, Error> {
        match self.core.round().await {
            Round::Alive => Ok(self.core.term()),
            Round::Ended => Err(Error::Lost(self.ended().unwrap_or(LostReason::Refused))),
            Round::Failed(e) => Err(e),
        }
    }

    /// A hold's release got no answer: send `release` again with each
    /// round until it is answered (`keys`: the holds it is on the server).
    /// Nothing once the session has ended: the lease took the hold with it.
    pub(crate) fn orphan(&self, release: Cmd, keys: usize) {
        let mut state = locked(&self.core.state);
        if state.status != Status::Live {
            return;
        }
        state.orphans.push(Orphan { release, keys });
        drop(state);
        self.core.wake();
    }

    /// One hold's extend on the server (routed by its key).
    pub(crate) async fn probe(&self, probe: &Cmd) -> Extended {
        Extended::of(self.core.conn.query::<i64>(probe).await)
    }
}

/// An acquire in flight with a session's lease; dropping it says it is
/// done (granted and attached, or not).
pub(crate) struct Pending {
    core: Arc<Core>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut state = locked(&self.core.state);
        state.pending = state.pending.saturating_sub(1);
        drop(state);
        self.core.wake();
    }
}

/// A hold attached to a session: the cell the session reports to, and its
/// attachment (drop it to detach, before the release is sent).
pub(crate) struct Attached {
    pub(crate) cell: LeaseCell,
    pub(crate) detach: Detach,
}

/// Detaches a hold from its session when dropped: the session stops
/// reporting to it, and stops counting it.
pub(crate) struct Detach {
    core: Arc<Core>,
    member: u64,
}

impl Drop for Detach {
    fn drop(&mut self) {
        let removed = locked(&self.core.state).members.remove(&self.member);
        if removed.is_some() {
            self.core.wake();
        }
    }
}

/// What a session is started from.
struct SessionParts {
    id: String,
    conn: LockConnection,
    topology: Option<Arc<Topology>>,
    node: Option<String>,
    route: Option<u16>,
    term: Term,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Live,
    /// The server said the lease is gone; the holds are being asked why.
    Ending,
    Ended(LostReason),
}

/// A hold attached to a session.
struct Member {
    cell: LeaseCell,
    probe: Cmd,
    /// The holds it is on the server: one per key (a multi-key hold is one
    /// member with a hold on each of its keys).
    keys: usize,
}

/// A former hold whose release got no answer.
struct Orphan {
    release: Cmd,
    /// The holds it may still be on the server (one per key).
    keys: usize,
}

struct State {
    status: Status,
    /// What the last successful grant or keepalive bought.
    term: Term,
    members: HashMap<u64, Member>,
    next_member: u64,
    /// Acquires in flight with this lease.
    pending: usize,
    /// Releases that got no answer, sent again with each round.
    orphans: Vec<Orphan>,
}

/// What one keepalive round gave.
pub(crate) enum Round {
    /// Kept alive; the holds' terms moved.
    Alive,
    /// The lease is gone, and so is every hold that was attached.
    Ended,
    /// No answer to act on: try again.
    Failed(Error),
}

/// One session's lease and holds.
struct Core {
    id: String,
    conn: LockConnection,
    topology: Option<Arc<Topology>>,
    node: Option<String>,
    /// In a cluster: the slot its commands are routed by.
    route: Mutex<Option<u16>>,
    state: Mutex<State>,
    /// Wakes the keeper: a hold came or went, the term moved, it ended.
    wake: watch::Sender<()>,
}

impl Core {
    fn new(parts: SessionParts) -> Core {
        Core {
            id: parts.id,
            conn: parts.conn,
            topology: parts.topology,
            node: parts.node,
            route: Mutex::new(parts.route),
            state: Mutex::new(State {
                status: Status::Live,
                term: parts.term,
                members: HashMap::new(),
                next_member: 0,
                pending: 0,
                orphans: Vec::new(),
            }),
            wake: watch::Sender::new(()),
        }
    }

    fn wake(&self) {
        self.wake.send_replace(());
    }

    fn term(&self) -> Term {
        locked(&self.state).term
    }

    fn route(&self) -> Option<u16> {
        *locked(&self.route)
    }

    /// Live, and its term not run out: a new hold may attach.
    fn usable(&self) -> bool {
        let state = locked(&self.state);
        state.status == Status::Live && Instant::now() < state.term.lost_at()
    }

    /// Its status, its term, how many holds and acquires use it, and how
    /// many releases are to be sent again.
    fn snapshot(&self) -> (Status, Term, usize, usize) {
        let state = locked(&self.state);
        (
            state.status.clone(),
            state.term,
            state.members.len() + state.pending,
            state.orphans.len(),
        )
    }

    /// One keepalive: `KEEPALIVE id`, then `INFO id`'s count of holds
    /// against this client's (a hold gone from the server behind this
    /// client's back, by `DEL`, an overwrite or `LOCK.REVOKE`, is then
    /// looked for among the holds).
    async fn round(&self) -> Round {
        let before = self.held_members();
        let keepalive = lease_keepalive_cmd(&self.id);
        let mut retried = false;
        loop {
            let sent = Instant::now();
            match self.conn.query_node::<i64>(&keepalive, self.route()).await {
                Ok(1) => {
                    self.renewed(sent);
                    self.release_orphans().await;
                    self.check(before).await;
                    return Round::Alive;
                }
                Ok(_) => {
                    if !retried && self.rerouted().await {
                        retried = true;
                        continue;
                    }
                    self.ended_by_server().await;
                    return Round::Ended;
                }
                Err(e) => return Round::Failed(e.into()),
            }
        }
    }

    /// In a cluster, after a keepalive answered `0`: whether the slot this
    /// session routes by moved to another master (a reshard); if so, the
    /// route now goes to a slot its node still serves.
    async fn rerouted(&self) -> bool {
        let (Some(topology), Some(node)) = (&self.topology, &self.node) else {
            return false;
        };
        if topology.refresh().await.is_err() {
            return false;
        }
        let now = topology.route_of(node);
        let mut route = locked(&self.route);
        if now.is_some() && now != *route {
            *route = now;
            true
        } else {
            false
        }
    }

    /// A keepalive sent at `sent` succeeded: the lease and every attached
    /// hold now last until `sent + ttl`.
    fn renewed(&self, sent: Instant) {
        let mut state = locked(&self.state);
        if state.status != Status::Live || sent < state.term.sent {
            return;
        }
        let term = Term {
            sent,
            valid_until: sent + state.term.ttl,
            ..state.term
        };
        state.term = term;
        for member in state.members.values() {
            member.cell.extended(term);
        }
        drop(state);
        self.wake();
    }

    /// Compare the server's count of the lease's holds with this client's
    /// (the smaller of before and after the keepalive, so that a hold
    /// released meanwhile is not missed as one taken away); fewer on the
    /// server: ask each hold.
    async fn check(&self, before: usize) {
        let info = lease_info_cmd(&self.id);
        let Ok(Some(fields)) = self
            .conn
            .query_node::<Option<HashMap<String, Value>>>(&info, self.route())
            .await
        else {
            // Gone since the keepalive (the next one says so), or no answer.
            return;
        };
        let on_server = match fields.get("holds") {
            Some(Value::Int(n)) => usize::try_from(*n).unwrap_or(0),
            _ => return,
        };
        // An orphan may still be there (its release was not answered).
        let orphans: usize = locked(&self.state).orphans.iter().map(|o| o.keys).sum();
        let here = before.min(self.held_members()) + orphans;
        if on_server < here {
            self.find_lost().await;
        }
    }

    /// Send each orphan's release again; those answered (whatever the
    /// answer: released, or already gone) are forgotten.
    async fn release_orphans(&self) {
        let sent: Vec<Cmd> = locked(&self.state)
            .orphans
            .iter()
            .map(|o| o.release.clone())
            .collect();
        if sent.is_empty() {
            return;
        }
        let answers = join_all(sent.iter().map(|cmd| self.conn.query::<i64>(cmd))).await;
        let answered: Vec<bool> = answers
            .into_iter()
            .map(|answer| match answer {
                Ok(_) => true,
                Err(e) => !matches!(Error::from(e), Error::Connection(_)),
            })
            .collect();
        let mut state = locked(&self.state);
        // Orphans are only added at the end meanwhile (or all dropped, if
        // the session ended): the first `sent.len()` are the ones sent.
        let mut index = 0;
        state.orphans.retain(|_| {
            let keep = !answered.get(index).copied().unwrap_or(false);
            index += 1;
            keep
        });
    }

    /// The releases alone, when nothing else uses the session (it is not
    /// kept alive for them): bounded by the term's end.
    async fn orphans_round(&self) {
        let lost_at = self.term().lost_at();
        let _ = tokio::time::timeout_at(lost_at, self.release_orphans()).await;
    }

    /// The server's holds of the attached members not known to be lost (a
    /// guarded command or a manual extend may have found one lost before
    /// the keeper did): one per key.
    fn held_members(&self) -> usize {
        locked(&self.state)
            .members
            .values()
            .filter(|m| m.cell.is_held())
            .map(|m| m.keys)
            .sum()
    }

    /// Ask every attached hold (its extend moves nothing): one the server
    /// no longer has is lost ([`LostReason::Refused`], or
    /// [`LostReason::Revoked`] with the server's reason) and detached, and
    /// so is one already known to be lost.
    async fn find_lost(&self) {
        let asked: Vec<(u64, LeaseCell, Cmd)> = {
            let mut state = locked(&self.state);
            state.members.retain(|_, m| m.cell.is_held());
            state
                .members
                .iter()
                .map(|(id, m)| (*id, m.cell.clone(), m.probe.clone()))
                .collect()
        };
        let answers = join_all(
            asked
                .iter()
                .map(|(_, _, probe)| self.conn.query::<i64>(probe)),
        )
        .await;
        let mut gone = Vec::new();
        for ((id, cell, _), answer) in asked.into_iter().zip(answers) {
            let reason = match Extended::of(answer) {
                Extended::NotHeld => LostReason::Refused,
                Extended::Revoked(reason) => LostReason::Revoked(reason),
                _ => continue,
            };
            cell.lose(reason);
            gone.push(id);
        }
        if !gone.is_empty() {
            let mut state = locked(&self.state);
            for id in gone {
                state.members.remove(&id);
            }
            drop(state);
            self.wake();
        }
    }

    /// The server no longer has the lease (a keepalive answered `0`, an
    /// acquire `NOLEASE`): every attached hold is lost, each with the
    /// reason its own extend gives (`REVOKED lease revoked` after
    /// `LOCK.LEASE REVOKE`, or an earlier `LOCK.REVOKE`'s), else
    /// [`LostReason::Refused`]; all of them signalled together, once they
    /// have answered. Should the answers not come before the term's end
    /// (or this future be dropped), the keeper ends them then, as expired.
    async fn ended_by_server(&self) {
        let asked: Vec<(u64, Cmd)> = {
            let mut state = locked(&self.state);
            if state.status != Status::Live {
                return;
            }
            state.status = Status::Ending;
            state
                .members
                .iter()
                .map(|(id, m)| (*id, m.probe.clone()))
                .collect()
        };
        self.wake();
        let answers = join_all(asked.iter().map(|(_, probe)| self.conn.query::<i64>(probe))).await;
        let reasons: HashMap<u64, LostReason> = asked
            .iter()
            .zip(answers)
            .map(|((id, _), answer)| match Extended::of(answer) {
                Extended::Revoked(reason) => (*id, LostReason::Revoked(reason)),
                _ => (*id, LostReason::Refused),
            })
            .collect();
        // The session's own reason: a revocation if any hold says so.
        let ended = reasons
            .values()
            .find(|r| matches!(r, LostReason::Revoked(_)))
            .cloned()
            .unwrap_or(LostReason::Refused);
        let mut state = locked(&self.state);
        if state.status != Status::Ending {
            // The keeper ended it meanwhile (the term ran out).
            return;
        }
        for (id, member) in state.members.drain() {
            member
                .cell
                .lose(reasons.get(&id).cloned().unwrap_or(LostReason::Refused));
        }
        state.orphans.clear(); // gone with the lease
        state.status = Status::Ended(ended);
        drop(state);
        self.wake();
    }

    /// The term ran out on the monotonic clock without a keepalive: every
    /// attached hold is lost ([`LostReason::Expired`]). True once ended.
    fn expire_if_due(&self) -> bool {
        let mut state = locked(&self.state);
        if matches!(state.status, Status::Ended(_)) {
            return true;
        }
        if Instant::now() < state.term.lost_at() {
            return false;
        }
        for (_, member) in state.members.drain() {
            member.cell.lose(LostReason::Expired);
        }
        state.orphans.clear(); // the lease ends them on the server
        state.status = Status::Ended(LostReason::Expired);
        drop(state);
        self.wake();
        true
    }
}
