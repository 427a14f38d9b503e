//! Leader election (`Election`): candidates queue on the server, the next
//! one leads when the leader resigns, loses its lease or its key; observers
//! see each change with a larger fence and the right owner; a candidate that
//! no longer leads resigns without touching the new leader.

mod common;

use std::time::Duration;

use common::{wait_until, LocksOn, Server};
use redis::Value;
use redis_lock_client::{Election, Error, Leader, LockOptions, Locks, LostReason};
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};

const SEC: Duration = Duration::from_secs(1);
const KEY: &str = "scheduler:leader";

async fn candidate(server: &Server, owner: &str, ttl: Duration) -> Election {
    Election::new(server.locks().await, KEY, ttl).owner(owner)
}

/// The owner labels of the candidates waiting in the server's queue.
fn queued_owners(server: &Server) -> Vec<String> {
    let waiters: Vec<Vec<(String, Value)>> = redis::cmd("LOCK.QUEUE")
        .arg(KEY)
        .query(&mut server.admin())
        .expect("LOCK.QUEUE");
    waiters
        .into_iter()
        .filter_map(|fields| {
            fields.into_iter().find_map(|(name, value)| match value {
                Value::BulkString(b) if name == "owner" => Some(String::from_utf8(b).unwrap()),
                _ => None,
            })
        })
        .collect()
}

/// A follower on its own `Locks`: every leader it observes, in order.
async fn follow(server: &Server) -> mpsc::UnboundedReceiver<Option<Leader>> {
    let follower = Election::new(server.locks().await, KEY, 10 * SEC);
    let mut observer = follower.observe().expect("an observer");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(leader) = observer.next().await {
            if tx.send(leader).is_err() {
                return;
            }
        }
    });
    rx
}

async fn next_change(changes: &mut mpsc::UnboundedReceiver<Option<Leader>>) -> Option<Leader> {
    timeout(10 * SEC, changes.recv())
        .await
        .expect("a change of leader within 10 s")
        .expect("the observer runs")
}

fn leader(fence: u64, owner: &str) -> (u64, Option<String>) {
    (fence, Some(owner.to_string()))
}

