//! `lock-handoff`: how long a lock sits idle between its holder letting go
//! (release, or expiry of its lease) and an already waiting client having
//! it, for `LOCK.ACQUIRE … WAIT`, `SET NX PX` polling, the BLPOP-signal
//! recipe of python-redis-lock and a `WAIT` writer behind two readers
//! (`readers-wait`), and a waiter for four keys at once (`multi-wait`,
//! `LOCK.MACQUIRE 4 … WAIT`) granted by the release of the last one,
//! interleaved round by round; and, with `mass-expiry`,
//! `WAIT` hand-offs when many keys expire within the same second. Prints a
//! summary, or one JSON object with `--json`.
//!
//! ```sh
//! lock-handoff --port 6379 --scenario release --rounds 100
//! lock-handoff --port 6379 --scenario expiry --ttl-ms 100 --rounds 100
//! lock-handoff --port 6379 --scenario mass-expiry --recipes native-wait --keys 10000 --spread-ms 1000 --rounds 3
//! ```

use clap::Parser;
use redis_lock_bench::cli;
use redis_lock_bench::handoff::{self, HandoffConfig, Recipe, Scenario};
use redis_lock_bench::mass_expiry;

#[derive(Parser, Debug)]
#[command(about = "Handoff latency on release and on expiry: WAIT vs polling vs BLPOP signal")]
struct Args {
    #[command(flatten)]
    common: cli::Common,
    /// release (the holder releases), expiry (the holder's lease runs out)
    /// or mass-expiry (--keys leases run out within --spread-ms, a waiter
    /// on each; native-wait only)
    #[arg(long, default_value = "release", value_parser = parse_scenario)]
    scenario: Scenario,
    /// Comma-separated: native-wait, setnx-poll, blpop-signal, readers-wait,
    /// multi-wait
    #[arg(long, value_delimiter = ',', value_parser = parse_recipe,
          default_value = "native-wait,setnx-poll,blpop-signal,readers-wait,multi-wait")]
    recipes: Vec<Recipe>,
    /// Handoffs per recipe (each round runs every recipe once)
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    /// Release: the holder keeps the lock a random 0..=this many ms after
    /// the waiter is seen waiting
    #[arg(long, default_value_t = 250)]
    hold_max_ms: u64,
    /// Lease of every grant; with expiry, the holder's lease that runs out
    /// (and the BLPOP timeout, as python-redis-lock uses the lock's expire)
    #[arg(long, default_value_t = 30000)]
    ttl_ms: u64,
    #[command(flatten)]
    retry: cli::Retry,
    /// Lifetime of the BLPOP recipe's signal list (python-redis-lock: 1000)
    #[arg(long, default_value_t = 1000)]
    signal_expire_ms: u64,
    #[arg(long, default_value = "handoff:")]
    key_prefix: String,
    /// Mass expiry: keys whose leases run out, each with a waiter (and a
    /// connection of its own)
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// Mass expiry: the deadlines are spread evenly over this many ms
    #[arg(long, default_value_t = 1000)]
    spread_ms: u64,
    /// Mass expiry: the first lease runs out this many ms after the holders
    /// take the keys (every waiter must be queued by then)
    #[arg(long, default_value_t = 3000)]
    lead_ms: u64,
}

fn parse_scenario(name: &str) -> Result<Scenario, String> {
    Scenario::parse(name)
        .ok_or_else(|| format!("unknown scenario {name:?}: release, expiry or mass-expiry"))
}

fn parse_recipe(name: &str) -> Result<Recipe, String> {
    Recipe::parse(name).ok_or_else(|| {
        let known: Vec<&str> = Recipe::ALL.iter().map(|r| r.name()).collect();
        format!("unknown recipe {name:?}; known: {}", known.join(", "))
    })
}

fn main() {
    let args = Args::parse();
    let config = HandoffConfig {
        url: args.common.url(),
        scenario: args.scenario,
        recipes: args.recipes,
        rounds: args.rounds,
        hold_max_ms: args.hold_max_ms,
        ttl_ms: args.ttl_ms,
        retry: args.retry.policy(),
        signal_expire_ms: args.signal_expire_ms,
        key_prefix: args.key_prefix,
        seed: args.common.seed,
        keys: args.keys,
        spread_ms: args.spread_ms,
        lead_ms: args.lead_ms,
    };
    let work = async move {
        match config.scenario {
            Scenario::MassExpiry => mass_expiry::run(&config).await,
            _ => handoff::run(config).await,
        }
    };
    let Some(summary) = cli::run("lock-handoff", 2, args.common.json, work) else {
        return;
    };
    println!(
        "{} handoffs, {} rounds in {:.1} s (ms):",
        summary.scenario.name(),
        summary.rounds,
        summary.elapsed_s
    );
    for r in &summary.recipes {
        println!(
            "  {:<13} n={:<4} p50={:>9} p90={:>9} p99={:>9} max={:>9} discarded={}",
            r.recipe,
            r.samples_us.len(),
            cli::ms(r.spread.p50_us),
            cli::ms(r.spread.p90_us),
            cli::ms(r.spread.p99_us),
            cli::ms(r.spread.max_us),
            r.discarded
        );
    }
    if summary.retried > 0 {
        println!(
            "  {} rounds run again: the machine was too slow for their lead",
            summary.retried
        );
    }
    // (A recipe with no sample at all repeats its rounds' reasons.)
    let mut not_measured: Vec<&String> = summary.not_measured.iter().collect();
    for why in summary
        .recipes
        .iter()
        .filter_map(|r| r.not_measured.as_ref())
    {
        if !summary
            .not_measured
            .iter()
            .any(|w| why.contains(w.as_str()))
        {
            not_measured.push(why);
        }
    }
    for why in not_measured {
        println!("  not measured: {why}");
    }
    if let (Some(share), Some(max)) = (summary.server_first_ms_share, summary.server_max_ms) {
        println!(
            "  {} keys, deadlines over {} ms; on the server's clock {:.1}% granted in the first ms after the deadline, the last {max} ms after",
            summary.keys,
            summary.deadline_span_ms.unwrap_or(0),
            share * 100.0
        );
    }
}
