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
        let mut merged = toml::Table::new();
        for section in sections {
            if let Some(toml::Value::Table(table)) = self.table.get(*section) {
                merged.extend(table.clone());
            }
        }
        let flags = toml::Table::try_from(flags).context("cannot represent the flags as TOML")?;
        merged.extend(flags);

        let mut unknown = Vec::new();
        let settings = serde_ignored::deserialize(toml::Value::Table(merged), |path| {
            unknown.push(path.to_string())
        })
        .with_context(|| format!("invalid setting in {}", self.path))?;
        if !unknown.is_empty() {
            bail!(
                "{}: unknown setting(s) {} in [{}]",
                self.path,
                unknown.join(", "),
                sections.join("]/[")
            );
        }
        Ok(settings)
    }
}
