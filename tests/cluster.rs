//! Redis Cluster (issue 5, scenario 8): three masters and three replicas on
//! loopback ports, each loading the freshly built module, joined with
//! `redis-cli --cluster create … --cluster-replicas 1`, and driven through the
//! `redis` crate's cluster client.
//!
//! - Locks on every one of the 16384 slots; a node that does not own a key
//!   answers MOVED, and the client follows it (also after a reshard).
//! - Resharding a slot that holds live locks (SETSLOT IMPORTING/MIGRATING +
//!   MIGRATE) keeps token, deadline and fence, and the target node's later
//!   fences stay above the migrated one, even one far ahead of its clock.
//! - `CLUSTER FAILOVER` on a replica, and kill -9 of a master, while workers
//!   acquire and release: fences never repeat for a key, and the double grants
//!   are counted (none is allowed with the coordinated failover; after kill -9
//!   async replication may lose a grant, and the count is printed).
//! - A classic reshard of a slot whose held lock clients wait for: the
//!   waiters on the source are answered `ASK` (never granted there), the
//!   target holds the lock and grants it to a cluster client that followed,
//!   once the holder releases it there.
//! - Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) of a slot with
//!   held and waited-for locks: aborted (nothing changes), then completed
//!   while the locks change; the target holds them as they were, the clients
//!   left waiting on the source are answered `MOVED` (skipped, with the
//!   reason printed, on servers without it).
//!
//! The load tests run `LOCK_CLUSTER_SECONDS` seconds of load per phase (2 by
//! default) and `LOCK_CLUSTER_ROUNDS` fault rounds (1 by default); `make
//! cluster-long` runs more of both.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::payload::{crc64, dump, fence_in_payload, rdb_len_decode};
use common::*;
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::cluster_routing::{get_slot, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

const SLOTS: u16 = 16384;

struct Cluster {
    nodes: Vec<Server>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    port: u16,
    master: bool,
    failed: bool,
    /// The master's id, for a replica.
    master_id: Option<String>,
    slots: Vec<(u16, u16)>,
}

impl Cluster {
    fn start() -> Cluster {
        let nodes = redis_lock_testsupport::start_cluster(
            3,
            1,
            &[
                "--cluster-node-timeout",
                "1000",
                // A replica of a killed master may take over whatever its
                // replication lag: the test wants the failover.
                "--cluster-replica-validity-factor",
                "0",
                "--repl-diskless-sync-delay",
                "0",
            ],
        );
        let mut cluster = Cluster { nodes };
        cluster.wait_healthy(Duration::from_secs(30));
        cluster
    }

    fn node(&self, port: u16) -> &Server {
        self.nodes.iter().find(|n| n.port == port).unwrap()
    }

    fn node_mut(&mut self, port: u16) -> &mut Server {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }

    /// `CLUSTER NODES` as `port` sees it.
    fn topology(&self, port: u16) -> Vec<NodeLine> {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.node(port).conn())
            .expect("CLUSTER NODES");
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let addr = f[1].split('@').next().unwrap();
                let port = addr.rsplit(':').next().unwrap().parse().unwrap();
                let slots = f[8..]
                    .iter()
                    .filter(|s| !s.starts_with('['))
                    .map(|s| match s.split_once('-') {
                        Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                        None => (s.parse().unwrap(), s.parse().unwrap()),
                    })
                    .collect();
                NodeLine {
                    id: f[0].to_string(),
                    port,
                    master: f[2].contains("master"),
                    failed: f[2].contains("fail"),
                    master_id: (f[3] != "-").then(|| f[3].to_string()),
                    slots,
                }
            })
            .collect()
    }

    /// The running nodes' ports.
    fn live_ports(&mut self) -> Vec<u16> {
        self.nodes
            .iter_mut()
            .filter_map(|n| n.is_running().then_some(n.port))
            .collect()
    }

    /// Masters (with slots) as the first live node sees them.
    fn masters(&mut self) -> Vec<NodeLine> {
        let port = self.live_ports()[0];
        self.topology(port)
            .into_iter()
            .filter(|n| n.master && !n.failed && !n.slots.is_empty())
            .collect()
    }

    /// Every live node says `cluster_state:ok`, agrees on three masters that
    /// cover all slots, and every live replica's link to its master is up.
    fn wait_healthy(&mut self, timeout: Duration) {
        let ports = self.live_ports();
        wait_until(timeout, || {
            ports.iter().all(|&p| {
                let mut con = self.node(p).conn();
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut con)
                    .unwrap_or_default();
                if !info.contains("cluster_state:ok") {
                    return false;
                }
                let topo = self.topology(p);
                let masters: Vec<&NodeLine> = topo
                    .iter()
                    .filter(|n| n.master && !n.failed && !n.slots.is_empty())
                    .collect();
                let covered: u32 = masters
                    .iter()
                    .flat_map(|m| m.slots.iter())
                    .map(|(a, b)| u32::from(b - a) + 1)
                    .sum();
                let me = topo.iter().find(|n| n.port == p).unwrap();
                let link_up =
                    me.master || info_field(&mut con, "replication", "master_link_status") == "up";
                masters.len() == 3 && covered == u32::from(SLOTS) && link_up
            })
        });
    }

    fn client(&mut self) -> ClusterConnection {
        let urls: Vec<String> = self
            .live_ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect();
        cluster_client(urls)
    }

    /// The master that owns `slot`.
    fn owner(&mut self, slot: u16) -> NodeLine {
        self.masters()
            .into_iter()
            .find(|m| m.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .unwrap_or_else(|| panic!("no master owns slot {slot}"))
    }
}

fn cluster_client(urls: Vec<String>) -> ClusterConnection {
    let client = ClusterClient::builder(urls)
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(5))
        .retries(8)
        .min_retry_wait(50)
        .max_retry_wait(500)
        .build()
        .expect("cluster client");
    client.get_connection().expect("cluster connection")
}

/// One key per slot: `keys[slot]` hashes to `slot`.
fn key_per_slot() -> Vec<String> {
    let mut keys = vec![String::new(); usize::from(SLOTS)];
    let mut missing = usize::from(SLOTS);
    let mut i = 0u64;
    while missing > 0 {
        let key = format!("l{i}");
        let slot = usize::from(get_slot(key.as_bytes()));
        if keys[slot].is_empty() {
            keys[slot] = key;
            missing -= 1;
        }
        i += 1;
    }
    keys
}

fn cluster_acquire(
    con: &mut ClusterConnection,
    key: &str,
    ttl: i64,
    token: &str,
) -> redis::RedisResult<Option<(String, u64)>> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(ttl)
        .arg("TOKEN")
        .arg(token)
        .query(con)
}

/// `LOCK.INFO key`: its integer fields (`mode` and `owner` are text).
fn cluster_info(con: &mut ClusterConnection, key: &str) -> Option<HashMap<String, i64>> {
    let fields: Option<HashMap<String, redis::Value>> = redis::cmd("LOCK.INFO")
        .arg(key)
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

/// Move `slot` from its owner to `target` with SETSLOT IMPORTING/MIGRATING,
/// MIGRATE of each key, then SETSLOT NODE on both sides.
fn migrate_slot(cluster: &mut Cluster, slot: u16, target: &NodeLine) {
    let source = cluster.owner(slot);
    assert_ne!(source.id, target.id);
    let mut src = cluster.node(source.port).conn();
    let mut dst = cluster.node(target.port).conn();
    begin_migration(&mut src, &mut dst, slot, &source, target);
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut src)
            .expect("GETKEYSINSLOT");
        if keys.is_empty() {
            break;
        }
        migrate_keys(&mut src, target, &keys);
    }
    end_migration(&mut src, &mut dst, slot, target);
}

