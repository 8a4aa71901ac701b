//! Write-backs that storage has not acknowledged yet, so that the next batch's read need not
//! wait for them.
//!
//! A batch's read leaves on the grid (see [`crate::schedule`]), and used to be skipped whenever
//! the previous batch's write-back was still unanswered at its grid point. A write-back of a
//! few megabytes often takes longer than the half interval it has on a busy host (a third of
//! the grid points were skipped at 1M keys, 100 × 64 requests in flight), and every skip made
//! every waiting request wait one more interval. A skip is also something the server sees, and
//! it comes more often under load.
//!
//! So the next read leaves on time while one write-back is unanswered. Storage may answer it
//! before or after it applies that write-back (requests travel on several connections), so for
//! every address the read shares with an unanswered write-back, the element the proxy wrote is
//! used instead of what storage returned: the proxy knows it, and it is what storage holds once
//! the write-back lands. The read still asks for the address: what the server sees of the read
//! is the same either way. A write-back leaves only once the one before it is answered, so two
//! write-backs of the same address never race; one that must wait for that leaves late, and is
//! counted as late ([`cloak_core::SchemeStats::late_write_backs`]) like one sealed late.
//!
//! At most two write-backs are kept (the one storage is applying, and the next, sealed and
//! waiting for it), each a batch of sealed elements: memory stays bounded by the budgets.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

/// One batch's write-back, from sealing until storage acknowledges it.
pub(super) struct WriteBack {
    /// Addresses in ascending order, as written.
    pub addrs: Vec<u32>,
    /// The element written to each address.
    pub elements: Vec<Bytes>,
    /// Client writes it carries, as (slot, version): acknowledged, not yet stored.
    pub written: Vec<(u32, u64)>,
    /// When the batch's read left; the write-back leaves a fixed hold after it.
    pub started: Instant,
    /// Whether it was handed to storage (the one before it is answered).
    pub sent: bool,
}

/// The unanswered write-backs, oldest first.
#[derive(Default)]
pub(super) struct WriteBacks {
    queue: VecDeque<WriteBack>,
}

impl WriteBacks {
    /// Most write-backs kept: one being applied, one waiting for it.
    const MOST: usize = 2;

    /// Whether another batch may start: a batch whose write-back would wait behind two others
    /// would hold a third batch of elements.
    pub fn has_room(&self) -> bool {
        self.queue.len() < Self::MOST
    }

    /// Keeps `write_back`; `true` if it may leave now (none before it is unanswered).
    pub fn push(&mut self, write_back: WriteBack) -> bool {
        debug_assert!(self.has_room());
        let first = self.queue.is_empty();
        self.queue.push_back(write_back);
        first
    }

    /// The oldest write-back, once storage acknowledged it.
    pub fn answered(&mut self) -> Option<WriteBack> {
        self.queue.pop_front()
    }

    /// The oldest write-back if it has not left yet (it was waiting for the one just answered).
    pub fn next_to_send(&mut self) -> Option<&mut WriteBack> {
        self.queue.front_mut().filter(|w| !w.sent)
    }

    /// The element an unanswered write-back put at `addr`, the newest if several did.
    pub fn element_at(&self, addr: u32) -> Option<&Bytes> {
        self.queue.iter().rev().find_map(|w| {
            w.addrs
                .binary_search(&addr)
                .ok()
                .map(|index| &w.elements[index])
        })
    }

    /// Client writes carried by unanswered write-backs.
    pub fn unwritten(&self) -> usize {
        self.queue.iter().map(|w| w.written.len()).sum()
    }
}
