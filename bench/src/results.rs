//! One `lock-bench` run as data: what every section measured, its summary
//! (medians over rounds, paired ratios), the goals judged on it, how it was
//! measured (settings, scripts, command lines) and the facts of the run
//! (machine, servers, commit, duration), as one JSON document whose schema
//! `bench/README.md` describes. `bench/render.py` turns it into the report
//! and `bench/charts.py` into the charts: nothing here words or formats
//! anything for a reader.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::contention;
use crate::handoff::{Recipe, Scenario};
use crate::holders::{self, Shape};
use crate::keepalive::{self, KeepaliveResults, KeepaliveRow};
use crate::load::Strategy;
use crate::machine::Machine;
use crate::memory::{MemoryResults, Variant};
use crate::observing::{self, ObserveResults};
use crate::profile::Profile;
use crate::scale;
use crate::scripts;
use crate::stats::{median, quantiles};
use crate::sync_load::Mode;
use crate::syncing::{self, SyncRatioRow, SyncResults, SyncRow};
use crate::throughput::{self, Case, Group, Sample, COMPARISONS};
use crate::waiting::{self, WaitingResults};

/// The layout of the document: raise it when a field changes meaning or
/// goes, so that a renderer can refuse a document it does not know.
pub const SCHEMA: u32 = 1;

/// The per-sample arrays of the raw results, which the document replaces by
/// their quantiles (`cdf_us`: 0 to 1 in [`CDF_STEPS`] steps, for the
/// charts), and those it leaves out (their percentiles stay).
const SAMPLE_ARRAYS: [&str; 2] = ["samples_us", "wakeups_us"];
const LEFT_OUT: [&str; 1] = ["client_us"];
const CDF_STEPS: usize = 100;

/// The facts of a run, besides what it measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunFacts {
    /// The command that made it (`make bench`).
    pub made_by: String,
    pub machine: Machine,
    pub load_average_start: f64,
    pub load_average_end: f64,
    /// Other processes using at least 10% of a core.
    pub busy_at_start: Vec<String>,
    pub busy_at_end: Vec<String>,
    pub elapsed_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ServerResults {
    pub label: String,
    pub throughput_cases: Vec<Case>,
    pub throughput: Vec<Sample>,
    pub memory: Option<MemoryResults>,
    /// Memory per holder of a shared key (empty when not run).
    pub holders: Vec<holders::Run>,
}

/// Everything one run measured, as the sections returned it.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub run: RunFacts,
    pub profile: Profile,
    pub servers: Vec<ServerResults>,
    pub contention: Vec<contention::Run>,
    pub scale: Option<scale::ScaleResults>,
    pub waiting: Option<WaitingResults>,
    /// One per server (Redis, Valkey).
    pub observe: Vec<ObserveResults>,
    /// Keeping many holds alive: a lease group against `LOCK.EXTEND`.
    pub keepalive: Option<KeepaliveResults>,
    /// `SYNC` against `LOCK.ACQUIRE` + `WAIT`, one per server.
    pub sync: Vec<SyncResults>,
}

/// The JSON document of a run.
#[derive(Serialize)]
pub struct Document<'a> {
    pub schema: u32,
    pub run: Run<'a>,
    pub profile: &'a Profile,
    pub method: Method,
    pub goals: Vec<Goal>,
    pub summary: Summary,
    /// [`Results`] but its run and profile, the per-sample arrays thinned
    /// out ([`SAMPLE_ARRAYS`]).
    pub results: serde_json::Value,
}

#[derive(Serialize)]
pub struct Run<'a> {
    #[serde(flatten)]
    pub facts: &'a RunFacts,
    pub profile: &'static str,
    /// Every server measured, by label ("Redis 7.0.15 + AOF").
    pub servers: Vec<String>,
}

pub fn document(results: &Results) -> Result<Document<'_>, String> {
    let summary = summarise(results);
    let mut raw = serde_json::to_value(results).map_err(|e| e.to_string())?;
    if let Some(fields) = raw.as_object_mut() {
        fields.remove("run");
        fields.remove("profile");
    }
    thin_samples(&mut raw);
    Ok(Document {
        schema: SCHEMA,
        run: Run {
            facts: &results.run,
            profile: results.profile.name,
            servers: results.servers.iter().map(|s| s.label.clone()).collect(),
        },
        profile: &results.profile,
        method: method(results),
        goals: goals(results, &summary),
        summary,
        results: raw,
    })
}

fn thin_samples(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(fields) => {
            fields.retain(|name, _| !LEFT_OUT.contains(&name.as_str()));
            for name in SAMPLE_ARRAYS {
                if let Some(Value::Array(samples)) = fields.remove(name) {
                    let samples: Vec<f64> = samples.iter().filter_map(Value::as_f64).collect();
                    fields.insert("cdf_us".into(), quantiles(&samples, CDF_STEPS).into());
                }
            }
            fields.values_mut().for_each(thin_samples);
        }
        Value::Array(items) => items.iter_mut().for_each(thin_samples),
        _ => {}
    }
}