fn setslot_ok(r: redis::RedisResult<String>) {
    assert_eq!(r.expect("CLUSTER SETSLOT"), "OK");
}

/// `CLUSTER SETSLOT slot IMPORTING <source>` on the target, then
/// `CLUSTER SETSLOT slot MIGRATING <target>` on the source.
fn begin_migration(
    src: &mut Connection,
    dst: &mut Connection,
    slot: u16,
    source: &NodeLine,
    target: &NodeLine,
) {
    setslot_ok(
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&source.id)
            .query(dst),
    );
    setslot_ok(
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&target.id)
            .query(src),
    );
}

/// `MIGRATE 127.0.0.1 <target> "" 0 5000 KEYS keys…`, sent to the source.
fn migrate_keys(src: &mut Connection, target: &NodeLine, keys: &[String]) {
    let reply: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(keys)
        .query(src)
        .expect("MIGRATE");
    assert_eq!(reply, "OK");
}

/// `CLUSTER SETSLOT slot NODE <target>` on the target, then on the source.
fn end_migration(src: &mut Connection, dst: &mut Connection, slot: u16, target: &NodeLine) {
    for con in [dst, src] {
        setslot_ok(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&target.id)
                .query(con),
        );
    }
}

/// `payload` (a real DUMP of a lock) with another fence, resealed.
fn with_fence(payload: &[u8], fence: u64) -> Vec<u8> {
    let n = payload.len();
    // The fence follows the token: `[0x05 len token][0x02 0x81 fence]`.
    assert!(fence_in_payload(payload) > 0);
    let (token_len, used) = rdb_len_decode(&payload[11..]);
    let at = 11 + used + token_len as usize + 2;
    let mut body = payload[..n - 8].to_vec();
    body[at..at + 8].copy_from_slice(&fence.to_be_bytes());
    let crc = crc64(&body);
    body.extend(crc.to_le_bytes());
    body
}

#[test]
fn cluster_locks_on_every_slot_follow_moved_and_survive_a_reshard() {
    let mut cluster = Cluster::start();
    let mut con = cluster.client();
    let keys = key_per_slot();

    // A lock on each of the 16384 slots, through the cluster client.
    let mut fences = Vec::with_capacity(keys.len());
    for key in &keys {
        let (_, fence) = cluster_acquire(&mut con, key, 120_000, "spread")
            .expect("LOCK.ACQUIRE")
            .expect("a free key is granted");
        fences.push(fence);
    }
    // Each master holds exactly the keys of its own slots.
    let masters = cluster.masters();
    let mut total = 0;
    for master in &masters {
        let owned: i64 = master.slots.iter().map(|(a, b)| i64::from(b - a) + 1).sum();
        let held = dbsize(&mut cluster.node(master.port).conn());
        assert_eq!(held, owned, "master {} holds {held} locks", master.port);
        total += held;
    }
    assert_eq!(total, i64::from(SLOTS));

    // A node that does not own a key answers MOVED with the owner.
    let key = &keys[100];
    let owner = cluster.owner(100);
    let other = masters.iter().find(|m| m.id != owner.id).unwrap();
    let err = error_of(
        &mut cluster.node(other.port).conn(),
        redis::cmd("LOCK.INFO").arg(key),
    );
    assert!(
        err.starts_with("MOVED") && err.ends_with(&format!(":{}", owner.port)),
        "{err}"
    );

    // Reshard a slot with live locks: a normal one, and one whose fence is an
    // hour ahead of every clock (only an observed fence can explain a later
    // fence above it).
    let slot = get_slot(b"{l7}");
    let live_key = "{l7}live";
    let future_key = "{l7}future";
    let (token, live_fence) = cluster_acquire(&mut con, live_key, 60_000, "holder-7")
        .unwrap()
        .unwrap();
    let source = cluster.owner(slot);
    let mut src = cluster.node(source.port).conn();
    let future_fence = now_us() + 3_600_000_000;
    let payload = with_fence(&dump(&mut src, live_key), future_fence);
    let _: String = redis::cmd("RESTORE")
        .arg(future_key)
        .arg(60_000)
        .arg(payload)
        .query(&mut src)
        .expect("RESTORE");
    let before_live = fence_and_deadline(&mut src, live_key);
    let before_future = fence_and_deadline(&mut src, future_key);
    assert_eq!(before_live.0 as u64, live_fence);
    assert_eq!(before_future.0 as u64, future_fence);
    // The target's own high-water mark is still below the future fence.
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| m.id != source.id)
        .unwrap();
    let target_slot = target.slots[0].0;
    let target_key = &keys[usize::from(target_slot)];
    let (_, f) = cluster_acquire(&mut con, &format!("{{{target_key}}}before"), 1_000, "t")
        .unwrap()
        .unwrap();
    assert!(f < future_fence);

    migrate_slot(&mut cluster, slot, &target);

    // The target holds them with the same fence and deadline; the source
    // holds nothing of that slot any more.
    let mut dst = cluster.node(target.port).conn();
    let after_live = fence_and_deadline(&mut dst, live_key);
    let after_future = fence_and_deadline(&mut dst, future_key);
    assert_eq!(after_live.0, before_live.0, "fence kept");
    assert_eq!(after_future.0, before_future.0, "fence kept");
    let drift = (after_live.1 - before_live.1).abs();
    println!(
        "reshard of slot {slot}: deadline moved by {drift} ms, future deadline by {} ms",
        (after_future.1 - before_future.1).abs()
    );
    assert!(drift <= 250, "deadline moved by {drift} ms in MIGRATE");
    let left: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut src)
        .unwrap();
    assert_eq!(left, 0, "the source kept keys of a migrated slot");
    let err = error_of(&mut src, redis::cmd("LOCK.INFO").arg(live_key));
    assert!(err.starts_with("MOVED"), "{err}");
    let ttl_left = pttl(&mut dst, live_key);
    assert!(ttl_left > 0 && ttl_left <= 60_000, "PTTL {ttl_left}");

    // The old client, whose slot map is stale, is redirected and follows.
    let info = cluster_info(&mut con, live_key).expect("migrated lock is held");
    assert_eq!(info["fence"] as u64, live_fence);
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg(live_key)
        .arg(&token)
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(extended, 1, "the token moved with the lock");
    assert_eq!(
        cluster_acquire(&mut con, live_key, 1_000, "intruder").unwrap(),
        None,
        "a migrated lock still refuses another token"
    );
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg(live_key)
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);

    // Later fences on the target, for the migrated key and for any other,
    // are above the migrated (future) fence: RESTORE observed it.
    let (_, again) = cluster_acquire(&mut con, live_key, 1_000, "next")
        .unwrap()
        .unwrap();
    assert!(
        again > future_fence,
        "fence {again} after a migrated {future_fence}"
    );
    let (_, other_key_fence) =
        cluster_acquire(&mut con, &format!("{{{target_key}}}after"), 1_000, "t")
            .unwrap()
            .unwrap();
    assert!(other_key_fence > again);
    // The third master never saw the future fence: its fences follow its
    // own clock (the source saw it, in its own RESTORE above).
    let third = cluster
        .masters()
        .into_iter()
        .find(|m| m.id != source.id && m.id != target.id)
        .unwrap();
    let third_key = &keys[usize::from(third.slots[0].0)];
    let (_, third_fence) = cluster_acquire(&mut con, &format!("{{{third_key}}}x"), 1_000, "t")
        .unwrap()
        .unwrap();
    assert!(third_fence < future_fence);
    // Every lock of the first round is still there, on its owner.
    let still: i64 = cluster
        .masters()
        .iter()
        .map(|m| dbsize(&mut cluster.node(m.port).conn()))
        .sum();
    assert!(still >= i64::from(SLOTS));
    assert!(fences.iter().all(|&f| f < future_fence));
}

