//! lock-chaos: fault-injection runs against redis-lock, checked on recorded
//! histories (issue 5). `make chaos` runs every scenario, `make chaos-quick`
//! a bounded subset; `lock-chaos --help` lists the options.

mod candidate;
mod check;
mod election;
mod election_check;
mod failover;
mod guarded;
mod history;
mod lease_group;
mod lease_worker;
mod multi;
mod multi_worker;
mod replstream;
mod scenarios;
mod server;
mod shared;
mod worker;

use std::path::PathBuf;
use std::time::Instant;

use scenarios::{Ctx, Report};

const HELP: &str = "\
lock-chaos [--quick] [--scenarios 1,2,...] [--seed N] [--module PATH] [--server BIN]
           [--out DIR] [--report FILE] [--keep-history]
    Run the fault scenarios (1 contention, 2 paused holder, 3 paused server,
    4 crash and restart, 5 persistence round trips, 6 replication stream,
    7 Sentinel failover in network namespaces, root only, 8 leader election
    under a paused leader, a killed leader and a Sentinel failover, root
    only, 9 read/write lock and 10 semaphore, each under paused holders and
    kill -9 with the AOF always, 14 lease group: a holder of 16 locks
    through one lease paused past it, killed, and revoked, 15 multi-key
    locks: sets of 2-4 keys taken at once (LOCK.MACQUIRE … WAIT) under
    contention, paused holders and kill -9; 11-13 are integration tests) and check each history with C1-C6 (C6: the
    list written through LOCK.GUARD, scenarios 2, 4, 7 and 14; 8 adds its own:
    one acting leader at a time, observers converge; in 9 and 10 C1 and C3
    allow readers together and up to the semaphore's limit of permits; 14
    adds its own: every key handed on, the lease never renewed after its
    end, the holder told LOST or REVOKED; 15 adds its own: a refused
    LOCK.MACQUIRE holds no key, every worker of the contention phase got a
    set). Exit status 1 if any run has a
    violation that counts. Time bounds (C5, and the own checks that need a
    hand-off within a bound, observers caught up, or a round that proves
    something) do not count on a machine too busy for them (load average
    above twice the cores): they are reported as not measured.
lock-chaos check HISTORY.jsonl [--bound-ms N]
    Run C1, C2, C3, C5 and C6 again on a kept history (N: TTL + 1000, default 3000).
lock-chaos worker --key=value ...
lock-chaos candidate|observer --key=value ...
    One worker, election candidate or observer process (started by the
    scenarios).";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("worker") => worker::WorkerArgs::parse(&args[1..]).and_then(|a| {
            if a.lease_keys > 0 {
                lease_worker::run(a)
            } else if a.multi_keys > 0 {
                multi_worker::run(a)
            } else {
                worker::run(a)
            }
        }),
        Some("candidate") => {
            candidate::ElectArgs::parse(&args[1..]).and_then(candidate::run_candidate)
        }
        Some("observer") => {
            candidate::ElectArgs::parse(&args[1..]).and_then(candidate::run_observer)
        }
        Some("check") => recheck(&args[1..]),
        Some("--help") | Some("-h") => {
            println!("{HELP}");
            Ok(())
        }
        _ => run(&args),
    };
    if let Err(e) = result {
        eprintln!("lock-chaos: {e}");
        std::process::exit(1);
    }
}

fn recheck(args: &[String]) -> Result<(), String> {
    let path = args.first().ok_or("check needs a history file")?;
    let mut bound_ms = 3000;
    if let Some(i) = args.iter().position(|a| a == "--bound-ms") {
        bound_ms = args
            .get(i + 1)
            .and_then(|n| n.parse().ok())
            .ok_or("--bound-ms N")?;
    }
    let events = history::load(&PathBuf::from(path))?;
    let v = check::check(&events, bound_ms * history::MS);
    println!(
        "{} events, {} grants: {}",
        events.len(),
        v.stats.grants,
        v.summary()
    );
    print!("{}", v.details());
    Ok(())
}

