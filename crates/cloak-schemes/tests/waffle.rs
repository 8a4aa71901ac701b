//! Waffle as the server sees it (paper §6–8): the shape of every batch, labels used once, the
//! α and β of Theorems 7.1 and 7.2 on skewed and uniform workloads, batch timing; integrity
//! against a malicious server; restart and shutdown. In-process with a virtual clock.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{
    AccessKind, Addr, Command, CommandError, ElementCodec, ElementFormat, Engine, JournalMap,
    KeyDirectory, Limits, Observed, Outcome, Record, RecordLayout, SchemeError, SetCondition,
    Simulator,
};
use cloak_crypto::{KeyHasher, MasterKey, Sealer};
use cloak_schemes::waffle::{self, LabelKey, Observation, Params};
use cloak_schemes::{
    BatchTiming, BuildError, SchemeName, SchemeOptions, Start, StoreSpec, WaffleOptions, build,
};
use cloak_testkit::suite::Restart;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DELTA: Duration = Duration::from_millis(5);
const RTT: Duration = Duration::from_millis(1);
const MAX_KEY: usize = 16;
const MAX_VALUE: usize = 32;

fn master() -> MasterKey {
    MasterKey::from_bytes([4; 32])
}

fn layout() -> RecordLayout {
    RecordLayout {
        max_key: MAX_KEY,
        max_value: MAX_VALUE,
    }
}

fn limits() -> Limits {
    Limits {
        max_key: MAX_KEY,
        max_value: MAX_VALUE,
        max_keys_per_command: 64,
    }
}

fn options(waffle: WaffleOptions) -> SchemeOptions {
    SchemeOptions {
        waffle,
        ..SchemeOptions::default()
    }
}

/// The defaults, with a batch every `DELTA`.
fn defaults() -> WaffleOptions {
    WaffleOptions {
        batch_interval: DELTA,
        ..WaffleOptions::default()
    }
}

fn spec(capacity: u64, seed: u64) -> StoreSpec {
    StoreSpec {
        capacity,
        layout: layout(),
        seed: Some(seed),
    }
}

/// A recording simulator of a fresh store, past its initial fill.
fn simulator(waffle: WaffleOptions, capacity: u64, seed: u64) -> Simulator {
    let scheme = build(
        SchemeName::Waffle,
        &spec(capacity, seed),
        &options(waffle),
        &master(),
        Start::default(),
    )
    .unwrap();
    let directory = KeyDirectory::new(KeyHasher::new(&master()), capacity as usize);
    let mut sim = Simulator::new(Engine::new(scheme, directory, limits())).with_storage_delay(RTT);
    sim.record();
    sim.run_for(Duration::from_millis(50));
    sim
}

fn params(waffle: &WaffleOptions, capacity: u64) -> Params {
    Params::resolve(capacity, waffle).unwrap()
}

fn key(k: usize) -> Bytes {
    Bytes::from(format!("k{k}"))
}

fn set(k: usize, value: &str) -> Command {
    Command::Set {
        key: key(k),
        value: Bytes::from(value.to_string()),
        condition: SetCondition::Always,
    }
}

fn get(k: usize) -> Command {
    Command::Get(key(k))
}

/// Which key each request names.
#[derive(Clone, Copy, Debug)]
enum Skew {
    Uniform,
    /// Zipf with exponent 0.99 (YCSB's constant), as in the paper's §8.3.
    Zipf,
}

