//! Redlock: one lock over N independent masters (or independent clusters),
//! each running the module.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use rand::Rng;
use tokio::time::Instant;

use crate::commands::{new_token, Extended, Kind, Wait};
use crate::conn::LockConnection;
use crate::error::{Error, LostReason, Result};
use crate::lease::{BoxFuture, Lease, LostSignal, Renew, Renewal, Term};
use crate::locks::{run_guarded, Held, Locks};
use crate::options::{sent_ttl, LockOptions};

/// How [`Redlock`] acquires.
#[derive(Debug, Clone)]
pub struct RedlockOptions {
    pub(crate) attempts: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) lock: LockOptions,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            attempts: 3,
            retry_delay: Duration::from_millis(200),
            drift_factor: 0.01,
            node_timeout: None,
            lock: LockOptions::default(),
        }
    }
}

impl RedlockOptions {
    /// How many times to try before giving up (at least 1). Default 3.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// Pause between attempts: a random time between half of it and all of
    /// it, so that competing clients do not retry in step. Default 200 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Allowed clock drift between the nodes and this client, as a fraction
    /// of the ttl (2 ms are added). Default 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor.max(0.0);
        self
    }

    /// How long to wait for one node's answer. Default: a tenth of the ttl,
    /// so that a node that hangs costs little of the validity.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// The watchdog options (safety margin, release timeout).
    pub fn lock_options(mut self, options: LockOptions) -> Self {
        self.lock = options;
        self
    }
}

/// A lock across N independent masters, after Redis' Redlock: the lock is
/// held when a majority of the nodes granted it with one token within the
/// validity time.
///
/// Each node is a [`Locks`], so a node may be one server or a whole cluster.
/// The nodes must be independent: not replicas of each other.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{redis, Error, Locks, Redlock};
///
/// # async fn demo() -> Result<(), Error> {
/// let mut nodes = Vec::new();
/// for port in [7001, 7002, 7003, 7004, 7005] {
///     let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
///     nodes.push(Locks::connect(client).await?);
/// }
/// let redlock = Redlock::new(nodes);
/// match redlock.acquire("billing", Duration::from_secs(10)).await {
///     Ok(guard) => {
///         let fence = guard.combined_fence();
///         // ... work, passing `guard.fences()` or `fence` to the storage ...
///         guard.release().await?;
///     }
///     Err(Error::NotAcquired) => println!("held elsewhere"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
///
/// # What Redlock does and does not promise
///
/// Martin Kleppmann's critique ("How to do distributed locking", 2016)
/// applies here as to any lease: a client can pause (GC, swap, a stopped
/// VM) or its packets can be delayed past the lease's end, and a node's
/// clock can jump, so two clients can both believe they hold the lock. The
/// watchdog narrows this (it declares the lease lost *before* its deadline
/// on the client's monotonic clock) but cannot close it: a pause after the
/// check and before the write is invisible to the client.
///
/// What still protects the resource is the fence, checked by the resource
/// itself: see [`RedlockGuard::fences`] and [`RedlockGuard::combined_fence`]
/// for exactly which check is sound.
#[derive(Clone)]
pub struct Redlock {
    nodes: Vec<Locks>,
    options: RedlockOptions,
}

/// One node's answer to one command.
enum Answer<T> {
    Yes(T),
    No,
    Failed,
}

impl Redlock {
    /// A Redlock over these nodes (use an odd number: 3 or 5).
    pub fn new(nodes: Vec<Locks>) -> Redlock {
        Redlock {
            nodes,
            options: RedlockOptions::default(),
        }
    }

    /// Replace the options.
    pub fn with_options(mut self, options: RedlockOptions) -> Redlock {
        self.options = options;
        self
    }

