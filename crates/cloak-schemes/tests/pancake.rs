//! Pancake against what the paper promises, measured on the server's view.
//!
//! - Requests drawn independently from `π̂`: every label is equally likely (§4.3, Theorem 1).
//!   Checked with Pearson's chi-square test of the label frequencies the server saw against the
//!   uniform distribution over the `2n` labels. Under that hypothesis each access is an
//!   independent uniform draw, so the statistic follows chi-square with `2n − 1` degrees of
//!   freedom; the test fails below p = 0.001 (a uniform server view fails one seed in a
//!   thousand; the runs are seeded, so each result is reproducible).
//! - Requests drawn from another distribution: the same statistic shows the leak (the weakness
//!   Cloak's paper points to), and after the KS test notices and replicas are swapped (§5), the
//!   view is uniform again.
//! - Every client request is exactly one batch of `B = 3` reads, each written back.
//! - A write acknowledged while replicas are stale survives a crash; tampering is detected.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use cloak_core::{
    AccessKind, Addr, Command, CommandError, ElementCodec, ElementFormat, Engine, KeyDirectory,
    Limits, Outcome, RecordLayout, SchemeError, SetCondition, Simulator,
};
use cloak_crypto::{KeyHasher, MasterKey, Sealer};
use cloak_schemes::pancake::{DistributionFormat, estimate_for_keys, parse_distribution};
use cloak_schemes::{PancakeOptions, SchemeName, SchemeOptions, Start, StoreSpec, build};
use cloak_testkit::suite::Restart;
use rand::SeedableRng;
use rand::distr::Distribution;
use rand_chacha::ChaCha8Rng;
use rand_distr::weighted::WeightedIndex;

const MAX_KEY: usize = 16;
const MAX_VALUE: usize = 32;
/// The p-value below which a server view is declared not uniform.
const SIGNIFICANCE: f64 = 0.001;