/// A classic reshard (`CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE`,
/// `CLUSTER SETSLOT … NODE`) of a slot whose held lock clients wait for, on
/// every server: `MIGRATE`'s delete on the source is no release there.
/// - the client waiting on the source is answered `ASK <slot> <target>`,
///   never granted, and a cluster client waiting there follows the `ASK` and
///   queues on the target;
/// - the target holds the lock with the same token, fence, deadline and grant
///   time; the source keeps no key of the slot and no waiter, and grants
///   nothing, then answers `MOVED`;
/// - the follower is granted on the target only once the holder releases it
///   there, with a higher fence: the lock is never held twice.
#[test]
fn cluster_classic_reshard_redirects_waiters_and_never_grants_twice() {
    let mut cluster = Cluster::start();
    let key = "{mig}held";
    let slot = get_slot(key.as_bytes());
    let source = cluster.owner(slot);
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| m.id != source.id)
        .unwrap();
    let mut src = cluster.node(source.port).conn();
    let mut dst = cluster.node(target.port).conn();
    let lock_gauge = |con: &mut Connection, name: &str| info_field(con, "lock", name);
    let keys_in_slot = |con: &mut Connection| -> i64 {
        redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query(con)
            .expect("CLUSTER COUNTKEYSINSLOT")
    };

    // A held lock on the source, a plain client waiting for it there, then a
    // cluster client (routed to the source, the slot's owner).
    let (_, fence) = acquire(&mut src, key, 60_000, Some("holder")).expect("granted");
    let before = kept_state(&mut src, "LOCK.INFO", key);
    let mut direct_con = cluster.node(source.port).conn();
    let direct = thread::spawn(move || {
        acquire_wait(key, 60_000, "direct", 20_000).query::<Option<(String, u64)>>(&mut direct_con)
    });
    wait_until(Duration::from_secs(5), || {
        lock_gauge(&mut src, "lock_waiters") == "1"
    });
    let urls: Vec<String> = cluster
        .live_ports()
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    let follower = thread::spawn(move || {
        let mut con = cluster_client(urls);
        let reply =
            acquire_wait(key, 60_000, "follower", 4_000).query::<Option<(String, u64)>>(&mut con);
        (reply, Instant::now())
    });
    wait_until(Duration::from_secs(5), || {
        lock_gauge(&mut src, "lock_waiters") == "2"
    });
    let grants_on_source = lock_gauge(&mut src, "lock_grants_after_wait");

    // The slot migrates; MIGRATE moves the lock and deletes it on the source.
    begin_migration(&mut src, &mut dst, slot, &source, &target);
    migrate_keys(&mut src, &target, &[key.to_string()]);

    // The plain waiter is sent to the target, where the lock is now.
    let ask = format!("ASK {slot} 127.0.0.1:{}", target.port);
    let answer = match direct.join().unwrap() {
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")),
        Ok(granted) => format!("{granted:?}"),
    };
    assert_eq!(answer, ask, "the waiter on the source");
    // The cluster client followed it and waits on the target.
    wait_until(Duration::from_secs(5), || {
        lock_gauge(&mut dst, "lock_waiters") == "1"
    });
    assert_eq!(lock_gauge(&mut src, "lock_waiters"), "0");
    // The source granted nothing and holds nothing of the slot, also a while
    // after MIGRATE (a hand-off from a timer is due at once).
    thread::sleep(Duration::from_millis(300));
    assert_eq!(keys_in_slot(&mut src), 0, "the source re-created the lock");
    assert_eq!(
        lock_gauge(&mut src, "lock_grants_after_wait"),
        grants_on_source
    );
    // Redis itself sends the slot's clients there while it migrates.
    assert_eq!(error_of(&mut src, redis::cmd("LOCK.INFO").arg(key)), ask);

    end_migration(&mut src, &mut dst, slot, &target);

    // The target holds the lock as the source did, for the same token; the
    // follower still waits there. (MIGRATE sends the TTL as it is then, in
    // milliseconds: Valkey's target may land 1 ms off the deadline.)
    let deadline = |state: &mut BTreeMap<String, Value>| match state.remove("deadline") {
        Some(Value::Int(ms)) => ms,
        other => panic!("no deadline: {other:?}"),
    };
    let mut after = kept_state(&mut dst, "LOCK.INFO", key);
    let mut before = before;
    let drift = (deadline(&mut after) - deadline(&mut before)).abs();
    assert!(drift <= 250, "deadline moved by {drift} ms in MIGRATE");
    assert_eq!(after, before, "fence, grant time, extensions kept");
    assert_eq!(fence_of(&before), fence);
    assert_eq!(acquire(&mut dst, key, 60_000, Some("intruder")), None);
    assert_eq!(
        acquire(&mut dst, key, 60_000, Some("holder")),
        Some(("holder".to_string(), fence)),
        "the holder's token holds the lock on the target"
    );
    assert!(!follower.is_finished(), "the follower was granted early");
    assert_eq!(lock_gauge(&mut dst, "lock_waiters"), "1");
    assert_eq!(keys_in_slot(&mut src), 0);
    assert_eq!(lock_gauge(&mut src, "lock_waiters"), "0");
    let moved = format!("MOVED {slot} 127.0.0.1:{}", target.port);
    assert_eq!(error_of(&mut src, redis::cmd("LOCK.INFO").arg(key)), moved);

    // The holder releases on the target: the follower is granted there.
    let released_at = Instant::now();
    assert_eq!(release(&mut dst, key, "holder"), 1);
    let (reply, granted_at) = follower.join().unwrap();
    let (token, next) = reply
        .expect("the cluster client follows ASK")
        .expect("granted on the target");
    assert_eq!(token, "follower");
    assert!(granted_at >= released_at, "granted before the release");
    assert!(next > fence, "fence {next} after {fence}");
    assert_eq!(
        info(&mut dst, key).map(|i| i["fence"] as u64),
        Some(next),
        "the follower holds the lock on the target"
    );
    assert_eq!(keys_in_slot(&mut src), 0, "held on the source too");
    assert_eq!(
        lock_gauge(&mut src, "lock_grants_after_wait"),
        grants_on_source
    );
    println!("classic reshard of slot {slot}: waiter answered {ask}; follower granted fence {next} on the target after fence {fence}");
}

/// Why this server cannot run `CLUSTER MIGRATESLOTS` (Valkey 9.0 and newer
/// only), or `None` if it can.
fn no_atomic_slot_migration() -> Option<String> {
    let server = Server::start_with(&[]);
    let (name, (major, minor)) = server_version(&mut server.conn());
    (name != "valkey" || major < 9).then(|| {
        format!("{name} {major}.{minor} has no atomic slot migration (CLUSTER MIGRATESLOTS, Valkey 9.0+)")
    })
}

/// The state of the newest migration that `CLUSTER GETSLOTMIGRATIONS` lists.
fn migration_state(con: &mut Connection) -> String {
    let jobs: Vec<HashMap<String, Value>> = redis::cmd("CLUSTER")
        .arg("GETSLOTMIGRATIONS")
        .query(con)
        .expect("CLUSTER GETSLOTMIGRATIONS");
    match jobs.first().and_then(|job| job.get("state")) {
        Some(Value::BulkString(s)) => String::from_utf8_lossy(s).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        other => panic!("no migration state: {other:?}"),
    }
}

