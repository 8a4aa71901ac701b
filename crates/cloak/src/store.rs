//! From `[store]` settings to a running engine: defaults, validation, and the key.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cloak_core::{Engine, KeyDirectory, Limits, RecordLayout, Recovery, Slot, SlotVersions};
use cloak_crypto::{KeyHasher, MasterKey, StoreId};
use cloak_proxy::{Journal, Ledger, RecoveryReport, StateDir, StoreManifest};
use cloak_schemes::pancake::{DistributionFormat, estimate_for_keys, parse_distribution};
use cloak_schemes::{
    CloakOptions, CuriousOptions, FillClock, PancakeOptions, PathOramOptions, SchemeName,
    SchemeOptions, Start, StoreSpec, WaffleOptions,
};
use cloak_storage::Storage;

use crate::cli::StoreArgs;

/// A store's settings with defaults applied and checked.
#[derive(Clone, Debug)]
pub struct Store {
    pub scheme: SchemeName,
    pub spec: StoreSpec,
    pub options: SchemeOptions,
    pub limits: Limits,
    /// Pancake's starting distribution, read once the key directory exists.
    pub pancake_distribution: Option<(PathBuf, DistributionFormat)>,
    /// Scales the restart fill's public clock (`--fill-pace`).
    pub fill_pace: f64,
}

impl StoreArgs {
    // `..defaults` fills Cloak's test-only leak-demo field in test builds (the `leak-demo`
    // feature of cloak-schemes); in other builds there is nothing left for it to fill.
    #[allow(clippy::needless_update)]
    pub fn resolve(&self) -> anyhow::Result<Store> {
        let scheme: SchemeName = self.scheme.as_deref().unwrap_or("cloak").parse()?;
        let max_value = self.value_size.unwrap_or(1024);
        let max_key = self.key_size.unwrap_or(128);
        if max_value > 32 << 20 {
            bail!("--value-size is at most 32 MiB ({} given)", max_value);
        }
        if !(1..=u16::MAX as usize).contains(&max_key) {
            bail!("--key-size must be between 1 and 65535 ({max_key} given)");
        }
        let defaults = CloakOptions::default();
        let curious = CuriousOptions::default();
        let oram = PathOramOptions::default();
        let budgets = self
            .budgets
            .as_deref()
            .map(|list| {
                list.split(',')
                    .map(|b| b.trim().parse::<u32>())
                    .collect::<Result<Vec<_>, _>>()
                    .with_context(|| {
                        format!("--budgets must be comma-separated integers, got {list:?}")
                    })
            })
            .transpose()?;
        let batch_interval = interval(
            "--batch-interval",
            self.batch_interval.as_deref(),
            defaults.batch_interval,
        )?;
        let waffle_defaults = WaffleOptions::default();
        let waffle = WaffleOptions {
            batch: self.waffle_batch,
            real: self.waffle_real,
            fake_dummy: self.waffle_fake_dummy,
            cache: self.waffle_cache,
            dummies: self.waffle_dummies,
            batch_interval: interval(
                "--waffle-interval",
                self.waffle_interval.as_deref(),
                waffle_defaults.batch_interval,
            )?,
            timing: match self.waffle_timing.as_deref() {
                Some(text) => text
                    .parse()
                    .map_err(|e: String| anyhow::anyhow!("--waffle-timing: {e}"))?,
                None => waffle_defaults.timing,
            },
            write_back_at: self.write_back_at.unwrap_or(waffle_defaults.write_back_at),
            max_pending: self.max_pending,
        };
        let pancake = PancakeOptions::default();
        let idle_batch_interval = interval(
            "--pancake-idle-interval",
            self.pancake_idle_interval.as_deref(),
            pancake.idle_batch_interval,
        )?;
        let format: DistributionFormat = match &self.pancake_distribution_format {
            Some(text) => text
                .parse()
                .map_err(|e: String| anyhow::anyhow!("--pancake-distribution-format: {e}"))?,
            None => DistributionFormat::Auto,
        };
        if scheme != SchemeName::Pancake
            && (self.pancake_distribution.is_some() || self.pancake_distribution_format.is_some())
        {
            bail!("--pancake-distribution is for --scheme pancake (the scheme is {scheme})");
        }
        let fill_pace = self.fill_pace.unwrap_or(1.0);
        if !(fill_pace.is_finite() && (0.01..=1000.0).contains(&fill_pace)) {
            bail!("--fill-pace must be between 0.01 and 1000 ({fill_pace} given)");
        }
        Ok(Store {
            fill_pace,
            pancake_distribution: self.pancake_distribution.clone().map(|path| (path, format)),
            scheme,
            spec: StoreSpec {
                capacity: self.capacity.unwrap_or(100_000),
                layout: RecordLayout { max_key, max_value },
                seed: None,
            },
            options: SchemeOptions {
                cloak: CloakOptions {
                    first_budget: self.first_budget.unwrap_or(defaults.first_budget),
                    zipf_exponent: self.zipf_exponent.unwrap_or(defaults.zipf_exponent),
                    budgets,
                    batch_interval,
                    write_back_at: self.write_back_at.unwrap_or(defaults.write_back_at),
                    cache_size: self.cache_size.unwrap_or(defaults.cache_size),
                    max_pending: self.max_pending,
                    ..defaults
                },
                pancake: PancakeOptions {
                    estimate: None,
                    batch_size: self.pancake_batch_size.unwrap_or(pancake.batch_size),
                    adapt: self.pancake_adapt.unwrap_or(pancake.adapt),
                    window: self.pancake_window.unwrap_or(pancake.window),
                    significance: self.pancake_significance.unwrap_or(pancake.significance),
                    idle_batch_interval,
                    max_queued: self.pancake_max_queued.unwrap_or(pancake.max_queued),
                },
                waffle,
                curious: CuriousOptions {
                    partitions: self.curious_partitions,
                    arity: self.curious_arity.unwrap_or(curious.arity),
                    bucket_size: self.curious_bucket_size.unwrap_or(curious.bucket_size),
                    evictions: self.curious_evictions.unwrap_or(curious.evictions),
                    max_in_flight: self.curious_max_in_flight.unwrap_or(curious.max_in_flight),
                    cache_limit: self.curious_cache_limit,
                    retention: self.curious_retention,
                },
                path_oram: PathOramOptions {
                    bucket_size: self.oram_bucket_size.unwrap_or(oram.bucket_size),
                    stash_limit: self.oram_stash_limit.unwrap_or(oram.stash_limit),
                },
            },
            limits: Limits {
                max_key,
                max_value,
                max_keys_per_command: self.max_keys_per_command.unwrap_or(10_000).max(1),
            },
        })
    }
}

