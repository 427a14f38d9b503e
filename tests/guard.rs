//! `LOCK.GUARD key token command [arg ...]`: a write (or read) that runs only
//! while `token` holds `key`, in the same atomic step as the check. Every
//! row of docs/commands.md's GUARD section, with garbage, protocols,
//! transactions, scripts, ACLs, OOM, a replica and an AOF reload.
//! (Cluster routing and CROSSSLOT are in tests/cluster.rs.)

mod common;
use common::*;

use std::collections::HashMap;
use std::time::Duration;

fn guard(
    con: &mut Connection,
    key: &str,
    token: &str,
    command: &[&str],
) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("LOCK.GUARD");
    cmd.arg(key).arg(token);
    for arg in command {
        cmd.arg(*arg);
    }
    cmd.query(con)
}

fn guard_error(con: &mut Connection, key: &str, token: &str, command: &[&str]) -> String {
    let mut cmd = redis::cmd("LOCK.GUARD");
    cmd.arg(key).arg(token);
    for arg in command {
        cmd.arg(*arg);
    }
    error_of(con, &cmd)
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

fn counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap()
}

/// The module lends a command's arguments from the stack up to 16 and from
/// the heap past that, and passes a guarded command's arguments one by one
/// up to 8 and as a vector past that: every length on both sides of both
/// limits reaches the command whole and in order.
#[test]
fn guarded_commands_of_every_length_get_every_argument_in_order() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    // No argument at all: the command's own reply.
    assert_eq!(
        guard(&mut con, "lk", "me", &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    // RPUSH l 1 … n: 1 to 20 arguments after the command's name, so
    // LOCK.GUARD itself has up to 24.
    for n in 0..20usize {
        let list = format!("l{n}");
        let items: Vec<String> = (1..=n).map(|i| format!("{n}-{i}")).collect();
        let mut command = vec!["RPUSH", list.as_str()];
        command.extend(items.iter().map(String::as_str));
        if n == 0 {
            // RPUSH needs an element: the command's own arity error.
            let error = guard_error(&mut con, "lk", "me", &command);
            assert!(error.contains("wrong number of arguments"), "{error}");
            continue;
        }
        assert_eq!(
            guard(&mut con, "lk", "me", &command).unwrap(),
            Value::Int(n as i64),
            "{n} elements"
        );
        let stored: Vec<String> = redis::cmd("LRANGE")
            .arg(&list)
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(stored, items, "{n} elements");
    }
    // A long command of the module itself (past 16 arguments) is parsed
    // whole: garbage at its end is still refused, and nothing changes.
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg("other").arg(1000);
    for _ in 0..8 {
        cmd.arg("TOKEN").arg("t");
    }
    cmd.arg("NOSUCHOPTION");
    let error = error_of(&mut con, &cmd);
    assert!(error.starts_with("ERR"), "{error}");
    assert!(!exists(&mut con, "other"));
}

#[test]
fn the_holder_writes_and_gets_the_commands_own_reply() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    assert_eq!(
        guard(&mut con, "lk", "me", &["SET", "data", "v"]).unwrap(),
        Value::Okay
    );
    assert_eq!(get(&mut con, "data").as_deref(), Some("v"));
    assert_eq!(
        guard(&mut con, "lk", "me", &["INCRBY", "n", "5"]).unwrap(),
        Value::Int(5)
    );
    assert_eq!(
        guard(&mut con, "lk", "me", &["GET", "data"]).unwrap(),
        Value::BulkString(b"v".to_vec())
    );
    assert_eq!(
        guard(&mut con, "lk", "me", &["GET", "missing"]).unwrap(),
        Value::Nil
    );
    assert_eq!(counter(&mut con, "guards"), 4);
    assert_eq!(counter(&mut con, "guards_lost"), 0);
}