    /// How many nodes make a majority.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Acquire on a majority, trying up to the configured number of times.
    ///
    /// Each attempt sends `LOCK.ACQUIRE key ttl TOKEN t` with one fresh token
    /// to every node at once and waits at most the node timeout for each.
    /// It succeeds when a majority granted and the validity
    /// `ttl − elapsed − drift` is still longer than the safety margin. A
    /// failed attempt releases on every node, then pauses with jitter.
    ///
    /// [`Error::NotAcquired`]: the lock is held elsewhere (refusals alone
    /// kept a majority out of reach). [`Error::NoQuorum`]: failures or
    /// timeouts did. `key` is any bytes.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<RedlockGuard> {
        let key = key.as_ref();
        let ttl = sent_ttl(ttl)?;
        let margin = self.options.lock.margin_for(ttl)?;
        let owner = self.options.lock.owner_label()?;
        if self.nodes.is_empty() {
            return Err(Error::InvalidArgument("a Redlock needs at least one node"));
        }
        // A node whose module is too old refuses the whole lock; one that
        // cannot be reached is one failed node among the others, below.
        for checked in join_all(self.nodes.iter().map(|node| node.ready())).await {
            if let Err(e @ Error::ModuleVersion { .. }) = checked {
                return Err(e);
            }
        }
        let quorum = self.quorum();
        let mut last = (0, 0, 0);
        for attempt in 0..self.options.attempts {
            if attempt > 0 {
                let half = self.options.retry_delay / 2;
                let jitter = rand::thread_rng().gen_range(0..=half.as_micros() as u64);
                tokio::time::sleep(half + Duration::from_micros(jitter)).await;
            }
            let token = new_token();
            let cmd =
                Kind::Exclusive.acquire_cmd(key, &[], ttl, &token, Wait::No, owner, None, None)?;
            let sent = Instant::now();
            let answers = self
                .on_all_nodes(ttl, |conn| {
                    let cmd = cmd.clone();
                    async move {
                        match conn.query::<Option<(Vec<u8>, u64)>>(&cmd).await {
                            Ok(Some((_, fence))) => Answer::Yes(fence),
                            Ok(None) => Answer::No,
                            Err(_) => Answer::Failed,
                        }
                    }
                })
                .await;
            let valid_until = sent + ttl - self.drift(ttl);
            let fences: Vec<Option<u64>> = answers
                .iter()
                .map(|a| match a {
                    Answer::Yes(f) => Some(*f),
                    _ => None,
                })
                .collect();
            let granted = fences.iter().flatten().count();
            let refused = answers.iter().filter(|a| matches!(a, Answer::No)).count();
            let failed = self.nodes.len() - granted - refused;
            last = (granted, refused, failed);
            if granted >= quorum && Instant::now() + margin < valid_until {
                let renew = Arc::new(RedlockLease {
                    redlock: self.clone(),
                    key: key.to_vec(),
                    token: token.clone(),
                    ttl,
                });
                let term = Term {
                    sent,
                    valid_until,
                    ttl,
                    margin,
                };
                let lease = Lease::start(renew, term, &self.options.lock, None);
                return Ok(RedlockGuard {
                    key: key.to_vec(),
                    token,
                    fences,
                    lease,
                });
            }
            // Give back what this attempt got, on every node (a node that
            // timed out may have granted after all).
            let release = Kind::Exclusive.release_cmd(key, &[], &token);
            let _ = self
                .on_all_nodes(ttl, |conn| {
                    let release = release.clone();
                    async move { Answer::from(conn.query::<i64>(&release).await) }
                })
                .await;
        }
        let (granted, refused, failed) = last;
        if granted + failed >= quorum {
            Err(Error::NoQuorum {
                granted,
                refused,
                failed,
            })
        } else {
            Err(Error::NotAcquired)
        }
    }

    /// [`LockRequest::run`](crate::LockRequest::run) for Redlock: run `work` under the lock if a
    /// majority grants it (after the configured attempts), with the watchdog
    /// on; stop it if the lease is lost; release at the end.
    /// [`Held::fence`] is the combined fence.
    pub async fn with_lock<F, Fut, T>(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire(key, ttl).await?;
        let held = Held {
            fence: guard.combined_fence(),
            lost: guard.lost_signal(),
        };
        run_guarded(held, guard.lease, work).await
    }

    fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.options.drift_factor) + Duration::from_millis(2)
    }

    fn node_timeout(&self, ttl: Duration) -> Duration {
        self.options
            .node_timeout
            .unwrap_or((ttl / 10).max(Duration::from_millis(5)))
    }

    /// Run `call` on every node at once, each bounded by the node timeout;
    /// a node that does not answer in time counts as failed.
    async fn on_all_nodes<F, Fut, T>(&self, ttl: Duration, call: F) -> Vec<Answer<T>>
    where
        F: Fn(LockConnection) -> Fut,
        Fut: Future<Output = Answer<T>>,
        T: Send,
    {
        let timeout = self.node_timeout(ttl);
        join_all(self.nodes.iter().map(|node| {
            let fut = call(node.connection().clone());
            async move {
                tokio::time::timeout(timeout, fut)
                    .await
                    .unwrap_or(Answer::Failed)
            }
        }))
        .await
    }
}

impl<T> From<redis::RedisResult<T>> for Answer<T> {
    fn from(r: redis::RedisResult<T>) -> Self {
        match r {
            Ok(v) => Answer::Yes(v),
            Err(_) => Answer::Failed,
        }
    }
}

