//! What a cluster proxy knows of the cluster's health: whether each other proxy answers its
//! probes ([`super::probe`]), and whether each partition's storage answers (its own partitions'
//! from their cores, the others' as their proxies report them).
//!
//! From this come `CLUSTER NODES`' `fail?`/`fail` flags, `CLUSTER INFO`'s `cluster_state` and
//! slot counts, and the `-CLUSTERDOWN` errors that name the partition, the proxy and why. As in
//! Redis, a proxy that stopped answering is first only suspected (`fail?`: clients are still sent
//! to it with `-MOVED`, since a busy proxy can miss a probe) and after [`NODE_TIMEOUT`] marked
//! failed (`fail`: its slots are answered here with `-CLUSTERDOWN`).
//!
//! None of this reaches the storage server: probes go between proxies, on their client ports,
//! on a fixed timer; a refused request is one that never reaches a partition; and a partition
//! whose storage fails still gets every request, so that its scheme's traffic stays what its
//! schedule says (a failure only changes the error its client gets).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cloak_cluster::{ClusterMap, SLOTS};
use cloak_core::{CommandError, Outcome, SchemeError};

use super::health_report::{HealthReport, PartitionState};
use crate::connection::to_reply;
use crate::resp::Reply;
use crate::storage_health::{Failure, StorageHealth};

/// How often each other proxy is probed.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long a probe may take before it counts as unanswered (a loaded proxy answers late, not
/// never, so this is well above a probe's usual microseconds).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a proxy is only suspected (`fail?`) before it is failed (`fail`): Redis's
/// `cluster-node-timeout`, shorter since no majority has to agree.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(3);

/// What Redis's `CLUSTER NODES` flags say of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Answering.
    Ok,
    /// Not answering, for less than [`NODE_TIMEOUT`] (`fail?`).
    Suspected,
    /// Not answering for [`NODE_TIMEOUT`] or more (`fail`).
    Failed,
}

/// Why another proxy does not answer.
#[derive(Clone, Debug)]
struct Down {
    since: SystemTime,
    at: Instant,
    why: String,
}

/// What the probes found of one other proxy.
#[derive(Clone, Debug, Default)]
struct Peer {
    /// Set while it does not answer.
    down: Option<Down>,
    /// When it last answered, in ms since the Unix epoch (0: never), for `CLUSTER NODES`.
    pong_ms: u64,
    /// Its partitions whose storage fails, and why, as it said at its last answer.
    failing: Vec<(usize, String)>,
}

/// The health of the whole cluster, as this proxy sees it.
pub struct Health {
    me: usize,
    /// The map and this proxy's partitions now: they change when a partition moves.
    view: RwLock<Arc<View>>,
    /// One entry per proxy of the map (this one's stays empty). A move changes which proxy
    /// hosts a partition, never the proxies, and a proxy added goes at the end of the list, so
    /// these outlive every change of the map (an added proxy's entry is added with it).
    peers: Mutex<Vec<Peer>>,
}

/// The map and this proxy's partitions, as routing sees them now.
struct View {
    map: Arc<ClusterMap>,
    /// The storage health of each partition served here.
    local: Vec<(usize, Arc<StorageHealth>)>,
    /// Partitions being handed over to or from this proxy.
    moving: Vec<usize>,
    /// Of those, the ones whose storage this proxy still uses (draining or starting).
    busy: Vec<usize>,
}

impl Health {
    /// Every other proxy counts as answering until a probe says otherwise.
    pub fn new(map: Arc<ClusterMap>, me: usize, local: Vec<(usize, Arc<StorageHealth>)>) -> Self {
        let peers = Mutex::new(vec![Peer::default(); map.proxies().len()]);
        let view = RwLock::new(Arc::new(View {
            map,
            local,
            moving: Vec::new(),
            busy: Vec::new(),
        }));
        Self { me, view, peers }
    }

    /// The map routing reads now, the partitions served here, and those being handed over.
    pub fn rehost(
        &self,
        map: Arc<ClusterMap>,
        local: Vec<(usize, Arc<StorageHealth>)>,
        moving: Vec<usize>,
        busy: Vec<usize>,
    ) {
        {
            let mut peers = self.peers();
            let count = map.proxies().len();
            if peers.len() < count {
                peers.resize(count, Peer::default());
            }
        }
        let view = Arc::new(View {
            map,
            local,
            moving,
            busy,
        });
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = view;
    }

    fn view(&self) -> Arc<View> {
        self.view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The map this health is of now.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.view().map.clone()
    }

    /// This proxy, an index into the map's proxies.
    pub fn me(&self) -> usize {
        self.me
    }

    /// Proxy `proxy` answered a probe; `failing` are its partitions whose storage fails.
    pub fn answered(&self, proxy: usize, failing: Vec<(usize, String)>) {
        let mut peers = self.peers();
        let Some(peer) = peers.get_mut(proxy) else {
            return;
        };
        if let Some(down) = peer.down.take() {
            tracing::info!(proxy = %self.name(proxy), down_since = %rfc3339(down.since), "proxy answers again");
        }
        peer.pong_ms = unix_ms(SystemTime::now());
        peer.failing = failing;
    }

