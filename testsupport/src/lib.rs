//! Real servers for everything in this workspace that needs one: the module's
//! integration tests, the client crate's tests, the benchmarks (`bench/`) and
//! the fault-injection harness (`chaos/`).
//!
//! A [`Launch`] says what to start (the binary, the module, the address, the
//! directory, extra arguments); [`Launch::try_start`] returns an error and
//! [`Launch::start`] panics with the server's log. The [`Server`] it gives is
//! ready (it answers PING and has finished loading its data) and is killed
//! on drop, even when a test panics. [`Server::start`] and
//! [`Server::start_with`] are the short forms the tests use, and
//! [`start_cluster`] makes a Redis Cluster of them. With
//! `LOCK_TEST_VALGRIND=1` every server runs under valgrind's memcheck, and
//! a memory error it saw fails the test ([`memcheck`]).

mod cluster;
pub mod memcheck;
mod server;
mod setup;

pub use cluster::start_cluster;
pub use server::{Launch, Server, FREE_PORT};
pub use setup::{connect, free_port, module_path, server_binary};
