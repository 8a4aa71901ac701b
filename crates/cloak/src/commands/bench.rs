//! `cloak bench`: schemes side by side on one workload, in one run on this machine, optionally
//! across a sweep of one parameter; or a trace's reuse-distance statistics.
//!
//! Store and scheme settings are the proxy's own (`StoreArgs`), from the bench's Cloak flags and
//! the `[store]` table of `--config`, so every scheme's options reach both the in-process
//! simulation and the real proxies (which get them as a config file).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use cloak_bench::cluster::{self, Shape};
use cloak_bench::plan::{Parameter, Sweep, WorkloadKind, WorkloadSpec, parse_distribution};
use cloak_bench::plot;
use cloak_bench::report::{self, Measurement};
use cloak_bench::run::{self, Backend, Contender, Load, Setup};
use cloak_bench::simulate::Simulation;
use cloak_bench::simulate_cluster;
use cloak_bench::tls::BenchTls;
use cloak_bench::trace_stats::TraceStats;
use cloak_bench::workload::{KEY_SIZE, Request, Trace, key_name};
use cloak_schemes::{Budgets, SchemeName};

use crate::cli::{BenchArgs, StoreArgs};
use crate::config::ConfigFile;

pub async fn run(args: BenchArgs, config: &ConfigFile) -> anyhow::Result<()> {
    if let Some(path) = &args.trace_stats {
        return trace_stats(&args, path);
    }
    let contenders = contenders(&args.scheme)?;
    let backend: Backend = args
        .backend
        .as_deref()
        .unwrap_or("cloak-server")
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--backend: {e}"))?;
    let reply_timeout = match &args.reply_timeout {
        Some(text) => humantime::parse_duration(text)
            .with_context(|| format!("--reply-timeout: {text:?} is not a duration like 60s"))?,
        None => Duration::from_secs(60),
    };
    if args.in_process && contenders.contains(&Contender::Redis) {
        bail!("the redis baseline is a real redis-server: run it without --in-process");
    }
    let flags = StoreArgs {
        first_budget: args.first_budget,
        zipf_exponent: args.budget_exponent,
        batch_interval: args.batch_interval.clone(),
        cache_size: args.cache_size,
        ..StoreArgs::default()
    };
    let base = config.merge(&flags, &["store"])?;
    let workload = WorkloadSpec {
        kind: WorkloadKind::parse(
            args.workload.as_deref().unwrap_or("temporal"),
            args.trace.clone(),
        )?,
        distribution: parse_distribution(args.distribution.as_deref().unwrap_or("zipfian"))?,
        keys: args.keys.unwrap_or(100_000),
        requests: args.requests.unwrap_or(300_000),
        zipf_exponent: args.zipf_exponent.unwrap_or(1.0),
        write_ratio: args.write_ratio.unwrap_or(0.5),
        seed: args.seed.unwrap_or(1),
    };
    if !(0.0..=1.0).contains(&workload.write_ratio) {
        bail!("--write-ratio is a fraction between 0 and 1");
    }
    let load = Load {
        clients: args.clients.unwrap_or(50).max(1),
        pipeline: args.pipeline.unwrap_or(32).max(1),
        rate: args.rate,
    };
    if load.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        bail!("--rate must be a positive number of requests per second");
    }
    let sweep: Option<Sweep> = args.sweep.as_deref().map(str::parse).transpose()?;
    if args.in_process
        && sweep
            .as_ref()
            .is_some_and(|s| s.parameter == Parameter::Durable)
    {
        bail!("--sweep durable measures disks and journals: run it without --in-process");
    }
    let tls_measured = args.tls
        || sweep
            .as_ref()
            .is_some_and(|s| s.parameter == Parameter::Tls);
    if tls_measured
        && (args.in_process || backend == Backend::Redis || contenders.contains(&Contender::Redis))
    {
        bail!(
            "--tls and --sweep tls measure a proxy's links to its clients and to `cloak server`: \
             run them without --in-process, --backend redis and the redis baseline"
        );
    }
    let shapes = cluster_shapes(&args)?;
    if shapes.is_some() && contenders.contains(&Contender::Redis) {
        bail!(
            "the redis baseline is one redis-server, not a cluster: give --scheme the schemes to run"
        );
    }
    // Each point: a value of the swept parameter, or the shape of a cluster.
    let points: Vec<(Option<f64>, Option<Shape>)> = match (&sweep, &shapes) {
        (_, Some((_, shapes))) => shapes.iter().map(|&shape| (None, Some(shape))).collect(),
        (Some(sweep), None) => sweep.values.iter().map(|&v| (Some(v), None)).collect(),
        (None, None) => vec![(None, None)],
    };
    let storage_delay = match &args.storage_delay {
        Some(text) => humantime::parse_duration(text)
            .with_context(|| format!("--storage-delay: {text:?} is not a duration like 200us"))?,
        None => Duration::from_micros(200),
    };
    let cloak = std::env::current_exe().context("cannot find the cloak binary to start")?;
    let config_dir = tempfile::tempdir().context("cannot make a temporary directory")?;

    // One CA and set of certificates for every TLS point of the run.
    let bench_tls = tls_measured
        .then(BenchTls::new)
        .transpose()
        .context("cannot make the run's TLS certificates")?
        .map(Arc::new);
    let mut results: Vec<Measurement> = Vec::new();
    for (value, shape) in points {
        let mut point = Point {
            store: base.clone(),
            workload: workload.clone(),
            load,
            value_size: args.value_size.unwrap_or(1024),
            durable: false,
            tls: args.tls,
        };
        let parameter = sweep.as_ref().zip(value).map(|(s, v)| (s.parameter, v));
        if let Some((parameter, value)) = parameter {
            point.apply(parameter, value)?;
        }
        let warmup = args.warmup.unwrap_or(0);
        point.workload.requests += warmup;
        // The workload's first `warmup` requests warm the store up; the rest are measured.
        let (mut warm, keys) = point.workload.generate()?;
        let requests = Arc::new(warm.split_off((warmup as usize).min(warm.len())));
        let warm = Arc::new(warm);
        // The cluster count a point varies, as a swept parameter is shown.
        let counted = shape.zip(shapes.as_ref()).map(|(shape, (name, _))| {
            let count = match *name {
                PROXIES => shape.proxies,
                _ => shape.partitions,
            };
            (name.to_string(), count as f64)
        });
        eprintln!(
            "{}{}: {} requests over {keys} keys{}",
            point.workload.describe(),
            match (parameter, &counted) {
                (Some((p, v)), _) => format!(", {p} = {v}"),
                (None, Some((name, count))) => {
                    format!(
                        ", {name} = {count} ({} partitions)",
                        shape.map_or(0, |s| s.partitions)
                    )
                }
                (None, None) => String::new(),
            },
            requests.len(),
            if warm.is_empty() {
                String::new()
            } else {
                format!(", after {} to warm up", warm.len())
            },
        );
        for &contender in &contenders {
            let mut store = point.store.clone();
            store.scheme = Some(contender.to_string());
            store.capacity = Some(keys);
            store.key_size = Some(KEY_SIZE);
            store.value_size = Some(point.value_size);
            if parameter.is_some_and(|(p, _)| p == Parameter::BatchSize)
                && contender != Contender::Scheme(SchemeName::Cloak)
            {
                // A batch-size sweep varies Cloak; the others are measured once as references.
                if results.iter().any(|m| m.scheme == contender.to_string()) {
                    continue;
                }
            }
            let mut measurement = if let (true, Contender::Scheme(scheme)) =
                (args.in_process, contender)
            {
                let resolved = store.resolve()?;
                let simulation = Simulation {
                    scheme,
                    keys,
                    value_size: point.value_size,
                    options: resolved.options,
                    storage_delay,
                    workload: point.workload.describe(),
                    seed: workload.seed,
                };
                eprintln!("  {scheme}: simulating in process");
                match shape {
                    Some(shape) => simulate_cluster::measure(
                        &simulation,
                        shape.partitions,
                        &warm,
                        &requests,
                        point.load,
                    )?,
                    None => {
                        let mut sim = simulation.start()?;
                        simulation.measure_on(&mut sim, &warm, point.load);
                        simulation.measure_on(&mut sim, &requests, point.load)
                    }
                }
            } else {
                if contender == Contender::Scheme(SchemeName::Pancake)
                    && store.pancake_distribution.is_none()
                {
                    // Pancake assumes the proxy knows the access distribution (its paper's
                    // model); unless told otherwise, it gets this run's key frequencies.
                    let weights = config_dir.path().join("pancake-weights.txt");
                    write_key_weights(&weights, warm.iter().chain(requests.iter()))?;
                    store.pancake_distribution = Some(weights);
                    store.pancake_distribution_format = Some("weights".into());
                }
                let file = config_dir.path().join(format!("{contender}.toml"));
                if contender != Contender::Redis {
                    write_store_config(&file, &store)?;
                }
                let mut proxy_args = vec!["--config".to_string(), file.display().to_string()];
                proxy_args.extend(args.proxy_args.iter().cloned());
                let mut server_args = args.server_args.clone();
                // Kept until this scheme's run is over.
                let durable_dir = match point.durable {
                    true => Some(tempfile::tempdir_in(config_dir.path())?),
                    false => None,
                };
                if let Some(dir) = &durable_dir {
                    let (data, state) = (dir.path().join("data"), dir.path().join("state"));
                    if contender == Contender::Redis || backend == Backend::Redis {
                        // Redis's own durability: every write fsynced to its log before the reply.
                        server_args.extend(
                            ["--appendonly", "yes", "--appendfsync", "always"].map(String::from),
                        );
                    } else {
                        server_args.push(format!("--data-dir={}", data.display()));
                    }
                    proxy_args.push(format!("--state-dir={}", state.display()));
                }
                let setup = Setup {
                    cloak: cloak.clone(),
                    contender,
                    backend,
                    keys,
                    value_size: point.value_size,
                    proxy_args,
                    server_args,
                    workload: point.workload.describe(),
                    reply_timeout,
                    tls: bench_tls.clone().filter(|_| point.tls),
                };
                match shape {
                    Some(shape) => {
                        cluster::measure(&setup, shape, warm.clone(), requests.clone(), point.load)
                            .await
                    }
                    None => run::measure(&setup, warm.clone(), requests.clone(), point.load).await,
                }
                .with_context(|| format!("benchmarking {contender}"))?
            };
            measurement.parameter = parameter
                .map(|(p, v)| (p.to_string(), v))
                .or(counted.clone());
            eprintln!(
                "  {contender}: {} ops/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
                measurement
                    .throughput
                    .map_or("unbounded".into(), |t| format!("{t:.0}")),
                measurement.latency_us.p50 as f64 / 1000.0,
                measurement.latency_us.p99 as f64 / 1000.0,
                measurement.errors
            );
            results.push(measurement);
        }
    }

    report::relate(&mut results);
    report::relate_cluster(&mut results);
    print!("{}", report::table(&results));
    let processes = report::cluster_table(&results);
    if !processes.is_empty() {
        print!("\n{processes}");
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&results)?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        match (&sweep, &shapes) {
            (_, Some((name, _))) => plot::sweep(&results, name, path)?,
            (Some(sweep), None) => plot::sweep(&results, sweep.parameter.as_str(), path)?,
            (None, None) => plot::schemes(&results, path)?,
        }
        eprintln!("drew {}", path.display());
    }
    Ok(())
}

