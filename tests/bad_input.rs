//! Malformed calls: each gets an error reply that begins with a code and names
//! the bad argument, and changes nothing — on a free key and on a held one.

mod common;
use common::*;

// The exact texts of src/errors.rs: clients match on them.
const ARITY_ACQUIRE: &str = "ERR wrong number of arguments for 'lock.acquire' command";
const ARITY_EXTEND: &str = "ERR wrong number of arguments for 'lock.extend' command";
const ARITY_RELEASE: &str = "ERR wrong number of arguments for 'lock.release' command";
const ARITY_INFO: &str = "ERR wrong number of arguments for 'lock.info' command";
const UNKNOWN_OPTION: &str = "ERR syntax error: unknown option";
const REPEATED_TOKEN: &str = "ERR syntax error: TOKEN is given more than once";
const REPEATED_SESSION: &str = "ERR syntax error: SESSION is given more than once";
const MISSING_TOKEN: &str = "ERR syntax error: TOKEN needs a value";
const TTL_NOT_INTEGER: &str = "ERR ttl-ms is not an integer or out of range";
const TTL_NOT_POSITIVE: &str = "ERR ttl-ms must be greater than 0";
const TTL_TOO_LARGE: &str =
    "ERR ttl-ms exceeds lock.max-ttl-ms (CONFIG GET lock.max-ttl-ms shows it)";
const TOKEN_LENGTH: &str = "ERR token must be 1 to 256 bytes long";
const SETSTATE_INTERNAL: &str =
    "ERR LOCK.SETSTATE is internal: only the replication link and AOF loading may call it";

const HELD: &str = "held";
const HOLDER: &str = "holder-token";
const FREE: &str = "free";