#[test]
fn a_foreign_token_gets_lost_and_nothing_runs() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let digest_before = digest(&mut con);
    let error = guard_error(&mut con, "lk", "other", &["SET", "data", "v"]);
    assert!(error.starts_with("LOST "), "{error}");
    assert!(error.contains("another token"), "{error}");
    assert_eq!(get(&mut con, "data"), None);
    assert_eq!(digest(&mut con), digest_before);
    assert_eq!(counter(&mut con, "guards_lost"), 1);
    assert_eq!(counter(&mut con, "guards"), 0);
}

#[test]
fn a_free_expired_or_deleted_lock_gets_lost_and_nothing_runs() {
    let server = Server::start();
    let mut con = server.conn();
    // Never held.
    let error = guard_error(&mut con, "lk", "me", &["SET", "data", "v"]);
    assert!(
        error.starts_with("LOST ") && error.contains("free"),
        "{error}"
    );
    // Released.
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    assert_eq!(release(&mut con, "lk", "me"), 1);
    let error = guard_error(&mut con, "lk", "me", &["SET", "data", "v"]);
    assert!(error.starts_with("LOST "), "{error}");
    // Expired.
    acquire(&mut con, "lk", 50, Some("me")).unwrap();
    std::thread::sleep(Duration::from_millis(120));
    let error = guard_error(&mut con, "lk", "me", &["SET", "data", "v"]);
    assert!(error.starts_with("LOST "), "{error}");
    // Deleted.
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let _: i64 = redis::cmd("DEL").arg("lk").query(&mut con).unwrap();
    let error = guard_error(&mut con, "lk", "me", &["SET", "data", "v"]);
    assert!(error.starts_with("LOST "), "{error}");
    assert_eq!(get(&mut con, "data"), None);
    assert_eq!(counter(&mut con, "guards_lost"), 4);
}

#[test]
fn a_key_of_another_type_is_wrongtype_and_nothing_runs() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET")
        .arg("lk")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let error = guard_error(&mut con, "lk", "me", &["SET", "data", "v"]);
    assert!(error.starts_with("WRONGTYPE"), "{error}");
    assert_eq!(get(&mut con, "data"), None);
}

#[test]
fn a_guarded_command_renews_nothing_and_takes_no_fence() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, fence) = acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let before = info(&mut con, "lk").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    for _ in 0..5 {
        guard(&mut con, "lk", "me", &["INCR", "n"]).unwrap();
    }
    let after = info(&mut con, "lk").unwrap();
    assert_eq!(after["fence"], fence as i64);
    assert_eq!(after["deadline"], before["deadline"]);
    assert_eq!(after["extends"], before["extends"]);
    assert!(after["ttl"] < 60_000);
    let high_water = info_field(&mut con, "lock", "lock_fence_high_water");
    assert_eq!(high_water.parse::<u64>().unwrap(), fence);
}

#[test]
fn errors_of_the_guarded_command_come_back_as_its_own() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("text")
        .query(&mut con)
        .unwrap();
    let error = guard_error(&mut con, "lk", "me", &["LPUSH", "s", "x"]);
    assert!(error.starts_with("WRONGTYPE"), "{error}");
    let error = guard_error(&mut con, "lk", "me", &["INCR", "s"]);
    assert!(error.starts_with("ERR value is not an integer"), "{error}");
    let error = guard_error(&mut con, "lk", "me", &["GET"]);
    assert!(
        error.starts_with("ERR wrong number of arguments for 'get'"),
        "{error}"
    );
    let error = guard_error(&mut con, "lk", "me", &["NOSUCHCOMMAND", "a"]);
    assert!(error.starts_with("ERR unknown command"), "{error}");
    // And the lock is untouched by any of them.
    let lock = info(&mut con, "lk").unwrap();
    assert_eq!(lock["extends"], 0);
    assert_eq!(get(&mut con, "s").as_deref(), Some("text"));
}

