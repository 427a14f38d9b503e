//! What the stand-alone tools (`lock-load`, `lock-handoff`, `lock-observe`)
//! share: run the measurement on a tokio runtime, fail with its error, and
//! print one JSON object when asked.

use std::future::Future;

use serde::Serialize;

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
