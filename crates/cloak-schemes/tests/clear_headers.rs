//! What storage can read in the sealed elements it receives, for every scheme that seals them
//! with a generation of its own: `epoch (8) ‖ nonce (12) ‖ generation (8) ‖ ciphertext ‖
//! tag (16)`, parsed from the bytes the simulated storage receives (not by the sealer, so the
//! check does not trust the code it checks).
//!
//! The epoch and the length must not change within a run, and the nonce is random (checked in
//! `cloak-crypto`). The generation must follow a rule the server can apply itself to the
//! requests it received, whatever the keys, the load, and whether an access was real or fake:
//! - Waffle: the number of batch reads received before the write (0: the fill), the same for
//!   every element of a write. It used to be each object's last-read batch: an evicted object's
//!   was older than the batch and a dummy's was not, which marked every dummy of a write-back
//!   and counted the reads that were real (the request rate).
//! - Path ORAM and CURIOUS: one generation per write request; every write before the first
//!   read (the fill) shows the run's first, every later write the next one.
//! - Pancake: one per distinct label of a write, counting on from the writes before.
//!
//! Each scheme runs idle, with every request on one hot key, and on uniform keys, then drains.
//! Cloak binds the batch that wrote an element (see `cloak/mod.rs`); `encrypted` does not hide
//! which key a write is for, so neither is checked here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{
    Addr, Command, Engine, KeyDirectory, Limits, RecordLayout, SetCondition, Simulator, StorageOp,
};
use cloak_crypto::{KeyHasher, MasterKey};
use cloak_schemes::{SchemeName, SchemeOptions, Start, StoreSpec, WaffleOptions, build};

const MAX_KEY: usize = 16;
const MAX_VALUE: usize = 32;
const CAPACITY: u64 = 1000;
/// Waffle's batch interval, and how often requests arrive.
const TICK: Duration = Duration::from_millis(5);
/// Requests per tick under load: Waffle's `R` below, so none is refused.
const PER_TICK: usize = 10;
const TICKS: usize = 150;

/// The fields of a sealed element's clear header that can vary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ClearHeader {
    epoch: u64,
    generation: u64,
    len: usize,
}

fn clear_header(element: &[u8]) -> ClearHeader {
    assert!(element.len() >= 8 + 12 + 8 + 16, "too short to be sealed");
    let word = |at: usize| u64::from_le_bytes(element[at..at + 8].try_into().unwrap());
    ClearHeader {
        epoch: word(0),
        generation: word(20),
        len: element.len(),
    }
}

/// What storage received, in order (deletes and scans carry no element).
enum Received {
    Read,
    Write(Vec<(Addr, ClearHeader)>),
}

#[derive(Clone, Copy, Debug)]
enum Load {
    Idle,
    OneHotKey,
    Uniform,
}

fn options() -> SchemeOptions {
    let mut options = SchemeOptions {
        waffle: WaffleOptions {
            batch: Some(40),
            real: Some(PER_TICK as u32),
            fake_dummy: Some(8),
            cache: Some(500),
            batch_interval: TICK,
            ..WaffleOptions::default()
        },
        ..SchemeOptions::default()
    };
    // Small detection windows, so a hot key makes Pancake swap replicas during the run.
    options.pancake.window = 500;
    options
}

fn command(i: usize, load: Load) -> Option<Command> {
    let set = |k: usize| Command::Set {
        key: Bytes::from(format!("k{k}")),
        value: Bytes::from(format!("v{i}")),
        condition: SetCondition::Always,
    };
    match load {
        Load::Idle => None,
        Load::OneHotKey if i.is_multiple_of(3) => Some(set(0)),
        Load::OneHotKey => Some(Command::Get(Bytes::from_static(b"k0"))),
        Load::Uniform => Some(set(i * 7919 % 600)),
    }
}

/// Runs `name` from an empty store under `load`, then drains it; what storage received.
fn run(name: SchemeName, load: Load) -> Vec<Received> {
    let master = MasterKey::from_bytes([9; 32]);
    let store = StoreSpec {
        capacity: CAPACITY,
        layout: RecordLayout {
            max_key: MAX_KEY,
            max_value: MAX_VALUE,
        },
        seed: Some(5),
    };
    let scheme = build(name, &store, &options(), &master, Start::default()).unwrap();
    let directory = KeyDirectory::new(KeyHasher::new(&master), CAPACITY as usize);
    let limits = Limits {
        max_key: MAX_KEY,
        max_value: MAX_VALUE,
        max_keys_per_command: 64,
    };
    let mut sim = Simulator::new(Engine::new(scheme, directory, limits))
        .with_storage_delay(Duration::from_millis(1));
    let received: Arc<Mutex<Vec<Received>>> = Default::default();
    let tapped = received.clone();
    sim.tap(move |_, op| {
        let seen = match op {
            StorageOp::Read(_) => Received::Read,
            StorageOp::Write(elements) => Received::Write(
                elements
                    .iter()
                    .map(|(address, element)| (*address, clear_header(element)))
                    .collect(),
            ),
            StorageOp::Delete(_) | StorageOp::Scan { .. } => return,
        };
        tapped.lock().unwrap().push(seen);
    });
    sim.run_for(Duration::from_millis(50));
    for i in 0..TICKS * PER_TICK {
        if let Some(command) = command(i, load) {
            sim.submit(i as u64 % 8, command);
        }
        if i % PER_TICK == PER_TICK - 1 {
            sim.run_for(TICK);
        }
    }
    sim.drain();
    sim.run_for(Duration::from_millis(500));
    drop(sim);
    Arc::into_inner(received).unwrap().into_inner().unwrap()
}

