//! Scenario 7: Sentinel failover under a partition, in network namespaces.
//!
//! Namespaces on one bridge (10.213.77.0/24): `lkc7-m`, `lkc7-r` and `lkc7-q`
//! hold a master and two replicas (which one is master changes every round:
//! with `min-replicas-to-write 1`, a promoted replica needs the other replica
//! to accept writes before the old master rejoins), `lkc7-s`
//! three Sentinels, `lkc7-c` the isolated client; the harness and the
//! majority clients are in the root namespace (10.213.77.1). The fault drops,
//! inside the master's namespace and the isolated client's, every packet that
//! is not between the two of them: the old master keeps serving that one
//! client while the Sentinels promote the replica. Then the partition heals
//! and Sentinel turns the old master into a replica of the new one, which
//! throws away everything it granted while isolated.
//!
//! Three modes, side by side in one run: async (grants used as soon as the
//! master replies); `wait`, the client's own `WAIT 1` after each grant and
//! guarded write, with `min-replicas-to-write 1` (a grant is used only once a
//! replica has acknowledged it); and `sync`, `SYNC 1` on every grant,
//! extension and guarded write, with `min-replicas-to-write 1` (the server
//! answers only once a replica holds it, and undoes a grant it does not).

use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

use crate::check::Verdict;
use crate::history::{mono_ns, Event, Outcome, Recorder, MS};
use crate::scenarios::{
    collect_guarded, finish_run, guard_note, join_workers, map_field, spawn_worker, worker_base,
    Ctx, Pool, Report,
};
use crate::server::{self, Server};
use crate::worker::ask_sentinels;

const BRIDGE: &str = "lkc7br";
const NET: &str = "10.213.77";
const NODES: [(&str, u8); 5] = [
    ("lkc7-m", 2),
    ("lkc7-r", 3),
    ("lkc7-q", 6),
    ("lkc7-s", 4),
    ("lkc7-c", 5),
];
/// The namespaces of the three redis-servers.
pub(crate) const SERVER_NS: [&str; 3] = ["lkc7-m", "lkc7-r", "lkc7-q"];
pub(crate) const CLIENT_NS: &str = "lkc7-c";
const SENTINEL_NS: &str = "lkc7-s";
const SENTINEL_PORTS: [u16; 3] = [26379, 26380, 26381];

