//! The nightly billing job, run by several workers at once: exactly one of
//! them runs it, and every write it makes carries the lock's fence to a
//! ledger that refuses stale fences. The day's total, a Redis key next to
//! the lock (`{billing}:total:<night>`, the same hash tag), is written only
//! under the lock, with `Guard::guarded` (`LOCK.GUARD`): a stale holder's
//! write to it is refused by the server (`LOST`) and changes nothing.
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

use redis_lock_client::redis::{self, aio::MultiplexedConnection};
use redis_lock_client::{Error, Locks};
use tokio::sync::Barrier;

const WORKERS: usize = 5;
const NIGHTS: [&str; 2] = ["2026-11-28", "2026-11-29"];
/// The night's invoices: customer and amount in cents.
const INVOICES: [(&str, u64); 3] = [("acme", 1000), ("globex", 2000), ("initech", 3000)];
/// The night's total once the job ran: the sum of the invoices.
const NIGHT_TOTAL: u64 = 6000;

/// The lock key and the total key share the hash tag `{billing}`: in a
/// cluster, `LOCK.GUARD` goes to the lock key's master, which must own the
/// total too.
fn lock_key(night: &str) -> String {
    format!("{{billing}}:nightly:{night}")
}

fn total_key(night: &str) -> String {
    format!("{{billing}}:total:{night}")
}

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
    let guard = match locks
        .lock(lock_key(night))
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
    {
        Ok(guard) => guard,
        Err(Error::NotAcquired) => {
            println!("[{night}] worker {id}: another worker is running it, skipping");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let fence = guard.fence();
    let total_key = total_key(night);
    let job = async {
        // The work takes longer than the 2 s lease: the watchdog extends it.
        for (customer, cents) in INVOICES {
            tokio::time::sleep(Duration::from_millis(900)).await;
            ledger
                .lock()
                .unwrap()
                .write_invoice(fence, customer, cents)
                .expect("the holder's writes are accepted");
            // Added to the total only if this lease is live on the server,
            // in the same atomic step as the check.
            let _total: u64 = guard
                .guarded(redis::cmd("INCRBY").arg(&total_key).arg(cents))
                .await?;
        }
        Ok(())
    };
    // Stop the work as soon as the lease is lost.
    let outcome = tokio::select! {
        reason = guard.lost() => Err(Error::Lost(reason)),
        done = job => done,
    };
    // A failed release is not the job's failure: the lease then expires.
    let _ = guard.release().await;
    outcome?;
    println!("[{night}] worker {id}: ran the billing job with fence {fence}");
    Ok(Some(fence))
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

async fn total(admin: &mut MultiplexedConnection, night: &str) -> Result<u64, Error> {
    let total: Option<u64> = redis::cmd("GET")
        .arg(total_key(night))
        .query_async(admin)
        .await?;
    Ok(total.unwrap_or(0))
}

/// A stale holder: a rerun of `night` gets the lock, then stalls. Meanwhile
/// an operator deletes the lock it thinks is stuck, and another worker takes
/// it. When the stalled worker wakes up, its guarded write to the total is
/// refused by the server: nothing is written, and its loss signal fires.
async fn stale_holder(
    client: &redis::Client,
    admin: &mut MultiplexedConnection,
    night: &str,
) -> Result<(), Error> {
    let ttl = Duration::from_secs(2);
    let stalled = Locks::connect(client.clone()).await?;
    let stale = stalled
        .lock(lock_key(night))
        .ttl(ttl)
        .acquire()
        .await
        .expect("the night's job is over: the lock is free");
    let _: i64 = redis::cmd("DEL")
        .arg(lock_key(night))
        .query_async(admin)
        .await?;
    let other = Locks::connect(client.clone()).await?;
    let taken = other
        .lock(lock_key(night))
        .ttl(ttl)
        .acquire()
        .await
        .expect("free after the DEL");

    let refused = stale
        .guarded::<u64>(redis::cmd("INCRBY").arg(total_key(night)).arg(999_999))
        .await;
    match refused {
        Err(Error::Lost(reason)) => println!(
            "stale guarded write to {}: refused, LOST ({reason})",
            total_key(night)
        ),
        other => panic!("a stale holder's guarded write must be refused, got {other:?}"),
    }
    assert!(stale.is_lost(), "the LOST reply fired the loss signal");
    assert!(taken.release().await?);
    assert!(!stale.release().await?, "the stale lease was gone");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_string());
    let client = redis::Client::open(url.as_str())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // Start from no totals, so that the example can run again on one server.
    let _: i64 = redis::cmd("DEL")
        .arg(&NIGHTS.map(total_key))
        .query_async(&mut admin)
        .await?;

    let first = night(&url, &ledger, NIGHTS[0]).await?;
    let second = night(&url, &ledger, NIGHTS[1]).await?;
    assert!(second > first, "the later holder has the larger fence");
    for night in NIGHTS {
        assert_eq!(total(&mut admin, night).await?, NIGHT_TOTAL, "{night}");
    }

    stale_holder(&client, &mut admin, NIGHTS[1]).await?;
    assert_eq!(
        total(&mut admin, NIGHTS[1]).await?,
        NIGHT_TOTAL,
        "the stale write changed nothing"
    );

    // A worker from the first night that was paused for a day wakes up and
    // writes with its old fence: the ledger refuses it.
    let late = ledger.lock().unwrap().write_invoice(first, "acme", 999_999);
    println!(
        "late write with fence {first}: {}",
        late.as_ref().err().map_or("accepted", |e| e)
    );
    assert!(late.is_err(), "a stale fence must be refused");

    for night in NIGHTS {
        println!(
            "total {}: {}",
            total_key(night),
            total(&mut admin, night).await?
        );
    }
    let ledger = ledger.lock().unwrap();
    assert_eq!(ledger.invoices.len(), 3);
    assert!(ledger.invoices.values().all(|&(_, fence)| fence == second));
    println!("ledger: {:?}", ledger.invoices);
    println!("billing example: ok");
    Ok(())
}
