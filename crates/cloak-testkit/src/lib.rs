//! The conformance suite every scheme passes, whatever drives it.
//!
//! - [`workload`]: random command streams where each client owns its keys, so the expected
//!   outcome of every command is known the moment it is sent (a plain `HashMap` model), even
//!   with many clients and pipelining.
//! - [`linearizability`]: a checker for histories of one shared key written with unique values.
//! - [`redis_server`]: real `redis-server` processes (standalone with AOF, a local cluster).
//! - [`ports`]: loopback ports for the processes a test starts, clear of the ones connections
//!   take.
//! - [`wire_tap`]: what a real Redis receives and when, captured by a relay with kernel
//!   receive timestamps, as a server view.
//! - [`suite`]: the suite itself against the in-process simulator; the proxy's tests run the same
//!   workloads over real sockets.
//! - [`commands`]: shorthands for the commands tests write most.

pub mod commands;
pub mod linearizability;
pub mod ports;
pub mod redis_server;
pub mod suite;
pub mod wire_tap;
pub mod workload;