pub(crate) fn ip_of(ns: &str) -> String {
    let n = NODES
        .iter()
        .find(|(name, _)| *name == ns)
        .map_or(0, |n| n.1);
    format!("{NET}.{n}")
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// The namespaces, the bridge and the FORWARD rule; removed on drop.
pub(crate) struct Net;

impl Net {
    fn up() -> Result<Net, String> {
        Net::teardown();
        run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
        let net = Net;
        run(
            "ip",
            &["addr", "add", &format!("{NET}.1/24"), "dev", BRIDGE],
        )?;
        run("ip", &["link", "set", BRIDGE, "up"])?;
        // Docker's FORWARD policy is DROP and bridged frames go through it.
        run(
            "iptables",
            &["-I", "FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"],
        )?;
        for (ns, n) in NODES {
            let veth = format!("{ns}-v");
            run("ip", &["netns", "add", ns])?;
            run(
                "ip",
                &[
                    "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
                ],
            )?;
            run("ip", &["link", "set", &veth, "master", BRIDGE, "up"])?;
            run(
                "ip",
                &[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{NET}.{n}/24"),
                    "dev",
                    "eth0",
                ],
            )?;
            run("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn teardown() {
        for (ns, _) in NODES {
            let _ = run("ip", &["link", "del", &format!("{ns}-v")]);
            let _ = run("ip", &["netns", "del", ns]);
        }
        let _ = run("ip", &["link", "del", BRIDGE]);
        while run(
            "iptables",
            &["-D", "FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"],
        )
        .is_ok()
        {}
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        Net::teardown();
    }
}

/// Cut `ns` off from everything but `peer` (both directions).
pub(crate) fn isolate(ns: &str, peer: &str) -> Result<(), String> {
    let peer_ip = ip_of(peer);
    let subnet = format!("{NET}.0/24");
    for (chain, dir) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
        run(
            "ip",
            &[
                "netns", "exec", ns, "iptables", "-A", chain, dir, &subnet, "-j", "DROP",
            ],
        )?;
        run(
            "ip",
            &[
                "netns", "exec", ns, "iptables", "-I", chain, dir, &peer_ip, "-j", "ACCEPT",
            ],
        )?;
    }
    Ok(())
}

pub(crate) fn heal(ns: &str) -> Result<(), String> {
    for chain in ["INPUT", "OUTPUT"] {
        run("ip", &["netns", "exec", ns, "iptables", "-F", chain])?;
    }
    Ok(())
}

/// redis-cli run inside a namespace (to reach the isolated master).
pub(crate) fn cli_in(ns: &str, addr: &str, args: &[&str]) -> Result<String, String> {
    let (host, port) = addr.split_once(':').ok_or("addr")?;
    let mut all = vec!["netns", "exec", ns, "redis-cli", "-h", host, "-p", port];
    all.extend_from_slice(args);
    Ok(run("ip", &all)?.trim().to_string())
}

pub(crate) struct Sentinels {
    children: Vec<Child>,
}

impl Sentinels {
    fn start(ctx: &Ctx, prefix: &str, master: &str) -> Result<Sentinels, String> {
        let (host, port) = master.split_once(':').ok_or("addr")?;
        let mut children = Vec::new();
        for p in SENTINEL_PORTS {
            let dir = ctx.cfg.work.join(format!("{prefix}-sentinel-{p}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let conf = dir.join("sentinel.conf");
            let text = format!(
                "port {p}\nbind {}\nprotected-mode no\ndaemonize no\ndir {}\nlogfile sentinel.log\n\
                 sentinel monitor mymaster {host} {port} 2\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 5000\n\
                 sentinel parallel-syncs mymaster 1\n",
                ip_of(SENTINEL_NS),
                dir.display()
            );
            std::fs::write(&conf, text).map_err(|e| e.to_string())?;
            let child = Command::new("ip")
                .args(["netns", "exec", SENTINEL_NS, &ctx.cfg.binary])
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("spawn sentinel: {e}"))?;
            children.push(child);
        }
        Ok(Sentinels { children })
    }

    pub(crate) fn addrs() -> Vec<String> {
        SENTINEL_PORTS
            .iter()
            .map(|p| format!("{}:{p}", ip_of(SENTINEL_NS)))
            .collect()
    }

    /// Every Sentinel names `master`, and knows two replicas and two other
    /// Sentinels.
    pub(crate) fn agree_on(master: &str) -> bool {
        Sentinels::addrs().iter().all(|s| {
            let Ok(mut con) = server::connect(s, Duration::from_millis(300)) else {
                return false;
            };
            let info: Result<Vec<String>, _> = redis::cmd("SENTINEL")
                .arg("MASTER")
                .arg("mymaster")
                .query(&mut con);
            let Ok(info) = info else { return false };
            let field = |name: &str| {
                info.chunks(2)
                    .find(|c| c[0] == name)
                    .and_then(|c| c.get(1).cloned())
                    .unwrap_or_default()
            };
            format!("{}:{}", field("ip"), field("port")) == master
                && field("num-slaves") == "2"
                && field("num-other-sentinels") == "2"
                && !field("flags").contains("down")
        })
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for c in self.children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn wait_for(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<f64, String> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > timeout {
            return Err(format!("{what}: not within {timeout:?}"));
        }
        sleep(Duration::from_millis(50));
    }
    Ok(start.elapsed().as_secs_f64())
}

pub(crate) fn role_and_link(addr: &str) -> (String, bool) {
    let Ok(mut con) = server::connect(addr, Duration::from_millis(300)) else {
        return (String::new(), false);
    };
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut con)
        .unwrap_or_default();
    let role = info
        .lines()
        .find_map(|l| l.strip_prefix("role:"))
        .unwrap_or("")
        .trim()
        .to_string();
    (role, info.contains("master_link_status:up"))
}

/// Root, with `ip netns`: what scenarios 7 and 8 need.
pub(crate) fn netns_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let is_root = unsafe { libc::geteuid() } == 0;
    is_root && run("ip", &["netns", "list"]).is_ok()
}

/// The namespace a server of [`sentinel_group`] runs in.
pub(crate) fn ns_of(addr: &str) -> &'static str {
    SERVER_NS
        .iter()
        .find(|ns| ip_of(ns) == addr.split(':').next().unwrap_or(""))
        .copied()
        .unwrap_or("lkc7-m")
}

/// The namespaces, a master (the first server) and two replicas, and three
/// Sentinels that agree on it; `wait`: `min-replicas-to-write 1`. Server
/// and Sentinel directories are named after `prefix` (for the crash scan).
/// Bound in this order, they are dropped Sentinels first, network last.
pub(crate) fn sentinel_group(
    ctx: &Ctx,
    prefix: &str,
    wait: bool,
) -> Result<(Net, Vec<Server>, Sentinels), String> {
    let net = Net::up()?;
    let mut extra_args = vec!["--protected-mode", "no"];
    if wait {
        extra_args.extend([
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "10",
        ]);
    }
    let servers: Vec<Server> = SERVER_NS
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            ctx.cfg
                .start_at(&format!("{prefix}-{i}"), &ip_of(ns), 6379, ns, &extra_args)
        })
        .collect::<Result<_, _>>()?;
    server::replicate(&servers[1], &servers[0])?;
    server::replicate(&servers[2], &servers[0])?;
    let sentinels = Sentinels::start(ctx, prefix, &servers[0].addr())?;
    let master = servers[0].addr();
    wait_for(
        "Sentinels agreeing on the master",
        Duration::from_secs(30),
        || Sentinels::agree_on(&master),
    )?;
    Ok((net, servers, sentinels))
}

