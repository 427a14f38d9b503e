//! Facts about the machine a report was measured on, and how busy it was.

use std::process::Command;

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    pub benchmark_tool: String,
    pub rustc: String,
    pub git_commit: String,
    pub started_utc: String,
}

pub fn describe() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    Machine {
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model: cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_else(|| "unknown".into()),
        memory_gib: meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0 / 1024.0),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        benchmark_tool: command_output("redis-benchmark", &["--version"]),
        rustc: command_output("rustc", &["--version"]),
        git_commit: git_commit(),
        started_utc: command_output("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"]),
    }
}

fn git_commit() -> String {
    let commit = command_output("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    if dirty {
        format!("{commit} (with uncommitted changes)")
    } else {
        commit
    }
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The 1-minute load average.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Other processes using at least 10% of a core right now (from a second
/// `top` frame, which measures the last half second), busiest first.
pub fn busy_processes() -> Vec<String> {
    let Ok(output) = Command::new("top")
        .args(["-b", "-n", "2", "-d", "0.5", "-w", "200"])
        .output()
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&output.stdout);
    // The second frame starts at the second "top -" header.
    let frame = text.rsplit("top - ").next().unwrap_or("");
    let mine = std::process::id().to_string();
    frame
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("PID"))
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let cpu: f64 = fields.get(8)?.parse().ok()?;
            let name = fields.get(11)?;
            (cpu >= 10.0 && fields[0] != mine && *name != "top")
                .then(|| format!("{name} {cpu:.0}%"))
        })
        .collect()
}
