//! A proxy in a Cloak cluster: which of its partitions' cores a command goes to, and the
//! redirections and refusals a Redis Cluster node gives.
//!
//! A plain proxy has one store and sends everything to its core. A cluster proxy hosts one or
//! more partitions, each an ordinary store with its own core (engine, schedule, journal,
//! storage). A command's keys must all hash to one slot (else `-CROSSSLOT`, as Redis); the
//! slot's partition runs it if this proxy hosts it, and otherwise the client is sent to the
//! proxy that does (`-MOVED slot host:port`), or with `--cluster-forward` the command is sent
//! there and its reply relayed ([`forward`]). Commands without keys (DBSIZE, KEYS, SCAN, FLUSHDB,
//! …) run on every partition hosted here and their answers are merged ([`fanout`]), as a Redis
//! Cluster node answers for its own slots.
//!
//! A partition that cannot serve (its proxy has failed, or its storage fails) gets
//! `-CLUSTERDOWN` errors that say which and why ([`health`], from the [`probe`]s); the others
//! keep serving.
//!
//! Routing is decided here, in memory, from the public map: the storage server sees each
//! partition's own fixed schedule whatever is routed where (see `cloak_cluster`). The map
//! changes only when an operator moves a partition ([`handoff`]); [`runtime`] holds the map and
//! the partitions served now, and routes each command by one snapshot of them.

pub mod fanout;
pub mod forward;
pub mod handoff;
pub mod health;
pub mod health_report;
pub mod peer;
pub mod probe;
pub mod replies;
pub mod runtime;

use bytes::Bytes;
use std::sync::Arc;

use cloak_cluster::{ClusterMap, CrossSlot, slot};
use cloak_core::Command;

use self::forward::Remote;
use self::health::{Health, OnPartition};
use crate::core::CoreHandle;
use crate::resp::Reply;
pub use runtime::{Node, PartitionHost};

/// Where a proxy's key commands go.
pub enum Cores {
    /// A proxy of one store: every command goes to its core.
    Single(CoreHandle),
    /// A proxy in a cluster: each command goes to the partition owning its keys' slot.
    Cluster(Arc<Node>),
}

/// The partitions a cluster proxy serves at one moment, and the map of the rest.
#[derive(Clone)]
pub struct Hosted {
    pub map: Arc<ClusterMap>,
    /// This proxy, an index into the map's proxies.
    pub me: usize,
    /// The cores of the partitions hosted here, in partition order (the order SCAN walks them).
    cores: Vec<(usize, CoreHandle)>,
    /// Partitions being handed over to or from this proxy: not served here now, and commands for
    /// their slots wait for the hand-off rather than being redirected (see [`handoff`]).
    moving: Vec<usize>,
    /// Of `moving`, those whose storage this proxy still uses: draining one it releases, or
    /// starting one it takes on. Another proxy must not take these (see [`handoff`]).
    busy: Vec<usize>,
    /// Which proxies and partitions can serve: one for the proxy's life, shared by every
    /// snapshot, and told of each change by [`Node`] (so what the probes learnt survives moves).
    health: Arc<Health>,
}

