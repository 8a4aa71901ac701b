//! `cloak proxy`: the trusted proxy in front of a storage server.

use std::sync::Arc;

use anyhow::{Context, bail};
use cloak_proxy::{DiskJournal, Journal, OwnThread, ProxyOptions, StateDir};
use tokio::net::TcpListener;

use crate::backend;
use crate::cli::ProxyArgs;
use crate::config::ConfigFile;
use crate::store::load_key;

pub async fn run(args: ProxyArgs, config: &ConfigFile) -> anyhow::Result<()> {
    let store = config.merge(&args.store, &["store"])?.resolve()?;
    let (args, security) = config.merge_pair(&args, &args.security, &["proxy"])?;
    // Checked before anything starts, so a bad flag fails at once.
    let front = super::front_end(
        args.password.clone(),
        args.max_clients,
        args.client_reply_limit,
        args.max_pending_bytes,
    )?;
    let state = args.state_dir.as_deref().map(StateDir::open).transpose()?;
    let master = match (load_key(args.key_file.as_deref())?, &state) {
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
    let Some(url) = args.storage.as_deref() else {
        bail!("no storage: pass --storage {}", backend::SCHEMES);
    };
    let ledger = state
        .as_ref()
        .map(|state| state.ledger(&master, store.manifest()))
        .transpose()?
        .map(Arc::new);
    let credentials = backend::StorageCredentials {
        ca: args.storage_ca.clone(),
        identity: args.storage_cert.clone().zip(args.storage_key.clone()),
        secret_file: args.storage_secret_file.clone(),
    };
    let storage_io = OwnThread::start("cloak-storage-io")
        .context("cannot start the storage traffic's thread")?;
    let storage = storage_io
        .run(backend::connect(
            url.to_string(),
            args.storage_connections.unwrap_or(4),
            credentials,
        ))
        .await?;
    let (engine, report) = store
        .start(
            &master,
            storage.as_ref(),
            journal.as_deref(),
            state.as_ref(),
            ledger.as_deref(),
            args.accept_data_loss,
        )
        .await?;
    let summary = store.summary(&engine);
    // Described by the backend: a Redis URL's password stays out of the output.
    let storage_name = storage.describe();
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:6380");
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let (listeners, tls) =
        super::security::client_listeners(listener, &security, args.password.is_some()).await?;
    super::security::reload_certificates(tls);
    let durability = if journal.is_some() { "wal" } else { "none" };
    let metrics = super::metrics_listener(args.metrics.as_deref()).await?;
    let options = ProxyOptions {
        journal,
        ledger,
        recovery_spool: report.spool,
        storage_io: Some(storage_io.handle()),
        ..front
    };
    cloak_proxy::run(
        listeners,
        engine,
        storage,
        options,
        |proxy| {
            let tls = match proxy.tls_addr {
                Some(addr) if addr == proxy.local_addr => " (TLS)".to_string(),
                Some(addr) => format!(", TLS on {addr}"),
                None => String::new(),
            };
            println!(
                "cloak proxy listening on {}{tls} ({summary}; storage {storage_name}; durability {durability})",
                proxy.local_addr
            );
            super::serve_metrics(metrics, &proxy);
        },
        super::shutdown_signal(),
    )
    .await?;
    Ok(())
}
