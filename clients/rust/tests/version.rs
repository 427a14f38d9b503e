//! The module version check (`MODULE LIST`, once per `Locks`) against real
//! servers: the module built from this tree passes, with one `MODULE LIST`
//! for many commands; a server without the module is refused at connect
//! (and at the first command of a `Locks` made from a connection), naming
//! both versions; a user whose ACL refuses `MODULE LIST` is let through.
//! The comparison itself (older builds' `ver 1`, RESP2 and RESP3 replies)
//! is unit-tested in src/version.rs.

mod common;

use std::time::Duration;

use common::{LocksOn, Server};
use redis_lock_client::{redis, Error, Locks, CLIENT_VERSION, REQUIRED_MODULE_VERSION};
use redis_lock_testsupport::Launch;

const SEC: Duration = Duration::from_secs(1);

/// `calls=` of `MODULE|LIST` in `INFO commandstats` (0 when never called).
fn module_list_calls(admin: &mut redis::Connection) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(admin).unwrap();
    stats
        .lines()
        .find(|line| line.starts_with("cmdstat_module|list:"))
        .and_then(|line| line.split("calls=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_module_of_this_tree_passes_with_one_check_per_connection() {
    assert_eq!(REQUIRED_MODULE_VERSION, 400);
    let server = Server::start();
    let mut admin = server.admin();
    let locks = server.locks().await;
    assert_eq!(module_list_calls(&mut admin), 1, "checked at connect");
    for _ in 0..3 {
        let guard = locks.lock("job").ttl(10 * SEC).acquire().await.unwrap();
        locks.info("job").await.unwrap().expect("held");
        guard.release().await.unwrap();
    }
    let clone = locks.clone();
    clone.info("job").await.unwrap();
    assert_eq!(module_list_calls(&mut admin), 1, "not per command");

    // From a connection: checked at the first command, once.
    let plain = Locks::from_connection(
        server
            .redis_client()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    );
    assert_eq!(module_list_calls(&mut admin), 1);
    plain.info("job").await.unwrap();
    plain.info("job").await.unwrap();
    assert_eq!(module_list_calls(&mut admin), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_module_is_refused_at_connect_naming_both_versions() {
    let bare = Launch::new().without_module().start();
    let refused = Locks::connect(bare.redis_client()).await;
    let Err(e @ Error::ModuleVersion { found: None, .. }) = refused else {
        panic!("expected ModuleVersion, got {:?}", refused.err());
    };
    let said = e.to_string();
    assert!(said.contains("no lock module loaded"), "{said}");
    assert!(said.contains(CLIENT_VERSION), "{said}");
    assert!(said.contains("0.4.0 or newer"), "{said}");

    // From a connection: at the first command, and again at the next (a
    // refusal is not remembered: the module may be loaded meanwhile).
    let plain = Locks::from_connection(
        bare.redis_client()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    );
    for _ in 0..2 {
        assert!(matches!(
            plain.info("job").await,
            Err(Error::ModuleVersion { found: None, .. })
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_module_list_is_not_checked() {
    let server = Server::start();
    let mut admin = server.admin();
    // Everything but MODULE LIST (and the admin commands around it).
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "worker", "on", "nopass", "~*", "&*", "+@all", "-module",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://worker@{}/", server.addr());
    let locks = Locks::connect(redis::Client::open(url).unwrap())
        .await
        .expect("let through");
    let guard = locks.lock("job").ttl(10 * SEC).acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
}
