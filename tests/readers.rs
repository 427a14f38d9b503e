//! A reader never writes: every path a holder of a shared lock could take
//! to a write through `LOCK.GUARD` (a write command, `EVAL`, `EVALSHA`,
//! `FCALL` and `FCALL_RO`, script flags, `pcall`, a transaction, a script
//! or function that calls `LOCK.GUARD` itself, nested lock commands) is
//! refused, and the data never changes (`DEBUG DIGEST`); a reader's
//! read-only script still works. Also `LOCK.GUARD_RO`, the read-only guard
//! any holder may use, where writes are refused: a replica, `CLIENT PAUSE
//! WRITE`, `min-replicas-to-write`, `EVAL_RO`.

mod common;
use common::*;

fn run(con: &mut Connection, parts: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(parts[0]);
    for part in &parts[1..] {
        cmd.arg(*part);
    }
    cmd.query(con)
}

fn guard(con: &mut Connection, token: &str, command: &[&str]) -> redis::RedisResult<Value> {
    let mut parts = vec!["LOCK.GUARD", "rw", token];
    parts.extend_from_slice(command);
    run(con, &parts)
}

const WRITER_SCRIPT: &str = "return redis.call('SET', 'data', 'written')";
const LIBRARY: &str = "#!lua name=lib\n\
    redis.register_function('writes', function(keys, args) return redis.call('SET', 'data', 'written') end)\n\
    redis.register_function{function_name='sneaks', callback=function(keys, args) return redis.call('SET', 'data', 'written') end, flags={'no-writes'}}\n\
    redis.register_function{function_name='reads', callback=function(keys, args) return redis.call('GET', 'data') end, flags={'no-writes'}}\n\
    redis.register_function('guards', function(keys, args) return redis.call('LOCK.GUARD', 'rw', args[1], 'SET', 'data', 'written') end)";

/// Two readers hold `rw`; `data` holds `original`, `list` a list; a script
/// and a library that write are loaded.
fn readers() -> (Server, Connection, String) {
    let server = Server::start();
    let mut con = server.conn();
    for token in ["r1", "r2"] {
        run(
            &mut con,
            &["LOCK.ACQUIRE", "rw", "60000", "TOKEN", token, "SHARED"],
        )
        .unwrap();
    }
    run(&mut con, &["SET", "data", "original"]).unwrap();
    run(&mut con, &["RPUSH", "list", "b", "a"]).unwrap();
    run(&mut con, &["FUNCTION", "LOAD", LIBRARY]).unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(WRITER_SCRIPT)
        .query(&mut con)
        .unwrap();
    (server, con, sha)
}

#[test]
fn a_reader_cannot_write_through_any_command_script_or_function() {
    let (_server, mut con, sha) = readers();
    let before = digest(&mut con);
    let attempts: Vec<Vec<&str>> = vec![
        vec!["SET", "data", "written"],
        vec!["INCR", "counter"],
        vec!["DEL", "data"],
        vec!["PEXPIRE", "data", "1"],
        vec!["LPUSH", "list", "x"],
        vec!["SORT", "list", "ALPHA", "STORE", "sorted"],
        vec!["COPY", "data", "copy"],
        vec!["XADD", "stream", "*", "f", "v"],
        vec!["FLUSHALL"],
        vec!["EVAL", WRITER_SCRIPT, "0"],
        vec!["eval", WRITER_SCRIPT, "0"],
        vec![
            "EVAL",
            "#!lua\nreturn redis.call('SET', 'data', 'written')",
            "0",
        ],
        vec![
            "EVAL",
            "#!lua flags=no-writes\nreturn redis.call('SET', 'data', 'written')",
            "0",
        ],
        vec!["EVALSHA", &sha, "0"],
        vec!["FCALL", "writes", "0"],
        vec!["FCALL", "sneaks", "0"],
        vec!["FCALL_RO", "writes", "0"],
        vec!["fcall", "guards", "0", "r1"],
        vec![
            "EVAL",
            "return redis.call('LOCK.GUARD', 'rw', 'r1', 'SET', 'data', 'written')",
            "0",
        ],
        vec!["EVAL", "return redis.call('LOCK.RELEASE', 'rw', 'r1')", "0"],
        vec!["MULTI"],
    ];
    for attempt in &attempts {
        for token in ["r1", "r2"] {
            let reply = guard(&mut con, token, attempt);
            assert!(reply.is_err(), "{token} {attempt:?}: {reply:?}");
        }
    }
    // A script that swallows the refusal (`pcall`) runs, and writes nothing.
    let swallowed = guard(
        &mut con,
        "r1",
        &[
            "EVAL",
            "redis.pcall('SET', 'data', 'written') return 1",
            "0",
        ],
    );
    assert_eq!(swallowed, Ok(Value::Int(1)));
    // Also from a transaction, a script and a function of the client's own.
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let _: () = redis::cmd("LOCK.GUARD")
        .arg(&["rw", "r1", "SET", "data", "written"])
        .query(&mut con)
        .unwrap();
    // (The client reports an error inside EXEC's reply as the whole call's.)
    let exec = redis::cmd("EXEC").query::<Value>(&mut con);
    let error = exec.expect_err("refused at EXEC").to_string();
    assert!(error.contains("write is not allowed"), "{error}");
    let scripted = run(
        &mut con,
        &[
            "EVAL",
            "return redis.call('LOCK.GUARD', 'rw', 'r2', 'SET', 'data', 'written')",
            "0",
        ],
    );
    assert!(scripted.is_err(), "{scripted:?}");
    assert!(run(&mut con, &["FCALL", "guards", "0", "r2"]).is_err());

    assert_eq!(digest(&mut con), before, "a reader changed the data");
    // Both readers still hold the key: nothing released it.
    assert_eq!(info(&mut con, "rw").unwrap()["holders"], 2);
}

