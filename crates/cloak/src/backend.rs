//! `--storage URL`: which backend the proxy keeps its elements in.

use std::sync::Arc;

use anyhow::{Context, bail};
use cloak_storage::{MemoryStorage, Storage, TcpStorage};

pub const SCHEMES: &str = "tcp://HOST:PORT (a cloak server) or memory";

pub async fn connect(url: &str, connections: usize) -> anyhow::Result<Arc<dyn Storage>> {
    if url == "memory" {
        return Ok(Arc::new(MemoryStorage::new()));
    }
    match url.split_once("://") {
        Some(("tcp", addr)) if !addr.is_empty() => {
            let storage = TcpStorage::connect(addr, connections)
                .await
                .with_context(|| format!("storage {url}"))?;
            Ok(Arc::new(storage))
        }
        _ => bail!("unsupported --storage {url:?}; use {SCHEMES}"),
    }
}
