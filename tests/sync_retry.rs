//! A grant waiting for its replicas (`SYNC`) is already held by its token,
//! so the same token on another connection (a client's retry after a socket
//! timeout, a second thread) is answered as the holder. From that reply on
//! the grant is no longer the first request's to undo: its timeout, or its
//! client leaving, leaves the hold in place (`NOSYNC …; the grant stands,
//! confirmed to its token meanwhile`). Nothing a client was told it holds
//! vanishes except by release, expiry, revocation or its lease's end.
//!
//! A server with no replica never acknowledges anything, so every `SYNC 1`
//! below waits for its whole timeout; the replica case shows the renewal
//! answered as acknowledged after the first grant's timeout.

mod common;
use common::*;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

const CONFIRMED: &str =
    "NOSYNC 0 of 1 replicas acknowledged; the grant stands, confirmed to its token meanwhile";

fn counter(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .parse()
        .unwrap()
}

/// `parts` as one RESP request.
fn request(parts: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        out.extend_from_slice(format!("${}\r\n{part}\r\n", part.len()).as_bytes());
    }
    out
}

/// Send `parts` on a socket of its own, which is never read.
fn send_raw(server: &Server, parts: &[&str]) -> TcpStream {
    let mut socket = TcpStream::connect(server.addr()).unwrap();
    socket.write_all(&request(parts)).unwrap();
    socket
}

/// Run `parts` on a connection of its own, in a thread: its answer, as
/// `Ok(value)` or `Err("CODE detail")`.
fn spawn(server: &Server, parts: &[&str]) -> thread::JoinHandle<Result<Value, String>> {
    let mut con = server.conn();
    let parts: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
    thread::spawn(move || {
        let mut cmd = redis::cmd(&parts[0]);
        cmd.arg(&parts[1..]);
        cmd.query::<Value>(&mut con).map_err(|e| {
            format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
                .trim()
                .to_string()
        })
    })
}

/// The id of the one blocked client (`CLIENT LIST`, flags `b`).
fn blocked_client(con: &mut Connection) -> Option<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    let line = list
        .lines()
        .find(|l| l.split(' ').any(|f| f == "flags=b"))?;
    let id = line.split(' ').find_map(|f| f.strip_prefix("id="))?;
    Some(id.to_string())
}

fn run(con: &mut Connection, parts: &[&str]) -> Result<Value, String> {
    let mut cmd = redis::cmd(parts[0]);
    cmd.arg(&parts[1..]);
    cmd.query::<Value>(con)
        .map_err(|e| format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")))
}

/// How the first request's client ends its wait.
#[derive(Clone, Copy, Debug)]
enum Ends {
    /// Its `SYNC` timeout runs out: `NOSYNC`.
    Timeout,
    /// It closes its connection.
    Close,
    /// An operator's `CLIENT KILL ID`.
    Kill,
}

/// One row: the first, synced request (its grant is new), a setup before
/// it, the second request with the same token (answered as the holder),
/// and the keys whose holds must stand.
struct Row {
    name: &'static str,
    setup: &'static [&'static [&'static str]],
    first: &'static [&'static str],
    /// Sent after the first is granted and waits for its replica.
    before_confirm: &'static [&'static [&'static str]],
    confirm: &'static [&'static str],
    held: &'static [&'static str],
    /// Another token's request for `$key`, refused while the hold stands.
    other: &'static [&'static str],
}

const EXCLUSIVE: &[&str] = &["LOCK.ACQUIRE", "$key", "1000", "TOKEN", "other"];

