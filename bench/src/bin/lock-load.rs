//! `lock-load`: full lock cycles (acquire → hold → release) from many async
//! contenders against one server, for a bounded time. Prints a summary, or
//! one JSON object with `--json`.
//!
//! ```sh
//! lock-load --port 6379 --strategy native-poll --contenders 64 --keys 1 --duration-ms 3000
//! ```

use clap::Parser;
use redis_lock_bench::cli;
use redis_lock_bench::load::{self, LoadConfig, Strategy};

#[derive(Parser, Debug)]
#[command(about = "Lock-cycle load generator for redis-lock and the Lua recipe")]
struct Args {
    #[command(flatten)]
    common: cli::Common,
    /// native-poll (LOCK.ACQUIRE, retried), lua-poll (the Lua recipe, retried) or
    /// native-wait (LOCK.ACQUIRE … WAIT: the server queues the contender)
    #[arg(long, default_value = "native-poll", value_parser = parse_strategy)]
    strategy: Strategy,
    /// Concurrent clients competing for the locks
    #[arg(long, default_value_t = 8)]
    contenders: usize,
    /// Connections shared round-robin by the contenders (default: one each)
    #[arg(long)]
    connections: Option<usize>,
    /// Number of lock keys; 1 is a single hot key
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// Give each contender keys of its own (no contention at all)
    #[arg(long)]
    partition: bool,
    #[arg(long, default_value = "lockload:")]
    key_prefix: String,
    #[arg(long, default_value_t = 3000)]
    duration_ms: u64,
    /// How long a holder keeps the lock before releasing it
    #[arg(long, default_value_t = 1)]
    hold_ms: u64,
    #[arg(long, default_value_t = 30000)]
    ttl_ms: u64,
    #[command(flatten)]
    retry: cli::Retry,
    /// Client worker threads
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

fn parse_strategy(name: &str) -> Result<Strategy, String> {
    Strategy::parse(name).ok_or_else(|| {
        let known: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
        format!("unknown strategy {name:?}; known: {}", known.join(", "))
    })
}

fn main() {
    let args = Args::parse();
    let config = LoadConfig {
        url: args.common.url(),
        strategy: args.strategy,
        contenders: args.contenders,
        connections: args.connections.unwrap_or(args.contenders),
        keys: args.keys,
        partitioned: args.partition,
        key_prefix: args.key_prefix,
        duration_ms: args.duration_ms,
        hold_ms: args.hold_ms,
        ttl_ms: args.ttl_ms,
        retry: args.retry.policy(),
        seed: args.common.seed,
    };
    if let Some(summary) = cli::run(
        "lock-load",
        args.threads,
        args.common.json,
        load::run(config),
    ) {
        let a = &summary.acquire;
        println!(
            "{} contenders={} keys={} cycles/s={:.0} acquire p50={}us p99={}us p999={}us \
             handoff p50={}us jain={:.3} min/contender={} waiting_at_end={}",
            summary.strategy,
            summary.contenders,
            summary.keys,
            summary.cycles_per_s,
            a.p50_us,
            a.p99_us,
            a.p999_us,
            summary.handoff.p50_us,
            summary.jain_index.unwrap_or(0.0),
            summary.min_cycles_per_contender,
            summary.waiting_at_end
        );
    }
}
