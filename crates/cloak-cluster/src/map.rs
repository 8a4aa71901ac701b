//! The cluster map: which partition owns each hash slot, and which proxy hosts each partition.
//!
//! It is public configuration, made when the cluster is made and the same on every proxy;
//! nothing in it depends on the workload (see the crate's documentation for why that keeps the
//! storage server from learning anything new). Only an operator's move changes it (which proxy
//! hosts a partition, never which slots a partition owns), under a higher epoch (see `change`).

use std::collections::{HashMap, HashSet};

use cloak_storage::RedisTarget;

use crate::slot::SLOTS;

/// Slots `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRange {
    /// The first slot of the range.
    pub first: u16,
    /// The last slot of the range (included).
    pub last: u16,
}

impl std::fmt::Display for SlotRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// One proxy process: where clients reach it, and its node id in the Redis Cluster protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The name partitions refer to it by.
    pub name: String,
    /// The host clients connect to (what `CLUSTER SLOTS` and `-MOVED` announce).
    pub host: String,
    /// The port clients connect to.
    pub port: u16,
    /// 40 hex digits derived from the name: the node id `CLUSTER NODES` and `MYID` show.
    pub id: String,
    /// Its config epoch as Redis Cluster reports one: unique to this proxy, raised to the map's
    /// newest epoch when a move gives it a partition (its position + 1 before any move).
    pub config_epoch: u64,
}

impl Proxy {
    /// `host:port`, as `-MOVED` names it.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition: an ordinary store of one scheme, with its own capacity, key, schedule,
/// journal and storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Its number: its position in the map.
    pub index: usize,
    /// The slots it owns, in order.
    pub slots: Vec<SlotRange>,
    /// The proxy that hosts it (an index into [`ClusterMap::proxies`]).
    pub proxy: usize,
    /// Where its elements are kept (a `--storage` URL).
    pub storage: String,
}

/// What a partition is declared with, before the map checks it.
#[derive(Debug, Clone)]
pub struct PartitionSpec {
    /// The slots it owns.
    pub slots: Vec<SlotRange>,
    /// The name of the proxy that hosts it.
    pub proxy: String,
    /// Its storage URL.
    pub storage: String,
}

/// A map that cannot serve: every slot needs exactly one partition, every partition a proxy
/// that exists and a storage of its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// No partitions were given.
    #[error("the cluster has no partitions")]
    NoPartitions,
    /// More partitions than slots.
    #[error("the cluster has {0} partitions; at most {SLOTS} (one per hash slot)")]
    TooManyPartitions(usize),
    /// Two proxies share a name.
    #[error("two proxies are called {0:?}")]
    DuplicateProxy(String),
    /// A name that could not be shown as one word in `CLUSTER NODES`, health reports and logs.
    #[error("{0:?} is not a proxy name: 1 to {MAX_NAME} letters, digits, '-', '_' or '.'")]
    BadName(String),
    /// Two proxies announce the same address.
    #[error("proxies {first:?} and {second:?} both have the address {address}")]
    DuplicateAddress {
        /// The address.
        address: String,
        /// The first proxy with it.
        first: String,
        /// The second.
        second: String,
    },
    /// An address that is not `host:port`.
    #[error("proxy {proxy:?}: address {address:?} is not HOST:PORT")]
    BadAddress {
        /// The proxy.
        proxy: String,
        /// What it was given.
        address: String,
    },
    /// A partition names a proxy the map does not list.
    #[error("partition {partition} is hosted by {proxy:?}, which is not one of the proxies")]
    UnknownProxy {
        /// The partition.
        partition: usize,
        /// The name it gave.
        proxy: String,
    },
    /// A slot beyond 16383, or a range that runs backwards.
    #[error("partition {partition}: {range} is not a range of slots 0-{}", SLOTS - 1)]
    BadRange {
        /// The partition.
        partition: usize,
        /// The range as written.
        range: String,
    },
    /// Two partitions own one slot.
    #[error("slot {slot} belongs to both partition {first} and partition {second}")]
    SlotTwice {
        /// The slot.
        slot: u16,
        /// The first partition that owns it.
        first: usize,
        /// The second.
        second: usize,
    },
    /// Slots no partition owns.
    #[error("{count} slots belong to no partition, the first is slot {first}")]
    Unowned {
        /// The first such slot.
        first: u16,
        /// How many there are.
        count: usize,
    },
    /// A partition without a storage URL.
    #[error("partition {0} has no storage (give it one, or a cluster-wide one)")]
    NoStorage(usize),
    /// Two partitions would keep their elements in the same place and overwrite each other.
    #[error(
        "partitions {first} and {second} share the storage {storage:?}; each needs its own \
         (put {{partition}} in a shared URL's prefix, e.g. ?prefix=app:p{{partition}}:)"
    )]
    SharedStorage {
        /// The URL.
        storage: String,
        /// The first partition with it.
        first: usize,
        /// The second.
        second: usize,
    },
}

