//! The command contract, one behaviour per test, against a real server.

mod common;
use common::*;

#[test]
fn acquire_free_key_returns_uuid_token_and_fence() {
    let server = Server::start();
    let mut con = server.conn();
    let (token, fence) = acquire(&mut con, "billing", 30_000, None).unwrap();
    assert_eq!(token.len(), 36);
    let uuid = uuid::Uuid::parse_str(&token).unwrap();
    assert_eq!(uuid.get_version_num(), 4);
    assert_eq!(token, token.to_lowercase());
    assert!(fence > 0 && fence < (1 << 53));
    let ttl = pttl(&mut con, "billing");
    assert!(ttl > 29_000 && ttl <= 30_000, "PTTL {ttl}");
}

#[test]
fn held_key_refuses_another_token_with_null() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k", 30_000, Some("a")).unwrap();
    assert_eq!(acquire(&mut con, "k", 30_000, Some("b")), None);
    assert_eq!(acquire(&mut con, "k", 30_000, None), None);
}

#[test]
fn reacquire_with_same_token_keeps_fence_and_resets_ttl() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "k", 5_000, Some("me")).unwrap();
    let again = acquire(&mut con, "k", 60_000, Some("me")).unwrap();
    assert_eq!(again, ("me".to_string(), fence));
    assert!(pttl(&mut con, "k") > 55_000);
    let again = acquire(&mut con, "k", 1_000, Some("me")).unwrap();
    assert_eq!(again.1, fence);
    assert!(pttl(&mut con, "k") <= 1_000);
}

#[test]
fn binary_token_round_trips() {
    let server = Server::start();
    let mut con = server.conn();
    let token: &[u8] = b"\x00\xff\r\n tok";
    let (got, _): (Vec<u8>, u64) = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(1000)
        .arg("TOKEN")
        .arg(token)
        .query(&mut con)
        .unwrap();
    assert_eq!(got, token);
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg("k")
        .arg(token)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
}

#[test]
fn token_option_is_case_insensitive() {
    let server = Server::start();
    let mut con = server.conn();
    let (token, _): (String, u64) = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(1000)
        .arg("tOkEn")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(token, "x");
}

#[test]
fn extend_by_holder_moves_deadline() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k", 1_000, Some("me")).unwrap();
    assert_eq!(extend(&mut con, "k", "me", 60_000), 1);
    let ttl = pttl(&mut con, "k");
    assert!(ttl > 59_000 && ttl <= 60_000, "PTTL {ttl}");
    // Extending can also shorten the lease: it is "ttl-ms from now".
    assert_eq!(extend(&mut con, "k", "me", 2_000), 1);
    assert!(pttl(&mut con, "k") <= 2_000);
}

#[test]
fn extend_with_foreign_token_or_free_key_returns_0_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(extend(&mut con, "free", "me", 1_000), 0);
    assert!(!exists(&mut con, "free"));
    acquire(&mut con, "k", 5_000, Some("me")).unwrap();
    assert_eq!(extend(&mut con, "k", "you", 60_000), 0);
    assert!(pttl(&mut con, "k") <= 5_000);
}

#[test]
fn release_by_holder_deletes_the_lock() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k", 30_000, Some("me")).unwrap();
    assert_eq!(release(&mut con, "k", "me"), 1);
    assert!(!exists(&mut con, "k"));
    assert_eq!(info(&mut con, "k"), None);
    assert_eq!(release(&mut con, "k", "me"), 0);
    assert!(acquire(&mut con, "k", 30_000, Some("other")).is_some());
}

#[test]
fn release_with_foreign_token_keeps_lock() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "k", 30_000, Some("me")).unwrap();
    let before = digest(&mut con);
    assert_eq!(release(&mut con, "k", "you"), 0);
    assert_eq!(release(&mut con, "k", "m"), 0);
    assert_eq!(digest(&mut con), before);
    assert_eq!(info(&mut con, "k").unwrap()["fence"], fence as i64);
}

#[test]
fn expired_lease_is_free_and_stale_holder_gets_0() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, first) = acquire(&mut con, "k", 50, Some("old")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(info(&mut con, "k"), None);
    assert_eq!(extend(&mut con, "k", "old", 1_000), 0);
    assert_eq!(release(&mut con, "k", "old"), 0);
    let (_, second) = acquire(&mut con, "k", 1_000, Some("new")).unwrap();
    assert!(second > first);
}

