//! `lock-bench`: run every benchmark and write the results as one JSON
//! document (`bench/README.md` has its schema).
//!
//! `make bench` runs the full profile (about 45 minutes) into
//! `docs/benchmarks.json`, from which `bench/render.py` writes
//! `docs/benchmarks.md` and `bench/charts.py` `docs/img/*.png`; `make
//! bench-quick` runs a tiny version of everything into
//! `target/bench-quick/`, only to show the harness works. Nothing here
//! judges a speed but the goals, which the document records.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use redis_lock_bench::profile::Profile;
use redis_lock_bench::results::{self, Results, RunFacts, ServerResults};
use redis_lock_bench::server::Server;
use redis_lock_bench::throughput::Group;
use redis_lock_bench::{
    contention, holders, keepalive, machine, memory, observing, scale, syncing, throughput, waiting,
};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProfileName {
    Full,
    Quick,
}

#[derive(Parser, Debug)]
#[command(about = "Run the redis-lock benchmarks and write their results (JSON)")]
struct Args {
    #[arg(long, value_enum, default_value = "quick")]
    profile: ProfileName,
    /// The module to load (a release build)
    #[arg(long, default_value = "target/release/libredis_lock.so")]
    module: PathBuf,
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
    /// A valkey-server binary: also run throughput and memory on it
    #[arg(long)]
    valkey_server: Option<PathBuf>,
    /// More server binaries to measure memory on (per lock and per holder),
    /// and nothing else: another build of a server above, with its
    /// allocator named in its label (memory depends on the allocator's
    /// size classes). Repeatable
    #[arg(long)]
    memory_server: Vec<PathBuf>,
    /// Where the results go (JSON: bench/render.py and bench/charts.py
    /// read it)
    #[arg(long)]
    json: PathBuf,
    /// Scratch space for the servers
    #[arg(long, default_value = "target/bench-work")]
    work_dir: PathBuf,
    /// The command to record as the one that made the results
    #[arg(long, default_value = "make bench")]
    made_by: String,
    /// Only these sections (throughput, contention, memory, holders, scale,
    /// waiting, handoff: waiting without its fairness runs, observe, lease:
    /// keeping many holds alive, sync: SYNC against ACQUIRE + WAIT) or
    /// throughput groups (acquire, extend, release, guard, sem-acquire,
    /// sem-release, shared-acquire, shared-release; sem and shared: both of
    /// the pair; multi: the multi-key pair, MACQUIRE + MRELEASE against the
    /// Lua two-key lock, and the hand-off section, whose multi-wait recipe
    /// times the grant of a waiting 4-key request): `--only guard` runs the
    /// GUARD comparisons alone
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

const SECTIONS: [&str; 10] = [
    "throughput",
    "contention",
    "memory",
    "holders",
    "scale",
    "waiting",
    "handoff",
    "observe",
    "lease",
    "sync",
];

fn main() {
    let args = Args::parse();
    if let Err(error) = run(&args) {
        eprintln!("lock-bench: {error}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    let mut profile = match args.profile {
        ProfileName::Full => Profile::full(),
        ProfileName::Quick => Profile::quick(),
    };
    // The keep-alive window may be shortened (or lengthened) from outside.
    profile.keepalive = profile.keepalive.with_env_duration()?;
    let profile = profile;
    let wanted = |section: &str| args.only.is_empty() || args.only.iter().any(|s| s == section);
    let mut group_names: Vec<&str> = Group::ALL.iter().map(|g| g.name()).collect();
    for family in Group::ALL.iter().filter_map(|g| g.family()) {
        if !group_names.contains(&family) {
            group_names.push(family);
        }
    }
    if let Some(unknown) = args
        .only
        .iter()
        .find(|s| !SECTIONS.contains(&s.as_str()) && !group_names.contains(&s.as_str()))
    {
        return Err(format!(
            "--only {unknown}: not a section ({}) nor a throughput group ({})",
            SECTIONS.join(", "),
            group_names.join(", ")
        ));
    }
    let module = std::fs::canonicalize(&args.module)
        .map_err(|e| format!("module {}: {e}", args.module.display()))?;
    let tool = |name: &str| -> Result<PathBuf, String> {
        let path = std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name(name);
        if path.exists() {
            Ok(path)
        } else {
            Err(format!(
                "{} is missing: build the bench crate",
                path.display()
            ))
        }
    };
    let lock_load = tool("lock-load")?;
    let lock_handoff = tool("lock-handoff")?;
    let lock_observe = tool("lock-observe")?;
    let lock_sync = tool("lock-sync")?;
    std::fs::create_dir_all(&args.work_dir).map_err(|e| e.to_string())?;
    let mut progress = |step: &str| {
        eprintln!("[{:>5.0}s] {step}", started.elapsed().as_secs_f64());
    };

    let mut results = Results {
        run: RunFacts {
            made_by: args.made_by.clone(),
            machine: machine::describe(),
            load_average_start: machine::load_average(),
            busy_at_start: machine::busy_processes(),
            load_average_end: 0.0,
            busy_at_end: Vec::new(),
            elapsed_s: 0.0,
        },
        profile: profile.clone(),
        servers: Vec::new(),
        contention: Vec::new(),
        scale: None,
        waiting: None,
        observe: Vec::new(),
        keepalive: None,
        sync: Vec::new(),
    };
    progress(&format!(
        "load average {:.2}; busy: {}",
        results.run.load_average_start,
        results.run.busy_at_start.join(", ")
    ));

    // Redis runs everything; Redis with AOF on, and Redis with a replica
    // attached, repeat the ACQUIRE group, to show the cost when the
    // replication stream has a reader (without one, the module does not
    // build its effects, as Redis does not propagate `SET`); Valkey runs
    // throughput and memory (per lock and per holder). Redis and Valkey run
    // the OBSERVE section. Redis keeps many holds alive (lease against
    // EXTEND); Redis and Valkey run SYNC against ACQUIRE + WAIT.
    let redis = |spec: ServerSpec| ServerSpec {
        binary: args.redis_server.clone(),
        ..spec
    };
    let mut specs = vec![
        redis(ServerSpec {
            groups: &Group::ALL,
            memory: true,
            contention_and_scale: true,
            observe: true,
            keepalive: true,
            sync: true,
            ..ServerSpec::default()
        }),
        redis(ServerSpec {
            extra: &AOF_ON,
            suffix: " + AOF",
            groups: &[Group::Acquire],
            ..ServerSpec::default()
        }),
        redis(ServerSpec {
            suffix: " + replica",
            groups: &[Group::Acquire],
            replica: true,
            ..ServerSpec::default()
        }),
    ];
    specs.extend(args.valkey_server.iter().map(|valkey| ServerSpec {
        binary: valkey.clone(),
        groups: &Group::ALL,
        memory: true,
        observe: true,
        sync: true,
        ..ServerSpec::default()
    }));
    specs.extend(args.memory_server.iter().map(|binary| ServerSpec {
        binary: binary.clone(),
        memory: true,
        allocator_in_label: true,
        ..ServerSpec::default()
    }));
    for spec in &specs {
        let groups: Vec<Group> = spec
            .groups
            .iter()
            .copied()
            .filter(|g| wanted("throughput") || wanted(g.name()) || g.family().is_some_and(wanted))
            .collect();
        let wants_any = !groups.is_empty()
            || (spec.memory && (wanted("memory") || wanted("holders")))
            || (spec.contention_and_scale
                && (wanted("contention")
                    || wanted("scale")
                    || wanted("waiting")
                    || wanted("handoff")
                    || wanted("multi")))
            || (spec.observe && wanted("observe"))
            || (spec.keepalive && wanted("lease"))
            || (spec.sync && wanted("sync"));
        if !wants_any {
            continue;
        }
        let mut server = Server::start_with(
            &spec.binary,
            &module,
            &args.work_dir,
            spec.extra,
            spec.suffix,
        )?;
        if spec.allocator_in_label {
            server.label = format!("{} ({})", server.label, server.allocator()?);
        }
        progress(&format!("{} on port {}", server.label, server.port()));
        // A replica on the same machine, synced before the runs: it takes
        // the master's stream (and a core's share) for both sides alike.
        let _replica = if spec.replica {
            let replica = Server::start(&spec.binary, &module, &args.work_dir)?;
            replica.replicate_from(&server)?;
            Some(replica)
        } else {
            None
        };
        let mut entry = ServerResults {
            label: server.label.clone(),
            throughput_cases: Vec::new(),
            throughput: Vec::new(),
            memory: None,
            holders: Vec::new(),
        };
        if !groups.is_empty() {
            let (cases, samples) =
                throughput::run(&server, &profile.throughput, &groups, &mut progress)?;
            entry.throughput_cases = cases;
            entry.throughput = samples;
        }
        if spec.memory && wanted("memory") {
            entry.memory = Some(memory::run(&server, &profile.memory_locks, &mut progress)?);
        }
        if spec.memory && wanted("holders") {
            entry.holders = holders::run(&server, &profile.holders, &mut progress)?;
        }
        if spec.contention_and_scale && wanted("contention") {
            results.contention =
                contention::run(&server, &lock_load, &profile.contention, &mut progress)?;
        }
        drop(server);
        if spec.contention_and_scale && wanted("scale") {
            let small = Server::start(&spec.binary, &module, &args.work_dir)?;
            let large_args = scale::large_server_args(&profile.scale);
            let large_args: Vec<&str> = large_args.iter().map(String::as_str).collect();
            let large = Server::start_with(&spec.binary, &module, &args.work_dir, &large_args, "")?;
            results.scale = Some(scale::run(
                &small,
                &large,
                &lock_load,
                &profile.scale,
                &mut progress,
            )?);
        }
        if spec.contention_and_scale && (wanted("waiting") || wanted("handoff") || wanted("multi"))
        {
            let fresh = Server::start(&spec.binary, &module, &args.work_dir)?;
            results.waiting = Some(waiting::run(
                &fresh,
                &lock_handoff,
                &lock_load,
                &profile.waiting,
                wanted("waiting"),
                &mut progress,
            )?);
        }
        if spec.observe && wanted("observe") {
            let fresh = Server::start(&spec.binary, &module, &args.work_dir)?;
            results.observe.push(observing::run(
                &fresh,
                &lock_observe,
                &profile.observe,
                &mut progress,
            )?);
        }
        if spec.keepalive && wanted("lease") {
            let fresh = || Server::start(&spec.binary, &module, &args.work_dir);
            results.keepalive = Some(keepalive::run(&fresh, &profile.keepalive, &mut progress)?);
        }
        if spec.sync && wanted("sync") {
            // The replica's first sync at once, not after the default 5 s.
            let master = Server::start_with(
                &spec.binary,
                &module,
                &args.work_dir,
                &["--repl-diskless-sync-delay", "0"],
                "",
            )?;
            let replica = Server::start(&spec.binary, &module, &args.work_dir)?;
            replica.replicate_from(&master)?;
            results.sync.push(syncing::run(
                &master,
                &replica,
                &lock_sync,
                &profile.sync,
                &mut progress,
            )?);
        }
        results.servers.push(entry);
    }

    results.run.load_average_end = machine::load_average();
    results.run.busy_at_end = machine::busy_processes();
    results.run.elapsed_s = started.elapsed().as_secs_f64();
    progress(&format!(
        "done; load average {:.2}; busy: {}",
        results.run.load_average_end,
        results.run.busy_at_end.join(", ")
    ));

    let document = results::document(&results)?;
    let json = serde_json::to_string_pretty(&document).map_err(|e| e.to_string())?;
    write(&args.json, &(json + "\n"))?;
    progress(&format!("wrote {}", args.json.display()));
    Ok(())
}

/// AOF on, as a production lock server would run: every grant is written to
/// the AOF (fsync once a second), and no automatic rewrite forks mid-run.
const AOF_ON: [&str; 6] = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "everysec",
    "--auto-aof-rewrite-percentage",
    "0",
];

#[derive(Default)]
struct ServerSpec {
    binary: PathBuf,
    extra: &'static [&'static str],
    suffix: &'static str,
    groups: &'static [Group],
    memory: bool,
    contention_and_scale: bool,
    /// Run with a replica attached.
    replica: bool,
    observe: bool,
    /// Keep many holds alive: a lease group against LOCK.EXTEND.
    keepalive: bool,
    /// SYNC against ACQUIRE + WAIT, with a replica of its own.
    sync: bool,
    /// Its label names its allocator (`INFO memory` `mem_allocator`).
    allocator_in_label: bool,
}

fn write(path: &PathBuf, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}
