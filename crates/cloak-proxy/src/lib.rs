//! The Cloak proxy: a Redis-compatible front end over a scheme and a storage backend.
//!
//! ```text
//!  clients ──RESP──► connection (one task per client) ──► core (one task: the engine) ──► storage
//! ```
//!
//! - [`resp`]: request decoding and reply encoding.
//! - [`cmd`]: which commands exist and how their arguments parse.
//! - [`Listener`]: the ports clients connect to, plain or TLS.
//! - `connection`: a client's requests in, replies out in order.
//! - `session`: a connection's state, and the answer to each request.
//! - `clients`: the list of connected clients (`CLIENT LIST`, `CLIENT KILL`).
//! - [`core`]: the task that owns the engine and drives it with real time and storage.
//! - [`cluster`]: a proxy in a Cloak cluster: one core per partition it hosts, commands routed
//!   by hash slot, `-MOVED` and `-CROSSSLOT`, and the `CLUSTER` commands.
//! - `info`, `server_config`, `introspect`: the `INFO` text, `CONFIG GET`, `COMMAND`.
//!
//! [`run`] wires them to the listeners and returns on shutdown, after draining;
//! [`run_cluster`] does the same for a proxy hosting several partitions of a cluster.

mod budget;
mod clients;
pub mod cluster;
pub mod cmd;
mod connection;
pub mod core;
pub mod glob;
mod info;
mod introspect;
pub mod journal;
pub mod ledger;
mod listener;
pub mod metrics;
pub mod own_thread;
pub mod priority;
pub mod resp;
mod scripting;
mod server_config;
mod session;
pub mod state;
pub mod storage_health;
pub mod store_id;
mod unread;
mod wake;
mod warm_send;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cloak_cluster::{ClusterMap, ClusterSecret};
use cloak_core::Engine;
use cloak_storage::Storage;
use tokio::sync::Notify;

use crate::clients::ClientList;
use crate::cluster::runtime::{CoreSpawner, CoreTask};
use crate::cluster::{Cores, Hosted, Node};
use crate::resp::RequestLimits;

pub use budget::{CONNECTION_PENDING_BYTES, DEFAULT_PROXY_PENDING_BYTES};
pub use cluster::PartitionHost;
pub use cluster::runtime::BoxFuture;
pub use core::{CoreHandle, Snapshot, StatsHandle};
pub use journal::{DiskJournal, Journal, JournalError};
pub use ledger::{Ledger, LedgerError, StoreManifest};
pub use listener::Listener;
pub use own_thread::OwnThread;
pub use scripting::DEFAULT_TIME_LIMIT as DEFAULT_SCRIPT_TIME_LIMIT;
pub use state::{RecoveryReport, StateDir, StateError, Unreadable, discard_damaged, recover};
pub use store_id::{StoreId, StoreIdError, identify};

/// How many clients may be connected at once unless `--max-clients` says otherwise (Redis's
/// default too).
pub const DEFAULT_MAX_CLIENTS: usize = 10_000;

/// How long a client may stay connected without authenticating (when a password is set), unless
/// `--auth-timeout` says otherwise.
pub const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// Unauthenticated clients may take at most this share (1/N) of `--max-clients`: idle sockets
/// that never authenticate then leave most places to clients that do. A new one beyond it crowds
/// out the oldest, so they cannot keep a real client from connecting either.
pub const UNAUTHENTICATED_SHARE: usize = 8;

/// Bytes of replies a client may leave unread before it is disconnected, unless
/// `--client-reply-limit` says otherwise. A client that reads keeps far less waiting (replies
/// go out as they are ready, at most [`MIN_REPLY_LIMIT`] gathered); one that never reads would
/// otherwise hold its replies forever. 32 MiB (Redis's hard limit for pub/sub clients) still
/// lets a client write a deep pipeline before reading any of it, and is an eighth of the
/// proxy-wide [`DEFAULT_TOTAL_REPLY_LIMIT`], so one client cannot take most of it.
pub const DEFAULT_REPLY_LIMIT: usize = 32 << 20;

/// Bytes of replies all clients together may leave unread, unless `--total-reply-limit` says
/// otherwise; past it the client leaving the most is disconnected (see `unread`).
pub const DEFAULT_TOTAL_REPLY_LIMIT: usize = 256 << 20;

