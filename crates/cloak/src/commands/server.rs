//! `cloak server`: the untrusted storage server.

use std::sync::Arc;

use anyhow::Context;
use cloak_storage::server::Guard;
use cloak_storage::tls::server::ServerTlsFiles;
use cloak_storage::{DiskStorage, MemoryStorage, Storage, server};
use tokio::net::TcpListener;

use crate::cli::ServerArgs;
use crate::config::ConfigFile;

/// `--max-connections` when not given: far more than the few connections each proxy opens.
const DEFAULT_MAX_CONNECTIONS: u32 = 1024;

pub async fn run(args: ServerArgs, config: &ConfigFile) -> anyhow::Result<()> {
    let args = config.merge(&args, &["server"])?;
    // Read before anything starts, so a wrong path fails at once.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(super::security::load_server_tls(ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.client_ca.clone(),
        })?),
        (None, None) if args.client_ca.is_some() => {
            anyhow::bail!("--client-ca needs --tls-cert and --tls-key")
        }
        (None, None) => None,
        _ => anyhow::bail!("--tls-cert and --tls-key go together"),
    };
    let secret = args
        .storage_secret_file
        .as_deref()
        .map(crate::secret_file::storage_secret)
        .transpose()?;
    let guard = Guard {
        tls: tls.clone(),
        secret,
        max_connections: Some(args.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS) as usize),
        // Kept with the elements, so a restart still refuses a proxy fenced off before it.
        fence_token_file: args.data_dir.as_ref().map(|dir| dir.join("fence-token")),
    };
    let (storage, held): (Arc<dyn Storage>, String) = match &args.data_dir {
        Some(dir) => {
            let dir = dir.clone();
            // Replaying the log reads files: keep it off the async threads.
            let (disk, opened) = tokio::task::spawn_blocking(move || DiskStorage::open(&dir))
                .await
                .context("opening the data directory")??;
            tracing::info!(
                elements = opened.elements,
                bytes = opened.bytes,
                log_bytes = opened.log_bytes,
                took = ?opened.took,
                "loaded the data directory"
            );
            let held = format!(
                "elements durable in {} ({} loaded in {:.2?})",
                disk.describe().trim_start_matches("disk "),
                opened.elements,
                opened.took
            );
            (Arc::new(disk), held)
        }
        None => (Arc::new(MemoryStorage::new()), "elements in memory".into()),
    };
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:7000");
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    super::security::protect(
        "cloak server",
        addr,
        guard.authenticates(),
        args.protected_mode,
        "require proxies to prove themselves with mutual TLS (--tls-cert, --tls-key and \
         --client-ca) or a storage secret (--storage-secret-file); TLS alone encrypts the link \
         but lets anyone connect",
    )?;
    super::security::reload_certificates(tls);
    let link = match (&guard.tls, &guard.secret) {
        (Some(tls), _) if tls.requires_client_certificate() => {
            "; TLS, client certificates required"
        }
        (Some(_), Some(_)) => "; TLS, storage secret required",
        (Some(_), None) => "; TLS",
        (None, Some(_)) => "; storage secret required",
        (None, None) => "",
    };
    println!("cloak storage server listening on {addr} ({held}{link})");
    server::serve_guarded(listener, storage, guard, super::shutdown_signal()).await?;
    Ok(())
}
