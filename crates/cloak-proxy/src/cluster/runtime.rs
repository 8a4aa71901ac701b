//! The cluster map as it changes while the proxy runs: which partitions this proxy serves now,
//! which it is handing over or taking on, and the newest map it knows.
//!
//! Routing reads one [`Hosted`] snapshot per command (an `Arc` cloned under a read lock held for
//! no longer than the clone); a change builds a new snapshot and swaps it in, so a command is
//! routed by one whole map, never by half of an old and half of a new one. A command for a
//! partition that is being handed over waits for the next change (at most [`HANDOFF_WAIT`]),
//! then is routed again: to the new owner with `-MOVED`, to the partition's core if it came back,
//! or, still waiting, answered `-TRYAGAIN` as Redis answers during a slot migration. Nothing is
//! ever answered by a partition that is not running here.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cloak_cluster::{ClusterMap, Partition, Proxy};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinError;

use super::forward::Forwarder;
use super::health_report::{HealthError, HealthReport};
use super::{Hosted, Route};
use crate::HostedStore;
use crate::core::{self, CoreHandle};
use crate::resp::Reply;

/// How long a command for a partition in hand-off waits before it is answered `-TRYAGAIN`:
/// long enough for a small partition's whole hand-off, short enough that a client's own
/// timeout does not fire first.
pub const HANDOFF_WAIT: Duration = Duration::from_secs(1);

/// A future the program that runs the proxy gives back.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a cluster proxy needs from the program that runs it to take partitions on and off
/// while it serves: the key and storage of a partition, and where its map is kept.
pub trait PartitionHost: Send + Sync {
    /// The fingerprint of the key this proxy has for `partition` (it names the key and reveals
    /// nothing of it), or what is missing.
    fn key_id(&self, partition: usize) -> Result<String, String>;

    /// Whether this proxy could start `partition` from its storage alone: it has the key whose
    /// fingerprint is `key_id`, and the partition's storage answers. Says what is missing.
    fn check<'a>(
        &'a self,
        partition: &'a Partition,
        key_id: &'a str,
    ) -> BoxFuture<'a, Result<(), String>>;

    /// Starts `partition` from its storage alone, through the same recovery and checks as a
    /// restart.
    fn open<'a>(&'a self, partition: &'a Partition) -> BoxFuture<'a, Result<HostedStore, String>>;

    /// Keeps `map` where this proxy's next start reads it (see `cloak proxy --cluster`).
    fn persist(&self, map: &ClusterMap) -> Result<(), String>;

    /// The `CLOAK.HEALTH` answer of `proxy` (which partitions it serves and which it hands
    /// over), or why it cannot be had or believed: with a cluster secret, only an answer that
    /// proxy signed for a fresh nonce (see [`super::health_report::ask`]), since a move
    /// relies on it.
    fn peer_health<'a>(
        &'a self,
        proxy: &'a Proxy,
    ) -> BoxFuture<'a, Result<HealthReport, HealthError>>;
}

/// A core's task as the proxy watches it: it ends when the core has drained (`Ok`), or with
/// the core's panic.
pub(crate) type CoreTask = Pin<Box<dyn Future<Output = Result<(), JoinError>> + Send>>;

/// Starts cores and hands their tasks to the proxy's main loop, which stops the proxy if one
/// panics.
pub(crate) struct CoreSpawner {
    pub storage_io: tokio::runtime::Handle,
    pub tasks: mpsc::UnboundedSender<CoreTask>,
    /// Run once by each core when its start is over (see [`crate::ProxyOptions::after_start`]).
    pub after_start: Option<fn()>,
}

impl CoreSpawner {
    /// Starts a core for `store`; the receiver closes once the core has drained and stopped.
    pub fn spawn(
        &self,
        store: HostedStore,
    ) -> std::io::Result<(CoreHandle, oneshot::Receiver<()>)> {
        let (handle, task) = core::spawn(
            store.engine,
            store.storage,
            store.journal,
            store.ledger,
            store.recovery_spool,
            self.storage_io.clone(),
            self.after_start,
        )?;
        let (stopped, on_stop) = oneshot::channel::<()>();
        let watched: CoreTask = Box::pin(async move {
            let ended = task.await;
            drop(stopped);
            ended
        });
        self.tasks
            .send(watched)
            .map_err(|_| std::io::Error::other("the proxy is shutting down"))?;
        Ok((handle, on_stop))
    }
}