fn master() -> MasterKey {
    MasterKey::from_bytes([3; 32])
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

fn key(i: usize) -> Bytes {
    Bytes::from(format!("key{i}"))
}

fn set(key: Bytes, value: &str) -> Command {
    Command::Set {
        key,
        value: Bytes::from(value.to_string()),
        condition: SetCondition::Always,
    }
}

/// Zipf weights `1/(i+1)^s` for `n` keys.
fn zipf(n: usize, s: f64) -> Vec<f64> {
    (0..n).map(|i| 1.0 / ((i + 1) as f64).powf(s)).collect()
}

/// The text of a key-weight file.
fn weight_file(weights: &[f64]) -> String {
    weights
        .iter()
        .enumerate()
        .map(|(i, w)| format!("key{i} {w}\n"))
        .collect()
}

struct Setup {
    capacity: u64,
    options: PancakeOptions,
    /// A distribution file's text, read the way the binary reads `--pancake-distribution`.
    distribution: Option<String>,
    seed: u64,
}

impl Setup {
    fn new(capacity: u64, seed: u64) -> Self {
        Self {
            capacity,
            options: PancakeOptions::default(),
            distribution: None,
            seed,
        }
    }

    fn options(&self, directory: &mut KeyDirectory) -> SchemeOptions {
        let mut pancake = self.options.clone();
        if let Some(text) = &self.distribution {
            let weights = parse_distribution(text.as_bytes(), DistributionFormat::Auto).unwrap();
            let (estimate, left_out) = estimate_for_keys(directory, &weights, MAX_KEY).unwrap();
            assert_eq!(left_out, 0);
            pancake.estimate = Some(estimate);
        }
        SchemeOptions {
            pancake,
            ..SchemeOptions::default()
        }
    }

    fn spec(&self) -> StoreSpec {
        StoreSpec {
            capacity: self.capacity,
            layout: layout(),
            seed: Some(self.seed),
        }
    }

    fn simulator(&self) -> Simulator {
        let mut directory = KeyDirectory::new(KeyHasher::new(&master()), self.capacity as usize);
        let options = self.options(&mut directory);
        let scheme = build(
            SchemeName::Pancake,
            &self.spec(),
            &options,
            &master(),
            Start::default(),
        )
        .unwrap();
        Simulator::new(Engine::new(scheme, directory, limits()))
            .with_storage_delay(Duration::from_micros(300))
    }
}

/// Writes `key0..key{n-1}` and lets the UpdateCache drain.
fn preload(sim: &mut Simulator, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(16) {
        let pairs = chunk.iter().map(|&i| (key(i), Bytes::from("v0"))).collect();
        assert_eq!(sim.execute(0, Command::MSet(pairs)), Some(Outcome::Ok));
    }
    sim.run_for(Duration::from_secs(2));
}

fn info(sim: &Simulator, field: &str) -> String {
    sim.engine()
        .scheme()
        .describe()
        .into_iter()
        .find(|(name, _)| *name == field)
        .unwrap_or_else(|| panic!("INFO has no {field}"))
        .1
}

/// Sends `count` GETs of keys drawn from `weights`, a few in flight at once, as independent
/// clients; returns when all are answered.
fn request(sim: &mut Simulator, weights: &[f64], count: usize, rng: &mut ChaCha8Rng) {
    let draw = WeightedIndex::new(weights).unwrap();
    let mut waiting = 0;
    for i in 0..count {
        sim.submit(i as u64, Command::Get(key(draw.sample(rng))));
        waiting += 1;
        sim.run_for(Duration::from_micros(200));
        waiting -= sim.drain_outcomes().len();
    }
    while waiting > 0 {
        assert!(sim.run_until(Duration::from_secs(60), Simulator::has_outcomes));
        waiting -= sim.drain_outcomes().len();
    }
}

/// Pearson's chi-square of the labels the server saw read, against uniform over `labels`.
struct ChiSquare {
    statistic: f64,
    freedom: f64,
    p_value: f64,
    accesses: u64,
}

fn label_uniformity(sim: &mut Simulator, labels: usize) -> ChiSquare {
    let mut counts: HashMap<Addr, u64> = HashMap::new();
    for observed in sim.take_trace() {
        if observed.kind == AccessKind::Read {
            for addr in observed.addrs {
                *counts.entry(addr).or_default() += 1;
            }
        }
    }
    assert!(counts.len() <= labels, "more labels than the store has");
    let accesses: u64 = counts.values().sum();
    let expected = accesses as f64 / labels as f64;
    // Labels never read count as zeros.
    let unseen = (labels - counts.len()) as f64 * expected;
    let statistic = counts
        .values()
        .map(|&o| (o as f64 - expected).powi(2) / expected)
        .sum::<f64>()
        + unseen;
    let freedom = (labels - 1) as f64;
    ChiSquare {
        statistic,
        freedom,
        p_value: upper_regularized_gamma(freedom / 2.0, statistic / 2.0),
        accesses,
    }
}

/// `Q(a, x) = Γ(a, x) / Γ(a)`, the chi-square survival function at `2x` with `2a` degrees of
/// freedom (series below `a + 1`, continued fraction above; Numerical Recipes §6.2).
fn upper_regularized_gamma(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let log_prefix = -x + a * x.ln() - ln_gamma(a);
    if x < a + 1.0 {
        let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * log_prefix.exp()
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        log_prefix.exp() * h
    }
}

/// Lanczos approximation of `ln Γ(x)` for `x > 0`.
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 6] = [
        76.180_091_729_471_46,
        -86.505_320_329_416_77,
        24.014_098_240_830_91,
        -1.231_739_572_450_155,
        0.120_865_097_386_617_9e-2,
        -0.539_523_938_495_3e-5,
    ];
    let mut y = x;
    let tmp = x + 5.5;
    let tmp = tmp - (x + 0.5) * tmp.ln();
    let mut series = 1.000_000_000_190_015;
    for g in G {
        y += 1.0;
        series += g / y;
    }
    -tmp + (2.506_628_274_631_000_5 * series / x).ln()
}

#[test]
fn the_chi_square_helper_matches_known_values() {
    // Critical values from tables: P(χ²₁ > 3.841) = 0.05, P(χ²₁₀ > 18.307) = 0.05,
    // P(χ²₆₃ > 100.75) ≈ 0.0017, P(χ²₁₀₀ > 124.342) = 0.05.
    for (statistic, freedom, p) in [
        (3.841, 1.0, 0.05),
        (18.307, 10.0, 0.05),
        (124.342, 100.0, 0.05),
        (0.0, 5.0, 1.0),
    ] {
        let got = upper_regularized_gamma(freedom / 2.0, statistic / 2.0);
        assert!(
            (got - p).abs() < 2e-4,
            "χ²={statistic}, df={freedom}: {got}"
        );
    }
}