/// `CLUSTER MIGRATESLOTS SLOTSRANGE slot slot NODE target`, sent to the source.
fn migrate_slots(con: &mut Connection, slot: u16, target: &str) {
    let reply: String = redis::cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(target)
        .query(con)
        .expect("CLUSTER MIGRATESLOTS");
    assert_eq!(reply, "OK");
}

/// `DEBUG SLOTMIGRATION PREVENT-PAUSE`: while on, the source's migrations
/// stream and never pause to hand over, so the test can change the slot's
/// locks while they move.
fn prevent_pause(con: &mut Connection, on: bool) {
    let _: () = redis::cmd("DEBUG")
        .arg("SLOTMIGRATION")
        .arg("PREVENT-PAUSE")
        .arg(i32::from(on))
        .query(con)
        .expect("DEBUG SLOTMIGRATION PREVENT-PAUSE");
}

/// What `LOCK.INFO` (or `SEM.INFO`) shows of a key that must be the same
/// wherever it is held: its integer fields but `ttl` (it runs) and `waiters`
/// (queues stay with the node).
fn kept_state(con: &mut Connection, command: &str, key: &str) -> BTreeMap<String, Value> {
    let fields: HashMap<String, Value> = redis::cmd(command)
        .arg(key)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key}: {e}"));
    fields
        .into_iter()
        .filter(|(name, _)| name != "ttl" && name != "waiters")
        .collect()
}

fn fence_of(state: &BTreeMap<String, Value>) -> u64 {
    match state.get("fence") {
        Some(Value::Int(fence)) => *fence as u64,
        other => panic!("no fence: {other:?}"),
    }
}

/// Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) of a slot whose
/// locks are held and waited for:
/// - an aborted migration changes nothing: the waiters still wait on the
///   source, the target keeps nothing;
/// - while the slot streams, a release hands the lock to a waiter on the
///   source, a holder extends, a new lock is taken: all of it reaches the
///   target;
/// - on the target every lock (exclusive with `OWNER`, shared, semaphore)
///   has the same fence, deadline, grant time, extension count and label,
///   its tokens extend and release it there, and later fences are above
///   every migrated one;
/// - the clients still waiting on the source are answered
///   `MOVED <slot> <target>` (a plain connection sees it; the cluster
///   client follows it, queues on the target and is granted there), and so
///   are its observers, on the source and on the source's replica; the
///   source keeps no key and no waiter of the slot.
#[test]
fn cluster_atomic_slot_migration_moves_held_locks_and_redirects_waiters() {
    if let Some(reason) = no_atomic_slot_migration() {
        println!("skipped: {reason}");
        return;
    }
    // (The test servers run with `enable-debug-command`, which
    // `DEBUG SLOTMIGRATION` needs.)
    let mut cluster = Cluster::start();
    let slot = get_slot(b"{asm}");
    let source = cluster.owner(slot);
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| m.id != source.id)
        .unwrap();
    let source_replica = replica_of(&mut cluster, &source);
    let target_replica = replica_of(&mut cluster, &target);
    let mut src = cluster.node(source.port).conn();
    let mut dst = cluster.node(target.port).conn();
    let ttl = 60_000;
    let grant = |con: &mut Connection, args: &[&str]| -> u64 {
        let (_, fence): (String, u64) = redis::cmd(args[0])
            .arg(&args[1..])
            .query(con)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        fence
    };
    let ttl_text = ttl.to_string();
    let ttl_s = ttl_text.as_str();

    // Locks of every kind in one slot, on the source.
    let held_fence = grant(
        &mut src,
        &[
            "LOCK.ACQUIRE",
            "{asm}held",
            ttl_s,
            "TOKEN",
            "holder",
            "OWNER",
            "worker-1",
        ],
    );
    grant(
        &mut src,
        &["LOCK.ACQUIRE", "{asm}handed", ttl_s, "TOKEN", "first"],
    );
    grant(
        &mut src,
        &["LOCK.ACQUIRE", "{asm}queued", ttl_s, "TOKEN", "blocker"],
    );
    for reader in ["r1", "r2"] {
        grant(
            &mut src,
            &[
                "LOCK.ACQUIRE",
                "{asm}shared",
                ttl_s,
                "TOKEN",
                reader,
                "SHARED",
            ],
        );
    }
    grant(
        &mut src,
        &[
            "SEM.ACQUIRE",
            "{asm}sem",
            "3",
            ttl_s,
            "COUNT",
            "2",
            "TOKEN",
            "s1",
        ],
    );
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut src).unwrap();
    assert_eq!(acked, 1, "the source's replica has the locks");

    // Clients that wait on the source: for the lock that will be handed over
    // during the migration, for one still held when the slot leaves (no
    // timeout), and observers of the holder of `{asm}held`, on the source and
    // on its replica.
    let blocked = |server: &Server, readonly: bool, args: Vec<String>| {
        let mut con = server.conn();
        thread::spawn(move || {
            if readonly {
                let _: () = redis::cmd("READONLY").query(&mut con).unwrap();
            }
            redis::cmd(&args[0])
                .arg(&args[1..])
                .query::<Value>(&mut con)
        })
    };
    let words = |text: &str| text.split(' ').map(String::from).collect::<Vec<_>>();
    let second = blocked(
        cluster.node(source.port),
        false,
        words("LOCK.ACQUIRE {asm}handed 60000 TOKEN second WAIT 20000"),
    );
    let direct = blocked(
        cluster.node(source.port),
        false,
        words("LOCK.ACQUIRE {asm}queued 60000 TOKEN direct WAIT 0"),
    );
    let observe = format!("LOCK.OBSERVE {{asm}}held {held_fence} 0");
    let observer = blocked(cluster.node(source.port), false, words(&observe));
    let replica_observer = blocked(cluster.node(source_replica.port), true, words(&observe));
    let lock_gauge = |con: &mut Connection, name: &str| info_field(con, "lock", name);
    wait_until(Duration::from_secs(5), || {
        lock_gauge(&mut src, "lock_waiters") == "2" && lock_gauge(&mut src, "lock_observers") == "1"
    });
    let mut src_replica = cluster.node(source_replica.port).conn();
    wait_until(Duration::from_secs(5), || {
        lock_gauge(&mut src_replica, "lock_observers") == "1"
    });

    // An aborted migration: the target received the slot's locks, then drops
    // them; the source and its waiters go on as before.
    let before_abort = kept_state(&mut src, "LOCK.INFO", "{asm}held");
    prevent_pause(&mut src, true);
    migrate_slots(&mut src, slot, &target.id);
    wait_until(Duration::from_secs(10), || {
        migration_state(&mut src) == "waiting-to-pause"
    });
    let _: () = redis::cmd("CLUSTER")
        .arg("CANCELSLOTMIGRATIONS")
        .query(&mut src)
        .expect("CLUSTER CANCELSLOTMIGRATIONS");
    wait_until(Duration::from_secs(10), || {
        migration_state(&mut src) == "cancelled"
    });
    wait_until(Duration::from_secs(10), || {
        redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query::<i64>(&mut dst)
            .unwrap()
            == 0
    });
    assert_eq!(cluster.owner(slot).id, source.id);
    assert_eq!(kept_state(&mut src, "LOCK.INFO", "{asm}held"), before_abort);
    assert_eq!(lock_gauge(&mut src, "lock_waiters"), "2");
    assert_eq!(lock_gauge(&mut src, "lock_observers"), "1");

    // A waiter through the cluster client, which follows redirects.
    let urls: Vec<String> = cluster
        .live_ports()
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    let follower = thread::spawn(move || {
        let mut con = cluster_client(urls);
        acquire_wait("{asm}queued", 60_000, "follower", 4_000)
            .query::<Option<(String, u64)>>(&mut con)
    });
    wait_until(Duration::from_secs(5), || {
        lock_gauge(&mut src, "lock_waiters") == "3"
    });

    // The migration, held in its streaming phase while the locks change.
    migrate_slots(&mut src, slot, &target.id);
    wait_until(Duration::from_secs(10), || {
        migration_state(&mut src) == "waiting-to-pause"
    });
    assert_eq!(release(&mut src, "{asm}handed", "first"), 1);
    let handed = second.join().unwrap().expect("the waiter is granted");
    let (handed_token, handed_fence): (String, u64) = redis::from_redis_value(&handed).unwrap();
    assert_eq!(handed_token, "second");
    assert_eq!(extend(&mut src, "{asm}held", "holder", ttl), 1);
    let new_fence = grant(
        &mut src,
        &["LOCK.ACQUIRE", "{asm}new", ttl_s, "TOKEN", "newcomer"],
    );
    let locks = [
        "{asm}held",
        "{asm}handed",
        "{asm}queued",
        "{asm}shared",
        "{asm}new",
    ];
    let mut before: BTreeMap<&str, BTreeMap<String, Value>> = locks
        .iter()
        .map(|key| (*key, kept_state(&mut src, "LOCK.INFO", key)))
        .collect();
    before.insert("{asm}sem", kept_state(&mut src, "SEM.INFO", "{asm}sem"));
    assert_eq!(fence_of(&before["{asm}handed"]), handed_fence);
    assert_eq!(fence_of(&before["{asm}new"]), new_fence);
    let started = Instant::now();
    prevent_pause(&mut src, false);
    wait_until(Duration::from_secs(15), || {
        migration_state(&mut src) == "success"
    });
    let took = started.elapsed();
    assert_eq!(cluster.owner(slot).id, target.id);

    // The waiters and observers left on the source are redirected.
    let moved = format!("MOVED {slot} 127.0.0.1:{}", target.port);
    let redirected = |result: redis::RedisResult<Value>| match result {
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")),
        Ok(value) => format!("{value:?}"),
    };
    assert_eq!(redirected(direct.join().unwrap()), moved, "waiter");
    assert_eq!(redirected(observer.join().unwrap()), moved, "observer");
    // The source's replica hears of the move as its master's DEL of the
    // keys; it redirects when it already knows the slot's new owner, else
    // it answers "free" (see docs/operations.md).
    let on_replica = redirected(replica_observer.join().unwrap());
    assert!(
        on_replica == moved || on_replica == "nil",
        "replica observer: {on_replica}"
    );
    wait_until(Duration::from_secs(5), || {
        redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query::<i64>(&mut src)
            .unwrap()
            == 0
    });
    assert_eq!(lock_gauge(&mut src, "lock_waiters"), "0");
    assert_eq!(lock_gauge(&mut src, "lock_observers"), "0");
    let err = error_of(&mut src, redis::cmd("LOCK.INFO").arg("{asm}held"));
    assert_eq!(err, moved);

    // The target holds every lock as the source did, and so does its
    // replica.
    for (key, state) in &before {
        let command = if *key == "{asm}sem" {
            "SEM.INFO"
        } else {
            "LOCK.INFO"
        };
        assert_eq!(&kept_state(&mut dst, command, key), state, "{key}");
    }
    assert_eq!(
        owner(&mut dst, "{asm}held").as_deref(),
        Some(&b"worker-1"[..])
    );
    let mut dst_replica = cluster.node(target_replica.port).conn();
    let _: () = redis::cmd("READONLY").query(&mut dst_replica).unwrap();
    wait_until(Duration::from_secs(5), || {
        info(&mut dst_replica, "{asm}held").map(|i| i["fence"] as u64) == Some(held_fence)
    });
    let max_fence = before.values().map(fence_of).max().unwrap();

    // Tokens work there, and later fences are above every migrated one.
    assert_eq!(extend(&mut dst, "{asm}held", "holder", ttl), 1);
    assert_eq!(extend(&mut dst, "{asm}handed", "second", ttl), 1);
    assert_eq!(extend(&mut dst, "{asm}shared", "r1", ttl), 1);
    assert_eq!(extend(&mut dst, "{asm}held", "intruder", ttl), 0);
    assert_eq!(
        acquire(&mut dst, "{asm}held", 1_000, Some("intruder")),
        None
    );
    let sem_extended: i64 = redis::cmd("SEM.EXTEND")
        .arg("{asm}sem")
        .arg("s1")
        .arg(ttl)
        .query(&mut dst)
        .unwrap();
    assert_eq!(sem_extended, 1);
    assert_eq!(release(&mut dst, "{asm}held", "holder"), 1);
    let (_, next) =
        acquire(&mut dst, "{asm}held", 1_000, Some("next")).expect("free on the target");
    assert!(
        next > max_fence,
        "fence {next} after migrated fences up to {max_fence}"
    );
    // The cluster client's waiter followed MOVED and waits on the target: the
    // release there grants it.
    assert_eq!(release(&mut dst, "{asm}queued", "blocker"), 1);
    let (token, followed) = follower
        .join()
        .unwrap()
        .expect("the cluster client follows MOVED")
        .expect("granted on the target");
    assert_eq!(token, "follower");
    assert!(
        followed > max_fence,
        "fence {followed} after migrated fences up to {max_fence}"
    );
    let mut src_replica = cluster.node(source_replica.port).conn();
    wait_until(Duration::from_secs(5), || {
        redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query::<i64>(&mut src_replica)
            .unwrap()
            == 0
    });
    println!(
        "atomic slot migration of slot {slot} ({} locks, 3 waiters, 2 observers): \
         hand-over in {took:?}; replica observer: {on_replica}",
        before.len()
    );
}

