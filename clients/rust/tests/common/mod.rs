//! Real servers for the client's tests, from `redis-lock-testsupport`:
//! `redis-server` (or `$LOCK_TEST_SERVER`) with the module (`$LOCK_MODULE`, or
//! the workspace's debug build, built once per test binary), each on a free
//! loopback port in its own directory, killed on drop even when a test
//! panics; [`LocksOn`] to reach one through the client (and an admin
//! connection of the client's `redis` version: testsupport has its own), and
//! a 3-master cluster.
#![allow(dead_code)]

use std::thread::sleep;
use std::time::{Duration, Instant};

use redis_lock_client::{redis, KeepAlive, LockOptions, Locks};
pub use redis_lock_testsupport::Server;

/// The client on a test server.
pub trait LocksOn {
    /// A [`Locks`] on this server through its own connection manager.
    #[allow(async_fn_in_trait)]
    async fn locks(&self) -> Locks;
    /// The same, each hold with its own watchdog (`LOCK.EXTEND` every
    /// ttl/3), as before sessions: for what only a per-hold lease does
    /// (a hold's own ttl, the hold policy's `LIMIT`, synced extends).
    #[allow(async_fn_in_trait)]
    async fn watchdog_locks(&self) -> Locks;
    /// A `redis::Client` (the client crate's version) for this server.
    fn redis_client(&self) -> redis::Client;
    /// A new admin connection (the client crate's `redis` version).
    fn admin(&self) -> redis::Connection;
}

impl LocksOn for Server {
    async fn locks(&self) -> Locks {
        Locks::connect(self.redis_client())
            .await
            .expect("Locks::connect")
    }

    async fn watchdog_locks(&self) -> Locks {
        self.locks()
            .await
            .with_options(LockOptions::default().keepalive(KeepAlive::Watchdog))
    }

    fn redis_client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a redis:// URL")
    }

    fn admin(&self) -> redis::Connection {
        self.redis_client()
            .get_connection()
            .expect("an admin connection")
    }
}

/// A [`Locks`] reached through a URL, as the examples and `redis-lock run` do.
pub async fn locks_at(url: &str) -> Locks {
    Locks::connect(redis::Client::open(url).unwrap())
        .await
        .expect("Locks::connect")
}

/// Poll `cond` every 20 ms until it holds; panic after `timeout`.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "condition not met within {timeout:?}"
        );
        sleep(Duration::from_millis(20));
    }
}

/// `LOCK.INFO key`'s integer fields as a map, `None` when free.
pub fn info(
    con: &mut redis::Connection,
    key: impl AsRef<[u8]>,
) -> Option<std::collections::HashMap<String, i64>> {
    let fields: Option<std::collections::HashMap<String, redis::Value>> = redis::cmd("LOCK.INFO")
        .arg(key.as_ref())
        .query(con)
        .expect("LOCK.INFO");
    fields.map(|fields| {
        fields
            .into_iter()
            .filter_map(|(name, value)| match value {
                redis::Value::Int(n) => Some((name, n)),
                _ => None,
            })
            .collect()
    })
}

/// A 3-master Redis Cluster (no replicas), each master with the module,
/// created with `redis-cli --cluster create`; ready once every node reports
/// `cluster_state:ok`.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let nodes =
            redis_lock_testsupport::start_cluster(3, 0, &["--cluster-node-timeout", "5000"]);
        Cluster { nodes }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }
}

/// A master and a replica (both with the module), the replica synced and
/// acknowledging: for `sync`. Dropping (or `kill`ing) the replica takes it
/// away; the master sees its link close.
pub fn pair() -> (Server, Server) {
    // The full sync starts at once (Redis waits 5 s by default, for more
    // replicas to join the same transfer).
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = Server::start();
    let mut follower = replica.admin();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut follower)
        .expect("REPLICAOF");
    let mut admin = master.admin();
    wait_until(Duration::from_secs(20), || {
        info_field(&mut follower, "replication", "master_link_status") == "up"
            && info_field(&mut admin, "replication", "slave0").contains("state=online")
    });
    // Redis 7.0 streams writes to a replica after a diskless sync only once
    // it acknowledged (~1 s): a write acknowledged (`WAIT`, which asks the
    // replica at once) shows the stream flowing, so that the tests' short
    // sync timeouts hold.
    let _: () = redis::cmd("SET")
        .arg("replica:probe")
        .arg(1)
        .query(&mut admin)
        .expect("SET");
    let _: i64 = redis::cmd("DEL")
        .arg("replica:probe")
        .query(&mut admin)
        .expect("DEL");
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(20_000)
        .query(&mut admin)
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica acknowledges");
    (master, replica)
}

/// One `field:value` line of `INFO section` ("" when absent).
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// A TCP proxy on a free loopback port in front of a server, for faults on
/// the client's link: [`Proxy::blackhole`] swallows what the client sends
/// (its requests never reach the server, no reply comes), [`Proxy::cut`]
/// resets every connection (and forgets what it swallowed), and
/// [`Proxy::pass`] forwards again. Its threads end with the test process.
pub struct Proxy {
    pub port: u16,
    swallow: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    pub fn to(server: &Server) -> Proxy {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};

        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        let swallow = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
        let target = server.port;
        let (swallowing, tracked) = (swallow.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let pumps = [
                    (client.try_clone(), upstream.try_clone(), true),
                    (upstream.try_clone(), client.try_clone(), false),
                ];
                tracked.lock().unwrap().extend([client, upstream]);
                for (from, to, outbound) in pumps {
                    let (Ok(mut from), Ok(mut to)) = (from, to) else {
                        continue;
                    };
                    let swallowing = swallowing.clone();
                    std::thread::spawn(move || {
                        let mut buffer = [0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buffer) {
                            if n == 0 {
                                break;
                            }
                            if outbound && swallowing.load(Ordering::SeqCst) {
                                continue; // the request never reaches the server
                            }
                            if to.write_all(&buffer[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy {
            port,
            swallow,
            open,
        }
    }

    /// A `redis://` URL through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn blackhole(&self) {
        self.swallow
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn cut(&self) {
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn pass(&self) {
        self.swallow
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
