//! `cloak up`: storage server and proxy in one process, for trying Cloak out.
//!
//! The storage server runs on a loopback port with elements in memory, and the proxy talks to it
//! over TCP exactly as it would to a remote `cloak server`.

use std::sync::Arc;

use anyhow::Context;
use cloak_crypto::MasterKey;
use cloak_proxy::OwnThread;
use cloak_storage::{MemoryStorage, TcpStorage, server};
use tokio::net::TcpListener;

use crate::cli::UpArgs;
use crate::config::ConfigFile;
use crate::store::load_key;

pub async fn run(args: UpArgs, config: &ConfigFile) -> anyhow::Result<()> {
    let store = config.merge(&args.store, &["store"])?.resolve()?;
    let (args, security) = config.merge_pair(&args, &args.security, &["up"])?;
    // Checked before anything starts, so a bad flag fails at once.
    let options = super::front_end(
        args.password.clone(),
        args.max_clients,
        args.auth_timeout.as_deref(),
        args.client_reply_limit,
        args.total_reply_limit,
        args.max_pending_bytes,
    )?;
    let (master, key_note) = match load_key(args.key_file.as_deref())? {
        Some(key) => (key, "from your key file".to_string()),
        None => (
            MasterKey::generate()?,
            "ephemeral (made now; the data is unreadable once cloak up stops)".to_string(),
        ),
    };

    let storage_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot open a loopback port for the storage server")?;
    let storage_addr = storage_listener.local_addr()?;
    let (stop_storage, storage_stopped) = tokio::sync::oneshot::channel::<()>();
    let storage_task = tokio::spawn(server::serve(
        storage_listener,
        Arc::new(MemoryStorage::new()),
        async {
            let _ = storage_stopped.await;
        },
    ));
    let storage_io = OwnThread::start("cloak-storage-io")
        .context("cannot start the storage traffic's thread")?;
    let max_element = store.largest_element();
    let storage = Arc::new(
        storage_io
            .run(async move { TcpStorage::connect(&storage_addr.to_string(), 4).await })
            .await?
            .with_max_element(max_element),
    );

    let (engine, _) = store
        .start(&master, storage.as_ref(), None, None, None, false)
        .await?;
    let summary = store.summary(&engine);
    let bind = args.bind.as_deref().unwrap_or("127.0.0.1");
    let port = args.port.unwrap_or(6380);
    let listener = TcpListener::bind((bind, port)).await.with_context(|| {
        format!("cannot listen on {bind}:{port} (is another server using it? try --port)")
    })?;
    let (listeners, tls) =
        super::security::client_listeners(listener, &security, args.password.is_some()).await?;
    super::security::reload_certificates(tls);
    // What redis-cli needs to connect over TLS: the CA that signed the proxy's certificate (the
    // proxy is not told it, so a stand-in name), and with --tls-ca a client certificate.
    let tls_flags = security.tls_cert.as_ref().map(|_| match &security.tls_ca {
        Some(ca) => format!(
            " --tls --cacert CA.pem --cert CLIENT.pem --key CLIENT.key   (clients need a certificate from {})",
            ca.display()
        ),
        None => " --tls --cacert CA.pem".to_string(),
    });
    let metrics = super::metrics_listener(args.metrics.as_deref()).await?;
    let auth = if args.password.is_some() {
        " -a PASSWORD"
    } else {
        ""
    };
    let options = cloak_proxy::ProxyOptions {
        storage_io: Some(storage_io.handle()),
        ..options
    };
    cloak_proxy::run(
        listeners,
        engine,
        storage,
        options,
        |proxy| {
            // The examples use the TLS port when clients can only use it.
            let (port, auth) = match (proxy.tls_addr, &tls_flags) {
                (Some(addr), Some(tls)) if addr == proxy.local_addr => {
                    (addr.port(), format!("{tls}{auth}"))
                }
                _ => (proxy.local_addr.port(), auth.to_string()),
            };
            println!("Cloak is up: {summary}.");
            println!(
                "  clients:  redis-cli -p {port}{auth}   (listening on {})",
                proxy.local_addr
            );
            if let (Some(addr), Some(tls)) = (proxy.tls_addr, &tls_flags)
                && addr != proxy.local_addr
            {
                println!(
                    "  TLS:      redis-cli -p {}{tls}   (listening on {addr})",
                    addr.port()
                );
            }
            println!("  storage:  cloak server on {storage_addr}, elements in memory");
            println!("  key:      {key_note}");
            super::serve_metrics(metrics, &proxy);
            println!("Try:");
            println!("  redis-cli -p {port}{auth} SET greeting hello");
            println!("  redis-cli -p {port}{auth} GET greeting");
            println!("  redis-cli -p {port}{auth} INFO scheme");
            println!("Stop with Ctrl-C.");
        },
        super::shutdown_signal(),
    )
    .await?;
    let _ = stop_storage.send(());
    let _ = storage_task.await;
    Ok(())
}
