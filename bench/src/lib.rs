//! The redis-lock benchmark harness: `lock-load` (the lock-cycle load
//! generator) and `lock-bench` (runs everything and writes its results as
//! one JSON document, from which `render.py` writes `docs/benchmarks.md`).
//! See `bench/README.md`.

pub mod cli;
pub mod contention;
pub mod handoff;
pub mod holders;
pub mod keepalive;
pub mod load;
pub mod machine;
pub mod mass_expiry;
pub mod memory;
pub mod observe;
pub mod observing;
pub mod profile;
pub mod results;
pub mod scale;
pub mod scripts;
pub mod server;
pub mod stats;
pub mod sync_load;
pub mod syncing;
pub mod throughput;
pub mod waiting;
