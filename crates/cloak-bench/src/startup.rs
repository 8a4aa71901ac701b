//! What a proxy's start on a preloaded store costs: the time until it listens, the time until
//! it answers its first read (a scheme that rewrites the store after recovery holds reads until
//! that is done), its peak memory meanwhile, and the floor: the time a bare scan of the same
//! storage takes from outside the proxy, which no recovery can beat.
//!
//! The bench's proxy start is exactly a restart: the preload wrote the store, and the proxy
//! recovers it with its ordinary storage scan (see [`crate::preload`]).

use std::time::{Duration, Instant};

use cloak_core::{Addr, StorageError, StorageOp, StorageReply};
use cloak_storage::Storage;
use serde::Serialize;

use crate::client::{ClientError, Connection, Reply, Target};

/// Elements per scan request: the proxy's recovery asks for as many.
const SCAN_CHUNK: u32 = 4096;

/// A proxy's start on a preloaded store (see the module docs).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Startup {
    /// Seconds a bare scan of the whole store took, from the bench over the same connection
    /// kind the proxy uses.
    pub scan_floor_seconds: f64,
    /// Seconds from starting the proxy to its saying it listens.
    pub listening_seconds: f64,
    /// Seconds from starting the proxy to the answer of its first read.
    pub first_read_seconds: f64,
    /// The proxy's peak resident memory (`VmHWM`) by then: recovery's high-water mark.
    pub peak_rss_bytes: Option<u64>,
}

/// Scans all of `storage` the way a recovery does (in order, one chunk at a time) and says how
/// long it took and how many elements it read.
pub async fn scan_floor(storage: &dyn Storage) -> Result<(Duration, u64), StorageError> {
    let started = Instant::now();
    let mut after: Option<Addr> = None;
    let mut elements = 0u64;
    loop {
        let reply = storage
            .call(StorageOp::Scan {
                after,
                limit: SCAN_CHUNK,
            })
            .await?;
        let StorageReply::Entries(entries) = reply else {
            return Err(StorageError(format!(
                "storage answered a scan with {}",
                reply.summary()
            )));
        };
        elements += entries.len() as u64;
        after = entries.last().map(|(address, _)| *address).or(after);
        if entries.len() < SCAN_CHUNK as usize {
            return Ok((started.elapsed(), elements));
        }
    }
}

/// Reads `key` through the proxy at `target` (over TLS if the bench's clients use it) and waits
/// for its answer, however long the proxy holds it.
pub async fn first_read(target: Target, key: &[u8]) -> Result<(), ClientError> {
    let addr = target.addr;
    let mut connection = Connection::connect(target).await?;
    match connection.call(&[b"GET", key]).await? {
        Reply::Error(error) => Err(ClientError::Refused { addr, error }),
        _ => Ok(()),
    }
}
