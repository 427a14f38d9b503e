//! Leader election on one lock key, with no polling: candidates wait in the
//! server's queue (`LOCK.ACQUIRE key ttl TOKEN … OWNER label WAIT 0`), the
//! leader keeps its lease with the watchdog's `LOCK.EXTEND`s, and followers
//! learn each change of leader from `LOCK.OBSERVE`. The recipe and its
//! failure cases: docs/leader-election.md.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use crate::commands::{info_cmd, observe_cmd, Kind, Wait};
use crate::conn::{LockConnection, Opener, WAIT_REPLY_SLACK};
use crate::error::{timed_out, LostReason, Result};
use crate::info::Fields;
use crate::lease::LostSignal;
use crate::locks::{Guard, Locks, Spec};
use crate::options::ReplicaSync;

/// How long one `LOCK.OBSERVE` blocks on the server before it answers with
/// the holder as it is (and [`Observer::next`] asks again).
pub const OBSERVE_TIMEOUT: Duration = Duration::from_secs(30);

/// An election: who leads is who holds the lock `key`.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{redis, Election, Locks};
///
/// # async fn demo() -> Result<(), redis_lock_client::Error> {
/// let locks = Locks::connect(redis::Client::open("redis://127.0.0.1:6379/")?).await?;
/// let election = Election::new(locks, "scheduler:leader", Duration::from_secs(10))
///     .owner("host-a");
///
/// // A follower: each change of leader, as it happens.
/// let mut observer = election.observe()?;
/// tokio::spawn(async move {
///     while let Ok(leader) = observer.next().await {
///         match leader {
///             Some(leader) => println!("{:?} leads, fence {}", leader.owner, leader.fence),
///             None => println!("nobody leads"),
///         }
///     }
/// });
///
/// // A candidate: wait in the server's queue until this process leads.
/// let leadership = election.campaign().await?;
/// tokio::select! {
///     reason = leadership.lost() => println!("no longer the leader: {reason}"),
///     _ = lead(leadership.fence()) => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// # async fn lead(_fence: u64) {}
/// ```
#[derive(Clone)]
pub struct Election {
    locks: Locks,
    key: Vec<u8>,
    ttl: Duration,
    owner: Option<String>,
    sync: Option<ReplicaSync>,
}

impl Election {
    /// An election on `key` (any bytes), whose leader holds a lease of
    /// `ttl` that the watchdog extends every ttl/3. The owner label is that
    /// of `locks`' options ([`LockOptions::owner`](crate::LockOptions::owner)),
    /// if any.
    pub fn new(locks: Locks, key: impl AsRef<[u8]>, ttl: Duration) -> Election {
        let owner = locks.options().owner.clone();
        Election {
            locks,
            key: key.as_ref().to_vec(),
            ttl,
            owner,
            sync: None,
        }
    }

    /// Lead only once `replicas` replicas hold the grant (`SYNC`), within
    /// `timeout`, as [`LockRequest::sync`](crate::LockRequest::sync): the
    /// leader's extends carry the same sync, and a grant the replicas did
    /// not acknowledge in time is undone ([`Error::NotReplicated`](crate::Error::NotReplicated)
    /// from the campaign).
    pub fn sync(mut self, replicas: u32, timeout: Duration) -> Election {
        self.sync = Some(ReplicaSync::new(replicas, timeout));
        self
    }

    /// The label this candidate shows as leader and while it waits
    /// (`LOCK.INFO`, `LOCK.QUEUE`, and the [`Leader::owner`] that observers
    /// see): 1 to 128 bytes, public. The token stays secret.
    pub fn owner(mut self, label: impl Into<String>) -> Election {
        self.owner = Some(label.into());
        self
    }

    /// The election's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Wait until this candidate leads, for as long as it takes.
    ///
    /// It waits in the server's FIFO queue (`WAIT 0`) on a connection of its
    /// own, opened for this call (as [`LockRequest::wait`](crate::LockRequest::wait) does), and is
    /// granted the lock when the leader before it resigns, loses its lease
    /// or its key is deleted. Drop the future to stand down: closing the
    /// connection takes the candidate out of the queue. The leadership's
    /// watchdog then keeps the lease on the shared connection.
    pub async fn campaign(&self) -> Result<Leadership> {
        self.campaign_within(None).await
    }

    /// [`Election::campaign`], giving up with [`Error::TimedOut`](crate::Error::TimedOut) (and
    /// leaving the queue) when `timeout` passes first.
    pub async fn campaign_timeout(&self, timeout: Duration) -> Result<Leadership> {
        self.campaign_within(Some(timeout)).await
    }

    async fn campaign_within(&self, timeout: Option<Duration>) -> Result<Leadership> {
        let spec = Spec {
            key: self.key.clone(),
            set: Vec::new(),
            kind: Kind::Exclusive,
            ttl: self.ttl,
            wait: timeout.map_or(Wait::Forever, Wait::For),
            owner: self.owner.clone(),
            sync: self.sync,
        };
        let grant = self.locks.acquire_spec(&spec).await?;
        Ok(Leadership {
            guard: Guard::of(self.locks.connection().clone(), grant, false, self.sync),
            owner: self.owner.clone(),
        })
    }

    /// The leader now (`LOCK.INFO` on the shared connection), or `None`
    /// when nobody leads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.locks.ready().await?;
        let reply = self.locks.connection().query(&info_cmd(&self.key)).await?;
        leader_of(reply)
    }

    /// A follower's view: [`Observer::next`] returns each change of leader.
    /// It opens a connection of its own on first use, since `LOCK.OBSERVE`
    /// blocks the connection it runs on.
    pub fn observe(&self) -> Result<Observer> {
        Ok(Observer {
            locks: self.locks.clone(),
            opener: self.locks.opener()?,
            key: self.key.clone(),
            conn: None,
            seen: None,
            timeout: OBSERVE_TIMEOUT,
        })
    }
}

