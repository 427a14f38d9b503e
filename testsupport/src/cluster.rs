//! A Redis Cluster of servers with the module: `masters` masters with
//! `replicas` replicas each, created with `redis-cli --cluster create`, and
//! ready once every node reports all 16,384 slots served. The module's own
//! cluster tests (`tests/cluster.rs`) and the client crate's build on it.

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::server::{Server, FREE_PORT};

/// Start the nodes (each with `--cluster-enabled yes`, its own bus port, and
/// `extra` arguments), create the cluster, and wait until every node says
/// it is whole; panics with `redis-cli`'s output if it cannot.
pub fn start_cluster(masters: usize, replicas: usize, extra: &[&str]) -> Vec<Server> {
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        // The bus port defaults to port + 10000, which may be taken or out
        // of range for an ephemeral port: pick one.
        "--cluster-port",
        FREE_PORT,
    ];
    args.extend_from_slice(extra);
    let nodes: Vec<Server> = (0..masters * (1 + replicas))
        .map(|_| Server::start_with(&args))
        .collect();
    let mut create = Command::new("redis-cli");
    create.arg("--cluster").arg("create");
    for node in &nodes {
        create.arg(format!("127.0.0.1:{}", node.port));
    }
    let out = create
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli --cluster create");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && text.contains("[OK] All 16384 slots covered"),
        "redis-cli --cluster create failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for node in &nodes {
        let mut con = node.conn();
        let started = Instant::now();
        loop {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .unwrap_or_default();
            if info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "node {} never saw the whole cluster:\n{info}",
                node.port
            );
            sleep(Duration::from_millis(20));
        }
    }
    nodes
}
