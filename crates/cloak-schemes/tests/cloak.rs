//! Cloak-specific behaviour: the server's view (paper §5), the client-op rules of Algorithm 2,
//! integrity, outages and backpressure. All in-process with a virtual clock.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{
    AccessKind, Addr, Command, ElementCodec, ElementFormat, Engine, KeyDirectory, Limits, Observed,
    Outcome, Record, RecordLayout, SchemeError, Simulator,
};
use cloak_crypto::{KeyHasher, MasterKey, Sealer};
use cloak_schemes::{Budgets, CloakOptions, SchemeName, SchemeOptions, Start, StoreSpec, build};
use cloak_testkit::commands::{get, scheme_error, set, value};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DELTA: Duration = Duration::from_millis(5);
const RTT: Duration = Duration::from_millis(1);
const CAPACITY: u64 = 300;

// `..CloakOptions::default()` covers the test-only leak-demo field when a workspace build
// enables that feature; without it the update is needless.
#[allow(clippy::needless_update)]
fn options(cache_size: usize, max_pending: Option<usize>) -> CloakOptions {
    CloakOptions {
        first_budget: 12,
        zipf_exponent: 1.0,
        budgets: None,
        batch_interval: DELTA,
        write_back_at: 0.5,
        cache_size,
        max_pending,
        ..CloakOptions::default()
    }
}

fn simulator(cloak: CloakOptions, seed: u64) -> Simulator {
    simulator_from(cloak, seed, Start::default())
}

const LAYOUT: RecordLayout = RecordLayout {
    max_key: 16,
    max_value: 32,
};

/// A Cloak scheme of this file's store, holding `start`'s records.
fn scheme(cloak: CloakOptions, seed: u64, start: Start) -> Box<dyn cloak_core::Scheme> {
    let store = StoreSpec {
        capacity: CAPACITY,
        layout: LAYOUT,
        seed: Some(seed),
    };
    let options = SchemeOptions {
        cloak,
        ..SchemeOptions::default()
    };
    build(SchemeName::Cloak, &store, &options, &master(), start).unwrap()
}

fn master() -> MasterKey {
    MasterKey::from_bytes([2; 32])
}

fn simulator_from(cloak: CloakOptions, seed: u64, start: Start) -> Simulator {
    simulator_over(cloak, seed, start, RTT)
}

/// A recording simulator whose storage answers every request `rtt` after it is sent.
fn simulator_over(cloak: CloakOptions, seed: u64, start: Start, rtt: Duration) -> Simulator {
    simulator_with(cloak, seed, start, |sim| sim.with_storage_delay(rtt))
}

/// A recording simulator whose storage `storage` sets up.
fn simulator_with(
    cloak: CloakOptions,
    seed: u64,
    start: Start,
    storage: impl FnOnce(Simulator) -> Simulator,
) -> Simulator {
    let master = master();
    let scheme = scheme(cloak, seed, start);
    let directory = KeyDirectory::new(KeyHasher::new(&master), CAPACITY as usize);
    let limits = Limits {
        max_key: 16,
        max_value: 32,
        max_keys_per_command: 64,
    };
    let mut sim = storage(Simulator::new(Engine::new(scheme, directory, limits)));
    sim.record();
    // Let the initial fill finish so tests start on the batch schedule.
    sim.run_for(Duration::from_millis(50));
    sim
}

fn budgets() -> Budgets {
    Budgets::zipf(CAPACITY, 12, 1.0).unwrap()
}

/// The batches in a trace: each read and the write that follows it (a write-back of a batch
/// read before the trace began is left out).
fn batches(trace: &[Observed]) -> Vec<(&Observed, &Observed)> {
    let batch_size = budgets().batch_size();
    let ops: Vec<&Observed> = trace
        .iter()
        .filter(|o| o.addrs.len() == batch_size)
        .skip_while(|o| o.kind != AccessKind::Read)
        .collect();
    ops.chunks_exact(2).map(|pair| (pair[0], pair[1])).collect()
}

/// Drives a workload: `clients` clients, each keeping `depth` commands in flight, commands drawn
/// by `next`, for `duration` of virtual time.
fn drive(
    sim: &mut Simulator,
    clients: u64,
    depth: usize,
    duration: Duration,
    mut next: impl FnMut(&mut ChaCha8Rng) -> Command,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let end = sim.elapsed() + duration;
    let mut owner: HashMap<u64, u64> = HashMap::new();
    let mut in_flight = vec![0usize; clients as usize];
    while sim.elapsed() < end {
        for c in 0..clients {
            while in_flight[c as usize] < depth {
                let token = sim.submit(c, next(&mut rng));
                owner.insert(token, c);
                in_flight[c as usize] += 1;
            }
        }
        sim.run_for(Duration::from_micros(500));
        for (token, _, outcome) in sim.drain_outcomes() {
            assert!(!matches!(outcome, Outcome::Error(_)), "{outcome:?}");
            in_flight[owner.remove(&token).unwrap() as usize] -= 1;
        }
    }
}

