//! Servers under valgrind's memcheck (`LOCK_TEST_VALGRIND=1`, as `make
//! test-memcheck` sets it): every server a [`Launch`](crate::Launch)
//! starts runs inside valgrind, which logs each memory error (an invalid
//! read, write or free, a jump on an uninitialised value) to
//! `valgrind.<pid>.log` in the server's directory, a forked child (an RDB
//! for a replica, a rewrite) to a file of its own. A server is stopped with
//! a clean `SHUTDOWN` (valgrind writes its summary at exit), and its logs
//! are read then: any error fails the test.
//!
//! Debian's redis-server links jemalloc, but valgrind's allocator is
//! preloaded and takes `malloc` and `free` before it: the module's memory
//! (`RedisModule_Alloc`, the server's zmalloc) is checked too.
//!
//! The servers run 20 to 50 times slower: the harness's own waits grow by
//! [`slowdown`], and tests scale theirs by it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The exit status valgrind gives a server in which it saw an error (a
/// status the servers never use).
pub const ERROR_EXIT_CODE: i32 = 97;

/// The longest part of a report shown in a failure, in lines.
const REPORT_LINES: usize = 80;

/// Whether servers run under memcheck: `$LOCK_TEST_VALGRIND` set, not to
/// `0` or the empty string.
pub fn enabled() -> bool {
    std::env::var_os("LOCK_TEST_VALGRIND").is_some_and(|v| !v.is_empty() && v != "0")
}

/// How many times longer a wait on a server may take: `$LOCK_TEST_SLOWDOWN`
/// if given, else 20 under memcheck (its usual cost on this code), 1
/// otherwise.
pub fn slowdown() -> u32 {
    std::env::var("LOCK_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(if enabled() { 20 } else { 1 })
}

/// `valgrind … binary`, logging to `dir`. `$LOCK_TEST_VALGRIND_ARGS` adds
/// options (e.g. `--track-origins=yes` to see where an uninitialised value
/// came from).
pub fn command(binary: &Path, dir: &Path) -> Command {
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=memcheck")
        .arg(format!("--error-exitcode={ERROR_EXIT_CODE}"))
        .arg(format!(
            "--log-file={}",
            dir.join("valgrind.%p.log").display()
        ))
        .arg(format!("--suppressions={}", suppressions().display()))
        // The server never frees its dataset at exit: leaks are not what
        // this looks for.
        .arg("--leak-check=no")
        // Redis' and Valkey's own test suites run valgrind with these.
        .arg("--show-reachable=no")
        .arg("--show-possibly-lost=no");
    if let Ok(extra) = std::env::var("LOCK_TEST_VALGRIND_ARGS") {
        command.args(extra.split_whitespace());
    }
    command.arg(binary);
    command
}

/// The server-side false positives to leave out (each justified there).
fn suppressions() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("valgrind.supp")
}

/// Every error memcheck logged in `dir` (one report per process), or
/// `None` when it logged none.
pub fn errors_in(dir: &Path) -> Option<String> {
    let mut reports = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return None;
    };
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("valgrind.") && n.ends_with(".log"))
        })
        .collect();
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let errors = error_records(&text);
        if !errors.is_empty() {
            let mut lines: Vec<&str> = errors.iter().flat_map(|e| e.lines()).collect();
            let more = lines.len().saturating_sub(REPORT_LINES);
            lines.truncate(REPORT_LINES);
            let mut report = format!(
                "{} memory error(s) in {}:\n{}",
                errors.len(),
                log.display(),
                lines.join("\n")
            );
            if more > 0 {
                report.push_str(&format!("\n… {more} more lines in the log"));
            }
            reports.push(report);
        }
    }
    (!reports.is_empty()).then(|| reports.join("\n\n"))
}

/// The error records of one valgrind log: a line that names the error,
/// then its stack (`at 0x…`, `by 0x…`) and its details, up to the blank
/// line. Found by their stack: the summaries, the banner and the
/// warnings valgrind logs (a large `set address range perms`) have none.
fn error_records(log: &str) -> Vec<String> {
    // Each line is `==<pid>== <text>`.
    let lines: Vec<&str> = log
        .lines()
        .map(|l| match l.strip_prefix("==") {
            Some(rest) => rest.split_once("== ").map_or("", |(_, text)| text),
            None => l,
        })
        .collect();
    let mut records = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let starts_record = !lines[i].is_empty()
            && !lines[i].starts_with(' ')
            && lines
                .get(i + 1)
                .is_some_and(|l| l.trim_start().starts_with("at 0x"));
        if !starts_record {
            i += 1;
            continue;
        }
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim().is_empty())
            .unwrap_or(lines.len());
        records.push(lines[i..end].join("\n"));
        i = end;
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_the_errors_with_their_stacks_and_nothing_else() {
        let log = "\
==7== Memcheck, a memory error detector
==7== Command: redis-server --port 1
==7== 
==7== Warning: set address range perms: large range [0x1, 0x2) (defined)
==7== Conditional jump or move depends on uninitialised value(s)
==7==    at 0x216DED: RM_FreeCallReply (in /usr/bin/redis-check-rdb)
==7==    by 0x6900AD2: <CallReply as Drop>::drop (call.rs:270)
==7== 
==7== Invalid read of size 4
==7==    at 0x2169DB: ??? (in /usr/bin/redis-check-rdb)
==7==  Address 0x558 is not stack'd, malloc'd or (recently) free'd
==7== 
==7== ERROR SUMMARY: 2 errors from 2 contexts (suppressed: 0 from 0)
";
        let records = error_records(log);
        assert_eq!(records.len(), 2, "{records:?}");
        assert!(records[0].starts_with("Conditional jump"));
        assert!(records[0].contains("call.rs:270"));
        assert!(records[1].ends_with("(recently) free'd"));
        assert!(error_records("==7== ERROR SUMMARY: 0 errors from 0 contexts\n").is_empty());
    }
}
