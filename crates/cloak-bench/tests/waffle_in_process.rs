//! Waffle beside Cloak and `unsafe` in process (virtual time): utilisation (client accesses
//! over all storage accesses), cache hit rate, bytes per op and latency in virtual time, on
//! YCSB A with zipfian and uniform keys sent open loop at a fixed rate (a closed loop against
//! schemes that answer from memory would never move virtual time).
//!
//! Too slow for CI; run it with
//! `cargo test --release -p cloak-bench --test waffle_in_process -- --ignored --nocapture`.

use std::time::Duration;

use cloak_bench::report::{relate, table};
use cloak_bench::run::Load;
use cloak_bench::simulate::Simulation;
use cloak_bench::workload::{Distribution, Mix, Ycsb, take};
use cloak_schemes::{SchemeName, SchemeOptions};

const KEYS: u64 = 100_000;
const REQUESTS: u64 = 200_000;
/// Requests per second of virtual time.
const RATE: f64 = 10_000.0;

#[test]
#[ignore = "a measurement, not a check; see the module comment"]
fn waffle_beside_cloak_in_process() {
    let mut results = Vec::new();
    for distribution in [Distribution::Zipfian, Distribution::Uniform] {
        let name = format!("ycsb-a {distribution:?}").to_lowercase();
        let requests = take(&mut Ycsb::new(Mix::A, distribution, KEYS, 7), REQUESTS).unwrap();
        for scheme in [SchemeName::Unsafe, SchemeName::Cloak, SchemeName::Waffle] {
            let simulation = Simulation {
                scheme,
                keys: KEYS,
                value_size: 128,
                options: SchemeOptions::default(),
                storage_delay: Duration::from_millis(1),
                workload: name.clone(),
                seed: 7,
            };
            let load = Load {
                clients: 64,
                pipeline: 4,
                rate: Some(RATE),
            };
            let measured = simulation.measure(&requests, load).unwrap();
            assert_eq!(measured.errors, 0, "{scheme}: errors");
            results.push(measured);
        }
    }
    relate(&mut results);
    println!("{}", table(&results));
}