/// What a cluster run varies through real processes: the number of proxies.
const PROXIES: &str = "proxies";
/// What it varies in process: the number of partitions.
const PARTITIONS: &str = "partitions";

/// The cluster shapes a run measures and the count it varies (proxies through real processes,
/// partitions in process); `None` for a single store.
fn cluster_shapes(args: &BenchArgs) -> anyhow::Result<Option<(&'static str, Vec<Shape>)>> {
    if args
        .partitions
        .iter()
        .any(|&p| p == 0 || p > usize::from(cloak_cluster::SLOTS))
    {
        bail!(
            "--partitions counts are between 1 and {}",
            cloak_cluster::SLOTS
        );
    }
    if !args.cluster_proxies.is_empty() {
        let most = args.cluster_proxies.iter().copied().max().unwrap_or(1);
        let partitions = match args.partitions[..] {
            [] => most,
            [partitions] => partitions,
            _ => bail!(
                "--partitions takes one count with --cluster-proxies: the partitions stay the \
                 same across the sweep, so only the number of proxy processes changes"
            ),
        };
        if args.cluster_proxies.contains(&0) || partitions < most {
            bail!(
                "--cluster-proxies counts are at least 1 and at most --partitions ({partitions}): \
                 every proxy hosts a partition"
            );
        }
        let shapes = args
            .cluster_proxies
            .iter()
            .map(|&proxies| Shape {
                proxies,
                partitions,
            })
            .collect();
        return Ok(Some((PROXIES, shapes)));
    }
    match (args.partitions.is_empty(), args.in_process) {
        (true, _) => Ok(None),
        (false, true) => {
            if args.sweep.is_some() {
                bail!("--partitions with --in-process is a sweep of its own: drop --sweep");
            }
            let shapes = args
                .partitions
                .iter()
                .map(|&partitions| Shape {
                    proxies: 0,
                    partitions,
                })
                .collect();
            Ok(Some((PARTITIONS, shapes)))
        }
        (false, false) => bail!(
            "--partitions goes with --cluster-proxies (a cluster of proxy processes) or \
             --in-process (partitions simulated in this process)"
        ),
    }
}