fn report(label: &str, c: &ChiSquare) {
    println!(
        "{label}: chi-square {:.1} with {} degrees of freedom over {} accesses, p = {:.3e}",
        c.statistic, c.freedom, c.accesses, c.p_value
    );
}

/// 4,000 requests drawn from a Zipf 1.0 `π̂` over 32 keys (given as a weight file): the chi-square
/// of the labels the server read.
fn matching_run(seed: u64) -> ChiSquare {
    let n = 32;
    let weights = zipf(n, 1.0);
    let mut setup = Setup::new(n as u64, seed);
    setup.distribution = Some(weight_file(&weights));
    setup.options.adapt = false;
    let mut sim = setup.simulator();
    preload(&mut sim, n);
    // The hottest key has ceil(π̂·n) = 8 replicas; 64 labels in all.
    assert_eq!(info(&sim, "labels"), "64");
    sim.record();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    request(&mut sim, &weights, 4000, &mut rng);
    label_uniformity(&mut sim, 2 * n)
}

#[test]
fn labels_are_uniform_when_requests_follow_the_estimate() {
    let c = matching_run(11);
    report("π = π̂ (Zipf 1.0, 32 keys)", &c);
    assert!(
        c.p_value > SIGNIFICANCE,
        "requests following π̂ must look uniform to the server"
    );
}

/// The threshold's justification, measured: under π = π̂ the p-values over many seeds should be
/// spread evenly over (0, 1), so about 1% fall below 0.01. Run with
/// `cargo test --release -p cloak-schemes --test pancake -- --ignored --nocapture`.
#[test]
#[ignore = "40 seeds; run by hand to see the p-value distribution"]
fn uniformity_p_values_over_many_seeds() {
    let mut p_values: Vec<f64> = (0..40).map(|seed| matching_run(seed).p_value).collect();
    p_values.sort_by(f64::total_cmp);
    println!("p-values over 40 seeds: {p_values:.3?}");
    let low = p_values.iter().filter(|&&p| p < 0.01).count();
    assert!(low <= 3, "{low} of 40 seeds below 0.01");
}

#[test]
fn a_wrong_estimate_shows_and_adaptation_repairs_it() {
    let n = 32;
    // π̂ is uniform (no distribution given), the requests are Zipf 1.2.
    let weights = zipf(n, 1.2);
    let mut setup = Setup::new(n as u64, 12);
    setup.options.window = 20_000;
    let mut sim = setup.simulator();
    preload(&mut sim, n);
    let mut rng = ChaCha8Rng::seed_from_u64(2);

    sim.record();
    request(&mut sim, &weights, 3000, &mut rng);
    let before = label_uniformity(&mut sim, 2 * n);
    report("π ≠ π̂ (uniform estimate, Zipf 1.2 requests)", &before);
    assert!(
        before.p_value < 1e-12,
        "a wrong estimate must show in the server's view"
    );
    assert_eq!(info(&sim, "adaptations"), "0");

    // The rest of the window: the KS test rejects π̂ and replicas are swapped.
    let mut sent = 3000;
    while info(&sim, "adaptations") == "0" {
        request(&mut sim, &weights, 500, &mut rng);
        sent += 500;
        assert!(sent <= 3 * 20_000, "the KS test never noticed");
    }
    let mut during = 0;
    while info(&sim, "pending_swaps") != "0" {
        request(&mut sim, &weights, 100, &mut rng);
        during += 100;
        assert!(during < 50_000, "swapping never finished");
    }
    let swapping = label_uniformity(&mut sim, 2 * n);
    println!(
        "adaptation after {sent} requests; swapping took {during} more (swaps done: {})",
        info(&sim, "swaps_done")
    );
    assert_ne!(info(&sim, "swaps_done"), "0");
    report(
        "rest of the detection window and the swapping (mostly still mismatched)",
        &swapping,
    );

    request(&mut sim, &weights, 3000, &mut rng);
    let after = label_uniformity(&mut sim, 2 * n);
    report("after adaptation", &after);
    assert!(
        after.p_value > SIGNIFICANCE,
        "after adapting, the server's view must be uniform again"
    );
}

