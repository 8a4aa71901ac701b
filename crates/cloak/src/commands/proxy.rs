//! `cloak proxy`: the trusted proxy in front of a storage server, serving one store, or with
//! `--cluster FILE --node NAME` the partitions of a cluster that the file gives this proxy.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use cloak_cluster::ClusterMap;
use cloak_crypto::MasterKey;
use cloak_proxy::cluster::peer::PeerLink;
use cloak_proxy::{
    ClusterRole, DiskJournal, HostedStore, Journal, OwnThread, PartitionHost, StateDir,
};
use tokio::net::TcpListener;

use super::partition_host;
use crate::backend;
use crate::cli::{ClientSecurityArgs, ProxyArgs};
use crate::config::ConfigFile;
use crate::store::{Store, load_key};

pub async fn run(args: Box<ProxyArgs>, config: &ConfigFile) -> anyhow::Result<()> {
    let store = config.merge(&args.store, &["store"])?.resolve()?;
    let (args, security) = config.merge_pair(&args, &args.security, &["proxy"])?;
    // Checked before anything starts, so a bad flag fails at once.
    let front = super::front_end(
        args.password.clone(),
        args.max_clients,
        args.auth_timeout.as_deref(),
        args.client_reply_limit,
        args.total_reply_limit,
        args.max_pending_bytes,
    )?;
    let release_timeout = release_timeout(args.release_timeout.as_deref())?;
    let key = load_key(args.key_file.as_deref())?;
    let cluster_secret = match &args.cluster_secret_file {
        Some(path) => Some(Arc::new(crate::secret_file::cluster_secret(path)?)),
        None => None,
    };
    let link = peers(&args, &security)?;
    let storage_io = Arc::new(
        OwnThread::start("cloak-storage-io")
            .context("cannot start the storage traffic's thread")?,
    );
    let (stores, role, listen) = match (&args.cluster, &args.node) {
        (Some(file), Some(node)) => {
            if args.storage.is_some() {
                bail!("--storage is for a single store; the cluster file names each partition's");
            }
            let map_file = partition_host::map_file(file, args.state_dir.as_deref());
            let (map, me) =
                read_cluster(file, &map_file, node, &link, cluster_secret.as_deref()).await?;
            let host = partition_host::ProxyPartitions {
                store: store.clone(),
                args: (*args).clone(),
                key: key.clone(),
                storage_io: storage_io.clone(),
                map_file,
                secret: cluster_secret.clone(),
                link: link.clone(),
            };
            // An operator's file that no move has changed is left as it was written.
            if args.state_dir.is_some() || map.epoch() > 0 {
                host.persist(&map).map_err(anyhow::Error::msg)?;
            }
            if let Some(dir) = args.state_dir.as_deref() {
                partition_host::set_aside_stale_journals(dir, &map, me)?;
            }
            let mut stores = Vec::new();
            for partition in map.hosted_by(me) {
                let index = partition.index;
                let state = args
                    .state_dir
                    .as_deref()
                    .map(|dir| partition_state(dir, index));
                // Each partition has a key of its own (see `MasterKey::for_partition`).
                let key = key.as_ref().map(|key| key.for_partition(index as u64));
                let opened = open_store(
                    &store,
                    &args,
                    state.as_deref(),
                    key,
                    &partition.storage,
                    &storage_io,
                )
                .await
                .with_context(|| format!("partition {index}"))?;
                stores.push((index, opened));
            }
            let listen = args
                .listen
                .clone()
                .unwrap_or_else(|| map.proxies()[me].address());
            let role = ClusterRole {
                map: Arc::new(map),
                me,
                host: Some(Arc::new(host)),
                limits: store.limits,
                forward: args.cluster_forward,
            };
            (stores, Some(role), listen)
        }
        (None, None) => {
            let Some(url) = args.storage.as_deref() else {
                bail!("no storage: pass --storage {}", backend::SCHEMES);
            };
            let opened = open_store(
                &store,
                &args,
                args.state_dir.as_deref(),
                key,
                url,
                &storage_io,
            )
            .await?;
            let listen = args
                .listen
                .clone()
                .unwrap_or_else(|| "127.0.0.1:6380".into());
            (vec![(0, opened)], None, listen)
        }
        // clap requires both or neither.
        _ => bail!("--cluster and --node go together"),
    };
    let listener = TcpListener::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let (listeners, tls) =
        super::security::client_listeners(listener, &security, args.password.is_some()).await?;
    super::security::reload_certificates(tls);
    let metrics = super::metrics_listener(args.metrics.as_deref()).await?;
    let options = cloak_proxy::ProxyOptions {
        storage_io: Some(storage_io.handle()),
        cluster_secret,
        peer_tls: link.tls().cloned(),
        release_timeout: release_timeout.unwrap_or(front.release_timeout),
        ..front
    };
    let lines: Vec<String> = stores
        .iter()
        .map(|(_, opened)| opened.line.clone())
        .collect();
    let node = args.node.clone();
    let ready = move |proxy: cloak_proxy::Proxy| {
        let tls = match proxy.tls_addr {
            Some(addr) if addr == proxy.local_addr => " (TLS)".to_string(),
            Some(addr) => format!(", TLS on {addr}"),
            None => String::new(),
        };
        match &node {
            None => println!(
                "cloak proxy listening on {}{tls} ({})",
                proxy.local_addr,
                lines.join("")
            ),
            Some(node) => {
                println!(
                    "cloak proxy listening on {}{tls} (cluster node {node}, {} partitions)",
                    proxy.local_addr,
                    lines.len()
                );
                for line in &lines {
                    println!("  {line}");
                }
            }
        }
        super::serve_metrics(metrics, &proxy);
    };
    let stores: Vec<(usize, HostedStore)> = stores
        .into_iter()
        .map(|(index, opened)| (index, opened.store))
        .collect();
    match role {
        None => {
            let [(_, single)]: [(usize, HostedStore); 1] = stores
                .try_into()
                .map_err(|_| anyhow::anyhow!("a single store was opened"))?;
            let options = cloak_proxy::ProxyOptions {
                journal: single.journal,
                ledger: single.ledger,
                recovery_spool: single.recovery_spool,
                ..options
            };
            cloak_proxy::run(
                listeners,
                single.engine,
                single.storage,
                options,
                ready,
                super::shutdown_signal(),
            )
            .await?;
        }
        Some(role) => {
            cloak_proxy::run_cluster(
                listeners,
                role,
                stores,
                options,
                ready,
                super::shutdown_signal(),
            )
            .await?;
        }
    }
    Ok(())
}