#[test]
fn blocking_transaction_pubsub_and_lock_commands_are_refused_and_nothing_runs() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let digest_before = digest(&mut con);
    for (command, expected) in [
        (
            &["BLPOP", "q", "1"][..],
            "ERR blocking commands are not allowed in LOCK.GUARD",
        ),
        (&["BRPOPLPUSH", "q", "r", "1"], "ERR blocking commands"),
        (
            &["XREAD", "BLOCK", "10", "STREAMS", "st", "$"],
            "ERR blocking commands",
        ),
        (&["WAIT", "1", "10"], "ERR "),
        (&["MULTI"], "ERR this command is not allowed in LOCK.GUARD"),
        (&["EXEC"], "ERR this command is not allowed in LOCK.GUARD"),
        (
            &["WATCH", "data"],
            "ERR this command is not allowed in LOCK.GUARD",
        ),
        (
            &["UNWATCH"],
            "ERR this command is not allowed in LOCK.GUARD",
        ),
        (
            &["DISCARD"],
            "ERR this command is not allowed in LOCK.GUARD",
        ),
        (
            &["SUBSCRIBE", "ch"],
            "ERR this command is not allowed in LOCK.GUARD",
        ),
        (
            &["PSUBSCRIBE", "ch*"],
            "ERR this command is not allowed in LOCK.GUARD",
        ),
        (
            &["LOCK.RELEASE", "lk", "me"],
            "ERR lock commands are not allowed in LOCK.GUARD",
        ),
        (
            &["lock.guard", "lk", "me", "SET", "a", "b"],
            "ERR lock commands are not allowed",
        ),
        (
            &["LOCK.ACQUIRE", "other", "1000"],
            "ERR lock commands are not allowed",
        ),
    ] {
        let error = guard_error(&mut con, "lk", "me", command);
        assert!(error.starts_with(expected), "{command:?}: {error}");
        assert!(error.contains("LOCK.GUARD"), "{command:?}: {error}");
    }
    assert_eq!(digest(&mut con), digest_before);
    assert!(info(&mut con, "lk").is_some());
    // A refused command is refused whoever asks, before the lock is looked at.
    let error = guard_error(&mut con, "free", "me", &["BLPOP", "q", "1"]);
    assert!(error.starts_with("ERR blocking"), "{error}");
}

/// The server reads a command's name up to its first NUL byte: a guarded
/// `SET\0x` would run `SET`. It is refused, and nothing panics or is
/// logged, whoever asks and whatever the lock.
#[test]
fn a_command_name_with_a_nul_byte_is_refused_without_a_panic() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let digest_before = digest(&mut con);
    for name in [&b"SET\0"[..], b"SET\0x", b"\0", b"EVAL\0"] {
        for (key, token) in [("lk", "me"), ("lk", "other"), ("free", "me")] {
            let error = error_of(
                &mut con,
                redis::cmd("LOCK.GUARD")
                    .arg(key)
                    .arg(token)
                    .arg(name)
                    .arg("k")
                    .arg("v"),
            );
            assert!(
                error.starts_with("ERR unknown command in LOCK.GUARD"),
                "{name:?}: {error}"
            );
        }
    }
    assert_eq!(digest(&mut con), digest_before);
    assert!(!server.log().contains("panic"), "{}", server.log());
}