/// A cluster proxy's changing state.
pub struct Node {
    /// What routing reads.
    now: RwLock<Arc<Hosted>>,
    /// The newest map this proxy knows and has kept: ahead of `now`'s between releasing a
    /// partition and learning that its new owner serves it.
    known: RwLock<Arc<ClusterMap>>,
    /// Bumped at every change of `now`, for commands waiting on a hand-off.
    changes: watch::Sender<u64>,
    /// Closes when each running partition's core has stopped.
    stopped: Mutex<HashMap<usize, oneshot::Receiver<()>>>,
    spawner: CoreSpawner,
    /// `None`: the proxy was started without a way to open partitions (`cloak cluster up`), so
    /// it refuses moves.
    host: Option<Arc<dyn PartitionHost>>,
    /// One hand-off at a time.
    turn: tokio::sync::Mutex<()>,
    /// `Some`: commands for other proxies' slots are forwarded there (`--cluster-forward`).
    forwarder: Option<Arc<Forwarder>>,
    /// How long a release waits for its partition's core to stop (see
    /// [`super::handoff::RELEASE_TIMEOUT`]).
    pub(crate) release_timeout: Duration,
}

impl Node {
    pub(crate) fn new(
        hosted: Hosted,
        stopped: HashMap<usize, oneshot::Receiver<()>>,
        spawner: CoreSpawner,
        host: Option<Arc<dyn PartitionHost>>,
        forwarder: Option<Arc<Forwarder>>,
        release_timeout: Duration,
    ) -> Self {
        Self {
            known: RwLock::new(hosted.map.clone()),
            now: RwLock::new(Arc::new(hosted)),
            changes: watch::channel(0).0,
            stopped: Mutex::new(stopped),
            spawner,
            host,
            turn: tokio::sync::Mutex::new(()),
            forwarder,
            release_timeout,
        }
    }

    /// Where commands for other proxies' slots are forwarded, if they are.
    pub fn forwarder(&self) -> Option<&Arc<Forwarder>> {
        self.forwarder.as_ref()
    }

    /// What this proxy serves now, and the map it routes by.
    pub fn current(&self) -> Arc<Hosted> {
        match self.now.read() {
            Ok(now) => now.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The newest map this proxy knows (what `CLOAK MAP` answers).
    pub fn known(&self) -> Arc<ClusterMap> {
        match self.known.read() {
            Ok(known) => known.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Where a command for `slot` runs, waiting (up to [`HANDOFF_WAIT`]) while its partition
    /// is handed over.
    pub async fn route_slot(&self, slot: u16) -> Result<Route, Reply> {
        let mut changes = self.changes.subscribe();
        let deadline = tokio::time::Instant::now() + HANDOFF_WAIT;
        loop {
            // The snapshot is let go before waiting: it may hold a handle to a core that a
            // release is waiting to see stop.
            let partition = {
                let hosted = self.current();
                if let Some(route) = hosted.route_slot(slot)? {
                    return Ok(route);
                }
                hosted.map.partition_of(slot).index
            };
            let changed = tokio::time::timeout_at(deadline, changes.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return Err(Reply::Error(format!(
                    "TRYAGAIN partition {partition} (slot {slot}) is moving between proxies; \
                     try again shortly"
                )));
            }
        }
    }

    pub(crate) fn host(&self) -> Result<&Arc<dyn PartitionHost>, String> {
        self.host.as_ref().ok_or_else(|| {
            "this proxy cannot take partitions on or off (a `cloak cluster up` cluster lives in \
             one process; start proxies with `cloak proxy --cluster`)"
                .to_string()
        })
    }

    pub(crate) async fn take_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// Swaps in the snapshot `change` makes of the current one, and wakes waiting commands.
    pub(crate) fn change(&self, change: impl FnOnce(&Hosted) -> Hosted) {
        {
            let mut now = match self.now.write() {
                Ok(now) => now,
                Err(poisoned) => poisoned.into_inner(),
            };
            let next = change(&now);
            next.tell_health();
            *now = Arc::new(next);
        }
        self.changes.send_modify(|count| *count += 1);
    }

    /// Keeps `map` (through the host) and makes it the newest known.
    pub(crate) fn keep(&self, map: &Arc<ClusterMap>) -> Result<(), String> {
        self.host()?.persist(map)?;
        let mut known = match self.known.write() {
            Ok(known) => known,
            Err(poisoned) => poisoned.into_inner(),
        };
        *known = map.clone();
        Ok(())
    }

    /// Starts a core for `store`, to be served as `partition`.
    pub(crate) fn start_core(
        &self,
        partition: usize,
        store: HostedStore,
    ) -> Result<CoreHandle, String> {
        let (core, stopped) = self.spawner.spawn(store).map_err(|e| e.to_string())?;
        self.stopped_lock().insert(partition, stopped);
        Ok(core)
    }

    /// The signal that `partition`'s core has stopped, taken to wait on.
    pub(crate) fn take_stopped(&self, partition: usize) -> Option<oneshot::Receiver<()>> {
        self.stopped_lock().remove(&partition)
    }

    fn stopped_lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, oneshot::Receiver<()>>> {
        match self.stopped.lock() {
            Ok(stopped) => stopped,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}