/// Sets every key, then sends `requests`, half reads and half writes, `per_interval` of them
/// every batch interval (open loop, so the workload really spans the batches), checking every
/// answer against a model; then idles for a while.
fn run_workload(
    sim: &mut Simulator,
    keys: usize,
    requests: usize,
    per_interval: usize,
    skew: Skew,
    seed: u64,
) {
    let mut model: HashMap<usize, String> = HashMap::new();
    for k in 0..keys {
        let value = format!("init{k}");
        assert_eq!(sim.execute(0, set(k, &value)), Some(Outcome::Ok));
        model.insert(k, value);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let weights: Vec<f64> = (1..=keys).map(|r| 1.0 / (r as f64).powf(0.99)).collect();
    let total: f64 = weights.iter().sum();
    let pick = |rng: &mut ChaCha8Rng| match skew {
        Skew::Uniform => rng.random_range(0..keys),
        Skew::Zipf => {
            let mut x = rng.random::<f64>() * total;
            weights
                .iter()
                .position(|w| {
                    x -= w;
                    x <= 0.0
                })
                .unwrap_or(keys - 1)
        }
    };
    // Key k belongs to client k mod 8: each key's ops reach the proxy, and take effect, in the
    // order sent, so a read must see the model's value when it was sent.
    let mut expected: HashMap<u64, (usize, Outcome)> = HashMap::new();
    let check = |sim: &mut Simulator, expected: &mut HashMap<u64, (usize, Outcome)>| {
        for (token, _, outcome) in sim.drain_outcomes() {
            let (k, want) = expected.remove(&token).unwrap();
            assert_eq!(outcome, want, "k{k}");
        }
    };
    for sent in 0..requests {
        let k = pick(&mut rng);
        let (command, want) = if rng.random_bool(0.5) {
            let value = format!("v{sent}");
            model.insert(k, value.clone());
            (set(k, &value), Outcome::Ok)
        } else {
            let value = Bytes::from(model[&k].clone());
            (get(k), Outcome::Value(Some(value)))
        };
        let token = sim.submit((k % 8) as u64, command);
        expected.insert(token, (k, want));
        if sent % per_interval == per_interval - 1 {
            sim.run_for(DELTA);
            check(sim, &mut expected);
        }
    }
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        expected.keys().all(|t| s.has_outcome(*t))
    }));
    check(sim, &mut expected);
    sim.run_for(Duration::from_millis(200));
}

/// Every check the paper's security argument rests on, on one recorded view.
fn check_view(trace: &[Observed], p: &Params, what: &str) -> Observation {
    let o = waffle::observe(trace, Some(&LabelKey::new(&master())));
    let fill = o.batches[0];
    assert_eq!(
        fill.writes as u64,
        p.objects - p.cache as u64 + p.dummies as u64,
        "{what}: the fill writes every object storage holds"
    );
    let rounds = o.rounds();
    assert!(
        rounds.len() as u64 > 4 * p.alpha(),
        "{what}: only {} batches",
        rounds.len()
    );
    // The last batch may still be in flight when the trace ends.
    for (i, shape) in rounds[..rounds.len() - 1].iter().enumerate() {
        assert_eq!(
            (shape.reads, shape.writes, shape.deletes),
            (p.batch, p.batch, p.batch),
            "{what}: batch {} reads, writes and deletes B = {} labels",
            i + 1,
            p.batch
        );
        // The write-back: B − f_D evicted real objects and the f_D dummies read, rewritten.
        assert_eq!(
            (shape.dummy_reads, shape.dummy_writes),
            (p.fake_dummy, p.fake_dummy),
            "{what}: batch {} reads and rewrites f_D dummies",
            i + 1
        );
    }
    assert_eq!(o.duplicate_reads, 0, "{what}: a label twice in one batch");
    assert_eq!(o.reread_labels, 0, "{what}: a label read twice");
    assert_eq!(o.rewritten_labels, 0, "{what}: a label written twice");
    assert_eq!(
        o.unknown_reads, 0,
        "{what}: a read of a label never written"
    );
    assert_eq!(o.deleted_unread, 0, "{what}: a delete of a label not read");
    let (alpha, beta) = (p.alpha(), p.beta() as i64);
    let max_alpha = o.max_alpha.unwrap();
    assert!(
        max_alpha <= alpha,
        "{what}: observed α {max_alpha} > theoretical {alpha}"
    );
    assert!(
        o.longest_unread.unwrap() <= alpha,
        "{what}: a label has waited longer than α"
    );
    let min_beta = o.min_beta.unwrap();
    assert!(
        min_beta >= beta,
        "{what}: observed β {min_beta} < theoretical {beta}"
    );
    eprintln!(
        "{what}: N={} B={} R={} f_D={} C={} D={}: {} batches; α theoretical {alpha}, observed \
         max {max_alpha}; β theoretical {beta}, observed min {min_beta} ({} samples)",
        p.objects,
        p.batch,
        p.real,
        p.fake_dummy,
        p.cache,
        p.dummies,
        rounds.len(),
        o.beta_samples
    );
    o
}