fn seen(change: Option<Leader>) -> (u64, Option<String>) {
    let change = change.expect("a leader, not nobody");
    assert!(change.ttl.is_some_and(|ttl| ttl > Duration::ZERO));
    (change.fence, change.owner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_candidate_leads_when_the_leader_resigns_and_observers_see_each_change() {
    let server = Server::start();
    let a = candidate(&server, "host-a", 10 * SEC).await;
    let b = candidate(&server, "host-b", 10 * SEC).await;
    let mut changes = follow(&server).await;
    assert_eq!(next_change(&mut changes).await, None, "nobody leads yet");

    let leading_a = a.campaign().await.expect("a leads");
    assert_eq!(leading_a.owner(), Some("host-a"));
    assert_eq!(
        seen(next_change(&mut changes).await),
        leader(leading_a.fence(), "host-a")
    );

    let waiting_b = tokio::spawn(async move { b.campaign().await });
    wait_until(10 * SEC, || queued_owners(&server) == ["host-b"]);
    let now = a.leader().await.unwrap().expect("a leads");
    assert_eq!(
        (now.fence, now.owner.as_deref()),
        (leading_a.fence(), Some("host-a"))
    );

    let fence_a = leading_a.fence();
    assert!(leading_a.resign().await.unwrap(), "a resigned");
    let leading_b = waiting_b.await.unwrap().expect("b leads");
    assert!(leading_b.fence() > fence_a);
    assert_eq!(
        seen(next_change(&mut changes).await),
        leader(leading_b.fence(), "host-b")
    );

    let fence_b = leading_b.fence();
    assert!(leading_b.resign().await.unwrap());
    assert_eq!(next_change(&mut changes).await, None, "nobody leads");
    assert_eq!(a.leader().await.unwrap(), None);

    // Campaigning again is a new term: a new fence, seen as a change.
    let again = a.campaign().await.unwrap();
    assert!(again.fence() > fence_b);
    assert_eq!(
        seen(next_change(&mut changes).await),
        leader(again.fence(), "host-a")
    );
    assert!(again.resign().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_candidate_leads_when_a_cut_off_leaders_lease_expires() {
    let server = Server::start();
    // Leader a's extends go through one plain connection, which stays
    // broken once killed: its watchdog can no longer keep the lease.
    let shared = server
        .redis_client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let shared_id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut shared.clone())
        .await
        .unwrap();
    let a_locks = Locks::from_connection(shared)
        .wait_client(server.redis_client())
        .with_options(LockOptions::default().owner("host-a"));
    let a = Election::new(a_locks, KEY, SEC);
    let b = candidate(&server, "host-b", 10 * SEC).await;
    let mut changes = follow(&server).await;
    assert_eq!(next_change(&mut changes).await, None);

    let leading_a = a.campaign().await.unwrap();
    assert_eq!(leading_a.owner(), Some("host-a"), "from the Locks' options");
    assert_eq!(
        seen(next_change(&mut changes).await),
        leader(leading_a.fence(), "host-a")
    );
    let waiting_b = tokio::spawn(async move { b.campaign().await });
    wait_until(10 * SEC, || queued_owners(&server) == ["host-b"]);

    let cut_at = Instant::now();
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(shared_id)
        .query(&mut server.admin())
        .unwrap();
    // a learns it has lost before its lease ends on the server...
    let reason = timeout(5 * SEC, leading_a.lost()).await.expect("a lost");
    assert_eq!(reason, LostReason::Expired);
    assert!(cut_at.elapsed() < SEC);
    // ...and b is granted the lock when it does.
    let leading_b = timeout(5 * SEC, waiting_b)
        .await
        .expect("b leads within 5 s")
        .unwrap()
        .unwrap();
    assert!(leading_b.fence() > leading_a.fence());
    assert_eq!(
        seen(next_change(&mut changes).await),
        leader(leading_b.fence(), "host-b")
    );
    assert!(matches!(
        leading_a.resign().await,
        Err(Error::Connection(_))
    ));
    assert!(leading_b.resign().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_candidate_leads_when_a_leader_without_watchdog_lets_its_lease_run_out() {
    let server = Server::start();
    let mut con = server.admin();
    // A leader that was paused: it took a 1 s lease and never extended.
    let (_, old_fence): (String, u64) = redis::cmd("LOCK.ACQUIRE")
        .arg(KEY)
        .arg(1000)
        .arg("TOKEN")
        .arg("paused-token")
        .arg("OWNER")
        .arg("paused")
        .query(&mut con)
        .unwrap();
    let mut changes = follow(&server).await;
    assert_eq!(
        seen(next_change(&mut changes).await),
        leader(old_fence, "paused")
    );
    let b = candidate(&server, "host-b", 10 * SEC).await;
    let leading_b = timeout(5 * SEC, b.campaign()).await.unwrap().unwrap();
    assert!(leading_b.fence() > old_fence);
    assert_eq!(
        seen(next_change(&mut changes).await),
        leader(leading_b.fence(), "host-b")
    );
    // The paused leader learns it on its next extend.
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg(KEY)
        .arg("paused-token")
        .arg(300)
        .query(&mut con)
        .unwrap();
    assert_eq!(extended, 0);
    assert!(leading_b.resign().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_no_longer_leads_resigns_without_harm() {
    let server = Server::start();
    let a = candidate(&server, "host-a", 3 * SEC).await;
    let b = candidate(&server, "host-b", 10 * SEC).await;
    let leading_a = a.campaign().await.unwrap();
    let waiting_b = tokio::spawn(async move { b.campaign().await });
    wait_until(10 * SEC, || queued_owners(&server) == ["host-b"]);
    // An operator deletes the key: the lock goes to the first waiter.
    let _: i64 = redis::cmd("DEL")
        .arg(KEY)
        .query(&mut server.admin())
        .unwrap();
    let leading_b = waiting_b.await.unwrap().unwrap();
    let reason = timeout(5 * SEC, leading_a.lost()).await.expect("a lost");
    assert_eq!(reason, LostReason::Refused);
    assert!(!leading_a.resign().await.unwrap(), "a no longer led");
    let now = a.leader().await.unwrap().expect("b still leads");
    assert_eq!(
        (now.fence, now.owner.as_deref()),
        (leading_b.fence(), Some("host-b"))
    );
    assert!(leading_b.resign().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_stops_waiting_leaves_the_queue() {
    let server = Server::start();
    let a = candidate(&server, "host-a", 10 * SEC).await;
    let b = candidate(&server, "host-b", 10 * SEC).await;
    let leading_a = a.campaign().await.unwrap();
    let outcome = b.campaign_timeout(Duration::from_millis(300)).await;
    assert!(matches!(outcome, Err(Error::TimedOut)), "got {outcome:?}");
    assert!(queued_owners(&server).is_empty());
    // Dropping a campaign's future closes its connection: out of the queue.
    let waiting = tokio::spawn(async move { b.campaign().await });
    wait_until(10 * SEC, || queued_owners(&server) == ["host-b"]);
    waiting.abort();
    wait_until(10 * SEC, || queued_owners(&server).is_empty());
    assert!(leading_a.resign().await.unwrap());
    assert_eq!(
        a.leader().await.unwrap(),
        None,
        "nobody was handed the lock"
    );

    let bad = Election::new(server.locks().await, KEY, SEC).owner("");
    assert!(matches!(
        bad.campaign().await,
        Err(Error::InvalidArgument(_))
    ));
    let long = Election::new(server.locks().await, KEY, SEC).owner("x".repeat(129));
    assert!(matches!(
        long.campaign().await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_carries_on_after_its_connection_is_killed() {
    let server = Server::start();
    let a = candidate(&server, "host-a", 10 * SEC).await;
    let mut observer = a.observe().unwrap().timeout(Duration::from_millis(200));
    assert_eq!(observer.next().await.unwrap(), None);
    assert_eq!(observer.last_fence(), Some(0));
    let leading = a.campaign().await.unwrap();
    let first = observer.next().await.unwrap().unwrap();
    assert_eq!(first.fence, leading.fence());
    // Kill the observer's connection while it blocks: it reports the
    // error, and its next call reconnects and sees the resignation.
    let blocked = tokio::spawn(async move {
        let outcome = observer.next().await;
        (observer, outcome)
    });
    let mut admin = server.admin();
    let mut observing = None;
    wait_until(10 * SEC, || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
        observing = clients
            .lines()
            .find(|line| line.contains("cmd=lock.observe"))
            .and_then(|line| line.strip_prefix("id="))
            .and_then(|rest| rest.split(' ').next())
            .map(str::to_string);
        observing.is_some()
    });
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(observing.unwrap())
        .query(&mut admin)
        .unwrap();
    let (mut observer, outcome) = blocked.await.unwrap();
    assert!(
        matches!(outcome, Err(Error::Connection(_))),
        "got {outcome:?}"
    );
    assert!(leading.resign().await.unwrap());
    assert_eq!(observer.next().await.unwrap(), None);
}