#[test]
fn info_reports_fence_ttl_deadline_grant_extends_waiters_and_never_the_token() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(info(&mut con, "k"), None);
    let before_ms = now_ms();
    let (_, fence) = acquire(&mut con, "k", 10_000, Some("secret-token")).unwrap();
    let after_ms = now_ms();
    let info = info(&mut con, "k").unwrap();
    assert_eq!(info["fence"], fence as i64);
    assert!(info["ttl"] > 9_000 && info["ttl"] <= 10_000);
    assert!(info["deadline"] >= before_ms + 10_000 && info["deadline"] <= after_ms + 10_000);
    assert_eq!(info["waiters"], 0);
    assert!(info["granted"] >= before_ms && info["granted"] <= after_ms);
    assert_eq!(info["extends"], 0);
    assert_eq!(info["holders"], 1);
    // Six integer fields from the first version, `holders`, and the text
    // field `mode` (which `info` leaves out).
    assert_eq!(info.len(), 7);
    assert_eq!(extend(&mut con, "k", "secret-token", 10_000), 1);
    // A renewal by the holder counts as an extension too.
    acquire(&mut con, "k", 10_000, Some("secret-token")).unwrap();
    let again = crate::info(&mut con, "k").unwrap();
    assert_eq!(again["extends"], 2);
    assert_eq!(again["granted"], info["granted"]);
    assert_eq!(again["fence"], fence as i64);
    let raw: Value = redis::cmd("LOCK.INFO").arg("k").query(&mut con).unwrap();
    assert!(!format!("{raw:?}").contains("secret-token"));
}

#[test]
fn info_is_a_map_on_resp3_and_a_flat_array_on_resp2() {
    use std::io::{Read, Write};
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k", 10_000, Some("t")).unwrap();
    let read_reply = |hello: &str| {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        stream
            .write_all(format!("HELLO {hello}\r\n").as_bytes())
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut buf = [0u8; 4096];
        let _ = stream.read(&mut buf).unwrap();
        stream.write_all(b"LOCK.INFO k\r\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let n = stream.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).to_string()
    };
    let resp3 = read_reply("3");
    assert!(resp3.starts_with("%8\r\n"), "{resp3:?}");
    assert!(
        resp3.contains("$4\r\nmode\r\n$9\r\nexclusive\r\n"),
        "{resp3:?}"
    );
    assert!(resp3.contains("$5\r\nfence\r\n:"), "{resp3:?}");
    let resp2 = read_reply("2");
    assert!(resp2.starts_with("*16\r\n"), "{resp2:?}");
    assert!(resp2.contains("$7\r\nwaiters\r\n:0\r\n"), "{resp2:?}");
}

#[test]
fn other_types_get_wrongtype_and_are_untouched() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut con).unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg("s")
        .arg(100_000)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("l")
        .arg("a")
        .query(&mut con)
        .unwrap();
    let before = digest(&mut con);
    for key in ["s", "l"] {
        for cmd in [
            redis::cmd("LOCK.ACQUIRE").arg(key).arg(1000).clone(),
            redis::cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(1000)
                .arg("TOKEN")
                .arg("v")
                .clone(),
            redis::cmd("LOCK.EXTEND")
                .arg(key)
                .arg("v")
                .arg(1000)
                .clone(),
            redis::cmd("LOCK.RELEASE").arg(key).arg("v").clone(),
            redis::cmd("LOCK.INFO").arg(key).clone(),
        ] {
            let err = error_of(&mut con, &cmd);
            assert!(err.starts_with("WRONGTYPE"), "{err}");
        }
    }
    assert_eq!(digest(&mut con), before);
    assert!(pttl(&mut con, "s") > 90_000);
    assert_eq!(
        redis::cmd("TYPE")
            .arg("s")
            .query::<String>(&mut con)
            .unwrap(),
        "string"
    );
}

#[test]
fn lock_key_has_its_own_type_and_plain_commands_see_it_as_such() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k", 10_000, Some("t")).unwrap();
    assert_eq!(
        redis::cmd("TYPE")
            .arg("k")
            .query::<String>(&mut con)
            .unwrap(),
        "redislock"
    );
    let err = error_of(&mut con, redis::cmd("GET").arg("k"));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    // COPY would put one fence under two keys: refused.
    let err = error_of(&mut con, redis::cmd("COPY").arg("k").arg("k2"));
    assert!(err.starts_with("ERR"), "{err}");
    assert!(!exists(&mut con, "k2"));
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert!(usage > 0);
}