/// One point of a run: the settings a sweep value applies to.
struct Point {
    store: StoreArgs,
    workload: WorkloadSpec,
    load: Load,
    value_size: usize,
    /// The server logs to disk and the proxy journals (see `Parameter::Durable`).
    durable: bool,
    /// Both of the proxy's links over TLS (see `Parameter::Tls`).
    tls: bool,
}

impl Point {
    fn apply(&mut self, parameter: Parameter, value: f64) -> anyhow::Result<()> {
        match parameter {
            Parameter::ZipfExponent => self.workload.zipf_exponent = value,
            Parameter::BatchSize => {
                let exponent = self.store.zipf_exponent.unwrap_or(1.0);
                let b1 =
                    Budgets::first_budget_for_batch(self.workload.keys, exponent, value as usize);
                self.store.first_budget = Some(b1);
                self.store.budgets = None;
            }
            Parameter::CacheSize => self.store.cache_size = Some(value as usize),
            Parameter::ValueSize => self.value_size = value as usize,
            Parameter::Keys => self.workload.keys = value as u64,
            Parameter::Rate => self.load.rate = Some(value),
            Parameter::Durable => self.durable = value == 1.0,
            Parameter::Tls => self.tls = value == 1.0,
        }
        if matches!(self.workload.kind, WorkloadKind::Trace(_))
            && matches!(parameter, Parameter::ZipfExponent | Parameter::Keys)
        {
            bail!("--sweep {parameter} changes a generated workload, not a trace");
        }
        Ok(())
    }
}

