//! How the map changes while the cluster runs: an operator moves a partition to another proxy,
//! or adds a proxy.
//!
//! A move changes which proxy hosts one partition and nothing else: the partitions, their slots
//! and their storage stay as the cluster was made, so no key ever changes partition (which would
//! show storage which keys are used). Adding a proxy ([`with_proxy`]) appends one to the list,
//! hosting nothing until a move gives it a partition; proxies are never reordered, so an older
//! map's proxies are always the first ones of a newer map's. Every change raises the map's
//! epoch by one, so of two maps of one cluster the newer is the one with the higher epoch,
//! whoever holds it ([`newest`]); the proxy that takes the partition gets the new epoch as its
//! config epoch, as a Redis Cluster node that takes slots does.
//!
//! Neither change touches storage: the map is public configuration, routing happens in the
//! proxies' memory, and a proxy added hosting nothing sends storage nothing until a move
//! starts a partition there (which storage sees as it sees any move).
//!
//! [`newest`]: ClusterMap::newest
//! [`with_proxy`]: ClusterMap::with_proxy

use crate::map::{ClusterMap, MapError, checked_proxies};

/// Why a map cannot replace another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// The partition number is not in the map.
    #[error("there is no partition {partition}; the cluster has {count}")]
    NoPartition {
        /// The number asked for.
        partition: usize,
        /// How many partitions there are.
        count: usize,
    },
    /// No proxy has that name.
    #[error("there is no proxy {name:?}; the proxies are {known}")]
    NoProxy {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated.
        known: String,
    },
    /// The partition is already where it was asked to go.
    #[error("partition {partition} is already on {proxy}")]
    AlreadyThere {
        /// The partition.
        partition: usize,
        /// Its proxy.
        proxy: String,
    },
    /// The move would leave its proxy with nothing to serve.
    #[error(
        "partition {partition} is the last one on {proxy}; a proxy serves at least one partition"
    )]
    LastPartition {
        /// The partition.
        partition: usize,
        /// Its proxy.
        proxy: String,
    },
    /// The proxy to add cannot join: a bad or taken name, or a bad or taken address.
    #[error("cannot add the proxy: {0}")]
    Proxy(MapError),
    /// Two different maps claim the same epoch.
    #[error("two different cluster maps both have epoch {0}; one of them was not made by a move")]
    SameEpoch(u64),
    /// The other map describes another cluster (other proxies, slots or storage).
    #[error("the map is not of this cluster: {0}")]
    OtherCluster(String),
}

impl ClusterMap {
    /// The map's epoch: 0 as made, one more after each move.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This map with `epoch`, and the proxies' config epochs as given (by proxy, in order;
    /// missing ones keep theirs): what a cluster file written after moves says.
    pub fn with_epochs(mut self, epoch: u64, config_epochs: &[Option<u64>]) -> Self {
        self.epoch = epoch;
        for (proxy, config) in self.proxies.iter_mut().zip(config_epochs) {
            if let Some(config) = config {
                proxy.config_epoch = *config;
            }
        }
        self
    }

    /// The map after partition `partition` moves to the proxy called `to`, one epoch later.
    pub fn moved(&self, partition: usize, to: &str) -> Result<ClusterMap, ChangeError> {
        let count = self.partitions.len();
        let from = self
            .partitions
            .get(partition)
            .ok_or(ChangeError::NoPartition { partition, count })?
            .proxy;
        let Some(target) = self.proxy_named(to) else {
            let known: Vec<&str> = self.proxies.iter().map(|p| p.name.as_str()).collect();
            return Err(ChangeError::NoProxy {
                name: to.to_string(),
                known: known.join(", "),
            });
        };
        let name = |proxy: usize| self.proxies[proxy].name.clone();
        if target == from {
            return Err(ChangeError::AlreadyThere {
                partition,
                proxy: name(from),
            });
        }
        if self.hosted_by(from).count() == 1 {
            return Err(ChangeError::LastPartition {
                partition,
                proxy: name(from),
            });
        }
        let mut next = self.clone();
        next.epoch += 1;
        next.partitions[partition].proxy = target;
        next.proxies[target].config_epoch = next.current_epoch();
        Ok(next)
    }

    /// The map with one more proxy, `name` at `address` (`host:port`), hosting nothing, one epoch
    /// later. Its config epoch is the new current epoch, which no other proxy has (each has at
    /// most the current epoch before this change).
    pub fn with_proxy(&self, name: &str, address: &str) -> Result<ClusterMap, ChangeError> {
        let mut named: Vec<(String, String)> = self
            .proxies
            .iter()
            .map(|p| (p.name.clone(), p.address()))
            .collect();
        named.push((name.to_string(), address.to_string()));
        // The same checks as a cluster file's proxies: valid name, unique name and address.
        let mut proxies = checked_proxies(&named).map_err(ChangeError::Proxy)?;
        for (new, old) in proxies.iter_mut().zip(&self.proxies) {
            new.config_epoch = old.config_epoch;
        }
        let mut next = self.clone();
        next.proxies = proxies;
        next.epoch += 1;
        let current = next.current_epoch();
        if let Some(added) = next.proxies.last_mut() {
            added.config_epoch = current;
        }
        Ok(next)
    }