/// What the server can compute from its view: for each batch, how many addresses it took from
/// each reuse distance (`None`: an address not seen since observation began).
fn per_distance_counts(trace: &[Observed]) -> Vec<HashMap<Option<usize>, usize>> {
    let mut last_batch: HashMap<Addr, usize> = HashMap::new();
    let mut counts = Vec::new();
    for (k, (read, write)) in batches(trace).into_iter().enumerate() {
        let mut c = HashMap::new();
        for addr in &read.addrs {
            let distance = last_batch.get(addr).map(|&b| k - b);
            *c.entry(distance).or_default() += 1;
        }
        for addr in &write.addrs {
            last_batch.insert(*addr, k);
        }
        counts.push(c);
    }
    counts
}

#[test]
fn server_view_is_the_same_for_one_hot_key_and_uniform_keys() {
    let b = budgets();
    let t = b.sets();
    let run = 3 * t as u32 * DELTA;

    let mut hot = simulator(options(8, None), 1);
    drive(&mut hot, 4, 4, run, |rng| {
        if rng.random_bool(0.5) {
            set("hot", "v")
        } else {
            get("hot")
        }
    });
    let mut uniform = simulator(options(8, None), 2);
    drive(&mut uniform, 4, 4, run, |rng| {
        let key = format!("k{}", rng.random_range(0..CAPACITY));
        if rng.random_bool(0.5) {
            set(&key, "v")
        } else {
            get(&key)
        }
    });

    let views = [hot.take_trace(), uniform.take_trace()];
    let shapes: Vec<Vec<(Duration, AccessKind, usize)>> = views
        .iter()
        .map(|v| v.iter().map(|o| (o.at, o.kind, o.addrs.len())).collect())
        .collect();
    assert!(
        shapes[0].len() > 4 * t,
        "the run covers several generations of sets"
    );
    assert_eq!(
        shapes[0], shapes[1],
        "batch schedule and sizes differ between workloads"
    );

    for view in &views {
        assert_budget_shape(view, &b);
    }
}

/// Every batch in `view`: a sorted read, then a write-back of the same addresses with equal-size
/// elements, on the fixed schedule, taking exactly `b_d` addresses at every reuse distance the
/// server can compute (and the budgets of the rest from addresses it has not seen yet).
fn assert_budget_shape(view: &[Observed], b: &Budgets) {
    let t = b.sets();
    let batches = batches(view);
    assert!(batches.len() > t, "the view covers a generation of sets");
    for (k, (read, write)) in batches.iter().enumerate() {
        assert_eq!(read.kind, AccessKind::Read);
        assert_eq!(write.kind, AccessKind::Write);
        assert!(
            read.addrs.is_sorted(),
            "batch {k}: request order must not depend on the workload"
        );
        assert_eq!(
            read.addrs, write.addrs,
            "batch {k}: written-back addresses differ from the read ones"
        );
        assert!(
            write.values.windows(2).all(|w| w[0].len() == w[1].len()),
            "elements differ in size"
        );
        if k > 0 {
            assert_eq!(
                read.at - batches[k - 1].0.at,
                DELTA,
                "batch {k} is off the fixed schedule"
            );
        }
    }
    for (k, counts) in per_distance_counts(view).into_iter().enumerate() {
        let mut expected: HashMap<Option<usize>, usize> = HashMap::new();
        for d in 1..=t {
            let key = if d <= k { Some(d) } else { None };
            *expected.entry(key).or_default() += b.budget(d) as usize;
        }
        assert_eq!(
            counts, expected,
            "batch {k}: per-set counts differ from the budgets"
        );
    }
}

/// A cluster's partitions, each a store of its own driven by the commands whose keys hash to
/// its slots: with all the load on one slot (one partition loaded, the others idle) and with
/// uniform keys (every partition loaded), every partition shows the server the same schedule,
/// the same batch sizes and the budgets' per-set counts. So the server cannot tell which
/// partitions are busy, let alone which keys.
#[test]
fn every_partition_of_a_cluster_shows_the_same_schedule_under_one_hot_slot_and_uniform_keys() {
    use cloak_cluster::{ClusterMap, key_slot};

    const PARTITIONS: usize = 4;
    let proxy = [("p".to_string(), "127.0.0.1:7001".to_string())];
    let map = ClusterMap::even(&proxy, PARTITIONS, "memory").unwrap();
    let partition_of = |key: &str| map.partition_of(key_slot(key.as_bytes())).index;
    let b = budgets();
    let run = 3 * b.sets() as u32 * DELTA;
    let op = |rng: &mut ChaCha8Rng, key: &str| {
        if rng.random_bool(0.5) {
            set(key, "v")
        } else {
            get(key)
        }
    };

    let hot = partition_of("hot");
    let one_slot: Vec<Simulator> = (0..PARTITIONS)
        .map(|p| {
            let mut sim = simulator(options(8, None), 10 + p as u64);
            if p == hot {
                drive(&mut sim, 4, 4, run, |rng| op(rng, "hot"));
            } else {
                sim.run_for(run);
            }
            sim
        })
        .collect();
    let uniform: Vec<Simulator> = (0..PARTITIONS)
        .map(|p| {
            let mut sim = simulator(options(8, None), 20 + p as u64);
            // The uniform workload's requests that the map sends to this partition.
            drive(&mut sim, 4, 4, run, |rng| {
                loop {
                    let key = format!("k{}", rng.random_range(0..CAPACITY));
                    if partition_of(&key) == p {
                        return op(rng, &key);
                    }
                }
            });
            sim
        })
        .collect();

    let shape = |view: &[Observed]| -> Vec<(Duration, AccessKind, usize)> {
        view.iter().map(|o| (o.at, o.kind, o.addrs.len())).collect()
    };
    let mut shapes = Vec::new();
    for mut sim in one_slot.into_iter().chain(uniform) {
        let view = sim.take_trace();
        assert_budget_shape(&view, &b);
        shapes.push(shape(&view));
    }
    assert!(
        shapes[0].len() > 4 * b.sets(),
        "the run covers several generations of sets"
    );
    for (k, other) in shapes.iter().enumerate() {
        assert_eq!(
            &shapes[0],
            other,
            "partition {} of the {} run shows another schedule",
            k % PARTITIONS,
            if k < PARTITIONS {
                "one-slot"
            } else {
                "uniform"
            }
        );
    }
}

