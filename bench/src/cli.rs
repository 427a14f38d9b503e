//! What the stand-alone tools (`lock-load`, `lock-handoff`, `lock-observe`)
//! share: their common arguments, running the measurement on a tokio
//! runtime, failing with its error, and printing one JSON object when asked.

use std::future::Future;

use serde::Serialize;

use crate::load::RetryPolicy;

/// The arguments every tool takes.
#[derive(clap::Args, Debug)]
pub struct Common {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the summary as one JSON object (lock-handoff and lock-observe:
    /// with every sample)
    #[arg(long)]
    pub json: bool,
}

impl Common {
    pub fn url(&self) -> String {
        format!("redis://{}:{}/", self.host, self.port)
    }
}

/// The polling delay of the recipes that retry.
#[derive(clap::Args, Debug)]
pub struct Retry {
    /// Polling delay after a refusal: uniform in [min, max] ms (redsync: 50-250)
    #[arg(long, default_value_t = 50)]
    pub retry_min_ms: u64,
    #[arg(long, default_value_t = 250)]
    pub retry_max_ms: u64,
}

impl Retry {
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            min_ms: self.retry_min_ms,
            max_ms: self.retry_max_ms,
        }
    }
}

/// Microseconds as milliseconds with three decimals, for the tools' summaries.
pub fn ms(us: Option<f64>) -> String {
    us.map_or("–".to_string(), |us| format!("{:.3}", us / 1000.0))
}

/// Run `work` on a runtime of `threads` workers. On error, print it as
/// `tool: error` and exit 1. With `json`, print the summary as one JSON
/// object and return `None`; otherwise return it for the tool to print.
pub fn run<T: Serialize>(
    tool: &str,
    threads: usize,
    json: bool,
    work: impl Future<Output = Result<T, String>>,
) -> Option<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    let summary = match runtime.block_on(work) {
        Ok(summary) => summary,
        Err(error) => {
            eprintln!("{tool}: {error}");
            std::process::exit(1);
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("summary as JSON")
        );
        return None;
    }
    Some(summary)
}
