//! A new scheme instance's initial fill: every element of its storage written once, in chunks
//! with a few requests in flight, before it serves anything. It writes everything whatever the
//! data, so it shows the server nothing but the store's size. A large store's fill takes
//! minutes, so it logs how far it got every few seconds ([`Progress`]); only the log sees that.

use std::ops::Range;

use cloak_core::recovery::Progress;
use cloak_core::{Outbox, Slot};

/// Fill requests in flight at once: enough to keep storage busy, few enough that a large store's
/// fill does not queue megabytes at the driver.
pub const FILL_WINDOW: usize = 4;

/// Where the fill is: which elements are written, and how many requests are unanswered.
pub struct Fill {
    elements: u64,
    chunk: u64,
    window: usize,
    next: u64,
    outstanding: usize,
    landed: Landed,
}

/// How much of a fill is in storage, logged every few seconds ([`Progress`]).
pub struct Landed {
    elements: u64,
    landed: u64,
    progress: Progress,
}

impl Landed {
    /// None of `elements` in storage yet.
    pub fn new(elements: u64) -> Self {
        Self {
            elements,
            landed: 0,
            progress: Progress::every(Progress::INTERVAL),
        }
    }

    /// A request of `chunk` elements, or the last one, shorter, is in storage.
    pub fn chunk(&mut self, chunk: u64) {
        // Counted in whole chunks and capped at the total: the one short chunk may land before
        // others, so the count is off by less than a chunk until the fill ends.
        self.landed = (self.landed + chunk).min(self.elements);
        self.progress.filled(self.landed, self.elements);
    }

    /// Elements in storage, of all the fill writes.
    pub fn status(&self) -> (u64, u64) {
        (self.landed, self.elements)
    }
}

impl Fill {
    /// A fill of `elements`, `chunk` per request, at most [`FILL_WINDOW`] requests in flight.
    pub fn new(elements: u64, chunk: u64) -> Self {
        Self::with_window(elements, chunk, FILL_WINDOW)
    }

    fn with_window(elements: u64, chunk: u64, window: usize) -> Self {
        Self {
            elements,
            chunk,
            window,
            next: 0,
            outstanding: 0,
            landed: Landed::new(elements),
        }
    }

    /// The elements the next request writes, while the window has room.
    pub fn next_chunk(&mut self) -> Option<Range<u64>> {
        if self.outstanding >= self.window || self.next >= self.elements {
            return None;
        }
        let range = self.next..(self.next + self.chunk).min(self.elements);
        self.next = range.end;
        self.outstanding += 1;
        Some(range)
    }

    /// A fill request is in storage; the recovered records it carried, as (slot, version), no
    /// longer need the journal.
    pub fn written(&mut self, recovered: Vec<(u32, u64)>, out: &mut Outbox) {
        self.outstanding -= 1;
        self.landed.chunk(self.chunk);
        for (slot, version) in recovered {
            out.release(Slot::from(slot), version);
        }
    }

    /// While the fill runs: elements in storage, of all it writes.
    pub fn filling(&self) -> Option<(u64, u64)> {
        (!self.is_done()).then_some(self.landed.status())
    }

    /// Every element is in storage.
    pub fn is_done(&self) -> bool {
        self.next == self.elements && self.outstanding == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_everything_within_the_window() {
        let mut fill = Fill::with_window(10, 4, 2);
        assert_eq!(fill.next_chunk(), Some(0..4));
        assert_eq!(fill.next_chunk(), Some(4..8));
        assert_eq!(fill.next_chunk(), None, "window full");
        assert_eq!(fill.filling(), Some((0, 10)));
        let mut out = Outbox::default();
        fill.written(vec![(3, 7)], &mut out);
        assert_eq!(fill.filling(), Some((4, 10)), "a chunk landed");
        assert_eq!(fill.next_chunk(), Some(8..10));
        fill.written(Vec::new(), &mut out);
        assert!(!fill.is_done());
        fill.written(Vec::new(), &mut out);
        assert!(fill.is_done() && fill.next_chunk().is_none());
        assert_eq!(fill.filling(), None, "done");
        assert!(
            out.poll_journal().is_some(),
            "the recovered record is released"
        );
    }
}