/// `--scheme` as what to run: scheme names and `redis`; `all` for every scheme.
fn contenders(list: &[String]) -> anyhow::Result<Vec<Contender>> {
    if list.is_empty() {
        return Ok(vec![
            Contender::Scheme(SchemeName::Cloak),
            Contender::Scheme(SchemeName::Unsafe),
        ]);
    }
    if list.iter().any(|s| s == "all") {
        return Ok(SchemeName::ALL.map(Contender::Scheme).to_vec());
    }
    Ok(list
        .iter()
        .map(|s| s.trim().parse())
        .collect::<Result<Vec<Contender>, _>>()?)
}

/// The proxy's `[store]` table for one run.
fn write_store_config(path: &Path, store: &StoreArgs) -> anyhow::Result<()> {
    let mut file = toml::Table::new();
    file.insert(
        "store".into(),
        toml::Value::Table(toml::Table::try_from(store)?),
    );
    std::fs::write(path, toml::to_string(&file)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// How often each key occurs in `requests`, as a Pancake key-weight file (`KEY WEIGHT` lines).
fn write_key_weights<'a>(
    path: &Path,
    requests: impl Iterator<Item = &'a Request>,
) -> anyhow::Result<()> {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for request in requests {
        *counts.entry(request.key).or_default() += 1;
    }
    let mut text = String::with_capacity(counts.len() * 24);
    for (key, count) in counts {
        writeln!(text, "{} {count}", key_name(key))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// `--trace-stats FILE`: the trace's reuse distances, their Zipf fit, and budgets that suit it.
fn trace_stats(args: &BenchArgs, path: &Path) -> anyhow::Result<()> {
    let stats = TraceStats::of(&mut Trace::open(path)?)?;
    println!(
        "{}: {} requests ({} writes) over {} keys",
        path.display(),
        stats.requests,
        stats.writes,
        stats.keys
    );
    println!("reuse distance   access pairs per distance");
    for (distance, count) in &stats.histogram {
        println!("{distance:>14}   {count}");
    }
    println!(
        "Zipf fit: pairs ≈ {:.1} · d^-{:.3}",
        stats.scale, stats.exponent
    );
    let rate = args.expected_rate.unwrap_or(100_000.0);
    let interval = match &args.batch_interval {
        Some(text) => humantime::parse_duration(text)
            .with_context(|| format!("--batch-interval: {text:?} is not a duration"))?,
        None => cloak_schemes::cloak::DEFAULT_BATCH_INTERVAL,
    };
    let capacity = args.keys.unwrap_or(stats.keys).max(stats.keys);
    let (b1, exponent) = stats.recommend(capacity, rate, interval.as_secs_f64());
    let budgets = Budgets::zipf(capacity.max(1), b1, exponent)?;
    println!(
        "For {capacity} keys at {rate:.0} requests/s with a batch every {}: \
         --first-budget {b1} --zipf-exponent {exponent:.2} (a batch of {} in {} sets)",
        humantime::format_duration(interval),
        budgets.batch_size(),
        budgets.sets()
    );
    if let Some(plot_path) = &args.plot {
        let title = format!("Reuse distances of {}", path.display());
        plot::reuse_distances(
            &stats.histogram,
            stats.exponent,
            stats.scale,
            &title,
            plot_path,
        )?;
        eprintln!("drew {}", plot_path.display());
    }
    Ok(())
}
