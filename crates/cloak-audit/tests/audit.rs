//! The auditor against the schemes, at CI sizes: what it must find on each.
//!
//! Larger audits are the same code behind a flag: `cloak audit --requests 200000
//! --capacity 100000`.

use std::time::Duration;

use cloak_audit::{Game, SchemeAudit, Setup, Workloads, audit_scheme};
use cloak_bench::run::Load;
use cloak_schemes::{CloakOptions, SchemeName, SchemeOptions};

/// Small budgets for a small store (b_j = 1 for every set), a short interval.
// `..SchemeOptions::default()` keeps this building as other schemes' options join the struct,
// and `..CloakOptions::default()` fills the leak-demo field.
#[allow(clippy::needless_update)]
fn small() -> SchemeOptions {
    SchemeOptions {
        cloak: CloakOptions {
            first_budget: 1,
            batch_interval: Duration::from_millis(5),
            cache_size: 1,
            ..CloakOptions::default()
        },
        ..SchemeOptions::default()
    }
}

fn audit(
    options: SchemeOptions,
    scheme: SchemeName,
    a: &str,
    b: &str,
    keys: u64,
    requests: u64,
    clients: usize,
) -> SchemeAudit {
    let game = Game {
        a: a.parse().unwrap(),
        b: b.parse().unwrap(),
        requests,
        keys,
        seed: 5,
    };
    let workloads = Workloads::draw(&game).unwrap();
    let setup = Setup {
        scheme,
        options,
        keys,
        value_size: 32,
        storage_delay: Duration::from_millis(1),
        load: Load {
            clients,
            pipeline: 1,
            rate: None,
        },
        seed: 9,
    };
    audit_scheme(&setup, &workloads).unwrap()
}

/// Cloak on one hot key against uniform keys: 200 keys with b_j = 1 make 20 sets, so the run
/// covers many generations of sets.
fn cloak_one_key_vs_uniform(options: SchemeOptions) -> SchemeAudit {
    cloak_one_key_vs_uniform_for(options, 2000)
}

/// [`cloak_one_key_vs_uniform`] over `requests` requests.
fn cloak_one_key_vs_uniform_for(options: SchemeOptions, requests: u64) -> SchemeAudit {
    audit(
        options,
        SchemeName::Cloak,
        "one-key",
        "uniform",
        200,
        requests,
        4,
    )
}

fn finding<'a>(audit: &'a SchemeAudit, name: &str) -> &'a cloak_audit::distinguish::Finding {
    audit.findings.iter().find(|f| f.name == name).unwrap()
}

#[test]
fn frequency_analysis_recovers_zipf_keys_from_encrypted() {
    // YCSB's zipfian over n = 200 keys: rank r has probability r^-0.99 / H with
    // H = Σ r^-0.99 ≈ 5.98 (scrambling ranks onto keys can only merge ranks, adding mass to
    // a key). With 4000 requests the two most popular ranks are ~340 ± 18 and ~670 ± 24 apart
    // from their neighbours, several standard deviations even with the auxiliary sample's own
    // noise, so rank matching names both rightly: a share (1 + 2^-0.99) / H ≈ 0.25 of all
    // requests. One client sends one request at a time, so every request is one access. Chance
    // is about 1/200.
    let h: f64 = (1..=200).map(|r| f64::from(r).powf(-0.99)).sum();
    let top_two = (1.0 + 2f64.powf(-0.99)) / h;
    let audit = audit(
        small(),
        SchemeName::Encrypted,
        "ycsb-c:zipfian",
        "uniform",
        200,
        4000,
        1,
    );
    let attack = &audit.attack("frequency analysis")[0];
    assert!(
        attack.score.accuracy >= top_two - 0.05,
        "accuracy {} below the top two keys' share {top_two}",
        attack.score.accuracy
    );
    assert!(
        attack.score.accuracy > 20.0 * attack.score.yardstick(),
        "the view gives the keys away; a guess without it does not: {attack:?}"
    );
    assert!(attack.score.top_recovered >= 2, "{attack:?}");
    // The uniform workload has no frequencies to exploit.
    let uniform = &audit.attack("frequency analysis")[1];
    assert!(uniform.score.z() < 5.0, "{uniform:?}");
    assert!(audit.distinguishable());
}

#[test]
fn unsafe_views_differ_trivially() {
    let audit = audit(
        small(),
        SchemeName::Unsafe,
        "one-key",
        "uniform",
        200,
        2000,
        4,
    );
    for name in [
        "reuse-distance sets",
        "label frequency",
        "address distribution",
    ] {
        let f = finding(&audit, name);
        assert!(f.differs() && f.advantage >= 0.9, "{f:?}");
        assert!(f.p_value() < 1e-6, "{f:?}");
    }
    assert_eq!(audit.plaintext, [Some(1.0), Some(1.0)], "keys in the clear");
    assert!(!audit.volume.identical);
}

