//! What a proxy's start on a preloaded store costs: the time until it listens, the time until
//! it answers its first read (a scheme that rewrites the store after recovery may hold reads
//! until that is done; Cloak answers them from the recovered records meanwhile), the time until
//! that rewrite (the fill) is done, its peak memory by then, and the floor: the time a bare scan
//! of the same storage takes from outside the proxy, which no recovery can beat.
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
    /// Seconds from starting the proxy to the end of its initial fill (`INFO` no longer says
    /// it is loading): the measured load starts then.
    pub filled_seconds: f64,
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
/// for its answer, however long the proxy holds it; the key was preloaded, so anything but its
/// value is an error.
pub async fn first_read(target: Target, key: &[u8]) -> Result<(), ClientError> {
    let addr = target.addr;
    let mut connection = Connection::connect(target).await?;
    match connection.call(&[b"GET", key]).await? {
        Reply::Value(Some(_)) => Ok(()),
        other => Err(ClientError::Refused {
            addr,
            error: format!("{other:?} to a read of a preloaded key"),
        }),
    }
}

/// How often [`filled`] asks.
const LOADING_POLL: Duration = Duration::from_millis(20);

/// How long [`filled`] waits for a fill that reports no progress before it gives up: a fill
/// writes a request every few milliseconds, so this is storage failing, not a slow fill.
const FILL_STALL: Duration = Duration::from_secs(120);

/// Waits until the proxy at `target` no longer says it is loading (`INFO persistence`'s
/// `loading:0`): its initial fill is done and batches run on their schedule. Fails if the fill
/// reports no progress (`loading_loaded_elements`) for two minutes: storage failing, not a
/// slow fill.
pub async fn filled(target: Target) -> Result<(), ClientError> {
    let addr = target.addr;
    let mut connection = Connection::connect(target).await?;
    let (mut loaded, mut since) = (None, Instant::now());
    loop {
        let info = match connection.call(&[b"INFO", b"persistence"]).await? {
            Reply::Value(Some(info)) => String::from_utf8_lossy(&info).into_owned(),
            other => {
                return Err(ClientError::Refused {
                    addr,
                    error: format!("{other:?} to INFO persistence"),
                });
            }
        };
        match info_field(&info, "loading") {
            Some("0") => return Ok(()),
            Some(_) => {}
            None => {
                return Err(ClientError::Refused {
                    addr,
                    error: "an INFO persistence answer with no loading field".into(),
                });
            }
        }
        let now_loaded = info_field(&info, "loading_loaded_elements").map(str::to_owned);
        if now_loaded != loaded {
            (loaded, since) = (now_loaded, Instant::now());
        } else if since.elapsed() > FILL_STALL {
            return Err(ClientError::FillStalled {
                addr,
                waited: FILL_STALL,
            });
        }
        tokio::time::sleep(LOADING_POLL).await;
    }
}

/// The value of the field `name` in an `INFO` answer.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_an_info_answer() {
        let info = "# Persistence\r\nloading:1\r\nloading_loaded_perc:12.5\r\n\
                    loading_loaded_elements:2048\r\n";
        assert_eq!(info_field(info, "loading"), Some("1"));
        assert_eq!(info_field(info, "loading_loaded_elements"), Some("2048"));
        assert_eq!(
            info_field("# Persistence\r\nloading:0\r\n", "loading"),
            Some("0")
        );
        assert_eq!(info_field("# Server\r\n", "loading"), None);
    }
}
