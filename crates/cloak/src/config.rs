//! `--config cloak.toml`: every flag has a TOML equivalent, and flags override the file.
//!
//! The file has one table per subcommand (`[up]`, `[proxy]`, `[server]`) and a shared `[store]`
//! table for the store and scheme settings that `up` and `proxy` both take. Keys are the flag
//! names without dashes in front:
//!
//! ```toml
//! [store]
//! scheme = "cloak"
//! capacity = 1000000
//! batch-interval = "20ms"
//!
//! [proxy]
//! listen = "0.0.0.0:6380"
//! storage = "tcp://10.0.0.5:7000"
//! key-file = "/etc/cloak/cloak.key"
//! ```
//!
//! A misspelt key is an error, not silently ignored.

use std::path::Path;

use anyhow::{Context, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Tables a config file may have.
const SECTIONS: &[&str] = &["store", "up", "proxy", "server"];

/// A parsed config file (empty when none was given).
#[derive(Default)]
pub struct ConfigFile {
    table: toml::Table,
    path: String,
}

impl ConfigFile {
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        let table: toml::Table = text
            .parse()
            .with_context(|| format!("{} is not valid TOML", path.display()))?;
        for (key, value) in &table {
            if !SECTIONS.contains(&key.as_str()) || !value.is_table() {
                bail!(
                    "{}: unknown section [{key}]; sections are {}",
                    path.display(),
                    SECTIONS.join(", ")
                );
            }
        }
        Ok(Self {
            table,
            path: path.display().to_string(),
        })
    }

    /// The settings for a subcommand: the file's `sections` (later ones win), then the flags
    /// given on the command line over them.
    pub fn merge<T: Serialize + DeserializeOwned>(
        &self,
        flags: &T,
        sections: &[&str],
    ) -> anyhow::Result<T> {
        let table = self.overlaid([as_table(flags)?], sections);
        let (settings, unknown) = self.settings(table)?;
        self.refuse_unknown(unknown, sections)?;
        Ok(settings)
    }

    /// [`Self::merge`] for flags split into two structs (a group of flags flattened into a
    /// subcommand's) that take their keys from the same sections: a key is unknown only when
    /// neither knows it.
    pub fn merge_pair<T, U>(&self, flags: &T, more: &U, sections: &[&str]) -> anyhow::Result<(T, U)>
    where
        T: Serialize + DeserializeOwned,
        U: Serialize + DeserializeOwned,
    {
        let table = self.overlaid([as_table(flags)?, as_table(more)?], sections);
        let (first, unknown_first) = self.settings(table.clone())?;
        let (second, unknown_second) = self.settings(table)?;
        let unknown = unknown_first
            .into_iter()
            .filter(|key| unknown_second.contains(key))
            .collect();
        self.refuse_unknown(unknown, sections)?;
        Ok((first, second))
    }

    /// The file's `sections` with the flags over them.
    fn overlaid<const N: usize>(&self, flags: [toml::Table; N], sections: &[&str]) -> toml::Table {
        let mut merged = toml::Table::new();
        for section in sections {
            if let Some(toml::Value::Table(table)) = self.table.get(*section) {
                merged.extend(table.clone());
            }
        }
        for flags in flags {
            merged.extend(flags);
        }
        merged
    }

    /// The settings in `table`, and the keys they have no place for.
    fn settings<T: DeserializeOwned>(
        &self,
        table: toml::Table,
    ) -> anyhow::Result<(T, Vec<String>)> {
        let mut unknown = Vec::new();
        let settings = serde_ignored::deserialize(toml::Value::Table(table), |path| {
            unknown.push(path.to_string())
        })
        .with_context(|| format!("invalid setting in {}", self.path))?;
        Ok((settings, unknown))
    }

    fn refuse_unknown(&self, unknown: Vec<String>, sections: &[&str]) -> anyhow::Result<()> {
        if !unknown.is_empty() {
            bail!(
                "{}: unknown setting(s) {} in [{}]",
                self.path,
                unknown.join(", "),
                sections.join("]/[")
            );
        }
        Ok(())
    }
}

/// The flags given on the command line as TOML (those left out are absent, not empty).
fn as_table<T: Serialize>(flags: &T) -> anyhow::Result<toml::Table> {
    toml::Table::try_from(flags).context("cannot represent the flags as TOML")
}