/// A configuration where β is far from 0: C is half the store.
fn wide_cache() -> WaffleOptions {
    WaffleOptions {
        batch: Some(40),
        real: Some(10),
        fake_dummy: Some(8),
        cache: Some(500),
        ..defaults()
    }
}

#[test]
fn every_batch_has_algorithm_1s_shape_and_alpha_beta_hold() {
    for (name, waffle, capacity, keys) in [
        ("scaled defaults", defaults(), 300, 300),
        ("wide cache", wide_cache(), 1000, 600),
    ] {
        let p = params(&waffle, capacity);
        for skew in [Skew::Zipf, Skew::Uniform] {
            let mut sim = simulator(waffle.clone(), capacity, 3);
            run_workload(&mut sim, keys, 8000, 20, skew, 5);
            check_view(sim.observed(), &p, &format!("{name}, {skew:?}"));
        }
    }
}

/// All requests on one key: the most skewed workload there is.
#[test]
fn alpha_and_beta_hold_when_every_request_is_for_one_key() {
    let waffle = wide_cache();
    let p = params(&waffle, 1000);
    let mut sim = simulator(waffle, 1000, 9);
    for i in 0..2000u64 {
        let command = if i % 3 == 0 {
            set(0, &format!("v{i}"))
        } else {
            get(0)
        };
        sim.submit(i % 4, command);
        if i % 5 == 4 {
            sim.run_for(DELTA);
        }
    }
    sim.run_for(Duration::from_millis(500));
    for (_, _, outcome) in sim.drain_outcomes() {
        assert!(matches!(outcome, Outcome::Ok | Outcome::Value(Some(_))));
    }
    check_view(sim.observed(), &p, "one hot key");
}

/// The α histograms of a skewed and a uniform workload are close (paper Figure 4): the server
/// cannot tell them apart by how long labels wait.
#[test]
fn alpha_histograms_barely_depend_on_the_workload() {
    let p = params(&defaults(), 300);
    let mut histograms = Vec::new();
    for skew in [Skew::Zipf, Skew::Uniform] {
        let mut sim = simulator(defaults(), 300, 11);
        run_workload(&mut sim, 300, 8000, 20, skew, 13);
        histograms.push(check_view(sim.observed(), &p, &format!("{skew:?}")).alphas);
    }
    let total: u64 = histograms[0].values().sum();
    let differ: u64 = (0..=p.alpha())
        .map(|a| {
            let x = histograms[0].get(&a).copied().unwrap_or(0);
            let y = histograms[1].get(&a).copied().unwrap_or(0);
            x.abs_diff(y)
        })
        .sum();
    eprintln!("α histograms: {histograms:?}; {differ} of {total} labels differ");
    assert!(
        (differ as f64) < 0.25 * total as f64,
        "the α histograms differ in {differ} of {total} labels"
    );
}

fn read_times(trace: &[Observed]) -> Vec<Duration> {
    trace
        .iter()
        .filter(|o| o.kind == AccessKind::Read)
        .map(|o| o.at)
        .collect()
}

#[test]
fn fixed_timing_sends_one_batch_every_interval_whatever_the_load() {
    let idle = {
        let mut sim = simulator(defaults(), 300, 21);
        sim.run_for(Duration::from_secs(1));
        read_times(sim.observed())
    };
    let busy = {
        let mut sim = simulator(defaults(), 300, 21);
        for round in 0..40 {
            for k in 0..60 {
                sim.submit(k as u64 % 8, set(k, &format!("{round}")));
                sim.submit(k as u64 % 8, get((k * 7 + round) % 300));
            }
            sim.run_for(Duration::from_millis(25));
        }
        read_times(sim.observed())
    };
    let n = idle.len().min(busy.len());
    assert!(n > 150, "{n} batches");
    assert_eq!(idle[..n], busy[..n], "the schedule depends on the load");
    for pair in idle[..n].windows(2) {
        assert_eq!(pair[1] - pair[0], DELTA);
    }
}