/// A Redlock held on a majority. Same watchdog and loss signal as
/// [`Guard`](crate::Guard): it extends on every node every ttl/3, an extend
/// round counts only when a majority extends within the validity, and the
/// lease is lost when so many nodes refuse that no majority is left, or when
/// the validity minus the safety margin passes without a successful round.
#[must_use = "dropping a Redlock guard releases the lock: bind it (`let guard = …`) for as long as the work runs"]
pub struct RedlockGuard {
    key: Vec<u8>,
    token: String,
    fences: Vec<Option<u64>>,
    lease: Lease,
}

impl std::fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("fences", &self.fences)
            .field("lost", &self.lease.lost_signal().reason())
            .finish()
    }
}

impl RedlockGuard {
    /// The locked key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The token, the same on every node.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Each node's fence, in the order of the nodes given to
    /// [`Redlock::new`]; `None` where that node did not grant.
    ///
    /// This vector is what a resource can check soundly. Any two majorities
    /// share a node, and on that node the later holder's fence is larger
    /// (the module's fences only grow, also across restarts, as long as
    /// the node keeps its RDB or its clock does not go back). So a resource
    /// that keeps, per node, the highest fence it has seen, and refuses a
    /// request whose fence is *lower* than the kept one on *any* node where
    /// both are known, refuses every holder that an accepted later holder
    /// has superseded. See [`FenceCheck`].
    pub fn fences(&self) -> &[Option<u64>] {
        &self.fences
    }

    /// The largest of the per-node fences: one number for a storage that can
    /// only compare one.
    ///
    /// What it guarantees: it is at least the fence of the node that this
    /// holder shares with any earlier majority holder, on which it exceeds
    /// that holder's fence. What it does *not* guarantee: that it exceeds
    /// the earlier holder's *combined* fence, because that one may come from
    /// a node this holder did not get. The module draws fences from each
    /// node's wall clock in microseconds (`max(high-water + 1, now)`), so it
    /// does grow across successive holders as long as the nodes' clocks
    /// differ by less than the time between one holder's grant and the next
    /// one's; a node whose clock runs ahead by more breaks it. Where that
    /// matters, check [`RedlockGuard::fences`] instead.
    pub fn combined_fence(&self) -> u64 {
        self.fences.iter().flatten().copied().max().unwrap_or(0)
    }

    /// Resolves when the lease is lost (see [`Guard::lost`](crate::Guard::lost)).
    pub async fn lost(&self) -> LostReason {
        self.lease.lost_signal().wait().await
    }

    /// A cloneable loss signal for other tasks.
    pub fn lost_signal(&self) -> LostSignal {
        self.lease.lost_signal()
    }

    /// Whether the lease has been lost by now.
    pub fn is_lost(&self) -> bool {
        self.lease.lost_signal().is_lost()
    }

    /// Whether the lease may be counted on right now (the validity less the
    /// safety margin, on the monotonic clock); see
    /// [`Guard::held`](crate::Guard::held).
    pub fn held(&self) -> bool {
        self.lease.lost_signal().held()
    }

    /// How long the lease may still be counted on; see
    /// [`Guard::remaining`](crate::Guard::remaining).
    pub fn remaining(&self) -> Duration {
        self.lease.lost_signal().remaining()
    }

    /// The end of the validity as this client counts it (send + ttl −
    /// drift).
    pub fn deadline(&self) -> std::time::Instant {
        self.lease.lost_signal().deadline()
    }

    /// Extend on every node now, to `ttl`, and keep that ttl; a round
    /// counts only with a majority within the validity. See
    /// [`Guard::extend`](crate::Guard::extend); failures that leave the
    /// majority unknown are [`Error::NoQuorum`].
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        self.lease.extend(ttl, None).await
    }

    /// Stop the watchdog and release on every node. `Ok(true)` when a
    /// majority released, `Ok(false)` when so many refused that no majority
    /// held it any more, [`Error::NoQuorum`] when failures leave it unknown.
    pub async fn release(mut self) -> Result<bool> {
        self.lease.release().await
    }
}

struct RedlockLease {
    redlock: Redlock,
    key: Vec<u8>,
    token: String,
    /// The acquire's ttl: what the node timeout of a release is counted from.
    ttl: Duration,
}

/// How a command that answers `1`/`0` fared across the nodes.
struct Tally {
    /// Nodes that answered 1.
    yes: usize,
    /// Nodes that answered 0 (or `WRONGTYPE`): the token does not hold the
    /// lock there.
    no: usize,
    /// Nodes whose hold policy refused an extend (`LIMIT`).
    limit: usize,
    /// The reason of a node that answered `REVOKED <reason>` (counted in
    /// `no`).
    revoked: Option<String>,
    nodes: usize,
}