/// The smallest reply limit that never disconnects a client that reads: replies are gathered
/// up to this many bytes before they are written.
pub const MIN_REPLY_LIMIT: usize = connection::FLUSH_BYTES;

/// What a client that connects while `max_clients` are connected is told before it is closed.
pub const TOO_MANY_CLIENTS: &str = "-ERR max number of clients reached\r\n";

/// Front-end settings.
#[derive(Clone)]
pub struct ProxyOptions {
    /// Clients must `AUTH` with this before anything else.
    pub password: Option<String>,
    /// On a cluster proxy: the secret that authenticates the cluster's admin
    /// (`AUTH cloak-admin <secret>`), the only user allowed to move partitions. `None`: no
    /// connection may (see [`cmd::AdminRequest::needs_admin`]).
    pub cluster_secret: Option<Arc<ClusterSecret>>,
    /// On a cluster proxy: reach the other proxies over TLS with this (checking their
    /// certificates against the cluster's CA); `None`: in the clear (see [`cluster::peer`]).
    pub peer_tls: Option<cloak_storage::tls::ClientTls>,
    /// How long shutdown waits for acknowledged writes to reach storage.
    pub drain_timeout: Option<Duration>,
    /// On a cluster proxy: how long `CLOAK RELEASE` waits for the partition it releases to
    /// drain into storage before the move fails and the partition is served here again (see
    /// [`cluster::handoff::RELEASE_TIMEOUT`]).
    pub release_timeout: Duration,
    /// Where records only the proxy holds are kept durably; `None` keeps them in memory only.
    /// (A cluster proxy's partitions each bring their own: see [`HostedStore`].)
    pub journal: Option<Arc<dyn Journal>>,
    /// The state directory's ledger: a clean stop saves every slot's version there, for the next
    /// start to check storage against.
    pub ledger: Option<Arc<Ledger>>,
    /// The spool this start left in the state directory: deleted once storage holds every
    /// record (see [`state`]). (A cluster proxy's partitions each bring their own.)
    pub recovery_spool: Option<PathBuf>,
    /// Most clients connected at once; one more is refused with an error.
    pub max_clients: usize,
    /// With a password: how long a connection may stay unauthenticated before it is closed.
    pub auth_timeout: Duration,
    /// Bytes of unread replies after which a client is disconnected.
    pub reply_limit: usize,
    /// Bytes of unread replies of all clients together after which the client leaving the
    /// most is disconnected.
    pub total_reply_limit: usize,
    /// Bytes of requests the proxy holds between reading them and writing their replies.
    pub pending_limit: usize,
    /// Where the storage traffic runs ([`own_thread`]); `None`: on the caller's runtime
    /// (tests, where timing does not matter).
    pub storage_io: Option<tokio::runtime::Handle>,
    /// How long a Lua script may run before it is stopped with an error.
    pub script_time_limit: Duration,
    /// Called once by each store's core when its start is over (every recovered record is in
    /// storage again): the binary gives the memory recovery used back to the operating system
    /// there at once, rather than whenever its allocator would on its own.
    pub after_start: Option<fn()>,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        Self {
            password: None,
            cluster_secret: None,
            peer_tls: None,
            drain_timeout: None,
            release_timeout: cluster::handoff::RELEASE_TIMEOUT,
            journal: None,
            ledger: None,
            recovery_spool: None,
            max_clients: DEFAULT_MAX_CLIENTS,
            auth_timeout: DEFAULT_AUTH_TIMEOUT,
            reply_limit: DEFAULT_REPLY_LIMIT,
            total_reply_limit: DEFAULT_TOTAL_REPLY_LIMIT,
            pending_limit: DEFAULT_PROXY_PENDING_BYTES,
            storage_io: None,
            script_time_limit: scripting::DEFAULT_TIME_LIMIT,
            after_start: None,
        }
    }
}

/// The longest reply a key command can get from a proxy with these request limits: an MGET of as
/// many keys as a request may name, each value with its framing. What forwarding reads from
/// another proxy is bounded by it.
fn largest_reply(limits: &RequestLimits) -> usize {
    limits
        .max_args
        .saturating_mul(limits.max_bulk.saturating_add(16))
}