/// Every request's kind and time, as the server sees them.
fn kinds_and_times(observed: &[Observed]) -> Vec<(AccessKind, Duration)> {
    observed.iter().map(|o| (o.kind, o.at)).collect()
}

/// Each batch deletes the labels it read once the journal holds what the cache must keep. A
/// batch with nothing to keep (an idle store's batches read only empty objects) waits for a
/// journal commit all the same: otherwise how soon the deletes follow the write would tell the
/// server whether the batch read anything real.
#[test]
fn deletes_follow_writes_at_the_same_delay_whatever_the_load() {
    const JOURNAL: Duration = Duration::from_millis(2);
    let run = |busy: bool| {
        let mut sim = simulator(defaults(), 300, 23).with_journal_delay(JOURNAL);
        for round in 0..20 {
            if busy {
                for k in 0..20 {
                    sim.submit(k as u64 % 4, set(k, &format!("{round}")));
                    sim.submit(k as u64 % 4, get((k * 7 + round) % 20));
                }
            }
            sim.run_for(DELTA);
        }
        kinds_and_times(sim.observed())
    };
    let (idle, busy) = (run(false), run(true));
    let n = idle.len().min(busy.len());
    assert!(n > 40, "{n} requests");
    assert_eq!(
        idle[..n],
        busy[..n],
        "the server's view depends on the load"
    );
    assert!(
        idle.iter().any(|(kind, _)| *kind == AccessKind::Delete),
        "no deletes seen"
    );
}

/// With fixed timing every write-back leaves half an interval after its batch's read, idle or
/// busy: the time the server sees between the two says nothing about the load. (Fails when the
/// write-back leaves as soon as it is sealed: the offset is then the storage round trip.)
#[test]
fn fixed_timing_holds_each_write_back_to_its_place_on_the_schedule() {
    let mut sim = simulator(defaults(), 300, 23);
    sim.take_trace();
    sim.run_for(10 * DELTA);
    for round in 0..20 {
        for k in 0..60 {
            sim.submit(k as u64 % 8, set(k, &format!("{round}")));
            sim.submit(k as u64 % 8, get((k * 7 + round) % 300));
        }
        sim.run_for(Duration::from_millis(25));
    }
    let times = |kind| -> Vec<Duration> {
        let trace = sim.observed().iter();
        trace.filter(|o| o.kind == kind).map(|o| o.at).collect()
    };
    let (reads, writes) = (times(AccessKind::Read), times(AccessKind::Write));
    assert!(reads.len() > 100, "{} batches", reads.len());
    for (k, (read, write)) in reads.iter().zip(&writes).enumerate() {
        assert_eq!(
            *read,
            reads[0] + DELTA * k as u32,
            "batch {k} left the grid"
        );
        assert_eq!(*write - *read, DELTA / 2, "batch {k}'s write-back");
    }
    let stats = sim.engine().scheme_stats();
    assert!(stats.real_accesses > 0);
    assert_eq!((stats.missed_batches, stats.late_write_backs), (0, 0));
}

/// Time for a burst of GETs of every key, once every key is in the store.
fn burst(timing: BatchTiming) -> Duration {
    let waffle = WaffleOptions {
        timing,
        batch_interval: Duration::from_millis(200),
        ..WaffleOptions::default()
    };
    let mut sim = simulator(waffle, 300, 22);
    for k in 0..300 {
        sim.execute(0, set(k, "x"));
    }
    sim.run_for(Duration::from_secs(5));
    let started = sim.elapsed();
    let tokens: Vec<u64> = (0..300).map(|k| sim.submit(k as u64, get(k))).collect();
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        tokens.iter().all(|t| s.has_outcome(*t))
    }));
    sim.elapsed() - started
}