/// The cluster's current map (the newest of the file's, the kept one and the other proxies',
/// see [`partition_host`]), and which of its proxies `node` is. A proxy added to a running
/// cluster (`cloak cluster add-proxy`) may be started from the file made before: the other
/// proxies' newer map names it. A name no map names is refused.
async fn read_cluster(
    file: &Path,
    kept: &Path,
    node: &str,
    link: &PeerLink,
    secret: Option<&cloak_cluster::ClusterSecret>,
) -> anyhow::Result<(ClusterMap, usize)> {
    let map = partition_host::newest_map(file, kept, node, link, secret).await?;
    let Some(me) = map.proxy_named(node) else {
        let names: Vec<&str> = map.proxies().iter().map(|p| p.name.as_str()).collect();
        bail!(
            "--node {node:?} is not one of the proxies of {} nor of the newest map the other \
             proxies answered (epoch {}): {}; add it with `cloak cluster add-proxy --name \
             {node}`",
            file.display(),
            map.epoch(),
            names.join(", ")
        );
    };
    Ok((map, me))
}

/// How this proxy reaches the other proxies of its cluster: as a client with the client password,
/// over TLS checked against `--cluster-ca` if given. A proxy whose clients must use TLS
/// (`--tls-cert` without `--tls-port`) needs it: its peers are of the same kind, and would
/// otherwise be sent the password in the clear (and answer nothing a plain client can read).
fn peers(args: &ProxyArgs, security: &ClientSecurityArgs) -> anyhow::Result<PeerLink> {
    let tls_only = security.tls_cert.is_some() && security.tls_port.is_none();
    if args.cluster.is_some() && tls_only && args.cluster_ca.is_none() {
        bail!(
            "this proxy serves clients over TLS only (--tls-cert without --tls-port), so the \
             other proxies of its cluster must be reached over TLS too: give --cluster-ca FILE, \
             the CA that signed the proxies' certificates"
        );
    }
    let login = partition_host::client_login(args.password.as_deref());
    partition_host::peer_link(args.cluster_ca.as_deref(), login)
}