    /// Proxy `proxy` did not answer a probe, for `why`.
    pub fn unanswered(&self, proxy: usize, why: String) {
        let mut peers = self.peers();
        let Some(peer) = peers.get_mut(proxy) else {
            return;
        };
        match &mut peer.down {
            Some(down) => down.why = why,
            None => {
                tracing::warn!(proxy = %self.name(proxy), %why, "proxy does not answer");
                peer.down = Some(Down {
                    since: SystemTime::now(),
                    at: Instant::now(),
                    why,
                });
            }
        }
        peer.failing.clear();
    }

    /// Whether proxy `proxy` answers.
    pub fn node_state(&self, proxy: usize) -> NodeState {
        match self.peers().get(proxy).and_then(|peer| peer.down.clone()) {
            None => NodeState::Ok,
            Some(down) if down.at.elapsed() >= NODE_TIMEOUT => NodeState::Failed,
            Some(_) => NodeState::Suspected,
        }
    }

    /// When proxy `proxy` last answered, in ms since the Unix epoch (0: never, or this proxy).
    pub fn pong_ms(&self, proxy: usize) -> u64 {
        self.peers().get(proxy).map_or(0, |peer| peer.pong_ms)
    }

    /// Why partition `partition` cannot serve, if it cannot: how sure that is, and the cause.
    pub fn partition_problem(&self, partition: usize) -> Option<(NodeState, String)> {
        let view = self.view();
        let proxy = view.map.partitions().get(partition)?.proxy;
        if proxy == self.me {
            let (_, storage) = view.local.iter().find(|(index, _)| *index == partition)?;
            let failure = storage.failing()?;
            return Some((NodeState::Failed, storage_problem(&failure)));
        }
        let peer = self.peers().get(proxy)?.clone();
        if let Some(down) = peer.down {
            let why = format!(
                "the proxy does not answer since {}: {}",
                rfc3339(down.since),
                down.why
            );
            return Some((self.node_state(proxy), why));
        }
        let (_, why) = peer.failing.into_iter().find(|(p, _)| *p == partition)?;
        Some((NodeState::Failed, why))
    }

    /// The error for a request for `slot` of `partition` that cannot be served for `why`.
    fn cluster_down(&self, slot: u16, partition: usize, why: &str) -> Reply {
        let proxy = self.map().partitions()[partition].proxy;
        Reply::Error(format!(
            "CLUSTERDOWN Hash slot {slot} not served: partition {partition} on proxy {}: {why}",
            self.name(proxy)
        ))
    }

    /// The error for a request for `slot` (of `partition`, hosted by another proxy) if that
    /// proxy has failed; `None` while it answers or is only suspected (the client is redirected).
    pub fn refusal(&self, slot: u16, partition: usize) -> Option<Reply> {
        if self.map().partitions().get(partition)?.proxy == self.me {
            return None;
        }
        match self.partition_problem(partition)? {
            (NodeState::Failed, why) => Some(self.cluster_down(slot, partition, &why)),
            _ => None,
        }
    }

    /// Slots suspected and failed, for `CLUSTER INFO`.
    pub fn failing_slots(&self) -> (u16, u16) {
        let (mut suspected, mut failed) = (0, 0);
        for partition in self.map().partitions() {
            // The map's ranges cover the 16,384 slots once, so no sum overflows.
            let slots: u16 = partition
                .slots
                .iter()
                .map(|range| range.last - range.first + 1)
                .sum();
            match self.partition_problem(partition.index) {
                Some((NodeState::Suspected, _)) => suspected += slots,
                Some((NodeState::Failed, _)) => failed += slots,
                _ => {}
            }
        }
        debug_assert!(suspected + failed <= SLOTS);
        (suspected, failed)
    }

    /// What `CLOAK.HEALTH` answers (what the other proxies' probes read, and a proxy taking a
    /// partition on; see [`super::health_report`]): the map routing reads here, the partitions
    /// served here and those being handed over, `busy` while this proxy still uses their storage.
    pub fn report(&self) -> HealthReport {
        let view = self.view();
        let served = view.local.iter().map(|(partition, storage)| {
            let state = match storage.failing() {
                None => PartitionState::Ok,
                Some(failure) => PartitionState::Failing(storage_problem(&failure)),
            };
            (*partition, state)
        });
        let moving = view.moving.iter().map(|partition| {
            let state = match view.busy.contains(partition) {
                true => PartitionState::Busy,
                false => PartitionState::Moving,
            };
            (*partition, state)
        });
        HealthReport {
            epoch: view.map.epoch(),
            cluster: view.map.cluster_digest(),
            partitions: served.chain(moving).collect(),
        }
    }

