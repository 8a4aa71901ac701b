//! What a run measured, as a table people read and as JSON programs read.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::startup::Startup;

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Latency {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub max: u64,
    pub mean: f64,
}

impl Latency {
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        Self {
            p50: h.value_at_quantile(0.50),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// How a run reached the scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Client, proxy and storage server as separate processes over loopback.
    Sockets,
    /// The scheme driven in this process with virtual time (no sockets, no real clock).
    InProcess,
}

/// Scheme counters over a run (deltas, not totals since start).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Counters {
    pub real: u64,
    pub dummy: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub storage_bytes: u64,
}

impl Counters {
    /// Both sets of counts together (two partitions' runs).
    pub fn plus(self, other: Counters) -> Counters {
        Counters {
            real: self.real + other.real,
            dummy: self.dummy + other.dummy,
            cache_hits: self.cache_hits + other.cache_hits,
            cache_misses: self.cache_misses + other.cache_misses,
            storage_bytes: self.storage_bytes + other.storage_bytes,
        }
    }

    pub fn since(self, before: Counters) -> Counters {
        Counters {
            real: self.real.saturating_sub(before.real),
            dummy: self.dummy.saturating_sub(before.dummy),
            cache_hits: self.cache_hits.saturating_sub(before.cache_hits),
            cache_misses: self.cache_misses.saturating_sub(before.cache_misses),
            storage_bytes: self.storage_bytes.saturating_sub(before.storage_bytes),
        }
    }
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// The scheme, or `redis` for the plain Redis baseline.
    pub scheme: String,
    pub mode: Mode,
    /// Where the proxy kept its elements (`cloak-server` or `redis`); `None` in process and for
    /// the Redis baseline, which has no proxy.
    pub backend: Option<String>,
    pub workload: String,
    pub keys: u64,
    pub ops: u64,
    pub errors: u64,
    /// Wall-clock seconds, or virtual seconds in process.
    pub seconds: f64,
    /// Operations per second; `None` when no time passed at all (in process, every request
    /// answered at the instant it was sent, so no rate can be given).
    pub throughput: Option<f64>,
    pub latency_us: Latency,
    pub counters: Counters,
    /// Real accesses over all storage accesses.
    pub utilisation: Option<f64>,
    pub dummy_fraction: Option<f64>,
    pub storage_bytes_per_op: Option<f64>,
    /// Throughput over `unsafe`'s at the same sweep point, when `unsafe` ran (see [`relate`]).
    pub throughput_ratio: Option<f64>,
    /// `unsafe`'s storage bytes per op over this scheme's at the same sweep point: the
    /// throughput ratio the bytes alone would allow if moving bytes were all that cost.
    pub bytes_ratio: Option<f64>,
    pub cache_hit_rate: Option<f64>,
    pub proxy_rss_bytes: Option<u64>,
    pub proxy_rss_bytes_per_key: Option<f64>,
    /// CPU seconds (user and system, all threads) the proxy process used per operation over the
    /// measured window; `None` in process and for the Redis baseline.
    pub proxy_cpu_seconds_per_op: Option<f64>,
    /// The same for the storage process: `cloak server`, or the `redis-server` behind the proxy
    /// (for the baseline, the Redis the clients use).
    pub storage_cpu_seconds_per_op: Option<f64>,
    /// The swept parameter and its value, in a sweep.
    pub parameter: Option<(String, f64)>,
    /// The scheme's parameters and counters as it reports them (`INFO scheme`) at the end of
    /// the run, and the proxy's durability (`wal` or `none`). Its counters (`batches_sent`,
    /// `real_slots`, …) and ratios cover the proxy's whole life, preload fill and warm-up
    /// included; the fields above cover the measured requests only.
    pub scheme_info: BTreeMap<String, String>,
    /// What the proxy's start on the preloaded store cost; `None` in process and for the Redis
    /// baseline.
    pub startup: Option<Startup>,
    /// A cluster run's shape and what each of its processes (or, in process, each partition)
    /// did; `None` for a single store.
    pub cluster: Option<ClusterRun>,
}