/// Storage that is private to each partition whatever its URL says: `memory` lives in the
/// process that hosts the partition.
const PRIVATE_STORAGE: &str = "memory";

/// The whole cluster: proxies, partitions, and the owner of every slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMap {
    pub(crate) proxies: Vec<Proxy>,
    pub(crate) partitions: Vec<Partition>,
    /// The partition owning each slot.
    owner: Vec<u16>,
    /// Raised by every move: of two maps of one cluster, the one with the higher epoch is the
    /// current one.
    pub(crate) epoch: u64,
}

impl ClusterMap {
    /// Checks and builds a map from proxies (`name`, `host:port`) and partitions (numbered in
    /// the order given).
    pub fn new(
        proxies: &[(String, String)],
        partitions: Vec<PartitionSpec>,
    ) -> Result<Self, MapError> {
        if partitions.is_empty() {
            return Err(MapError::NoPartitions);
        }
        if partitions.len() > usize::from(SLOTS) {
            return Err(MapError::TooManyPartitions(partitions.len()));
        }
        let proxies = checked_proxies(proxies)?;
        let by_name: HashMap<&str, usize> = proxies
            .iter()
            .enumerate()
            .map(|(index, proxy)| (proxy.name.as_str(), index))
            .collect();
        let mut owner: Vec<Option<usize>> = vec![None; usize::from(SLOTS)];
        let mut storages: HashMap<String, usize> = HashMap::new();
        let mut checked = Vec::with_capacity(partitions.len());
        for (index, spec) in partitions.iter().enumerate() {
            let Some(&proxy) = by_name.get(spec.proxy.as_str()) else {
                return Err(MapError::UnknownProxy {
                    partition: index,
                    proxy: spec.proxy.clone(),
                });
            };
            for range in &spec.slots {
                if range.first > range.last || range.last >= SLOTS {
                    return Err(MapError::BadRange {
                        partition: index,
                        range: range.to_string(),
                    });
                }
                for slot in range.first..=range.last {
                    if let Some(first) = owner[usize::from(slot)].replace(index) {
                        return Err(MapError::SlotTwice {
                            slot,
                            first,
                            second: index,
                        });
                    }
                }
            }
            if spec.storage.is_empty() {
                return Err(MapError::NoStorage(index));
            }
            if spec.storage != PRIVATE_STORAGE
                && let Some(first) = places(&spec.storage)
                    .into_iter()
                    .find_map(|place| storages.insert(place, index))
            {
                return Err(MapError::SharedStorage {
                    storage: spec.storage.clone(),
                    first,
                    second: index,
                });
            }
            let mut slots = spec.slots.clone();
            slots.sort_by_key(|range| range.first);
            checked.push(Partition {
                index,
                slots,
                proxy,
                storage: spec.storage.clone(),
            });
        }
        let unowned: Vec<usize> = (0..owner.len()).filter(|&s| owner[s].is_none()).collect();
        if let Some(&first) = unowned.first() {
            return Err(MapError::Unowned {
                first: first as u16,
                count: unowned.len(),
            });
        }
        Ok(Self {
            proxies,
            partitions: checked,
            // Every slot has an owner (checked above), and owners are below SLOTS.
            owner: owner.into_iter().map(|o| o.unwrap_or(0) as u16).collect(),
            epoch: 0,
        })
    }

    /// `partitions` partitions of (nearly) equal runs of slots, hosted in equal contiguous
    /// groups by `proxies` in order, each kept in `storage` with `{partition}` replaced by its
    /// number: what `cloak cluster up` and `cloak cluster init` make.
    pub fn even(
        proxies: &[(String, String)],
        partitions: usize,
        storage: &str,
    ) -> Result<Self, MapError> {
        if proxies.is_empty() || partitions == 0 {
            return Err(MapError::NoPartitions);
        }
        let total = usize::from(SLOTS);
        // Checked here too, not only by `new`: with more partitions than slots some would get
        // an empty run, whose last slot underflows below.
        if partitions > total {
            return Err(MapError::TooManyPartitions(partitions));
        }
        let specs = (0..partitions)
            .map(|index| PartitionSpec {
                slots: vec![SlotRange {
                    first: (index * total / partitions) as u16,
                    last: ((index + 1) * total / partitions - 1) as u16,
                }],
                proxy: proxies[index * proxies.len() / partitions].0.clone(),
                storage: storage_of(storage, index),
            })
            .collect();
        Self::new(proxies, specs)
    }

    /// Every proxy, in the order given.
    pub fn proxies(&self) -> &[Proxy] {
        &self.proxies
    }