/// (case name, command and arguments, expected error)
type Case = (String, Vec<String>, &'static str);

fn case(name: impl Into<String>, args: &[&str], want: &'static str) -> Case {
    (
        name.into(),
        args.iter().map(|s| s.to_string()).collect(),
        want,
    )
}

/// A server with a lock on `held` (token `holder-token`) and nothing on `free`.
struct Fixture {
    _server: Server,
    con: Connection,
    /// (fence, deadline) of the held lock.
    held: (i64, i64),
}

impl Fixture {
    fn new() -> Fixture {
        let server = Server::start();
        let mut con = server.conn();
        acquire(&mut con, HELD, 600_000, Some(HOLDER)).unwrap();
        let held = fence_and_deadline(&mut con, HELD);
        Fixture {
            _server: server,
            con,
            held,
        }
    }

    /// The call fails with exactly `want`, and nothing changed.
    fn assert_refused(&mut self, (name, args, want): &Case) {
        let con = &mut self.con;
        let digest_before = digest(con);
        let size_before = dbsize(con);

        let mut cmd = redis::cmd(&args[0]);
        for arg in &args[1..] {
            cmd.arg(arg.as_bytes());
        }
        let err = error_of(con, &cmd);
        assert!(
            err.starts_with("ERR ") || err.starts_with("WRONGTYPE "),
            "{name}: no error code in {err:?}"
        );
        assert_eq!(&err, want, "{name}");

        assert_eq!(digest(con), digest_before, "{name}: keyspace changed");
        assert_eq!(dbsize(con), size_before, "{name}: DBSIZE changed");
        let info = info(con, HELD).unwrap_or_else(|| panic!("{name}: held lock gone"));
        assert_eq!(
            (info["fence"], info["deadline"]),
            self.held,
            "{name}: held lock's fence or deadline changed"
        );
        assert!(!exists(con, FREE), "{name}: free key was created");
    }

    fn assert_all_refused(&mut self, cases: &[Case]) {
        assert!(!cases.is_empty());
        for c in cases {
            self.assert_refused(c);
        }
        // The holder's token still works: it was never replaced.
        assert_eq!(
            extend(&mut self.con, HELD, HOLDER, 600_000),
            1,
            "holder cannot extend"
        );
        assert_eq!(
            release(&mut self.con, HELD, HOLDER),
            1,
            "holder cannot release"
        );
    }
}

/// Each case for the free key (with some token) and for the held key (with
/// its holder's token, so the one mistake is all that stands between the call
/// and a change).
fn on_both_keys(make: impl Fn(&str, &str) -> Vec<Case>) -> Vec<Case> {
    let mut cases = make(FREE, "some-token");
    cases.extend(make(HELD, HOLDER));
    cases
}

#[test]
fn wrong_arity_is_refused_and_changes_nothing() {
    let cases = on_both_keys(|key, token| {
        vec![
            case("ACQUIRE, no arguments", &["LOCK.ACQUIRE"], ARITY_ACQUIRE),
            case(
                format!("ACQUIRE {key}, no ttl"),
                &["LOCK.ACQUIRE", key],
                ARITY_ACQUIRE,
            ),
            case("EXTEND, no arguments", &["LOCK.EXTEND"], ARITY_EXTEND),
            case(
                format!("EXTEND {key}, no token"),
                &["LOCK.EXTEND", key],
                ARITY_EXTEND,
            ),
            case(
                format!("EXTEND {key}, no ttl"),
                &["LOCK.EXTEND", key, token],
                ARITY_EXTEND,
            ),
            case(
                format!("EXTEND {key}, one argument too many"),
                &["LOCK.EXTEND", key, token, "600000", "extra"],
                ARITY_EXTEND,
            ),
            case("RELEASE, no arguments", &["LOCK.RELEASE"], ARITY_RELEASE),
            case(
                format!("RELEASE {key}, no token"),
                &["LOCK.RELEASE", key],
                ARITY_RELEASE,
            ),
            case(
                format!("RELEASE {key}, one argument too many"),
                &["LOCK.RELEASE", key, token, "extra"],
                ARITY_RELEASE,
            ),
            case("INFO, no arguments", &["LOCK.INFO"], ARITY_INFO),
            // One more argument is an option now (`HOLDS n`).
            case(
                format!("INFO {key}, an unknown option"),
                &["LOCK.INFO", key, "extra"],
                "ERR syntax error: unknown option",
            ),
            case(
                format!("INFO {key}, one argument too many"),
                &["LOCK.INFO", key, "HOLDS", "1", "extra"],
                ARITY_INFO,
            ),
        ]
    });
    Fixture::new().assert_all_refused(&cases);
}

/// Every malformed ttl-ms, with the error it must get.
const BAD_TTLS: &[(&str, &str)] = &[
    ("abc", TTL_NOT_INTEGER),
    ("", TTL_NOT_INTEGER),
    ("1.5", TTL_NOT_INTEGER),
    ("1e3", TTL_NOT_INTEGER),
    (" 5", TTL_NOT_INTEGER),
    ("5 ", TTL_NOT_INTEGER),
    ("+5", TTL_NOT_INTEGER),
    ("0x10", TTL_NOT_INTEGER),
    ("05", TTL_NOT_INTEGER),
    ("-0", TTL_NOT_INTEGER),
    ("99999999999999999999", TTL_NOT_INTEGER),
    ("-99999999999999999999", TTL_NOT_INTEGER),
    ("0", TTL_NOT_POSITIVE),
    ("-1", TTL_NOT_POSITIVE),
    ("-600000", TTL_NOT_POSITIVE),
    ("-9223372036854775808", TTL_NOT_POSITIVE),
    ("86400001", TTL_TOO_LARGE),
    ("9223372036854775807", TTL_TOO_LARGE),
];

#[test]
fn bad_ttl_for_acquire_is_refused_and_changes_nothing() {
    let cases = on_both_keys(|key, token| {
        BAD_TTLS
            .iter()
            .flat_map(|&(ttl, want)| {
                [
                    case(
                        format!("ACQUIRE {key} ttl {ttl:?}"),
                        &["LOCK.ACQUIRE", key, ttl],
                        want,
                    ),
                    case(
                        format!("ACQUIRE {key} ttl {ttl:?} TOKEN {token}"),
                        &["LOCK.ACQUIRE", key, ttl, "TOKEN", token],
                        want,
                    ),
                ]
            })
            .collect()
    });
    Fixture::new().assert_all_refused(&cases);
}

#[test]
fn bad_ttl_for_extend_is_refused_and_changes_nothing() {
    let cases = on_both_keys(|key, token| {
        BAD_TTLS
            .iter()
            .map(|&(ttl, want)| {
                case(
                    format!("EXTEND {key} {token} ttl {ttl:?}"),
                    &["LOCK.EXTEND", key, token, ttl],
                    want,
                )
            })
            .collect()
    });
    Fixture::new().assert_all_refused(&cases);
}

#[test]
fn token_of_0_or_257_bytes_is_refused_and_changes_nothing() {
    let long = "x".repeat(257);
    // 257 bytes that start with the holder's token.
    let long_holder = format!("{HOLDER}{}", "x".repeat(257 - HOLDER.len()));
    let cases = on_both_keys(|key, _| {
        let mut cases = Vec::new();
        for (what, token) in [
            ("empty", ""),
            ("257-byte", long.as_str()),
            ("257-byte holder-prefixed", long_holder.as_str()),
        ] {
            cases.push(case(
                format!("ACQUIRE {key} TOKEN {what}"),
                &["LOCK.ACQUIRE", key, "600000", "TOKEN", token],
                TOKEN_LENGTH,
            ));
            cases.push(case(
                format!("EXTEND {key} {what} token"),
                &["LOCK.EXTEND", key, token, "600000"],
                TOKEN_LENGTH,
            ));
            cases.push(case(
                format!("RELEASE {key} {what} token"),
                &["LOCK.RELEASE", key, token],
                TOKEN_LENGTH,
            ));
        }
        cases
    });
    Fixture::new().assert_all_refused(&cases);
}

#[test]
fn token_of_256_bytes_is_accepted() {
    let mut fx = Fixture::new();
    let con = &mut fx.con;
    let max = "m".repeat(256);
    let (token, fence) = acquire(con, FREE, 600_000, Some(&max)).unwrap();
    assert_eq!(token, max);
    assert_eq!(
        acquire(con, FREE, 600_000, Some(&max)),
        Some((max.clone(), fence))
    );
    assert_eq!(extend(con, FREE, &max, 600_000), 1);
    assert_eq!(release(con, FREE, &max), 1);
    // On a key someone else holds, it is a foreign token like any other.
    assert_eq!(acquire(con, HELD, 600_000, Some(&max)), None);
    assert_eq!(extend(con, HELD, &max, 600_000), 0);
    assert_eq!(release(con, HELD, &max), 0);
    assert_eq!(release(con, HELD, HOLDER), 1);
}

#[test]
fn ttl_of_1_and_of_the_maximum_are_accepted() {
    let mut fx = Fixture::new();
    let con = &mut fx.con;
    acquire(con, FREE, 86_400_000, Some("t")).unwrap();
    let ttl = pttl(con, FREE);
    assert!(ttl > 86_390_000 && ttl <= 86_400_000, "PTTL {ttl}");
    assert_eq!(extend(con, HELD, HOLDER, 86_400_000), 1);
    assert_eq!(extend(con, HELD, HOLDER, 1), 1);
    assert!(pttl(con, HELD) <= 1);
}

#[test]
fn acquire_option_errors_are_refused_and_change_nothing() {
    let cases = on_both_keys(|key, token| {
        let with = |name: &str, opts: &[&str], want| {
            let mut args = vec!["LOCK.ACQUIRE", key, "600000"];
            args.extend(opts);
            case(format!("ACQUIRE {key} 600000 {name}"), &args, want)
        };
        vec![
            with("NX", &["NX"], UNKNOWN_OPTION),
            with("PX 5", &["PX", "5"], UNKNOWN_OPTION),
            with("empty option", &[""], UNKNOWN_OPTION),
            with("TOKENS t", &["TOKENS", token], UNKNOWN_OPTION),
            with("TOKEN t extra", &["TOKEN", token, "extra"], UNKNOWN_OPTION),
            with("extra TOKEN t", &["extra", "TOKEN", token], UNKNOWN_OPTION),
            with("TOKEN", &["TOKEN"], MISSING_TOKEN),
            with("token (lowercase)", &["token"], MISSING_TOKEN),
            with(
                "TOKEN t TOKEN t",
                &["TOKEN", token, "TOKEN", token],
                REPEATED_TOKEN,
            ),
            with(
                "TOKEN t token other",
                &["TOKEN", token, "token", "other"],
                REPEATED_TOKEN,
            ),
            // The second TOKEN has no value: that is what is reported.
            with("TOKEN t TOKEN", &["TOKEN", token, "TOKEN"], MISSING_TOKEN),
            with("SESSION SESSION", &["SESSION", "SESSION"], REPEATED_SESSION),
            with(
                "SESSION TOKEN t session",
                &["SESSION", "TOKEN", token, "session"],
                REPEATED_SESSION,
            ),
            with("SESSIONS", &["SESSIONS"], UNKNOWN_OPTION),
            with("SESSION 1", &["SESSION", "1"], UNKNOWN_OPTION),
        ]
    });
    Fixture::new().assert_all_refused(&cases);
}

/// Issue 33: the lease and revocation options report as the acquire's do:
/// an option given twice is "given more than once", one with no value
/// "needs a value"; the lease's subcommands count their arguments.
#[test]
fn lease_and_revoke_option_errors_are_refused_and_change_nothing() {
    const REPEATED_OWNER: &str = "ERR syntax error: OWNER is given more than once";
    const MISSING_OWNER: &str = "ERR syntax error: OWNER needs a value";
    const REPEATED_REASON: &str = "ERR syntax error: REASON is given more than once";
    const MISSING_REASON: &str = "ERR syntax error: REASON needs a value";
    const ARITY_LEASE: &str = "ERR wrong number of arguments for 'lock.lease' command";
    const ARITY_REVOKE: &str = "ERR wrong number of arguments for 'lock.revoke' command";
    let mut cases = vec![
        case(
            "GRANT OWNER a OWNER b",
            &["LOCK.LEASE", "GRANT", "1000", "OWNER", "a", "OWNER", "b"],
            REPEATED_OWNER,
        ),
        case(
            "GRANT OWNER a owner b",
            &["LOCK.LEASE", "GRANT", "1000", "OWNER", "a", "owner", "b"],
            REPEATED_OWNER,
        ),
        case(
            "GRANT OWNER a OWNER",
            &["LOCK.LEASE", "GRANT", "1000", "OWNER", "a", "OWNER"],
            MISSING_OWNER,
        ),
        case(
            "GRANT OWNER",
            &["LOCK.LEASE", "GRANT", "1000", "OWNER"],
            MISSING_OWNER,
        ),
        case(
            "GRANT OWNER a extra",
            &["LOCK.LEASE", "GRANT", "1000", "OWNER", "a", "extra"],
            UNKNOWN_OPTION,
        ),
        case(
            "GRANT WHO",
            &["LOCK.LEASE", "GRANT", "1000", "WHO"],
            UNKNOWN_OPTION,
        ),
        case("END, no id", &["LOCK.LEASE", "END"], ARITY_LEASE),
        case("HELP extra", &["LOCK.LEASE", "HELP", "extra"], ARITY_LEASE),
        case("REVOKE, no key", &["LOCK.REVOKE"], ARITY_REVOKE),
    ];
    cases.extend(on_both_keys(|key, _| {
        vec![
            case(
                format!("REVOKE {key} REASON"),
                &["LOCK.REVOKE", key, "REASON"],
                MISSING_REASON,
            ),
            case(
                format!("REVOKE {key} reason"),
                &["LOCK.REVOKE", key, "reason"],
                MISSING_REASON,
            ),
            case(
                format!("REVOKE {key} REASON a REASON b"),
                &["LOCK.REVOKE", key, "REASON", "a", "REASON", "b"],
                REPEATED_REASON,
            ),
            case(
                format!("REVOKE {key} REASON a REASON"),
                &["LOCK.REVOKE", key, "REASON", "a", "REASON"],
                MISSING_REASON,
            ),
            case(
                format!("REVOKE {key} REASON a extra"),
                &["LOCK.REVOKE", key, "REASON", "a", "extra"],
                UNKNOWN_OPTION,
            ),
            case(
                format!("REVOKE {key} WHY x"),
                &["LOCK.REVOKE", key, "WHY", "x"],
                UNKNOWN_OPTION,
            ),
        ]
    }));
    let mut fx = Fixture::new();
    let leases = info_field(&mut fx.con, "lock", "lock_leases");
    fx.assert_all_refused(&cases);
    assert_eq!(
        info_field(&mut fx.con, "lock", "lock_leases"),
        leases,
        "no lease granted"
    );
}

#[test]
fn setstate_from_a_client_is_refused_and_changes_nothing() {
    let mut fx = Fixture::new();
    let fence = fx.held.0.to_string();
    let later = (fx.held.1 + 1_000_000).to_string();
    let next = (fx.held.0 + 1).to_string();
    let cases = on_both_keys(|key, token| {
        let set = |name: &str, args: &[&str]| {
            let mut all = vec!["LOCK.SETSTATE"];
            all.extend(args);
            case(format!("SETSTATE {name}"), &all, SETSTATE_INTERNAL)
        };
        vec![
            // Well-formed: a grant as the master would replicate it.
            set(
                &format!("{key} {token} (good, deadline)"),
                &[key, token, &next, &later],
            ),
            set(
                &format!("{key} {token} (good, no expiry)"),
                &[key, token, &fence, "-1"],
            ),
            set(
                &format!("{key} forged (good, takes the lock)"),
                &[key, "forged", &next, &later],
            ),
            // Garbage.
            set("no arguments", &[]),
            set(&format!("{key} only"), &[key]),
            set(&format!("{key} {token} no fence"), &[key, token]),
            set(&format!("{key} empty token"), &[key, "", "0", "soon"]),
            set(&format!("{key} fence 0"), &[key, token, "0", "-5"]),
            set(
                &format!("{key} fence 2^53"),
                &[key, token, "9007199254740992", "-1"],
            ),
            set(
                &format!("{key} too many"),
                &[key, token, &next, &later, "extra"],
            ),
        ]
    });
    fx.assert_all_refused(&cases);
}

const ARITY_MACQUIRE: &str = "ERR wrong number of arguments for 'lock.macquire' command";
const ARITY_MRELEASE: &str = "ERR wrong number of arguments for 'lock.mrelease' command";
const ARITY_MEXTEND: &str = "ERR wrong number of arguments for 'lock.mextend' command";
const NUMKEYS_INVALID: &str = "ERR numkeys must be a positive integer";
const NUMKEYS_TOO_MANY: &str = "ERR numkeys is more than lock.max-keys";
const NUMKEYS_MISMATCH: &str = "ERR numkeys does not match the number of keys given";
const KEYS_DUPLICATE: &str = "ERR the same key is given more than once";
const LEASE_ID_INVALID: &str =
    "ERR lease id must be 32 lowercase hex digits (what LOCK.LEASE GRANT replied)";
const LEASE_MISSING: &str = "ERR syntax error: LEASE needs a lease id";
const SYNC_MISSING: &str = "ERR syntax error: SYNC needs numreplicas and timeout-ms";
const SYNC_REPLICAS: &str = "ERR SYNC numreplicas must be an integer from 0 to 1000";
const SYNC_TIMEOUT: &str = "ERR SYNC timeout-ms must be an integer from 1 to 31536000000";

/// The multi-key commands (`LOCK.MACQUIRE`, `LOCK.MRELEASE`,
/// `LOCK.MEXTEND`): every malformed `numkeys`, key list, ttl, token and
/// option, on a free pair of keys and on a pair with a held key (with its
/// holder's token), each refused whole with nothing changed.
#[test]
fn multi_key_garbage_is_refused_and_changes_nothing() {
    let lease_like = "0123456789abcdef0123456789ABCDEF";
    let cases = on_both_keys(|key, token| {
        let m = |name: String, args: &[&str], want| case(name, args, want);
        let mut cases = vec![
            m(
                "MACQUIRE, no arguments".into(),
                &["LOCK.MACQUIRE"],
                ARITY_MACQUIRE,
            ),
            m(
                format!("MACQUIRE 1 {key}, no ttl"),
                &["LOCK.MACQUIRE", "1", key],
                ARITY_MACQUIRE,
            ),
            m(
                "MRELEASE, no arguments".into(),
                &["LOCK.MRELEASE"],
                ARITY_MRELEASE,
            ),
            m(
                format!("MRELEASE 1 {key}, no token"),
                &["LOCK.MRELEASE", "1", key],
                ARITY_MRELEASE,
            ),
            m(
                "MEXTEND, no arguments".into(),
                &["LOCK.MEXTEND"],
                ARITY_MEXTEND,
            ),
            m(
                format!("MEXTEND 1 {key} token, no ttl"),
                &["LOCK.MEXTEND", "1", key, token],
                ARITY_MEXTEND,
            ),
            m(
                format!("MRELEASE 1 {key} token extra"),
                &["LOCK.MRELEASE", "1", key, token, "extra"],
                NUMKEYS_MISMATCH,
            ),
            m(
                format!("MEXTEND 1 {key} token ttl extra"),
                &["LOCK.MEXTEND", "1", key, token, "600000", "extra"],
                NUMKEYS_MISMATCH,
            ),
            m(
                format!("MACQUIRE 3 {key} m2 ttl"),
                &["LOCK.MACQUIRE", "3", key, "m2", "600000"],
                NUMKEYS_MISMATCH,
            ),
            m(
                format!("MACQUIRE 65 {key} ttl"),
                &["LOCK.MACQUIRE", "65", key, "600000"],
                NUMKEYS_TOO_MANY,
            ),
            m(
                format!("MACQUIRE 2 {key} {key} ttl"),
                &["LOCK.MACQUIRE", "2", key, key, "600000", "TOKEN", token],
                KEYS_DUPLICATE,
            ),
            m(
                format!("MRELEASE 2 {key} {key}"),
                &["LOCK.MRELEASE", "2", key, key, token],
                KEYS_DUPLICATE,
            ),
            m(
                format!("MEXTEND 2 {key} {key}"),
                &["LOCK.MEXTEND", "2", key, key, token, "600000"],
                KEYS_DUPLICATE,
            ),
        ];
        for numkeys in [
            "0",
            "-1",
            "x",
            "",
            "1.5",
            " 1",
            "\0",
            "\r\n",
            "99999999999999999999",
        ] {
            for (command, tail) in [
                ("LOCK.MACQUIRE", vec!["600000"]),
                ("LOCK.MRELEASE", vec![token]),
                ("LOCK.MEXTEND", vec![token, "600000"]),
            ] {
                let mut args = vec![command, numkeys, key];
                args.extend(tail);
                cases.push(m(
                    format!("{command} numkeys {numkeys:?} {key}"),
                    &args,
                    NUMKEYS_INVALID,
                ));
            }
        }
        for &(ttl, want) in BAD_TTLS {
            cases.push(m(
                format!("MACQUIRE 2 {key} m2 ttl {ttl:?}"),
                &["LOCK.MACQUIRE", "2", key, "m2", ttl, "TOKEN", token],
                want,
            ));
            cases.push(m(
                format!("MEXTEND 1 {key} {token} ttl {ttl:?}"),
                &["LOCK.MEXTEND", "1", key, token, ttl],
                want,
            ));
        }
        let long = "x".repeat(257);
        for bad in ["", long.as_str()] {
            cases.push(m(
                format!("MACQUIRE {key} TOKEN of {} bytes", bad.len()),
                &["LOCK.MACQUIRE", "2", key, "m2", "600000", "TOKEN", bad],
                TOKEN_LENGTH,
            ));
            cases.push(m(
                format!("MRELEASE {key} token of {} bytes", bad.len()),
                &["LOCK.MRELEASE", "2", key, "m2", bad],
                TOKEN_LENGTH,
            ));
            cases.push(m(
                format!("MEXTEND {key} token of {} bytes", bad.len()),
                &["LOCK.MEXTEND", "2", key, "m2", bad, "600000"],
                TOKEN_LENGTH,
            ));
        }
        let with = |name: &str, opts: &[&str], want| {
            let mut args = vec!["LOCK.MACQUIRE", "2", key, "m2", "600000", "TOKEN", token];
            args.extend(opts);
            case(format!("MACQUIRE 2 {key} m2 600000 {name}"), &args, want)
        };
        cases.extend([
            with("NX", &["NX"], UNKNOWN_OPTION),
            with("TOKEN again", &["TOKEN", token], REPEATED_TOKEN),
            with("SESSION SESSION", &["SESSION", "SESSION"], REPEATED_SESSION),
            with("LEASE", &["LEASE"], LEASE_MISSING),
            with(
                "LEASE uppercase hex",
                &["LEASE", lease_like],
                LEASE_ID_INVALID,
            ),
            with("LEASE \\0", &["LEASE", "\0"], LEASE_ID_INVALID),
            with("SYNC 1", &["SYNC", "1"], SYNC_MISSING),
            with("SYNC x 100", &["SYNC", "x", "100"], SYNC_REPLICAS),
            with("SYNC 1 \\r\\n", &["SYNC", "1", "\r\n"], SYNC_TIMEOUT),
        ]);
        cases
    });
    Fixture::new().assert_all_refused(&cases);
}