#[test]
fn eager_timing_sends_a_batch_as_soon_as_r_requests_wait() {
    // 300 queued slots need 10 batches of R = 30: back to back when eager, one every 200 ms
    // when fixed.
    let eager = burst(BatchTiming::Eager);
    let fixed = burst(BatchTiming::Fixed);
    assert!(eager < Duration::from_millis(100), "eager: {eager:?}");
    assert!(fixed > Duration::from_millis(1000), "fixed: {fixed:?}");
}

/// Opens every element in storage; the key, label and record of each real one.
fn elements(sim: &Simulator) -> Vec<(Addr, Record)> {
    let codec = ElementCodec::new(layout(), Sealer::new(&master()).unwrap());
    let store = sim.store();
    store
        .addresses()
        .into_iter()
        .filter_map(|addr| {
            let (_, records) = codec.open_found(addr, &store.element(addr)?).ok()?;
            records.into_iter().next().map(|(_, r)| (addr, r))
        })
        .collect()
}

/// Where storage keeps key `k`, if it keeps it (not cached).
fn stored(sim: &Simulator, k: usize) -> Option<(Addr, Record)> {
    elements(sim).into_iter().find(|(_, r)| r.key == key(k))
}

/// Writes keys until one of them is in storage (not in the proxy's cache).
fn key_in_storage(sim: &mut Simulator, from: usize) -> (usize, Addr, Record) {
    for k in from..from + 200 {
        sim.execute(0, set(k, &format!("value{k}")));
    }
    sim.run_for(Duration::from_millis(300));
    (from..from + 200)
        .find_map(|k| stored(sim, k).map(|(addr, r)| (k, addr, r)))
        .expect("some key was evicted to storage")
}

fn integrity_error(outcome: Option<Outcome>) -> bool {
    matches!(
        outcome,
        Some(Outcome::Error(CommandError::Scheme(
            SchemeError::Integrity(_)
        )))
    )
}

#[test]
fn a_corrupted_swapped_replayed_or_missing_element_is_detected() {
    // Corrupted.
    let mut sim = simulator(defaults(), 300, 31);
    let (k, addr, _) = key_in_storage(&mut sim, 0);
    let mut bytes = sim.store().element(addr).unwrap().to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    sim.store_mut().replace(addr, &bytes);
    assert!(integrity_error(sim.execute(1, get(k))), "corrupted");
    sim.execute(1, set(k, "fresh"));
    assert_eq!(
        sim.execute(1, get(k)),
        Some(Outcome::Value(Some("fresh".into()))),
        "a write repairs the key"
    );
    assert!(sim.engine().scheme_stats().integrity_failures >= 1);

    // Swapped: each element under the other's label.
    let mut sim = simulator(defaults(), 300, 32);
    key_in_storage(&mut sim, 0);
    let found = elements(&sim);
    let mut keyed = found.iter().filter(|(_, r)| !r.key.is_empty());
    let ((addr_a, a), (addr_b, b)) = (keyed.next().unwrap(), keyed.next().unwrap());
    let (ea, eb) = (
        sim.store().element(*addr_a).unwrap(),
        sim.store().element(*addr_b).unwrap(),
    );
    sim.store_mut().replace(*addr_a, &eb);
    sim.store_mut().replace(*addr_b, &ea);
    for record in [a, b] {
        let got = sim.execute(1, Command::Get(record.key.clone()));
        assert!(integrity_error(got), "swapped");
    }

    // Replayed: a key's old element put back where its newer one is.
    let mut sim = simulator(defaults(), 300, 33);
    let (k, _, old) = key_in_storage(&mut sim, 0);
    let old_element = sim.store().element(stored(&sim, k).unwrap().0).unwrap();
    sim.execute(1, set(k, "newer"));
    let newer = (0..400)
        .find_map(|_| {
            sim.run_for(DELTA);
            stored(&sim, k).filter(|(_, r)| r.version > old.version)
        })
        .expect("the newer version reaches storage");
    sim.store_mut().replace(newer.0, &old_element);
    assert!(integrity_error(sim.execute(1, get(k))), "replayed");

    // Missing: the server drops an element.
    let mut sim = simulator(defaults(), 300, 34);
    let (k, addr, _) = key_in_storage(&mut sim, 0);
    sim.store_mut()
        .apply(cloak_core::StorageOp::Delete(vec![addr]));
    assert!(integrity_error(sim.execute(1, get(k))), "missing");
}