impl Store {
    /// The largest element this store writes: its scheme's (as the scheme sizes them), or the
    /// store's marker, which an `unsafe` store of tiny records writes longer than its records.
    /// Public (the storage server sees every element's size), and what bounds storage's answers
    /// to reads.
    pub fn largest_element(&self) -> usize {
        self.options
            .largest_element(self.scheme, self.spec.layout)
            .max(StoreId::MARKER_LEN)
    }

    /// What the ledger records this store was created with.
    pub fn manifest(&self) -> StoreManifest {
        StoreManifest {
            scheme: self.scheme.to_string(),
            capacity: self.spec.capacity,
            key_size: self.spec.layout.max_key,
            value_size: self.spec.layout.max_value,
        }
    }

    /// Fences off whatever used `storage` before ([`Storage::fence`]), then rebuilds the store
    /// from `storage` and `journal` (and the spool an interrupted start left in `state`) and starts the engine on what was found, in the state directory's
    /// incarnation (without one, a random one: a number no earlier start of this store used). What was found must be
    /// the whole store, as new as `ledger` says storage holds it; anything else refuses the
    /// start unless `accept_data_loss`, which starts on what is there and says what was lost.
    /// The ledger then records what this start found. First the store in storage is identified
    /// ([`cloak_proxy::identify`]): everything of it is keyed by its id, so no other store's
    /// elements open here, even under the same master key.
    pub async fn start(
        &self,
        master: &MasterKey,
        storage: &dyn Storage,
        journal: Option<&dyn Journal>,
        state: Option<&StateDir>,
        mut ledger: Option<&mut Ledger>,
        accept_data_loss: bool,
    ) -> anyhow::Result<(Engine, RecoveryReport)> {
        // Before anything is read: what the proxy before this one left on its way must not
        // land in the middle of the scan below (see `Storage::fence`).
        storage
            .fence()
            .await
            .context("fencing off the proxy that used this storage before")?;
        let store_id =
            cloak_proxy::identify(storage, master, ledger.as_deref_mut(), accept_data_loss)
                .await
                .context("identifying the store in storage")?;
        let master = &store_id.key(master);
        let nothing_expected = SlotVersions::new();
        let format = cloak_schemes::element_format(self.scheme, self.spec.layout, master)?;
        let element_len = self.options.largest_element(self.scheme, self.spec.layout);
        // Every element read back during the fill costs what the longest does, so the time of
        // a fill request does not follow which lengths its reads came from.
        let mut recovery = Recovery::new(format)
            .expecting(self.spec.capacity)
            .reading_as_long_as(element_len);
        // An element of another length than the scheme's only one is none of this store's: it
        // is damage before it reaches the spool, which so keeps one length (the fill's decoy
        // reads need that).
        if let Some(exact) = self.options.exact_element(self.scheme, self.spec.layout) {
            recovery = recovery.sized(exact);
        }
        let mut report = cloak_proxy::recover(
            storage,
            recovery,
            journal,
            ledger.as_ref().map_or(&nothing_expected, |l| &l.expected),
            state,
            accept_data_loss,
        )
        .await
        .context("recovering the store from storage")?;
        // Everything since the scan's end (opening the scanned elements, sorting the records,
        // the key directory, the ledger, the scheme's own start) took time that grows with the
        // records; the restart's clock counts from the scan's end, so none of it shows in when
        // the first request after the scan leaves (see `cloak_schemes::shell::fill`).
        let fill_clock =
            FillClock::for_restart(report.scanned, report.recovered.elements, self.fill_pace);
        if !report.findings.is_clean() {
            if !accept_data_loss {
                bail!(
                    "{}\nthe proxy refuses to start, so that no key silently reads as missing or \
                     old. To start anyway on what storage holds, and lose what is listed above, \
                     pass --accept-data-loss",
                    report.findings
                );
            }
            tracing::warn!(findings = %report.findings, "starting with data loss (--accept-data-loss)");
            eprintln!(
                "--accept-data-loss: starting on what storage holds; this is lost:\n{}",
                report.findings
            );
            // The deletes are the first request after the scan, and all recovery did since its
            // last answer (opening every scanned element, keeping their records) took time that
            // follows the records: they leave when the restart's clock says the opening is done
            // (see `cloak_schemes::shell::fill`), or at once in a build made to leak.
            let discard_at = fill_clock.map_or_else(Instant::now, |clock| {
                clock.opened(self.spec.capacity, element_len)
            });
            if Instant::now() > discard_at {
                tracing::warn!(
                    "the deletes of damaged elements left after their instant on the restart's \
                     clock: their timing may tell the storage server how many keys the store \
                     holds; raise --fill-pace"
                );
            }
            tokio::time::sleep_until(discard_at.into()).await;
            cloak_proxy::discard_damaged(storage, &report.findings.damage)
                .await
                .context("deleting the damaged elements")?;
        }
        let recovered = &report.recovered;
        let capacity =
            usize::try_from(self.spec.capacity).context("capacity does not fit in memory")?;
        if let Some((slot, _)) = recovered
            .keys()
            .find(|(slot, _)| *slot as usize >= capacity)
        {
            bail!(
                "storage holds a key in slot {slot}, beyond --capacity {capacity}: start with the \
                 capacity the store was created with"
            );
        }
        let mut directory =
            KeyDirectory::restore(KeyHasher::new(master), capacity, recovered.keys());
        // Slot versions are kept only for a ledger to save: without one nothing reads them, and
        // they cost 8 bytes a slot for as long as the proxy runs.
        let versions: Option<Vec<(Slot, u64)>> = ledger.is_some().then(|| {
            recovered
                .records
                .iter()
                .map(|(slot, version, _)| (slot, version))
                .collect()
        });
        let keyspace = recovered.records.keyspace().map_err(|(slot, error)| {
            anyhow::anyhow!(
                "slot {slot}: {error}; start it with the Cloak that wrote it, or load its data \
                 into a new store"
            )
        })?;
        // The records move into the scheme (one copy of the store in memory, not two).
        let start = Start {
            records: std::mem::take(&mut report.recovered.records),
            generation_base: Start::generation_base(match state {
                Some(state) => state.incarnation,
                None => random_incarnation()?,
            }),
            fill_clock,
        };
        let recovered = &report.recovered;
        let mut options = self.options.clone();
        if let Some((path, format)) = &self.pancake_distribution {
            options.pancake.estimate =
                Some(self.read_distribution(path, *format, &mut directory)?);
        }
        let scheme = cloak_schemes::build(self.scheme, &self.spec, &options, master, start)?;
        let engine = Engine::new(scheme, directory, self.limits)
            .with_next_version(recovered.next_version)
            .with_keyspace(keyspace);
        let engine = match versions {
            Some(versions) => engine.with_acknowledged(versions),
            None => engine.without_acknowledged(),
        };
        if let Some(ledger) = ledger {
            let versions = engine
                .acknowledged()
                .context("the engine keeps no slot versions for the ledger")?;
            ledger
                .save(&versions)
                .context("saving what this start found to the ledger")?;
        }
        if recovered.elements > 0 {
            tracing::info!(
                elements = recovered.elements,
                keys = engine.stats().keys,
                journal = report.journal_records,
                damaged = recovered.damage.count(),
                took = ?report.took,
                "recovered the store from storage"
            );
        }
        Ok((engine, report))
    }

