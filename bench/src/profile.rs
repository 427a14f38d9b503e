//! How much of everything `lock-bench` runs: the full profile of `make
//! bench` and the tiny one of `make bench-quick`.

use serde::Serialize;

use crate::{contention, holders, keepalive, observing, scale, syncing, throughput, waiting};

/// How much of everything to run.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub name: &'static str,
    pub throughput: throughput::Settings,
    pub contention: contention::Settings,
    pub memory_locks: Vec<u64>,
    pub holders: holders::Settings,
    pub scale: scale::Settings,
    pub waiting: waiting::Settings,
    pub observe: observing::Settings,
    pub keepalive: keepalive::Settings,
    pub sync: syncing::Settings,
}

impl Profile {
    /// `make bench`: about 45 minutes on 2 cores (41 in the run of
    /// 2026-12-02, before the lease and SYNC sections), 3¾ of them in the
    /// waiting section, 1¾ in the GUARD group, 1 in the OBSERVE section
    /// (Redis and Valkey), 10 in the SEM and SHARED groups (Redis 5½, Valkey
    /// 4½; most of it refilling a million keys with two holders before each
    /// release run), ⅓ in the memory per holder, 2 in the lease section (two
    /// 60 s windows) and 2 in the SYNC section (Redis and Valkey).
    pub fn full() -> Profile {
        Profile {
            name: "full",
            throughput: throughput::Settings {
                rounds: 5,
                clients: 50,
                pipelines: vec![1, 16],
                keyspace: 1_000_000,
                requests: vec![(1, 100_000), (16, 300_000)],
            },
            contention: contention::Settings {
                rounds: 2,
                contenders: vec![1, 8, 64, 512],
                keys: vec![1, 10_000],
                duration_ms: 2000,
                hold_ms: 1,
                retry_min_ms: 50,
                retry_max_ms: 250,
            },
            memory_locks: vec![100_000, 1_000_000],
            // 100,000 holders per measurement: 100,000 keys of one holder
            // down to 100 keys of 1,000 (the default lock.max-holders).
            holders: holders::Settings {
                holders_per_key: vec![1, 10, 100, 1000],
                holders: 100_000,
            },
            // About 1 minute: a million locks loaded (~8 s), the waiters
            // connected, blocked in BLPOP and queued (~20 s, each state
            // settled ≥ 3 s for its memory reading), six 3 s ACQUIRE runs
            // with their SET references (~30 s), 5,000 RELEASEs (~1 s),
            // waiters leaving. The waiters are as many as the open-file
            // limits allow (section 4 says how many, and why).
            scale: scale::Settings {
                rounds: 3,
                held: [1_000, 1_000_000],
                contenders: 50,
                keys: 10_000,
                duration_ms: 3000,
                set_requests: 200_000,
                waiters: 100_000,
                waiter_keys: 10_000,
                release_queues: vec![0, 1, 2, 100, 1_000, 10_000],
                release_rounds: 5,
                release_samples: 200,
                leavers: 2_000,
                addresses: 5,
                settle_min_ms: 3_000,
                settle_max_ms: 10_000,
            },
            // About 215 s: release ~0.47 s and expiry ~0.63 s per round
            // of three recipes (a quarter more with readers-wait), ~6 s per
            // round of 10,000 keys expiring within a second, then three
            // 20 s fairness runs.
            waiting: waiting::Settings {
                release_rounds: 150,
                hold_max_ms: 250,
                expiry_rounds: 100,
                expiry_ttl_ms: 100,
                mass_rounds: 3,
                mass_keys: 10_000,
                mass_spread_ms: 1000,
                mass_lead_ms: 3000,
                retry_min_ms: 50,
                retry_max_ms: 250,
                fairness_contenders: 64,
                fairness_duration_ms: 20_000,
                fairness_hold_ms: 1,
            },
            // About 32 s per server: ~0.2 s per round of ten observers,
            // ~0.5 s per round of a thousand.
            observe: observing::Settings {
                fleets: vec![
                    observing::Fleet {
                        observers: 10,
                        rounds: 100,
                        ttl_ms: 100,
                    },
                    observing::Fleet {
                        observers: 1000,
                        rounds: 20,
                        ttl_ms: 300,
                    },
                ],
            },
            keepalive: keepalive::Settings {
                holds: 10_000,
                duration_s: 60,
                warmup_ticks: 3,
                variants: vec![
                    keepalive::Variant {
                        ttl_ms: 3000,
                        interval_ms: 1000,
                    },
                    keepalive::Variant {
                        ttl_ms: 300,
                        interval_ms: 100,
                    },
                ],
            },
            sync: syncing::Settings {
                rounds: 3,
                clients: vec![1, 50],
                duration_ms: 3000,
                replicas: 1,
                timeout_ms: 1000,
            },
        }
    }

    /// `make bench-quick`: a tiny run of everything, to check the harness.
    pub fn quick() -> Profile {
        Profile {
            name: "quick",
            throughput: throughput::Settings {
                rounds: 1,
                clients: 50,
                pipelines: vec![1, 16],
                keyspace: 10_000,
                requests: vec![(1, 2_000), (16, 5_000)],
            },
            contention: contention::Settings {
                rounds: 1,
                contenders: vec![1, 8],
                keys: vec![1, 100],
                duration_ms: 300,
                hold_ms: 1,
                retry_min_ms: 50,
                retry_max_ms: 250,
            },
            memory_locks: vec![1_000],
            holders: holders::Settings {
                holders_per_key: vec![1, 10, 100],
                holders: 1_000,
            },
            scale: scale::Settings {
                rounds: 1,
                held: [100, 10_000],
                contenders: 8,
                keys: 64,
                duration_ms: 300,
                set_requests: 2_000,
                waiters: 300,
                waiter_keys: 16,
                release_queues: vec![0, 1, 2, 10, 100],
                release_rounds: 2,
                release_samples: 20,
                leavers: 20,
                addresses: 2,
                settle_min_ms: 0,
                settle_max_ms: 1_000,
            },
            waiting: waiting::Settings {
                release_rounds: 6,
                hold_max_ms: 250,
                expiry_rounds: 5,
                expiry_ttl_ms: 100,
                mass_rounds: 1,
                mass_keys: 500,
                mass_spread_ms: 1000,
                mass_lead_ms: 1500,
                retry_min_ms: 50,
                retry_max_ms: 250,
                fairness_contenders: 64,
                fairness_duration_ms: 2_000,
                fairness_hold_ms: 1,
            },
            observe: observing::Settings {
                fleets: vec![
                    observing::Fleet {
                        observers: 4,
                        rounds: 3,
                        ttl_ms: 100,
                    },
                    observing::Fleet {
                        observers: 1000,
                        rounds: 1,
                        ttl_ms: 300,
                    },
                ],
            },
            keepalive: keepalive::Settings {
                holds: 10_000,
                duration_s: 5,
                warmup_ticks: 3,
                variants: vec![
                    keepalive::Variant {
                        ttl_ms: 3000,
                        interval_ms: 1000,
                    },
                    keepalive::Variant {
                        ttl_ms: 300,
                        interval_ms: 100,
                    },
                ],
            },
            sync: syncing::Settings {
                rounds: 1,
                clients: vec![1, 50],
                duration_ms: 500,
                replicas: 1,
                timeout_ms: 1000,
            },
        }
    }
}
