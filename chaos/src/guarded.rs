//! The second protected resource: a Redis list written only through
//! `LOCK.GUARD`, and its checker C6 (issue 12).
//!
//! A worker with `--guard` appends `<worker>:<fence>:<token>:begin` to the
//! list `<lock key>:log` through `LOCK.GUARD <key> <token> RPUSH …` as its
//! critical section starts, and `…:end` as it ends (after its write to the
//! fenced resource). Each attempt is recorded as an [`Event::Guarded`]. After
//! the run the harness reads the list from the server that survived (the
//! final master, after restarts and failovers) and records it as an
//! [`Event::Survived`]. C6 then checks the data itself, not the replies:
//! - two sections never interleave: once another section has written,
//!   an earlier section never writes again (a `begin` of B between A's
//!   `begin` and `end` is counted on A);
//! - fences never go backwards along the list;
//! - no record whose GUARD was answered `LOST` (or `REVOKED`) is there.
//!
//! An acknowledged record missing from the surviving list is not a
//! violation of C6: with asynchronous replication (or RDB) a write can be
//! lost with the grant that allowed it. It is counted (`acked_missing`).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::history::{mono_ns, Event, GuardResult};
use redis::{Connection, Value};

/// The list a lock key's guarded sections append to.
pub fn log_key(lock_key: &str) -> String {
    format!("{lock_key}:log")
}

/// One record of the list.
pub fn record(worker: u32, fence: u64, token: &str, phase: &str) -> String {
    format!("{worker}:{fence}:{token}:{phase}")
}

/// A section: (worker, fence, token).
type Section = (u32, u64, String);

fn parse(record: &str) -> Option<(Section, &str)> {
    let mut parts = record.splitn(4, ':');
    let worker = parts.next()?.parse().ok()?;
    let fence = parts.next()?.parse().ok()?;
    let token = parts.next()?.to_string();
    let phase = parts.next()?;
    Some(((worker, fence, token), phase))
}

/// Set in the environment of a run, workers append with a plain `RPUSH`:
/// the control run that shows C6 finds what GUARD prevents.
pub const UNGUARDED_ENV: &str = "LOCK_CHAOS_UNGUARDED";

/// How a worker's guarded appends are confirmed: `WAIT replicas` after
/// each (0: none), or `SYNC sync` on it (0: none), within `wait_ms`.
pub struct Confirm {
    pub replicas: u64,
    pub sync: u64,
    pub wait_ms: u64,
}

/// `LOCK.GUARD key token RPUSH <key>:log record`, confirmed as `confirm`
/// says, and the reason of a `REVOKED <reason>` reply. The connection is
/// broken when the result is `Unknown`.
pub fn append(
    con: &mut Connection,
    key: &str,
    confirm: &Confirm,
    token: &str,
    record: &str,
) -> (GuardResult, Option<String>) {
    let (replicas, wait_ms) = (confirm.replicas, confirm.wait_ms);
    let mut cmd = redis::cmd("LOCK.GUARD");
    cmd.arg(key).arg(token);
    if confirm.sync > 0 {
        cmd.arg("SYNC").arg(confirm.sync).arg(wait_ms);
    }
    if std::env::var_os(UNGUARDED_ENV).is_some() {
        cmd = redis::Cmd::new();
    }
    let reply: redis::RedisResult<Value> =
        cmd.arg("RPUSH").arg(log_key(key)).arg(record).query(con);
    let result = match &reply {
        Ok(Value::Int(_)) if replicas == 0 => GuardResult::Written,
        Ok(Value::Int(_)) => match redis::cmd("WAIT").arg(replicas).arg(wait_ms).query(con) {
            Ok(Value::Int(n)) if n >= replicas as i64 => GuardResult::Written,
            Ok(_) => GuardResult::Unconfirmed,
            Err(_) => GuardResult::Unknown,
        },
        Err(e) if e.code() == Some("LOST") => GuardResult::Lost,
        Err(e) if e.code() == Some("REVOKED") => {
            return (
                GuardResult::Revoked,
                Some(e.detail().unwrap_or("").to_string()),
            )
        }
        // SYNC: written, but not on enough replicas.
        Err(e) if e.code() == Some("NOSYNC") => GuardResult::Unconfirmed,
        _ => GuardResult::Unknown,
    };
    (result, None)
}