    /// Pancake's `π̂` from a distribution file: every named key is designated its slot, so the
    /// weights can be given per slot before the keys exist.
    fn read_distribution(
        &self,
        path: &Path,
        format: DistributionFormat,
        directory: &mut KeyDirectory,
    ) -> anyhow::Result<cloak_schemes::pancake::Estimate> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("--pancake-distribution: cannot open {}", path.display()))?;
        let weights = parse_distribution(std::io::BufReader::new(file), format)
            .with_context(|| format!("--pancake-distribution {}", path.display()))?;
        let (estimate, left_out) = estimate_for_keys(directory, &weights, self.spec.layout.max_key)
            .with_context(|| format!("--pancake-distribution {}", path.display()))?;
        if left_out > 0 {
            tracing::warn!(
                left_out,
                capacity = directory.capacity(),
                "the distribution names more keys than the store holds; the lightest are left out"
            );
        }
        tracing::info!(
            keys = weights.keys.len() - left_out,
            samples = weights.samples,
            "pancake starts from the distribution in {}",
            path.display()
        );
        Ok(estimate)
    }

    /// One line for people: what is running.
    pub fn summary(&self, engine: &Engine) -> String {
        let params: std::collections::HashMap<_, _> =
            engine.scheme().describe().into_iter().collect();
        let mut line = format!(
            "scheme {}, {} keys of up to {} bytes",
            self.scheme, self.spec.capacity, self.spec.layout.max_value
        );
        if let (Some(batch), Some(interval)) =
            (params.get("batch_size"), params.get("batch_interval_ms"))
        {
            line.push_str(&format!(
                ", a batch of {batch} elements every {interval} ms"
            ));
        }
        if let (Some(m), Some(depth), Some(path)) = (
            params.get("partitions"),
            params.get("tree_depth"),
            params.get("buckets_per_access"),
        ) {
            line.push_str(&format!(
                ", {m} subORAMs of depth {depth}, {path} buckets per request"
            ));
        }
        if let (Some(levels), Some(z), Some(bytes)) = (
            params.get("tree_levels"),
            params.get("bucket_size"),
            params.get("bytes_per_access"),
        ) {
            line.push_str(&format!(
                ", a tree of {levels} levels of {z}-record buckets ({bytes} bytes moved per op)"
            ));
        }
        line
    }
}