/// `XREAD` and `XREADGROUP` are flagged `blocking`, but only their `BLOCK`
/// form blocks: the plain form is a read like any other.
#[test]
fn xread_without_block_is_guarded_like_any_read() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let _: String = redis::cmd("XADD")
        .arg(&["st", "1-1", "f", "v"])
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "st", "g", "0"])
        .query(&mut con)
        .unwrap();
    let read = guard(
        &mut con,
        "lk",
        "me",
        &["XREAD", "COUNT", "1", "STREAMS", "st", "0"],
    );
    assert!(
        matches!(read, Ok(Value::Array(ref a)) if a.len() == 1),
        "{read:?}"
    );
    let group = guard(
        &mut con,
        "lk",
        "me",
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "st", ">"],
    );
    assert!(
        matches!(group, Ok(Value::Array(ref a)) if a.len() == 1),
        "{group:?}"
    );
    for blocking in [
        &["XREAD", "BLOCK", "10", "STREAMS", "st", "$"][..],
        &["xread", "count", "1", "block", "10", "streams", "st", "$"],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "10",
            "STREAMS",
            "st",
            ">",
        ],
    ] {
        let error = guard_error(&mut con, "lk", "me", blocking);
        assert!(error.starts_with("ERR blocking"), "{blocking:?}: {error}");
    }
}

#[test]
fn garbage_arguments_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let digest_before = digest(&mut con);
    let long = "x".repeat(257);
    for args in [
        vec![],
        vec!["lk"],
        vec!["lk", "me"],
        vec!["lk", "", "SET", "data", "v"],
        vec!["lk", long.as_str(), "SET", "data", "v"],
    ] {
        let mut cmd = redis::cmd("LOCK.GUARD");
        for arg in &args {
            cmd.arg(*arg);
        }
        let error = error_of(&mut con, &cmd);
        assert!(error.starts_with("ERR "), "{args:?}: {error}");
    }
    let error = error_of(&mut con, &redis::cmd("LOCK.GUARD"));
    assert!(error.contains("wrong number of arguments"), "{error}");
    let error = guard_error(&mut con, "lk", "", &["SET", "data", "v"]);
    assert!(error.contains("token must be 1 to 256 bytes"), "{error}");
    assert_eq!(digest(&mut con), digest_before);
    assert_eq!(counter(&mut con, "guards"), 0);
}

#[test]
fn the_reply_is_in_the_clients_protocol() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    guard(&mut con, "lk", "me", &["HSET", "h", "a", "1", "b", "2"]).unwrap();
    // RESP2: a flat array.
    match guard(&mut con, "lk", "me", &["HGETALL", "h"]).unwrap() {
        Value::Array(items) => assert_eq!(items.len(), 4),
        other => panic!("RESP2 HGETALL: {other:?}"),
    }
    // RESP3: a map, as HGETALL itself replies.
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", server.port)).unwrap();
    let mut resp3 = client.get_connection().unwrap();
    match guard(&mut resp3, "lk", "me", &["HGETALL", "h"]).unwrap() {
        Value::Map(pairs) => assert_eq!(pairs.len(), 2),
        other => panic!("RESP3 HGETALL: {other:?}"),
    }
    match redis::cmd("HGETALL")
        .arg("h")
        .query::<Value>(&mut resp3)
        .unwrap()
    {
        Value::Map(pairs) => assert_eq!(pairs.len(), 2),
        other => panic!("bare RESP3 HGETALL: {other:?}"),
    }
}

/// A script that writes (so that a `SYNC` reply waits), then returns one
/// of each reply a script can make, nested: a bulk with NUL and CRLF bytes,
/// integers, a status, an error, a null, arrays in arrays, an empty array,
/// a map, a set, a double, a big number, a verbatim string (RESP3 kinds,
/// which a RESP2 client gets as the server converts them).
const EVERY_KIND: &str = r"
redis.call('INCR', KEYS[1])
return {'a\0b\r\nc\255', -7, {ok='fine'}, {err='ERR nested failure'}, false,
  {1, {2, {'deep', {}}}}, {map={k='v'}}, {set={x=true}}, {double=3.5},
  {big_number='123456789012345678901234567890'},
  {verbatim_string={format='txt', string='v\0\r\n'}}}";

/// Booleans, which a script returns as such only in RESP3 mode.
const BOOLEANS: &str = "redis.setresp(3) redis.call('INCR', KEYS[1]) return {true, false}";

