//! `cloak server`: the untrusted storage server.

use std::sync::Arc;

use anyhow::Context;
use cloak_storage::{DiskStorage, MemoryStorage, Storage, server};
use tokio::net::TcpListener;

use crate::cli::ServerArgs;
use crate::config::ConfigFile;

pub async fn run(args: ServerArgs, config: &ConfigFile) -> anyhow::Result<()> {
    let args = config.merge(&args, &["server"])?;
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
    println!(
        "cloak storage server listening on {} ({held})",
        listener.local_addr()?
    );
    server::serve(listener, storage, super::shutdown_signal()).await?;
    Ok(())
}
