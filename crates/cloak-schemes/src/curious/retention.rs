//! Retention: blocks stay readable at the proxy for a window after they got their subORAM.
//!
//! Why (a correction to the paper's argument): a cached block can only enter its subORAM
//! during an access to that subORAM, and Figure 3 evicts it at the first such access. A key
//! requested again right after that is fetched from the subORAM just accessed, so with a hot key
//! consecutive accesses hit the same subORAM twice as often as chance (measured: 2/m against
//! 1/m for uniform keys; Theorem 6.1 only shows each access alone is uniform). The server can
//! tell a workload with temporal locality from a uniform one.
//!
//! The fix: a block whose subORAM was drawn at access `t` is served from the proxy (requests for
//! it are dummy accesses) until access `t + W`, wherever it is; eviction still happens at the
//! first access to its subORAM, and afterwards the proxy keeps a read-only copy here until the
//! window ends. A fetch therefore comes at least `W` accesses after the draw, by which time the
//! subORAM has almost surely been accessed (and the block evicted) for unrelated reasons: given
//! what the server saw, the fetched subORAM is uniform except with probability about
//! `e^(−W/m)` (`W = 16m` by default). The window counts from the draw, never from the eviction,
//! since the eviction's time is tied to the subORAM and would leak it again.
//!
//! A client write to a retained block makes the copy in the tree stale: the block moves back to
//! the eviction cache under a new draw, and the stale copy, a *ghost*, is dropped by the next
//! access that reads it (ghosts always have an older version than the live block, and recovery
//! takes the newest version, so a ghost never wins).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use cloak_core::Record;
use hashbrown::{HashMap, HashSet};

pub struct Retention {
    window: u64,
    copies: HashMap<u32, (Record, u64)>,
    /// (end of window, slot), soonest first; an entry whose slot was retained again later is
    /// skipped.
    ends: BinaryHeap<Reverse<(u64, u32)>>,
    /// Stale copies in storage, as (slot, version).
    ghosts: HashSet<(u32, u64)>,
}

impl Retention {
    pub fn new(window: u64) -> Self {
        Self {
            window,
            copies: HashMap::new(),
            ends: BinaryHeap::new(),
            ghosts: HashSet::new(),
        }
    }

    pub fn window(&self) -> u64 {
        self.window
    }

    pub fn len(&self) -> usize {
        self.copies.len()
    }

    pub fn ghosts(&self) -> usize {
        self.ghosts.len()
    }

    /// `slot` was just evicted with `record`, having drawn its subORAM at access `drawn`; keeps
    /// a copy until the window ends (`now` is the current access count).
    pub fn evicted(&mut self, slot: u32, record: &Record, drawn: u64, now: u64) {
        let end = drawn.saturating_add(self.window);
        if now < end {
            self.copies.insert(slot, (record.clone(), end));
            self.ends.push(Reverse((end, slot)));
        }
    }

    /// Drops copies whose window has ended by access `now`.
    pub fn expire(&mut self, now: u64) {
        while let Some(&Reverse((end, slot))) = self.ends.peek() {
            if end > now {
                break;
            }
            self.ends.pop();
            if self.copies.get(&slot).is_some_and(|(_, e)| *e == end) {
                self.copies.remove(&slot);
            }
        }
    }

    pub fn get(&self, slot: u32) -> Option<&Record> {
        self.copies.get(&slot).map(|(record, _)| record)
    }

    /// A client writes the retained `slot`: its copy in storage becomes a ghost.
    pub fn overwritten(&mut self, slot: u32) {
        if let Some((record, _)) = self.copies.remove(&slot) {
            self.ghosts.insert((slot, record.version));
        }
    }

    /// Whether a block found in storage is a ghost; if so it is forgotten (it is being dropped).
    pub fn take_ghost(&mut self, slot: u32, version: u64) -> bool {
        self.ghosts.remove(&(slot, version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curious::fixtures::record;

    #[test]
    fn copies_last_from_the_draw_not_from_the_eviction() {
        let mut r = Retention::new(10);
        r.evicted(1, &record(1), 0, 4);
        r.evicted(2, &record(1), 0, 10); // the window had already ended
        assert!(r.get(1).is_some() && r.get(2).is_none());
        r.expire(9);
        assert!(r.get(1).is_some());
        r.expire(10);
        assert!(r.get(1).is_none());
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn a_later_retention_of_the_same_slot_outlives_the_earlier_end() {
        let mut r = Retention::new(10);
        r.evicted(1, &record(1), 0, 1);
        r.evicted(1, &record(2), 5, 6);
        r.expire(12);
        assert_eq!(r.get(1), Some(&record(2)));
    }

    #[test]
    fn overwritten_copies_become_ghosts_dropped_once() {
        let mut r = Retention::new(10);
        r.evicted(1, &record(3), 0, 1);
        r.overwritten(1);
        assert!(r.get(1).is_none());
        assert_eq!(r.ghosts(), 1);
        assert!(!r.take_ghost(1, 4), "the live version is not a ghost");
        assert!(r.take_ghost(1, 3));
        assert!(!r.take_ghost(1, 3));
    }
}