/// The reply of a guarded command that waits for its replica is sent from
/// a copy (the server's own does not outlive the command): byte for byte
/// what the command itself replies, and what an unsynced guard replies,
/// in RESP2 and RESP3, for every kind of reply and nesting.
#[test]
fn a_synced_reply_is_the_commands_own_byte_for_byte_in_resp2_and_resp3() {
    let (master, _replica) = pair();
    let mut con = master.conn();
    acquire(&mut con, "lk", 600_000, Some("me")).unwrap();
    let binary: &[u8] = b"a\x00b\r\nc\xff";
    let _: () = redis::cmd("SET")
        .arg("bin")
        .arg(binary)
        .query(&mut con)
        .unwrap();
    // Room for the replica's acknowledgement, under memcheck too.
    let synced = scaled(Duration::from_secs(10)).as_millis().to_string();
    let commands: [&[&[u8]]; 5] = [
        // The old value: the bulk with NUL and CRLF bytes.
        &[b"SET", b"bin", binary, b"GET"],
        &[b"SET", b"plain", b"v"],
        &[b"EVAL", EVERY_KIND.as_bytes(), b"1", b"n"],
        &[b"EVAL", BOOLEANS.as_bytes(), b"1", b"n"],
        // A null array (`*-1` in RESP2).
        &[b"LMPOP", b"1", b"no-list", b"LEFT"],
    ];
    let syncs_before = counter(&mut con, "syncs");
    for protocol in [2, 3] {
        let mut raw = resp::RawClient::connect(&master);
        if protocol == 3 {
            let (hello, _) = raw.call(&[b"HELLO", b"3"]);
            assert!(matches!(hello, resp::Resp::Map(_)), "{hello:?}");
        }
        for command in commands {
            let (decoded, direct) = raw.call(command);
            let guarded = [&[b"LOCK.GUARD" as &[u8], b"lk", b"me"], command].concat();
            let (_, unsynced) = raw.call(&guarded);
            let with_sync = [
                &[
                    b"LOCK.GUARD" as &[u8],
                    b"lk",
                    b"me",
                    b"SYNC",
                    b"1",
                    synced.as_bytes(),
                ],
                command,
            ]
            .concat();
            let (_, synced_reply) = raw.call(&with_sync);
            let name = String::from_utf8_lossy(command[0]);
            let shown = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            assert!(
                !matches!(decoded, resp::Resp::Error(_)),
                "{name}: {decoded:?}"
            );
            assert_eq!(shown(&unsynced), shown(&direct), "RESP{protocol} {name}");
            assert_eq!(
                synced_reply,
                direct,
                "RESP{protocol} {name}: {:?}",
                shown(&synced_reply)
            );
        }
    }
    // Every synced one waited for the replica, and was answered from a copy.
    assert_eq!(counter(&mut con, "syncs"), syncs_before + 10);
    assert_eq!(counter(&mut con, "sync_timeouts"), 0);
}

/// `MULTI`, the commands, `EXEC`. The client reports an error inside
/// `EXEC`'s reply as the error of the whole call: its text is returned, and
/// the data tells which commands ran.
fn transaction(con: &mut Connection, commands: &[redis::Cmd]) -> Result<Value, String> {
    let _: () = redis::cmd("MULTI").query(con).unwrap();
    for command in commands {
        let queued: String = command.query(con).unwrap();
        assert_eq!(queued, "QUEUED");
    }
    redis::cmd("EXEC")
        .query::<Value>(con)
        .map_err(|e| e.to_string())
}

fn guard_cmd(key: &str, token: &str, command: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.GUARD");
    cmd.arg(key).arg(token).arg(command);
    cmd
}

