//! `cloak server`: the untrusted storage server.

use std::sync::Arc;

use anyhow::Context;
use cloak_storage::{MemoryStorage, server};
use tokio::net::TcpListener;

use crate::cli::ServerArgs;
use crate::config::ConfigFile;

pub async fn run(args: ServerArgs, config: &ConfigFile) -> anyhow::Result<()> {
    let args = config.merge(&args, &["server"])?;
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:7000");
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    println!(
        "cloak storage server listening on {} (elements in memory)",
        listener.local_addr()?
    );
    server::serve(
        listener,
        Arc::new(MemoryStorage::new()),
        super::shutdown_signal(),
    )
    .await?;
    Ok(())
}
