//! `lock-observe`: how long after a lock's holder changes (grant, hand-off,
//! release, expiry) each client blocked in `LOCK.OBSERVE` on the key has the
//! new holder, with a fleet of observers following one key; checks that
//! every change wakes every observer exactly once. Prints a summary, or one
//! JSON object with `--json`.
//!
//! ```sh
//! lock-observe --port 6379 --observers 10 --rounds 100
//! lock-observe --port 6379 --observers 1000 --rounds 20 --ttl-ms 300
//! ```

use clap::Parser;
use redis_lock_bench::cli;
use redis_lock_bench::observe::{self, ObserveConfig, Spread};

#[derive(Parser, Debug)]
#[command(about = "LOCK.OBSERVE wake-up latency on grant, hand-off, release and expiry")]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Observers on the key, each on its own connection
    #[arg(long, default_value_t = 10)]
    observers: usize,
    /// Rounds of five changes: grant, hand-off, release, grant, expiry
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// The lease that runs out in the expiry change
    #[arg(long, default_value_t = 100)]
    ttl_ms: u64,
    #[arg(long, default_value = "observe:job")]
    key: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the summary as one JSON object (with every sample)
    #[arg(long)]
    json: bool,
}

fn main() {
    let args = Args::parse();
    let config = ObserveConfig {
        url: format!("redis://{}:{}/", args.host, args.port),
        observers: args.observers,
        rounds: args.rounds,
        ttl_ms: args.ttl_ms,
        key: args.key,
        seed: args.seed,
    };
    let Some(summary) = cli::run("lock-observe", 2, args.json, observe::run(config)) else {
        return;
    };
    let ms = |us: Option<f64>| us.map_or("–".to_string(), |us| format!("{:.3}", us / 1000.0));
    let line = |name: &str, s: &Spread| {
        println!(
            "    {name:<12} n={:<6} p50={:>9} p99={:>9} max={:>9}",
            s.count,
            ms(s.p50_us),
            ms(s.p99_us),
            ms(s.max_us)
        );
    };
    println!(
        "{} observers, {} rounds in {:.1} s, {} replies, lock_observers at end {} (ms):",
        summary.observers,
        summary.rounds,
        summary.elapsed_s,
        summary.replies,
        summary.observers_at_end
    );
    for change in &summary.changes {
        println!("  {} ({} changes)", change.change, change.changes);
        line("wake-up", &change.wakeup);
        line("last", &change.last_wakeup);
        line("command", &change.command);
        line("ping", &change.ping);
        line("server cpu", &change.server_cpu);
    }
    line("idle ping", &summary.idle_ping);
    for stat in &summary.commandstats {
        println!(
            "  {}: {} calls, {:.2} µs per call",
            stat.command, stat.calls, stat.usec_per_call
        );
    }
}
