//! Which module this client needs, and the one check that the server has
//! it: `MODULE LIST`, once per [`Locks`](crate::Locks) (at connect, or at
//! the first command of one made with
//! [`Locks::from_connection`](crate::Locks::from_connection)).
//!
//! The rule: a client x.y.* needs the module x.y.0 or newer. The module
//! reports its version in `MODULE LIST` as `ver` = major·10000 +
//! minor·100 + patch (0.4.0 is 400); builds before 0.4.0 reported 1.

use std::time::Duration;

use redis::Value;

use crate::conn::LockConnection;
#[cfg(test)]
use crate::error::shown;
use crate::error::{timed_out, Error, Result};

/// This client's version (its crate's).
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The oldest module this client works with, as `MODULE LIST` numbers it:
/// x.y.0 for this client's x.y.* (0.4.0: 400).
pub const REQUIRED_MODULE_VERSION: u32 = {
    // The module numbers its own version the same way (src/lib.rs).
    const fn number(text: &str) -> u32 {
        let bytes = text.as_bytes();
        let (mut i, mut n) = (0, 0);
        while i < bytes.len() {
            n = n * 10 + (bytes[i] - b'0') as u32;
            i += 1;
        }
        n
    }
    number(env!("CARGO_PKG_VERSION_MAJOR")) * 10000 + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
};

/// How long the check waits for `MODULE LIST`'s reply (and, at first use,
/// for the connection behind it) before it fails with
/// [`Error::Connection`]: a server that does not answer this does not
/// answer the lock commands either.
pub const MODULE_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What a `MODULE LIST` reply says of the `lock` module: `Some(None)` when
/// it is not loaded, `Some(Some(ver))` when it is, `None` when the reply
/// cannot be read (then nothing is decided). RESP2 lists each module as a
/// flat array of names and values, RESP3 as a map.
pub(crate) fn lock_module_in(reply: &Value) -> Option<Option<u32>> {
    let Value::Array(modules) = reply else {
        return None;
    };
    for module in modules {
        let pairs: Vec<(&Value, &Value)> = match module {
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
            Value::Array(flat) => flat
                .chunks_exact(2)
                .map(|pair| (&pair[0], &pair[1]))
                .collect(),
            _ => return None,
        };
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| text(k).as_deref() == Some(name))
                .map(|(_, v)| *v)
        };
        if field("name").and_then(text).as_deref() != Some("lock") {
            continue;
        }
        let ver = match field("ver")? {
            Value::Int(n) => u32::try_from(*n).ok()?,
            other => text(other)?.parse().ok()?,
        };
        return Some(Some(ver));
    }
    Some(None)
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The verdict on what `MODULE LIST` said: `found` is the `lock` module's
/// `ver`, `None` when it is not loaded.
pub(crate) fn verdict(found: Option<u32>) -> Result<()> {
    match found {
        Some(ver) if ver >= REQUIRED_MODULE_VERSION => Ok(()),
        found => Err(Error::ModuleVersion {
            found,
            required: REQUIRED_MODULE_VERSION,
        }),
    }
}

/// The check: [`Error::ModuleVersion`] when the server's `lock` module is
/// older than this client needs or not loaded. A server that refuses
/// `MODULE LIST` itself (a user without it in its ACL, as the `+@lock`
/// recipe of docs/operations.md makes; a proxy that does not pass it on)
/// cannot tell, and is let through: its lock commands answer for it. In a
/// cluster, the node the command is routed to answers for all.
pub(crate) async fn check(conn: &LockConnection) -> Result<()> {
    let asked = tokio::time::timeout(
        MODULE_CHECK_TIMEOUT,
        conn.query::<Value>(&redis::cmd("MODULE").arg("LIST").clone()),
    )
    .await;
    let reply = match asked {
        Err(_) => {
            return Err(timed_out(
                "no reply to MODULE LIST (the module version check) in time",
            ))
        }
        Ok(Err(e)) => match Error::from(e) {
            Error::Server(_) => return Ok(()),
            other => return Err(other),
        },
        Ok(Ok(reply)) => reply,
    };
    match lock_module_in(&reply) {
        Some(found) => verdict(found),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn resp2(name: &str, ver: i64) -> Value {
        Value::Array(vec![
            bulk("name"),
            bulk(name),
            bulk("ver"),
            Value::Int(ver),
            bulk("path"),
            bulk("/x.so"),
            bulk("args"),
            Value::Array(vec![]),
        ])
    }

    #[test]
    fn this_client_needs_the_module_of_its_own_major_and_minor() {
        let ver = |part: &str| part.parse::<u32>().unwrap();
        let parts: Vec<&str> = CLIENT_VERSION.split('.').collect();
        assert_eq!(
            REQUIRED_MODULE_VERSION,
            ver(parts[0]) * 10000 + ver(parts[1]) * 100
        );
        assert_eq!(REQUIRED_MODULE_VERSION, 400);
    }

    #[test]
    fn the_lock_module_is_found_in_resp2_and_resp3_replies() {
        let two = Value::Array(vec![resp2("search", 20810), resp2("lock", 400)]);
        assert_eq!(lock_module_in(&two), Some(Some(400)));
        let three = Value::Array(vec![Value::Map(vec![
            (bulk("name"), bulk("lock")),
            (bulk("ver"), Value::Int(1)),
        ])]);
        assert_eq!(lock_module_in(&three), Some(Some(1)));
        assert_eq!(
            lock_module_in(&Value::Array(vec![resp2("bf", 1)])),
            Some(None)
        );
        assert_eq!(lock_module_in(&Value::Array(vec![])), Some(None));
        assert_eq!(lock_module_in(&Value::Int(3)), None);
    }

    #[test]
    fn an_older_or_missing_module_is_refused_naming_both_versions() {
        assert!(verdict(Some(400)).is_ok());
        assert!(verdict(Some(401)).is_ok());
        assert!(verdict(Some(10000)).is_ok());
        for found in [Some(1), Some(399), Some(300), None] {
            match verdict(found) {
                Err(e @ Error::ModuleVersion { .. }) => {
                    let said = e.to_string();
                    assert!(said.contains(CLIENT_VERSION), "{said}");
                    assert!(said.contains("0.4.0 or newer"), "{said}");
                    if let Some(ver) = found {
                        assert!(said.contains(&format!("ver {ver}")), "{said}");
                    } else {
                        assert!(said.contains("no lock module loaded"), "{said}");
                    }
                }
                other => panic!("{found:?}: expected ModuleVersion, got {other:?}"),
            }
        }
        assert_eq!(shown(400), "0.4.0 (ver 400)");
        assert_eq!(shown(10203), "1.2.3 (ver 10203)");
    }
}
