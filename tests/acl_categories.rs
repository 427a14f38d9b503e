//! ACL categories and command flags (issue 14): where the server can set
//! them (Redis 7.2+, Valkey 8+), the lock commands are in `@write` or
//! `@read`, `@fast` or `@slow`, ACQUIRE and OBSERVE in `@blocking`, and every
//! client command in the module's `@lock` (Redis 7.4+, Valkey 8+); on Redis
//! 7.0 they are in none. Each test asserts what its own server does, so the
//! same suite runs on every server of the matrix.

mod common;
use common::*;

/// Each command: its categories where the server can set them (without the
/// `@lock` that every one but SETSTATE also gets), and whether it is flagged
/// `blocking`.
const COMMANDS: &[(&str, &[&str], bool)] = &[
    ("lock.acquire", &["write", "fast", "blocking"], true),
    ("lock.extend", &["write", "fast"], false),
    ("lock.release", &["write", "fast"], false),
    ("lock.guard", &["write", "slow"], false),
    ("lock.guard_ro", &["read", "slow"], false),
    ("lock.info", &["read", "fast"], false),
    ("lock.queue", &["read", "fast"], false),
    ("lock.observe", &["read", "slow", "blocking"], true),
    // O(numkeys): `@slow`, as Redis' own multi-key writes (`DEL`, `MSET`).
    ("lock.macquire", &["write", "slow", "blocking"], true),
    ("lock.mextend", &["write", "slow"], false),
    ("lock.mrelease", &["write", "slow"], false),
    (
        "lock.revoke",
        &["write", "slow", "dangerous", "admin"],
        false,
    ),
    ("lock.lease|grant", &["write", "fast"], false),
    ("lock.lease|keepalive", &["write", "fast"], false),
    (
        "lock.lease|revoke",
        &["write", "slow", "dangerous", "admin"],
        false,
    ),
    ("lock.lease|info", &["read", "fast"], false),
    // The holder's own end of its lease: its holds released, none revoked.
    ("lock.lease|end", &["write", "slow"], false),
    // As Redis' own containers' `HELP`.
    ("lock.lease|help", &["slow"], false),
    ("sem.acquire", &["write", "fast", "blocking"], true),
    ("sem.extend", &["write", "fast"], false),
    ("sem.release", &["write", "fast"], false),
    ("sem.info", &["read", "fast"], false),
    ("lock.setstate", &["write", "fast", "dangerous"], false),
    ("lock.setholder", &["write", "fast", "dangerous"], false),
    ("lock.delholder", &["write", "fast", "dangerous"], false),
    ("lock.leaseset", &["write", "fast", "dangerous"], false),
    ("lock.leasedel", &["write", "fast", "dangerous"], false),
];

/// The internal commands (replication and the AOF): never in `@lock`.
const INTERNAL: [&str; 5] = [
    "lock.setstate",
    "lock.setholder",
    "lock.delholder",
    "lock.leaseset",
    "lock.leasedel",
];

/// Where a command's key is: argument 1, none for the lease groups'
/// commands (`LOCK.LEASE …`, `LOCK.LEASESET`, `LOCK.LEASEDEL`), argument 2
/// for the first of the multi-key commands' `numkeys key [key ...]` (the
/// rest they report themselves: `getkeys-api`).
fn keys_of(name: &str) -> (i64, i64, i64) {
    if name.starts_with("lock.lease") {
        (0, 0, 0)
    } else if ["lock.macquire", "lock.mextend", "lock.mrelease"].contains(&name) {
        (2, 2, 1)
    } else {
        (1, 1, 1)
    }
}

/// What `COMMAND INFO name` says: its flags, its first key, last key and
/// step, and its ACL categories (without the `@`).
struct CommandInfo {
    flags: Vec<String>,
    keys: (i64, i64, i64),
    categories: Vec<String>,
}

fn words(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) | Value::Set(items) => items
            .iter()
            .map(|item| match item {
                Value::SimpleString(s) => s.trim_start_matches('@').to_string(),
                Value::BulkString(b) => String::from_utf8_lossy(b).trim_start_matches('@').into(),
                other => panic!("not a word: {other:?}"),
            })
            .collect(),
        other => panic!("not a list: {other:?}"),
    }
}

fn command_info(con: &mut Connection, name: &str) -> CommandInfo {
    let reply: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(con)
        .expect("COMMAND INFO");
    let Some(Value::Array(fields)) = reply.first() else {
        panic!("COMMAND INFO {name}: {reply:?}");
    };
    let int = |at: usize| match fields[at] {
        Value::Int(n) => n,
        ref other => panic!("COMMAND INFO {name}[{at}]: {other:?}"),
    };
    CommandInfo {
        flags: words(&fields[2]),
        keys: (int(3), int(4), int(5)),
        categories: words(&fields[6]),
    }
}