#[test]
fn fences_strictly_increase_across_keys() {
    let server = Server::start();
    let mut con = server.conn();
    let mut last = 0;
    for i in 0..300 {
        let key = format!("k{}", i % 7);
        let (token, fence) = acquire(&mut con, &key, 10_000, None).unwrap();
        assert!(fence > last, "fence {fence} after {last}");
        last = fence;
        assert_eq!(release(&mut con, &key, &token), 1);
    }
}

#[test]
fn fence_is_at_least_the_server_clock_in_microseconds() {
    let server = Server::start();
    let mut con = server.conn();
    let before = now_us();
    let (_, fence) = acquire(&mut con, "k", 10_000, None).unwrap();
    assert!(fence >= before, "fence {fence} below clock {before}");
    assert!(fence < 1 << 53);
}

#[test]
fn works_inside_multi_exec() {
    let server = Server::start();
    let mut con = server.conn();
    type Replies = ((String, u64), Option<(String, u64)>, i64, Vec<Value>, i64);
    let (grant, refused, extended, info_reply, released): Replies = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(10_000)
        .arg("TOKEN")
        .arg("a")
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(10_000)
        .arg("TOKEN")
        .arg("b")
        .cmd("LOCK.EXTEND")
        .arg("k")
        .arg("a")
        .arg(20_000)
        .cmd("LOCK.INFO")
        .arg("k")
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(grant.0, "a");
    assert_eq!(refused, None);
    assert_eq!(extended, 1);
    assert_eq!(info_reply.len(), 16);
    assert_eq!(released, 1);
    assert_eq!(info(&mut con, "k"), None);
}

#[test]
fn works_from_lua() {
    let server = Server::start();
    let mut con = server.conn();
    let script = r#"
        local grant = redis.call('LOCK.ACQUIRE', KEYS[1], 10000, 'TOKEN', ARGV[1])
        local refused = redis.call('LOCK.ACQUIRE', KEYS[1], 10000, 'TOKEN', 'other')
        local extended = redis.call('LOCK.EXTEND', KEYS[1], ARGV[1], 20000)
        return {grant[1], grant[2], tostring(refused), extended}
    "#;
    let (token, fence, refused, extended): (String, u64, String, i64) = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("k")
        .arg("lua-token")
        .query(&mut con)
        .unwrap();
    assert_eq!(token, "lua-token");
    assert_eq!(info(&mut con, "k").unwrap()["fence"], fence as i64);
    assert_eq!(refused, "false");
    assert_eq!(extended, 1);
    assert!(pttl(&mut con, "k") > 19_000);
}

#[test]
fn command_flags_and_key_positions() {
    let server = Server::start();
    let mut con = server.conn();
    let reply: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("lock.acquire")
        .arg("lock.extend")
        .arg("lock.release")
        .arg("lock.info")
        .query(&mut con)
        .unwrap();
    let mut seen = std::collections::HashMap::new();
    for entry in reply {
        let Value::Array(fields) = entry else {
            panic!("{entry:?}")
        };
        let name = match &fields[0] {
            Value::BulkString(b) => String::from_utf8_lossy(b).to_string(),
            v => panic!("{v:?}"),
        };
        let flags: Vec<String> = match &fields[2] {
            Value::Array(f) | Value::Set(f) => f
                .iter()
                .map(|v| match v {
                    Value::SimpleString(s) => s.clone(),
                    Value::BulkString(b) => String::from_utf8_lossy(b).to_string(),
                    Value::Okay => "ok".into(),
                    v => panic!("{v:?}"),
                })
                .collect(),
            v => panic!("{v:?}"),
        };
        let keys: Vec<i64> = fields[3..6]
            .iter()
            .map(|v| match v {
                Value::Int(i) => *i,
                v => panic!("{v:?}"),
            })
            .collect();
        assert_eq!(keys, vec![1, 1, 1], "{name}");
        seen.insert(name, flags);
    }
    let has = |name: &str, flag: &str| seen[name].iter().any(|f| f == flag);
    for name in ["lock.acquire", "lock.extend"] {
        assert!(
            has(name, "write") && has(name, "denyoom") && has(name, "fast"),
            "{name}: {:?}",
            seen[name]
        );
    }
    assert!(has("lock.release", "write") && has("lock.release", "fast"));
    assert!(
        !has("lock.release", "denyoom"),
        "{:?}",
        seen["lock.release"]
    );
    assert!(has("lock.info", "readonly") && has("lock.info", "fast"));
    assert!(!has("lock.info", "write"));
}