/// One store a proxy serves: its engine, its storage, and where its acknowledged writes and
/// slot versions are kept.
pub struct HostedStore {
    pub engine: Engine,
    pub storage: Arc<dyn Storage>,
    pub journal: Option<Arc<dyn Journal>>,
    pub ledger: Option<Arc<Ledger>>,
    /// The spool its start left in the state directory (see [`ProxyOptions::recovery_spool`]).
    pub recovery_spool: Option<PathBuf>,
}

/// A proxy's place in a cluster: the public map, and which of its proxies this one is.
pub struct ClusterRole {
    pub map: Arc<ClusterMap>,
    /// An index into the map's proxies.
    pub me: usize,
    /// How this proxy opens a partition moved to it and keeps a changed map; `None` refuses
    /// moves (see [`cluster::handoff`]).
    pub host: Option<Arc<dyn PartitionHost>>,
    /// The store settings' limits (every partition's), for a proxy that starts hosting no
    /// partition (one just added to the cluster) and so has no engine to read them from.
    pub limits: cloak_core::Limits,
    /// Forward commands for other proxies' slots there instead of answering `-MOVED`, for
    /// clients that are not cluster-aware (see [`cluster::forward`]).
    pub forward: bool,
}

/// What every connection shares.
pub struct FrontEnd {
    /// Where key commands go: the store's core, or in a cluster each partition's.
    cores: Cores,
    password: Option<String>,
    /// See [`ProxyOptions::cluster_secret`].
    cluster_secret: Option<Arc<ClusterSecret>>,
    /// How long a connection may stay unauthenticated.
    auth_timeout: Duration,
    /// Request limits once a client is authenticated (before, [`RequestLimits::UNAUTHENTICATED`]).
    request_limits: RequestLimits,
    reply_limit: usize,
    /// Write a connection's ready replies as soon as the next is not ready (see
    /// [`cloak_core::Scheme::answers_on_a_schedule`]); otherwise gather them until none is
    /// queued.
    replies_early: bool,
    /// Request bytes held by every connection together.
    pending: budget::Budget,
    /// The longest stored key (`--key-size`), for the databases' key encoding.
    max_key: usize,
    listen: SocketAddr,
    max_clients: usize,
    clients: Arc<ClientList>,
    /// Connections accepted so far; the last one's id.
    next_client: AtomicU64,
    /// Connections refused because `max_clients` were connected.
    rejected: AtomicU64,
    /// Commands received, whether answered here or by the engine.
    commands: AtomicU64,
    /// Notified by `SHUTDOWN`: the proxy stops as it does on Ctrl-C.
    shutdown: Notify,
    /// The Lua script cache and limit.
    scripts: scripting::Scripts,
}

/// A running proxy.
pub struct Proxy {
    /// The store's statistics (in a cluster, the first partition hosted at the start's).
    pub stats: StatsHandle,
    /// The statistics `/metrics` gives: the store's, or in a cluster each partition hosted at
    /// the time it is asked.
    pub metrics: metrics::Sources,
    /// The first listener's address.
    pub local_addr: SocketAddr,
    /// The first TLS listener's address, if there is one.
    pub tls_addr: Option<SocketAddr>,
}

/// Serves RESP clients on `listeners` (at least one) with `engine` over `storage` until `shutdown` completes;
/// then stops accepting, closes connections and waits (up to the drain timeout) until every
/// acknowledged write is in storage. `ready` receives the running proxy's handle.
///
/// If the core task dies (a bug: it panicked), the proxy stops listening, closes every
/// connection and returns an error rather than answering "shutting down" forever.
pub async fn run(
    listeners: Vec<Listener>,
    engine: Engine,
    storage: Arc<dyn Storage>,
    options: ProxyOptions,
    ready: impl FnOnce(Proxy),
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let store = HostedStore {
        engine,
        storage,
        journal: options.journal.clone(),
        ledger: options.ledger.clone(),
        recovery_spool: options.recovery_spool.clone(),
    };
    serve(listeners, None, vec![(0, store)], options, ready, shutdown).await
}