/// A cluster run: through real processes (`proxies` proxies over `partitions` partitions, each
/// partition with its own storage server), or in process (every partition's scheme in this
/// process, one after another; `proxies` is 0).
#[derive(Clone, Debug, Serialize)]
pub struct ClusterRun {
    pub proxies: usize,
    pub partitions: usize,
    /// Keys each partition holds at most (every partition gets the same store settings).
    pub capacity_per_partition: u64,
    /// Replies that were `-MOVED` or `-ASK` (the client's slot map was wrong; counted as
    /// errors too).
    pub redirected: u64,
    /// CPU seconds per operation over every proxy and storage process (or, in process, every
    /// partition's scheme): what the whole cluster spends on one request, the load generator
    /// left out.
    pub cpu_seconds_per_op: Option<f64>,
    /// Throughput over the first point of the sweep's (fewest proxies, or partitions in
    /// process), for the same scheme: see [`relate_cluster`].
    pub scaling: Option<f64>,
    pub shares: Vec<Share>,
}

/// What one process of a cluster run (or one partition in process) did over the measured
/// window.
#[derive(Clone, Debug, Serialize)]
pub struct Share {
    /// `proxy-1`, `storage-0` (partition 0's storage server), `bench-client` (the bench's own
    /// load generator), or `partition-0` in process.
    pub name: String,
    /// Requests it answered (a proxy: every partition it hosts; none for storage).
    pub ops: Option<u64>,
    /// User and system CPU seconds it used.
    pub cpu_seconds: Option<f64>,
    /// `cpu_seconds` over all the run's operations: its part of one request's cost.
    pub cpu_seconds_per_op: Option<f64>,
    /// `cpu_seconds` over the operations it answered itself.
    pub cpu_seconds_per_own_op: Option<f64>,
}

impl Share {
    /// `name`'s share of a run of `total_ops` operations: `ops` answered, `cpu_seconds` used.
    pub fn new(name: String, ops: Option<u64>, cpu_seconds: Option<f64>, total_ops: u64) -> Self {
        let per = |n: u64| cpu_seconds.filter(|_| n > 0).map(|s| s / n as f64);
        Self {
            name,
            ops,
            cpu_seconds,
            cpu_seconds_per_op: per(total_ops),
            cpu_seconds_per_own_op: ops.and_then(per),
        }
    }
}

/// What was measured.
#[derive(Clone, Debug)]
pub struct Subject {
    pub scheme: String,
    pub mode: Mode,
    pub workload: String,
    pub keys: u64,
}

/// How the measured window went.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ops: u64,
    pub errors: u64,
    pub seconds: f64,
}

impl Measurement {
    pub fn new(
        subject: Subject,
        timing: Timing,
        latency: &hdrhistogram::Histogram<u64>,
        counters: Counters,
        proxy_rss_bytes: Option<u64>,
    ) -> Self {
        let accesses = counters.real + counters.dummy;
        let Timing {
            ops,
            errors,
            seconds,
        } = timing;
        let keys = subject.keys;
        Self {
            scheme: subject.scheme,
            mode: subject.mode,
            backend: None,
            workload: subject.workload,
            keys,
            ops,
            errors,
            seconds,
            throughput: (seconds > 0.0).then(|| ops as f64 / seconds),
            latency_us: Latency::of(latency),
            counters,
            utilisation: share(counters.real, accesses),
            dummy_fraction: share(counters.dummy, accesses),
            storage_bytes_per_op: (ops > 0).then(|| counters.storage_bytes as f64 / ops as f64),
            throughput_ratio: None,
            bytes_ratio: None,
            cache_hit_rate: share(
                counters.cache_hits,
                counters.cache_hits + counters.cache_misses,
            ),
            proxy_rss_bytes,
            proxy_rss_bytes_per_key: proxy_rss_bytes.map(|rss| rss as f64 / keys.max(1) as f64),
            proxy_cpu_seconds_per_op: None,
            storage_cpu_seconds_per_op: None,
            parameter: None,
            scheme_info: BTreeMap::new(),
            startup: None,
            cluster: None,
        }
    }
}

