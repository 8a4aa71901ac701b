//! What a Path ORAM op costs as the store grows: bytes moved per op in the in-process
//! simulation, against the count from the tree's shape (`2 · levels` buckets of `Z` records,
//! read then written, plus 16 bytes of address each). The cost depends on the capacity (the
//! tree), not on how many keys are stored, so each store holds a few thousand keys.
//!
//! Slow at a million keys (a tree of 2^20 buckets is filled first; minutes): run with
//! `cargo test --release -p cloak-bench --test path_oram_cost -- --ignored --nocapture`.

use std::time::Duration;

use bytes::Bytes;
use cloak_bench::workload::key_name;
use cloak_core::{
    Command, Engine, KeyDirectory, Limits, Outcome, RecordLayout, SetCondition, Simulator,
};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_schemes::path_oram::Tree;
use cloak_schemes::{SchemeName, SchemeOptions, Start, StoreSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const STORED: u64 = 2_000;
const OPS: u64 = 5_000;

fn set(key: u64, value: &Bytes) -> Command {
    Command::Set {
        key: Bytes::from(key_name(key)),
        value: value.clone(),
        condition: SetCondition::Always,
    }
}

/// Runs until every op's access is done and its write-back landed.
fn settle(sim: &mut Simulator) {
    assert!(sim.run_until(Duration::from_secs(86_400), |s| {
        s.engine().scheme_stats().queued == 0 && s.storage_idle()
    }));
}

#[test]
#[ignore]
fn cost_per_op_grows_with_the_log_of_the_capacity() {
    let value_size = 64;
    let options = SchemeOptions::default();
    let bucket_size = options.path_oram.bucket_size;
    let layout = RecordLayout {
        max_key: 32,
        max_value: value_size,
    };
    let bucket_bytes = bucket_size * layout.encoded_len() + cloak_crypto::SEAL_OVERHEAD;
    let master = MasterKey::from_bytes([9; 32]);
    let value = Bytes::from(vec![b'v'; value_size]);
    println!("capacity   levels  blocks/op  bytes/op (counted)  bytes/op (simulated)");
    for capacity in [1_000u64, 10_000, 100_000, 1_000_000] {
        let store = StoreSpec {
            capacity,
            layout,
            seed: Some(1),
        };
        let scheme = cloak_schemes::build(
            SchemeName::PathOram,
            &store,
            &options,
            &master,
            Start::default(),
        )
        .unwrap();
        let directory = KeyDirectory::new(KeyHasher::new(&master), capacity as usize);
        let limits = Limits {
            max_key: 32,
            max_value: value_size,
            max_keys_per_command: 64,
        };
        let mut sim = Simulator::new(Engine::new(scheme, directory, limits))
            .with_storage_delay(Duration::from_micros(500));
        for key in 0..STORED {
            sim.submit(0, set(key, &value));
        }
        settle(&mut sim);
        sim.drain_outcomes();

        let before = (
            sim.storage_bytes(),
            sim.engine().scheme_stats().real_accesses,
        );
        let mut rng = ChaCha8Rng::seed_from_u64(capacity);
        for _ in 0..OPS {
            let key = rng.random_range(0..STORED);
            let command = if rng.random_bool(0.5) {
                set(key, &value)
            } else {
                Command::Get(Bytes::from(key_name(key)))
            };
            sim.submit(1, command);
        }
        settle(&mut sim);
        for (_, _, outcome) in sim.drain_outcomes() {
            assert!(!matches!(outcome, Outcome::Error(_)), "{outcome:?}");
        }
        let accesses = sim.engine().scheme_stats().real_accesses - before.1;
        assert_eq!(accesses, OPS, "one access per op");
        let simulated = (sim.storage_bytes() - before.0) / accesses;
        let levels = Tree::for_capacity(capacity).levels() as usize;
        let counted = 2 * levels * (bucket_bytes + 16);
        println!(
            "{capacity:<10} {levels:>6}  {:>9}  {counted:>18}  {simulated:>20}",
            2 * bucket_size * levels
        );
        assert_eq!(
            simulated, counted as u64,
            "bytes per access follow the tree"
        );
    }
}