// ---------------------------------------------------------------- method

/// How the run measured: the constants, the Lua scripts and every command
/// line, as run (`$PORT`: the server's port).
#[derive(Serialize)]
pub struct Method {
    /// The 36-byte token of the throughput rows that pass one.
    pub token: &'static str,
    /// Lease of the keys held before the EXTEND, RELEASE and GUARD runs.
    pub prepared_ttl_ms: u64,
    pub guarded_value: &'static str,
    pub sem_limit: u32,
    /// One key in this many is checked for the Lua semaphore release's work.
    pub sample_every: u64,
    pub scripts: BTreeMap<&'static str, &'static str>,
    pub commands: Commands,
}

#[derive(Serialize)]
pub struct Commands {
    /// Every throughput case measured at every pipeline.
    pub throughput: Vec<Vec<String>>,
    /// Per key count and strategy; `--contenders` holds every count, as
    /// `{1,8,64,512}`.
    pub contention: Vec<Vec<String>>,
    /// What takes one lock (one holder), by variant (shape).
    pub memory: Vec<Labelled>,
    pub holders: Vec<Labelled>,
    pub scale_acquire: Vec<String>,
    pub scale_set: Vec<String>,
    /// The waiters' requests (`<L>`: a queue's length, `<c>.<g>`: the
    /// connection and how often it queued, `<n>`: the held lock).
    pub scale_waiters: [String; 2],
    /// By scenario: release, expiry, mass-expiry.
    pub handoff: BTreeMap<&'static str, Vec<String>>,
    pub fairness: Vec<Vec<String>>,
    /// One per fleet.
    pub observe: Vec<Vec<String>>,
    /// Per variant (lease ttl), what each of the three servers is sent.
    pub keepalive: Vec<Vec<SideCommands>>,
    /// Every `lock-sync` run: per client count, each mode.
    pub sync: Vec<Vec<String>>,
}

#[derive(Serialize)]
pub struct SideCommands {
    pub side: keepalive::Side,
    pub ttl_ms: u64,
    pub interval_ms: u64,
    pub commands: Vec<String>,
}

#[derive(Serialize)]
pub struct Labelled {
    pub label: &'static str,
    pub command: &'static str,
}

