//! A proxy in a Cloak cluster: which of its partitions' cores a command goes to, and the
//! redirections and refusals a Redis Cluster node gives.
//!
//! A plain proxy has one store and sends everything to its core. A cluster proxy hosts one or
//! more partitions, each an ordinary store with its own core (engine, schedule, journal,
//! storage). A command's keys must all hash to one slot (else `-CROSSSLOT`, as Redis); the
//! slot's partition runs it if this proxy hosts it, and otherwise the client is sent to the
//! proxy that does (`-MOVED slot host:port`). Commands without keys (DBSIZE, KEYS, SCAN, FLUSHDB,
//! …) run on every partition hosted here and their answers are merged ([`fanout`]), as a Redis
//! Cluster node answers for its own slots.
//!
//! A partition that cannot serve (its proxy has failed, or its storage fails) gets
//! `-CLUSTERDOWN` errors that say which and why ([`health`], from the [`probe`]s); the others
//! keep serving.
//!
//! Routing is decided here, in memory, from the public map: the storage server sees each
//! partition's own fixed schedule whatever is routed where (see `cloak_cluster`).

pub mod fanout;
pub mod health;
pub mod probe;
pub mod replies;

use std::sync::Arc;

use bytes::Bytes;
use cloak_cluster::{ClusterMap, CrossSlot, slot};
use cloak_core::Command;

use self::health::{Health, OnPartition};
use crate::core::CoreHandle;
use crate::resp::Reply;

/// Where a proxy's key commands go.
pub enum Cores {
    /// A proxy of one store: every command goes to its core.
    Single(CoreHandle),
    /// A proxy in a cluster: each command goes to the partition owning its keys' slot.
    Cluster(Hosted),
}

/// The partitions a cluster proxy hosts, and the map of the rest.
pub struct Hosted {
    pub map: Arc<ClusterMap>,
    /// This proxy, an index into the map's proxies.
    pub me: usize,
    /// The cores of the partitions hosted here, in partition order (the order SCAN walks them).
    cores: Vec<(usize, CoreHandle)>,
    /// Which proxies and partitions can serve.
    health: Arc<Health>,
}

/// Where one command runs.
pub enum Route<'a> {
    /// On this core (of a proxy that is not in a cluster).
    One(&'a CoreHandle),
    /// On this core of a partition hosted here, for a key of this slot.
    Partition(&'a CoreHandle, OnPartition),
    /// On every partition hosted here (a command without keys in a cluster).
    Every(&'a Hosted),
}

impl Hosted {
    /// `cores` are the cores of the partitions the map gives proxy `me`, by partition number;
    /// none may be missing, since clients are never redirected away from here for them.
    pub fn new(
        map: Arc<ClusterMap>,
        me: usize,
        mut cores: Vec<(usize, CoreHandle)>,
    ) -> Result<Self, String> {
        cores.sort_by_key(|(partition, _)| *partition);
        let expected: Vec<usize> = map.hosted_by(me).map(|p| p.index).collect();
        let given: Vec<usize> = cores.iter().map(|(partition, _)| *partition).collect();
        if expected != given || expected.is_empty() {
            return Err(format!(
                "proxy {} hosts partitions {expected:?} in the cluster map, but {given:?} were \
                 started",
                map.proxies().get(me).map_or("?", |p| p.name.as_str())
            ));
        }
        let storage = cores
            .iter()
            .map(|(partition, core)| (*partition, core.storage_health().clone()))
            .collect();
        let health = Arc::new(Health::new(map.clone(), me, storage));
        Ok(Self {
            map,
            me,
            cores,
            health,
        })
    }

    /// Which proxies and partitions can serve.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// The hosted partitions' cores, in partition order.
    pub fn cores(&self) -> &[(usize, CoreHandle)] {
        &self.cores
    }

    fn core_of(&self, partition: usize) -> Option<&CoreHandle> {
        self.cores
            .iter()
            .find(|(hosted, _)| *hosted == partition)
            .map(|(_, core)| core)
    }
}

impl Cores {
    /// Where `command` runs, or the error a Redis Cluster node would give.
    pub fn route(&self, command: &Command) -> Result<Route<'_>, Reply> {
        match (self, command) {
            (Cores::Single(core), _) => Ok(Route::One(core)),
            // The only command whose keys are not in `keys()`: it reads none.
            (Cores::Cluster(_), Command::Watch(keys)) => self.route_keys(keys),
            (Cores::Cluster(_), command) => self.route_keys(&command.keys()),
        }
    }

    /// Where a command naming `keys` runs, or the error a Redis Cluster node would give.
    pub fn route_keys(&self, keys: &[Bytes]) -> Result<Route<'_>, Reply> {
        let hosted = match self {
            Cores::Single(core) => return Ok(Route::One(core)),
            Cores::Cluster(hosted) => hosted,
        };
        let slot = match slot::common_slot(keys.iter().map(|key| key.as_ref())) {
            Err(cross @ CrossSlot) => return Err(Reply::Error(cross.to_string())),
            Ok(None) => return Ok(Route::Every(hosted)),
            Ok(Some(slot)) => slot,
        };
        let partition = hosted.map.partition_of(slot);
        match hosted.core_of(partition.index) {
            Some(core) => Ok(Route::Partition(
                core,
                OnPartition {
                    health: hosted.health.clone(),
                    partition: partition.index,
                    slot,
                },
            )),
            None => {
                if let Some(refused) = hosted.health.refusal(slot, partition.index) {
                    return Err(refused);
                }
                let owner = &hosted.map.proxies()[partition.proxy];
                Err(Reply::Error(format!("MOVED {slot} {}", owner.address())))
            }
        }
    }

    /// The partition that runs a command naming `keys`, in a cluster: the keys' partition, or
    /// for no keys the first hosted one (see [`Cores::first`]). `None` for a single store or
    /// keys that span slots (refused before they run).
    pub fn partition_for(&self, keys: &[Bytes]) -> Option<usize> {
        let hosted = self.cluster()?;
        match slot::common_slot(keys.iter().map(|key| key.as_ref())) {
            Ok(Some(slot)) => Some(hosted.map.partition_of(slot).index),
            Ok(None) => hosted.cores.first().map(|(partition, _)| *partition),
            Err(CrossSlot) => None,
        }
    }

    /// The core that answers for the whole proxy where one must (INFO's store figures, a
    /// transaction or script that names no key): the only one, or the first partition's.
    pub fn first(&self) -> &CoreHandle {
        match self {
            Cores::Single(core) => core,
            // `Hosted::new` refuses a proxy that hosts nothing.
            Cores::Cluster(hosted) => &hosted.cores[0].1,
        }
    }

    /// The cluster this proxy is part of, if any.
    pub fn cluster(&self) -> Option<&Hosted> {
        match self {
            Cores::Single(_) => None,
            Cores::Cluster(hosted) => Some(hosted),
        }
    }
}