#[test]
fn a_readers_read_only_scripts_and_functions_still_work() {
    let (_server, mut con, _) = readers();
    let read = |con: &mut Connection, command: &[&str]| -> String {
        match guard(con, "r1", command).unwrap() {
            Value::BulkString(b) => String::from_utf8(b).unwrap(),
            other => panic!("{command:?}: {other:?}"),
        }
    };
    assert_eq!(read(&mut con, &["GET", "data"]), "original");
    assert_eq!(
        read(&mut con, &["EVAL", "return redis.call('GET', 'data')", "0"]),
        "original"
    );
    assert_eq!(
        read(
            &mut con,
            &[
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call('GET', 'data')",
                "0"
            ]
        ),
        "original"
    );
    assert_eq!(
        read(
            &mut con,
            &["EVAL_RO", "return redis.call('GET', 'data')", "0"]
        ),
        "original"
    );
    assert_eq!(read(&mut con, &["FCALL", "reads", "0"]), "original");
    assert_eq!(read(&mut con, &["FCALL_RO", "reads", "0"]), "original");
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return redis.call('GET', 'data')")
        .query(&mut con)
        .unwrap();
    assert_eq!(read(&mut con, &["EVALSHA", &sha, "0"]), "original");
    // A writer (an exclusive holder) still writes through a script.
    let (_, _) = (
        run(&mut con, &["LOCK.RELEASE", "rw", "r1"]).unwrap(),
        run(&mut con, &["LOCK.RELEASE", "rw", "r2"]).unwrap(),
    );
    run(&mut con, &["LOCK.ACQUIRE", "rw", "60000", "TOKEN", "w"]).unwrap();
    guard(&mut con, "w", &["EVAL", WRITER_SCRIPT, "0"]).unwrap();
    assert_eq!(
        redis::cmd("GET")
            .arg("data")
            .query::<String>(&mut con)
            .unwrap(),
        "written"
    );
}

#[test]
fn lock_commands_are_refused_inside_guard_at_any_depth() {
    let server = Server::start();
    let mut con = server.conn();
    run(&mut con, &["LOCK.ACQUIRE", "lk", "60000", "TOKEN", "t"]).unwrap();
    let before = digest(&mut con);
    for script in [
        "return redis.call('LOCK.RELEASE', 'lk', 't')",
        "return redis.call('LOCK.EXTEND', 'lk', 't', '1')",
        "return redis.call('LOCK.ACQUIRE', 'other', '1000')",
        "return redis.call('SEM.ACQUIRE', 'sem', '2', '1000')",
        "return redis.call('LOCK.GUARD', 'lk', 't', 'SET', 'x', '1')",
        "return redis.call('LOCK.INFO', 'lk')",
    ] {
        let error = error_of(
            &mut con,
            redis::cmd("LOCK.GUARD").arg(&["lk", "t", "EVAL", script, "0"]),
        );
        assert!(
            error.contains("lock commands are not allowed in LOCK.GUARD"),
            "{script}: {error}"
        );
    }
    assert_eq!(digest(&mut con), before);
    // Outside GUARD, a script may call them as before.
    let released: i64 = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.RELEASE', 'lk', 't')")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
}