/// A batch interval from `flag`'s text (like `20ms`), or `default`.
fn interval(flag: &str, text: Option<&str>, default: Duration) -> anyhow::Result<Duration> {
    let interval = match text {
        Some(text) => humantime::parse_duration(text)
            .with_context(|| format!("{flag}: {text:?} is not a duration like 20ms"))?,
        None => default,
    };
    if interval < Duration::from_micros(100) {
        bail!("{flag} must be at least 100µs");
    }
    Ok(interval)
}

/// An incarnation for a start without a state directory: random, so two such starts of one
/// store almost surely differ (generations must never repeat; a state directory counts instead).
fn random_incarnation() -> anyhow::Result<u64> {
    // 24 bits: generations are `incarnation << 40`.
    Ok((cloak_crypto::random_u64()? >> 40).max(1))
}

/// The key from `--key-file`, else `CLOAK_KEY`; `None` if neither is set.
pub fn load_key(key_file: Option<&Path>) -> anyhow::Result<Option<MasterKey>> {
    if let Some(path) = key_file {
        return Ok(Some(crate::secret_file::master_key(path)?));
    }
    match std::env::var("CLOAK_KEY") {
        Ok(hex) => Ok(Some(MasterKey::from_hex(&hex).context("CLOAK_KEY")?)),
        Err(_) => Ok(None),
    }
}