#[test]
fn guarded_writes_in_multi_are_each_checked_at_exec() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let replies = transaction(
        &mut con,
        &[
            guard_cmd("lk", "me", &["SET", "a", "1"]),
            guard_cmd("lk", "other", &["SET", "b", "2"]),
            guard_cmd("lk", "me", &["SET", "c", "3"]),
        ],
    );
    let error = replies.unwrap_err();
    assert!(error.starts_with("LOST"), "{error}");
    // The first and the third ran, the second did not.
    assert_eq!(get(&mut con, "a").as_deref(), Some("1"));
    assert_eq!(get(&mut con, "b"), None);
    assert_eq!(get(&mut con, "c").as_deref(), Some("3"));
    // A release queued before the guard in the same transaction: LOST at EXEC.
    let mut release = redis::cmd("LOCK.RELEASE");
    release.arg("lk").arg("me");
    let replies = transaction(
        &mut con,
        &[release, guard_cmd("lk", "me", &["SET", "d", "4"])],
    );
    let error = replies.unwrap_err();
    assert!(error.starts_with("LOST"), "{error}");
    assert_eq!(info(&mut con, "lk"), None, "the release ran");
    assert_eq!(get(&mut con, "d"), None);
    // All holding: every reply is the command's own.
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let replies = transaction(
        &mut con,
        &[
            guard_cmd("lk", "me", &["INCR", "n"]),
            guard_cmd("lk", "me", &["INCR", "n"]),
        ],
    );
    assert_eq!(
        replies,
        Ok(Value::Array(vec![Value::Int(1), Value::Int(2)]))
    );
}

#[test]
fn guard_runs_from_lua_and_functions_but_starts_no_script_there() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let script = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'SET', KEYS[2], ARGV[2])";
    let reply: String = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("lk")
        .arg("data")
        .arg("me")
        .arg("from-lua")
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, "OK");
    assert_eq!(get(&mut con, "data").as_deref(), Some("from-lua"));
    let error = error_of(
        &mut con,
        redis::cmd("EVAL")
            .arg(script)
            .arg(2)
            .arg("lk")
            .arg("data")
            .arg("nope")
            .arg("x"),
    );
    assert!(error.contains("LOST"), "{error}");
    assert_eq!(get(&mut con, "data").as_deref(), Some("from-lua"));
    // A script cannot start another: refused, and the server lives on.
    let nested = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'EVAL', 'return 1', 0)";
    let error = error_of(
        &mut con,
        redis::cmd("EVAL").arg(nested).arg(1).arg("lk").arg("me"),
    );
    assert!(
        error.contains("scripts are not allowed in LOCK.GUARD"),
        "{error}"
    );
    let _: String = redis::cmd("PING").query(&mut con).unwrap();
}

#[test]
fn evalsha_and_fcall_change_several_keys_under_one_check() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(
            "redis.call('SET', KEYS[1], ARGV[1]); redis.call('INCRBY', KEYS[2], ARGV[2]); return 7",
        )
        .query(&mut con)
        .unwrap();
    let reply = guard(
        &mut con,
        "lk",
        "me",
        &["EVALSHA", &sha, "2", "day", "total", "2026-12-01", "40"],
    )
    .unwrap();
    assert_eq!(reply, Value::Int(7));
    assert_eq!(get(&mut con, "day").as_deref(), Some("2026-12-01"));
    assert_eq!(get(&mut con, "total").as_deref(), Some("40"));
    let error = guard_error(
        &mut con,
        "lk",
        "late",
        &["EVALSHA", &sha, "2", "day", "total", "x", "1"],
    );
    assert!(error.starts_with("LOST"), "{error}");
    assert_eq!(get(&mut con, "total").as_deref(), Some("40"));
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=billing\nredis.register_function('add', function(keys, args) return redis.call('INCRBY', keys[1], args[1]) end)")
        .query(&mut con)
        .unwrap();
    let reply = guard(&mut con, "lk", "me", &["FCALL", "add", "1", "total", "2"]).unwrap();
    assert_eq!(reply, Value::Int(42));
}