#[test]
fn every_request_is_one_batch_of_three_reads_written_back() {
    let n = 16;
    let mut setup = Setup::new(n as u64, 13);
    // No scheduled batch during the test: every batch seen is a request's.
    setup.options.idle_batch_interval = Duration::from_secs(3600);
    setup.distribution = Some(weight_file(&zipf(n, 1.0)));
    let mut sim = setup.simulator();
    // Every key exists, so every GET reaches the scheme (a GET of a missing key needs none).
    preload(&mut sim, n);
    sim.record();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let requests = 300;
    for i in 0..requests {
        let k = key(rand::Rng::random_range(&mut rng, 0..n));
        let command = if i % 3 == 0 {
            set(k, &format!("v{i}"))
        } else {
            Command::Get(k)
        };
        sim.submit(i as u64 % 5, command);
        sim.run_for(Duration::from_micros(700));
    }
    sim.run_for(Duration::from_secs(1));
    let trace = sim.take_trace();
    let reads: Vec<_> = trace
        .iter()
        .filter(|o| o.kind == AccessKind::Read)
        .collect();
    let writes: Vec<_> = trace
        .iter()
        .filter(|o| o.kind == AccessKind::Write)
        .collect();
    assert_eq!(reads.len(), requests, "one batch per request");
    assert_eq!(writes.len(), requests, "every batch is written back");
    assert!(trace.iter().all(|o| o.addrs.len() == 3), "B = 3");
    // Each write-back rewrites exactly the labels its batch read, after reading them.
    let mut open: Vec<&Vec<Addr>> = Vec::new();
    for o in &trace {
        match o.kind {
            AccessKind::Read => open.push(&o.addrs),
            AccessKind::Write => {
                let at = open
                    .iter()
                    .position(|read| **read == o.addrs)
                    .expect("a write-back of labels no pending batch read");
                open.remove(at);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(open.is_empty());
    let sizes: Vec<usize> = writes.iter().flat_map(|o| o.value_lens()).collect();
    assert!(sizes.windows(2).all(|w| w[0] == w[1]), "one element size");
}

/// Recovers a crashed Pancake simulation the way the proxy does.
fn restart(setup: &Setup, crashed: Simulator, incarnation: u64) -> Simulator {
    let mut directory = KeyDirectory::new(KeyHasher::new(&master()), setup.capacity as usize);
    let options = setup.options(&mut directory);
    let spec = setup.spec();
    let build = |records, generation_base| {
        let start = Start {
            records,
            generation_base,
            fill_clock: None,
        };
        build(SchemeName::Pancake, &spec, &options, &master(), start).unwrap()
    };
    let format =
        || ElementFormat::Sealed(ElementCodec::new(layout(), Sealer::new(&master()).unwrap()));
    let restart = Restart {
        format: &format,
        hasher: KeyHasher::new(&master()),
        capacity: setup.capacity as usize,
        limits: limits(),
        build: &build,
        journal_delay: Duration::from_millis(1),
        storage_delay: Duration::from_micros(300),
    };
    let (sim, recovered) = restart.recover(crashed.crash(), incarnation);
    assert!(recovered.damage.is_empty());
    sim
}

#[test]
fn a_write_acknowledged_while_replicas_are_stale_survives_a_crash() {
    let n = 16;
    let hot = Bytes::from("hot");
    let mut stale_at_crash = 0;
    for crash_after_ms in [0u64, 1, 3, 10, 30, 100, 300, 1000] {
        let mut setup = Setup::new(n as u64, 14);
        // `hot` has half the probability: ceil(0.5 · 16) = 8 replicas.
        setup.distribution = Some(format!("hot 15\n{}", weight_file(&[1.0; 15])));
        let mut sim = setup.simulator();
        sim = sim.with_journal_delay(Duration::from_millis(1));
        assert_eq!(sim.execute(1, set(hot.clone(), "old")), Some(Outcome::Ok));
        sim.run_for(Duration::from_secs(3));
        assert_eq!(info(&sim, "update_cache"), "0", "every replica holds old");
        assert_eq!(sim.execute(1, set(hot.clone(), "new")), Some(Outcome::Ok));
        sim.run_for(Duration::from_millis(crash_after_ms));
        if info(&sim, "update_cache") != "0" {
            stale_at_crash += 1;
        }
        let mut sim = restart(&setup, sim, 1);
        assert_eq!(
            sim.execute(2, Command::Get(hot.clone())),
            Some(Outcome::Value(Some(Bytes::from("new")))),
            "crash {crash_after_ms} ms after the acknowledgement"
        );
    }
    assert!(
        stale_at_crash >= 3,
        "the crashes must hit while replicas are stale"
    );
}

fn expect_integrity_error(outcome: Option<Outcome>) {
    assert!(
        matches!(
            outcome,
            Some(Outcome::Error(CommandError::Scheme(
                SchemeError::Integrity(_)
            )))
        ),
        "expected an integrity error, got {outcome:?}"
    );
}

#[test]
fn tampering_and_replay_are_detected() {
    let n = 8;
    let setup = Setup::new(n as u64, 15);
    let mut sim = setup.simulator();
    assert_eq!(sim.execute(1, set(key(1), "first")), Some(Outcome::Ok));
    sim.run_for(Duration::from_secs(2));
    assert!(sim.run_until(Duration::from_secs(1), Simulator::storage_idle));
    let snapshot: Vec<(Addr, Bytes)> = sim
        .store_mut()
        .addresses()
        .into_iter()
        .map(|a| (a, sim.store_mut().element(a).unwrap()))
        .collect();
    assert_eq!(snapshot.len(), 2 * n, "exactly 2n labels in storage");

    // Replay: the server answers with an older state of every label.
    assert_eq!(sim.execute(1, set(key(1), "second")), Some(Outcome::Ok));
    sim.run_for(Duration::from_secs(2));
    assert!(sim.run_until(Duration::from_secs(1), Simulator::storage_idle));
    for (addr, old) in &snapshot {
        sim.store_mut().replace(*addr, old);
    }
    expect_integrity_error(sim.execute(2, Command::Get(key(1))));

    // A write repairs the key; then corruption of every element is reported, never returned.
    assert_eq!(sim.execute(1, set(key(1), "third")), Some(Outcome::Ok));
    sim.run_for(Duration::from_secs(2));
    assert_eq!(
        sim.execute(2, Command::Get(key(1))),
        Some(Outcome::Value(Some(Bytes::from("third"))))
    );
    assert!(sim.run_until(Duration::from_secs(1), Simulator::storage_idle));
    for addr in sim.store_mut().addresses() {
        let mut bytes = sim.store_mut().element(addr).unwrap().to_vec();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        sim.store_mut().replace(addr, &bytes);
    }
    expect_integrity_error(sim.execute(2, Command::Get(key(1))));
    assert!(sim.engine().scheme_stats().integrity_failures > 0);
    assert_eq!(sim.execute(1, set(key(1), "fourth")), Some(Outcome::Ok));
    sim.run_for(Duration::from_secs(2));
    assert_eq!(
        sim.execute(2, Command::Get(key(1))),
        Some(Outcome::Value(Some(Bytes::from("fourth"))))
    );
}

#[test]
fn bad_options_are_refused_clearly() {
    let spec = StoreSpec {
        capacity: 10,
        layout: layout(),
        seed: Some(1),
    };
    let try_build = |options: PancakeOptions| {
        let options = SchemeOptions {
            pancake: options,
            ..SchemeOptions::default()
        };
        build(
            SchemeName::Pancake,
            &spec,
            &options,
            &master(),
            Start::default(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    let zero_batch = try_build(PancakeOptions {
        batch_size: 0,
        ..Default::default()
    });
    assert!(zero_batch.contains("batch size"), "{zero_batch}");
    let significance = try_build(PancakeOptions {
        significance: 1.5,
        ..Default::default()
    });
    assert!(significance.contains("significance"), "{significance}");
    let short = try_build(PancakeOptions {
        estimate: Some(cloak_schemes::pancake::Estimate::uniform(4)),
        ..Default::default()
    });
    assert!(
        short.contains("4 weights") && short.contains("10 slots"),
        "{short}"
    );
}