/// LOCK.GUARD in a cluster: the cluster client routes it by the lock key
/// (the first key of its key spec), keys that share the lock key's hash tag
/// are written under the lock, a key in another slot is refused with
/// `CROSSSLOT` by the server before anything runs, and a node that does not
/// own the slot answers MOVED, which the client follows.
#[test]
fn cluster_guard_writes_same_slot_keys_and_refuses_crossslot() {
    let mut cluster = Cluster::start();
    let mut con = cluster.client();
    cluster_acquire(&mut con, "{billing}:lock", 60_000, "me")
        .expect("LOCK.ACQUIRE")
        .expect("granted");
    let guard = |con: &mut ClusterConnection, token: &str, args: &[&str]| {
        redis::cmd("LOCK.GUARD")
            .arg("{billing}:lock")
            .arg(token)
            .arg(args)
            .query::<Value>(con)
    };
    assert_eq!(
        guard(&mut con, "me", &["SET", "{billing}:total", "40"]).unwrap(),
        Value::Okay
    );
    assert_eq!(
        guard(
            &mut con,
            "me",
            &["MSET", "{billing}:a", "1", "{billing}:b", "2"]
        )
        .unwrap(),
        Value::Okay
    );
    let total: String = redis::cmd("GET")
        .arg("{billing}:total")
        .query(&mut con)
        .unwrap();
    assert_eq!(total, "40");
    let lost = guard(&mut con, "other", &["SET", "{billing}:total", "0"]).unwrap_err();
    assert_eq!(lost.code(), Some("LOST"), "{lost}");
    // A key in another slot: refused by the server, nothing written.
    assert_ne!(get_slot(b"elsewhere"), get_slot(b"{billing}:lock"));
    let owner = cluster.owner(get_slot(b"{billing}:lock"));
    let mut direct = cluster.node(owner.port).conn();
    let cross = error_of(
        &mut direct,
        redis::cmd("LOCK.GUARD")
            .arg("{billing}:lock")
            .arg("me")
            .arg("SET")
            .arg("elsewhere")
            .arg("x"),
    );
    assert!(cross.starts_with("CROSSSLOT"), "{cross}");
    let elsewhere: Option<String> = redis::cmd("GET").arg("elsewhere").query(&mut con).unwrap();
    assert_eq!(elsewhere, None);
    // A node that does not own the slot redirects, as for any keyed command.
    let other = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != owner.port)
        .expect("another master");
    let moved = error_of(
        &mut cluster.node(other.port).conn(),
        redis::cmd("LOCK.GUARD")
            .arg("{billing}:lock")
            .arg("me")
            .arg("GET")
            .arg("{billing}:total"),
    );
    assert!(moved.starts_with("MOVED"), "{moved}");
    // LOCK.GUARD_RO routes the same way, by its lock key.
    let read: String = redis::cmd("LOCK.GUARD_RO")
        .arg(&["{billing}:lock", "me", "GET", "{billing}:total"])
        .query(&mut con)
        .unwrap();
    assert_eq!(read, "40");
}

/// `LOCK.MACQUIRE numkeys key [key ...] rest…`.
fn macquire(keys: &[&str], rest: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.MACQUIRE");
    cmd.arg(keys.len()).arg(keys).arg(rest);
    cmd
}

/// Multi-key locks in a cluster: keys of one slot (a hash tag) are granted
/// on the node that owns it, each key with the one fence; the cluster
/// client gets there whatever it routes by (the redis crate routes an
/// unknown command by argument 1, here `numkeys`, and follows the `MOVED`
/// the key spec makes the server answer); keys of several slots are
/// `CROSSSLOT` and a node that does not own the slot answers `MOVED`, for
/// all three commands, nothing changed; a queued request is handed its
/// keys on their node.
#[test]
fn cluster_multi_key_locks_live_on_their_slots_node_and_refuse_crossslot() {
    let mut cluster = Cluster::start();
    let mut con = cluster.client();
    let keys = ["{order:7}:stock", "{order:7}:payment", "{order:7}:invoice"];
    let slot = get_slot(keys[0].as_bytes());
    let (token, fence): (String, u64) = macquire(&keys, &["60000", "TOKEN", "t"])
        .query::<Option<(String, u64)>>(&mut con)
        .expect("LOCK.MACQUIRE")
        .expect("granted");
    assert_eq!(token, "t");
    // Routed by the first key explicitly: the same grant (a renewal).
    let route = Route::new(slot, SlotAddr::Master);
    let routed = con
        .route_command(
            &macquire(&keys, &["60000", "TOKEN", "t"]),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
        )
        .expect("routed");
    let routed: (String, u64) = redis::from_redis_value(&routed).unwrap();
    assert_eq!(routed, (token.clone(), fence));
    let owner = cluster.owner(slot);
    let mut direct = cluster.node(owner.port).conn();
    for key in keys {
        assert_eq!(info(&mut direct, key).expect(key)["fence"], fence as i64);
    }
    // Another slot in the same request: CROSSSLOT, on the owner itself.
    assert_ne!(get_slot(b"elsewhere"), slot);
    let before = dbsize(&mut direct);
    for cmd in [
        macquire(&[keys[0], "elsewhere"], &["60000"]),
        redis::cmd("LOCK.MEXTEND")
            .arg(&["2", keys[0], "elsewhere", "t", "90000"])
            .clone(),
        redis::cmd("LOCK.MRELEASE")
            .arg(&["2", keys[0], "elsewhere", "t"])
            .clone(),
    ] {
        let error = error_of(&mut direct, &cmd);
        assert!(error.starts_with("CROSSSLOT"), "{error}");
    }
    assert_eq!(dbsize(&mut direct), before);
    // A node that does not own the slot redirects, for each command.
    let other = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != owner.port)
        .expect("another master");
    let mut elsewhere = cluster.node(other.port).conn();
    for cmd in [
        macquire(&keys, &["60000", "TOKEN", "t"]),
        redis::cmd("LOCK.MEXTEND")
            .arg(3)
            .arg(&keys)
            .arg(&["t", "90000"])
            .clone(),
        redis::cmd("LOCK.MRELEASE")
            .arg(3)
            .arg(&keys)
            .arg("t")
            .clone(),
    ] {
        let moved = error_of(&mut elsewhere, &cmd);
        assert_eq!(moved, format!("MOVED {slot} 127.0.0.1:{}", owner.port));
    }
    let extended: i64 = redis::cmd("LOCK.MEXTEND")
        .arg(3)
        .arg(&keys)
        .arg(&["t", "90000"])
        .query(&mut con)
        .unwrap();
    assert_eq!(extended, 1);
    // A request queued on the owner is handed every key there.
    let mut waiting = cluster.client();
    let queued_keys = ["{order:7}:stock", "{order:7}:refund"];
    let waiter = thread::spawn(move || {
        macquire(&queued_keys, &["60000", "TOKEN", "w", "WAIT", "20000"])
            .query::<Option<(String, u64)>>(&mut waiting)
            .expect("waiter")
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut direct, keys[0]).is_some_and(|i| i["waiters"] == 1)
    });
    let released: i64 = redis::cmd("LOCK.MRELEASE")
        .arg(3)
        .arg(&keys)
        .arg("t")
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 3);
    let (token, next) = waiter.join().unwrap().expect("handed both keys");
    assert_eq!(token, "w");
    assert!(next > fence);
    for key in queued_keys {
        assert_eq!(info(&mut direct, key).expect(key)["fence"], next as i64);
    }
}

/// A grant as a worker saw it, timed on this process' monotonic clock.
#[derive(Debug, Clone)]
struct Grant {
    key: usize,
    token: String,
    fence: u64,
    sent: Instant,
    received: Instant,
    /// When the holder's successful RELEASE was sent, if it was.
    released: Option<Instant>,
}

#[derive(Default)]
struct LoadReport {
    grants: Vec<Grant>,
    refused: u64,
    errors: u64,
    /// RELEASE answered 0 while the lease had to be live.
    release_lost: u64,
    /// RELEASE answered 0 after the lease could have run out.
    release_late: u64,
}

const LOAD_KEYS: usize = 48;
const LOAD_TTL_MS: u64 = 1_000;