fn run(args: &[String]) -> Result<(), String> {
    let root = std::env::current_dir().map_err(|e| e.to_string())?;
    let mut quick = false;
    let mut keep_history = false;
    let mut selected: Vec<u32> = (1..=10).chain([14, 15]).collect();
    let mut seed: u64 = 20260529;
    let mut module = server::module_path(&root);
    let mut binary = "redis-server".to_string();
    let mut out = root.join("target/chaos");
    let mut report_path: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--quick" => quick = true,
            "--keep-history" => keep_history = true,
            "--scenarios" => {
                selected = value()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|_| format!("bad scenario {s:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--seed" => seed = value()?.parse().map_err(|_| "--seed N")?,
            "--module" => module = PathBuf::from(value()?),
            "--server" => binary = value()?,
            "--out" => out = PathBuf::from(value()?),
            "--report" => report_path = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other:?}\n{HELP}")),
        }
    }
    if !module.exists() {
        return Err(format!(
            "{} is missing: run `make build` first",
            module.display()
        ));
    }
    // The servers start in directories of their own: a relative path (as a
    // user types it) would name nothing there.
    let module =
        std::fs::canonicalize(&module).map_err(|e| format!("{}: {e}", module.display()))?;
    // Likewise a server binary given by a path (a bare name is looked up in
    // PATH).
    if binary.contains('/') {
        binary = std::fs::canonicalize(&binary)
            .map_err(|e| format!("{binary}: {e}"))?
            .to_string_lossy()
            .into_owned();
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let _ = std::fs::remove_dir_all(out.join("servers"));
    let ctx = Ctx {
        cfg: server::Config {
            binary,
            module,
            work: out.join("servers"),
        },
        out,
        exe: std::env::current_exe().map_err(|e| e.to_string())?,
        quick,
        seed,
        keep_history,
    };
    println!(
        "lock-chaos: {} run, seed {seed}, scenarios {selected:?}",
        if quick { "quick" } else { "full" }
    );
    let started = Instant::now();
    let mut reports: Vec<Report> = Vec::new();
    for id in selected {
        let t = Instant::now();
        println!("scenario {id}:");
        let result = match id {
            1 => scenarios::contention(&ctx),
            2 => scenarios::paused_holder(&ctx),
            3 => scenarios::paused_server(&ctx),
            4 => scenarios::crash_restart(&ctx),
            5 => scenarios::persistence(&ctx),
            6 => scenarios::replication_stream(&ctx),
            7 => failover::failover(&ctx),
            8 => election::election(&ctx),
            9 => shared::read_write(&ctx),
            10 => shared::semaphore(&ctx),
            14 => lease_group::lease_group(&ctx),
            15 => multi::multi_key(&ctx),
            11..=13 => Err(format!(
                "no scenario {id} in lock-chaos: 11-13 are integration tests (docs/reliability.md)"
            )),
            other => Err(format!("no scenario {other}")),
        };
        // A scenario that could not go on (a server died, say) is a
        // violation, and the other scenarios still run.
        let mut rep = result.unwrap_or_else(|e| {
            println!("  scenario {id} aborted: {e}");
            let mut rep = Report::new(&ctx, id, "(aborted)");
            rep.verdict.scenario.push(format!("scenario aborted: {e}"));
            rep.notes.push(format!("aborted: {e}"));
            rep
        });
        rep.verdict
            .scenario
            .extend(server::crashes(&ctx.cfg.work, &format!("s{id}-")));
        rep.seconds = t.elapsed().as_secs_f64();
        for note in &rep.notes {
            println!("    {note}");
        }
        println!(
            "  scenario {id} ({}): {} runs, {} ops, {} faults, {} violations ({} counting), {} not measured in {:.0} s",
            rep.name,
            rep.runs,
            rep.verdict.stats.operations(),
            rep.faults,
            rep.verdict.violations(),
            rep.failures(),
            rep.verdict.not_measured.len(),
            rep.seconds
        );
        reports.extend(std::iter::once(rep));
    }
    let table = summary(&reports, quick, seed, started.elapsed().as_secs_f64());
    println!("\n{table}");
    let path = report_path.unwrap_or_else(|| ctx.out.join("summary.md"));
    std::fs::write(&path, &table).map_err(|e| format!("write {}: {e}", path.display()))?;
    println!("summary written to {}", path.display());
    let failing: Vec<u32> = reports
        .iter()
        .filter(|r| r.failures() > 0)
        .map(|r| r.id)
        .collect();
    if failing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "violations in scenarios {failing:?} (histories kept under {})",
            ctx.out.display()
        ))
    }
}

fn summary(reports: &[Report], quick: bool, seed: u64, secs: f64) -> String {
    let mut t = format!(
        "lock-chaos {} run, seed {seed}, {secs:.0} s\n\n\
         | # | Scenario | Rerun | Runs | Ops | Faults | Violations | C1 | C2 | C3 | C4 | C5 | C6 | Own checks | Not measured |\n\
         | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        if quick { "quick" } else { "full" }
    );
    for r in reports {
        let v = &r.verdict;
        t.push_str(&format!(
            "| {} | {} | `{}` | {} | {} | {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.id,
            r.name,
            r.rerun,
            r.runs,
            v.stats.operations(),
            r.faults,
            v.violations(),
            if r.failures() < v.violations() {
                format!(" ({} tolerated)", v.violations() - r.failures())
            } else {
                String::new()
            },
            v.c1.len(),
            v.c2.len(),
            v.c3_double.len() + v.c3_late.len(),
            v.c4.len(),
            v.c5.len(),
            v.c6.len(),
            v.scenario.len() + v.timed.len(),
            v.not_measured.len()
        ));
    }
    t.push_str(&guarded_table(reports));
    t.push('\n');
    for r in reports {
        for note in &r.notes {
            t.push_str(&format!("- scenario {}: {note}\n", r.id));
        }
        // Time bounds a busy machine could not keep: said, not counted.
        for why in &r.verdict.not_measured {
            t.push_str(&format!("- scenario {}: not measured: {why}\n", r.id));
        }
    }
    t
}

/// The two protected resources side by side, for the scenarios that write
/// the guarded list: what survived in Redis (C6) and what the fenced
/// resource accepted (C1).
fn guarded_table(reports: &[Report]) -> String {
    let rows: Vec<&Report> = reports
        .iter()
        .filter(|r| r.verdict.stats.guard.sent > 0)
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut t = String::from(
        "\nGuarded writes (LOCK.GUARD ... RPUSH, checked on the data that survived) next to the fenced resource:\n\n\
         | # | Scenario | Appends written | Refused (LOST / REVOKED) | Unknown | Records survived | Acknowledged, lost with their grant | Overlapping sections, surviving data (C6) | C6 violations | Fences only: overlapping sections accepted (C1) | Stale fenced writes rejected |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        let (v, g) = (&r.verdict, &r.verdict.stats.guard);
        t.push_str(&format!(
            "| {} | {} | {} | {} / {} | {} | {} | {} | **{}** | {} | {} | {} |\n",
            r.id,
            r.name,
            g.written,
            g.lost,
            g.revoked,
            g.unknown,
            g.survived,
            g.acked_missing,
            g.overlapping,
            v.c6.len(),
            v.c1.len(),
            v.stats.writes_rejected
        ));
    }
    t
}