#[test]
fn batches_are_sent_when_idle() {
    let mut sim = simulator(options(8, None), 3);
    sim.take_trace();
    sim.run_for(Duration::from_secs(1));
    let reads = sim
        .observed()
        .iter()
        .filter(|o| o.kind == AccessKind::Read)
        .count();
    assert_eq!(
        reads,
        (Duration::from_secs(1).as_micros() / DELTA.as_micros()) as usize
    );
}

/// When the server receives each batch read and its write-back.
fn batch_times(trace: &[Observed]) -> Vec<(Duration, Duration)> {
    batches(trace)
        .into_iter()
        .map(|(read, write)| (read.at, write.at))
        .collect()
}

/// Batch starts on the grid and each write-back a fixed hold after its batch, whether the batch
/// was all dummies (idle) or mostly real (a flood of commands), and whether storage answers
/// the read long before the write-back's time or just before it: the server's clock sees the
/// same two numbers every batch. (Checked to fail when the write-back is sent as soon as it is
/// sealed, as it was: the offset is then the storage round trip.)
#[test]
fn batches_stay_on_the_grid_and_write_backs_keep_their_offset_whatever_the_load() {
    let hold = DELTA / 2;
    for rtt in [Duration::from_micros(200), Duration::from_millis(2)] {
        let mut sim = simulator_over(options(8, None), 7, Start::default(), rtt);
        sim.take_trace();
        sim.run_for(20 * DELTA);
        assert_eq!(
            sim.engine().scheme_stats().real_accesses,
            0,
            "idle: all dummies"
        );
        drive(&mut sim, 16, 8, 40 * DELTA, |rng| {
            let key = format!("k{}", rng.random_range(0..CAPACITY));
            if rng.random_bool(0.5) {
                set(&key, "v")
            } else {
                get(&key)
            }
        });
        let stats = sim.engine().scheme_stats();
        let flood_slots = 40 * budgets().batch_size() as u64;
        assert!(
            stats.real_accesses > flood_slots / 2,
            "the flood filled {} of {flood_slots} slots",
            stats.real_accesses
        );

        let times = batch_times(sim.observed());
        assert!(times.len() >= 59, "{} batches", times.len());
        let first = times[0].0;
        for (k, &(read, write)) in times.iter().enumerate() {
            assert_eq!(
                read,
                first + DELTA * k as u32,
                "batch {k} left the grid ({rtt:?})"
            );
            assert_eq!(write - read, hold, "batch {k}'s write-back ({rtt:?})");
        }
        assert_eq!((stats.missed_batches, stats.late_write_backs), (0, 0));
    }
}

/// Storage too slow for the schedule: a read answered after the write-back's time makes the
/// write-back late (it leaves as soon as it is sealed, and is counted), and a grid point that
/// comes while the read is unanswered is skipped, never run late: batches stay on the grid.
#[test]
fn slow_storage_makes_late_write_backs_and_skipped_batches_never_an_off_grid_batch() {
    let rtt = DELTA * 6 / 5;
    let mut sim = simulator_over(options(8, None), 8, Start::default(), rtt);
    sim.take_trace();
    sim.run_for(40 * DELTA);
    let times = batch_times(sim.observed());
    assert!(times.len() >= 19, "{} batches", times.len());
    let first = times[0].0;
    for (k, &(read, write)) in times.iter().enumerate() {
        // The read is answered at rtt > Δ, so every other grid point is skipped.
        assert_eq!(
            read,
            first + 2 * DELTA * k as u32,
            "batch {k} left the grid"
        );
        assert_eq!(
            write - read,
            rtt,
            "batch {k}: a late write-back leaves once sealed"
        );
    }
    let stats = sim.engine().scheme_stats();
    assert!(stats.late_write_backs >= times.len() as u64);
    assert!(stats.missed_batches >= times.len() as u64 - 1);
}