/// Workers acquire and release random keys (spread over all three shards)
/// until `stop`; each grant gets a fresh token.
fn run_load(
    urls: Vec<String>,
    keys: Arc<Vec<String>>,
    stop: Arc<AtomicBool>,
    worker: usize,
) -> LoadReport {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(worker as u64);
    let mut report = LoadReport::default();
    let mut con = cluster_client(urls.clone());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = rng.gen_range(0..keys.len());
        let token = format!("w{worker}-{n}");
        n += 1;
        let sent = Instant::now();
        match cluster_acquire(&mut con, &keys[key], LOAD_TTL_MS as i64, &token) {
            Ok(Some((_, fence))) => {
                let received = Instant::now();
                thread::sleep(Duration::from_millis(rng.gen_range(0..5)));
                let release_sent = Instant::now();
                let released = redis::cmd("LOCK.RELEASE")
                    .arg(&keys[key])
                    .arg(&token)
                    .query::<i64>(&mut con);
                let released = match released {
                    Ok(1) => Some(release_sent),
                    Ok(_) if Instant::now() < sent + Duration::from_millis(LOAD_TTL_MS) => {
                        // Answered while the lease had to be live: lost.
                        report.release_lost += 1;
                        None
                    }
                    Ok(_) => {
                        // Delayed past the lease (a failover pauses clients).
                        report.release_late += 1;
                        None
                    }
                    Err(_) => {
                        report.errors += 1;
                        None
                    }
                };
                report.grants.push(Grant {
                    key,
                    token,
                    fence,
                    sent,
                    received,
                    released,
                });
            }
            Ok(None) => report.refused += 1,
            Err(_) => {
                report.errors += 1;
                thread::sleep(Duration::from_millis(50));
                con = cluster_client(urls.clone());
            }
        }
    }
    report
}

/// Checks on the merged history: a fence never repeats for a key, and a later
/// grant (sent after an earlier one was received) has a higher fence. Returns
/// the number of double grants: a grant received before an earlier holder's
/// lease could have ended (sent + TTL) and before that holder released.
fn check_history(grants: &[Grant]) -> (usize, Vec<String>) {
    let mut by_key: BTreeMap<usize, Vec<&Grant>> = BTreeMap::new();
    for g in grants {
        by_key.entry(g.key).or_default().push(g);
    }
    let mut violations = Vec::new();
    let mut doubles = 0;
    for (key, list) in &mut by_key {
        list.sort_by_key(|g| g.received);
        let mut seen = HashMap::new();
        for g in list.iter() {
            if let Some(other) = seen.insert(g.fence, &g.token) {
                violations.push(format!(
                    "key {key}: fence {} repeated ({other}, {})",
                    g.fence, g.token
                ));
            }
        }
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if b.sent > a.received && b.fence <= a.fence {
                    violations.push(format!(
                        "key {key}: fence {} of {} after fence {} of {}",
                        b.fence, b.token, a.fence, a.token
                    ));
                }
                let lease_end = a.sent + Duration::from_millis(LOAD_TTL_MS);
                let free_from = a.released.map_or(lease_end, |r| r.min(lease_end));
                if b.received < free_from && b.sent > a.sent {
                    doubles += 1;
                }
            }
        }
    }
    (doubles, violations)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Run workers over the cluster while `fault` runs on this thread; return
/// their merged history.
fn under_load(cluster: &mut Cluster, fault: impl FnOnce(&mut Cluster)) -> LoadReport {
    let keys: Vec<String> = key_per_slot()
        .into_iter()
        .step_by(usize::from(SLOTS) / LOAD_KEYS)
        .collect();
    let keys = Arc::new(keys);
    let urls: Vec<String> = cluster
        .live_ports()
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (urls, keys, stop) = (urls.clone(), keys.clone(), stop.clone());
            thread::spawn(move || run_load(urls, keys, stop, w))
        })
        .collect();
    fault(cluster);
    stop.store(true, Ordering::Relaxed);
    let mut merged = LoadReport::default();
    for w in workers {
        let r = w.join().expect("worker panicked");
        merged.grants.extend(r.grants);
        merged.refused += r.refused;
        merged.errors += r.errors;
        merged.release_lost += r.release_lost;
        merged.release_late += r.release_late;
    }
    merged
}

/// A lease the holder was granted, and whether `WAIT 1` saw it reach a
/// replica (`None`: the holder did not ask).
type Held = (String, u64, Option<bool>);

/// Take 2-minute leases on fresh keys `<prefix>:<n>` (over all slots) until
/// `stop`, keeping them. With `wait`, each grant is followed by `WAIT 1 200`
/// on the master that granted it.
fn hold_leases(urls: Vec<String>, stop: Arc<AtomicBool>, prefix: &str, wait: bool) -> Vec<Held> {
    let mut con = cluster_client(urls.clone());
    let mut held = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("{prefix}:{n}");
        n += 1;
        match cluster_acquire(&mut con, &key, 120_000, "holder") {
            Ok(Some((_, fence))) => {
                // The promoted replica of a killed master has no replica of
                // its own, so a WAIT that lands there never counts a grant
                // the old master made.
                let acked = wait.then(|| {
                    let route = Route::new(get_slot(key.as_bytes()), SlotAddr::Master);
                    let reply = con.route_command(
                        redis::cmd("WAIT").arg(1).arg(200),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    );
                    matches!(reply, Ok(Value::Int(r)) if r >= 1)
                });
                held.push((key, fence, acked));
            }
            Ok(None) => panic!("{key} is new, yet refused"),
            Err(_) => {
                thread::sleep(Duration::from_millis(50));
                con = cluster_client(urls.clone());
            }
        }
    }
    held
}

/// The replica of the master that serves `slot`.
fn replica_of(cluster: &mut Cluster, master: &NodeLine) -> NodeLine {
    let port = cluster.live_ports()[0];
    cluster
        .topology(port)
        .into_iter()
        .find(|n| n.master_id.as_deref() == Some(master.id.as_str()) && !n.failed)
        .unwrap_or_else(|| panic!("no replica of {}", master.port))
}

fn pid_of(server: &Server) -> u32 {
    info_field(&mut server.conn(), "server", "process_id")
        .parse()
        .unwrap()
}

/// `kill -<name> <pid>` through the shell's builtin (a minimal Debian has no
/// procps, hence no /usr/bin/kill).
fn signal(pid: u32, name: &str) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -{name} {pid}"))
        .status()
        .expect("run sh -c kill");
    assert!(status.success(), "kill -{name} {pid}");
}

fn role(server: &Server) -> String {
    let mut con = server.conn();
    info_field(&mut con, "replication", "role")
}

