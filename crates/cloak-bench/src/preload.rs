//! A ready-made store: every benchmark key with its value, before the measured window starts.
//!
//! Writing a million keys through an oblivious proxy takes as long as the scheme needs to touch
//! every slot (for Cloak, a full cycle of its reuse-distance sets), which says nothing about the
//! workload being measured. So the benchmark hands each scheme a store that already holds the
//! keys, through the same path a restarted proxy takes: in process, the records go to the scheme
//! as its [`Start`]; over sockets, sealed elements are written straight to the storage server and
//! the proxy recovers them with its ordinary storage scan, then lays them out afresh. The Redis
//! baseline gets its keys as a client would write them, with MSET.
//!
//! [`Start`]: cloak_schemes::Start

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use cloak_core::{ElementFormat, Entry, Record, Slot, StorageError, StorageOp, StorageReply};
use cloak_storage::Storage;
use indicatif::ProgressBar;
use tokio::task::JoinSet;

use crate::client::{ClientError, Connection, Reply};
use crate::workload::key_name;

/// Elements per storage request while preloading.
const CHUNK: u64 = 1024;
/// Requests in flight at once.
const DEPTH: usize = 8;

/// The `i`th of `keys` (key numbers) lives in slot `i`, holding the string `value` (in its
/// envelope, as the engine stores values), written by version 1. A single store gets keys
/// `0..n`, each in its own numbered slot; a cluster partition gets the keys its slots own.
pub fn records<K: Iterator<Item = u64>>(
    keys: K,
    value: &Bytes,
) -> impl Iterator<Item = (Slot, Record)> + use<K> {
    let value = Entry::string(value.clone()).seal();
    (0..).zip(keys).map(move |(slot, key)| {
        (
            slot,
            Record {
                version: 1,
                key: Bytes::from(key_name(key)),
                value: value.clone(),
            },
        )
    })
}

/// Writes every one of `keys` to `storage` as `format` encodes it, as [`records`] places
/// them: at addresses `0..` in order.
pub async fn write(
    storage: Arc<dyn Storage>,
    mut format: ElementFormat,
    keys: impl Iterator<Item = u64> + Send,
    value: &Bytes,
    progress: &ProgressBar,
) -> Result<(), StorageError> {
    let mut tasks = JoinSet::new();
    let mut records = records(keys, value).peekable();
    while records.peek().is_some() {
        let elements: Vec<_> = records
            .by_ref()
            .take(CHUNK as usize)
            .map(|(slot, record)| {
                (
                    u128::from(slot),
                    format.encode(u128::from(slot), slot, &record),
                )
            })
            .collect();
        let written = elements.len() as u64;
        let storage = storage.clone();
        tasks.spawn(async move { storage.call(StorageOp::Write(elements)).await });
        if tasks.len() >= DEPTH {
            finished(tasks.join_next().await)?;
        }
        progress.inc(written);
    }
    while let Some(done) = tasks.join_next().await {
        finished(Some(done))?;
    }
    Ok(())
}

/// Writes every key with `value` to the Redis at `addr`, `CHUNK` keys per MSET, `DEPTH` in
/// flight.
pub async fn set(
    addr: SocketAddr,
    keys: u64,
    value: &[u8],
    progress: &ProgressBar,
) -> Result<(), ClientError> {
    let (mut requests, mut replies) = Connection::connect(addr).await?.split();
    let mut in_flight = 0;
    let mut start = 0;
    while start < keys || in_flight > 0 {
        if start < keys && in_flight < DEPTH {
            let end = (start + CHUNK).min(keys);
            let names: Vec<String> = (start..end).map(key_name).collect();
            let mut args: Vec<&[u8]> = vec![b"MSET"];
            for name in &names {
                args.extend([name.as_bytes(), value]);
            }
            requests.queue(&args);
            requests.flush().await?;
            progress.inc(end - start);
            in_flight += 1;
            start = end;
            continue;
        }
        // One MSET is small next to the socket buffers, so the writes above never block on
        // replies left unread here.
        if let Reply::Error(error) = replies.next().await? {
            return Err(ClientError::Refused { addr, error });
        }
        in_flight -= 1;
    }
    Ok(())
}

fn finished(
    done: Option<Result<Result<StorageReply, StorageError>, tokio::task::JoinError>>,
) -> Result<(), StorageError> {
    match done {
        Some(Ok(Ok(StorageReply::Done))) | None => Ok(()),
        Some(Ok(Ok(other))) => Err(StorageError(format!(
            "storage answered a preload write with {}",
            other.summary()
        ))),
        Some(Ok(Err(error))) => Err(error),
        Some(Err(error)) => Err(StorageError(format!("preload task failed: {error}"))),
    }
}
