//! `lock-sync`: grants confirmed on replicas, from clients each on a
//! connection of its own (pipeline 1), for a bounded time: `LOCK.ACQUIRE …
//! SYNC n t`, or `LOCK.ACQUIRE` then `WAIT n t`, or `LOCK.ACQUIRE` alone.
//! Every request takes a fresh key. Prints a summary, or one JSON object
//! with `--json` (with every sample).
//!
//! ```sh
//! lock-sync --port 6379 --mode sync --clients 50 --duration-ms 3000
//! lock-sync --port 6379 --mode acquire-wait --clients 1 --duration-ms 3000
//! ```

use clap::Parser;
use redis_lock_bench::cli;
use redis_lock_bench::sync_load::{self, Mode, SyncConfig};

#[derive(Parser, Debug)]
#[command(about = "LOCK.ACQUIRE … SYNC against LOCK.ACQUIRE then WAIT: latency and throughput")]
struct Args {
    #[command(flatten)]
    common: cli::Common,
    /// sync (LOCK.ACQUIRE … SYNC n t), acquire-wait (LOCK.ACQUIRE, then
    /// WAIT n t) or acquire (LOCK.ACQUIRE alone)
    #[arg(long, default_value = "sync", value_parser = parse_mode)]
    mode: Mode,
    /// Clients, each on a connection of its own, one request at a time
    #[arg(long, default_value_t = 1)]
    clients: usize,
    #[arg(long, default_value_t = 3000)]
    duration_ms: u64,
    /// numreplicas of SYNC and WAIT
    #[arg(long, default_value_t = 1)]
    replicas: u64,
    /// timeout-ms of SYNC and WAIT
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// The grants' lease (longer than the run: none runs out in it)
    #[arg(long, default_value_t = 600_000)]
    ttl_ms: u64,
    #[arg(long, default_value = "sync:")]
    key_prefix: String,
}

fn parse_mode(name: &str) -> Result<Mode, String> {
    Mode::parse(name).ok_or_else(|| {
        let known: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
        format!("unknown mode {name:?}; known: {}", known.join(", "))
    })
}

fn main() {
    let args = Args::parse();
    let config = SyncConfig {
        url: args.common.url(),
        mode: args.mode,
        clients: args.clients,
        duration_ms: args.duration_ms,
        replicas: args.replicas,
        timeout_ms: args.timeout_ms,
        ttl_ms: args.ttl_ms,
        key_prefix: args.key_prefix,
    };
    let Some(summary) = cli::run("lock-sync", 2, args.common.json, sync_load::run(config)) else {
        return;
    };
    let l = &summary.latency;
    println!(
        "{} clients={} replicas={} requests/s={:.0} p50={}ms p90={}ms p99={}ms max={}ms short={}",
        summary.mode.name(),
        summary.clients,
        summary.replicas,
        summary.rps,
        cli::ms(l.p50_us),
        cli::ms(l.p90_us),
        cli::ms(l.p99_us),
        cli::ms(l.max_us),
        summary.short
    );
}