#[test]
fn cluster_coordinated_failover_under_load_never_repeats_a_fence_or_grants_twice() {
    let mut cluster = Cluster::start();
    let seconds = env_u64("LOCK_CLUSTER_SECONDS", 2);
    let rounds = env_u64("LOCK_CLUSTER_ROUNDS", 1);
    let report = under_load(&mut cluster, |cluster| {
        for round in 0..rounds {
            thread::sleep(Duration::from_secs(seconds));
            let masters = cluster.masters();
            let master = &masters[round as usize % masters.len()];
            let replica = replica_of(cluster, master);
            let reply: String = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .query(&mut cluster.node(replica.port).conn())
                .expect("CLUSTER FAILOVER");
            assert_eq!(reply, "OK");
            let promoted = cluster.node(replica.port);
            wait_until(Duration::from_secs(15), || role(promoted) == "master");
            cluster.wait_healthy(Duration::from_secs(15));
        }
        thread::sleep(Duration::from_secs(seconds));
    });
    let (doubles, violations) = check_history(&report.grants);
    println!(
        "cluster CLUSTER FAILOVER: {rounds} failovers, {} grants, {} refused, {} errors, \
         {} releases found a live lock gone ({} after its lease), {doubles} double grants, \
         {} fence violations",
        report.grants.len(),
        report.refused,
        report.errors,
        report.release_lost,
        report.release_late,
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(
        report.grants.len() > 100,
        "too little load to prove anything"
    );
    assert_eq!(doubles, 0, "a coordinated failover loses no grant");
    assert_eq!(
        report.release_lost, 0,
        "a coordinated failover loses no lock"
    );
}

#[test]
fn cluster_master_kill_under_load_never_repeats_a_fence() {
    let mut cluster = Cluster::start();
    let seconds = env_u64("LOCK_CLUSTER_SECONDS", 2);
    let rounds = env_u64("LOCK_CLUSTER_ROUNDS", 1).min(2);
    let mut recovery = Vec::new();
    // Besides the workers, a holder takes long leases on fresh keys and keeps
    // them: after the kill, any it was granted that the promoted replica
    // lacks is a grant lost to async replication.
    let stop_holder = Arc::new(AtomicBool::new(false));
    let urls: Vec<String> = cluster
        .live_ports()
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    // A second holder asks `WAIT 1` after each grant: the grants a replica
    // acknowledged must all survive.
    let holders: Vec<_> = [("hold", false), ("whold", true)]
        .into_iter()
        .map(|(prefix, wait)| {
            let (urls, stop) = (urls.clone(), stop_holder.clone());
            thread::spawn(move || hold_leases(urls, stop, prefix, wait))
        })
        .collect();
    let report = under_load(&mut cluster, |cluster| {
        for _ in 0..rounds {
            thread::sleep(Duration::from_secs(seconds));
            // A master that still has a live replica.
            let masters = cluster.masters();
            let master = masters
                .iter()
                .find(|m| {
                    let port = cluster.live_ports()[0];
                    cluster
                        .topology(port)
                        .iter()
                        .any(|n| n.master_id.as_deref() == Some(m.id.as_str()) && !n.failed)
                })
                .expect("a master with a replica")
                .clone();
            let replica = replica_of(cluster, &master);
            // Make the replica miss what the master grants from now on:
            // stopped, it reads nothing, and a 32 MB write fills the kernel's
            // socket buffers to it, so later grants wait in the master's own
            // memory and die with it. (Stopping the replica alone loses
            // nothing: whatever reached the kernel arrives after SIGCONT.)
            let replica_pid = pid_of(cluster.node(replica.port));
            signal(replica_pid, "STOP");
            let tag = &key_per_slot()[usize::from(master.slots[0].0)];
            let _: () = redis::cmd("SET")
                .arg(format!("{{{tag}}}ballast"))
                .arg(vec![b'x'; 32 << 20])
                .query(&mut cluster.node(master.port).conn())
                .expect("SET ballast");
            thread::sleep(Duration::from_millis(300));
            let killed = Instant::now();
            cluster.node_mut(master.port).kill();
            signal(replica_pid, "CONT");
            let promoted = cluster.node(replica.port);
            wait_until(Duration::from_secs(30), || role(promoted) == "master");
            cluster.wait_healthy(Duration::from_secs(30));
            recovery.push(killed.elapsed());
        }
        thread::sleep(Duration::from_secs(seconds));
    });
    stop_holder.store(true, Ordering::Relaxed);
    let held: Vec<Held> = holders
        .into_iter()
        .flat_map(|h| h.join().expect("holder panicked"))
        .collect();
    // Each lease the holders were granted: still there with its fence, or
    // lost. A lost one is granted again to another token (a double grant),
    // and the new fence must be above the lost one.
    let mut con = cluster.client();
    let (mut lost, mut lost_acked, mut lost_unacked) = (0, 0, 0);
    for (key, fence, acked) in &held {
        match cluster_info(&mut con, key) {
            Some(info) => assert_eq!(info["fence"] as u64, *fence, "{key}"),
            None => {
                lost += 1;
                match acked {
                    Some(true) => lost_acked += 1,
                    Some(false) => lost_unacked += 1,
                    None => {}
                }
                let (_, again) = cluster_acquire(&mut con, key, 1_000, "second")
                    .unwrap()
                    .expect("a lost lease is free");
                assert!(again > *fence, "{key}: fence {again} after a lost {fence}");
            }
        }
    }
    let with_wait: Vec<&Held> = held.iter().filter(|h| h.2.is_some()).collect();
    let acked = with_wait.iter().filter(|h| h.2 == Some(true)).count();
    println!(
        "cluster kill -9 of a master: {} long leases granted, {lost} lost with the killed master \
         and granted again (each with a higher fence); with WAIT 1: {} granted, {acked} \
         acknowledged by a replica, of which {lost_acked} lost; {lost_unacked} unacknowledged lost",
        held.len(),
        with_wait.len()
    );
    assert!(held.len() > 100, "too few long leases to prove anything");
    assert_eq!(lost_acked, 0, "a grant WAIT saw on a replica was lost");
    assert!(lost > 0, "the fault lost no grant: it proves nothing");
    let (doubles, violations) = check_history(&report.grants);
    println!(
        "cluster kill -9 of a master: {rounds} kills, healthy again after {recovery:?}, {} grants, \
         {} refused, {} errors, {} releases found a live lock gone ({} after its lease), {doubles} double grants \
         (async replication), {} fence violations",
        report.grants.len(),
        report.refused,
        report.errors,
        report.release_lost,
        report.release_late,
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(
        report.grants.len() > 100,
        "too little load to prove anything"
    );
    // Service is back: every key can be locked after the failover.
    let mut con = cluster.client();
    for (i, key) in key_per_slot().iter().step_by(512).enumerate() {
        let got = cluster_acquire(&mut con, key, 1_000, &format!("after-{i}")).unwrap();
        assert!(got.is_some(), "{key} not granted after the failover");
    }
}

#[test]
fn cluster_a_lease_lives_on_its_node_and_holds_attach_there_only() {
    let mut cluster = Cluster::start();
    let key = "{jobs}:lock";
    let owner = cluster.owner(get_slot(key.as_bytes()));
    let other = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != owner.port)
        .expect("another master");
    // Granted on the node that serves the key: holds attach there.
    let mut on_owner = cluster.node(owner.port).conn();
    let id: String = redis::cmd("LOCK.LEASE")
        .arg("GRANT")
        .arg(60_000)
        .query(&mut on_owner)
        .unwrap();
    let granted: Option<(String, u64)> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(60_000)
        .arg("LEASE")
        .arg(&id)
        .query(&mut on_owner)
        .unwrap();
    assert!(granted.is_some());
    // Another node: the key is redirected as always; a key it serves, with
    // a lease it does not have, is NOLEASE and nothing is granted.
    let mut on_other = cluster.node(other.port).conn();
    let moved = error_of(
        &mut on_other,
        redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(60_000)
            .arg("LEASE")
            .arg(&id),
    );
    assert!(moved.starts_with("MOVED"), "{moved}");
    let local = (0..10_000)
        .map(|i| format!("k{i}"))
        .find(|k| {
            let slot = get_slot(k.as_bytes());
            other.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
        })
        .expect("a key of the other node");
    let refused = error_of(
        &mut on_other,
        redis::cmd("LOCK.ACQUIRE")
            .arg(&local)
            .arg(60_000)
            .arg("LEASE")
            .arg(&id),
    );
    assert!(refused.starts_with("NOLEASE"), "{refused}");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&local)
        .query(&mut on_other)
        .unwrap();
    assert_eq!(exists, 0);
    // The keyless commands run on whichever node gets them.
    let alive: i64 = redis::cmd("LOCK.LEASE")
        .arg("KEEPALIVE")
        .arg(&id)
        .query(&mut on_other)
        .unwrap();
    assert_eq!(alive, 0, "another node's lease is unknown here");
    let revoked: i64 = redis::cmd("LOCK.LEASE")
        .arg("REVOKE")
        .arg(&id)
        .query(&mut on_owner)
        .unwrap();
    assert_eq!(revoked, 1);
}
