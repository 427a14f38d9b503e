//! The quick start of docs/clients/rust.md, run as written: the block marked
//! `<!-- quickstart -->` must be, byte for byte, examples/quickstart.rs
//! (which `cargo test` builds), and that program is run against a real
//! server with the module: once undisturbed, and once with every client
//! connection killed (`CLIENT KILL TYPE normal`) while it works. It must end
//! as the doc says (it finishes, or reports the loss), never crash or hang.
//! In the packaged crate, which has no docs/, the comparison is skipped.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{LocksOn, Server};
use redis_lock_client::redis;

const MARK: &str = "<!-- quickstart -->\n```rust\n";
/// A bound for a hang only (the program runs in about 2 s): not a measure.
const HANG_LIMIT: Duration = Duration::from_secs(120);

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The marked block of the doc, or `None` outside the repository.
fn quickstart_in_doc() -> Option<String> {
    let doc = std::fs::read_to_string(manifest().join("../../docs/clients/rust.md")).ok()?;
    assert_eq!(
        doc.matches("<!-- quickstart -->").count(),
        1,
        "one marked block"
    );
    let start = doc.find(MARK).expect("the mark is above a rust block") + MARK.len();
    let end = start + doc[start..].find("```\n").expect("the block ends");
    Some(doc[start..end].to_string())
}

#[test]
fn the_example_is_the_quickstart_of_the_doc_verbatim() {
    let example = std::fs::read_to_string(manifest().join("examples/quickstart.rs")).unwrap();
    match quickstart_in_doc() {
        Some(doc) => assert!(
            doc == example,
            "docs/clients/rust.md's quick start and examples/quickstart.rs differ: \
             copy the block into the example (or back)"
        ),
        None => eprintln!("no docs/ here (the packaged crate): not compared"),
    }
}

/// The example as `cargo test` built it, beside this test's binary.
fn program() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let built = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples/quickstart");
    assert!(
        built.exists(),
        "{} is missing: cargo test builds it (or cargo build --example quickstart)",
        built.display()
    );
    built
}

fn start(server: &Server) -> Child {
    Command::new(program())
        .env("REDIS_URL", server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Its output once it exited 0: `seen`, what was read already, then the
/// rest of its stdout (`None`: read by the caller, in `rest`); or a failure
/// with everything it said.
fn finished(
    mut child: Child,
    seen: String,
    rest: Option<std::thread::JoinHandle<String>>,
) -> String {
    let rest = rest.unwrap_or_else(|| {
        let mut stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stdout.read_to_string(&mut rest);
            rest
        })
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > HANG_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = seen + &rest.join().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let Some(status) = status else {
        panic!("the quick start hung:\n{out}\n{err}");
    };
    assert!(
        status.success() && !err.contains("panicked"),
        "{status}\n{out}\n{err}"
    );
    out
}

#[test]
fn the_quickstart_runs_as_written() {
    let server = Server::start();
    let out = finished(start(&server), String::new(), None);
    assert!(out.contains("invoice 40 written with fence"), "{out}");
    assert!(out.contains("released: true"), "{out}");
    assert!(out.trim_end().ends_with("done"), "{out}");
}

#[test]
fn the_quickstart_survives_its_connections_killed() {
    let server = Server::start();
    let mut child = start(&server);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    // In the middle of its work.
    while !seen.contains("invoice 5 ") {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        seen.push_str(&line);
    }
    // Every normal client but this one (SKIPME yes): the program's
    // connection manager and its session's.
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"])
        .query(&mut server.admin())
        .unwrap();
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        rest
    });
    let out = finished(child, seen, Some(rest));
    assert!(killed >= 1, "{out}");
    // As the doc says: it went on and finished, or it saw the loss and said
    // so; a release that failed on the network is reported.
    assert!(
        out.contains("invoice 40 written with fence") || out.contains("lost the lock"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("done"), "{out}");
}