/// How a scheme's generations follow from what storage received.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// Waffle: the batch reads received before the write.
    ReadsBefore,
    /// Path ORAM, CURIOUS: the fill's, then one more for every later write.
    OnePerWrite,
    /// Pancake: one more for every distinct label of every write.
    OnePerLabel,
    /// `encrypted`: the number of write requests so far, the first being 1 (it has no fill).
    WritesSoFar,
}

/// The generations `rule` gives the elements of every write storage received.
fn public_generations(rule: Rule, received: &[Received]) -> Vec<Vec<u64>> {
    let (mut reads, mut last) = (0, 0);
    let mut expected = Vec::new();
    for seen in received {
        let elements = match seen {
            Received::Read => {
                reads += 1;
                continue;
            }
            Received::Write(elements) => elements,
        };
        let generations = match rule {
            Rule::ReadsBefore => vec![reads; elements.len()],
            Rule::OnePerWrite => {
                if reads > 0 || last == 0 {
                    last += 1;
                }
                vec![last; elements.len()]
            }
            Rule::WritesSoFar => {
                last += 1;
                vec![last; elements.len()]
            }
            Rule::OnePerLabel => {
                let mut numbered: HashMap<Addr, u64> = HashMap::new();
                elements
                    .iter()
                    .map(|(address, _)| {
                        *numbered.entry(*address).or_insert_with(|| {
                            last += 1;
                            last
                        })
                    })
                    .collect()
            }
        };
        expected.push(generations);
    }
    expected
}

fn check(name: SchemeName, rule: Rule) {
    for load in [Load::Idle, Load::OneHotKey, Load::Uniform] {
        let received = run(name, load);
        let writes: Vec<&Vec<(Addr, ClearHeader)>> = received
            .iter()
            .filter_map(|seen| match seen {
                Received::Write(elements) => Some(elements),
                Received::Read => None,
            })
            .collect();
        let reads = received.len() - writes.len();
        // Only `encrypted`, which has no fill, writes nothing while idle.
        let Some(first) = writes.first().map(|elements| elements[0].1) else {
            assert!(matches!(load, Load::Idle), "{name:?}, {load:?}: no writes");
            continue;
        };
        for (n, (elements, expected)) in writes
            .iter()
            .zip(public_generations(rule, &received))
            .enumerate()
        {
            let shown: Vec<u64> = elements.iter().map(|(_, h)| h.generation).collect();
            assert_eq!(
                shown, expected,
                "{name:?}, {load:?}: write {n} shows generations that do not follow {rule:?}"
            );
            for (_, header) in elements.iter() {
                assert_eq!(
                    (header.epoch, header.len),
                    (first.epoch, first.len),
                    "{name:?}, {load:?}: one epoch and one length for every element"
                );
            }
        }
        if !matches!(load, Load::Idle) {
            // `encrypted` reads only for GETs (the uniform load only writes).
            let traffic = match name {
                SchemeName::Encrypted => received.len(),
                _ => reads,
            };
            assert!(traffic > 100, "{name:?}, {load:?}: only {reads} reads");
        }
        eprintln!("{name:?}, {load:?}: {} writes, {reads} reads", writes.len());
    }
}

#[test]
fn waffle_shows_the_batch_reads_before_each_write() {
    check(SchemeName::Waffle, Rule::ReadsBefore);
}

#[test]
fn path_oram_shows_one_generation_per_write() {
    check(SchemeName::PathOram, Rule::OnePerWrite);
}

#[test]
fn curious_shows_one_generation_per_write() {
    check(SchemeName::Curious, Rule::OnePerWrite);
}

#[test]
fn pancake_shows_one_generation_per_label_written() {
    check(SchemeName::Pancake, Rule::OnePerLabel);
}

#[test]
fn encrypted_shows_the_write_requests_before_each_write() {
    check(SchemeName::Encrypted, Rule::WritesSoFar);
}