    /// The cluster's current epoch as Redis Cluster reports one: at least every proxy's config
    /// epoch (the number of proxies before any move, one more after each).
    pub fn current_epoch(&self) -> u64 {
        self.proxies.len() as u64 + self.epoch
    }

    /// Of this map and `other`, both of this cluster, the newer (the higher epoch). The newer
    /// must list every proxy the older does (proxies are added, never taken away or reordered).
    pub fn newest(self, other: ClusterMap) -> Result<ClusterMap, ChangeError> {
        self.same_cluster(&other)?;
        let (older, newer) = match self.epoch.cmp(&other.epoch) {
            std::cmp::Ordering::Less => (self, other),
            std::cmp::Ordering::Greater => (other, self),
            std::cmp::Ordering::Equal if self == other => return Ok(self),
            std::cmp::Ordering::Equal => return Err(ChangeError::SameEpoch(self.epoch)),
        };
        if older.proxies.len() > newer.proxies.len() {
            return Err(ChangeError::OtherCluster(format!(
                "its map of epoch {} lists proxies the one of epoch {} does not",
                older.epoch, newer.epoch
            )));
        }
        Ok(newer)
    }

    /// Whether `other` is a map of the same cluster: the same proxies at the same addresses,
    /// but for proxies one of them added at the end, and the same partitions with the same
    /// slots and storage (only their hosts may differ).
    pub fn same_cluster(&self, other: &ClusterMap) -> Result<(), ChangeError> {
        let same_proxy =
            |(a, b): (&crate::Proxy, &crate::Proxy)| a.name == b.name && a.address() == b.address();
        if !self.proxies.iter().zip(&other.proxies).all(same_proxy) {
            return Err(ChangeError::OtherCluster(
                "its proxies or their addresses differ".into(),
            ));
        }
        if self.partitions.len() != other.partitions.len() {
            return Err(ChangeError::OtherCluster(format!(
                "it has {} partitions, this one {}",
                other.partitions.len(),
                self.partitions.len()
            )));
        }
        for (mine, theirs) in self.partitions.iter().zip(&other.partitions) {
            if mine.slots != theirs.slots || mine.storage != theirs.storage {
                return Err(ChangeError::OtherCluster(format!(
                    "partition {}'s slots or storage differ",
                    mine.index
                )));
            }
        }
        Ok(())
    }