    /// Every partition, by number.
    pub fn partitions(&self) -> &[Partition] {
        &self.partitions
    }

    /// The proxy called `name`, by index.
    pub fn proxy_named(&self, name: &str) -> Option<usize> {
        self.proxies.iter().position(|proxy| proxy.name == name)
    }

    /// The partition that owns `slot` (below [`SLOTS`]; a larger one is taken modulo).
    pub fn partition_of(&self, slot: u16) -> &Partition {
        let owner = self.owner[usize::from(slot % SLOTS)];
        &self.partitions[usize::from(owner)]
    }

    /// The partitions `proxy` hosts.
    pub fn hosted_by(&self, proxy: usize) -> impl Iterator<Item = &Partition> {
        self.partitions.iter().filter(move |p| p.proxy == proxy)
    }

    /// The slots `proxy` serves, in order, adjacent ranges merged (what `CLUSTER SLOTS` lists).
    pub fn ranges_of(&self, proxy: usize) -> Vec<SlotRange> {
        let mut ranges: Vec<SlotRange> = self
            .hosted_by(proxy)
            .flat_map(|p| p.slots.iter().copied())
            .collect();
        ranges.sort_by_key(|range| range.first);
        let mut merged: Vec<SlotRange> = Vec::with_capacity(ranges.len());
        for range in ranges {
            match merged.last_mut() {
                Some(last) if last.last + 1 == range.first => last.last = range.last,
                _ => merged.push(range),
            }
        }
        merged
    }
}

/// Where a storage URL keeps its elements, as text two URLs share exactly when they name the
/// same place however they are spelled: a Redis URL's keyspaces with the defaults filled in
/// (`redis://h:6379` and `redis://h:6379/0?prefix=cloak:` are one), a cloak server's address
/// with or without TLS, anything else as written.
fn places(storage: &str) -> Vec<String> {
    match (RedisTarget::parse(storage), storage.split_once("://")) {
        (Some(Ok(target)), _) => target.keyspaces(),
        (None, Some(("tcp" | "tls", address))) => {
            vec![format!("cloak server {}", address.to_ascii_lowercase())]
        }
        _ => vec![storage.to_string()],
    }
}

/// A partition's storage URL: `template` with `{partition}` replaced by its number.
pub fn storage_of(template: &str, partition: usize) -> String {
    template.replace("{partition}", &partition.to_string())
}

/// The longest proxy name.
pub const MAX_NAME: usize = 64;

/// Whether `name` can name a proxy: one word of letters, digits, `-`, `_` and `.`, since names
/// are written space-separated (`CLUSTER NODES`, health reports, the cluster file's errors) and
/// typed on command lines.
fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Proxies with their addresses split and their ids made, names valid, names and addresses
/// unique.
pub(crate) fn checked_proxies(proxies: &[(String, String)]) -> Result<Vec<Proxy>, MapError> {
    let mut names = HashSet::new();
    let mut addresses: HashMap<&str, &str> = HashMap::new();
    let mut checked = Vec::with_capacity(proxies.len());
    for (index, (name, address)) in proxies.iter().enumerate() {
        if !valid_name(name) {
            return Err(MapError::BadName(name.clone()));
        }
        if !names.insert(name.as_str()) {
            return Err(MapError::DuplicateProxy(name.clone()));
        }
        if let Some(first) = addresses.insert(address.as_str(), name.as_str()) {
            return Err(MapError::DuplicateAddress {
                address: address.clone(),
                first: first.to_string(),
                second: name.clone(),
            });
        }
        let bad = || MapError::BadAddress {
            proxy: name.clone(),
            address: address.clone(),
        };
        let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        checked.push(Proxy {
            name: name.clone(),
            host: host.to_string(),
            port,
            id: node_id(name),
            config_epoch: index as u64 + 1,
        });
    }
    Ok(checked)
}

