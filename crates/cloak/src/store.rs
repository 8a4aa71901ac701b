//! From `[store]` settings to a running engine: defaults, validation, and the key.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use cloak_core::{ElementCodec, ElementFormat, Engine, KeyDirectory, Limits, RecordLayout};
use cloak_crypto::{KeyHasher, MasterKey, Sealer};
use cloak_proxy::{Journal, RecoveryReport};
use cloak_schemes::{CloakOptions, PathOramOptions, SchemeName, SchemeOptions, Start, StoreSpec};
use cloak_storage::Storage;

use crate::cli::StoreArgs;

/// A store's settings with defaults applied and checked.
#[derive(Clone, Debug)]
pub struct Store {
    pub scheme: SchemeName,
    pub spec: StoreSpec,
    pub options: SchemeOptions,
    pub limits: Limits,
}

impl StoreArgs {
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
        let batch_interval = match &self.batch_interval {
            Some(text) => humantime::parse_duration(text).with_context(|| {
                format!("--batch-interval: {text:?} is not a duration like 20ms")
            })?,
            None => defaults.batch_interval,
        };
        if batch_interval < Duration::from_micros(100) {
            bail!("--batch-interval must be at least 100µs");
        }
        Ok(Store {
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
                    cache_size: self.cache_size.unwrap_or(defaults.cache_size),
                    max_pending: self.max_pending,
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
    /// How this store's scheme encodes elements, for recovery.
    fn format(&self, master: &MasterKey) -> anyhow::Result<ElementFormat> {
        Ok(match self.scheme {
            SchemeName::Unsafe => ElementFormat::Plain(self.spec.layout),
            _ => ElementFormat::Sealed(ElementCodec::new(self.spec.layout, Sealer::new(master)?)),
        })
    }

    /// Rebuilds the store from `storage` and `journal` and starts the engine on what was found,
    /// in `incarnation` (a number no earlier start of this store used).
    pub async fn start(
        &self,
        master: &MasterKey,
        storage: &dyn Storage,
        journal: Option<&dyn Journal>,
        incarnation: u64,
    ) -> anyhow::Result<(Engine, RecoveryReport)> {
        let report = cloak_proxy::recover(storage, self.format(master)?, journal)
            .await
            .context("recovering the store from storage")?;
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
        let start = Start {
            records: recovered.records.clone(),
            generation_base: Start::generation_base(incarnation),
        };
        let scheme = cloak_schemes::build(self.scheme, &self.spec, &self.options, master, start)?;
        let directory = KeyDirectory::restore(KeyHasher::new(master), capacity, recovered.keys());
        let engine =
            Engine::new(scheme, directory, self.limits).with_next_version(recovered.next_version);
        if recovered.elements > 0 {
            tracing::info!(
                elements = recovered.elements,
                keys = engine.stats().keys,
                journal = report.journal_records,
                unreadable = recovered.unreadable,
                took = ?report.took,
                "recovered the store from storage"
            );
        }
        if recovered.unreadable > 0 {
            tracing::warn!(
                unreadable = recovered.unreadable,
                "some elements in storage could not be authenticated and were skipped (another \
                 key, another store, or tampering)"
            );
        }
        Ok((engine, report))
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

/// An incarnation for a start without a state directory: random, so two such starts of one
/// store almost surely differ (generations must never repeat; a state directory counts instead).
pub fn random_incarnation() -> anyhow::Result<u64> {
    // 24 bits: generations are `incarnation << 40`.
    Ok((cloak_crypto::random_u64()? >> 40).max(1))
}

/// The key from `--key-file`, else `CLOAK_KEY`; `None` if neither is set.
pub fn load_key(key_file: Option<&Path>) -> anyhow::Result<Option<MasterKey>> {
    if let Some(path) = key_file {
        return Ok(Some(MasterKey::load(path)?));
    }
    match std::env::var("CLOAK_KEY") {
        Ok(hex) => Ok(Some(MasterKey::from_hex(&hex).context("CLOAK_KEY")?)),
        Err(_) => Ok(None),
    }
}