    /// A short digest of the partitions [`Self::same_cluster`] compares (each one's slots and
    /// storage; not the proxies, nor which proxy hosts a partition, nor the epoch): equal for
    /// every map of one cluster across moves and added proxies, and what proxies compare to
    /// tell a peer started from another cluster's file. The proxies are left out because a
    /// proxy added while the cluster runs reaches the proxies' maps one after another, and the
    /// proxies would meanwhile count each other as of another cluster; the storage places are
    /// what two clusters must never share anyway.
    pub fn cluster_digest(&self) -> String {
        let mut identity = String::new();
        for partition in &self.partitions {
            let slots: Vec<String> = partition.slots.iter().map(|r| r.to_string()).collect();
            identity.push_str(&format!(
                "partition {} {} {}\n",
                partition.index,
                slots.join(","),
                partition.storage
            ));
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, identity.as_bytes());
        digest.as_ref()[..8]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> ClusterMap {
        let proxies: Vec<(String, String)> = (0..3)
            .map(|i| (format!("p{i}"), format!("127.0.0.1:{}", 7000 + i)))
            .collect();
        ClusterMap::even(&proxies, 6, "redis://h:1?prefix=p{partition}:").unwrap()
    }

    #[test]
    fn a_move_changes_one_host_and_raises_the_epochs() {
        let before = map();
        assert_eq!((before.epoch(), before.current_epoch()), (0, 3));
        let after = before.moved(0, "p2").unwrap();
        assert_eq!(after.epoch(), 1);
        assert_eq!(after.partitions()[0].proxy, 2);
        assert_eq!(after.proxies()[2].config_epoch, 4);
        assert_eq!(after.proxies()[0].config_epoch, 1);
        assert_eq!(after.current_epoch(), 4);
        assert_eq!(after.partition_of(0).proxy, 2);
        assert_eq!(after.partitions()[1], before.partitions()[1]);
        assert!(before.same_cluster(&after).is_ok());
        let again = after.moved(4, "p1").unwrap();
        assert_eq!(again.proxies()[1].config_epoch, 5);
    }

    #[test]
    fn a_move_that_cannot_be_is_refused_by_name() {
        let map = map();
        assert_eq!(
            map.moved(9, "p1"),
            Err(ChangeError::NoPartition {
                partition: 9,
                count: 6
            })
        );
        assert!(matches!(
            map.moved(0, "p7"),
            Err(ChangeError::NoProxy { .. })
        ));
        assert!(matches!(
            map.moved(0, "p0"),
            Err(ChangeError::AlreadyThere { .. })
        ));
        let emptied = map.moved(0, "p1").unwrap();
        assert_eq!(
            emptied.moved(1, "p2"),
            Err(ChangeError::LastPartition {
                partition: 1,
                proxy: "p0".into()
            })
        );
    }

    #[test]
    fn the_newest_map_wins_and_a_conflict_is_named() {
        let old = map();
        let new = old.moved(0, "p1").unwrap();
        assert_eq!(old.clone().newest(new.clone()).unwrap(), new);
        assert_eq!(new.clone().newest(old.clone()).unwrap(), new);
        let rival = old.moved(0, "p2").unwrap();
        assert_eq!(new.newest(rival), Err(ChangeError::SameEpoch(1)));
        let proxies = vec![("x".to_string(), "127.0.0.1:1".to_string())];
        let other = ClusterMap::even(&proxies, 6, "memory").unwrap();
        assert!(matches!(
            old.newest(other),
            Err(ChangeError::OtherCluster(_))
        ));
    }

    #[test]
    fn an_added_proxy_hosts_nothing_and_its_map_is_the_newest() {
        let before = map().moved(0, "p2").unwrap();
        let after = before.with_proxy("d", "127.0.0.1:7010").unwrap();
        assert_eq!(after.epoch(), 2);
        assert_eq!(after.proxies().len(), 4);
        assert_eq!(after.hosted_by(3).count(), 0);
        assert_eq!(after.partitions(), before.partitions());
        // Unique config epochs: the moved-to proxy's stays, the new one gets the current one.
        let epochs: Vec<u64> = after.proxies().iter().map(|p| p.config_epoch).collect();
        assert_eq!(epochs, vec![1, 2, 4, 6]);
        assert_eq!(after.current_epoch(), 6);
        assert_eq!(before.cluster_digest(), after.cluster_digest());
        assert_eq!(before.clone().newest(after.clone()).unwrap(), after);
        assert_eq!(after.clone().newest(before.clone()).unwrap(), after);
        // Read back from its file, as a proxy keeps it.
        assert_eq!(ClusterMap::from_toml(&after.to_toml()).unwrap(), after);
        let to_new = after.moved(2, "d").unwrap();
        assert_eq!(to_new.partitions()[2].proxy, 3);
        // A map with fewer proxies than an older one is not a later map of this cluster.
        let forged = before.clone().with_epochs(3, &[]);
        assert!(matches!(
            after.newest(forged),
            Err(ChangeError::OtherCluster(_))
        ));
    }

    #[test]
    fn a_proxy_that_cannot_join_is_refused_by_name() {
        let map = map();
        let refused = |name: &str, address: &str| map.with_proxy(name, address).unwrap_err();
        assert_eq!(
            refused("p1", "127.0.0.1:7010"),
            ChangeError::Proxy(MapError::DuplicateProxy("p1".into()))
        );
        assert!(matches!(
            refused("d", "127.0.0.1:7001"),
            ChangeError::Proxy(MapError::DuplicateAddress { .. })
        ));
        for bad in ["", "a b", "d\nepoch", "é", &"x".repeat(65)] {
            assert_eq!(
                refused(bad, "127.0.0.1:7010"),
                ChangeError::Proxy(MapError::BadName(bad.to_string())),
                "{bad:?}"
            );
        }
        assert!(matches!(
            refused("d", "127.0.0.1"),
            ChangeError::Proxy(MapError::BadAddress { .. })
        ));
        assert!(map.with_proxy("proxy-4.b_c", "h:1").is_ok());
    }

    #[test]
    fn a_moved_map_keeps_its_cluster_digest_and_another_cluster_has_another() {
        let map = map();
        let moved = map.moved(0, "p2").unwrap();
        assert_eq!(map.cluster_digest(), moved.cluster_digest());
        assert_eq!(map.cluster_digest().len(), 16);
        let proxies: Vec<(String, String)> = (0..3)
            .map(|i| (format!("p{i}"), format!("127.0.0.1:{}", 7000 + i)))
            .collect();
        let other = ClusterMap::even(&proxies, 6, "redis://h:1?prefix=q{partition}:").unwrap();
        assert_ne!(map.cluster_digest(), other.cluster_digest());
    }
}
