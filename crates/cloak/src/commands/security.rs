//! What `up`, `proxy` and `server` share about who may connect: the client ports (plain or
//! TLS), protected mode, and reloading certificates on SIGHUP or when their files change.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use cloak_proxy::Listener;
use cloak_storage::tls::ServerTls;
use cloak_storage::tls::server::ServerTlsFiles;
use tokio::net::TcpListener;

use crate::cli::ClientSecurityArgs;

/// The client ports of a proxy whose main port is `main`: plain, TLS only (with --tls-cert), or
/// plain with TLS beside it on --tls-port. Refused in protected mode when a non-loopback port
/// would serve clients that need neither `password` nor a certificate.
pub async fn client_listeners(
    main: TcpListener,
    args: &ClientSecurityArgs,
    password: bool,
) -> anyhow::Result<(Vec<Listener>, Option<Arc<ServerTls>>)> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(load_server_tls(ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.tls_ca.clone(),
        })?),
        (None, None) if args.tls_ca.is_some() || args.tls_port.is_some() => {
            bail!("--tls-ca and --tls-port need --tls-cert and --tls-key")
        }
        (None, None) => None,
        _ => bail!("--tls-cert and --tls-key go together"),
    };
    let listeners = match (&tls, args.tls_port) {
        (None, _) => vec![Listener::plain(main)],
        (Some(tls), None) => vec![Listener::tls(main, tls.clone())],
        (Some(tls), Some(port)) => {
            let addr = SocketAddr::new(main.local_addr()?.ip(), port);
            let beside = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for TLS clients on {addr}"))?;
            vec![Listener::plain(main), Listener::tls(beside, tls.clone())]
        }
    };
    for listener in &listeners {
        protect(
            "the proxy",
            listener.local_addr()?,
            password || listener.requires_client_certificate(),
            args.protected_mode,
            "give clients a password (--password) or require client certificates (--tls-cert, \
             --tls-key and --tls-ca)",
        )?;
    }
    Ok((listeners, tls))
}

/// Reads a listener's certificate and key, naming the files on failure.
pub fn load_server_tls(files: ServerTlsFiles) -> anyhow::Result<Arc<ServerTls>> {
    let described = format!("{} / {}", files.cert.display(), files.key.display());
    let tls = ServerTls::load(files).with_context(|| format!("TLS certificate {described}"))?;
    Ok(Arc::new(tls))
}

/// Protected mode, like Redis's: `who` may listen on a non-loopback `addr` only if whoever
/// connects must prove who they are (`guarded`), or protected mode is off. `fix` says how to
/// guard it.
pub fn protect(
    who: &str,
    addr: SocketAddr,
    guarded: bool,
    protected_mode: Option<bool>,
    fix: &str,
) -> anyhow::Result<()> {
    if addr.ip().is_loopback() || guarded || protected_mode == Some(false) {
        return Ok(());
    }
    bail!(
        "protected mode: {who} would listen on {addr}, reachable from other machines, and \
         anyone who reaches it could use it. Either {fix}, listen on a loopback address, or \
         turn protected mode off with --protected-mode no (only behind a firewall you trust)"
    )
}

/// How often the certificate files are checked for changes.
const RELOAD_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads every certificate in `tls` again on each SIGHUP and whenever one of its files changes
/// (checked every [`RELOAD_CHECK`]; tools that renew certificates in place, like certbot or
/// cert-manager, need no signal): new connections get the new certificate, established ones keep
/// theirs. A file that cannot be read keeps the old one.
pub fn reload_certificates(tls: Option<Arc<ServerTls>>) {
    let Some(tls) = tls else { return };
    let report = |why: &str, result: Result<(), cloak_storage::tls::TlsError>| match result {
        Ok(()) => tracing::info!("{why}: TLS certificate reloaded"),
        Err(error) => {
            tracing::error!(%error, "{why}: TLS certificate not reloaded; the old one stays")
        }
    };
    let polled = tls.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(RELOAD_CHECK);
        loop {
            ticks.tick().await;
            if let Some(result) = polled.reload_if_changed() {
                report("certificate file changed", result);
            }
        }
    });
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!(
                "cannot watch for SIGHUP; certificates are reloaded when their files change"
            );
            return;
        };
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                report("SIGHUP", tls.reload());
            }
        });
    }
}