/// The categories `name` should have on a server with `support`.
fn expected_categories(support: AclSupport, name: &str, standard: &[&str]) -> Vec<String> {
    let mut expected: Vec<String> = match support {
        AclSupport::None => return Vec::new(),
        _ => standard.iter().map(|c| c.to_string()).collect(),
    };
    if support == AclSupport::ModuleCategory && !INTERNAL.contains(&name) {
        expected.push("lock".to_string());
    }
    expected.sort();
    expected
}

#[test]
fn command_info_shows_each_commands_categories_flags_and_first_key() {
    let server = Server::start();
    let mut con = server.conn();
    let support = acl_support(&mut con);
    for (name, standard, blocking) in COMMANDS {
        let info = command_info(&mut con, name);
        let mut categories = info.categories.clone();
        categories.sort();
        assert_eq!(
            categories,
            expected_categories(support, name, standard),
            "{name} on a server with {support:?}"
        );
        assert_eq!(
            info.flags.iter().any(|f| f == "blocking"),
            *blocking,
            "{name}: {:?}",
            info.flags
        );
        // The key spec that routes every command in Cluster is unchanged.
        assert_eq!(info.keys, keys_of(name), "{name}");
    }
    // The module category lists exactly the client commands.
    let listed: redis::RedisResult<Vec<String>> =
        redis::cmd("ACL").arg("CAT").arg("lock").query(&mut con);
    if support == AclSupport::ModuleCategory {
        let mut listed = listed.expect("ACL CAT lock");
        listed.sort();
        let mut clients: Vec<&str> = COMMANDS
            .iter()
            .map(|(name, _, _)| *name)
            .filter(|name| !INTERNAL.contains(name))
            .collect();
        clients.sort();
        assert_eq!(listed, clients);
    } else {
        assert!(listed.is_err(), "ACL CAT lock: {listed:?}");
    }
}

/// A user with `rules` (and every key) on a server where `k` is held with
/// token `t`, and a connection as that user.
fn server_with_user(rules: &str) -> (Server, Connection, AclSupport) {
    let server = Server::start();
    let mut admin = server.conn();
    acquire(&mut admin, "k", 60_000, Some("t")).unwrap();
    acl_setuser(&mut admin, &format!("user on >pw ~* &* {rules}")).expect("ACL SETUSER");
    let support = acl_support(&mut admin);
    let con = conn_as(&server, "user", "pw");
    (server, con, support)
}

/// Whether `args` is refused with NOPERM (any other reply, error or not,
/// means the user may run it).
fn noperm(con: &mut Connection, args: &[&str]) -> bool {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    matches!(cmd.query::<Value>(con), Err(e) if e.code() == Some("NOPERM"))
}

#[test]
fn user_without_write_cannot_take_or_give_back_locks_but_can_read_them() {
    let (server, mut user, support) = server_with_user("+@all -@write");
    let mut admin = server.conn();
    let writes: &[&[&str]] = &[
        &["LOCK.ACQUIRE", "other", "1000"],
        &["LOCK.MACQUIRE", "2", "other", "more", "1000"],
        &["LOCK.ACQUIRE", "k", "1000", "TOKEN", "t"],
        &["LOCK.EXTEND", "k", "t", "90000"],
        &["LOCK.MEXTEND", "1", "k", "t", "90000"],
        &["LOCK.GUARD", "k", "t", "GET", "k"],
        &["LOCK.SETSTATE", "k", "forged", "9007199254740990", "1"],
        &["LOCK.RELEASE", "k", "t"],
        &["LOCK.MRELEASE", "1", "k", "t"],
    ];
    let before = fence_and_deadline(&mut admin, "k");
    if support == AclSupport::None {
        // Redis 7.0: `-@write` does not reach module commands. The user can
        // still take a lock; docs/operations.md says so.
        assert!(!noperm(&mut user, writes[0]));
        return;
    }
    for args in writes {
        assert!(noperm(&mut user, args), "{args:?} ran");
    }
    assert_eq!(fence_and_deadline(&mut admin, "k"), before);
    assert!(!exists(&mut admin, "other"));
    // The reads still work.
    assert_eq!(info(&mut user, "k").unwrap()["fence"], before.0);
    assert!(!noperm(&mut user, &["LOCK.QUEUE", "k"]));
    assert!(!noperm(&mut user, &["LOCK.OBSERVE", "k", "0", "1"]));
}

#[test]
fn blocking_and_dangerous_categories_hold_what_they_say() {
    // Without @blocking: no ACQUIRE (which may wait, as BLPOP may) and no
    // OBSERVE, but RELEASE and INFO.
    let (_server, mut user, support) = server_with_user("+@all -@blocking");
    if support == AclSupport::None {
        assert!(!noperm(&mut user, &["LOCK.ACQUIRE", "other", "1000"]));
        return;
    }
    assert!(noperm(&mut user, &["LOCK.ACQUIRE", "other", "1000"]));
    assert!(noperm(&mut user, &["LOCK.MACQUIRE", "1", "other", "1000"]));
    assert!(noperm(&mut user, &["LOCK.OBSERVE", "k", "0", "1"]));
    assert!(!noperm(
        &mut user,
        &["LOCK.MEXTEND", "1", "k", "t", "90000"]
    ));
    assert!(!noperm(&mut user, &["LOCK.INFO", "k"]));
    assert!(!noperm(&mut user, &["LOCK.RELEASE", "k", "t"]));

    // Without @dangerous: no forged state through SETSTATE, everything else.
    let (server, mut user, _) = server_with_user("+@all -@dangerous");
    assert!(noperm(
        &mut user,
        &["LOCK.SETSTATE", "k", "forged", "9007199254740990", "1"]
    ));
    assert!(!noperm(&mut user, &["LOCK.ACQUIRE", "other", "1000"]));
    assert!(!noperm(&mut user, &["LOCK.RELEASE", "k", "t"]));
    assert!(!exists(&mut server.conn(), "k"));
}

