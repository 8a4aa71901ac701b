//! The Cloak proxy: a Redis-compatible front end over a scheme and a storage backend.
//!
//! ```text
//!  clients ──RESP──► connection (one task per client) ──► core (one task: the engine) ──► storage
//! ```
//!
//! - [`resp`]: request decoding and reply encoding.
//! - [`cmd`]: which commands exist and how their arguments parse.
//! - `connection`: a client's requests in, replies out in order.
//! - [`core`]: the task that owns the engine and drives it with real time and storage.
//! - `info`: the `INFO` text.
//!
//! [`run`] wires them to a listener and returns on shutdown, after draining.

pub mod cmd;
mod connection;
pub mod core;
mod info;
pub mod journal;
pub mod ledger;
pub mod metrics;
pub mod resp;
pub mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use cloak_core::Engine;
use cloak_storage::Storage;
use tokio::net::TcpListener;

pub use core::{CoreHandle, Snapshot, StatsHandle};
pub use journal::{DiskJournal, Journal, JournalError};
pub use ledger::{Ledger, LedgerError, StoreManifest};
pub use state::{RecoveryReport, StateDir, StateError, discard_damaged, recover};

/// Front-end settings.
#[derive(Clone, Default)]
pub struct ProxyOptions {
    /// Clients must `AUTH` with this before anything else.
    pub password: Option<String>,
    /// How long shutdown waits for acknowledged writes to reach storage.
    pub drain_timeout: Option<Duration>,
    /// Where records only the proxy holds are kept durably; `None` keeps them in memory only.
    pub journal: Option<Arc<dyn Journal>>,
    /// The state directory's ledger: a clean stop saves every slot's version there, for the next
    /// start to check storage against.
    pub ledger: Option<Arc<Ledger>>,
}

/// What every connection shares.
pub struct FrontEnd {
    core: CoreHandle,
    password: Option<String>,
    listen: SocketAddr,
    connected: AtomicU64,
    next_client: AtomicU64,
}

/// A running proxy.
pub struct Proxy {
    pub stats: StatsHandle,
    pub local_addr: SocketAddr,
}

/// Serves RESP clients on `listener` with `engine` over `storage` until `shutdown` completes;
/// then stops accepting, closes connections and waits (up to the drain timeout) until every
/// acknowledged write is in storage. `ready` receives the running proxy's handle.
pub async fn run(
    listener: TcpListener,
    engine: Engine,
    storage: Arc<dyn Storage>,
    options: ProxyOptions,
    ready: impl FnOnce(Proxy),
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let listen = listener.local_addr()?;
    let (core, core_task) = core::spawn(engine, storage, options.journal, options.ledger);
    let front = Arc::new(FrontEnd {
        core: core.clone(),
        password: options.password,
        listen,
        connected: AtomicU64::new(0),
        next_client: AtomicU64::new(0),
    });
    ready(Proxy {
        stats: core.stats(),
        local_addr: listen,
    });
    drop(core);

    tokio::pin!(shutdown);
    // Dropping the set on return closes every connection.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection::serve(stream, front.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    connections.shutdown().await;
    drop(front);
    let limit = options.drain_timeout.unwrap_or(Duration::from_secs(30));
    if tokio::time::timeout(limit, core_task).await.is_err() {
        tracing::error!(
            ?limit,
            "storage did not take every acknowledged write before the drain timeout"
        );
    }
    Ok(())
}
