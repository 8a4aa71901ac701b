//! One module per subcommand.

pub mod audit;
pub mod bench;
pub mod certs;
pub mod cluster;
pub mod cluster_move;
pub mod keygen;
pub mod partition_host;
pub mod proxy;
pub mod security;
pub mod server;
pub mod up;

/// The front end's settings shared by `cloak up` and `cloak proxy`, defaults applied.
pub fn front_end(
    password: Option<String>,
    max_clients: Option<usize>,
    auth_timeout: Option<&str>,
    reply_limit: Option<usize>,
    total_reply_limit: Option<usize>,
    pending_limit: Option<usize>,
) -> anyhow::Result<cloak_proxy::ProxyOptions> {
    use anyhow::Context;
    let defaults = cloak_proxy::ProxyOptions::default();
    let auth_timeout = match auth_timeout {
        Some(text) => humantime::parse_duration(text)
            .with_context(|| format!("--auth-timeout: {text:?} is not a duration like 10s"))?,
        None => defaults.auth_timeout,
    };
    if auth_timeout.is_zero() {
        anyhow::bail!("--auth-timeout must be longer than zero: no client could authenticate");
    }
    let max_clients = max_clients.unwrap_or(defaults.max_clients);
    let reply_limit = reply_limit.unwrap_or(defaults.reply_limit);
    let total_reply_limit = total_reply_limit.unwrap_or(defaults.total_reply_limit);
    let pending_limit = pending_limit.unwrap_or(defaults.pending_limit);
    if max_clients == 0 {
        anyhow::bail!("--max-clients must be at least 1");
    }
    if reply_limit < cloak_proxy::MIN_REPLY_LIMIT {
        anyhow::bail!(
            "--client-reply-limit must be at least {} bytes ({reply_limit} given): replies are \
             gathered up to that size before they are written",
            cloak_proxy::MIN_REPLY_LIMIT
        );
    }
    if total_reply_limit < reply_limit {
        anyhow::bail!(
            "--total-reply-limit ({total_reply_limit}) must be at least --client-reply-limit \
             ({reply_limit}): one client may leave that much unread"
        );
    }
    if pending_limit < cloak_proxy::CONNECTION_PENDING_BYTES {
        anyhow::bail!(
            "--max-pending-bytes must be at least {} bytes ({pending_limit} given), what one \
             connection may hold",
            cloak_proxy::CONNECTION_PENDING_BYTES
        );
    }
    Ok(cloak_proxy::ProxyOptions {
        password,
        max_clients,
        auth_timeout,
        reply_limit,
        total_reply_limit,
        pending_limit,
        after_start: Some(crate::memory::start_is_over),
        ..defaults
    })
}

/// Binds the metrics listener if `--metrics` asks for one.
pub async fn metrics_listener(
    addr: Option<&str>,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    use anyhow::Context;
    let Some(addr) = addr else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    Ok(Some(listener))
}

/// Starts serving `/metrics` for a running proxy.
pub fn serve_metrics(listener: Option<tokio::net::TcpListener>, proxy: &cloak_proxy::Proxy) {
    if let Some(listener) = listener {
        if let Ok(addr) = listener.local_addr() {
            println!("  metrics:  http://{addr}/metrics");
        }
        tokio::spawn(cloak_proxy::metrics::serve(
            listener,
            proxy.metrics.clone(),
            std::future::pending(),
        ));
    }
}

/// Resolves when the process is asked to stop (Ctrl-C or SIGTERM). The handlers are installed
/// at the call, not when the future is first polled: a proxy says it is listening before its
/// loop first polls this, and a SIGTERM in between would otherwise end it at once, without
/// draining acknowledged writes or saving its ledger.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let handlers = {
        use tokio::signal::unix::{SignalKind, signal};
        [SignalKind::terminate(), SignalKind::interrupt()].map(|kind| signal(kind).ok())
    };
    async move {
        #[cfg(unix)]
        {
            let [terminate, interrupt] = handlers;
            let received = |handler: Option<tokio::signal::unix::Signal>| async move {
                match handler {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = received(terminate) => {}
                () = received(interrupt) => {}
            }
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        tracing::info!("shutting down");
    }
}