fn method(results: &Results) -> Method {
    let profile = &results.profile;
    let mut throughput = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for case in results.servers.iter().flat_map(|s| &s.throughput_cases) {
        if !seen.contains(&case.id) {
            seen.push(case.id);
            for &pipeline in &profile.throughput.pipelines {
                throughput.push(throughput::benchmark_command(
                    &profile.throughput,
                    pipeline,
                    case,
                ));
            }
        }
    }
    let settings = &profile.contention;
    let every_count = format!(
        "{{{}}}",
        settings
            .contenders
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let contention = settings
        .keys
        .iter()
        .flat_map(|&keys| Strategy::ALL.map(|strategy| (keys, strategy)))
        .map(|(keys, strategy)| {
            let mut argv = contention::load_command(settings, strategy, 0, keys);
            if let Some(at) = argv.iter().position(|a| a == "--contenders") {
                argv[at + 1] = every_count.clone();
            }
            argv
        })
        .collect();
    Method {
        token: throughput::TOKEN,
        prepared_ttl_ms: throughput::PREPARED_TTL_MS,
        guarded_value: throughput::GUARDED_VALUE,
        sem_limit: throughput::SEM_LIMIT,
        sample_every: throughput::SAMPLE_EVERY,
        scripts: scripts::ALL.into_iter().collect(),
        commands: Commands {
            throughput,
            contention,
            memory: Variant::ALL
                .map(|v| Labelled {
                    label: v.label(),
                    command: v.command_text(),
                })
                .into(),
            holders: Shape::ALL
                .map(|s| Labelled {
                    label: s.label(),
                    command: s.command_text(),
                })
                .into(),
            scale_acquire: scale::load_command(&profile.scale),
            scale_set: scale::set_command(&profile.scale),
            scale_waiters: scale::waiter_commands(),
            handoff: Scenario::ALL
                .map(|s| (s.name(), waiting::handoff_command(&profile.waiting, s)))
                .into(),
            fairness: waiting::FAIRNESS_STRATEGIES
                .iter()
                .map(|&s| waiting::fairness_command(&profile.waiting, s))
                .collect(),
            observe: profile
                .observe
                .fleets
                .iter()
                .map(observing::observe_command)
                .collect(),
            keepalive: profile
                .keepalive
                .variants
                .iter()
                .map(|variant| {
                    keepalive::Side::ALL
                        .map(|side| SideCommands {
                            side,
                            ttl_ms: variant.ttl_ms,
                            interval_ms: variant.interval_ms,
                            commands: side.commands(variant, profile.keepalive.holds),
                        })
                        .into()
                })
                .collect(),
            sync: profile
                .sync
                .clients
                .iter()
                .flat_map(|&clients| {
                    Mode::ALL.map(|mode| syncing::sync_command(&profile.sync, mode, clients))
                })
                .collect(),
        },
    }
}

// ---------------------------------------------------------------- summary

#[derive(Clone, Debug, Serialize)]
pub struct ThroughputRow {
    pub server: String,
    pub case: &'static str,
    pub command: &'static str,
    pub group: Group,
    pub pipeline: usize,
    pub rps: f64,
    pub cpu_us_per_op: f64,
    pub work_share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RatioRow {
    pub server: String,
    pub title: &'static str,
    /// A comparison of shared holders (SEM, SHARED): section 7's.
    pub shared: bool,
    /// A comparison of multi-key locks (MACQUIRE, MRELEASE): section 10's.
    pub multi: bool,
    pub pipeline: usize,
    /// Median over rounds of native rps / baseline rps.
    pub throughput_ratio: f64,
    /// Median over rounds of baseline CPU per op / native CPU per op.
    pub cpu_ratio: f64,
    /// The goal at pipeline 16, and whether the throughput ratio met it.
    pub goal: Option<f64>,
    pub verdict: Option<Verdict>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ContentionRow {
    pub server: String,
    pub keys: usize,
    pub contenders: usize,
    pub strategy: String,
    pub cycles_per_s: f64,
    pub acquire_p50_us: f64,
    pub acquire_p99_us: f64,
    pub acquire_p999_us: f64,
    pub handoff_p50_us: Option<f64>,
    pub handoff_p99_us: Option<f64>,
    pub refusals_per_grant: f64,
    pub jain_index: Option<f64>,
    pub min_cycles_per_contender: f64,
    pub waiting_at_end: f64,
    pub server_cpu_us_per_cycle: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct HolderMemoryRow {
    pub server: String,
    pub shape: Shape,
    pub label: &'static str,
    pub holders_per_key: u64,
    pub keys: u64,
    pub bytes_per_key: f64,
    pub bytes_per_holder: f64,
    /// From one holder per key to this many, per holder added.
    pub bytes_per_extra_holder: Option<f64>,
    pub key_bytes: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScaleRow {
    pub server: String,
    pub held: u64,
    /// Clients waiting on the server during the runs.
    pub waiters: u64,
    pub cycles_per_s: f64,
    pub client_p50_us: f64,
    pub client_p99_us: f64,
    pub client_p999_us: f64,
    pub server_p50_us: Option<f64>,
    pub server_p99_us: Option<f64>,
    pub server_p999_us: Option<f64>,
    pub set_p50_us: Option<f64>,
    pub set_p99_us: Option<f64>,
    pub set_p999_us: Option<f64>,
}

/// What the report derives from the results: medians over rounds, paired
/// ratios, per-holder and per-waiter costs. (What it shows as measured, it
/// reads from the results.)
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub throughput: Vec<ThroughputRow>,
    pub ratios: Vec<RatioRow>,
    pub contention: Vec<ContentionRow>,
    pub holder_memory: Vec<HolderMemoryRow>,
    pub scale: Vec<ScaleRow>,
    /// RELEASE on keys with queues of set lengths (0: nobody waits).
    pub scale_release: Vec<scale::ReleaseRow>,
    pub scale_memory: Option<scale::WaiterMemoryRow>,
    /// Per lease ttl: the lease, `LOCK.EXTEND` and the idle server.
    pub keepalive: Vec<KeepaliveRow>,
    /// Medians over rounds per server, client count and mode.
    pub sync: Vec<SyncRow>,
    /// `SYNC` over `LOCK.ACQUIRE` + `WAIT`, per server and client count.
    pub sync_ratios: Vec<SyncRatioRow>,
}

fn med(values: impl IntoIterator<Item = f64>) -> f64 {
    median(&values.into_iter().collect::<Vec<_>>()).unwrap_or(f64::NAN)
}

fn med_opt(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    median(&values.into_iter().flatten().collect::<Vec<_>>())
}

pub fn summarise(results: &Results) -> Summary {
    let mut summary = Summary {
        throughput: Vec::new(),
        ratios: Vec::new(),
        contention: contention_rows(results),
        holder_memory: Vec::new(),
        scale: scale_rows(results),
        scale_release: results
            .scale
            .as_ref()
            .map_or(Vec::new(), scale::release_rows),
        scale_memory: results.scale.as_ref().and_then(scale::memory_row),
        keepalive: results
            .keepalive
            .as_ref()
            .map_or(Vec::new(), keepalive::rows),
        sync: Vec::new(),
        sync_ratios: Vec::new(),
    };
    for server in &results.sync {
        let (rows, ratios) = syncing::rows(server, &results.profile.sync);
        summary.sync.extend(rows);
        summary.sync_ratios.extend(ratios);
    }
    let pipelines = &results.profile.throughput.pipelines;
    for server in &results.servers {
        let samples = &server.throughput;
        for case in &server.throughput_cases {
            for &pipeline in pipelines {
                let get = |f: fn(&Sample) -> f64| {
                    throughput::case_median(samples, &server.label, case.id, pipeline, f)
                        .unwrap_or(f64::NAN)
                };
                summary.throughput.push(ThroughputRow {
                    server: server.label.clone(),
                    case: case.id,
                    command: case.description,
                    group: case.group,
                    pipeline,
                    rps: get(|s| s.rps),
                    cpu_us_per_op: get(|s| s.cpu_us_per_op),
                    work_share: get(|s| s.work_share),
                });
            }
        }
        let measured = |id: &&str| server.throughput_cases.iter().any(|c| c.id == *id);
        for comparison in &COMPARISONS {
            if !comparison
                .native
                .iter()
                .chain(comparison.baseline)
                .all(measured)
            {
                continue;
            }
            for &pipeline in pipelines {
                let ratio = |value: fn(&Sample) -> f64| {
                    throughput::paired_ratio(samples, &server.label, comparison, pipeline, value)
                        .unwrap_or(f64::NAN)
                };
                let throughput_ratio = ratio(|s| s.rps);
                let goal = comparison.goal_on(&server.label).filter(|_| pipeline == 16);
                summary.ratios.push(RatioRow {
                    server: server.label.clone(),
                    title: comparison.title,
                    shared: comparison.is_shared(),
                    multi: comparison.is_multi(),
                    pipeline,
                    throughput_ratio,
                    cpu_ratio: ratio(|s| 1.0 / s.cpu_us_per_op),
                    goal,
                    verdict: goal.map(|goal| Verdict::of(throughput_ratio >= goal)),
                });
            }
        }
        for run in &server.holders {
            let one = server
                .holders
                .iter()
                .find(|r| r.shape == run.shape && r.holders_per_key == 1);
            summary.holder_memory.push(HolderMemoryRow {
                server: run.server.clone(),
                shape: run.shape,
                label: run.shape.label(),
                holders_per_key: run.holders_per_key,
                keys: run.keys,
                bytes_per_key: run.bytes_per_key(),
                bytes_per_holder: run.bytes_per_key() / run.holders_per_key as f64,
                bytes_per_extra_holder: one
                    .and_then(|one| holders::bytes_per_extra_holder(one, run)),
                key_bytes: run.key_bytes,
            });
        }
    }
    summary
}

/// Medians over rounds, per server, key count, contender count and
/// strategy.
fn contention_rows(results: &Results) -> Vec<ContentionRow> {
    let settings = &results.profile.contention;
    let mut servers: Vec<&String> = results.contention.iter().map(|r| &r.server).collect();
    servers.dedup();
    let mut rows = Vec::new();
    for server in servers {
        for &keys in &settings.keys {
            for &contenders in &settings.contenders {
                for strategy in Strategy::ALL {
                    let runs: Vec<&contention::Run> = results
                        .contention
                        .iter()
                        .filter(|r| {
                            &r.server == server
                                && r.summary.keys == keys
                                && r.summary.contenders == contenders
                                && r.summary.strategy == strategy.name()
                        })
                        .collect();
                    if runs.is_empty() {
                        continue;
                    }
                    let of = |f: fn(&contention::Run) -> f64| med(runs.iter().map(|r| f(r)));
                    let handoff = |f: fn(&contention::Run) -> u64| {
                        med_opt(
                            runs.iter()
                                .map(|r| (r.summary.handoff.count > 0).then(|| f(r) as f64)),
                        )
                    };
                    rows.push(ContentionRow {
                        server: server.clone(),
                        keys,
                        contenders,
                        strategy: strategy.name().to_string(),
                        cycles_per_s: of(|r| r.summary.cycles_per_s),
                        acquire_p50_us: of(|r| r.summary.acquire.p50_us as f64),
                        acquire_p99_us: of(|r| r.summary.acquire.p99_us as f64),
                        acquire_p999_us: of(|r| r.summary.acquire.p999_us as f64),
                        handoff_p50_us: handoff(|r| r.summary.handoff.p50_us),
                        handoff_p99_us: handoff(|r| r.summary.handoff.p99_us),
                        refusals_per_grant: of(|r| r.summary.refusals_per_grant),
                        jain_index: med_opt(runs.iter().map(|r| r.summary.jain_index)),
                        min_cycles_per_contender: of(|r| r.summary.min_cycles_per_contender as f64),
                        waiting_at_end: of(|r| r.summary.waiting_at_end as f64),
                        server_cpu_us_per_cycle: of(|r| r.server_cpu_us_per_cycle),
                    });
                }
            }
        }
    }
    rows
}

/// Medians over rounds, for the small and the large server.
fn scale_rows(results: &Results) -> Vec<ScaleRow> {
    let runs = results.scale.as_ref().map_or(&[][..], |s| &s.runs[..]);
    results
        .profile
        .scale
        .held
        .iter()
        .filter_map(|&held| {
            let runs: Vec<&scale::Run> = runs.iter().filter(|r| r.held == held).collect();
            let first = runs.first()?;
            let of = |f: fn(&scale::Run) -> f64| med(runs.iter().map(|r| f(r)));
            let of_opt = |f: fn(&scale::Run) -> Option<f64>| med_opt(runs.iter().map(|r| f(r)));
            Some(ScaleRow {
                server: first.server.clone(),
                held,
                waiters: first.waiters,
                cycles_per_s: of(|r| r.summary.cycles_per_s),
                client_p50_us: of(|r| r.summary.acquire.p50_us as f64),
                client_p99_us: of(|r| r.summary.acquire.p99_us as f64),
                client_p999_us: of(|r| r.summary.acquire.p999_us as f64),
                server_p50_us: of_opt(|r| r.server_p50_us),
                server_p99_us: of_opt(|r| r.server_p99_us),
                server_p999_us: of_opt(|r| r.server_p999_us),
                set_p50_us: of_opt(|r| r.set_p50_us),
                set_p99_us: of_opt(|r| r.set_p99_us),
                set_p999_us: of_opt(|r| r.set_p999_us),
            })
        })
        .collect()
}

// ---------------------------------------------------------------- goals

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Met,
    Missed,
    /// A figure the goals ask for, with nothing to meet.
    Reported,
    /// The machine was too busy to measure what the goal is judged on: the
    /// goal's `not_measured` says why.
    #[serde(rename = "not-measured")]
    NotMeasured,
}

impl Verdict {
    fn of(met: bool) -> Verdict {
        if met {
            Verdict::Met
        } else {
            Verdict::Missed
        }
    }
}

/// A goal of the benchmark issues, judged on this run. Each names its
/// threshold, what was measured, and the verdict.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Goal {
    /// A throughput ratio at pipeline 16 ≥ `threshold`; the CPU ratio beside
    /// it is the noise-free check.
    Ratio {
        comparison: &'static str,
        server: String,
        threshold: f64,
        throughput_ratio: f64,
        cpu_ratio: f64,
        verdict: Verdict,
    },
    /// Bytes per lock, at the most locks measured, ≤ a Lua recipe's, to
    /// the byte.
    MemoryPerLock {
        server: String,
        baseline: &'static str,
        locks: u64,
        module_bytes: f64,
        baseline_bytes: f64,
        verdict: Verdict,
    },
    /// ACQUIRE's client p99 with many held locks and waiters within
    /// `threshold` times its p99 with few; the server's own p99 and a plain
    /// `SET PX`'s beside it.
    AcquireAtScale {
        server: String,
        held: [u64; 2],
        waiters: u64,
        waiters_asked: u64,
        threshold: f64,
        client_p99_growth: f64,
        server_p99_growth: Option<f64>,
        set_p99_growth: Option<f64>,
        verdict: Verdict,
    },
    /// RELEASE's mean server time on the longest queue's key within
    /// `threshold` times that on a key with `baseline_queue` waiters (see
    /// [`o1_baseline`]); the other figures beside it.
    ReleaseO1 {
        server: String,
        queue: u64,
        queue_asked: u64,
        baseline_queue: u64,
        threshold: f64,
        server_mean_growth: Option<f64>,
        server_p50_growth: Option<f64>,
        server_p99_growth: Option<f64>,
        against_2_waiters: Option<f64>,
        against_1_waiter: Option<f64>,
        client_p50_growth: Option<f64>,
        verdict: Verdict,
    },
    /// Memory per waiter: reported, with a client in `BLPOP` beside it.
    WaiterMemory {
        server: String,
        #[serde(flatten)]
        memory: scale::WaiterMemoryRow,
        verdict: Verdict,
    },
    /// `WAIT` hand-off after an expiry, from the deadline: p50 and p99 at
    /// most their thresholds. `missed` names the percentiles that missed.
    ExpiryHandoff {
        server: String,
        scenario: Scenario,
        keys: usize,
        spread_ms: u64,
        p50_us: f64,
        p99_us: f64,
        threshold_p50_us: f64,
        threshold_p99_us: f64,
        /// From the lease's end (deadline + 1 ms, the first instant a
        /// waiter may have the key): what the server adds.
        after_end_p50_us: f64,
        after_end_p99_us: f64,
        missed: Vec<&'static str>,
        verdict: Verdict,
        #[serde(skip_serializing_if = "Option::is_none")]
        not_measured: Option<String>,
    },
    /// Keeping `holds` alive for the window: `LOCK.EXTEND` of each against
    /// one lease's `KEEPALIVE`, the server CPU of the renewals (less the
    /// idle server's in as long) at least `threshold` times apart
    /// (`renewal_ratio`); met only if every hold lived, on both sides.
    LeaseKeepalive {
        server: String,
        #[serde(flatten)]
        row: KeepaliveRow,
        threshold: f64,
        verdict: Verdict,
    },
    /// `SYNC` against `LOCK.ACQUIRE` + `WAIT` with `clients` clients: the
    /// throughput ratio and both latency ratios at least `threshold`
    /// (equal or better). `missed` names those that missed.
    Sync {
        server: String,
        clients: usize,
        threshold: f64,
        throughput_ratio: Option<f64>,
        p50_ratio: Option<f64>,
        p99_ratio: Option<f64>,
        cpu_ratio: Option<f64>,
        missed: Vec<&'static str>,
        verdict: Verdict,
        #[serde(skip_serializing_if = "Option::is_none")]
        not_measured: Option<String>,
    },
}

/// How much slower (times) an ACQUIRE or RELEASE may be at scale.
pub const SCALE_GOAL: f64 = 1.25;

/// The goal of issue 17 (item 3): hand-off after an expiry, p50 ≤ 1 ms and
/// p99 ≤ 5 ms after the deadline, with 10,000 keys expiring in the same
/// second; judged on the mass-expiry run, with the one-key run beside it.
pub const EXPIRY_GOAL_P50_US: f64 = 1000.0;
pub const EXPIRY_GOAL_P99_US: f64 = 5000.0;

/// The goal of issue 27: keeping holds alive through a lease takes at least
/// this many times less server time than extending each.
pub const KEEPALIVE_GOAL: f64 = 100.0;

/// The goal of issue 26: `SYNC` as fast as the two-command recipe, or
/// better, in throughput and latency.
pub const SYNC_GOAL: f64 = 1.0;

fn goals(results: &Results, summary: &Summary) -> Vec<Goal> {
    let mut goals = Vec::new();
    // By comparison, then server.
    for comparison in &COMPARISONS {
        for row in summary
            .ratios
            .iter()
            .filter(|r| r.title == comparison.title)
        {
            if let (Some(threshold), Some(verdict)) = (row.goal, row.verdict) {
                goals.push(Goal::Ratio {
                    comparison: comparison.title,
                    server: row.server.clone(),
                    threshold,
                    throughput_ratio: row.throughput_ratio,
                    cpu_ratio: row.cpu_ratio,
                    verdict,
                });
            }
        }
    }
    for server in &results.servers {
        let rows = server.memory.as_ref().map_or(&[][..], |m| &m.bulk[..]);
        let Some(locks) = rows.iter().map(|r| r.locks).max() else {
            continue;
        };
        // Judged to the byte, as the goal is stated (a few hundred bytes
        // over a million locks are the allocator's, not the lock's).
        let per_lock = |variant: Variant| {
            rows.iter()
                .find(|r| r.locks == locks && r.variant == variant)
                .map_or(f64::NAN, |r| r.bytes_per_lock.round())
        };
        let module_bytes = per_lock(Variant::Module);
        for baseline in [Variant::LuaPerLockFence, Variant::LuaGlobalFence] {
            let baseline_bytes = per_lock(baseline);
            goals.push(Goal::MemoryPerLock {
                server: server.label.clone(),
                baseline: baseline.label(),
                locks,
                module_bytes,
                baseline_bytes,
                verdict: Verdict::of(module_bytes <= baseline_bytes),
            });
        }
    }
    let growth = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| b / a);
    if let ([small, large], Some(scale)) = (summary.scale.as_slice(), &results.scale) {
        let client_p99_growth = large.client_p99_us / small.client_p99_us;
        goals.push(Goal::AcquireAtScale {
            server: large.server.clone(),
            held: [small.held, large.held],
            waiters: large.waiters,
            waiters_asked: scale.waiters.asked,
            threshold: SCALE_GOAL,
            client_p99_growth,
            server_p99_growth: growth(small.server_p99_us, large.server_p99_us),
            set_p99_growth: growth(small.set_p99_us, large.set_p99_us),
            verdict: Verdict::of(client_p99_growth <= SCALE_GOAL),
        });
    }
    // O(1): the longest queue's RELEASE against a queue a hundred times
    // shorter, where each hand-off also wakes a client the server has not
    // touched since it queued; the 2-waiter key (whose three connections
    // take turns, and can stay in the CPU's caches) and the 1-waiter key
    // beside it.
    let release = |queue: u64| summary.scale_release.iter().find(|r| r.queue == queue);
    let queues: Vec<u64> = summary.scale_release.iter().map(|r| r.queue).collect();
    let longest = summary.scale_release.iter().max_by_key(|r| r.queue);
    let base = o1_baseline(&queues).and_then(release);
    if let (Some(base), Some(long), Some(scale)) = (base, longest, &results.scale) {
        let mean = |row: &scale::ReleaseRow| growth(row.server_mean_us, long.server_mean_us);
        let server_mean_growth = mean(base);
        goals.push(Goal::ReleaseO1 {
            server: scale.server.clone(),
            queue: long.queue,
            queue_asked: results
                .profile
                .scale
                .release_queues
                .iter()
                .copied()
                .max()
                .unwrap_or(0),
            baseline_queue: base.queue,
            threshold: SCALE_GOAL,
            server_mean_growth,
            server_p50_growth: growth(base.server_p50_us, long.server_p50_us),
            server_p99_growth: growth(base.server_p99_us, long.server_p99_us),
            against_2_waiters: release(2).and_then(mean),
            against_1_waiter: release(1).and_then(mean),
            client_p50_growth: growth(base.client_p50_us, long.client_p50_us),
            verdict: Verdict::of(server_mean_growth.is_some_and(|m| m <= SCALE_GOAL)),
        });
    }
    if let (Some(memory), Some(scale)) = (&summary.scale_memory, &results.scale) {
        goals.push(Goal::WaiterMemory {
            server: scale.server.clone(),
            memory: memory.clone(),
            verdict: Verdict::Reported,
        });
    }
    if let Some(waiting) = &results.waiting {
        for handoffs in [&waiting.mass_expiry, &waiting.expiry] {
            let Some(native) = handoffs
                .recipes
                .iter()
                .find(|r| r.recipe == Recipe::NativeWait.name())
            else {
                continue;
            };
            let measured = native.spread.p50_us.zip(native.spread.p99_us);
            let (p50_us, p99_us) = measured.unwrap_or((f64::NAN, f64::NAN));
            let missed = if measured.is_some() {
                expiry_misses(p50_us, p99_us)
            } else {
                Vec::new()
            };
            let not_measured = measured.is_none().then(|| {
                native
                    .not_measured
                    .clone()
                    .or_else(|| Some(handoffs.not_measured.join("; ")))
                    .filter(|why| !why.is_empty())
                    .unwrap_or_else(|| "no hand-off was measured".into())
            });
            goals.push(Goal::ExpiryHandoff {
                server: waiting.server.clone(),
                scenario: handoffs.scenario,
                keys: handoffs.keys,
                spread_ms: handoffs.spread_ms,
                p50_us,
                p99_us,
                threshold_p50_us: EXPIRY_GOAL_P50_US,
                threshold_p99_us: EXPIRY_GOAL_P99_US,
                after_end_p50_us: p50_us - 1000.0,
                after_end_p99_us: p99_us - 1000.0,
                verdict: if not_measured.is_some() {
                    Verdict::NotMeasured
                } else {
                    Verdict::of(missed.is_empty())
                },
                missed,
                not_measured,
            });
        }
    }
    for row in &summary.keepalive {
        let met = row.renewal_ratio >= KEEPALIVE_GOAL && row.all_held;
        goals.push(Goal::LeaseKeepalive {
            server: row.server.clone(),
            row: row.clone(),
            threshold: KEEPALIVE_GOAL,
            verdict: if row.not_measured.is_some() {
                Verdict::NotMeasured
            } else {
                Verdict::of(met)
            },
        });
    }
    // With the most clients (the 50), on each server.
    for server in &results.sync {
        let most = results.profile.sync.clients.iter().copied().max();
        let Some(row) = summary
            .sync_ratios
            .iter()
            .find(|r| r.server == server.server && Some(r.clients) == most)
        else {
            continue;
        };
        let (missed, unmeasured) = sync_misses(row);
        let not_measured = (missed.is_empty() && !unmeasured.is_empty()).then(|| {
            format!(
                "no {} ratio: a run answered no request within its duration (a busy machine)",
                unmeasured.join(", ")
            )
        });
        goals.push(Goal::Sync {
            server: row.server.clone(),
            clients: row.clients,
            threshold: SYNC_GOAL,
            throughput_ratio: row.throughput_ratio,
            p50_ratio: row.p50_ratio,
            p99_ratio: row.p99_ratio,
            cpu_ratio: row.cpu_ratio,
            verdict: if not_measured.is_some() {
                Verdict::NotMeasured
            } else {
                Verdict::of(missed.is_empty())
            },
            missed,
            not_measured,
        });
    }
    goals
}

/// The figures of a `SYNC` comparison that miss the goal, and those that
/// were not measured.
fn sync_misses(row: &SyncRatioRow) -> (Vec<&'static str>, Vec<&'static str>) {
    let figures = [
        ("throughput", row.throughput_ratio),
        ("p50", row.p50_ratio),
        ("p99", row.p99_ratio),
    ];
    let names = |keep: fn(f64) -> bool| {
        figures
            .iter()
            .filter(|(_, ratio)| ratio.is_some_and(keep))
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
    };
    let unmeasured = figures
        .iter()
        .filter(|(_, ratio)| ratio.is_none_or(|r| !r.is_finite()))
        .map(|(name, _)| *name)
        .collect();
    (names(|r| r.is_finite() && r < SYNC_GOAL), unmeasured)
}

/// The percentiles of an expiry hand-off that miss the goal.
fn expiry_misses(p50_us: f64, p99_us: f64) -> Vec<&'static str> {
    [
        ("p50", p50_us <= EXPIRY_GOAL_P50_US),
        ("p99", p99_us <= EXPIRY_GOAL_P99_US),
    ]
    .into_iter()
    .filter(|(_, met)| !met)
    .map(|(name, _)| name)
    .collect()
}