/// Recovers what a crashed simulator left, the way the proxy does.
fn recover(
    crashed: (cloak_core::MemoryStore, JournalMap),
    waffle: &WaffleOptions,
    capacity: u64,
) -> (Simulator, cloak_core::Recovered) {
    let format =
        || ElementFormat::Sealed(ElementCodec::new(layout(), Sealer::new(&master()).unwrap()));
    let build = |records, generation_base| {
        let start = Start {
            records,
            generation_base,
            fill_clock: None,
        };
        build(
            SchemeName::Waffle,
            &spec(capacity, 41),
            &options(waffle.clone()),
            &master(),
            start,
        )
        .unwrap()
    };
    let restart = Restart {
        format: &format,
        hasher: KeyHasher::new(&master()),
        capacity: capacity as usize,
        limits: limits(),
        build: &build,
        journal_delay: Duration::ZERO,
        storage_delay: RTT,
    };
    restart.recover(crashed, 1)
}

/// Keys `k0..k{keys}` hold `v0..` (as the restart tests write them).
fn reads_back(sim: &mut Simulator, keys: usize) {
    for k in 0..keys {
        let want = Some(Outcome::Value(Some(Bytes::from(format!("v{k}")))));
        assert_eq!(sim.execute(0, get(k)), want, "k{k}");
    }
}

/// After a crash, the new run deletes everything the old one left once its own copy is safe:
/// storage holds exactly `N − C + D` elements again, and every key reads back.
#[test]
fn a_restart_leaves_no_element_of_the_earlier_run() {
    let waffle = defaults();
    let p = params(&waffle, 300);
    let mut sim = simulator(waffle.clone(), 300, 41);
    for k in 0..200 {
        sim.execute(0, set(k, &format!("v{k}")));
    }
    sim.run_for(Duration::from_millis(100));
    let (mut sim, recovered) = recover(sim.crash(), &waffle, 300);
    assert_eq!(recovered.keys().count(), 200);
    sim.run_for(Duration::from_millis(200));
    assert_eq!(
        sim.store().len(),
        (p.objects - p.cache as u64) as usize + p.dummies,
        "storage holds one run's elements"
    );
    reads_back(&mut sim, 200);
}

/// After a restart, reads are answered before Waffle's fill is done, from the recovered records
/// (recovery's spool on local disk, or the cache): those sent during Waffle's own scan as the
/// fill starts. Storage is sent the scan and the fill and no read for them, each value is the
/// recovered one, and none of them waits in the queue for a batch (a queue full of them would
/// stop the scheme taking ops until the fill's end).
#[test]
fn reads_during_the_scan_and_fill_are_answered_from_the_recovered_records() {
    let waffle = defaults();
    let mut sim = simulator(waffle.clone(), 300, 43);
    for k in 0..200 {
        sim.execute(0, set(k, &format!("v{k}")));
    }
    sim.run_for(Duration::from_millis(100));
    let (mut sim, _) = recover(sim.crash(), &waffle, 300);
    sim.record();
    let reads: Vec<u64> = (0..200).map(|k| sim.submit(k as u64, get(k))).collect();
    // Storage answers in RTT: the scan is answered, the fill's requests are out.
    sim.run_for(RTT + RTT / 2);
    let stats = sim.engine().scheme_stats();
    assert!(stats.filling.is_some(), "the fill is still out");
    assert!(stats.recovered_reads > 100, "{stats:?}");
    assert_eq!(stats.recovered_reads + stats.cache_hits, 200, "{stats:?}");
    assert_eq!(stats.queued, 0, "{stats:?}");
    for (k, read) in reads.into_iter().enumerate() {
        let want = Some(Outcome::Value(Some(Bytes::from(format!("v{k}")))));
        assert_eq!(sim.outcome(read), want, "k{k}");
    }
    sim.run_for(Duration::from_millis(200));
    let view = sim.take_trace();
    let before_batches: Vec<AccessKind> = view
        .iter()
        .take_while(|observed| observed.kind != AccessKind::Read)
        .map(|observed| observed.kind)
        .collect();
    assert!(
        before_batches
            .iter()
            .all(|kind| [AccessKind::Scan, AccessKind::Write].contains(kind)),
        "only the scan and the fill before the first batch: {before_batches:?}"
    );
    reads_back(&mut sim, 200);
}