/// [`run`] for a proxy of a cluster: `stores` are the partitions `role` gives this proxy (by
/// partition number), each with its own core; commands for other partitions' slots are
/// redirected with `-MOVED`. The partitions share the store settings, so the first one's limits
/// are every one's.
pub async fn run_cluster(
    listeners: Vec<Listener>,
    role: ClusterRole,
    stores: Vec<(usize, HostedStore)>,
    options: ProxyOptions,
    ready: impl FnOnce(Proxy),
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve(listeners, Some(role), stores, options, ready, shutdown).await
}

async fn serve(
    listeners: Vec<Listener>,
    role: Option<ClusterRole>,
    stores: Vec<(usize, HostedStore)>,
    options: ProxyOptions,
    ready: impl FnOnce(Proxy),
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let Some(first) = listeners.first() else {
        return Err(std::io::Error::other("the proxy needs a port to listen on"));
    };
    let listen = first.local_addr()?;
    let tls_addr = listeners
        .iter()
        .find(|listener| listener.is_tls())
        .map(Listener::local_addr)
        .transpose()?;
    // A cluster proxy added to a running cluster starts with no partition: its role gives the
    // limits every partition has.
    let engine_limits = match (stores.first(), &role) {
        (Some((_, first_store)), _) => first_store.engine.limits(),
        (None, Some(role)) => role.limits,
        (None, None) => return Err(std::io::Error::other("the proxy has no store to serve")),
    };
    let request_limits = RequestLimits::for_store(&engine_limits);
    // The partitions share the store settings: the first one's scheme is every one's. A cluster
    // proxy that starts with none gathers replies, as for a scheme without a schedule.
    let replies_early = stores
        .first()
        .is_some_and(|(_, store)| store.engine.scheme().answers_on_a_schedule());
    let storage_io = options
        .storage_io
        .clone()
        .unwrap_or_else(tokio::runtime::Handle::current);
    // Each core's task, watched so that one that dies stops the proxy; a core started later
    // (a partition moved here) comes through `new_cores`.
    let mut running = tokio::task::JoinSet::new();
    let (tasks, mut new_cores) = tokio::sync::mpsc::unbounded_channel::<CoreTask>();
    let spawner = CoreSpawner {
        storage_io,
        tasks,
        after_start: options.after_start,
    };
    let mut handles = Vec::with_capacity(stores.len());
    let mut stopped = std::collections::HashMap::new();
    for (partition, store) in stores {
        let (core, on_stop) = spawner.spawn(store)?;
        handles.push((partition, core));
        stopped.insert(partition, on_stop);
    }
    // How this proxy reaches the others, as a client with the client password: the probes read
    // only `CLOAK.HEALTH` (and bound its answers themselves, whatever limit is given here);
    // forwarding bounds replies by the largest a key command can have.
    let login = options.password.clone().map(|p| ("default".to_string(), p));
    let link = cluster::peer::PeerLink::new(options.peer_tls.clone(), login, 0);
    let cores = match role {
        None => Cores::Single(handles.remove(0).1),
        Some(role) => {
            let hosted = Hosted::new(role.map, role.me, handles).map_err(std::io::Error::other)?;
            let forwarder = role.forward.then(|| {
                let limit = largest_reply(&request_limits);
                Arc::new(cluster::forward::Forwarder::new(link.clone(), limit))
            });
            Cores::Cluster(Arc::new(Node::new(
                hosted,
                stopped,
                spawner,
                role.host,
                forwarder,
                options.release_timeout,
            )))
        }
    };
    // A proxy hosting no partition yet has no store statistics to give.
    let stats = cores
        .first()
        .map_or_else(core::StatsHandle::detached, |core| core.stats());
    // Dropped on return, which stops the probes.
    let mut probes = tokio::task::JoinSet::new();
    if let Some(hosted) = cores.cluster() {
        cluster::probe::spawn_all(hosted.health(), &link, &mut probes);
    }
    let front = Arc::new(FrontEnd {
        cores,
        password: options.password,
        cluster_secret: options.cluster_secret,
        auth_timeout: options.auth_timeout,
        request_limits,
        reply_limit: options.reply_limit,
        replies_early,
        pending: budget::Budget::new(options.pending_limit),
        max_key: engine_limits.max_key,
        listen,
        max_clients: options.max_clients,
        clients: Arc::new(ClientList::new(
            options.max_clients / UNAUTHENTICATED_SHARE,
            options.total_reply_limit,
        )),
        next_client: AtomicU64::new(0),
        rejected: AtomicU64::new(0),
        commands: AtomicU64::new(0),
        shutdown: Notify::new(),
        scripts: scripting::Scripts::new(options.script_time_limit),
    });
    let metrics: metrics::Sources = match front.cores.node() {
        Some(node) => {
            // Weak: the node holds the cores' handles, and a core drains and stops only once
            // every handle is gone; the metrics server, which outlives the proxy, must not keep
            // them (it keeps only statistics handles, and those only during a scrape).
            let node = Arc::downgrade(node);
            Arc::new(move || {
                let Some(node) = node.upgrade() else {
                    return Vec::new();
                };
                let hosted = node.current();
                let cores = hosted.cores().iter();
                cores.map(|(p, core)| (Some(*p), core.stats())).collect()
            })
        }
        None => {
            let stats = stats.clone();
            Arc::new(move || vec![(None, stats.clone())])
        }
    };
    ready(Proxy {
        stats,
        metrics,
        local_addr: listen,
        tls_addr,
    });

    tokio::pin!(shutdown);
    // Dropping the set on return closes every connection.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            (accepted, tls) = listener::accept_any(&listeners) => match accepted {
                // Clients counted are those holding a place: one crowded out holds none, though
                // its task may not have ended yet, and must not keep the client that crowded it
                // out from being admitted. The tasks are bounded all the same: a crowded-out
                // client's ends within `CROWDED_OUT_GRACE` of its reading ending (see
                // `connection`).
                Ok(stream)
                    if front.clients.len() >= options.max_clients
                        || connections.len() >= 2 * options.max_clients =>
                {
                    // A fresh socket's send buffer is empty, so this cannot block; if it fails
                    // the client is closed all the same. A TLS client could not read the line
                    // before its handshake, so it is just closed.
                    if tls.is_none() {
                        let _ = stream.try_write(TOO_MANY_CLIENTS.as_bytes());
                    }
                    // Counted for INFO rather than logged: a flood of connections must not
                    // become a flood of log lines.
                    front.rejected.fetch_add(1, Ordering::Relaxed);
                }
                Ok(stream) => {
                    // Listed here, in the order accepted, not when the task starts.
                    if let Some(registration) = connection::register(&stream, &front) {
                        let serving = connection::serve(stream, tls, registration, front.clone());
                        connections.spawn(serving);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            Some(task) = new_cores.recv() => {
                running.spawn(task);
            }
            // A core ends normally only when a move released its partition (the front end
            // holds a handle to every other); one that panicked stops the proxy.
            Some(ended) = running.join_next(), if !running.is_empty() => {
                if matches!(ended, Ok(Ok(()))) {
                    continue;
                }
                drop(listeners);
                connections.shutdown().await;
                // The set's task awaits the core's: either may carry the panic.
                let why = match ended {
                    Ok(Err(error)) | Err(error) if error.is_panic() => "panicked",
                    _ => "stopped",
                };
                tracing::error!("a core task {why}; the proxy stops");
                return Err(std::io::Error::other(format!(
                    "the proxy's core task {why}; no command can be served"
                )));
            }
            () = &mut shutdown => break,
            () = front.shutdown.notified() => {
                tracing::info!("SHUTDOWN received; shutting down");
                break;
            }
        }
    }
    drop(listeners);
    connections.shutdown().await;
    drop(front);
    while let Ok(task) = new_cores.try_recv() {
        running.spawn(task);
    }
    let limit = options.drain_timeout.unwrap_or(Duration::from_secs(30));
    let drained = async { while running.join_next().await.is_some() {} };
    if tokio::time::timeout(limit, drained).await.is_err() {
        tracing::error!(
            ?limit,
            "storage had not answered everything a stop waits for before the drain timeout: \
             the acknowledged writes, then the scheme's own requests in flight (the log says \
             which)"
        );
    }
    Ok(())
}