impl Tally {
    fn failed(&self) -> usize {
        self.nodes - self.yes - self.no - self.limit
    }
}

impl RedlockLease {
    /// Send `cmd` (an EXTEND or a RELEASE, answering 1 or 0) to every node at
    /// once, each bounded by the node timeout for `ttl`: the one fan-out
    /// both use.
    async fn tally(&self, cmd: &redis::Cmd, ttl: Duration) -> Tally {
        let answers = self
            .redlock
            .on_all_nodes(ttl, |conn| {
                let cmd = cmd.clone();
                async move { Answer::Yes(Extended::of(conn.query::<i64>(&cmd).await)) }
            })
            .await;
        let count = |f: fn(&Extended) -> bool| {
            answers
                .iter()
                .filter(|a| matches!(a, Answer::Yes(e) if f(e)))
                .count()
        };
        Tally {
            yes: count(|a| matches!(a, Extended::Yes)),
            no: count(|a| matches!(a, Extended::NotHeld | Extended::Revoked(_))),
            limit: count(|a| matches!(a, Extended::Limit(_))),
            revoked: answers.iter().find_map(|a| match a {
                Answer::Yes(Extended::Revoked(reason)) => Some(reason.clone()),
                _ => None,
            }),
            nodes: answers.len(),
        }
    }

    fn no_quorum(tally: &Tally) -> Error {
        Error::NoQuorum {
            granted: tally.yes,
            refused: tally.no + tally.limit,
            failed: tally.failed(),
        }
    }
}

impl Renew for RedlockLease {
    fn renew(&self, ttl: Duration) -> BoxFuture<'_, Renewal> {
        Box::pin(async move {
            let cmd = match Kind::Exclusive.extend_cmd(&self.key, &[], &self.token, ttl, None) {
                Ok(cmd) => cmd,
                Err(e) => return Renewal::Failed(e),
            };
            let sent = Instant::now();
            let tally = self.tally(&cmd, ttl).await;
            let quorum = self.redlock.quorum();
            let valid_until = sent + ttl - self.redlock.drift(ttl);
            if tally.yes >= quorum && Instant::now() < valid_until {
                Renewal::Extended { sent, valid_until }
            } else if tally.no + tally.limit > tally.nodes - quorum {
                // No majority can extend any more: a hold limit among the
                // refusals means the lease still runs to its deadline; a
                // revocation among them says why it was taken.
                match (tally.limit, tally.revoked) {
                    (0, Some(reason)) => Renewal::Revoked(reason),
                    (0, None) => Renewal::Refused,
                    _ => Renewal::Limit,
                }
            } else {
                Renewal::Failed(RedlockLease::no_quorum(&tally))
            }
        })
    }

    fn release(&self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            let release = Kind::Exclusive.release_cmd(&self.key, &[], &self.token);
            let tally = self.tally(&release, self.ttl).await;
            let quorum = self.redlock.quorum();
            if tally.yes >= quorum {
                Ok(true)
            } else if tally.no > tally.nodes - quorum {
                Ok(false)
            } else {
                Err(RedlockLease::no_quorum(&tally))
            }
        })
    }
}

/// The resource-side check for Redlock's per-node fences: keeps, per node,
/// the highest fence seen, and admits a request only if none of its fences
/// is lower than the kept one for the same node.
///
/// ```
/// use redis_lock_client::FenceCheck;
///
/// let mut check = FenceCheck::new(3);
/// assert!(check.admit(&[Some(10), Some(20), None]));      // holder A
/// assert!(check.admit(&[None, Some(25), Some(7)]));       // B, after A, shares node 1
/// assert!(!check.admit(&[Some(10), Some(20), None]));     // A again: stale on node 1
/// ```
#[derive(Debug, Clone)]
pub struct FenceCheck {
    seen: Vec<Option<u64>>,
}

impl FenceCheck {
    /// A check for a Redlock of `nodes` nodes.
    pub fn new(nodes: usize) -> FenceCheck {
        FenceCheck {
            seen: vec![None; nodes],
        }
    }

    /// Admit (and remember) `fences`, or refuse them as stale. A vector of
    /// the wrong length is refused.
    pub fn admit(&mut self, fences: &[Option<u64>]) -> bool {
        if fences.len() != self.seen.len() {
            return false;
        }
        let stale = fences
            .iter()
            .zip(&self.seen)
            .any(|(f, s)| matches!((f, s), (Some(f), Some(s)) if f < s));
        if stale {
            return false;
        }
        for (s, f) in self.seen.iter_mut().zip(fences) {
            if let Some(f) = f {
                *s = Some(s.map_or(*f, |s| s.max(*f)));
            }
        }
        true
    }
}
