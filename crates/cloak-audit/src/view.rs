//! A recorded server view, organised the way the server itself could organise it.
//!
//! The input is exactly what the simulator's trace holds (`cloak_core::Observed`: when each
//! request came and was answered, its kind, its addresses, every byte written). Everything
//! derived here is computed from that alone, in order, as a server watching its own traffic
//! would compute it:
//!
//! - a **batch** is a read request, numbered from 1 as they arrive (a write belongs to the batch
//!   of the last read before it, as a write-back does);
//! - a write's **source** is the read it writes back: the latest read of exactly the same
//!   addresses (Cloak, Pancake, a CURIOUS path, with other accesses in flight meanwhile), or
//!   else the read of its own batch (Waffle writes under fresh labels);
//! - an address's **reuse distance** at a read is the number of batches since the address was
//!   last seen (read or written); the addresses at distance `d` are Cloak's set `S_d`;
//! - a read's **write-to-read distance** is the number of batches since the address was last
//!   written: Waffle's α (paper §5, Figures 4–5).
//!
//! Addresses not seen since the view began have no distance (`None`).

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use cloak_core::{AccessKind, Addr, Observed};
use cloak_crypto::ClearHeader;

/// One request as the server received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerRequest {
    /// Time since the view began.
    pub at: Duration,
    /// When storage answered it (time since the view began), if it did.
    pub answered: Option<Duration>,
    pub kind: AccessKind,
    /// Its accesses, as indices into [`ServerView::accesses`].
    pub accesses: Range<usize>,
    /// The batch it belongs to (0 for writes before the first read).
    pub batch: u32,
    /// For a write: the read it writes back (index into [`ServerView::requests`]), if any.
    pub source: Option<u32>,
}

/// One address in one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub addr: Addr,
    /// Index into [`ServerView::requests`].
    pub request: u32,
    /// Batches since the address was last seen; for reads only.
    pub reuse_distance: Option<u32>,
    /// Batches since the address was last written; for reads only.
    pub since_written: Option<u32>,
    /// Bytes written there; for writes only.
    pub value_len: Option<u32>,
    /// The clear header of the element written there, read as the server reads it; for writes
    /// only (of anything but a sealed element it holds whatever bytes sit there). The rest of an
    /// element is ciphertext: the trace keeps it, the view keeps what can be read.
    pub header: Option<ClearHeader>,
}

/// What the server saw during one observation window.
#[derive(Clone, Debug, Default)]
pub struct ServerView {
    /// How long the server watched.
    pub window: Duration,
    pub requests: Vec<ServerRequest>,
    pub accesses: Vec<Access>,
}

impl ServerView {
    /// The view of `trace` between `start` and `start + window`, with times made relative to
    /// `start`.
    pub fn new(trace: &[Observed], start: Duration, window: Duration) -> Self {
        let end = start + window;
        let mut view = ServerView {
            window,
            ..ServerView::default()
        };
        let mut batch = 0u32;
        // The latest read of each set of addresses, by its hash, and the latest read of all.
        let mut read_of_set: HashMap<u64, u32> = HashMap::new();
        let mut last_read: Option<u32> = None;
        let mut last_seen: HashMap<Addr, u32> = HashMap::new();
        let mut last_written: HashMap<Addr, u32> = HashMap::new();
        for seen in trace.iter().filter(|o| o.at >= start && o.at < end) {
            if seen.kind == AccessKind::Read {
                batch += 1;
            }
            let request = view.requests.len() as u32;
            let first = view.accesses.len();
            for (i, &addr) in seen.addrs.iter().enumerate() {
                let read = seen.kind == AccessKind::Read;
                let reuse_distance = last_seen.insert(addr, batch).map(|b| batch - b);
                let since_written = match seen.kind {
                    AccessKind::Write => {
                        last_written.insert(addr, batch);
                        None
                    }
                    AccessKind::Delete => {
                        last_written.remove(&addr);
                        None
                    }
                    _ => last_written.get(&addr).map(|b| batch - b),
                };
                view.accesses.push(Access {
                    addr,
                    request,
                    reuse_distance: reuse_distance.filter(|_| read),
                    since_written: since_written.filter(|_| read),
                    value_len: seen.values.get(i).map(|v| v.len() as u32),
                    header: seen.values.get(i).and_then(|v| ClearHeader::read(v)),
                });
            }
            let source = match seen.kind {
                AccessKind::Read => {
                    read_of_set.insert(address_set(&seen.addrs), request);
                    last_read = Some(request);
                    None
                }
                AccessKind::Write => read_of_set
                    .get(&address_set(&seen.addrs))
                    .copied()
                    .or(last_read.filter(|&r| view.requests[r as usize].batch == batch)),
                AccessKind::Delete | AccessKind::Scan => None,
            };
            view.requests.push(ServerRequest {
                at: seen.at - start,
                answered: seen.answered.map(|t| t.saturating_sub(start)),
                kind: seen.kind,
                accesses: first..view.accesses.len(),
                batch,
                source,
            });
        }
        view
    }