const ROWS: &[Row] = &[
    Row {
        name: "ACQUIRE, then ACQUIRE by the same token",
        setup: &[],
        first: &[
            "LOCK.ACQUIRE",
            "k",
            "10000",
            "TOKEN",
            "t",
            "SYNC",
            "1",
            "$sync",
        ],
        before_confirm: &[],
        confirm: &["LOCK.ACQUIRE", "k", "20000", "TOKEN", "t"],
        held: &["k"],
        other: EXCLUSIVE,
    },
    Row {
        name: "ACQUIRE, then EXTEND",
        setup: &[],
        first: &[
            "LOCK.ACQUIRE",
            "k",
            "10000",
            "TOKEN",
            "t",
            "SYNC",
            "1",
            "$sync",
        ],
        before_confirm: &[],
        confirm: &["LOCK.EXTEND", "k", "t", "20000"],
        held: &["k"],
        other: EXCLUSIVE,
    },
    Row {
        name: "ACQUIRE, then a guarded write",
        setup: &[],
        first: &[
            "LOCK.ACQUIRE",
            "k",
            "10000",
            "TOKEN",
            "t",
            "SYNC",
            "1",
            "$sync",
        ],
        before_confirm: &[],
        confirm: &["LOCK.GUARD", "k", "t", "SET", "data", "v"],
        held: &["k"],
        other: EXCLUSIVE,
    },
    Row {
        name: "SEM.ACQUIRE, then SEM.ACQUIRE by the same token",
        setup: &[],
        first: &[
            "SEM.ACQUIRE",
            "k",
            "2",
            "10000",
            "TOKEN",
            "t",
            "SYNC",
            "1",
            "$sync",
        ],
        before_confirm: &[],
        confirm: &["SEM.ACQUIRE", "k", "2", "20000", "TOKEN", "t"],
        held: &["k"],
        other: &[
            "SEM.ACQUIRE",
            "$key",
            "2",
            "1000",
            "COUNT",
            "2",
            "TOKEN",
            "other",
        ],
    },
    Row {
        name: "SHARED, then SHARED by the same token",
        setup: &[],
        first: &[
            "LOCK.ACQUIRE",
            "k",
            "10000",
            "TOKEN",
            "t",
            "SHARED",
            "SYNC",
            "1",
            "$sync",
        ],
        before_confirm: &[],
        confirm: &["LOCK.ACQUIRE", "k", "20000", "TOKEN", "t", "SHARED"],
        held: &["k"],
        other: EXCLUSIVE,
    },
    Row {
        name: "MACQUIRE, then MEXTEND",
        setup: &[],
        first: &[
            "LOCK.MACQUIRE",
            "2",
            "k",
            "j",
            "10000",
            "TOKEN",
            "t",
            "SYNC",
            "1",
            "$sync",
        ],
        before_confirm: &[],
        confirm: &["LOCK.MEXTEND", "2", "k", "j", "t", "20000"],
        held: &["k", "j"],
        other: EXCLUSIVE,
    },
    Row {
        name: "a WAIT waiter granted from the queue, then EXTEND",
        setup: &[&["LOCK.ACQUIRE", "k", "60000", "TOKEN", "h"]],
        first: &[
            "LOCK.ACQUIRE",
            "k",
            "10000",
            "TOKEN",
            "t",
            "WAIT",
            "20000",
            "SYNC",
            "1",
            "$sync",
        ],
        before_confirm: &[&["LOCK.RELEASE", "k", "h"]],
        confirm: &["LOCK.EXTEND", "k", "t", "20000"],
        held: &["k"],
        other: EXCLUSIVE,
    },
    Row {
        name: "a lease group's hold, then ACQUIRE by the same token",
        setup: &[],
        first: &[
            "LOCK.ACQUIRE",
            "k",
            "10000",
            "TOKEN",
            "t",
            "LEASE",
            "$lease",
            "SYNC",
            "1",
            "$sync",
        ],
        before_confirm: &[],
        confirm: &[
            "LOCK.ACQUIRE",
            "k",
            "20000",
            "TOKEN",
            "t",
            "LEASE",
            "$lease",
        ],
        held: &["k"],
        other: EXCLUSIVE,
    },
];

fn substitute<'a>(parts: &[&'a str], lease: &'a str, sync_ms: &'a str) -> Vec<&'a str> {
    parts
        .iter()
        .map(|&p| match p {
            "$lease" => lease,
            "$sync" => sync_ms,
            p => p,
        })
        .collect()
}

/// The first request's `SYNC` timeouts to try, shortest first: a cell whose
/// first request stopped waiting before the retry reached the server (a
/// slow or busy machine) proves nothing, and runs again with the next.
const SYNC_TIMEOUTS_MS: [i64; 3] = [500, 5_000, 30_000];