    fn name(&self, proxy: usize) -> String {
        self.map().proxies().get(proxy).map_or_else(
            || format!("#{proxy}"),
            |p| format!("{} ({})", p.name, p.address()),
        )
    }

    fn peers(&self) -> MutexGuard<'_, Vec<Peer>> {
        // Each update is complete under the lock, so a panic elsewhere leaves it consistent.
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A request that reached a partition hosted here: its slot, so that a failure of the
/// partition's storage is answered with an error naming the partition and the cause.
pub struct OnPartition {
    pub health: Arc<Health>,
    pub partition: usize,
    pub slot: u16,
}

impl OnPartition {
    /// The client's reply to `outcome`: `-CLUSTERDOWN` if the partition's storage failed it (a
    /// cluster client then refreshes its map and tries again, as it does for Redis).
    pub fn reply(&self, outcome: Outcome) -> Reply {
        match outcome {
            Outcome::Error(CommandError::Scheme(SchemeError::StorageUnavailable(error))) => {
                let why = match self.health.partition_problem(self.partition) {
                    Some((_, why)) => why,
                    None => format!("storage unreachable: {error}"),
                };
                self.health.cluster_down(self.slot, self.partition, &why)
            }
            outcome => to_reply(outcome),
        }
    }
}

fn storage_problem(failure: &Failure) -> String {
    format!("storage unreachable {}", failure.describe())
}

fn rfc3339(at: SystemTime) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(at)
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_core::StorageError;

    fn map() -> Arc<ClusterMap> {
        let proxies = [("a", "127.0.0.1:1"), ("b", "127.0.0.1:2")]
            .map(|(name, address)| (name.to_string(), address.to_string()));
        Arc::new(ClusterMap::even(&proxies, 4, "memory").unwrap())
    }

    #[test]
    fn a_silent_proxy_is_suspected_then_failed_and_its_slots_refused() {
        let map = map();
        let theirs = map.hosted_by(1).next().unwrap().index;
        let slot = map.partitions()[theirs].slots[0].first;
        let health = Health::new(map, 0, Vec::new());
        assert_eq!(health.node_state(1), NodeState::Ok);
        health.unanswered(1, "connection refused".into());
        assert_eq!(health.node_state(1), NodeState::Suspected);
        assert!(
            health.refusal(slot, theirs).is_none(),
            "suspected: still MOVED"
        );
        assert_eq!(health.failing_slots(), (SLOTS / 2, 0));
        // Backdate the failure past the node timeout.
        health.peers()[1].down.as_mut().unwrap().at = Instant::now() - NODE_TIMEOUT;
        assert_eq!(health.node_state(1), NodeState::Failed);
        let Some(Reply::Error(line)) = health.refusal(slot, theirs) else {
            panic!("a failed proxy's slot is refused");
        };
        assert!(line.starts_with(&format!("CLUSTERDOWN Hash slot {slot} not served: partition {theirs} on proxy b (127.0.0.1:2): the proxy does not answer since ")), "{line}");
        assert!(line.ends_with("connection refused"), "{line}");
        assert_eq!(health.failing_slots(), (0, SLOTS / 2));
        health.answered(1, Vec::new());
        assert_eq!(health.node_state(1), NodeState::Ok);
        assert_eq!(health.failing_slots(), (0, 0));
    }

    #[test]
    fn a_partition_whose_storage_fails_is_reported_and_its_errors_name_it() {
        let map = map();
        let mine: Vec<usize> = map.hosted_by(0).map(|p| p.index).collect();
        let storage: Vec<(usize, Arc<StorageHealth>)> =
            mine.iter().map(|p| (*p, Arc::default())).collect();
        let health = Arc::new(Health::new(map, 0, storage.clone()));
        assert_eq!(
            health.report().to_string(),
            format!(
                "epoch 0 cluster {}\n{} ok\n{} ok\n",
                health.map().cluster_digest(),
                mine[0],
                mine[1]
            )
        );
        storage[1].1.failed("connection refused\r\nby redis".into());
        let report = health.report().to_string();
        assert!(
            report.starts_with(&format!(
                "epoch 0 cluster {}\n{} ok\n{} fail storage unreachable since ",
                health.map().cluster_digest(),
                mine[0],
                mine[1]
            )),
            "{report}"
        );
        assert!(
            report.ends_with("connection refused  by redis\n"),
            "{report}"
        );
        assert_eq!(health.failing_slots(), (0, SLOTS / 4));
        let on = OnPartition {
            health,
            partition: mine[1],
            slot: 7,
        };
        let down = StorageError("connection refused".into());
        let Reply::Error(line) = on.reply(Outcome::Error(CommandError::Scheme(
            SchemeError::StorageUnavailable(down),
        ))) else {
            panic!("an error");
        };
        assert!(line.starts_with(&format!("CLUSTERDOWN Hash slot 7 not served: partition {} on proxy a (127.0.0.1:1): storage unreachable since ", mine[1])), "{line}");
        assert_eq!(on.reply(Outcome::Ok), Reply::ok());
    }
}
