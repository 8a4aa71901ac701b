//! What a scheme may ask of storage, and what storage answers.
//!
//! Storage is a map from 128-bit addresses to opaque byte strings. Dense schemes (Cloak, the
//! ORAMs) use small integers `0..N`; label-based schemes (encrypted-only, Waffle, Pancake) use
//! pseudorandom labels. Requests that are in flight at the same time may be applied in any
//! order; a request issued after another completed sees its effects. Schemes rely on exactly
//! that and nothing more, so any backend that keeps it (our server, Redis, Redis Cluster) works.

use std::time::Instant;

use bytes::Bytes;

/// A storage address or label.
pub type Addr = u128;

/// The one address no scheme uses: it holds the store's marker (its random id, tagged under the
/// master key; see `cloak_proxy::store_id`). Dense schemes use small addresses and labels are
/// pseudorandom 128-bit values, which hit this one with probability 2^-128. Recovery skips it.
pub const STORE_MARKER: Addr = Addr::MAX;

/// Identifies a storage request so its reply can be matched to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// What a scheme asks of storage.
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
    Scan {
        /// List addresses above this one.
        after: Option<Addr>,
        /// At most this many.
        limit: u32,
    },
}

impl StorageOp {
    /// Its kind, for logs.
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

    /// Whether it names no address.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kind of answer this request calls for.
    pub fn expected_reply(&self) -> ExpectedReply {
        match self {
            StorageOp::Read(addrs) => ExpectedReply::Values(addrs.len()),
            StorageOp::Write(_) | StorageOp::Delete(_) => {
                ExpectedReply::Done(self.kind(), self.len())
            }
            StorageOp::Scan { limit, .. } => ExpectedReply::Entries(*limit as usize),
        }
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

/// A storage op with the id its answer comes back with, and the instant before which it must not
/// leave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRequest {
    /// The id.
    pub id: RequestId,
    /// The op.
    pub op: StorageOp,
    /// The driver sends the op at this instant, not before (`None`, or an instant already
    /// passed: at once). A scheme on a public schedule hands a batch read or a write-back over as
    /// soon as it is ready, with its time on the schedule here: the driver can then send it at
    /// that time even while it is busy with clients (see `cloak-proxy`'s `wake` module).
    pub not_before: Option<Instant>,
}

/// Storage's answer to a request.
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

/// The kind of answer a request calls for, small enough to keep while the request is in flight.
///
/// Storage is untrusted: a reply of the wrong kind (say `Done` for a read, which a scheme could
/// take for "nothing stored" and answer nil) is turned into a [`StorageError`] by
/// [`ExpectedReply::check`] before any scheme sees it, so a hostile server can make requests
/// fail but never make a scheme give a wrong answer. The engine checks every reply this way.
/// What the server sees next is what it would see after any failed request (a retry): it
/// depends only on what the server itself answered, so it learns nothing from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedReply {
    /// One value or absence for each of this many addresses read.
    Values(usize),
    /// An acknowledgement of this kind of request (write or delete) of this many addresses.
    Done(&'static str, usize),
    /// At most this many scanned entries.
    Entries(usize),
}

impl ExpectedReply {
    /// `result` if it is an error or an answer of the expected kind and size; otherwise an error
    /// saying what storage answered.
    pub fn check(
        self,
        result: Result<StorageReply, StorageError>,
    ) -> Result<StorageReply, StorageError> {
        let reply = result?;
        let fits = match (self, &reply) {
            (ExpectedReply::Values(n), StorageReply::Values(values)) => values.len() == n,
            (ExpectedReply::Done(..), StorageReply::Done) => true,
            (ExpectedReply::Entries(limit), StorageReply::Entries(entries)) => {
                entries.len() <= limit
            }
            _ => false,
        };
        if fits {
            Ok(reply)
        } else {
            Err(self.malformed(&reply))
        }
    }

    /// The error for `reply` arriving where this kind of answer was expected.
    pub fn malformed(self, reply: &StorageReply) -> StorageError {
        let request = match self {
            ExpectedReply::Values(n) => format!("read of {n} addresses"),
            ExpectedReply::Done(kind, n) => format!("{kind} of {n} addresses"),
            ExpectedReply::Entries(limit) => format!("scan of up to {limit} elements"),
        };
        StorageError(format!(
            "storage gave a malformed answer to a {request}: {}",
            reply.summary()
        ))
    }
}

/// Storage could not serve a request. The message is for people; schemes treat every failure
/// alike (the request had no effect they can rely on) and retry or report. One failure is for
/// the proxy instead: [`StorageError::is_fenced_off`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StorageError(pub String);

/// How a storage backend's refusal of a proxy fenced off by a later one begins (see
/// `Storage::fence` in `cloak-storage`).
pub const FENCED_OFF: &str = "fenced off: a proxy started after this one uses the store now";

impl StorageError {
    /// Whether storage refused this proxy because a proxy started after it fenced it off: no
    /// request of this proxy's will be served again, and what it acknowledges from now on
    /// would never reach the store, so the proxy must stop.
    pub fn is_fenced_off(&self) -> bool {
        self.0.contains(FENCED_OFF)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_must_answer_the_kind_and_size_of_their_request() {
        let read = StorageOp::Read(vec![1, 2]).expected_reply();
        let write = StorageOp::Write(vec![(1, Bytes::new())]).expected_reply();
        let scan = StorageOp::Scan {
            after: None,
            limit: 1,
        }
        .expected_reply();
        let values = |n| Ok(StorageReply::Values(vec![None; n]));
        let entries = |n| Ok(StorageReply::Entries(vec![(0, Bytes::new()); n]));
        assert_eq!(read.check(values(2)), values(2));
        assert_eq!(write.check(Ok(StorageReply::Done)), Ok(StorageReply::Done));
        assert_eq!(scan.check(entries(1)), entries(1));
        let down = Err(StorageError("down".into()));
        assert_eq!(read.check(down.clone()), down);
        for (expected, reply) in [
            (read, Ok(StorageReply::Done)),
            (read, values(1)),
            (write, values(1)),
            (scan, Ok(StorageReply::Done)),
            (scan, entries(2)),
        ] {
            let error = expected.check(reply).unwrap_err();
            assert!(
                error.0.starts_with("storage gave a malformed answer"),
                "{error}"
            );
        }
    }
}
