//! What a scheme may ask of storage, and what storage answers.
//!
//! Storage is a map from 128-bit addresses to opaque byte strings. Dense schemes (Cloak, the
//! ORAMs) use small integers `0..N`; label-based schemes (encrypted-only, Waffle, Pancake) use
//! pseudorandom labels. Requests that are in flight at the same time may be applied in any
//! order; a request issued after another completed sees its effects. Schemes rely on exactly
//! that and nothing more, so any backend that keeps it (our server, Redis, Redis Cluster) works.

use bytes::Bytes;

/// A storage address or label.
pub type Addr = u128;

/// Identifies a storage request so its reply can be matched to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageOp {
    /// Read these addresses; absent ones come back as `None`.
    Read(Vec<Addr>),
    /// Store these values, replacing what was there.
    Write(Vec<(Addr, Bytes)>),
    /// Remove these addresses (absent ones are ignored).
    Delete(Vec<Addr>),
    /// Up to `limit` stored elements with addresses above `after` (from the lowest when `None`),
    /// in address order; fewer than `limit` means the scan is complete. Only recovery scans,
    /// and it reads everything, so the server learns nothing from it.
    Scan { after: Option<Addr>, limit: u32 },
}

impl StorageOp {
    pub fn kind(&self) -> &'static str {
        match self {
            StorageOp::Read(_) => "read",
            StorageOp::Write(_) => "write",
            StorageOp::Delete(_) => "delete",
            StorageOp::Scan { .. } => "scan",
        }
    }

    /// Number of addresses the request touches.
    pub fn len(&self) -> usize {
        match self {
            StorageOp::Read(a) | StorageOp::Delete(a) => a.len(),
            StorageOp::Write(w) => w.len(),
            StorageOp::Scan { limit, .. } => *limit as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of addresses and values this request sends (16 per address).
    pub fn sent_bytes(&self) -> u64 {
        let addresses = 16 * self.len() as u64;
        match self {
            StorageOp::Write(writes) => {
                addresses + writes.iter().map(|(_, v)| v.len() as u64).sum::<u64>()
            }
            _ => addresses,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRequest {
    pub id: RequestId,
    pub op: StorageOp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageReply {
    /// Values for a [`StorageOp::Read`], in request order.
    Values(Vec<Option<Bytes>>),
    /// A write or delete was applied.
    Done,
    /// Elements found by a [`StorageOp::Scan`], in address order.
    Entries(Vec<(Addr, Bytes)>),
}

impl StorageReply {
    /// Bytes of values this reply brings back.
    pub fn received_bytes(&self) -> u64 {
        match self {
            StorageReply::Values(values) => values.iter().flatten().map(|v| v.len() as u64).sum(),
            StorageReply::Entries(entries) => entries.iter().map(|(_, v)| v.len() as u64).sum(),
            StorageReply::Done => 0,
        }
    }

    /// A short description, for errors about unexpected answers.
    pub fn summary(&self) -> String {
        match self {
            StorageReply::Values(v) => format!("{} values", v.len()),
            StorageReply::Done => "done".into(),
            StorageReply::Entries(e) => format!("{} scanned entries", e.len()),
        }
    }
}

/// Storage could not serve a request. The message is for people; schemes treat every failure
/// alike (the request had no effect they can rely on) and retry or report.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StorageError(pub String);
