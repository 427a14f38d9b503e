//! The connections a [`Locks`](crate::Locks) can talk through, and how it
//! opens a dedicated one for a waiting acquire.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisResult};

use crate::error::{timed_out, Error, Result};

/// A connection the lock commands go through. Build it with `.into()` from
/// any of the `redis` crate's async connections:
///
/// - [`ConnectionManager`]: reconnects by itself; what
///   [`Locks::connect`](crate::Locks::connect) uses.
/// - [`MultiplexedConnection`]: one socket; once it breaks it stays broken.
/// - [`ClusterConnection`]: routes each command by its key (the lock
///   commands declare the key as their first argument).
#[derive(Clone)]
pub enum LockConnection {
    /// A connection manager (reconnects after a failure).
    Manager(ConnectionManager),
    /// A plain multiplexed connection.
    Multiplexed(MultiplexedConnection),
    /// A Redis Cluster connection.
    Cluster(ClusterConnection),
}

impl From<ConnectionManager> for LockConnection {
    fn from(c: ConnectionManager) -> Self {
        LockConnection::Manager(c)
    }
}

impl From<MultiplexedConnection> for LockConnection {
    fn from(c: MultiplexedConnection) -> Self {
        LockConnection::Multiplexed(c)
    }
}

impl From<ClusterConnection> for LockConnection {
    fn from(c: ClusterConnection) -> Self {
        LockConnection::Cluster(c)
    }
}

impl LockConnection {
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            LockConnection::Manager(c) => cmd.query_async(&mut c.clone()).await,
            LockConnection::Multiplexed(c) => cmd.query_async(&mut c.clone()).await,
            LockConnection::Cluster(c) => cmd.query_async(&mut c.clone()).await,
        }
    }

    /// A keyless command (`LOCK.LEASE …`) to one node: in a cluster, the
    /// master that serves `slot` (redis-rs' own view of the slots, which
    /// follows failovers); elsewhere the one server (`slot` is ignored).
    pub(crate) async fn query_node<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        slot: Option<u16>,
    ) -> RedisResult<T> {
        match (self, slot) {
            (LockConnection::Cluster(c), Some(slot)) => {
                let route = Route::new(slot, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let reply = c.clone().route_command(cmd.clone(), routing).await?;
                Ok(redis::from_redis_value(reply.extract_error()?)?)
            }
            _ => self.query(cmd).await,
        }
    }

    /// Whether this is a Redis Cluster connection (holds live on many
    /// nodes).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, LockConnection::Cluster(_))
    }
}

/// Where a waiting acquire gets its own connection from.
#[derive(Clone)]
pub(crate) enum Opener {
    Single(redis::Client),
    Cluster(Box<ClusterClient>),
}

impl Opener {
    /// A fresh connection that no other request shares, so that a blocked
    /// `LOCK.ACQUIRE … WAIT` delays nothing else (Redis serves one
    /// connection's commands in order: a blocked command holds up every
    /// command behind it on the same socket, watchdog extends included).
    pub(crate) async fn open(&self) -> RedisResult<LockConnection> {
        match self {
            Opener::Single(client) => {
                // No response timeout: the command blocks for as long as it
                // waits for the lock. The caller bounds it with its own timer.
                let config = AsyncConnectionConfig::new().set_response_timeout(None);
                let c = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(LockConnection::Multiplexed(c))
            }
            // The cluster client's own response timeout applies (none
            // unless it was given one).
            Opener::Cluster(client) => Ok(LockConnection::Cluster(
                client.get_async_connection().await?,
            )),
        }
    }
}

/// How long to give a reply beyond the server-side wait before giving up on
/// the connection.
pub(crate) const WAIT_REPLY_SLACK: Duration = Duration::from_secs(2);

/// A connection of its own for a lease's synced requests (`… SYNC n ms`):
/// each blocks the connection it runs on until the replicas acknowledge
/// (up to a second on Redis 7.0), so it must not hold up the shared one,
/// where every other guard's extends go. Opened on first use, kept for the
/// lease's life, and dropped after a request that failed on the network,
/// timed out or was abandoned midway (its reply would still be due, ahead
/// of the next request's).
pub(crate) struct SyncLane {
    opener: Opener,
    /// The connection, with a number that tells it from the ones before.
    slot: Mutex<Option<(u64, LockConnection)>>,
    opened: AtomicU64,
}

impl SyncLane {
    pub(crate) fn new(opener: Opener) -> SyncLane {
        SyncLane {
            opener,
            slot: Mutex::new(None),
            opened: AtomicU64::new(0),
        }
    }

    /// A lane that starts with `conn`, already open (an acquire's).
    pub(crate) fn with(opener: Opener, conn: LockConnection) -> SyncLane {
        let lane = SyncLane::new(opener);
        lane.store(conn);
        lane
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(u64, LockConnection)>> {
        // A panic while it was held left nothing half-done in it.
        self.slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn store(&self, conn: LockConnection) -> u64 {
        let number = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        *self.slot() = Some((number, conn));
        number
    }

    /// Forget connection `number` (if it is still the lane's).
    fn discard(&self, number: u64) {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|(n, _)| *n == number) {
            *slot = None;
        }
    }

    /// `cmd` on the lane's connection (opened if there is none), its reply
    /// within `limit`: a timeout is a [`timed_out`] connection error.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd, limit: Duration) -> Result<T> {
        let request = async {
            let open = self.slot().clone();
            let (number, conn) = match open {
                Some(open) => open,
                None => {
                    let conn = self.opener.open().await?;
                    (self.store(conn.clone()), conn)
                }
            };
            // Dropped before the reply (a timeout, the caller gave up): the
            // connection goes with it.
            let mut flight = InFlight {
                lane: self,
                number,
                settled: false,
            };
            let reply = conn.query::<T>(cmd).await.map_err(Error::from);
            // An error reply leaves the connection as it was; a failure on
            // the network does not.
            flight.settled = !matches!(reply, Err(Error::Connection(_)));
            reply
        };
        match tokio::time::timeout(limit, request).await {
            Ok(reply) => reply,
            Err(_) => Err(timed_out("no reply to a synced request within its timeout")),
        }
    }
}

/// A request in flight on a [`SyncLane`]: unless settled, its connection is
/// dropped when this is.
struct InFlight<'a> {
    lane: &'a SyncLane,
    number: u64,
    settled: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.lane.discard(self.number);
        }
    }
}