/// A write-back still unanswered at the next grid point does not hold the next batch back, even
/// when storage applies writes only as it answers them (so the next read finds the elements
/// from before the write-back): every grid point has its batch, and every read returns the value
/// last written. (Checked to fail, with integrity errors, when the next read uses what storage
/// returned for the addresses the write-back was writing.)
#[test]
fn a_write_back_still_landing_neither_skips_the_next_batch_nor_hides_its_elements() {
    let rtt = DELTA * 3 / 5;
    let mut sim = simulator_with(options(0, None), 9, Start::default(), |sim| {
        sim.with_storage_delay(rtt).with_writes_landing_on_answer()
    });
    sim.take_trace();
    let keys = 40;
    for round in 0..30 {
        let reads: Vec<(u64, String)> = (0..keys)
            .map(|k| {
                let key = format!("k{k}");
                sim.submit(k, set(&key, &format!("{round}")));
                (sim.submit(k, get(&key)), format!("{round}"))
            })
            .collect();
        for (token, expected) in reads {
            assert_eq!(sim.outcome(token), value(&expected), "round {round}");
        }
        // The writes go out in the next batches; reads after them come from storage.
        sim.run_for(6 * DELTA);
        let misses: Vec<u64> = (0..keys)
            .map(|k| sim.submit(100 + k, get(&format!("k{k}"))))
            .collect();
        assert!(sim.run_until(40 * DELTA, |s| misses.iter().all(|&t| s.has_outcome(t))));
        for token in misses {
            assert_eq!(
                sim.outcome(token),
                value(&format!("{round}")),
                "round {round}"
            );
        }
    }
    let times = batch_times(sim.observed());
    assert!(times.len() >= 60, "{} batches", times.len());
    let first = times[0].0;
    for (k, &(read, write)) in times.iter().enumerate() {
        assert_eq!(read, first + DELTA * k as u32, "batch {k} left the grid");
        assert_eq!(
            write - read,
            rtt,
            "batch {k}'s write-back leaves once sealed"
        );
    }
    let stats = sim.engine().scheme_stats();
    assert_eq!(stats.missed_batches, 0);
    assert_eq!(stats.integrity_failures, 0);
}

#[test]
fn reads_of_one_slot_share_one_server_read() {
    let mut sim = simulator(options(0, None), 4);
    assert_eq!(sim.execute(1, set("x", "1")), Some(Outcome::Ok));
    sim.run_for(10 * DELTA);
    let before = sim.engine().scheme_stats();
    let tokens: Vec<u64> = (2..6).map(|c| sim.submit(c, get("x"))).collect();
    assert!(sim.run_until(10 * DELTA, |s| tokens.iter().all(|&t| s.has_outcome(t))));
    for t in tokens {
        assert_eq!(sim.outcome(t), value("1"));
    }
    let after = sim.engine().scheme_stats();
    assert_eq!(after.real_accesses - before.real_accesses, 1);
    // Four misses, three of which joined the first (the counters say what the access did).
    assert_eq!(after.cache_misses - before.cache_misses, 4);
    assert_eq!(after.joined_reads - before.joined_reads, 3);
}

#[test]
fn one_clients_pipelined_reads_of_one_slot_share_one_server_read() {
    let mut sim = simulator(options(0, None), 4);
    assert_eq!(sim.execute(1, set("x", "1")), Some(Outcome::Ok));
    sim.run_for(10 * DELTA);
    let before = sim.engine().scheme_stats();
    let tokens: Vec<u64> = (0..4).map(|_| sim.submit(2, get("x"))).collect();
    assert!(sim.run_until(10 * DELTA, |s| tokens.iter().all(|&t| s.has_outcome(t))));
    let answered = sim.drain_outcomes();
    assert_eq!(answered.len(), 4);
    for (_, at, outcome) in &answered {
        assert_eq!(Some(outcome.clone()), value("1"));
        assert_eq!(*at, answered[0].1, "answered by one batch: {answered:?}");
    }
    let after = sim.engine().scheme_stats();
    assert_eq!(after.real_accesses - before.real_accesses, 1);
}

#[test]
fn one_clients_pipelined_read_write_read_see_the_write_in_order() {
    let mut sim = simulator(options(0, None), 5);
    assert_eq!(sim.execute(1, set("x", "old")), Some(Outcome::Ok));
    sim.run_for(20 * DELTA);
    let before = sim.submit(2, get("x"));
    let write = sim.submit(2, set("x", "new"));
    let after = sim.submit(2, get("x"));
    let again = sim.submit(2, get("x"));
    assert!(sim.run_until(10 * DELTA, |s| s.has_outcome(again)));
    assert_eq!(sim.outcome(before), value("old"));
    assert_eq!(sim.outcome(write), Some(Outcome::Ok));
    assert_eq!(sim.outcome(after), value("new"));
    assert_eq!(sim.outcome(again), value("new"));
}

#[test]
fn another_clients_delete_comes_after_a_write_waiting_in_its_lane() {
    let mut sim = simulator(options(0, None), 5);
    assert_eq!(sim.execute(1, set("k", "old")), Some(Outcome::Ok));
    sim.run_for(20 * DELTA);
    let before = sim.submit(2, get("k"));
    let write = sim.submit(2, set("k", "new"));
    let after = sim.submit(2, get("k"));
    assert!(!sim.has_outcome(before), "the read waits for a batch");
    let delete = sim.submit(3, Command::Del(vec![Bytes::from_static(b"k")]));
    assert!(sim.run_until(10 * DELTA, |s| s.has_outcome(delete)));
    // In the order the proxy took them: client 2's read, write and read, then the delete.
    assert_eq!(sim.outcome(before), value("old"));
    assert_eq!(sim.outcome(write), Some(Outcome::Ok));
    assert_eq!(sim.outcome(after), value("new"));
    assert_eq!(sim.outcome(delete), Some(Outcome::Integer(1)));
    sim.run_for(20 * DELTA);
    assert_eq!(sim.execute(2, get("k")), Some(Outcome::Value(None)));
}