/// A Redis node id (40 lower-case hex digits) for the proxy called `name`: the same on every
/// proxy and across restarts, since clients compare the ids different proxies report.
fn node_id(name: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("cloak cluster proxy {name}").as_bytes(),
    );
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(n: usize) -> Vec<(String, String)> {
        (0..n)
            .map(|i| (format!("p{i}"), format!("127.0.0.1:{}", 7000 + i)))
            .collect()
    }

    #[test]
    fn an_even_map_refuses_no_partitions_or_more_than_slots() {
        assert!(matches!(
            ClusterMap::even(&proxies(3), 0, "memory"),
            Err(MapError::NoPartitions)
        ));
        assert!(matches!(
            ClusterMap::even(&proxies(3), 16_385, "memory"),
            Err(MapError::TooManyPartitions(16_385))
        ));
    }

    #[test]
    fn an_even_map_covers_every_slot_in_contiguous_runs() {
        let map = ClusterMap::even(&proxies(3), 12, "memory").unwrap();
        assert_eq!(map.partitions().len(), 12);
        let ranges: Vec<_> = (0..3).map(|p| map.ranges_of(p)).collect();
        assert_eq!(
            ranges,
            [
                vec![SlotRange {
                    first: 0,
                    last: 5460
                }],
                vec![SlotRange {
                    first: 5461,
                    last: 10921
                }],
                vec![SlotRange {
                    first: 10922,
                    last: 16383
                }],
            ]
        );
        assert_eq!(map.hosted_by(1).count(), 4);
        assert_eq!(map.partition_of(0).index, 0);
        assert_eq!(map.partition_of(16383).index, 11);
        assert_eq!(map.proxies()[0].id.len(), 40);
        assert_ne!(map.proxies()[0].id, map.proxies()[1].id);
    }

    #[test]
    fn bad_maps_are_refused_by_name() {
        let spec = |first, last, proxy: &str, storage: &str| PartitionSpec {
            slots: vec![SlotRange { first, last }],
            proxy: proxy.into(),
            storage: storage.into(),
        };
        let two = proxies(2);
        assert_eq!(
            ClusterMap::new(&two, vec![spec(0, 100, "p0", "a")]),
            Err(MapError::Unowned {
                first: 101,
                count: 16283
            })
        );
        assert_eq!(
            ClusterMap::new(
                &two,
                vec![spec(0, 100, "p0", "a"), spec(100, 16383, "p1", "b")]
            ),
            Err(MapError::SlotTwice {
                slot: 100,
                first: 0,
                second: 1
            })
        );
        assert_eq!(
            ClusterMap::new(
                &two,
                vec![spec(0, 100, "p0", "a"), spec(101, 16383, "p9", "b")]
            ),
            Err(MapError::UnknownProxy {
                partition: 1,
                proxy: "p9".into()
            })
        );
        assert!(matches!(
            ClusterMap::new(
                &two,
                vec![spec(0, 100, "p0", "a"), spec(101, 16383, "p1", "a")]
            ),
            Err(MapError::SharedStorage {
                first: 0,
                second: 1,
                ..
            })
        ));
        assert!(matches!(
            ClusterMap::new(&two, vec![spec(0, 16384, "p0", "a")]),
            Err(MapError::BadRange { partition: 0, .. })
        ));
        let same_address = vec![
            ("a".to_string(), "h:1".to_string()),
            ("b".to_string(), "h:1".to_string()),
        ];
        assert!(matches!(
            ClusterMap::new(&same_address, vec![spec(0, 16383, "a", "x")]),
            Err(MapError::DuplicateAddress { .. })
        ));
        let no_port = vec![("a".to_string(), "h".to_string())];
        assert!(matches!(
            ClusterMap::new(&no_port, vec![spec(0, 16383, "a", "x")]),
            Err(MapError::BadAddress { .. })
        ));
        assert_eq!(
            ClusterMap::even(&two, 2, "redis://h:1?prefix=same:"),
            Err(MapError::SharedStorage {
                storage: "redis://h:1?prefix=same:".into(),
                first: 0,
                second: 1
            })
        );
        assert!(ClusterMap::even(&two, 2, "redis://h:1?prefix=p{partition}:").is_ok());
    }

    /// The review's map: one Redis keyspace spelled two ways (the default prefix left out, then
    /// given) was accepted, and the two partitions overwrote each other.
    #[test]
    fn one_storage_spelled_two_ways_is_shared() {
        let two = proxies(2);
        let map = |a: &str, b: &str| {
            let spec = |first, last, storage: &str| PartitionSpec {
                slots: vec![SlotRange { first, last }],
                proxy: "p0".into(),
                storage: storage.into(),
            };
            ClusterMap::new(&two, vec![spec(0, 8191, a), spec(8192, 16383, b)])
        };
        for (a, b) in [
            (
                "redis://127.0.0.1:17501",
                "redis://127.0.0.1:17501?prefix=cloak:",
            ),
            ("redis://127.0.0.1:17501", "rediss://:pw@127.0.0.1:17501/0"),
            ("redis+cluster://h:1,h:2", "redis://h:2"),
            ("tcp://h:1", "tls://H:1"),
        ] {
            assert!(
                matches!(
                    map(a, b),
                    Err(MapError::SharedStorage {
                        first: 0,
                        second: 1,
                        ..
                    })
                ),
                "{a} and {b}"
            );
        }
        assert!(map("redis://h:1", "redis://h:1/1").is_ok());
        assert!(map("redis://h:1", "redis://h:1?prefix=other:").is_ok());
        assert!(map("memory", "memory").is_ok());
    }
}
