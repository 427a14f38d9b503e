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
    #[command(flatten)]
    common: cli::Common,
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
}

fn main() {
    let args = Args::parse();
    let config = ObserveConfig {
        url: args.common.url(),
        observers: args.observers,
        rounds: args.rounds,
        ttl_ms: args.ttl_ms,
        key: args.key,
        seed: args.common.seed,
    };
    let Some(summary) = cli::run("lock-observe", 2, args.common.json, observe::run(config)) else {
        return;
    };
    let line = |name: &str, s: &Spread| {
        println!(
            "    {name:<12} n={:<6} p50={:>9} p99={:>9} max={:>9}",
            s.count,
            cli::ms(s.p50_us),
            cli::ms(s.p99_us),
            cli::ms(s.max_us)
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
