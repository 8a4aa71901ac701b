//! The eviction cache (Figure 3, local state 2): blocks held at the proxy, each associated with
//! the subORAM (and leaf) it will be evicted to. A retrieved block enters it with a fresh
//! uniformly random subORAM, so when it leaves (at a later access to that subORAM) says nothing
//! about the requests. Blocks leave only by eviction, oldest first per subORAM.
//!
//! The cache has a limit: with at least two evictions per access it stays near two blocks per
//! subORAM, and past the limit reads that would add a block get a clear error. Writes are kept
//! (the proxy's key directory already has them), so the limit is not a hard bound on memory: with
//! buckets of one or two blocks, evictions overflow often and writes can hold the cache far past
//! it (every slot at most once). The high-water mark is reported in `INFO`.
//!
//! `saved` marks blocks whose current record is also in storage's drain area (written when the
//! proxy drains); what is not saved is counted as unwritten.

use std::collections::VecDeque;

use cloak_core::Record;
use hashbrown::HashMap;

/// Where a cached block will go, and when that was drawn (an access count; see `retention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub sub: u32,
    pub leaf: u32,
    pub drawn: u64,
}

pub struct Entry {
    pub record: Record,
    pub to: Assignment,
    saved: bool,
}

pub struct EvictionCache {
    entries: HashMap<u32, Entry>,
    /// Slots per associated subORAM, in arrival order.
    queues: Vec<VecDeque<u32>>,
    unsaved: usize,
    high_water: usize,
}

impl EvictionCache {
    pub fn new(partitions: u32) -> Self {
        Self {
            entries: HashMap::new(),
            queues: (0..partitions).map(|_| VecDeque::new()).collect(),
            unsaved: 0,
            high_water: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// Blocks whose current record storage does not hold.
    pub fn unsaved(&self) -> usize {
        self.unsaved
    }

    pub fn record(&self, slot: u32) -> Option<&Record> {
        self.entries.get(&slot).map(|e| &e.record)
    }

    /// Adds a block the cache does not hold, to be evicted as `to` says.
    pub fn insert(&mut self, slot: u32, record: Record, to: Assignment) {
        self.insert_entry(
            slot,
            Entry {
                record,
                to,
                saved: false,
            },
        );
    }

    /// Puts back a block that was taken for eviction but did not fit, under a new association.
    pub fn reinsert(&mut self, slot: u32, mut entry: Entry, to: Assignment) {
        entry.to = to;
        self.insert_entry(slot, entry);
    }

    fn insert_entry(&mut self, slot: u32, entry: Entry) {
        if !entry.saved {
            self.unsaved += 1;
        }
        self.queues[entry.to.sub as usize].push_back(slot);
        let previous = self.entries.insert(slot, entry);
        assert!(previous.is_none(), "a block is cached at most once");
        self.high_water = self.high_water.max(self.entries.len());
    }

    /// Replaces a cached block's record (a client write); `false` if it is not cached.
    pub fn update(&mut self, slot: u32, record: Record) -> bool {
        let Some(entry) = self.entries.get_mut(&slot) else {
            return false;
        };
        entry.record = record;
        if entry.saved {
            entry.saved = false;
            self.unsaved += 1;
        }
        true
    }

    /// Takes up to `count` blocks associated with `sub`, oldest first.
    pub fn take(&mut self, sub: u32, count: usize) -> Vec<(u32, Entry)> {
        let queue = &mut self.queues[sub as usize];
        let taken: Vec<u32> = queue.drain(..count.min(queue.len())).collect();
        taken
            .into_iter()
            .map(|slot| {
                let entry = self.entries.remove(&slot).expect("queued slots are cached");
                if !entry.saved {
                    self.unsaved -= 1;
                }
                (slot, entry)
            })
            .collect()
    }

    /// Every cached block, for the drain area.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.entries.iter().map(|(slot, entry)| (*slot, entry))
    }

    /// Storage's drain area holds `slot` at `version`: saved, unless it changed since.
    pub fn mark_saved(&mut self, slot: u32, version: u64) {
        if let Some(entry) = self.entries.get_mut(&slot)
            && !entry.saved
            && entry.record.version == version
        {
            entry.saved = true;
            self.unsaved -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curious::fixtures::record;

    fn to(sub: u32) -> Assignment {
        Assignment {
            sub,
            leaf: 0,
            drawn: 0,
        }
    }

    #[test]
    fn eviction_takes_the_oldest_blocks_of_one_subtree() {
        let mut c = EvictionCache::new(2);
        c.insert(1, record(1), to(0));
        c.insert(2, record(1), to(1));
        c.insert(3, record(1), to(0));
        c.insert(4, record(1), to(0));
        let taken: Vec<u32> = c.take(0, 2).into_iter().map(|(s, _)| s).collect();
        assert_eq!(taken, vec![1, 3]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.high_water(), 4);
        assert!(c.take(1, 5).len() == 1 && c.take(1, 5).is_empty());
    }

    #[test]
    fn saved_blocks_count_as_unsaved_again_when_written() {
        let mut c = EvictionCache::new(1);
        c.insert(1, record(1), to(0));
        c.insert(2, record(1), to(0));
        assert_eq!(c.unsaved(), 2);
        c.mark_saved(1, 1);
        c.mark_saved(2, 7); // an older drain of another version does not count
        assert_eq!(c.unsaved(), 1);
        assert!(c.update(1, record(2)));
        assert_eq!(c.unsaved(), 2);
        c.mark_saved(1, 2);
        let (slot, entry) = c.take(0, 1).pop().unwrap();
        assert_eq!((slot, c.unsaved()), (1, 1));
        c.reinsert(slot, entry, to(0));
        assert_eq!(
            c.unsaved(),
            1,
            "a saved block stays saved when it comes back"
        );
        assert!(!c.update(9, record(1)));
    }
}