#[test]
fn a_pending_write_answers_reads_at_once() {
    let mut sim = simulator(options(0, None), 5);
    assert_eq!(sim.execute(1, set("x", "old")), Some(Outcome::Ok));
    sim.run_for(20 * DELTA);
    // A read waits for the batch; a write from another client answers it immediately.
    let read = sim.submit(1, get("x"));
    assert!(!sim.has_outcome(read));
    let write = sim.submit(2, set("x", "new"));
    assert_eq!(sim.outcome(write), Some(Outcome::Ok));
    assert_eq!(sim.outcome(read), value("new"));
    // While the write is pending, reads are answered without waiting for the batch.
    let again = sim.submit(3, get("x"));
    assert_eq!(sim.outcome(again), value("new"));
    // A second write replaces the first.
    assert_eq!(sim.execute(2, set("x", "newer")), Some(Outcome::Ok));
    sim.run_for(20 * DELTA);
    assert_eq!(sim.execute(4, get("x")), value("newer"));
}

/// Submits `client`'s read of `key` and runs until the batch carrying it is at the server;
/// returns the read's token.
fn read_in_flight(sim: &mut Simulator, client: u64, key: &str) -> u64 {
    let seen = sim.observed().len();
    let read = sim.submit(client, get(key));
    let read_sent = |s: &Simulator| {
        s.observed()[seen..]
            .iter()
            .any(|o| o.kind == AccessKind::Read)
    };
    assert!(sim.run_until(2 * DELTA, read_sent));
    assert!(!sim.has_outcome(read), "the read is in flight");
    read
}

#[test]
fn a_write_during_a_batch_read_is_not_overwritten_by_the_read() {
    // A cache large enough that a stale entry would survive to be read.
    let mut sim = simulator(options(16, None), 6);
    assert_eq!(sim.execute(1, set("x", "old")), Some(Outcome::Ok));
    // Push "x" out of the cache with other keys.
    for i in 0..40 {
        sim.submit(1, set(&format!("f{i}"), "v"));
    }
    sim.run_for(200 * DELTA);
    // Once the batch carrying the read is at the server, write.
    let read = read_in_flight(&mut sim, 2, "x");
    assert_eq!(sim.execute(3, set("x", "new")), Some(Outcome::Ok));
    assert_eq!(sim.outcome(read), value("new"));
    sim.run_for(20 * DELTA);
    assert_eq!(sim.execute(4, get("x")), value("new"));
}

#[test]
fn backpressure_bounds_pending_ops_and_everything_completes() {
    let mut sim = simulator(options(0, Some(5)), 7);
    for i in 0..100 {
        assert_eq!(
            sim.execute(1, set(&format!("k{i}"), &i.to_string())),
            Some(Outcome::Ok)
        );
    }
    sim.run_for(100 * DELTA);
    let mut tokens = Vec::new();
    let mut refused = 0;
    for i in 0..100 {
        if !sim.engine().accepts() {
            refused += 1;
            sim.run_until(100 * DELTA, |s| s.engine().accepts());
        }
        assert!(sim.engine().stats().keys == 100);
        tokens.push((i, sim.submit(2 + i, get(&format!("k{i}")))));
    }
    assert!(refused > 0, "the pending bound never applied");
    for (i, token) in tokens {
        assert!(sim.run_until(1000 * DELTA, |s| s.has_outcome(token)));
        assert_eq!(sim.outcome(token), value(&i.to_string()));
    }
}

/// Plays a malicious server between batches (a batch in flight would overwrite the damage).
fn corrupt_every_element(sim: &mut Simulator, mut damage: impl FnMut(&mut Vec<u8>)) {
    assert!(sim.run_until(DELTA, Simulator::storage_idle));
    for addr in sim.store_mut().addresses() {
        let mut bytes = sim.store_mut().element(addr).unwrap().to_vec();
        damage(&mut bytes);
        sim.store_mut().replace(addr, &bytes);
    }
}

/// Damage that breaks an element's tag.
fn flip_last_byte(element: &mut [u8]) {
    let last = element.len() - 1;
    element[last] ^= 1;
}

fn expect_integrity_error(outcome: Option<Outcome>) {
    assert!(
        matches!(scheme_error(&outcome), Some(SchemeError::Integrity(_))),
        "expected an integrity error, got {outcome:?}"
    );
}