/// Run `cell` with each timeout of [`SYNC_TIMEOUTS_MS`] (longer under
/// memcheck) until one is long enough (`Some`).
fn in_time<T>(what: &str, mut cell: impl FnMut(&str) -> Option<T>) -> T {
    for ms in SYNC_TIMEOUTS_MS {
        if let Some(done) = cell(&scaled_ms(ms).to_string()) {
            return done;
        }
        eprintln!("{what}: the first request's {ms} ms wait ended before the retry; again, longer");
    }
    panic!("{what}: even the longest wait ended before the retry reached the server");
}

/// Run `row` ending as `ends`, on a fresh server: the second request is
/// answered as the holder, and every key of the grant is still held by
/// `t` once the first request is done (nobody else gets it).
fn check(row: &Row, ends: Ends) {
    let what = format!("{} ({ends:?})", row.name);
    match ends {
        Ends::Timeout => in_time(&what, |sync_ms| check_with(row, ends, &what, sync_ms)),
        // Its client leaves: the wait's own end plays no part.
        Ends::Close | Ends::Kill => check_with(row, ends, &what, "600000")
            .unwrap_or_else(|| panic!("{what}: a 600 s wait ended")),
    }
}

/// [`check`] with `sync_ms` as the first request's timeout; `None` if that
/// wait ended before the retry reached the server.
fn check_with(row: &Row, ends: Ends, what: &str, sync_ms: &str) -> Option<()> {
    let server = Server::start();
    let mut con = server.conn();
    let lease: String = redis::cmd("LOCK.LEASE")
        .arg("GRANT")
        .arg(60_000)
        .query(&mut con)
        .expect("LOCK.LEASE GRANT");
    for step in row.setup {
        run(&mut con, step).expect("setup");
    }
    let first = substitute(row.first, &lease, sync_ms);
    let confirm = substitute(row.confirm, &lease, sync_ms);
    let (waiting, socket) = match ends {
        Ends::Timeout => (Some(spawn(&server, &first)), None),
        Ends::Close | Ends::Kill => (None, Some(send_raw(&server, &first))),
    };
    if !row.before_confirm.is_empty() {
        wait_until(Duration::from_secs(10), || {
            info(&mut con, "k").is_some_and(|i| i["waiters"] == 1)
        });
    }
    for step in row.before_confirm {
        run(&mut con, step).expect("before the confirmation");
    }
    wait_until(Duration::from_secs(10), || counter(&mut con, "syncs") == 1);
    let answered = run(&mut con, &confirm);
    if counter(&mut con, "syncs_undone") > 0 {
        // Its wait ended, and its grant was undone, before the retry came:
        // the retry was granted anew.
        if let Some(waiting) = waiting {
            let _ = waiting.join();
        }
        return None;
    }
    if row.other == EXCLUSIVE {
        let syncing = info(&mut con, "k").and_then(|i| i.get("syncing").copied());
        assert_eq!(
            syncing, None,
            "{what}: confirmed, no longer shown as syncing"
        );
    }
    assert!(
        matches!(
            answered,
            Ok(Value::Array(_)) | Ok(Value::Int(1)) | Ok(Value::Okay)
        ),
        "{what}: the retry is answered as the holder: {answered:?}"
    );
    match ends {
        Ends::Timeout => {
            let first = waiting.unwrap().join().unwrap();
            assert_eq!(first, Err(CONFIRMED.to_string()), "{what}");
        }
        Ends::Close => drop(socket),
        Ends::Kill => {
            let id = blocked_client(&mut con).expect("the first request is blocked");
            let killed = run(&mut con, &["CLIENT", "KILL", "ID", &id]);
            assert_eq!(killed, Ok(Value::Int(1)), "{what}: killed the waiter");
        }
    }
    wait_until(Duration::from_secs(10), || {
        counter(&mut con, "sync_waiting") == 0
    });
    // A timer due now would have undone it: let it run.
    thread::sleep(Duration::from_millis(50));
    for key in row.held {
        let exists: i64 = redis::cmd("EXISTS").arg(*key).query(&mut con).unwrap();
        assert_eq!(exists, 1, "{what}: {key} vanished after it was confirmed");
        let other: Vec<&str> = row
            .other
            .iter()
            .map(|&p| if p == "$key" { *key } else { p })
            .collect();
        let other = run(&mut con, &other);
        assert_eq!(other, Ok(Value::Nil), "{what}: {key} is not free");
    }
    assert_eq!(counter(&mut con, "syncs_undone"), 0, "{what}");
    Some(())
}

