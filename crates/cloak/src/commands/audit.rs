//! `cloak audit`: plays the adversary's two workloads on each scheme in process, prints the
//! schemes side by side, and writes the full report and a plot when asked.

use std::path::Path;

use anyhow::{Context, bail};
use cloak_audit::report;
use cloak_audit::{AuditReport, Game, Setup, Workloads, audit_scheme};
use cloak_bench::run::Load;
use cloak_bench::workload::WorkloadSpec;
use cloak_schemes::{SchemeName, cloak};

use crate::cli::{AuditArgs, StoreArgs};
use crate::config::ConfigFile;

/// Keys audited when `--capacity` is not given: small enough to take seconds.
const KEYS: u64 = 1000;
const VALUE_SIZE: usize = 64;

/// The schemes `--scheme` names: a comma-separated list, or `all`.
fn schemes(list: Option<&str>) -> anyhow::Result<Vec<SchemeName>> {
    let list = list.unwrap_or("all");
    if list.trim() == "all" {
        return Ok(SchemeName::ALL.to_vec());
    }
    let mut names = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let name: SchemeName = name.parse()?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        bail!("--scheme names no scheme");
    }
    Ok(names)
}

/// The store's settings for `scheme`, with the audit's defaults where none were given. Cloak's
/// defaults are the paper's for a million keys ([`cloak::DEFAULT_FIRST_BUDGET`],
/// [`cloak::DEFAULT_CACHE_SIZE`]); they are scaled
/// to the audited store so its batches and cache keep the paper's proportions.
fn settings(store: &StoreArgs, scheme: SchemeName, keys: u64) -> StoreArgs {
    let scaled = |per_million: f64| ((per_million * keys as f64 / 1e6).round() as u32).max(1);
    let mut store = store.clone();
    store.scheme = Some(scheme.to_string());
    store.capacity = Some(keys);
    store.value_size.get_or_insert(VALUE_SIZE);
    if store.budgets.is_none() {
        store
            .first_budget
            .get_or_insert(scaled(f64::from(cloak::DEFAULT_FIRST_BUDGET)));
    }
    store
        .cache_size
        .get_or_insert(scaled(cloak::DEFAULT_CACHE_SIZE as f64) as usize);
    store
}

pub fn run(args: AuditArgs, config: &ConfigFile) -> anyhow::Result<()> {
    let store = config.merge(&args.store, &["store"])?;
    let names = schemes(store.scheme.as_deref())?;
    let spec = |text: &str, flag: &str| -> anyhow::Result<WorkloadSpec> {
        text.parse().with_context(|| format!("{flag} {text:?}"))
    };
    let keys = store.capacity.unwrap_or(KEYS);
    let game = Game {
        a: spec(&args.workload, "--workload")?,
        b: spec(&args.versus, "--versus")?,
        requests: args.requests,
        keys,
        seed: args.seed,
    };
    let storage_delay = humantime::parse_duration(&args.storage_delay).with_context(|| {
        format!(
            "--storage-delay: {:?} is not a duration like 1ms",
            args.storage_delay
        )
    })?;
    let load = Load {
        clients: args.clients.max(1),
        pipeline: args.pipeline.max(1),
        rate: None,
    };
    let workloads = Workloads::draw(&game).context("drawing the workloads")?;

    let mut audits = Vec::new();
    let mut failed = Vec::new();
    let mut template = None;
    for name in names {
        eprintln!("auditing {name}…");
        let resolved = settings(&store, name, keys).resolve()?;
        let setup = Setup {
            scheme: name,
            options: resolved.options,
            keys,
            value_size: resolved.spec.layout.max_value,
            storage_delay,
            load,
            seed: args.seed,
        };
        // The simulated proxies' own logs (four starts per scheme) would bury the audit's
        // output: keep their warnings only.
        let quiet = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(std::io::stderr)
            .finish();
        let audited = tracing::subscriber::with_default(quiet, || audit_scheme(&setup, &workloads));
        match audited {
            Ok(audit) => audits.push(audit),
            Err(error) => {
                eprintln!("  {name} not audited: {error}");
                failed.push((name.to_string(), error.to_string()));
            }
        }
        template.get_or_insert(setup);
    }
    let Some(template) = template.filter(|_| !audits.is_empty()) else {
        bail!("no scheme could be audited");
    };
    let baseline = match audits
        .iter()
        .find(|a| a.scheme == SchemeName::Unsafe.as_str())
    {
        Some(unsafe_run) => [unsafe_run.cost[0].throughput, unsafe_run.cost[1].throughput],
        None => cloak_audit::baseline(&template, &workloads)?,
    };
    let report = AuditReport {
        workloads: workloads.names.clone(),
        requests: args.requests,
        keys,
        seed: args.seed,
        load: cloak_audit::audit::LoadSummary::of(load, storage_delay),
        schemes: audits,
        failed,
        baseline: Some(baseline),
    };
    print!("{}", report::table(&report));
    if let Some(path) = &args.plot {
        report::plot(&report, path)?;
        println!("plot: {}", path.display());
    }
    if let Some(path) = &args.report {
        write_report(&report, path, args.plot.as_deref())?;
        println!("report: {}", path.display());
    }
    Ok(())
}

fn write_report(report: &AuditReport, path: &Path, plot: Option<&Path>) -> anyhow::Result<()> {
    // The report links the plot relative to itself when they share a directory.
    let image = plot.map(|p| {
        match (p.parent(), path.parent()) {
            (Some(a), Some(b)) if a == b => p.file_name().map(Path::new).unwrap_or(p),
            _ => p,
        }
        .display()
        .to_string()
    });
    let document = report::document(report, image.as_deref());
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let text = match extension.to_ascii_lowercase().as_str() {
        "md" | "markdown" => document.markdown(),
        "html" | "htm" => document.html(),
        _ => bail!(
            "--report {}: say .md for Markdown or .html for HTML",
            path.display()
        ),
    };
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