#[test]
fn tampered_elements_are_reported_never_returned() {
    let mut sim = simulator(options(0, None), 8);
    assert_eq!(sim.execute(1, set("x", "secret")), Some(Outcome::Ok));
    sim.run_for(100 * DELTA);
    corrupt_every_element(&mut sim, |b| flip_last_byte(b));
    expect_integrity_error(sim.execute(2, get("x")));
    assert!(sim.engine().scheme_stats().integrity_failures > 0);
    // The proxy keeps serving: new writes work and are readable.
    assert_eq!(sim.execute(2, set("x", "rewritten")), Some(Outcome::Ok));
    sim.run_for(100 * DELTA);
    assert_eq!(sim.execute(3, get("x")), value("rewritten"));
    assert_eq!(sim.execute(3, set("y", "fine")), Some(Outcome::Ok));
    sim.run_for(100 * DELTA);
    assert_eq!(sim.execute(3, get("y")), value("fine"));
}

#[test]
fn replayed_and_swapped_elements_are_detected() {
    let mut sim = simulator(options(0, None), 9);
    for i in 0..50 {
        assert_eq!(
            sim.execute(1, set(&format!("k{i}"), "v1")),
            Some(Outcome::Ok)
        );
    }
    sim.run_for(100 * DELTA);
    // Replay: the server puts back an old snapshot of every element.
    let snapshot: Vec<(Addr, Bytes)> = sim
        .store_mut()
        .addresses()
        .into_iter()
        .map(|a| (a, sim.store_mut().element(a).unwrap()))
        .collect();
    sim.run_for(100 * DELTA);
    assert!(sim.run_until(DELTA, Simulator::storage_idle));
    for (addr, old) in &snapshot {
        sim.store_mut().replace(*addr, old);
    }
    let failures: usize = (0..50)
        .filter(|i| {
            matches!(
                sim.execute(2, get(&format!("k{i}"))),
                Some(Outcome::Error(_))
            )
        })
        .count();
    assert!(failures > 0, "a replayed snapshot went unnoticed");

    // Swap: the server exchanges elements between addresses.
    let mut sim = simulator(options(0, None), 10);
    assert_eq!(sim.execute(1, set("x", "v")), Some(Outcome::Ok));
    sim.run_for(100 * DELTA);
    assert!(sim.run_until(DELTA, Simulator::storage_idle));
    let mut addrs: Vec<Addr> = sim.store_mut().addresses();
    addrs.sort();
    let elements: Vec<Bytes> = addrs
        .iter()
        .map(|&a| sim.store_mut().element(a).unwrap())
        .collect();
    for (i, &addr) in addrs.iter().enumerate() {
        sim.store_mut()
            .replace(addr, &elements[(i + 1) % elements.len()]);
    }
    expect_integrity_error(sim.execute(2, get("x")));
}

#[test]
fn storage_outage_fails_reads_clearly_and_keeps_acknowledged_writes() {
    let mut sim = simulator(options(0, None), 11);
    assert_eq!(sim.execute(1, set("before", "1")), Some(Outcome::Ok));
    sim.run_for(100 * DELTA);
    sim.set_storage_down(true);
    sim.run_for(10 * DELTA);
    let outcome = sim.execute(2, get("before"));
    assert!(
        matches!(
            scheme_error(&outcome),
            Some(SchemeError::StorageUnavailable(_))
        ),
        "{outcome:?}"
    );
    // Writes are acknowledged during the outage and survive it.
    assert_eq!(sim.execute(2, set("during", "2")), Some(Outcome::Ok));
    sim.run_for(Duration::from_secs(3));
    sim.set_storage_down(false);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.execute(3, get("before")), value("1"));
    assert_eq!(sim.execute(3, get("during")), value("2"));
    let reads_after = sim
        .observed()
        .iter()
        .rev()
        .take(10)
        .filter(|o| o.kind == AccessKind::Read)
        .count();
    assert!(reads_after > 0, "batches resumed");
}

#[test]
fn a_read_queued_behind_a_batch_that_found_the_slot_corrupted_fails_too() {
    let mut sim = simulator(options(0, None), 12);
    assert_eq!(sim.execute(1, set("x", "v")), Some(Outcome::Ok));
    sim.run_for(20 * DELTA);
    corrupt_every_element(&mut sim, |b| b[40] ^= 1);
    // The next batch carries "x" as a dummy (it was touched last) and finds it corrupted; a read
    // submitted while that batch is in flight waits for the batch after, which must not answer
    // with the empty placeholder written back in its place.
    let seen = sim.observed().len();
    assert!(sim.run_until(2 * DELTA, |s| s.observed().len() > seen));
    expect_integrity_error(sim.execute(2, get("x")));
    sim.run_for(20 * DELTA);
    expect_integrity_error(sim.execute(3, get("x")));
}

#[test]
fn a_write_queued_while_a_batch_found_its_slot_corrupt_is_read_once_it_lands() {
    let mut sim = simulator(options(0, None), 12);
    assert_eq!(sim.execute(1, set("x", "old")), Some(Outcome::Ok));
    sim.run_for(20 * DELTA);
    corrupt_every_element(&mut sim, |e| flip_last_byte(e));
    let read = read_in_flight(&mut sim, 2, "x");
    // The write is queued behind the batch that finds the element corrupt.
    assert_eq!(sim.execute(3, set("x", "new")), Some(Outcome::Ok));
    assert_eq!(sim.outcome(read), value("new"));
    // Long after the write landed, the slot reads as written, not as lost.
    sim.run_for(40 * DELTA);
    assert_eq!(sim.execute(3, get("x")), value("new"));
}

