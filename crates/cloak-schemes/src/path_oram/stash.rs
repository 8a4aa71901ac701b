//! The stash and Path ORAM's greedy eviction.
//!
//! The stash holds the blocks that did not fit back into the tree when their path was last
//! written. They exist only at the proxy, so every one is in the journal (see the module
//! comment of `path_oram`). After each access the stash is bounded by `--oram-stash-limit`; its
//! largest size so far is reported as the high-water mark.
//!
//! Eviction is step 4 of Path ORAM's `Access`: the blocks of the path just read and the stash
//! are written back along that path from the leaf up, each bucket taking up to `Z` of the
//! blocks whose own path passes through it, so every block rests as deep as it can.

use cloak_core::Record;
use hashbrown::HashMap;

use super::tree::Tree;

/// A block on its way through an access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub slot: u32,
    pub record: Record,
    /// The journal holds this version of the block (it came from the stash, or a client wrote
    /// it), so once storage holds it again its journal entry may go. A block read from the tree
    /// and unchanged is not in the journal.
    pub journaled: bool,
}

#[derive(Default)]
pub struct Stash {
    blocks: HashMap<u32, Record>,
    high_water: usize,
}

impl Stash {
    pub fn get(&self, slot: u32) -> Option<&Record> {
        self.blocks.get(&slot)
    }

    pub fn contains(&self, slot: u32) -> bool {
        self.blocks.contains_key(&slot)
    }

    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The most blocks the stash held after any eviction.
    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// Takes every block out for an eviction.
    pub fn take_all(&mut self) -> impl Iterator<Item = Block> + '_ {
        self.blocks.drain().map(|(slot, record)| Block {
            slot,
            record,
            journaled: true,
        })
    }

    /// Puts back the blocks an eviction left over (all journaled by then).
    pub fn put_back(&mut self, blocks: impl IntoIterator<Item = Block>) {
        for block in blocks {
            debug_assert!(
                block.journaled,
                "only journaled blocks may rest in the stash"
            );
            self.blocks.insert(block.slot, block.record);
        }
        self.high_water = self.high_water.max(self.blocks.len());
    }
}

/// Where an eviction put the blocks.
#[derive(Debug, Default)]
pub struct Eviction {
    /// The blocks of each bucket on the path, root first; at most `Z` each.
    pub buckets: Vec<Vec<Block>>,
    /// The blocks that did not fit and stay in the stash.
    pub left: Vec<Block>,
}

/// Greedy eviction of `blocks` onto the path to `leaf`, deepest buckets first; `leaf_of` gives
/// each block's leaf. Which of the eligible blocks a bucket takes does not change how many fit
/// (every block eligible at a level is eligible above it too), so blocks are taken in any order.
pub fn evict(
    tree: &Tree,
    z: usize,
    leaf: u32,
    blocks: impl IntoIterator<Item = Block>,
    leaf_of: impl Fn(u32) -> u32,
) -> Eviction {
    let levels = tree.levels() as usize;
    let mut by_depth: Vec<Vec<Block>> = (0..levels).map(|_| Vec::new()).collect();
    for block in blocks {
        let depth = tree.shared_depth(leaf_of(block.slot), leaf) as usize;
        by_depth[depth].push(block);
    }
    let mut buckets: Vec<Vec<Block>> = (0..levels).map(|_| Vec::new()).collect();
    let mut eligible: Vec<Block> = Vec::new();
    for level in (0..levels).rev() {
        eligible.append(&mut by_depth[level]);
        let take = z.min(eligible.len());
        buckets[level] = eligible.split_off(eligible.len() - take);
    }
    Eviction {
        buckets,
        left: eligible,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(slot: u32) -> Block {
        Block {
            slot,
            record: Record::empty(),
            journaled: false,
        }
    }

    #[test]
    fn blocks_go_as_deep_as_their_leaf_allows() {
        let tree = Tree::for_capacity(16); // 4 levels, leaves 0..8
        // Slot s is mapped to leaf s % 8; evict onto the path to leaf 5.
        let leaf_of = |slot: u32| slot % 8;
        let e = evict(&tree, 2, 5, (0..8).map(block), leaf_of);
        let slots = |level: usize| {
            let mut s: Vec<u32> = e.buckets[level].iter().map(|b| b.slot).collect();
            s.sort();
            s
        };
        // Leaf 5 = 0b101: slot 5 shares the whole path, 4 shares 2 levels below the root,
        // 6 and 7 share one, 0..4 only the root.
        assert_eq!(slots(3), vec![5]);
        assert_eq!(slots(2), vec![4]);
        assert_eq!(slots(1), vec![6, 7]);
        assert_eq!(e.buckets[0].len(), 2, "the root takes two of 0..4");
        assert_eq!(e.left.len(), 2, "the other two stay in the stash");
        assert!(e.left.iter().all(|b| b.slot < 4));
    }

    #[test]
    fn a_full_bucket_pushes_blocks_up_not_down() {
        let tree = Tree::for_capacity(16);
        // Five blocks all mapped to leaf 3, evicted onto the path to leaf 3 with Z = 2: two at
        // the leaf, two at level 2, one at level 1.
        let e = evict(&tree, 2, 3, (0..5).map(block), |_| 3);
        let counts: Vec<usize> = e.buckets.iter().map(Vec::len).collect();
        assert_eq!(counts, vec![0, 1, 2, 2]);
        assert!(e.left.is_empty());
    }

    #[test]
    fn the_stash_tracks_its_high_water_mark() {
        let mut stash = Stash::default();
        let journaled = |slot| Block {
            journaled: true,
            ..block(slot)
        };
        stash.put_back((0..5).map(journaled));
        assert_eq!((stash.len(), stash.high_water()), (5, 5));
        let taken: Vec<Block> = stash.take_all().collect();
        assert_eq!(taken.len(), 5);
        stash.put_back(taken.into_iter().take(2));
        assert_eq!((stash.len(), stash.high_water()), (2, 5));
        assert_eq!((0..5).filter(|s| stash.contains(*s)).count(), 2);
    }
}