impl Measurement {
    /// Records the CPU seconds the proxy and the storage process used over the measured window.
    pub fn set_cpu(&mut self, proxy_seconds: Option<f64>, storage_seconds: Option<f64>) {
        let per_op = |seconds: Option<f64>| {
            seconds
                .filter(|_| self.ops > 0)
                .map(|s| s / self.ops as f64)
        };
        self.proxy_cpu_seconds_per_op = per_op(proxy_seconds);
        self.storage_cpu_seconds_per_op = per_op(storage_seconds);
    }
}

/// The measurement of `baseline` at the same sweep point as `m`, if it ran.
fn baseline<'a>(
    results: &'a [Measurement],
    m: &Measurement,
    name: &str,
) -> Option<&'a Measurement> {
    results
        .iter()
        .find(|b| b.scheme == name && b.parameter == m.parameter)
}

/// Fills in each result's throughput ratio and bytes ratio against `unsafe` at the same sweep
/// point (both stay `None` where `unsafe` did not run, or moved no bytes to compare).
pub fn relate(results: &mut [Measurement]) {
    let ratios: Vec<(Option<f64>, Option<f64>)> = results
        .iter()
        .map(|m| {
            let Some(base) = baseline(results, m, "unsafe") else {
                return (None, None);
            };
            let throughput = m.throughput.zip(base.throughput).map(|(t, b)| t / b);
            let bytes = base
                .storage_bytes_per_op
                .zip(m.storage_bytes_per_op.filter(|&b| b > 0.0))
                .map(|(b, own)| b / own);
            (throughput, bytes)
        })
        .collect();
    for (m, (throughput, bytes)) in results.iter_mut().zip(ratios) {
        m.throughput_ratio = throughput;
        m.bytes_ratio = bytes;
    }
}

/// Fills in each cluster result's scaling: its throughput over that of the same scheme's first
/// cluster result (the sweep's first point).
pub fn relate_cluster(results: &mut [Measurement]) {
    let scaling: Vec<Option<f64>> = results
        .iter()
        .map(|m| {
            let first = results
                .iter()
                .find(|b| b.scheme == m.scheme && b.cluster.is_some())?;
            m.cluster.as_ref()?;
            m.throughput.zip(first.throughput).map(|(t, b)| t / b)
        })
        .collect();
    for (m, scaling) in results.iter_mut().zip(scaling) {
        if let Some(cluster) = &mut m.cluster {
            cluster.scaling = scaling;
        }
    }
}

fn opt(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "-".into(), f)
}

