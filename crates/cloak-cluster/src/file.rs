//! The cluster file (TOML): the proxies, and which slots each partition owns, which proxy hosts
//! it and where it is stored.
//!
//! ```toml
//! # Each partition's storage unless it names its own; {partition} becomes its number.
//! storage = "redis+cluster://10.0.0.1:7000,10.0.0.2:7000?prefix=app:p{partition}:"
//!
//! [[proxy]]
//! name = "a"
//! address = "10.0.0.1:6380"      # where clients reach it
//!
//! [[partition]]                   # partition 0
//! slots = "0-8191"
//! proxy = "a"
//!
//! [[partition]]                   # partition 1
//! slots = "8192-16383"
//! proxy = "a"
//! storage = "tcp://10.0.0.9:7000" # a cloak server of its own
//! ```
//!
//! A misspelt key is an error, never ignored. After a move the proxies write the map back in this
//! form with its epoch (`epoch = 3` at the top) and, for a proxy whose config epoch a move
//! raised, that too (`epoch` in its `[[proxy]]`); a file without them is at epoch 0.

use serde::{Deserialize, Serialize};

use crate::map::{ClusterMap, MapError, PartitionSpec, SlotRange, storage_of};
use crate::secret::ClusterSecret;

/// The file as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    /// The MAC a proxy signed the map with (see [`ClusterMap::to_signed_toml`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    storage: Option<String>,
    #[serde(rename = "proxy", default)]
    proxies: Vec<ProxyEntry>,
    #[serde(rename = "partition", default)]
    partitions: Vec<PartitionEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProxyEntry {
    name: String,
    address: String,
    /// Its config epoch, when a move raised it above its position + 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    epoch: Option<u64>,
}

fn is_zero(epoch: &u64) -> bool {
    *epoch == 0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionEntry {
    slots: String,
    proxy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    storage: Option<String>,
}

/// A cluster file that cannot be read as a map.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Not TOML, or not the file's shape (a misspelt or missing key).
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A partition's `slots` is not a list of slots and ranges.
    #[error(
        "partition {partition}: slots {text:?} is not like \"0-5460\" or \"0-100,200,300-400\""
    )]
    Slots {
        /// The partition.
        partition: usize,
        /// What it said.
        text: String,
    },
    /// The map it describes is not a valid one.
    #[error(transparent)]
    Map(#[from] MapError),
    /// A map that moves made carries no MAC, or one that does not verify under this cluster's
    /// secret.
    #[error(
        "the map (epoch {epoch}) {why}: only a proxy holding this cluster's secret makes maps \
         past epoch 0, so it was changed since, or made by someone else"
    )]
    Unsigned {
        /// The map's epoch.
        epoch: u64,
        /// What is wrong with its MAC.
        why: &'static str,
    },
}

impl ClusterMap {
    /// Reads a cluster file's text (a MAC in it is neither needed nor checked: see
    /// [`ClusterMap::from_signed_toml`]).
    pub fn from_toml(text: &str) -> Result<Self, FileError> {
        Self::parse(text).map(|(map, _)| map)
    }

    /// Reads a cluster file's text, and checks its MAC under `secret`. A map at epoch 0 is the
    /// operator's own file, taken as it is (a MAC in it is still checked); any later map was
    /// made by a move, which only a proxy holding the secret can make and signs, so it must
    /// carry a MAC that verifies. Without a secret such a map cannot be checked and is refused.
    pub fn from_signed_toml(text: &str, secret: Option<&ClusterSecret>) -> Result<Self, FileError> {
        let (map, mac) = Self::parse(text)?;
        let refused = |why| FileError::Unsigned {
            epoch: map.epoch,
            why,
        };
        match (mac, secret) {
            // A proxy without a secret cannot check what its peers with one sign; at epoch 0
            // there is nothing to check.
            (None, _) | (Some(_), None) if map.epoch == 0 => Ok(map),
            (None, _) => Err(refused("carries no MAC")),
            (Some(_), None) => Err(refused(
                "carries a MAC, but this proxy has no cluster secret to check it with \
                 (--cluster-secret-file)",
            )),
            (Some(mac), Some(secret)) if secret.verifies(&map.to_toml(), &mac) => Ok(map),
            (Some(_), Some(_)) => Err(refused("fails its MAC check under this cluster's secret")),
        }
    }

    /// The map as a cluster file with its MAC under `secret` (what a proxy keeps and answers to
    /// `CLOAK MAP`): [`ClusterMap::from_signed_toml`] reads it back.
    pub fn to_signed_toml(&self, secret: &ClusterSecret) -> String {
        let canonical = self.to_toml();
        format!("mac = \"{}\"\n{canonical}", secret.sign(&canonical))
    }

    /// The map in `text` and the MAC it carries, if any.
    fn parse(text: &str) -> Result<(Self, Option<String>), FileError> {
        let file: ClusterFile = toml::from_str(text)?;
        let mac = file.mac;
        let config_epochs: Vec<Option<u64>> = file.proxies.iter().map(|p| p.epoch).collect();
        let proxies: Vec<(String, String)> = file
            .proxies
            .into_iter()
            .map(|proxy| (proxy.name, proxy.address))
            .collect();
        let mut specs = Vec::with_capacity(file.partitions.len());
        for (index, entry) in file.partitions.into_iter().enumerate() {
            let slots = parse_slots(&entry.slots).ok_or_else(|| FileError::Slots {
                partition: index,
                text: entry.slots.clone(),
            })?;
            let storage = entry
                .storage
                .or_else(|| file.storage.clone())
                .map(|template| storage_of(&template, index))
                .unwrap_or_default();
            specs.push(PartitionSpec {
                slots,
                proxy: entry.proxy,
                storage,
            });
        }
        let map = ClusterMap::new(&proxies, specs)?.with_epochs(file.epoch, &config_epochs);
        Ok((map, mac))
    }

