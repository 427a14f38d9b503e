//! The redis-cli session shown in the README, run for real through redis-cli.
//!
//! redis-cli exits 0 even when a reply is an error, so the test compares the
//! text. `<uuid>`, `<fence>` and `<ms>` in the transcript stand for values that
//! change from run to run; the same fence must appear for the renewal.

mod common;
use common::*;

use std::io::Write;
use std::process::{Command, Stdio};

const TRANSCRIPT: &str = include_str!("cli/transcript.txt");
const README: &str = include_str!("../README.md");

/// The transcript as (command, expected reply lines) pairs.
fn steps() -> Vec<(String, Vec<String>)> {
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in TRANSCRIPT.lines() {
        if let Some(command) = line.strip_prefix("redis> ") {
            steps.push((command.to_string(), Vec::new()));
        } else {
            steps
                .last_mut()
                .expect("transcript starts with a command")
                .1
                .push(line.to_string());
        }
    }
    steps
}

fn pattern(expected: &str) -> regex::Regex {
    let escaped = regex::escape(expected)
        .replace(
            "<uuid>",
            "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        )
        .replace("<fence>", "([0-9]{16})")
        .replace("<ms>", "[0-9]+");
    regex::Regex::new(&format!("^{escaped}$")).unwrap()
}

#[test]
fn redis_cli_transcript_matches() {
    let server = Server::start();
    let steps = steps();
    let mut child = Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "--no-raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run redis-cli");
    let input: String = steps.iter().map(|(c, _)| format!("{c}\n")).collect();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let got = String::from_utf8(output.stdout).unwrap();
    // redis-cli adds the time a command took, `(0.54s)`, when it took over
    // half a second: on a loaded machine that can be any command.
    let elapsed = regex::Regex::new(r"^\([0-9]+\.[0-9]+s\)$").unwrap();
    let mut got_lines = got.lines().filter(|l| !elapsed.is_match(l));
    let mut fences = Vec::new();
    for (command, expected) in &steps {
        for want in expected {
            let line = got_lines
                .next()
                .unwrap_or_else(|| panic!("no reply for `{command}`"));
            let captures = pattern(want)
                .captures(line)
                .unwrap_or_else(|| panic!("`{command}`: expected `{want}`, got `{line}`\n{got}"));
            if let Some(fence) = captures.get(1) {
                fences.push((command.clone(), fence.as_str().parse::<u64>().unwrap()));
            }
        }
    }
    assert_eq!(got_lines.next(), None, "extra output:\n{got}");
    // A renewal (same token) returns the holder's fence, and INFO shows it.
    assert_eq!(fences[1].1, fences[2].1, "{fences:?}");
    assert_eq!(fences[2].1, fences[3].1, "{fences:?}");
    assert!(fences[1].1 > fences[0].1, "{fences:?}");
}

#[test]
fn readme_shows_this_transcript() {
    assert!(
        README.contains(TRANSCRIPT),
        "README.md must contain tests/cli/transcript.txt verbatim"
    );
}
