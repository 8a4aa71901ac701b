//! `cloak bench` as a user runs it: real proxies and servers, in-process simulation, sweeps,
//! reports, plots and trace statistics, on sizes small enough for CI. These check what the
//! benchmark reports, never how fast anything is.

use std::path::Path;
use std::process::{Command, Output};

const CLOAK: &str = env!("CARGO_BIN_EXE_cloak");

fn bench(args: &[&str]) -> Output {
    Command::new(CLOAK)
        .arg("bench")
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("cloak runs")
}

/// `cloak bench` with `args`, which must succeed (its output is shown when it does not).
fn bench_ok(args: &[&str]) -> Output {
    let out = bench(args);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn results(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).expect("the JSON report was written");
    serde_json::from_str(&text).expect("the report is JSON")
}

fn number(m: &serde_json::Value, field: &str) -> f64 {
    m[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {m}"))
}

#[test]
fn schemes_side_by_side_through_real_processes() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let plot = dir.path().join("out.svg");
    let out = bench_ok(&[
        "--scheme",
        "cloak,unsafe,encrypted",
        "--keys",
        "2000",
        "--requests",
        "6000",
        "--clients",
        "4",
        "--pipeline",
        "8",
        "--first-budget",
        "40",
        "--batch-interval",
        "5ms",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("×unsafe"),
        "the table compares with unsafe:\n{stdout}"
    );

    let results = results(&json);
    let names: Vec<&str> = results
        .iter()
        .map(|m| m["scheme"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cloak", "unsafe", "encrypted"]);
    for m in &results {
        assert_eq!(number(m, "ops"), 6000.0, "every request answered: {m}");
        assert_eq!(number(m, "errors"), 0.0, "{m}");
        assert!(number(m, "throughput") > 0.0);
        assert!(number(m, "storage_bytes_per_op") > 0.0);
        assert!(number(m, "proxy_rss_bytes") > 0.0);
        assert_eq!(m["mode"], "sockets");
        assert_eq!(m["backend"], "cloak-server");
        // Thousands of requests through a debug-built proxy take far more than a 10 ms tick.
        assert!(number(m, "proxy_cpu_seconds_per_op") > 0.0, "{m}");
        assert!(number(m, "storage_cpu_seconds_per_op") >= 0.0, "{m}");
    }
    let cloak = &results[0];
    let utilisation = number(cloak, "utilisation");
    assert!(
        utilisation > 0.0 && utilisation < 1.0,
        "Cloak's batches mix real and dummy slots: {utilisation}"
    );
    assert_eq!(
        cloak["scheme_info"]["batch_interval_ms"], "5",
        "the proxy ran with the bench's Cloak settings: {cloak}"
    );
    assert_eq!(
        number(&results[1], "utilisation"),
        1.0,
        "unsafe sends no dummies"
    );
    let svg = std::fs::read_to_string(&plot).expect("the plot was drawn");
    assert!(svg.contains("<svg") && svg.contains("Throughput"));
}

#[test]
fn a_plain_redis_baseline_beside_a_proxy_over_redis() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("redis.json");
    let out = bench_ok(&[
        "--scheme",
        "redis,unsafe",
        "--backend",
        "redis",
        "--keys",
        "300",
        "--requests",
        "2000",
        "--clients",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("×redis"), "{stdout}");
    let results = results(&json);
    let names: Vec<&str> = results
        .iter()
        .map(|m| m["scheme"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["redis", "unsafe"]);
    for m in &results {
        assert_eq!(number(m, "ops"), 2000.0, "every request answered: {m}");
        assert_eq!(number(m, "errors"), 0.0, "{m}");
        assert!(number(m, "storage_cpu_seconds_per_op") >= 0.0, "{m}");
    }
    let (redis, unsafe_) = (&results[0], &results[1]);
    // The baseline has no proxy: the clients talk to the redis-server itself.
    assert!(redis["backend"].is_null() && redis["proxy_cpu_seconds_per_op"].is_null());
    assert!(redis["storage_bytes_per_op"].is_null(), "{redis}");
    // The proxy kept its elements in Redis, and moved them there during the run.
    assert_eq!(unsafe_["backend"], "redis");
    assert!(number(unsafe_, "storage_bytes_per_op") > 0.0, "{unsafe_}");
    assert!(
        number(unsafe_, "proxy_cpu_seconds_per_op") > 0.0,
        "{unsafe_}"
    );
}

/// The results of a small Cloak-and-unsafe run over `sweep` (`NAME=V1,V2`).
fn small_sweep(sweep: &str) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sweep.json");
    bench_ok(&[
        "--scheme",
        "cloak,unsafe",
        "--keys",
        "500",
        "--requests",
        "2000",
        "--clients",
        "2",
        "--first-budget",
        "20",
        "--batch-interval",
        "5ms",
        "--warmup",
        "500",
        "--sweep",
        sweep,
        "--json",
        json.to_str().unwrap(),
    ]);
    results(&json)
}

#[test]
fn a_durability_sweep_runs_each_scheme_with_and_without_disks() {
    let results = small_sweep("durable=0,1");
    let runs: Vec<(&str, f64, &str)> = results
        .iter()
        .map(|m| {
            assert_eq!(number(m, "errors"), 0.0, "{m}");
            assert_eq!(number(m, "ops"), 2000.0, "the warm-up is not measured: {m}");
            let durability = m["scheme_info"]["durability"].as_str().unwrap_or("?");
            (
                m["scheme"].as_str().unwrap(),
                m["parameter"][1].as_f64().unwrap(),
                durability,
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            ("cloak", 0.0, "none"),
            ("unsafe", 0.0, "none"),
            ("cloak", 1.0, "wal"),
            ("unsafe", 1.0, "wal"),
        ]
    );
}

/// `--sweep tls=0,1` runs each scheme with both links in the clear and over TLS, start-up probe
/// included (it once connected in the clear to a TLS-only proxy and the run failed).
#[test]
fn a_tls_sweep_runs_each_scheme_with_and_without_tls() {
    let runs: Vec<(String, f64)> = small_sweep("tls=0,1")
        .iter()
        .map(|m| {
            assert_eq!(number(m, "errors"), 0.0, "{m}");
            assert_eq!(number(m, "ops"), 2000.0, "{m}");
            (
                m["scheme"].as_str().unwrap().to_string(),
                m["parameter"][1].as_f64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, f64)> = [
        ("cloak", 0.0),
        ("unsafe", 0.0),
        ("cloak", 1.0),
        ("unsafe", 1.0),
    ]
    .into_iter()
    .map(|(s, t)| (s.to_string(), t))
    .collect();
    assert_eq!(runs, expected);
}

#[test]
fn in_process_sweeps_reproduce_the_skew_effect() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sweep.json");
    let plot = dir.path().join("sweep.png");
    // No cache: reads are answered by batches or by pending writes, so throughput shows how
    // well the workload's recency fits the budgets (the paper's Figure 4).
    bench_ok(&[
        "--in-process",
        "--scheme",
        "cloak",
        "--keys",
        "5000",
        "--requests",
        "40000",
        "--first-budget",
        "50",
        "--cache-size",
        "0",
        "--sweep",
        "zipf-exponent=0,1.5",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let results = results(&json);
    assert_eq!(results.len(), 2);
    let at = |i: usize| {
        let m = &results[i];
        assert_eq!(m["mode"], "in-process");
        assert_eq!(number(m, "errors"), 0.0);
        assert_eq!(number(m, "ops"), 40000.0);
        (
            m["parameter"][1].as_f64().unwrap(),
            number(m, "throughput"),
            number(&m["latency_us"], "p95"),
        )
    };
    let ((uniform, u_rate, u_p95), (skewed, s_rate, s_p95)) = (at(0), at(1));
    assert_eq!((uniform, skewed), (0.0, 1.5));
    // Virtual time: deterministic, not a timing test.
    assert!(
        s_rate > 3.0 * u_rate,
        "recency-skewed requests are mostly answered at the proxy or fill batches: {s_rate} vs \
         {u_rate} ops/s"
    );
    assert!(s_p95 < u_p95, "p95 {s_p95} µs vs {u_p95} µs");
    let png = std::fs::read(&plot).expect("the sweep was drawn");
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn trace_statistics_fit_the_skew_and_recommend_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.txt");
    // A trace that re-reads the most recent keys far more often than old ones.
    let mut lines = String::new();
    let mut recent: Vec<u32> = (0..500).collect();
    for i in 0..20_000u32 {
        let rank = (i.wrapping_mul(2_654_435_761) % 1000) as usize;
        let rank = (rank * rank / 2000).min(recent.len() - 1);
        let key = recent.remove(rank);
        recent.insert(0, key);
        lines.push_str(&if i % 2 == 0 {
            format!("{key}\n")
        } else {
            format!("{key} value\n")
        });
    }
    std::fs::write(&trace, lines).unwrap();
    let plot = dir.path().join("reuse.png");
    let out = bench_ok(&[
        "--trace-stats",
        trace.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("20000 requests (10000 writes) over 500 keys"),
        "{stdout}"
    );
    assert!(stdout.contains("Zipf fit"), "{stdout}");
    assert!(stdout.contains("--first-budget"), "{stdout}");
    assert!(std::fs::metadata(&plot).is_ok_and(|m| m.len() > 0));
}

#[test]
fn bad_benchmark_settings_get_clear_errors() {
    for (args, says) in [
        (&["--sweep", "color=1,2"][..], "--sweep takes NAME=V1,V2"),
        (&["--workload", "trace"][..], "needs --trace FILE"),
        (&["--workload", "ycsb-z"][..], "unknown workload"),
        (&["--scheme", "rot13"][..], "unknown scheme"),
        (&["--write-ratio", "2"][..], "--write-ratio"),
        (&["--backend", "s3"][..], "unknown backend"),
        (&["--reply-timeout", "soon"][..], "--reply-timeout"),
        (
            &["--scheme", "redis", "--in-process"][..],
            "without --in-process",
        ),
        (
            &["--cluster-proxies", "1,4", "--partitions", "2"][..],
            "at most --partitions",
        ),
        (
            &["--cluster-proxies", "1,2", "--partitions", "2,4"][..],
            "one count with --cluster-proxies",
        ),
        (&["--partitions", "4"][..], "goes with --cluster-proxies"),
        (
            &["--cluster-proxies", "1", "--scheme", "redis"][..],
            "not a cluster",
        ),
    ] {
        let out = bench(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// A cluster sweep through real processes: each point starts its proxies over the same
/// partitions (each with its own `cloak server`), drives them with a cluster-aware load, and
/// says what every process did.
#[test]
fn a_cluster_sweep_drives_every_proxy_and_counts_each_process() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cluster.json");
    let out = bench_ok(&[
        "--cluster-proxies",
        "1,2",
        "--partitions",
        "2",
        "--scheme",
        "unsafe",
        "--keys",
        "400",
        "--requests",
        "3000",
        "--clients",
        "4",
        "--pipeline",
        "8",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("proxies=2") && stdout.contains("CPU µs/own op"),
        "{stdout}"
    );
    let results = results(&json);
    assert_eq!(results.len(), 2);
    for (m, proxies) in results.iter().zip([1, 2]) {
        assert_eq!(number(m, "ops"), 3000.0, "every request answered: {m}");
        assert_eq!(number(m, "errors"), 0.0, "{m}");
        assert!(number(m, "throughput") > 0.0);
        let cluster = &m["cluster"];
        assert_eq!(number(cluster, "proxies"), proxies as f64);
        assert_eq!(number(cluster, "partitions"), 2.0);
        assert_eq!(
            number(cluster, "redirected"),
            0.0,
            "the load follows the slot map"
        );
        let shares = cluster["shares"].as_array().unwrap();
        let names: Vec<&str> = shares.iter().map(|s| s["name"].as_str().unwrap()).collect();
        let expected: Vec<String> = (1..=proxies)
            .map(|i| format!("proxy-{i}"))
            .chain((0..2).map(|i| format!("storage-{i}")))
            .chain(["bench-client".to_string()])
            .collect();
        assert_eq!(names, expected, "{m}");
        let served: f64 = shares[..proxies].iter().map(|s| number(s, "ops")).sum();
        assert_eq!(
            served, 3000.0,
            "the proxies answered every request between them: {m}"
        );
        for share in shares {
            if share["name"].as_str().unwrap().starts_with("proxy") {
                assert!(
                    number(share, "ops") > 0.0,
                    "every proxy served requests: {share}"
                );
                // Hundreds of requests through a debug-built proxy take more than a 10 ms tick.
                assert!(number(share, "cpu_seconds") > 0.0, "{share}");
            }
            assert!(number(share, "cpu_seconds") >= 0.0, "{share}");
        }
        assert!(number(cluster, "cpu_seconds_per_op") > 0.0, "{m}");
    }
    assert_eq!(number(&results[0]["cluster"], "scaling"), 1.0);
}

/// The same split in process: each partition's scheme answers the requests for its keys, and
/// its CPU time per operation is measured.
#[test]
fn an_in_process_partition_sweep_measures_each_partition() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("partitions.json");
    let out = bench_ok(&[
        "--in-process",
        "--partitions",
        "1,4",
        "--scheme",
        "cloak,unsafe",
        "--keys",
        "2000",
        "--requests",
        "4000",
        "--first-budget",
        "40",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("partition-3"), "{stdout}");
    let results = results(&json);
    assert_eq!(results.len(), 4);
    for m in &results {
        assert_eq!(number(m, "ops"), 4000.0, "{m}");
        assert_eq!(number(m, "errors"), 0.0, "{m}");
        let cluster = &m["cluster"];
        let shares = cluster["shares"].as_array().unwrap();
        assert_eq!(shares.len() as f64, number(cluster, "partitions"));
        let answered: f64 = shares.iter().map(|s| number(s, "ops")).sum();
        assert_eq!(answered, 4000.0, "{m}");
        for share in shares {
            assert!(
                number(share, "ops") > 0.0,
                "2000 keys reach every partition: {share}"
            );
            assert!(number(share, "cpu_seconds_per_own_op") > 0.0, "{share}");
        }
    }
}