/// Where one command runs.
pub enum Route {
    /// On this core (of a proxy that is not in a cluster).
    One(CoreHandle),
    /// On this core of a partition hosted here, for a key of this slot.
    Partition(CoreHandle, OnPartition),
    /// On every partition hosted here (a command without keys in a cluster).
    Every(Arc<Hosted>),
    /// On another proxy, which hosts the slot: the session redirects the client there
    /// (`-MOVED`), forwards the command, or refuses it ([`forward`]).
    Remote(Remote),
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
        // A proxy may host nothing: one just added to the cluster, until a move gives it a
        // partition.
        if expected != given {
            return Err(format!(
                "proxy {} hosts partitions {expected:?} in the cluster map, but {given:?} were \
                 started",
                map.proxies().get(me).map_or("?", |p| p.name.as_str())
            ));
        }
        let health = Arc::new(Health::new(map.clone(), me, local_storage(&cores)));
        Ok(Self {
            map,
            me,
            cores,
            moving: Vec::new(),
            busy: Vec::new(),
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

    /// Tells the health this snapshot's map and partitions, before it is swapped in.
    fn tell_health(&self) {
        self.health.rehost(
            self.map.clone(),
            local_storage(&self.cores),
            self.moving.clone(),
            self.busy.clone(),
        );
    }

    /// Where a command for `slot` runs (another proxy, for a slot not hosted here), the error a
    /// Redis Cluster node would give, or `None` while the slot's partition is handed over.
    fn route_slot(&self, slot: u16) -> Result<Option<Route>, Reply> {
        let partition = self.map.partition_of(slot);
        if let Some(core) = self.core_of(partition.index) {
            let on = OnPartition {
                health: self.health.clone(),
                partition: partition.index,
                slot,
            };
            return Ok(Some(Route::Partition(core.clone(), on)));
        }
        if self.moving.contains(&partition.index) {
            return Ok(None);
        }
        if let Some(refused) = self.health.refusal(slot, partition.index) {
            return Err(refused);
        }
        let owner = &self.map.proxies()[partition.proxy];
        Ok(Some(Route::Remote(Remote {
            slot,
            address: owner.address(),
        })))
    }
}

/// The storage health of each of `cores`' partitions.
fn local_storage(
    cores: &[(usize, CoreHandle)],
) -> Vec<(usize, Arc<crate::storage_health::StorageHealth>)> {
    cores
        .iter()
        .map(|(partition, core)| (*partition, core.storage_health().clone()))
        .collect()
}

impl Cores {
    /// Where `command` runs, or the error a Redis Cluster node would give.
    pub async fn route(&self, command: &Command) -> Result<Route, Reply> {
        match command {
            // The only command whose keys are not in `keys()`: it reads none.
            Command::Watch(keys) => self.route_keys(keys).await,
            command => self.route_keys(&command.keys()).await,
        }
    }

    /// Where a command naming `keys` runs, or the error a Redis Cluster node would give; while
    /// their partition is handed over, once the hand-off is done (see [`runtime`]).
    pub async fn route_keys(&self, keys: &[Bytes]) -> Result<Route, Reply> {
        let node = match self {
            Cores::Single(core) => return Ok(Route::One(core.clone())),
            Cores::Cluster(node) => node,
        };
        match slot::common_slot(keys.iter().map(|key| key.as_ref())) {
            Err(cross @ CrossSlot) => Err(Reply::Error(cross.to_string())),
            Ok(None) => Ok(Route::Every(node.current())),
            Ok(Some(slot)) => node.route_slot(slot).await,
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
    /// transaction or script that names no key): the only one, or the first partition's; `None`
    /// for a cluster proxy that hosts no partition (one added to the cluster, before a move
    /// gives it one).
    pub fn first(&self) -> Option<CoreHandle> {
        match self {
            Cores::Single(core) => Some(core.clone()),
            Cores::Cluster(node) => node.current().cores.first().map(|(_, core)| core.clone()),
        }
    }

    /// The cluster this proxy is part of, as it is now, if any.
    pub fn cluster(&self) -> Option<Arc<Hosted>> {
        match self {
            Cores::Single(_) => None,
            Cores::Cluster(node) => Some(node.current()),
        }
    }

    /// Where commands for other proxies' slots are forwarded, if this proxy forwards them.
    pub fn forwarder(&self) -> Option<&Arc<forward::Forwarder>> {
        self.node()?.forwarder()
    }

    /// The cluster node's changing state, if this proxy is part of a cluster.
    pub fn node(&self) -> Option<&Arc<Node>> {
        match self {
            Cores::Single(_) => None,
            Cores::Cluster(node) => Some(node),
        }
    }
}
