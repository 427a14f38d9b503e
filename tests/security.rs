//! ACL and security (issue 8): a user limited to the lock commands on
//! `lock:*` keys, `requirepass`, and tokens that `LOCK.INFO` never shows.

mod common;
use common::*;

use std::time::Duration;

use common::resp::{RawClient, Resp};

/// The ACL recipe docs/operations.md shows for an application that only
/// takes locks: the four client commands, on `lock:*` keys only, no
/// channels. `LOCK.SETSTATE` is internal (replication and AOF only) and is
/// deliberately not granted.
const LOCK_USER_ACL: &str = "locker on >pw resetkeys ~lock:* resetchannels -@all \
                             +lock.acquire +lock.extend +lock.release +lock.info";
const LOCK_USER: &str = "locker";
const LOCK_USER_PASSWORD: &str = "pw";

/// The same user by category, where the server has `@lock` (Redis 7.4+,
/// Valkey 8+): every client command, and still not `LOCK.SETSTATE`.
const LOCK_CATEGORY_ACL: &str = "locker on >pw resetkeys ~lock:* resetchannels -@all +@lock";

/// A server with the lock user of `recipe`, and a connection as it; `None`
/// when the server refuses the recipe because it has no `@lock` (Redis 7.0
/// and 7.2, checked here).
fn server_with_lock_user(recipe: &str) -> Option<(Server, Connection)> {
    let server = Server::start();
    let mut admin = server.conn();
    let has_lock_category = acl_support(&mut admin) == AclSupport::ModuleCategory;
    match acl_setuser(&mut admin, recipe) {
        Ok(()) => {}
        Err(e) if recipe.contains("@lock") && !has_lock_category => {
            assert!(e.to_string().contains("Unknown"), "{e}");
            eprintln!("no @lock on this server: {e}");
            return None;
        }
        Err(e) => panic!("ACL SETUSER {recipe}: {e}"),
    }
    let con = conn_as(&server, LOCK_USER, LOCK_USER_PASSWORD);
    Some((server, con))
}

/// `LOCK.INFO` of a held lock without `ttl`, which counts down: what must
/// not change when nothing happens to the lock.
fn lasting_info(con: &mut Connection, key: &str) -> std::collections::HashMap<String, i64> {
    let mut seen = info(con, key).unwrap_or_else(|| panic!("{key} is not held"));
    seen.remove("ttl");
    seen
}

