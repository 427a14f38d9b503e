use std::time::Duration;

use redis_lock_client::redis::aio::ConnectionManagerConfig;
use redis_lock_client::{redis, Error, Locks};

/// Stands for the real work: every write carries the fence.
async fn write(invoice: u32, fence: u64) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    println!("invoice {invoice} written with fence {fence}");
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // Timeouts: 2 s to connect, 5 s for a reply; the manager reconnects
    // after a dropped connection.
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    let locks = Locks::connect_with(redis::Client::open(url)?, config).await?;
    let request = locks.lock("billing").ttl(Duration::from_secs(10));
    match request.wait(Duration::from_secs(30)).acquire().await {
        Ok(guard) => {
            let work = async {
                for invoice in 1..=40 {
                    write(invoice, guard.fence()).await;
                }
            };
            tokio::select! {
                reason = guard.lost() => println!("lost the lock ({reason}): stopping"),
                _ = work => {}
            }
            match guard.release().await {
                Ok(released) => println!("released: {released}"), // false: already gone
                Err(e) => println!("release failed ({e}): the lock ends at its ttl"),
            }
        }
        Err(Error::TimedOut) => println!("another worker still holds it"),
        Err(e) => return Err(e.into()), // Error::ModuleVersion: see "Which module it needs"
    }
    println!("done");
    Ok(())
}