/// A leader as observers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's fence: a later leader's is larger. Pass it with every
    /// leader-only write, and have the resource refuse lower fences.
    pub fence: u64,
    /// The leader's owner label, if it gave one (not UTF-8: lossily).
    pub owner: Option<String>,
    /// What was left of its lease when the server answered; `None` if the
    /// key's TTL was removed (`PERSIST`).
    pub ttl: Option<Duration>,
}

/// This candidate leads. The watchdog extends the lease every ttl/3.
///
/// - [`Leadership::lost`] resolves when the lease is lost (an extend was
///   refused, or no extend succeeded before the deadline minus the safety
///   margin): from then on another candidate may lead, so stop acting as
///   leader.
/// - [`Leadership::resign`] hands the lease to the next candidate in the
///   queue.
/// - Dropping it stops the watchdog and resigns in the background, as
///   dropping a [`Guard`] releases: keep it bound while leading.
#[derive(Debug)]
#[must_use = "dropping a leadership resigns it: bind it (`let leadership = …`) for as long as this candidate leads"]
pub struct Leadership {
    guard: Guard,
    owner: Option<String>,
}

impl Leadership {
    /// The fence of this term: larger than every earlier leader's.
    pub fn fence(&self) -> u64 {
        self.guard.fence()
    }

    /// The owner label this leader campaigned with.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// Resolves when the leadership is lost; see [`Guard::lost`].
    pub async fn lost(&self) -> LostReason {
        self.guard.lost().await
    }

    /// A cloneable loss signal for the tasks that do the leader's work.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// Whether the leadership has been lost by now.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Whether this candidate may act as leader right now; see
    /// [`Guard::held`].
    pub fn held(&self) -> bool {
        self.guard.held()
    }

    /// How long this term may still be counted on; see
    /// [`Guard::remaining`].
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// The lock guard underneath, for [`Guard::guarded`]: leader-only writes
    /// kept in Redis, run only while this lease is live.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Stop leading: stop the watchdog and release, which hands the lock to
    /// the first waiting candidate. `Ok(true)` resigned, `Ok(false)` this
    /// candidate no longer led (its lease had ended; whoever leads now is
    /// left alone).
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }
}

/// Follows the leader of an [`Election`] with `LOCK.OBSERVE`, on a connection
/// of its own.
pub struct Observer {
    /// The candidates' handle: its module version check comes first.
    locks: Locks,
    opener: Opener,
    key: Vec<u8>,
    conn: Option<LockConnection>,
    /// The fence of the leader last returned (0: nobody); `None` before the
    /// first call.
    seen: Option<u64>,
    timeout: Duration,
}

impl Observer {
    /// How long each `LOCK.OBSERVE` blocks on the server (default
    /// [`OBSERVE_TIMEOUT`], at least 1 ms). The connection waits for the
    /// reply 2 s longer than that, then gives up with [`Error::Connection`](crate::Error::Connection).
    pub fn timeout(mut self, timeout: Duration) -> Observer {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The first call answers at once with the leader now (`None`: nobody
    /// leads). Each later call waits until the leader differs from the one
    /// it returned last (a new grant, a hand-off, a resignation, an expired
    /// lease, a deleted key), and returns the new one. Fences tell leaders
    /// apart: the same owner label campaigning again gets a new fence.
    ///
    /// After an error (the connection failed or the reply was late) the next
    /// call opens a new connection and carries on from the leader last
    /// returned, answering at once if it changed meanwhile.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        self.locks.ready().await?;
        loop {
            let conn = match &self.conn {
                Some(conn) => conn.clone(),
                None => {
                    let conn = self.opener.open().await?;
                    self.conn = Some(conn.clone());
                    conn
                }
            };
            let (cmd, wait) = match self.seen {
                None => (info_cmd(&self.key), Duration::ZERO),
                Some(seen) => (observe_cmd(&self.key, seen, self.timeout), self.timeout),
            };
            let reply = tokio::time::timeout(wait + WAIT_REPLY_SLACK, conn.query(&cmd)).await;
            let reply = match reply {
                Ok(Ok(reply)) => reply,
                Ok(Err(e)) => {
                    self.conn = None;
                    return Err(e.into());
                }
                Err(_) => {
                    self.conn = None;
                    return Err(timed_out("no reply to LOCK.OBSERVE within its timeout"));
                }
            };
            let leader = leader_of(reply)?;
            let fence = leader.as_ref().map_or(0, |l| l.fence);
            if self.seen != Some(fence) {
                self.seen = Some(fence);
                return Ok(leader);
            }
            // The observe timed out on the server with the leader unchanged.
        }
    }

    /// The fence of the leader last returned: 0 for nobody, `None` before
    /// the first [`Observer::next`].
    pub fn last_fence(&self) -> Option<u64> {
        self.seen
    }
}

/// The holder in a `LOCK.OBSERVE` or `LOCK.INFO` reply: null, or a map
/// (RESP3) or flat name/value array (RESP2) with `fence`, `ttl` and maybe
/// `owner`.
fn leader_of(reply: Option<HashMap<String, Value>>) -> Result<Option<Leader>> {
    let Some(fields) = reply else {
        return Ok(None);
    };
    let f = Fields::new(fields, "unexpected reply to LOCK.OBSERVE or LOCK.INFO");
    Ok(Some(Leader {
        fence: f.count("fence")?,
        owner: f
            .bytes("owner")?
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
        ttl: f.millis("ttl")?,
    }))
}