    /// The map as a cluster file ([`ClusterMap::from_toml`] reads it back as it is).
    pub fn to_toml(&self) -> String {
        let file = ClusterFile {
            mac: None,
            epoch: self.epoch(),
            storage: None,
            proxies: self
                .proxies()
                .iter()
                .enumerate()
                .map(|(index, proxy)| ProxyEntry {
                    name: proxy.name.clone(),
                    address: proxy.address(),
                    epoch: (proxy.config_epoch != index as u64 + 1).then_some(proxy.config_epoch),
                })
                .collect(),
            partitions: self
                .partitions()
                .iter()
                .map(|partition| PartitionEntry {
                    slots: partition
                        .slots
                        .iter()
                        .map(SlotRange::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    proxy: self.proxies()[partition.proxy].name.clone(),
                    storage: Some(partition.storage.clone()),
                })
                .collect(),
        };
        // Strings, lists and tables of strings always serialize.
        toml::to_string(&file).unwrap_or_default()
    }
}

/// `"0-100,200,300-400"` as ranges; `None` if it is not that shape (numbers are checked against
/// the slot count by the map).
fn parse_slots(text: &str) -> Option<Vec<SlotRange>> {
    text.split(',')
        .map(|part| {
            let part = part.trim();
            let (first, last) = part.split_once('-').unwrap_or((part, part));
            Some(SlotRange {
                first: first.trim().parse().ok()?,
                last: last.trim().parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
storage = "redis://127.0.0.1:6379?prefix=app:p{partition}:"

[[proxy]]
name = "a"
address = "127.0.0.1:7001"

[[proxy]]
name = "b"
address = "127.0.0.1:7002"

[[partition]]
slots = "0-8000"
proxy = "a"

[[partition]]
slots = "8001-16000, 16001-16383"
proxy = "b"
storage = "tcp://127.0.0.1:7100"
"#;

    #[test]
    fn a_file_reads_into_its_map_and_back() {
        let map = ClusterMap::from_toml(FILE).unwrap();
        assert_eq!(
            map.partitions()[0].storage,
            "redis://127.0.0.1:6379?prefix=app:p0:"
        );
        assert_eq!(map.partitions()[1].storage, "tcp://127.0.0.1:7100");
        assert_eq!(map.partition_of(16383).index, 1);
        assert_eq!(map.proxies()[1].address(), "127.0.0.1:7002");
        assert_eq!(ClusterMap::from_toml(&map.to_toml()).unwrap(), map);
        let moved = map.with_epochs(3, &[None, Some(5)]);
        let text = moved.to_toml();
        assert!(text.starts_with("epoch = 3\n"), "{text}");
        assert_eq!(ClusterMap::from_toml(&text).unwrap(), moved);
    }

    #[test]
    fn a_moved_map_must_carry_a_mac_that_verifies() {
        let secret = ClusterSecret::new(b"0123456789abcdef0123", "f").unwrap();
        let other = ClusterSecret::new(b"0123456789abcdef0124", "f").unwrap();
        let operators = ClusterMap::from_toml(FILE).unwrap();
        // The operator's file needs none.
        assert_eq!(
            ClusterMap::from_signed_toml(FILE, Some(&secret)).unwrap(),
            operators
        );
        let moved = operators.clone().with_epochs(1, &[]);
        let signed = moved.to_signed_toml(&secret);
        assert!(signed.starts_with("mac = \""), "{signed}");
        assert_eq!(
            ClusterMap::from_signed_toml(&signed, Some(&secret)).unwrap(),
            moved
        );
        assert_eq!(ClusterMap::from_toml(&signed).unwrap(), moved);
        let refused = |text: &str, secret: Option<&ClusterSecret>| {
            ClusterMap::from_signed_toml(text, secret)
                .unwrap_err()
                .to_string()
        };
        // Another host for partition 1, the MAC kept.
        let tampered = signed.replacen("proxy = \"b\"", "proxy = \"a\"", 1);
        assert_ne!(tampered, signed);
        let error = refused(&tampered, Some(&secret));
        assert!(
            error.contains("(epoch 1) fails its MAC check under this cluster's secret"),
            "{error}"
        );
        assert!(refused(&signed, Some(&other)).contains("fails its MAC check"));
        assert!(refused(&moved.to_toml(), Some(&secret)).contains("(epoch 1) carries no MAC"));
        assert!(refused(&signed, None).contains("no cluster secret"));
        let signed_at_zero = operators.to_signed_toml(&secret);
        assert_eq!(
            ClusterMap::from_signed_toml(&signed_at_zero, None).unwrap(),
            operators
        );
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        let misspelt = FILE.replace("proxy = \"b\"", "proxi = \"b\"");
        let error = ClusterMap::from_toml(&misspelt).unwrap_err().to_string();
        assert!(error.contains("proxi"), "{error}");
        let bad_slots = FILE.replace("0-8000", "0..8000");
        let error = ClusterMap::from_toml(&bad_slots).unwrap_err().to_string();
        assert!(error.contains("partition 0: slots \"0..8000\""), "{error}");
        let gap = FILE.replace("0-8000", "0-7999");
        let error = ClusterMap::from_toml(&gap).unwrap_err().to_string();
        assert_eq!(
            error,
            "1 slots belong to no partition, the first is slot 8000"
        );
        let no_storage = FILE.replace("storage = \"redis", "# storage = \"redis");
        let error = ClusterMap::from_toml(&no_storage).unwrap_err().to_string();
        assert!(error.starts_with("partition 0 has no storage"), "{error}");
    }
}