/// Wait until the Sentinels name one of `others` and it is a master.
pub(crate) fn wait_promotion(others: &[String]) -> Result<(String, f64), String> {
    let mut replica = String::new();
    let secs = wait_for(
        "Sentinel promoting a replica",
        Duration::from_secs(40),
        || match ask_sentinels(&Sentinels::addrs()) {
            Some(addr) if others.contains(&addr) && role_and_link(&addr).0 == "master" => {
                replica = addr;
                true
            }
            _ => false,
        },
    )?;
    Ok((replica, secs))
}

/// Wait until the old master `addr` is a replica with its link up.
pub(crate) fn wait_demotion(addr: &str) -> Result<f64, String> {
    wait_for(
        "the old master rejoining as a replica",
        Duration::from_secs(40),
        || role_and_link(addr) == ("slave".to_string(), true),
    )
}

pub fn failover(ctx: &Ctx) -> Result<Report, String> {
    let mut report = Report::new(ctx, 7, "Failover (Sentinel, partition)");
    if !netns_available() {
        report
            .notes
            .push("skipped: needs root and `ip netns` (network namespaces)".into());
        return Ok(report);
    }
    let rounds = if ctx.quick { 1 } else { 3 };
    // Double grants are expected in async mode (reported, not failures);
    // with WAIT they are also copied into `scenario`, which always counts.
    report.tolerate_double_grants = true;
    let ttl = 2000;
    for (m, mode) in ["async", "wait", "sync"].iter().enumerate() {
        let seed = ctx.seed + 600 + m as u64;
        let mut rng = StdRng::seed_from_u64(seed);
        let (_net, servers, _sentinels) = sentinel_group(ctx, "s7", *mode != "async")?;
        let mut master = servers[0].addr();
        let rec = Recorder::start(&ctx.out.join("s7.sock"))?;
        for round in 0..rounds {
            wait_for(
                "Sentinels agreeing on the master",
                Duration::from_secs(30),
                || Sentinels::agree_on(&master),
            )?;
            let others: Vec<String> = servers
                .iter()
                .map(|s| s.addr())
                .filter(|s| *s != master)
                .collect();
            let mut base = worker_base(&rec, &master, "chaos:lock", ttl);
            base.sentinels = Sentinels::addrs();
            base.hold_ms = (5, 30);
            base.extend = 0.2;
            base.op_timeout_ms = 500;
            base.duration_ms = 120_000;
            base.replicas = if *mode == "wait" { 1 } else { 0 };
            base.sync = if *mode == "sync" { 1 } else { 0 };
            base.guard = true;
            let mut workers = Pool(Vec::new());
            for i in 0..5u32 {
                let mut w = base.clone();
                w.id = i;
                w.seed = seed * 1000 + round * 10 + i as u64;
                w.wait_ms = if i % 2 == 0 { 1000 } else { 0 };
                // Worker 0 is the client partitioned with the master.
                let ns = if i == 0 { Some(CLIENT_NS) } else { None };
                workers.push(spawn_worker(ctx, &w, ns)?);
            }
            sleep(Duration::from_millis(rng.gen_range(1500..2500)));
            let old_ns = ns_of(&master);
            let t_part = mono_ns();
            isolate(old_ns, CLIENT_NS)?;
            isolate(CLIENT_NS, old_ns)?;
            // A plain write only the isolated side sees.
            let marker = format!("chaos:iso-marker:{mode}:{round}");
            let marked = cli_in(CLIENT_NS, &master, &["SET", &marker, "1"])?;
            let (replica, promoted) = wait_promotion(&others)?;
            sleep(Duration::from_millis(rng.gen_range(1500..2500)));
            // The promoted replica lacks what the isolated master did.
            let mut extra = Verdict::default();
            let mut newcon = server::connect(&replica, Duration::from_secs(2))?;
            let has_marker: i64 = redis::cmd("EXISTS")
                .arg(&marker)
                .query(&mut newcon)
                .map_err(|e| e.to_string())?;
            let old_has_marker = cli_in(CLIENT_NS, &master, &["EXISTS", &marker])?;
            let new_info: Value = redis::cmd("LOCK.INFO")
                .arg("chaos:lock")
                .query(&mut newcon)
                .map_err(|e| e.to_string())?;
            let new_fence = map_field(&new_info, "fence").unwrap_or(0) as u64;
            let old_fence: u64 = cli_in(CLIENT_NS, &master, &["LOCK.INFO", "chaos:lock"])?
                .lines()
                .skip_while(|l| l.trim() != "fence")
                .nth(1)
                .and_then(|f| f.trim().parse().ok())
                .unwrap_or(0);
            let t_heal = mono_ns();
            heal(old_ns)?;
            heal(CLIENT_NS)?;
            // The isolated master's grants to the isolated client: used,
            // unconfirmed by its WAIT, or undone by the server (SYNC).
            let isolated_grants = rec
                .snapshot()
                .iter()
                .filter(|e| {
                    matches!(e, Event::Acquire { worker: 0, t_comp, outcome: Outcome::Granted | Outcome::Unconfirmed | Outcome::Undone, server, .. }
                        if *t_comp > t_part && *server == master)
                })
                .count();
            if marked != "OK" || has_marker != 0 || old_has_marker != "1" {
                extra.scenario.push(format!(
                    "round {round}: the partition did not lose writes (marker SET {marked:?}, on the new master {has_marker}, on the old {old_has_marker:?})"
                ));
            }
            if isolated_grants == 0 {
                extra.scenario.push(format!(
                    "round {round}: no grants on the isolated master: the round proves nothing"
                ));
            }
            let demoted = wait_demotion(&master)?;
            sleep(Duration::from_millis(ttl + 1500));
            for w in workers.iter_mut() {
                let _ = w.kill();
            }
            join_workers(&mut workers, Duration::from_secs(5));
            sleep(Duration::from_millis(ttl + 200));
            let rest: Vec<String> = servers
                .iter()
                .map(|s| s.addr())
                .filter(|s| *s != replica)
                .collect();
            extra.c4 = server::digests_agree(&replica, &rest, Duration::from_secs(10));
            // What survived on the final master (the isolated master's
            // appends were thrown away when it resynced).
            collect_guarded(&rec, &replica, "chaos:lock", &mut extra);
            rec.fault(
                "partition-failover",
                format!("{mode} round {round}"),
                t_part,
                t_heal,
                t_heal,
            );
            // Every grant the isolated client got from the old master after
            // the partition began: lost, since Sentinel resynced that server
            // from the new master (during the partition, and until Sentinel
            // demoted it after the heal).
            let lost_total = rec
                .snapshot()
                .iter()
                .filter(|e| {
                    matches!(e, Event::Acquire { worker: 0, t_comp, outcome: Outcome::Granted | Outcome::Unconfirmed, server, .. }
                        if *t_comp > t_part && *server == master)
                })
                .count();
            let v = finish_run(
                ctx,
                &mut report,
                &format!("{mode}-round{round}"),
                seed,
                &rec,
                (ttl + 1000) * MS,
                extra,
            );
            report.notes.push(format!(
                "{mode} round {round}: promoted {promoted:.1} s after the partition, old master a replica {demoted:.1} s after the heal; \
                 {isolated_grants} grants on the isolated master during the partition, {lost_total} until it was demoted, all lost \
                 (last fence there {old_fence}, on the new master {new_fence}); \
                 {} grants used, {} unconfirmed, {} undone by the server (NOSYNC); {} leases overlapped by {} double grants; {} overlapping sections and {} stale writes rejected at the resource; {} fence violations",
                v.stats.grants,
                v.stats.unconfirmed,
                v.stats.undone,
                v.stats.lost_leases,
                v.c3_double.len(),
                v.c1.len(),
                v.stats.writes_rejected,
                v.c2.len()
            ));
            report
                .notes
                .push(format!("{mode} round {round}: {}", guard_note(&v)));
            if *mode != "async" && (!v.c3_double.is_empty() || !v.c1.is_empty()) {
                // Not tolerated with WAIT or SYNC: count them as scenario
                // failures.
                report.verdict.scenario.push(format!(
                    "{mode} round {round}: {} double grants, {} overlapping sections",
                    v.c3_double.len(),
                    v.c1.len()
                ));
            }
            master = replica;
        }
        drop(rec);
    }
    Ok(report)
}