#[test]
fn a_grant_confirmed_to_its_token_by_a_retry_is_never_undone() {
    for row in ROWS {
        check(row, Ends::Timeout);
    }
}

#[test]
fn a_grant_confirmed_to_its_token_stays_when_its_first_client_leaves() {
    for row in ROWS {
        check(row, Ends::Close);
        check(row, Ends::Kill);
    }
}

/// An unconfirmed grant is still undone: the rule takes away only what a
/// reply confirmed.
#[test]
fn an_unconfirmed_grant_is_still_undone_and_an_earlier_retry_does_not_keep_it() {
    in_time("unconfirmed", |sync_ms| {
        let server = Server::start();
        let mut con = server.conn();
        // A different token's request confirms nothing.
        let waiting = spawn(
            &server,
            &[
                "LOCK.ACQUIRE",
                "k",
                "10000",
                "TOKEN",
                "t",
                "SYNC",
                "1",
                sync_ms,
            ],
        );
        wait_until(Duration::from_secs(10), || counter(&mut con, "syncs") == 1);
        let syncing = info(&mut con, "k").and_then(|i| i.get("syncing").copied());
        let refused = run(&mut con, &["LOCK.ACQUIRE", "k", "1000", "TOKEN", "u"]);
        let not_extended = run(&mut con, &["LOCK.EXTEND", "k", "u", "1000"]);
        if counter(&mut con, "syncs_undone") > 0 {
            // Undone before the looks above: they prove nothing.
            let _ = waiting.join();
            return None;
        }
        assert_eq!(
            syncing,
            Some(1),
            "LOCK.INFO marks a grant that waits for its replicas"
        );
        assert_eq!(refused, Ok(Value::Nil));
        assert_eq!(not_extended, Ok(Value::Int(0)));
        let first = waiting.join().unwrap();
        assert_eq!(
            first,
            Err("NOSYNC 0 of 1 replicas acknowledged; the grant was undone".to_string())
        );
        assert_eq!(info(&mut con, "k"), None, "undone");
        assert_eq!(counter(&mut con, "syncs_undone"), 1);
        Some(())
    })
}

/// The transcript: the retry's own `SYNC` is acknowledged by the
/// replica after the first grant's timed out; the key stays held on the
/// master and the replica.
#[test]
fn a_synced_retry_acknowledged_after_the_first_grant_timed_out_keeps_the_hold() {
    in_time("synced retry", |sync_ms| {
        let (master, replica) = pair();
        let mut m = master.conn();
        replica.pause();
        let first = spawn(
            &master,
            &[
                "LOCK.ACQUIRE",
                "job",
                "10000",
                "TOKEN",
                "t",
                "SYNC",
                "1",
                sync_ms,
            ],
        );
        wait_until(Duration::from_secs(10), || counter(&mut m, "syncs") == 1);
        let second = spawn(
            &master,
            &[
                "LOCK.ACQUIRE",
                "job",
                "20000",
                "TOKEN",
                "t",
                "SYNC",
                "1",
                "600000",
            ],
        );
        wait_until(Duration::from_secs(10), || counter(&mut m, "syncs") == 2);
        let late = counter(&mut m, "syncs_undone") > 0;
        let first = first.join().unwrap();
        if late {
            // The first was undone before the retry came: the retry was a
            // new grant, which proves nothing here.
            replica.resume();
            let _ = second.join();
            return None;
        }
        assert_eq!(first, Err(CONFIRMED.to_string()));
        replica.resume();
        match second.join().unwrap() {
            Ok(Value::Array(parts)) => assert_eq!(parts[0], Value::BulkString(b"t".to_vec())),
            other => panic!("the retry: {other:?}"),
        }
        assert!(info(&mut m, "job").is_some(), "held on the master");
        sync_replica(&master, &replica);
        assert!(
            info(&mut replica.conn(), "job").is_some(),
            "held on the replica"
        );
        assert_eq!(
            run(&mut m, &["LOCK.ACQUIRE", "job", "10000", "TOKEN", "other"]),
            Ok(Value::Nil)
        );
        Some(())
    })
}