#[test]
fn a_worker_without_dangerous_cannot_revoke_others_holds() {
    // The recipe of docs/operations.md: `+@lock -@dangerous` where the server
    // has `@lock` (Redis 7.4+, Valkey 8+), else `+@write +@read -@dangerous`
    // (Redis 7.2); on Redis 7.0 commands are granted by name.
    let (server, mut user, support) = server_with_user("-@all");
    let mut admin = server.conn();
    let rules = match support {
        AclSupport::ModuleCategory => "user +@lock -@dangerous",
        AclSupport::Standard => "user +@write +@read -@dangerous",
        AclSupport::None => {
            "user +lock.acquire +lock.release +lock.extend +lock.lease|grant +lock.lease|keepalive +lock.lease|end"
        }
    };
    acl_setuser(&mut admin, rules).expect("ACL SETUSER");
    let id: String = redis::cmd("LOCK.LEASE")
        .arg("GRANT")
        .arg(60000)
        .query(&mut user)
        .expect("a worker grants a lease");
    assert!(!noperm(&mut user, &["LOCK.LEASE", "KEEPALIVE", &id]));
    assert!(!noperm(
        &mut user,
        &["LOCK.ACQUIRE", "mine", "60000", "LEASE", &id]
    ));
    assert!(noperm(&mut user, &["LOCK.REVOKE", "k"]));
    assert!(noperm(&mut user, &["LOCK.LEASE", "REVOKE", &id]));
    assert!(noperm(&mut user, &["LOCK.LEASESET", &id, "1", "1000", "1"]));
    assert!(exists(&mut admin, "k"), "nothing revoked");
    assert!(exists(&mut admin, "mine"));
    // The operator, who has every right, may.
    let revoked: i64 = redis::cmd("LOCK.REVOKE")
        .arg("k")
        .query(&mut admin)
        .unwrap();
    assert_eq!(revoked, 1);
    // The worker ends its own lease (issue 33): its hold released.
    let ended: i64 = redis::cmd("LOCK.LEASE")
        .arg("END")
        .arg(&id)
        .query(&mut user)
        .expect("a worker ends its own lease");
    assert_eq!(ended, 1);
    assert!(!exists(&mut admin, "mine"));
    if support == AclSupport::ModuleCategory {
        assert!(!noperm(&mut user, &["LOCK.LEASE", "HELP"]));
    }
}

#[test]
fn lock_category_alone_grants_every_client_command_and_nothing_else() {
    let (server, mut user, support) = server_with_user("-@all");
    if support != AclSupport::ModuleCategory {
        let refused = acl_setuser(&mut server.conn(), "user +@lock");
        assert!(refused.is_err(), "+@lock accepted without @lock");
        return;
    }
    acl_setuser(&mut server.conn(), "user +@lock").expect("+@lock");
    assert!(!noperm(&mut user, &["LOCK.INFO", "k"]));
    assert!(!noperm(&mut user, &["LOCK.QUEUE", "k"]));
    assert!(!noperm(&mut user, &["LOCK.OBSERVE", "k", "0", "1"]));
    assert!(!noperm(&mut user, &["LOCK.EXTEND", "k", "t", "90000"]));
    assert!(!noperm(
        &mut user,
        &["LOCK.GUARD", "k", "t", "LOCK.INFO", "k"]
    ));
    assert!(!noperm(&mut user, &["LOCK.RELEASE", "k", "t"]));
    assert!(!noperm(
        &mut user,
        &["LOCK.ACQUIRE", "k", "1000", "WAIT", "10"]
    ));
    assert!(!noperm(
        &mut user,
        &["LOCK.MACQUIRE", "2", "m1", "m2", "1000", "TOKEN", "m"]
    ));
    assert!(!noperm(
        &mut user,
        &["LOCK.MEXTEND", "2", "m1", "m2", "m", "900"]
    ));
    assert!(!noperm(&mut user, &["LOCK.MRELEASE", "2", "m1", "m2", "m"]));
    assert!(noperm(
        &mut user,
        &["LOCK.SETSTATE", "k", "forged", "9007199254740990", "1"]
    ));
    assert!(noperm(&mut user, &["GET", "k"]));
    assert!(noperm(&mut user, &["DEL", "k"]));
}