fn config_get(con: &mut Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .expect("CONFIG GET");
    pair.get(1).cloned().unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn acl_lock_user_acquires_extends_releases_and_reads_lock_keys() {
    lock_user_acquires_extends_releases_and_reads_lock_keys(LOCK_USER_ACL);
}

#[test]
fn acl_lock_category_user_acquires_extends_releases_and_reads_lock_keys() {
    lock_user_acquires_extends_releases_and_reads_lock_keys(LOCK_CATEGORY_ACL);
}

fn lock_user_acquires_extends_releases_and_reads_lock_keys(recipe: &str) {
    let Some((server, mut locker)) = server_with_lock_user(recipe) else {
        return;
    };
    let mut admin = server.conn();

    let (token, fence) = acquire(&mut locker, "lock:billing", 10_000, None).unwrap();
    assert_eq!(token.len(), 36);
    let seen = info(&mut locker, "lock:billing").unwrap();
    assert_eq!(seen["fence"], fence as i64);
    assert_eq!(extend(&mut locker, "lock:billing", &token, 60_000), 1);
    assert!(pttl(&mut admin, "lock:billing") > 50_000);
    // Busy: another acquire is refused with null, not NOPERM.
    assert_eq!(acquire(&mut locker, "lock:billing", 10_000, None), None);
    assert_eq!(release(&mut locker, "lock:billing", &token), 1);
    assert!(!exists(&mut admin, "lock:billing"));
    assert_eq!(info(&mut locker, "lock:billing"), None);

    // Every option of ACQUIRE works for the user: TOKEN, WAIT, SESSION.
    let got: Option<(String, u64)> = redis::cmd("LOCK.ACQUIRE")
        .arg("lock:billing")
        .arg(10_000)
        .arg("TOKEN")
        .arg("app-1")
        .arg("WAIT")
        .arg(1_000)
        .arg("SESSION")
        .query(&mut locker)
        .expect("LOCK.ACQUIRE … SESSION");
    let (got_token, got_fence) = got.unwrap();
    assert_eq!(got_token, "app-1");
    assert!(got_fence > fence);
    // SESSION: closing the user's connection gives the lock back.
    drop(locker);
    wait_until(Duration::from_secs(10), || {
        !exists(&mut admin, "lock:billing")
    });
}

#[test]
fn acl_lock_user_is_refused_other_keys_and_other_commands_and_nothing_changes() {
    lock_user_is_refused_other_keys_and_other_commands_and_nothing_changes(LOCK_USER_ACL);
}

#[test]
fn acl_lock_category_user_is_refused_other_keys_and_other_commands_and_nothing_changes() {
    lock_user_is_refused_other_keys_and_other_commands_and_nothing_changes(LOCK_CATEGORY_ACL);
}

fn lock_user_is_refused_other_keys_and_other_commands_and_nothing_changes(recipe: &str) {
    let Some((server, mut locker)) = server_with_lock_user(recipe) else {
        return;
    };
    let mut admin = server.conn();
    // State the refused calls must leave alone: a lock on a key outside the
    // user's pattern, a lock on one inside it, and a plain key.
    acquire(&mut admin, "jobs:billing", 60_000, Some("jobs-token")).unwrap();
    acquire(&mut admin, "lock:billing", 60_000, Some("admin-token")).unwrap();
    let _: () = redis::cmd("SET")
        .arg("lock:plain")
        .arg("v")
        .query(&mut admin)
        .unwrap();
    let digest_before = digest(&mut admin);
    let info_before = (
        lasting_info(&mut admin, "jobs:billing"),
        lasting_info(&mut admin, "lock:billing"),
    );
    let max_ttl_before = config_get(&mut admin, "lock.max-ttl-ms");
    let grants_before = info_field(&mut admin, "lock", "lock_grants");

    let deadline = (now_ms() + 60_000).to_string();
    let refused: Vec<Vec<&str>> = vec![
        // The lock commands on a key outside `lock:*`, with the right token.
        vec!["LOCK.ACQUIRE", "jobs:billing", "1000"],
        vec![
            "LOCK.ACQUIRE",
            "jobs:billing",
            "1000",
            "TOKEN",
            "jobs-token",
        ],
        vec!["LOCK.ACQUIRE", "jobs:new", "1000", "WAIT", "100", "SESSION"],
        vec!["LOCK.EXTEND", "jobs:billing", "jobs-token", "1"],
        vec!["LOCK.RELEASE", "jobs:billing", "jobs-token"],
        vec!["LOCK.INFO", "jobs:billing"],
        // Other commands, on the user's own keys.
        vec!["GET", "lock:plain"],
        vec!["SET", "lock:billing", "x"],
        vec!["DEL", "lock:billing"],
        vec!["UNLINK", "lock:billing"],
        vec!["PEXPIRE", "lock:billing", "1"],
        vec!["PERSIST", "lock:billing"],
        vec!["RENAME", "lock:billing", "lock:other"],
        vec!["DUMP", "lock:billing"],
        vec!["TYPE", "lock:billing"],
        vec![
            "LOCK.SETSTATE",
            "lock:billing",
            "forged",
            "9007199254740990",
            &deadline,
        ],
        vec!["CONFIG", "SET", "lock.max-ttl-ms", "1"],
        vec!["CONFIG", "GET", "lock.*"],
        vec!["FLUSHALL"],
        vec!["KEYS", "*"],
        vec![
            "EVAL",
            "return redis.call('DEL', KEYS[1])",
            "1",
            "lock:billing",
        ],
        vec!["MULTI"],
        vec!["DEBUG", "DIGEST"],
        vec!["MONITOR"],
    ];
    for args in &refused {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let err = error_of(&mut locker, &cmd);
        assert!(err.starts_with("NOPERM"), "{args:?}: {err}");
    }

    assert_eq!(digest(&mut admin), digest_before);
    assert_eq!(
        (
            lasting_info(&mut admin, "jobs:billing"),
            lasting_info(&mut admin, "lock:billing")
        ),
        info_before
    );
    assert!(!exists(&mut admin, "jobs:new"));
    assert_eq!(config_get(&mut admin, "lock.max-ttl-ms"), max_ttl_before);
    assert_eq!(info_field(&mut admin, "lock", "lock_grants"), grants_before);
    assert_eq!(info_field(&mut admin, "lock", "lock_waiters"), "0");
    // The refused user is still connected and can use what it was granted.
    assert_eq!(
        info(&mut locker, "lock:billing").unwrap()["fence"],
        info_before.1["fence"]
    );
}

/// As docs/commands.md says: the commands declare their key the classic way, which
/// ACLs treat as read-write access, so a read-only key pattern (`%R~`) is not
/// enough even for `LOCK.INFO`.
#[test]
fn read_only_key_pattern_is_not_enough_for_lock_info() {
    let server = Server::start();
    let mut admin = server.conn();
    acl_setuser(
        &mut admin,
        "reader on >pw resetkeys %R~lock:* resetchannels -@all +lock.info +get",
    )
    .expect("ACL SETUSER");
    acquire(&mut admin, "lock:billing", 60_000, None).unwrap();
    let _: () = redis::cmd("SET")
        .arg("lock:plain")
        .arg("v")
        .query(&mut admin)
        .unwrap();
    let mut reader = conn_as(&server, "reader", "pw");
    // The pattern itself works for a read-only command of Redis' own ...
    let plain: String = redis::cmd("GET")
        .arg("lock:plain")
        .query(&mut reader)
        .unwrap();
    assert_eq!(plain, "v");
    // ... but not for LOCK.INFO.
    let err = error_of(&mut reader, redis::cmd("LOCK.INFO").arg("lock:billing"));
    assert!(err.starts_with("NOPERM"), "{err}");
}

#[test]
fn with_requirepass_every_lock_command_needs_auth_and_changes_nothing() {
    // Set at run time, not with --requirepass: the test harness checks that a
    // new server is ready with an unauthenticated INFO.
    let server = Server::start();
    let mut admin = server.conn(); // authenticated: connected before the password
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .query(&mut admin)
        .unwrap();
    let (token, _) = acquire(&mut admin, "lock:held", 60_000, None).unwrap();
    let before = (
        digest(&mut admin),
        lasting_info(&mut admin, "lock:held"),
        info_field(&mut admin, "lock", "lock_grants"),
    );

    let mut anonymous = RawClient::connect(&server);
    let deadline = (now_ms() + 60_000).to_string();
    let calls: Vec<Vec<&[u8]>> = vec![
        vec![b"LOCK.ACQUIRE", b"lock:new", b"10000"],
        vec![
            b"LOCK.ACQUIRE",
            b"lock:new",
            b"10000",
            b"TOKEN",
            b"t",
            b"WAIT",
            b"100",
            b"SESSION",
        ],
        vec![
            b"LOCK.ACQUIRE",
            b"lock:held",
            b"10000",
            b"TOKEN",
            token.as_bytes(),
        ],
        vec![b"LOCK.EXTEND", b"lock:held", token.as_bytes(), b"1"],
        vec![b"LOCK.RELEASE", b"lock:held", token.as_bytes()],
        vec![b"LOCK.INFO", b"lock:held"],
        vec![
            b"LOCK.GUARD",
            b"lock:held",
            token.as_bytes(),
            b"SET",
            b"data",
            b"v",
        ],
        vec![
            b"LOCK.SETSTATE",
            b"lock:new",
            b"t",
            b"5",
            deadline.as_bytes(),
        ],
    ];
    for args in &calls {
        let (reply, _) = anonymous.call(args);
        match reply {
            Resp::Error(e) => assert!(e.starts_with("NOAUTH"), "{args:?}: {e}"),
            other => panic!("{args:?}: expected NOAUTH, got {other:?}"),
        }
    }
    assert_eq!(
        (
            digest(&mut admin),
            lasting_info(&mut admin, "lock:held"),
            info_field(&mut admin, "lock", "lock_grants"),
        ),
        before
    );
    assert!(!exists(&mut admin, "lock:new"));

    // A wrong password changes nothing either; the right one lets it in.
    let (reply, _) = anonymous.call(&[b"AUTH", b"wrong"]);
    assert!(
        matches!(&reply, Resp::Error(e) if e.starts_with("WRONGPASS")),
        "{reply:?}"
    );
    let (reply, _) = anonymous.call(&[b"LOCK.INFO", b"lock:held"]);
    assert!(
        matches!(&reply, Resp::Error(e) if e.starts_with("NOAUTH")),
        "{reply:?}"
    );
    let (reply, _) = anonymous.call(&[b"AUTH", b"s3cret"]);
    assert_eq!(reply, Resp::Simple("OK".into()));
    let (reply, _) = anonymous.call(&[b"LOCK.ACQUIRE", b"lock:new", b"10000", b"TOKEN", b"t"]);
    match reply {
        Resp::Array(items) => assert_eq!(items[0], Resp::Bulk(b"t".to_vec())),
        other => panic!("expected a grant, got {other:?}"),
    }
    let (reply, _) = anonymous.call(&[b"LOCK.RELEASE", b"lock:held", token.as_bytes()]);
    assert_eq!(reply, Resp::Int(1));
    assert!(!exists(&mut admin, "lock:held"));
    assert!(exists(&mut admin, "lock:new"));
}

#[test]
fn lock_info_never_shows_the_token_in_resp2_or_resp3() {
    let server = Server::start();
    let mut con = server.conn();
    let long_token: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    let client_tokens: Vec<Vec<u8>> = vec![
        b"secret-token-Zq9xW".to_vec(),
        b"\x00\xffsecret\r\n\x01binary-token".to_vec(),
        long_token,
    ];
    // (key, token) for every lock: one server-drawn token, then client-given.
    let mut locks: Vec<(String, Vec<u8>)> = Vec::new();
    let (drawn, _) = acquire(&mut con, "lock:drawn", 60_000, None).unwrap();
    locks.push(("lock:drawn".into(), drawn.into_bytes()));
    for (i, token) in client_tokens.into_iter().enumerate() {
        let key = format!("lock:given-{i}");
        let (got, _): (Vec<u8>, u64) = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg(60_000)
            .arg("TOKEN")
            .arg(&token)
            .query(&mut con)
            .unwrap();
        assert_eq!(got, token);
        locks.push((key, token));
    }
    // One extended, so its `extends` is not 0.
    let (key, token) = &locks[1];
    let _: i64 = redis::cmd("LOCK.EXTEND")
        .arg(key)
        .arg(token)
        .arg(60_000)
        .query(&mut con)
        .unwrap();

    let fields = [
        "fence", "ttl", "deadline", "granted", "extends", "waiters", "mode", "holders",
    ];
    for protocol in [2, 3] {
        let mut raw = RawClient::connect(&server);
        let (hello, _) = raw.call(&[b"HELLO", protocol.to_string().as_bytes()]);
        assert!(matches!(hello, Resp::Map(_) | Resp::Array(_)), "{hello:?}");
        for (key, token) in &locks {
            let (reply, bytes) = raw.call(&[b"LOCK.INFO", key.as_bytes()]);
            assert!(
                !contains(&bytes, token),
                "RESP{protocol} LOCK.INFO {key} shows the token: {:?}",
                String::from_utf8_lossy(&bytes)
            );
            let pairs = match (protocol, reply) {
                (2, Resp::Array(flat)) => flat
                    .chunks(2)
                    .map(|p| (p[0].clone(), p[1].clone()))
                    .collect::<Vec<_>>(),
                (3, Resp::Map(pairs)) => pairs,
                (_, other) => panic!("RESP{protocol} LOCK.INFO {key}: {other:?}"),
            };
            let names: Vec<Resp> = fields
                .iter()
                .map(|f| Resp::Bulk(f.as_bytes().to_vec()))
                .collect();
            assert_eq!(
                pairs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
                names,
                "RESP{protocol} {key}"
            );
            // Every field is a number, but `mode`, a fixed word.
            for (name, value) in &pairs {
                match name {
                    Resp::Bulk(n) if n == b"mode" => {
                        assert_eq!(value, &Resp::Bulk(b"exclusive".to_vec()))
                    }
                    _ => assert!(matches!(value, Resp::Int(_)), "{name:?} = {value:?}"),
                }
            }
        }
    }
    // Through the client library too (RESP2, decoded).
    for (key, token) in &locks {
        let reply: Value = redis::cmd("LOCK.INFO").arg(key).query(&mut con).unwrap();
        let Value::Array(items) = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(items.len(), 16);
        for item in items {
            if let Value::BulkString(b) = &item {
                assert!(!contains(b, token), "{key}: {item:?}");
            }
        }
    }
}

#[test]
fn keyspace_events_never_carry_the_token() {
    let server = Server::start_with(&["--notify-keyspace-events", "KEd"]);
    let mut con = server.conn();
    let mut subscriber = RawClient::connect(&server);
    let (reply, _) = subscriber.call(&[b"PSUBSCRIBE", b"__key*__:*"]);
    assert!(matches!(reply, Resp::Array(_)), "{reply:?}");

    let token: &[u8] = b"\x00event-secret\xff";
    let acquire_with = |con: &mut Connection, key: &str, ttl: i64| {
        redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(ttl)
            .arg("TOKEN")
            .arg(token)
            .query::<Option<(Vec<u8>, u64)>>(con)
            .unwrap()
    };
    // acquired, extended, released, handoff, expired.
    acquire_with(&mut con, "lock:e", 60_000).unwrap();
    let _: i64 = redis::cmd("LOCK.EXTEND")
        .arg("lock:e")
        .arg(token)
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let mut waiter = server.conn();
    let handle = std::thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg("lock:e")
            .arg(60_000)
            .arg("TOKEN")
            .arg(b"\x00event-secret\xff-2")
            .arg("WAIT")
            .arg(10_000)
            .query::<Option<(Vec<u8>, u64)>>(&mut waiter)
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut con, "lock:e").is_some_and(|i| i["waiters"] == 1)
    });
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("lock:e")
        .arg(token)
        .query(&mut con)
        .unwrap();
    assert!(handle.join().unwrap().unwrap().is_some());
    acquire_with(&mut con, "lock:short", 1).unwrap();
    wait_until(Duration::from_secs(10), || !exists(&mut con, "lock:short"));

    // Every event published so far is in the subscriber's socket before the
    // reply to this PING.
    let (_, bytes) = subscriber.call(&[b"PING"]);
    let mut all = bytes;
    let mut events = Vec::new();
    loop {
        let mut raw = Vec::new();
        let reply = subscriber.read(&mut raw);
        all.extend_from_slice(&raw);
        match reply {
            Resp::Array(items) if items.first() == Some(&Resp::Bulk(b"pmessage".to_vec())) => {
                events.push(items[3].clone());
            }
            // PING in subscribed mode on RESP2: ["pong", ""].
            Resp::Array(items) if items.first() == Some(&Resp::Bulk(b"pong".to_vec())) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    for event in [
        "lock.acquired",
        "lock.extended",
        "lock.released",
        "lock.handoff",
    ] {
        assert!(
            events.contains(&Resp::Bulk(event.as_bytes().to_vec())),
            "no {event} in {events:?}"
        );
    }
    assert!(
        !contains(&all, b"event-secret"),
        "an event carries the token: {:?}",
        String::from_utf8_lossy(&all)
    );
}

/// `locker` waits for `lock:w`; meanwhile an operator runs `ACL SETUSER
/// locker <rules>`; then the holder releases. The waiter must get `NOPERM`
/// at the handoff, and the lock goes to the next waiter (here: nobody, so it
/// stays free).
fn waiter_is_refused_after_acl_change(rules: &[&str]) {
    let (server, mut locker) = server_with_lock_user(LOCK_USER_ACL).expect("the lock user");
    let mut admin = server.conn();
    acquire(&mut admin, "lock:w", 60_000, Some("admin")).unwrap();
    let handle = std::thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg("lock:w")
            .arg(30_000)
            .arg("TOKEN")
            .arg("locker")
            .arg("WAIT")
            .arg(10_000)
            .query::<Option<(String, u64)>>(&mut locker)
    });
    wait_until(Duration::from_secs(10), || {
        info(&mut admin, "lock:w").is_some_and(|i| i["waiters"] == 1)
    });
    let mut setuser = redis::cmd("ACL");
    setuser.arg("SETUSER").arg("locker");
    for rule in rules {
        setuser.arg(*rule);
    }
    let _: () = setuser.query(&mut admin).unwrap();
    assert_eq!(release(&mut admin, "lock:w", "admin"), 1);
    let reply = handle.join().unwrap();
    assert!(
        matches!(&reply, Err(e) if e.code() == Some("NOPERM")),
        "after ACL SETUSER locker {rules:?}, the waiter got {reply:?}"
    );
    assert_eq!(info(&mut admin, "lock:w"), None);
}

/// Access to the key taken away (`resetkeys`). Valkey 8.1 does the same for a
/// blocked `BLPOP`. (`ACL DELUSER` is simpler: Redis closes the client, and
/// the module drops it from the queue.)
#[test]
fn waiter_whose_key_permission_was_revoked_is_not_granted() {
    waiter_is_refused_after_acl_change(&["resetkeys"]);
}

/// A pattern kept for the key, but read-only: the lock commands need read and
/// write access.
#[test]
fn waiter_whose_key_access_became_read_only_is_not_granted() {
    waiter_is_refused_after_acl_change(&["resetkeys", "%R~lock:*"]);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}
