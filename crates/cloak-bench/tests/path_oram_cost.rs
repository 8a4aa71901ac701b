//! What a Path ORAM op costs as the store grows: bytes moved per op in the in-process
//! simulation, against the count from the tree's shape (`2 · levels` buckets of `Z` records,
//! read then written, plus 16 bytes of address each).
//!
//! Slow at a million keys (minutes, a few GB): run with
//! `cargo test --release -p cloak-bench --test path_oram_cost -- --ignored --nocapture`.

use std::time::Duration;

use cloak_bench::run::Load;
use cloak_bench::simulate::Simulation;
use cloak_bench::workload::{self, Distribution, Mix, Ycsb};
use cloak_core::RecordLayout;
use cloak_schemes::path_oram::Tree;
use cloak_schemes::{SchemeName, SchemeOptions};

#[test]
#[ignore]
fn cost_per_op_grows_with_the_log_of_the_capacity() {
    let value_size = 64;
    let bucket_size = SchemeOptions::default().path_oram.bucket_size;
    let layout = RecordLayout {
        max_key: 32,
        max_value: value_size,
    };
    let bucket_bytes = bucket_size * layout.encoded_len() + cloak_crypto::SEAL_OVERHEAD;
    println!(
        "keys       levels  blocks/op  bytes/op (counted)  bytes/op (simulated)  virtual ops/s"
    );
    for keys in [1_000u64, 10_000, 100_000, 1_000_000] {
        let simulation = Simulation {
            scheme: SchemeName::PathOram,
            keys,
            value_size,
            options: SchemeOptions::default(),
            storage_delay: Duration::from_micros(500),
            workload: "ycsb-a uniform".into(),
            seed: 1,
        };
        let mut ycsb = Ycsb::new(Mix::A, Distribution::Uniform, keys, 1);
        let requests = workload::take(&mut ycsb, 5_000).unwrap();
        let load = Load {
            clients: 8,
            pipeline: 1,
            rate: None,
        };
        let m = simulation.measure(&requests, load).unwrap();
        let levels = Tree::for_capacity(keys).levels() as usize;
        let counted = 2 * levels * (bucket_bytes + 16);
        let simulated = m.counters.storage_bytes as f64 / m.counters.real as f64;
        println!(
            "{keys:<10} {levels:>6}  {:>9}  {counted:>18}  {simulated:>20.0}  {:>13.0}",
            2 * bucket_size * levels,
            m.throughput
        );
        assert_eq!(m.errors, 0);
        assert_eq!(m.counters.dummy, 0);
        // The window ends with the last answer; an access or two may still be under way.
        assert!(
            (simulated / counted as f64 - 1.0).abs() < 0.01,
            "bytes per access follow the tree"
        );
    }
}
