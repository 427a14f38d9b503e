//! The connections a [`Locks`](crate::Locks) can talk through, and how it
//! opens a dedicated one for a waiting acquire.

use std::time::Duration;

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisResult};

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