#[test]
fn cloak_per_set_counts_do_not_tell_one_key_from_uniform() {
    let audit = cloak_one_key_vs_uniform(small());
    // 200 keys with b_j = 1: 20 sets, so the run covers many generations of sets.
    assert!(audit.batches[0] > 100, "{:?}", audit.batches);
    let sets = finding(&audit, "reuse-distance sets");
    assert!(sets.identical, "{sets:?}");
    assert_eq!((sets.advantage, sets.p_value()), (0.0, 1.0));
    for name in [
        "request sizes",
        "element sizes",
        "timing",
        "batch intervals",
        "write-back delay",
        "generation lag",
    ] {
        assert!(finding(&audit, name).identical, "{name}");
    }
    // Idle and loaded: the same batches at the same times.
    assert!(!audit.load_distinguishable(), "{:?}", audit.load_findings);
    for f in &audit.load_findings {
        assert!(f.identical, "{f:?}");
    }
    // Everything the server can compute that depends on chance stays within chance.
    assert!(!audit.distinguishable(), "{:?}", audit.findings);
    assert!(audit.volume.identical, "{:?}", audit.volume);
    for attack in &audit.attacks {
        assert!(attack.score.z() < 5.0, "{attack:?}");
    }
    assert_eq!(audit.plaintext, [Some(0.0), Some(0.0)]);
}

#[test]
fn correlated_query_attack_beats_chance_and_frequency_on_encrypted() {
    let audit = audit(
        small(),
        SchemeName::Encrypted,
        "markov",
        "uniform",
        100,
        3000,
        1,
    );
    let correlated = &audit.attack("correlated queries (IHOP)")[0];
    let frequency = &audit.attack("frequency analysis")[0];
    assert!(
        correlated.score.accuracy > 10.0 * correlated.score.chance,
        "{correlated:?}"
    );
    assert!(
        correlated.score.accuracy > frequency.score.accuracy + 0.2,
        "correlated {correlated:?} vs frequency {frequency:?}"
    );
}

#[test]
fn cloak_frequency_analysis_is_no_better_than_guessing() {
    let audit = audit(
        small(),
        SchemeName::Cloak,
        "ycsb-c:zipfian",
        "uniform",
        200,
        2000,
        4,
    );
    let attack = &audit.attack("frequency analysis")[0];
    // Within the spread of a guesser that never saw the view (z counts that spread).
    assert!(attack.score.z() < 5.0, "{attack:?}");
    assert!(
        attack.score.accuracy < 3.0 * attack.score.chance + 0.01,
        "{attack:?}"
    );
    assert_eq!(attack.score.top_recovered, 0);
}

#[test]
fn path_oram_root_bucket_beats_chance_but_not_a_blind_guess() {
    // Every path starts at the root bucket, and the key just accessed often stays there, so
    // naming the hottest key for the busiest label beats chance whatever the view shows. The
    // same attack on the other workload's view makes that guess too: the auditor finds the view
    // adds nothing.
    let audit = audit(
        small(),
        SchemeName::PathOram,
        "ycsb-c:zipfian",
        "uniform",
        200,
        2000,
        4,
    );
    let attack = &audit.attack("frequency analysis")[0];
    assert!(attack.score.blind > attack.score.chance, "{attack:?}");
    assert!(attack.score.z() < 5.0, "{attack:?}");
    assert!(!audit.distinguishable(), "{:?}", audit.findings);
}

#[test]
fn a_distinguisher_that_tells_any_two_waffle_runs_apart_accuses_no_workload() {
    // Waffle writes every object under a fresh label and reads it back a little later, so a
    // classifier trained on some stretches of a run recognises the labels of the others: two
    // runs of the same workload are told apart as easily as two workloads. The control run
    // shows it, and the finding does not count against Waffle.
    let audit = audit(
        small(),
        SchemeName::Waffle,
        "ycsb-c:zipfian",
        "uniform",
        200,
        600,
        4,
    );
    let address = finding(&audit, "address distribution");
    assert!(address.differs_run_to_run(), "{address:?}");
    assert!(!address.differs(), "{address:?}");
    assert!(address.verdict.contains("same workload"), "{address:?}");
}

#[test]
fn counter_nonces_give_cloak_away_and_the_auditor_sees_it() {
    // The leak-demo variant: Cloak seals each write-back in read order with counter nonces, so
    // the nonce rank of every written element names the position it was read from. Following
    // elements that way, the one key clients keep reading is the element re-read in every
    // batch: the linking attack names it, and reuse along followed elements tells one-key
    // from uniform.
    let mut options = small();
    options.cloak.leak_demo_counter_nonces = true;
    // Twice the requests of the audit of Cloak as built below: with 2,000, 2 runs in 240 did
    // not tell the followed elements' reuse apart and the check failed (runs differ: something
    // in them is not fixed by the game's seeds); with 4,000, none in 180.
    let leaky = cloak_one_key_vs_uniform_for(options, 4000);
    let linking = &leaky.attack("linking (headers)")[0];
    assert!(linking.score.z() >= 5.0, "{linking:?}");
    assert!(
        linking.score.accuracy > 5.0 * linking.score.yardstick(),
        "{linking:?}"
    );
    let followed = finding(&leaky, "followed-element reuse");
    assert!(followed.differs(), "{followed:?}");
    assert!(followed.verdict.contains("told apart"), "{followed:?}");
    assert!(leaky.distinguishable());
    let nonces = finding(&leaky, "nonce order");
    assert!(
        nonces.about[0]
            .as_deref()
            .is_some_and(|a| a.contains("nonces consecutive")),
        "{nonces:?}"
    );

    // The same audit of Cloak as built: nothing to follow, nothing told apart.
    let fixed = cloak_one_key_vs_uniform(small());
    let linking = &fixed.attack("linking (headers)")[0];
    assert!(linking.score.z() < 5.0, "{linking:?}");
    assert!(!finding(&fixed, "followed-element reuse").differs());
    assert_eq!(finding(&fixed, "nonce order").about, [None, None]);
    assert!(!fixed.distinguishable(), "{:?}", fixed.findings);
}