#[test]
fn acknowledged_writes_are_counted_until_written_back() {
    let mut sim = simulator(options(8, None), 13);
    assert_eq!(sim.engine().scheme_stats().unwritten, 0);
    for i in 0..20 {
        sim.submit(1, set(&format!("k{i}"), "v"));
    }
    assert_eq!(sim.engine().scheme_stats().unwritten, 20);
    assert!(sim.run_until(
        Duration::from_secs(10),
        |s| s.engine().scheme_stats().unwritten == 0
    ));
    // Written back means readable from storage by a fresh reader once the cache forgets.
    for i in 0..20 {
        sim.submit(2, set(&format!("other{i}"), "x"));
    }
    sim.run_for(100 * DELTA);
    for i in 0..20 {
        assert_eq!(sim.execute(3, get(&format!("k{i}"))), value("v"));
    }
}

/// Recovery as the proxy does it, for stores made by [`simulator`] (seed 15, cache 8).
fn with_restart<T>(test: impl FnOnce(&cloak_testkit::suite::Restart) -> T) -> T {
    let master = master();
    let build = |records, generation_base| {
        let start = Start {
            records,
            generation_base,
            fill_clock: None,
        };
        scheme(options(8, None), 15, start)
    };
    let format = || ElementFormat::Sealed(ElementCodec::new(LAYOUT, Sealer::new(&master).unwrap()));
    let restart = cloak_testkit::suite::Restart {
        format: &format,
        hasher: KeyHasher::new(&master),
        capacity: CAPACITY as usize,
        limits: Limits {
            max_key: 16,
            max_value: 32,
            max_keys_per_command: 64,
        },
        build: &build,
        journal_delay: Duration::from_millis(1),
        storage_delay: RTT,
    };
    test(&restart)
}

#[test]
fn after_a_crash_the_server_sees_one_full_fill_then_the_budgets_again() {
    with_restart(|restart| {
        let mut sim = simulator(options(8, None), 15);
        drive(&mut sim, 4, 4, 50 * DELTA, |rng| {
            let key = format!("k{}", rng.random_range(0..CAPACITY));
            if rng.random_bool(0.5) {
                set(&key, "v")
            } else {
                get(&key)
            }
        });
        let (mut sim, recovered) = restart.recover(sim.crash(), 1);
        assert!(
            recovered.records.len() > 50,
            "the workload left data behind"
        );
        sim.record();
        sim.run_for(3 * budgets().sets() as u32 * DELTA);
        let view = sim.take_trace();

        // First the new instance writes every address once, whatever the data.
        let fill = &view[0];
        assert_eq!(fill.kind, AccessKind::Write);
        let n = budgets().capacity() as usize;
        assert_eq!(fill.addrs.len(), n);
        assert_eq!(fill.addrs, (0..n as Addr).collect::<Vec<_>>());
        // Then batches exactly as before the crash.
        assert_budget_shape(&view[1..], &budgets());
        // And the data is all there.
        for (_, key) in recovered.keys() {
            let key = std::str::from_utf8(key).unwrap();
            assert_eq!(sim.execute(9, get(key)), value("v"));
        }
    })
}

/// A store of [`with_restart`]'s holding `k0..k40` = `v0..v40`, crashed and recovered: the new
/// instance's fill is out and not yet answered.
fn restarted_with_40_keys(restart: &cloak_testkit::suite::Restart) -> Simulator {
    let mut sim = simulator(options(8, None), 15);
    for i in 0..40 {
        let (key, value) = (format!("k{i}"), format!("v{i}"));
        assert_eq!(sim.execute(1, set(&key, &value)), Some(Outcome::Ok));
    }
    sim.run_for(100 * DELTA);
    restart.recover(sim.crash(), 1).0
}

/// After a restart, a read is answered while the fill is still out, from the recovered records
/// on local disk (recovery's spool): storage is sent the fill and nothing else, and the value is
/// the recovered one. A write during the fill is still the newest value for reads after it.
#[test]
fn reads_during_the_fill_are_answered_from_the_recovered_records_with_no_storage_request() {
    with_restart(|restart| {
        let mut sim = restarted_with_40_keys(restart);
        sim.record();
        let reads: Vec<u64> = (0..40)
            .map(|i| sim.submit(9, get(&format!("k{i}"))))
            .collect();
        // Storage answers in RTT: the fill's one request is still out.
        sim.run_for(RTT / 2);
        let stats = sim.engine().scheme_stats();
        assert!(stats.filling.is_some(), "the fill is still out");
        assert_eq!(stats.recovered_reads, 40);
        let view = sim.take_trace();
        assert_eq!(view.len(), 1, "storage was sent the fill alone: {view:?}");
        assert_eq!(view[0].kind, AccessKind::Write);
        assert_eq!(view[0].addrs.len() as u64, budgets().capacity());
        for (i, read) in reads.into_iter().enumerate() {
            assert_eq!(sim.outcome(read), value(&format!("v{i}")), "k{i}");
        }

        // A write during the fill, then a read of its key: the write's value.
        let write = sim.submit(9, set("k0", "new"));
        let read = sim.submit(9, get("k0"));
        sim.run_for(10 * DELTA);
        assert_eq!(sim.outcome(write), Some(Outcome::Ok));
        assert_eq!(sim.outcome(read), value("new"));
    })
}