/// A store started and ready to serve, and one line saying what it is.
pub(super) struct Opened {
    pub store: HostedStore,
    pub line: String,
}

/// Opens one store: its state directory (key, journal, ledger), its storage, and the engine
/// rebuilt from what storage and the journal hold. `key` (from `--key-file` or `CLOAK_KEY`)
/// wins over the state directory's own.
pub(super) async fn open_store(
    store: &Store,
    args: &ProxyArgs,
    state_dir: Option<&Path>,
    key: Option<MasterKey>,
    url: &str,
    storage_io: &OwnThread,
) -> anyhow::Result<Opened> {
    let state = state_dir.map(StateDir::open).transpose()?;
    let master = match (key, &state) {
        (Some(key), _) => key,
        (None, Some(state)) => state.key()?,
        (None, None) => bail!(
            "no encryption key: pass --key-file FILE (make one with `cloak keygen -o cloak.key`), \
             set CLOAK_KEY, or give a --state-dir to keep one in"
        ),
    };
    let journal: Option<Arc<dyn Journal>> = match (args.durability.as_deref(), &state) {
        (Some("none"), _) | (None, None) => None,
        (Some("wal") | None, Some(state)) => Some(Arc::new(state.journal()?) as Arc<DiskJournal>),
        (Some("wal"), None) => bail!("--durability wal needs a --state-dir for its journal"),
        (Some(other), _) => bail!("--durability must be wal or none, not {other:?}"),
    };
    let mut ledger = state
        .as_ref()
        .map(|state| state.ledger(&master, store.manifest()))
        .transpose()?;
    let credentials = partition_host::credentials(args);
    let storage = storage_io
        .run(backend::connect(
            url.to_string(),
            args.storage_connections.unwrap_or(4),
            credentials,
            store.largest_element(),
        ))
        .await?;
    let (engine, report) = store
        .start(
            &master,
            storage.as_ref(),
            journal.as_deref(),
            state.as_ref(),
            ledger.as_mut(),
            args.accept_data_loss,
        )
        .await?;
    let ledger = ledger.map(Arc::new);
    let durability = if journal.is_some() { "wal" } else { "none" };
    // Described by the backend: a Redis URL's password stays out of the output.
    let line = format!(
        "{}; storage {}; durability {durability}",
        store.summary(&engine),
        storage.describe()
    );
    Ok(Opened {
        store: HostedStore {
            engine,
            storage,
            journal,
            ledger,
            recovery_spool: report.spool,
        },
        line,
    })
}

/// The state directory of a cluster proxy's partition: its own key (unless `--key-file` gives
/// the proxies one to derive each partition's from), journal, ledger and start counter.
pub(super) fn partition_state(dir: &Path, partition: usize) -> PathBuf {
    dir.join(format!("partition-{partition}"))
}

/// `--release-timeout`, if given.
fn release_timeout(text: Option<&str>) -> anyhow::Result<Option<Duration>> {
    let Some(text) = text else { return Ok(None) };
    let limit = humantime::parse_duration(text)
        .with_context(|| format!("--release-timeout: {text:?} is not a duration like 30s"))?;
    if limit.is_zero() {
        // No drain ends at once: every move would fail.
        bail!("--release-timeout must be longer than zero: no move could release a partition");
    }
    Ok(Some(limit))
}