#[test]
fn command_getkeys_lists_the_lock_key_and_the_guarded_keys() {
    let server = Server::start();
    let mut con = server.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.GUARD")
        .arg("lk")
        .arg("tok")
        .arg("SET")
        .arg("data")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["lk", "data"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.GUARD")
        .arg("lk")
        .arg("tok")
        .arg("MSET")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["lk", "a", "b"]);
    // Incomplete or unknown: the lock key alone, and the server lives on.
    for args in [
        &["lk"][..],
        &["lk", "tok"],
        &["lk", "tok", "NOSUCH", "x"],
        &["lk", "tok", "GET"],
    ] {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg("LOCK.GUARD")
            .arg(args)
            .query(&mut con)
            .unwrap();
        assert_eq!(keys, ["lk"], "{args:?}");
    }
    // Cluster clients route by the first key of the key spec: the lock key.
    let info: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("LOCK.GUARD")
        .query(&mut con)
        .unwrap();
    match &info[0] {
        Value::Array(fields) => {
            assert_eq!(fields[3], Value::Int(1), "first key");
            assert_eq!(fields[4], Value::Int(1), "last key");
        }
        other => panic!("COMMAND INFO: {other:?}"),
    }
}

#[test]
fn acl_key_patterns_see_every_key_of_the_guarded_command() {
    let server = Server::start();
    let mut admin = server.conn();
    acquire(&mut admin, "lock:billing", 60_000, Some("me")).unwrap();
    let _: () = redis::cmd("SET")
        .arg("ro:rate")
        .arg("3")
        .query(&mut admin)
        .unwrap();
    for (user, rules) in [
        // Locks only: GUARD cannot reach other keys.
        ("locks-only", &["on", ">pw", "~lock:*", "+@all"][..]),
        // May read data:* and ro:* but not write them.
        (
            "reader",
            &["on", ">pw", "~lock:*", "%R~data:*", "%R~ro:*", "+@all"],
        ),
        // Every key, but not the SET command.
        ("no-set", &["on", ">pw", "~*", "+@all", "-set"]),
    ] {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg(user);
        for rule in rules {
            cmd.arg(*rule);
        }
        let _: () = cmd.query(&mut admin).unwrap();
    }
    let login = |user: &str, pass: &str| {
        let mut con = server.conn();
        let _: () = redis::cmd("AUTH")
            .arg(user)
            .arg(pass)
            .query(&mut con)
            .unwrap();
        con
    };
    let mut locks_only = login("locks-only", "pw");
    let error = guard_error(
        &mut locks_only,
        "lock:billing",
        "me",
        &["SET", "data:total", "1"],
    );
    assert!(error.starts_with("NOPERM"), "{error}");
    let mut reader = login("reader", "pw");
    let error = guard_error(
        &mut reader,
        "lock:billing",
        "me",
        &["SET", "data:total", "1"],
    );
    assert!(error.starts_with("NOPERM"), "{error}");
    assert_eq!(
        guard(&mut reader, "lock:billing", "me", &["GET", "ro:rate"]).unwrap(),
        Value::BulkString(b"3".to_vec())
    );
    let mut no_set = login("no-set", "pw");
    let error = guard_error(
        &mut no_set,
        "lock:billing",
        "me",
        &["SET", "data:total", "1"],
    );
    assert!(error.starts_with("NOPERM"), "{error}");
    assert_eq!(get(&mut admin, "data:total"), None);
    assert!(info(&mut admin, "lock:billing").is_some());
    // LOCK.GUARD_RO reports the same keys: the reader reads its keys, and
    // the lock-only user still reaches nothing else.
    let read_only = |con: &mut Connection, command: &[&str]| {
        let mut cmd = redis::cmd("LOCK.GUARD_RO");
        cmd.arg("lock:billing").arg("me").arg(command);
        cmd.query::<Value>(con)
    };
    assert_eq!(
        read_only(&mut reader, &["GET", "ro:rate"]).unwrap(),
        Value::BulkString(b"3".to_vec())
    );
    let error = read_only(&mut locks_only, &["GET", "ro:rate"]).unwrap_err();
    assert_eq!(error.code(), Some("NOPERM"), "{error}");
}

