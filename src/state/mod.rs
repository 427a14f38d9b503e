//! Module-wide state, one file each, none of it a flow: what the module
//! remembers between commands (settings, counters, the fence high-water
//! mark, expiry notes and lock-delays, SESSION bindings, revocation marks,
//! the lease groups this server knows). Nothing here opens a key, blocks a
//! client or decides anything: the flows above (`holds.rs`, `wait_queue/`,
//! `lease_groups.rs`) and the entry points do, reading and writing this.

pub mod config;
pub mod expiry;
pub mod fence;
pub mod lease_registry;
pub mod metrics;
pub mod revocations;
pub mod sessions;