/// Read the surviving list of `lock_key` from `con` (the final master) as
/// an event for the history, and delete it, so that the next run on the same
/// server starts empty.
pub fn collect(con: &mut Connection, server: &str, lock_key: &str) -> Result<Event, String> {
    let key = log_key(lock_key);
    let records: Vec<String> = redis::cmd("LRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .query(con)
        .map_err(|e| format!("LRANGE {key} on {server}: {e}"))?;
    let _: Value = redis::cmd("DEL")
        .arg(&key)
        .query(con)
        .map_err(|e| format!("DEL {key} on {server}: {e}"))?;
    Ok(Event::Survived {
        key: lock_key.to_string(),
        server: server.to_string(),
        t: mono_ns(),
        records,
    })
}

/// [`collect`] on a fresh connection to `addr`.
pub fn collect_from(addr: &str, lock_key: &str) -> Result<Event, String> {
    let mut con = crate::server::connect(addr, Duration::from_secs(2))?;
    collect(&mut con, addr, lock_key)
}

#[derive(Default, Debug, Clone, Copy)]
pub struct GuardStats {
    /// Guarded appends sent, and what they got.
    pub sent: u64,
    pub written: u64,
    pub unconfirmed: u64,
    pub lost: u64,
    /// Refused `REVOKED <reason>`: the hold was taken away (scenario 14).
    pub revoked: u64,
    pub unknown: u64,
    /// Records in the surviving lists.
    pub survived: u64,
    /// Acknowledged (`Written`) records absent from the surviving list: lost
    /// with their grant (async replication, RDB), not an overlap.
    pub acked_missing: u64,
    /// Surviving records whose reply the history does not have (a worker
    /// killed between the reply and its report).
    pub unreported: u64,
    /// Sections that wrote again after another section had written: the
    /// overlapping sections accepted in the surviving data.
    pub overlapping: u64,
}

impl GuardStats {
    pub fn add(&mut self, b: GuardStats) {
        self.sent += b.sent;
        self.written += b.written;
        self.unconfirmed += b.unconfirmed;
        self.lost += b.lost;
        self.revoked += b.revoked;
        self.unknown += b.unknown;
        self.survived += b.survived;
        self.acked_missing += b.acked_missing;
        self.unreported += b.unreported;
        self.overlapping += b.overlapping;
    }
}

/// C6 on a history: its violations and figures. A history without a
/// `Survived` event (no guarded resource in that scenario) passes.
pub fn check(events: &[Event]) -> (Vec<String>, GuardStats) {
    let mut stats = GuardStats::default();
    let mut out = Vec::new();
    // record -> reply, per lock key.
    let mut replies: HashMap<(&str, &str), GuardResult> = HashMap::new();
    for e in events {
        if let Event::Guarded {
            key,
            record,
            result,
            ..
        } = e
        {
            stats.sent += 1;
            match result {
                GuardResult::Written => stats.written += 1,
                GuardResult::Unconfirmed => stats.unconfirmed += 1,
                GuardResult::Lost => stats.lost += 1,
                GuardResult::Revoked => stats.revoked += 1,
                GuardResult::Unknown => stats.unknown += 1,
            }
            replies.insert((key.as_str(), record.as_str()), *result);
        }
    }
    for e in events {
        let Event::Survived {
            key,
            server,
            records,
            ..
        } = e
        else {
            continue;
        };
        stats.survived += records.len() as u64;
        let present: HashSet<&str> = records.iter().map(String::as_str).collect();
        stats.acked_missing += replies
            .iter()
            .filter(|((k, r), res)| {
                k == key && **res == GuardResult::Written && !present.contains(r)
            })
            .count() as u64;
        let mut current: Option<Section> = None;
        let mut superseded: HashSet<Section> = HashSet::new();
        let mut overlapped: HashSet<Section> = HashSet::new();
        let mut last_fence = 0;
        for (i, text) in records.iter().enumerate() {
            let Some((section, phase)) = parse(text) else {
                out.push(format!(
                    "{key} on {server}: record {i} {text:?} was not written by a worker"
                ));
                continue;
            };
            match replies.get(&(key.as_str(), text.as_str())) {
                Some(GuardResult::Lost) => out.push(format!(
                    "{key} on {server}: record {i} {text:?} is there although its GUARD answered LOST"
                )),
                Some(GuardResult::Revoked) => out.push(format!(
                    "{key} on {server}: record {i} {text:?} is there although its GUARD answered REVOKED"
                )),
                None => stats.unreported += 1,
                Some(_) => {}
            }
            if section.1 < last_fence {
                out.push(format!(
                    "{key} on {server}: record {i} {text:?} has fence {} below the fence {last_fence} before it",
                    section.1
                ));
            }
            last_fence = last_fence.max(section.1);
            if current.as_ref() != Some(&section) {
                if let Some(previous) = current.take() {
                    if superseded.contains(&section) && overlapped.insert(section.clone()) {
                        out.push(format!(
                            "{key} on {server}: worker {} (fence {}) wrote {phase:?} at record {i}, after worker {} (fence {}) had begun: two holders' sections interleave",
                            section.0, section.1, previous.0, previous.1
                        ));
                    }
                    superseded.insert(previous);
                }
                current = Some(section);
            }
        }
        stats.overlapping += overlapped.len() as u64;
    }
    (out, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guarded(worker: u32, fence: u64, phase: &str, result: GuardResult) -> Event {
        Event::Guarded {
            worker,
            key: "k".into(),
            token: format!("w{worker}-{fence}"),
            fence,
            record: record(worker, fence, &format!("w{worker}-{fence}"), phase),
            t_inv: 0,
            t_comp: 0,
            result,
            reason: None,
        }
    }

    fn survived(records: &[(u32, u64, &str)]) -> Event {
        Event::Survived {
            key: "k".into(),
            server: "s".into(),
            t: 0,
            records: records
                .iter()
                .map(|(w, f, p)| record(*w, *f, &format!("w{w}-{f}"), p))
                .collect(),
        }
    }

    use GuardResult::*;

    #[test]
    fn sections_one_after_another_pass_and_lost_acknowledged_writes_are_counted() {
        let h = vec![
            guarded(1, 10, "begin", Written),
            guarded(1, 10, "end", Written),
            guarded(2, 11, "begin", Written),
            // Lost with its grant (say, by a failover): counted, not a violation.
            guarded(3, 12, "begin", Written),
            guarded(2, 11, "end", Lost),
            survived(&[(1, 10, "begin"), (1, 10, "end"), (2, 11, "begin")]),
        ];
        let (v, s) = check(&h);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((s.sent, s.written, s.lost, s.survived), (5, 4, 1, 3));
        assert_eq!(s.acked_missing, 1);
    }

    #[test]
    fn an_interleaving_section_is_flagged_once() {
        let h = vec![survived(&[
            (1, 10, "begin"),
            (2, 11, "begin"),
            (1, 10, "end"),
            (2, 11, "end"),
            (1, 10, "end"),
        ])];
        let (v, s) = check(&h);
        // Worker 1 writes after worker 2 began (twice), worker 2 after 1
        // wrote again, and fence 10 comes after 11: two interleaved
        // sections, two fence regressions.
        assert_eq!(v.iter().filter(|m| m.contains("interleave")).count(), 2);
        assert_eq!(v.iter().filter(|m| m.contains("below")).count(), 2);
        assert_eq!((s.unreported, s.overlapping), (5, 2));
    }

    #[test]
    fn a_fence_going_backwards_and_a_lost_write_present_are_flagged() {
        let h = vec![
            guarded(1, 10, "begin", Lost),
            survived(&[(2, 11, "begin"), (2, 11, "end"), (1, 10, "begin")]),
        ];
        let (v, _) = check(&h);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("LOST"), "{v:?}");
        assert!(v[1].contains("below"), "{v:?}");
    }

    #[test]
    fn a_revoked_write_present_is_flagged_and_counted() {
        let h = vec![
            guarded(1, 10, "begin", Written),
            guarded(1, 10, "end", Revoked),
            guarded(1, 10, "stale", Revoked),
            survived(&[(1, 10, "begin"), (1, 10, "end")]),
        ];
        let (v, s) = check(&h);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("REVOKED"), "{v:?}");
        assert_eq!((s.sent, s.written, s.lost, s.revoked), (3, 1, 0, 2));
    }

    #[test]
    fn a_foreign_record_is_flagged_and_no_survived_list_means_nothing_to_check() {
        let (v, _) = check(&[Event::Survived {
            key: "k".into(),
            server: "s".into(),
            t: 0,
            records: vec!["junk".into()],
        }]);
        assert_eq!(v.len(), 1);
        let (v, s) = check(&[guarded(1, 10, "begin", Written)]);
        assert!(v.is_empty());
        assert_eq!(s.acked_missing, 0);
    }
}
