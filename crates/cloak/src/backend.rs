//! `--storage URL`: which backend the proxy keeps its elements in.

use std::sync::Arc;

use anyhow::{Context, bail};
use cloak_storage::{MemoryStorage, RedisStorage, RedisTarget, Storage, TcpStorage};

pub const SCHEMES: &str = "tcp://HOST:PORT (a cloak server), redis://HOST:PORT[?prefix=P], \
                           redis+cluster://HOST:PORT,HOST:PORT,…[?prefix=P] or memory";

pub async fn connect(url: String, connections: usize) -> anyhow::Result<Arc<dyn Storage>> {
    let url = url.as_str();
    if url == "memory" {
        return Ok(Arc::new(MemoryStorage::new()));
    }
    if let Some(target) = RedisTarget::parse(url) {
        let target = target.context("--storage")?;
        let storage = RedisStorage::connect(target).await.context("storage")?;
        return Ok(Arc::new(storage));
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
