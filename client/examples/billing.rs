//! The nightly billing job, run by several workers at once: exactly one of
//! them runs it, and every write it makes carries the lock's fence to a
//! ledger that refuses stale fences.
//!
//! Needs a redis-server with the module:
//!
//! ```text
//! redis-server --port 6379 --loadmodule target/debug/libredis_lock.so &
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p redis-lock-client --example billing
//! ```
//!
//! It exits non-zero if the outcome is not the one described (CI runs it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_lock_client::{Error, Locks};
use tokio::sync::Barrier;

const WORKERS: usize = 5;

/// The ledger: stands for the database the job writes to. It keeps the
/// highest fence it has accepted and refuses any write with a lower one, so
/// a worker that lost its lock (paused, partitioned) cannot overwrite the
/// work of the one that holds it now.
#[derive(Default)]
struct Ledger {
    highest_fence: u64,
    invoices: BTreeMap<String, (u64, u64)>, // customer -> (amount in cents, fence)
}

impl Ledger {
    fn write_invoice(&mut self, fence: u64, customer: &str, cents: u64) -> Result<(), String> {
        if fence < self.highest_fence {
            return Err(format!(
                "stale fence {fence} (the ledger has seen {}): write refused",
                self.highest_fence
            ));
        }
        self.highest_fence = fence;
        self.invoices.insert(customer.to_string(), (cents, fence));
        Ok(())
    }
}

/// One night's run of the job, as one worker sees it.
async fn worker(
    id: usize,
    locks: Locks,
    ledger: Arc<Mutex<Ledger>>,
    night: &'static str,
    start: Arc<Barrier>,
) -> Result<Option<u64>, Error> {
    // All workers try at the same moment, as cron would start them.
    start.wait().await;
    let key = format!("billing:nightly:{night}");
    let outcome = locks
        .with_lock(&key, Duration::from_secs(2), |held| async move {
            // The work takes longer than the 2 s lease: the watchdog extends it.
            for (i, customer) in ["acme", "globex", "initech"].iter().enumerate() {
                tokio::time::sleep(Duration::from_millis(900)).await;
                ledger
                    .lock()
                    .unwrap()
                    .write_invoice(held.fence, customer, 1000 * (i as u64 + 1))
                    .expect("the holder's writes are accepted");
            }
            held.fence
        })
        .await;
    match outcome {
        Ok(fence) => {
            println!("[{night}] worker {id}: ran the billing job with fence {fence}");
            Ok(Some(fence))
        }
        Err(Error::NotAcquired) => {
            println!("[{night}] worker {id}: another worker is running it, skipping");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

async fn night(url: &str, ledger: &Arc<Mutex<Ledger>>, night: &'static str) -> Result<u64, Error> {
    let mut tasks = Vec::new();
    let start = Arc::new(Barrier::new(WORKERS));
    for id in 0..WORKERS {
        // Each worker is its own process in real life: its own connection.
        let locks = Locks::connect(redis::Client::open(url).map_err(Error::from)?).await?;
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(worker(
            id,
            locks,
            ledger,
            night,
            start.clone(),
        )));
    }
    let mut ran = Vec::new();
    for task in tasks {
        if let Some(fence) = task.await.expect("worker panicked")? {
            ran.push(fence);
        }
    }
    assert_eq!(
        ran.len(),
        1,
        "exactly one worker ran the job on {night}: {ran:?}"
    );
    Ok(ran[0])
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_string());
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    let first = night(&url, &ledger, "2026-11-28").await?;
    let second = night(&url, &ledger, "2026-11-29").await?;
    assert!(second > first, "the later holder has the larger fence");

    // A worker from the first night that was paused for a day wakes up and
    // writes with its old fence: the ledger refuses it.
    let late = ledger.lock().unwrap().write_invoice(first, "acme", 999_999);
    println!(
        "late write with fence {first}: {}",
        late.as_ref().err().map_or("accepted", |e| e)
    );
    assert!(late.is_err(), "a stale fence must be refused");

    let ledger = ledger.lock().unwrap();
    assert_eq!(ledger.invoices.len(), 3);
    assert!(ledger.invoices.values().all(|&(_, fence)| fence == second));
    println!("ledger: {:?}", ledger.invoices);
    println!("billing example: ok");
    Ok(())
}