/// Shutdown writes the cache back: with no journal at all, storage alone holds every key.
#[test]
fn draining_writes_the_cache_to_storage() {
    let waffle = defaults();
    let mut sim = simulator(waffle.clone(), 300, 51);
    for k in 0..250 {
        sim.execute(0, set(k, &format!("v{k}")));
    }
    sim.run_for(Duration::from_millis(30));
    assert!(sim.engine().scheme_stats().unwritten > 0);
    sim.drain();
    assert!(
        sim.run_until(Duration::from_secs(5), |s| s
            .engine()
            .scheme_stats()
            .unwritten
            == 0),
        "the cache never reached storage"
    );
    let batches = read_times(sim.observed()).len();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(
        read_times(sim.observed()).len(),
        batches,
        "no batch after the drain"
    );
    assert!(matches!(
        sim.execute(0, get(1)),
        Some(Outcome::Error(CommandError::Scheme(
            SchemeError::Overloaded(_)
        )))
    ));
    let (store, _journal) = sim.crash();
    let (mut sim, recovered) = recover((store, JournalMap::default()), &waffle, 300);
    assert_eq!(recovered.keys().count(), 250);
    reads_back(&mut sim, 250);
}

#[test]
fn impossible_parameters_are_refused_when_building() {
    let refuse = |capacity: u64, waffle: WaffleOptions| -> String {
        match build(
            SchemeName::Waffle,
            &spec(capacity, 1),
            &options(waffle),
            &master(),
            Start::default(),
        ) {
            Err(error @ BuildError::Waffle(_)) => error.to_string(),
            Err(other) => panic!("wrong error: {other}"),
            Ok(_) => panic!("built"),
        }
    };
    let error = refuse(
        100_000,
        WaffleOptions {
            real: Some(2000),
            ..WaffleOptions::default()
        },
    );
    assert!(error.contains("--waffle-real (R = 2000)"), "{error}");
    let error = refuse(
        300,
        WaffleOptions {
            batch: Some(2500),
            ..WaffleOptions::default()
        },
    );
    assert!(error.contains("raise --capacity"), "{error}");
    let error = refuse(4, WaffleOptions::default());
    assert!(error.contains("capacity 4 is too small"), "{error}");
    // `cloak up`'s default store builds.
    assert!(
        build(
            SchemeName::Waffle,
            &spec(100_000, 1),
            &SchemeOptions::default(),
            &master(),
            Start::default()
        )
        .is_ok()
    );
}

/// Reads of one key that misses the cache, from four clients at once: one fetch serves them
/// all, and the counters say so (four misses, three of them joined to the first).
#[test]
fn reads_of_one_uncached_key_join_one_fetch_and_are_counted_as_joined() {
    let mut sim = simulator(defaults(), 300, 21);
    for k in 0..200 {
        assert_eq!(sim.execute(1, set(k, "v")), Some(Outcome::Ok));
    }
    sim.run_for(50 * DELTA);
    for k in 0..200 {
        let before = sim.engine().scheme_stats();
        let tokens: Vec<u64> = (2..6).map(|c| sim.submit(c, get(k))).collect();
        assert!(sim.run_until(20 * DELTA, |s| tokens.iter().all(|&t| s.has_outcome(t))));
        for t in tokens {
            assert_eq!(sim.outcome(t), Some(Outcome::Value(Some(Bytes::from("v")))));
        }
        let after = sim.engine().scheme_stats();
        let joined = after.joined_reads - before.joined_reads;
        if after.cache_misses - before.cache_misses == 4 {
            assert_eq!(joined, 3, "key {k}");
            return;
        }
        assert_eq!(joined, 0, "key {k}: hits join nothing");
    }
    panic!("no key missed the cache");
}