#[test]
fn under_maxmemory_a_guarded_write_is_refused_and_a_guarded_read_works() {
    let server = Server::start();
    let mut con = server.conn();
    acquire(&mut con, "lk", 60_000, Some("me")).unwrap();
    guard(&mut con, "lk", "me", &["SET", "data", "v"]).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let error = guard_error(&mut con, "lk", "me", &["SET", "data", "w"]);
    assert!(error.starts_with("OOM"), "{error}");
    let bare = error_of(&mut con, redis::cmd("SET").arg("data").arg("w"));
    assert!(bare.starts_with("OOM"), "{bare}");
    assert_eq!(
        guard(&mut con, "lk", "me", &["GET", "data"]).unwrap(),
        Value::BulkString(b"v".to_vec())
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut con)
        .unwrap();
    assert_eq!(get(&mut con, "data").as_deref(), Some("v"));
}

#[test]
fn guarded_writes_reach_the_replica_and_it_refuses_guard_itself() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "lk", 60_000, Some("me")).unwrap();
    guard(&mut m, "lk", "me", &["SET", "data", "v"]).unwrap();
    guard(&mut m, "lk", "me", &["HSET", "h", "f", "1"]).unwrap();
    guard_error(&mut m, "lk", "other", &["SET", "data", "lost"]);
    sync_replica(&master, &replica);
    assert_eq!(get(&mut r, "data").as_deref(), Some("v"));
    assert_eq!(digest(&mut r), digest(&mut m));
    let error = guard_error(&mut r, "lk", "me", &["SET", "data", "x"]);
    assert!(error.starts_with("READONLY"), "{error}");
}

#[test]
fn guarded_writes_survive_an_aof_reload_in_order_after_the_grant() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    acquire(&mut con, "lk", 600_000, Some("me")).unwrap();
    for i in 0..10 {
        guard(&mut con, "lk", "me", &["RPUSH", "log", &i.to_string()]).unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("ex")
        .arg("1")
        .arg("EX")
        .arg("600")
        .query(&mut con)
        .unwrap();
    guard(&mut con, "lk", "me", &["SET", "ttl", "1", "EX", "600"]).unwrap();
    let before = digest(&mut con);
    server.kill();
    server.restart();
    let mut con = server.conn();
    assert_eq!(digest(&mut con), before);
    let log: Vec<String> = redis::cmd("LRANGE")
        .arg("log")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(log, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
    assert!(pttl(&mut con, "ttl") > 500_000);
    let lock: HashMap<String, i64> = info(&mut con, "lk").unwrap();
    assert!(lock["ttl"] > 500_000);
}

#[test]
fn no_guard_reply_or_log_line_shows_a_token() {
    let server = Server::start();
    let mut con = server.conn();
    let secret = "guard-secret-Zq9xW";
    acquire(&mut con, "lk", 60_000, Some(secret)).unwrap();
    let mut replies = Vec::new();
    for (token, command) in [
        ("stolen-secret-Kp2", &["SET", "data", "v"][..]),
        (secret, &["BLPOP", "q", "1"]),
        (secret, &["LOCK.RELEASE", "lk", secret]),
        (secret, &["NOSUCH", "x"]),
        (secret, &["INCR", "lk"]),
    ] {
        replies.push(guard_error(&mut con, "lk", token, command));
    }
    replies.push(guard_error(&mut con, "free", secret, &["SET", "data", "v"]));
    for reply in &replies {
        assert!(
            !reply.contains("secret-Zq9xW") && !reply.contains("Kp2"),
            "{reply}"
        );
    }
    let _: i64 = redis::cmd("DEL").arg("lk").query(&mut con).unwrap();
    assert!(!server.log().contains("Zq9xW"));
}
