//! Measuring Cloak and the schemes it is compared with, and the workloads to measure them on.
//!
//! - [`workload`]: request streams (temporal, YCSB, trace replay);
//! - [`client`]: a pipelined RESP client that keeps out of the measurement's way;
//! - [`drive`]: sending a workload over connections, open or closed loop, and timing replies;
//! - [`plan`]: which workload a run sends and which parameter a sweep varies;
//! - [`preload`]: stores that hold every key before the measured window;
//! - [`run`]: one scheme (or plain Redis) on one workload through real processes, started by
//!   [`process`], with their CPU time from [`cpu`] and a proxy's start-up shown by [`progress`];
//!   [`simulate`]: in process; [`startup`]: what a proxy's start on a preloaded store costs;
//! - [`cluster`]: one scheme as a Cloak cluster of several proxy processes, with a
//!   cluster-aware load; [`simulate_cluster`]: a cluster's partitions in process, for their
//!   cost per operation as their number grows;
//! - [`report`]: results as a table and as JSON; [`plot`]: as charts;
//! - [`trace_stats`]: a trace's reuse distances and the Cloak budgets that fit it.

pub mod client;
pub mod cluster;
pub mod cpu;
pub mod drive;
pub mod plan;
pub mod plot;
pub mod preload;
pub mod process;
pub mod progress;
pub mod report;
pub mod run;
pub mod simulate;
pub mod simulate_cluster;
pub mod startup;
pub mod tls;
pub mod trace_stats;
pub mod workload;