/// The results as an aligned table, with each scheme's throughput as a share of `unsafe`'s and
/// of plain Redis's when they ran in the same group, and the bytes ratio beside them (call
/// [`relate`] first).
pub fn table(results: &[Measurement]) -> String {
    let redis_ratio = |m: &Measurement| {
        let base = baseline(results, m, "redis").and_then(|b| b.throughput);
        m.throughput.zip(base).map(|(t, b)| t / b)
    };
    let header = [
        "scheme",
        "backend",
        "param",
        "ops/s",
        "×redis",
        "×unsafe",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "proxy CPU µs/op",
        "storage CPU µs/op",
        "util",
        "dummy",
        "B/op",
        "bytes ×unsafe",
        "hits",
        "RSS/key",
        "peak RSS/key",
        "scan s",
        "listen s",
        "1st read s",
        "filled s",
        "errors",
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|m| {
            let ms = |us: u64| format!("{:.2}", us as f64 / 1000.0);
            let micros = |s: f64| format!("{:.1}", s * 1e6);
            let seconds = |s: f64| format!("{s:.2}");
            vec![
                m.scheme.clone(),
                m.backend.clone().unwrap_or_else(|| "-".into()),
                m.parameter
                    .as_ref()
                    .map_or_else(|| "-".into(), |(name, v)| format!("{name}={v}")),
                opt(m.throughput, |t| format!("{t:.0}")),
                opt(redis_ratio(m), |r| format!("{r:.2}")),
                opt(m.throughput_ratio, |r| format!("{r:.2}")),
                ms(m.latency_us.p50),
                ms(m.latency_us.p95),
                ms(m.latency_us.p99),
                ms(m.latency_us.max),
                opt(m.proxy_cpu_seconds_per_op, micros),
                opt(m.storage_cpu_seconds_per_op, micros),
                opt(m.utilisation, |u| format!("{:.3}", u)),
                opt(m.dummy_fraction, |d| format!("{:.3}", d)),
                opt(m.storage_bytes_per_op, |b| format!("{:.0}", b)),
                opt(m.bytes_ratio, |r| format!("{r:.2}")),
                opt(m.cache_hit_rate, |h| format!("{:.3}", h)),
                opt(m.proxy_rss_bytes_per_key, |r| format!("{:.0}", r)),
                opt(
                    m.startup
                        .and_then(|s| s.peak_rss_bytes)
                        .map(|peak| peak as f64 / m.keys.max(1) as f64),
                    |r| format!("{:.0}", r),
                ),
                opt(m.startup.map(|s| s.scan_floor_seconds), seconds),
                opt(m.startup.map(|s| s.listening_seconds), seconds),
                opt(m.startup.map(|s| s.first_read_seconds), seconds),
                opt(m.startup.map(|s| s.filled_seconds), seconds),
                m.errors.to_string(),
            ]
        })
        .collect();
    aligned(&header, &rows, 3)
}

/// Each cluster result's processes (or partitions, in process): their operations and CPU
/// time, per operation of the whole run and per operation each answered; empty without
/// cluster results.
pub fn cluster_table(results: &[Measurement]) -> String {
    let header = [
        "scheme",
        "proxies",
        "partitions",
        "process",
        "ops",
        "CPU s",
        "CPU µs/op",
        "CPU µs/own op",
        "cluster ops/s",
        "×first",
        "cluster CPU µs/op",
    ];
    let micros = |s: f64| format!("{:.1}", s * 1e6);
    let rows: Vec<Vec<String>> = results
        .iter()
        .filter_map(|m| Some((m, m.cluster.as_ref()?)))
        .flat_map(|(m, cluster)| {
            cluster.shares.iter().map(move |share| {
                vec![
                    m.scheme.clone(),
                    cluster.proxies.to_string(),
                    cluster.partitions.to_string(),
                    share.name.clone(),
                    share.ops.map_or_else(|| "-".into(), |n| n.to_string()),
                    opt(share.cpu_seconds, |s| format!("{s:.3}")),
                    opt(share.cpu_seconds_per_op, micros),
                    opt(share.cpu_seconds_per_own_op, micros),
                    opt(m.throughput, |t| format!("{t:.0}")),
                    opt(cluster.scaling, |r| format!("{r:.2}")),
                    opt(cluster.cpu_seconds_per_op, micros),
                ]
            })
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    aligned(&header, &rows, 4)
}

/// `header` and `rows` in columns as wide as their widest cell, the first `left` columns
/// aligned left and the rest (numbers) right.
fn aligned(header: &[&str], rows: &[Vec<String>], left: usize) -> String {
    let mut out = String::new();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                // Characters, not bytes: "×" and "µ" are one column wide.
                .map(|r| r[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i < left {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let _ = writeln!(out, "{}", line(&header));
    for row in rows {
        let _ = writeln!(out, "{}", line(row));
    }
    out
}