/// The queue length the longest queue's RELEASE is judged against for
/// O(1): the longest of at least 2 waiters that is a hundred times shorter
/// (100 for 10,000), so that both wake clients gone cold in the CPU's
/// caches; else 2 waiters (the shortest that does every step of a
/// hand-off); `None` without one.
fn o1_baseline(queues: &[u64]) -> Option<u64> {
    let longest = queues.iter().copied().max()?;
    queues
        .iter()
        .copied()
        .filter(|&q| q >= 2 && q.saturating_mul(100) <= longest)
        .max()
        .or_else(|| queues.contains(&2).then_some(2))
        .filter(|&q| q < longest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expiry_goal_names_the_percentiles_that_missed() {
        assert!(expiry_misses(1000.0, 5000.0).is_empty());
        assert_eq!(expiry_misses(1001.0, 5000.0), ["p50"]);
        assert_eq!(expiry_misses(900.0, 5001.0), ["p99"]);
        assert_eq!(expiry_misses(1800.0, 6000.0), ["p50", "p99"]);
    }

    #[test]
    fn the_sync_goal_names_what_missed() {
        let row = |t, p50, p99| SyncRatioRow {
            server: "s".into(),
            clients: 50,
            throughput_ratio: t,
            p50_ratio: p50,
            p99_ratio: p99,
            cpu_ratio: None,
        };
        let none: Vec<&str> = Vec::new();
        assert_eq!(
            sync_misses(&row(Some(1.0), Some(1.2), Some(3.0))),
            (none.clone(), none.clone())
        );
        assert_eq!(
            sync_misses(&row(Some(0.9), Some(1.2), None)),
            (vec!["throughput"], vec!["p99"])
        );
        assert_eq!(
            sync_misses(&row(Some(1.1), None, Some(2.0))),
            (none, vec!["p50"])
        );
    }

    #[test]
    fn o1_is_judged_against_a_queue_a_hundred_times_shorter() {
        assert_eq!(o1_baseline(&[0, 1, 2, 100, 1_000, 10_000]), Some(100));
        assert_eq!(o1_baseline(&[0, 1, 2, 10, 100]), Some(2));
        assert_eq!(o1_baseline(&[0, 1, 2, 10_000]), Some(2));
        assert_eq!(o1_baseline(&[0, 1, 2]), None);
        assert_eq!(o1_baseline(&[0, 1, 100]), None);
        assert_eq!(o1_baseline(&[]), None);
    }

    #[test]
    fn sample_arrays_become_quantiles_at_any_depth() {
        let mut value = serde_json::json!({
            "a": [{"samples_us": [2.0, 1.0], "p50_us": 1.0}],
            "b": {"wakeups_us": [], "c": {"client_us": [3.0], "n": 3}}
        });
        thin_samples(&mut value);
        let cdf = &value["a"][0]["cdf_us"];
        assert_eq!(cdf.as_array().map(Vec::len), Some(CDF_STEPS + 1));
        assert_eq!(
            (cdf[0].as_f64(), cdf[CDF_STEPS].as_f64()),
            (Some(1.0), Some(2.0))
        );
        assert_eq!(value["b"], serde_json::json!({"cdf_us": [], "c": {"n": 3}}));
    }
}