    /// The requests made during `window` (times relative to the view's start).
    pub fn requests_in(&self, window: &Range<Duration>) -> &[ServerRequest] {
        let from = self.requests.partition_point(|r| r.at < window.start);
        let to = self.requests.partition_point(|r| r.at < window.end);
        &self.requests[from..to]
    }

    /// The accesses of `request`.
    pub fn accesses_of(&self, request: &ServerRequest) -> &[Access] {
        &self.accesses[request.accesses.clone()]
    }

    /// Every write that writes back a read, with that read: `(read, write)`.
    pub fn write_backs(&self) -> impl Iterator<Item = (&ServerRequest, &ServerRequest)> {
        self.requests
            .iter()
            .filter_map(|w| w.source.map(|r| (&self.requests[r as usize], w)))
    }

    /// The whole window.
    pub fn span(&self) -> Range<Duration> {
        Duration::ZERO..self.window
    }

    /// Number of batches (read requests).
    pub fn batches(&self) -> u32 {
        self.requests.last().map_or(0, |r| r.batch)
    }
}

/// A hash of a set of addresses, the same in any order.
fn address_set(addrs: &[Addr]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let mut sorted = addrs.to_vec();
    sorted.sort_unstable();
    BuildHasherDefault::<DefaultHasher>::default().hash_one(&sorted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn op(ms: u64, kind: AccessKind, addrs: &[Addr]) -> Observed {
        Observed {
            at: Duration::from_millis(ms),
            answered: Some(Duration::from_millis(ms + 1)),
            kind,
            addrs: addrs.to_vec(),
            values: if kind == AccessKind::Write {
                vec![Bytes::from_static(&[0; 10]); addrs.len()]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn distances_are_what_the_server_can_count() {
        use AccessKind::{Read, Write};
        let trace = [
            op(5, Write, &[9]),     // before the window
            op(10, Write, &[1, 2]), // batch 0
            op(20, Read, &[1, 3]),  // batch 1
            op(21, Write, &[1, 3]),
            op(30, Read, &[2]), // batch 2
            op(40, Read, &[1, 3]),
            op(50, Read, &[1]), // after the window
        ];
        let view = ServerView::new(&trace, Duration::from_millis(10), Duration::from_millis(40));
        assert_eq!(view.requests.len(), 5);
        assert_eq!(view.batches(), 3);
        assert_eq!(view.requests[0].at, Duration::ZERO);
        assert_eq!(view.requests[0].answered, Some(Duration::from_millis(1)));
        // The write of batch 1 writes back its read; the first write has no read to write back.
        let sources: Vec<Option<u32>> = view.requests.iter().map(|r| r.source).collect();
        assert_eq!(sources, [None, None, Some(1), None, None]);
        let read = |r: usize| -> Vec<(Option<u32>, Option<u32>)> {
            view.accesses_of(&view.requests[r])
                .iter()
                .map(|a| (a.reuse_distance, a.since_written))
                .collect()
        };
        // Batch 1 reads 1 (written in batch 0) and 3 (never seen).
        assert_eq!(read(1), [(Some(1), Some(1)), (None, None)]);
        // Batch 2 reads 2, written in batch 0 and not seen since.
        assert_eq!(read(3), [(Some(2), Some(2))]);
        // Batch 3 reads 1 and 3, both written back in batch 1.
        assert_eq!(read(4), [(Some(2), Some(2)), (Some(2), Some(2))]);
        assert_eq!(view.accesses_of(&view.requests[2])[0].value_len, Some(10));
        assert_eq!(
            view.requests_in(&(Duration::from_millis(10)..Duration::from_millis(30)))
                .len(),
            3
        );
    }
}