#[test]
fn guard_ro_lets_any_holder_read_and_nobody_write() {
    let server = Server::start();
    let mut con = server.conn();
    run(&mut con, &["SET", "data", "v"]).unwrap();
    run(&mut con, &["LOCK.ACQUIRE", "lk", "60000", "TOKEN", "w"]).unwrap();
    let got: String = redis::cmd("LOCK.GUARD_RO")
        .arg(&["lk", "w", "GET", "data"])
        .query(&mut con)
        .unwrap();
    assert_eq!(got, "v");
    let before = digest(&mut con);
    for command in [
        vec!["SET", "data", "x"],
        vec!["EVAL", WRITER_SCRIPT, "0"],
        vec!["EVAL", "#!lua\nreturn 1", "0"],
    ] {
        let mut cmd = redis::cmd("LOCK.GUARD_RO");
        cmd.arg("lk").arg("w").arg(&command);
        assert!(cmd.query::<Value>(&mut con).is_err(), "{command:?}");
    }
    assert_eq!(digest(&mut con), before);
    // The same check as GUARD: another token, a free key.
    let lost = error_of(
        &mut con,
        redis::cmd("LOCK.GUARD_RO").arg(&["lk", "other", "GET", "data"]),
    );
    assert!(lost.starts_with("LOST"), "{lost}");
    let lost = error_of(
        &mut con,
        redis::cmd("LOCK.GUARD_RO").arg(&["free", "w", "GET", "data"]),
    );
    assert!(lost.starts_with("LOST"), "{lost}");
    // Garbage, as GUARD.
    for args in [vec!["lk"], vec!["lk", "w"], vec!["lk", "", "GET", "data"]] {
        let error = error_of(&mut con, redis::cmd("LOCK.GUARD_RO").arg(&args));
        assert!(error.starts_with("ERR"), "{args:?}: {error}");
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&["GETKEYS", "LOCK.GUARD_RO", "lk", "w", "GET", "data"])
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["lk", "data"]);
}

#[test]
fn guard_ro_reads_where_writes_are_refused() {
    let (master, replica) = pair();
    let mut m = master.conn();
    run(&mut m, &["SET", "data", "v"]).unwrap();
    run(&mut m, &["LOCK.ACQUIRE", "lk", "60000", "TOKEN", "w"]).unwrap();
    sync_replica(&master, &replica);
    let read = |con: &mut Connection, command: &str| -> redis::RedisResult<String> {
        redis::cmd(command)
            .arg(&["lk", "w", "GET", "data"])
            .query(con)
    };
    // On the replica: GUARD is a write (READONLY), GUARD_RO checks the
    // replica's copy of the lock.
    let mut r = replica.conn();
    assert!(read(&mut r, "LOCK.GUARD").is_err());
    assert_eq!(read(&mut r, "LOCK.GUARD_RO").unwrap(), "v");
    // In a read-only script.
    let script: String = redis::cmd("EVAL_RO")
        .arg("return redis.call('LOCK.GUARD_RO', 'lk', 'w', 'GET', 'data')")
        .arg(0)
        .query(&mut m)
        .unwrap();
    assert_eq!(script, "v");
    // While min-replicas-to-write is not met.
    run(&mut m, &["CONFIG", "SET", "min-replicas-to-write", "5"]).unwrap();
    assert!(read(&mut m, "LOCK.GUARD").is_err());
    assert_eq!(read(&mut m, "LOCK.GUARD_RO").unwrap(), "v");
    run(&mut m, &["CONFIG", "SET", "min-replicas-to-write", "0"]).unwrap();
    // Under CLIENT PAUSE WRITE, from another client: a read goes on.
    let mut other = master.conn();
    run(&mut m, &["CLIENT", "PAUSE", "20000", "WRITE"]).unwrap();
    assert_eq!(read(&mut other, "LOCK.GUARD_RO").unwrap(), "v");
    run(&mut m, &["CLIENT", "UNPAUSE"]).unwrap();
}