/// Reads during the fill next to writes (review of the reads during the fill): a key deleted
/// during the fill reads as deleted, during it and after; a key read during the fill (its
/// recovered record then cached) and written afterwards reads the write, also once the cache has
/// evicted it and the first batches have stored it.
#[test]
fn a_delete_or_write_during_the_fill_is_not_undone_by_the_recovered_record() {
    with_restart(|restart| {
        let mut sim = restarted_with_40_keys(restart);
        let cached = sim.submit(9, get("k1"));
        let delete = sim.submit(9, Command::Del(vec![Bytes::from_static(b"k2")]));
        let deleted = sim.submit(9, get("k2"));
        let write = sim.submit(9, set("k1", "newer"));
        let written = sim.submit(9, get("k1"));
        sim.run_for(RTT / 2);
        assert!(
            sim.engine().scheme_stats().filling.is_some(),
            "all of it during the fill"
        );
        sim.run_for(10 * DELTA);
        assert_eq!(sim.outcome(cached), value("v1"));
        assert_eq!(sim.outcome(delete), Some(Outcome::Integer(1)));
        assert_eq!(sim.outcome(deleted), Some(Outcome::Value(None)));
        assert_eq!(sim.outcome(write), Some(Outcome::Ok));
        assert_eq!(sim.outcome(written), value("newer"));
        // Other keys' reads evict k1 from the cache of 8; the batches store the write.
        for i in 10..40 {
            assert_eq!(
                sim.execute(9, get(&format!("k{i}"))),
                value(&format!("v{i}"))
            );
        }
        sim.run_for(100 * DELTA);
        assert_eq!(sim.execute(9, get("k1")), value("newer"));
        assert_eq!(sim.execute(9, get("k2")), Some(Outcome::Value(None)));
    })
}

/// A key whose element failed authentication during a run, with no cached copy, is written back
/// as an empty placeholder (the run answers integrity errors for it). After a restart it must not
/// pass for a free slot: checked against the versions the run acknowledged, it is missing.
#[test]
fn a_key_lost_to_a_bad_element_during_a_run_is_reported_after_a_restart() {
    with_restart(|restart| {
        let mut sim = simulator(options(0, None), 8);
        assert_eq!(sim.execute(1, set("x", "secret")), Some(Outcome::Ok));
        assert_eq!(sim.execute(1, set("y", "kept")), Some(Outcome::Ok));
        sim.run_for(100 * DELTA);
        corrupt_every_element(&mut sim, |b| flip_last_byte(b));
        expect_integrity_error(sim.execute(2, get("x")));
        // The batch that found x corrupted writes its placeholder back.
        assert!(sim.run_until(DELTA, Simulator::storage_idle));
        let acknowledged = sim
            .engine()
            .acknowledged()
            .expect("a simulation keeps versions");
        let (_, recovered) = restart.recover(sim.crash(), 1);
        // Storage alone shows a free slot where x was...
        assert!(recovered.keys().all(|(_, key)| key != b"x"));
        // ...which the versions the run acknowledged expose: a slot it wrote is missing.
        let findings = recovered.findings(&acknowledged);
        assert!(!findings.stale.is_empty(), "x is reported: {findings}");
        assert!(
            findings.stale.iter().all(|s| s.found.is_none()),
            "{findings}"
        );
    })
}

/// The fill overwrites addresses that held recovered records before the chunk with their new
/// addresses lands, so until all of it has landed the records count as unwritten: a clean stop
/// waits for the fill instead of leaving storage without them.
#[test]
fn recovered_records_count_as_unwritten_until_the_fill_has_landed() {
    let records: Vec<_> = (0..50u64)
        .map(|slot| {
            let record = Record {
                version: slot + 1,
                key: Bytes::from(format!("k{slot}")),
                value: Bytes::from_static(b"v"),
            };
            (slot, record)
        })
        .collect();
    let start = || Start::with(records.clone(), 1 << 40);
    let filling = scheme(options(0, None), 17, start());
    assert_eq!(filling.stats().unwritten, 50);
    let sim = simulator_from(options(0, None), 17, start());
    assert_eq!(sim.engine().scheme_stats().unwritten, 0);
}

#[test]
fn batch_ids_past_32_bits_keep_sets_and_bindings_right() {
    // Batch ids are stored as their low 32 bits; start just below the wrap and cross it.
    let start = Start::with(Vec::new(), (1 << 32) - 40);
    let mut sim = simulator_from(options(0, None), 16, start);
    sim.take_trace();
    for i in 0..60 {
        assert_eq!(
            sim.execute(1, set(&format!("k{i}"), &i.to_string())),
            Some(Outcome::Ok)
        );
    }
    sim.run_for(4 * budgets().sets() as u32 * DELTA);
    for i in 0..60 {
        assert_eq!(sim.execute(2, get(&format!("k{i}"))), value(&i.to_string()));
    }
    assert_eq!(sim.engine().scheme_stats().integrity_failures, 0);
    assert_budget_shape(&sim.take_trace(), &budgets());
}