#[test]
fn under_oom_acquire_is_refused_but_release_still_works() {
    let server = Server::start_with(&["--maxmemory-policy", "noeviction"]);
    let mut con = server.conn();
    acquire(&mut con, "held", 60_000, Some("me")).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut con)
        .unwrap();
    let err = error_of(&mut con, redis::cmd("LOCK.ACQUIRE").arg("new").arg(1000));
    assert!(err.starts_with("OOM"), "{err}");
    let err = error_of(
        &mut con,
        redis::cmd("LOCK.EXTEND").arg("held").arg("me").arg(1000),
    );
    assert!(err.starts_with("OOM"), "{err}");
    assert_eq!(release(&mut con, "held", "me"), 1);
    assert!(info(&mut con, "held").is_none());
}

#[test]
fn setstate_is_refused_from_a_client() {
    let server = Server::start();
    let mut con = server.conn();
    let before = digest(&mut con);
    let err = error_of(
        &mut con,
        redis::cmd("LOCK.SETSTATE").arg("k").arg("t").arg(5).arg(-1),
    );
    assert!(err.starts_with("ERR LOCK.SETSTATE is internal"), "{err}");
    assert_eq!(digest(&mut con), before);
    assert_eq!(info(&mut con, "k"), None);
}

#[test]
fn watch_is_woken_by_a_grant_but_not_by_a_refusal() {
    let server = Server::start();
    let mut con = server.conn();
    let mut other = server.conn();
    acquire(&mut con, "k", 10_000, Some("a")).unwrap();
    // A refused ACQUIRE changes nothing, so a WATCHer's EXEC still runs.
    let _: () = redis::cmd("WATCH").arg("k").query(&mut con).unwrap();
    assert_eq!(acquire(&mut other, "k", 10_000, Some("b")), None);
    let r: Option<(String,)> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
    assert!(r.is_some(), "EXEC aborted by a refused ACQUIRE");
    // A release does change the key.
    let _: () = redis::cmd("WATCH").arg("k").query(&mut con).unwrap();
    assert_eq!(release(&mut other, "k", "a"), 1);
    let r: Option<(String,)> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
    assert!(r.is_none(), "EXEC ran although the lock was released");
}

#[test]
fn module_is_listed_as_lock() {
    let server = Server::start();
    let mut con = server.conn();
    let list: Vec<Vec<Value>> = redis::cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    let text = format!("{list:?}");
    assert!(text.contains("\"lock\"") || text.contains("lock"), "{text}");
    assert!(
        server.log().contains("Module 'lock' loaded"),
        "{}",
        server.log()
    );
}

#[test]
fn rename_moves_the_lock_and_its_lease() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "old", 30_000, Some("me")).unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("old")
        .arg("new")
        .query(&mut con)
        .unwrap();
    assert_eq!(info(&mut con, "old"), None);
    let moved = info(&mut con, "new").unwrap();
    assert_eq!(moved["fence"], fence as i64);
    assert!(moved["ttl"] > 25_000);
    assert_eq!(release(&mut con, "new", "me"), 1);
}

#[test]
fn persist_leaves_a_lock_without_deadline_and_info_says_so() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "k", 30_000, Some("me")).unwrap();
    let _: i64 = redis::cmd("PERSIST").arg("k").query(&mut con).unwrap();
    let held = info(&mut con, "k").unwrap();
    assert_eq!((held["ttl"], held["deadline"]), (-1, -1));
    // The holder can put a lease back on it.
    assert_eq!(extend(&mut con, "k", "me", 5_000), 1);
    assert!(info(&mut con, "k").unwrap()["ttl"] > 0);
}

#[test]
fn migrate_moves_token_fence_and_lease_to_another_server() {
    let source = Server::start();
    let target = Server::start();
    let mut src = source.conn();
    let mut dst = target.conn();
    let (_, fence) = acquire(&mut src, "k", 30_000, Some("me")).unwrap();
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("k")
        .arg(0)
        .arg(5_000)
        .query(&mut src)
        .unwrap();
    assert_eq!(info(&mut src, "k"), None);
    let moved = info(&mut dst, "k").unwrap();
    assert_eq!(moved["fence"], fence as i64);
    assert!(moved["ttl"] > 25_000);
    assert_eq!(acquire(&mut dst, "k", 1_000, Some("other")), None);
    // The target's own fences continue above the migrated one.
    let (_, next) = acquire(&mut dst, "k2", 1_000, None).unwrap();
    assert!(next > fence);
    assert_eq!(release(&mut dst, "k", "me"), 1);
}
