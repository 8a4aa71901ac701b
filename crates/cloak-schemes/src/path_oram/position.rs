//! The position map, kept at the proxy: the leaf each slot's block is mapped to.
//!
//! A block lies on the path from the root to its leaf, or in the stash. Every leaf is drawn
//! uniformly from the proxy's CSPRNG when a block is written or accessed, and the server only
//! learns it when that block's next access reads its path, at which point it is replaced: so
//! every path the server sees read is a fresh uniform leaf, whatever the requests are.

use rand::Rng;
use rand_chacha::ChaCha20Rng;

use super::tree::Tree;

/// A slot that has never held a block in this instance.
const ABSENT: u32 = u32::MAX;

pub struct PositionMap {
    leaves: Vec<u32>,
    tree: Tree,
}

impl PositionMap {
    /// A map of `slots` slots, none holding a block yet.
    pub fn new(slots: usize, tree: Tree) -> Self {
        Self {
            leaves: vec![ABSENT; slots],
            tree,
        }
    }

    pub fn slots(&self) -> usize {
        self.leaves.len()
    }

    /// The leaf of `slot`'s block, or `None` if the slot never held one or is past the map
    /// (a slot a hostile storage server's element named, which no block of this store holds).
    pub fn get(&self, slot: u32) -> Option<u32> {
        let leaf = *self.leaves.get(slot as usize)?;
        (leaf != ABSENT).then_some(leaf)
    }

    /// Maps `slot`'s block to a fresh uniformly random leaf and returns it.
    pub fn remap(&mut self, slot: u32, rng: &mut ChaCha20Rng) -> u32 {
        let leaf = self.random_leaf(rng);
        self.leaves[slot as usize] = leaf;
        leaf
    }

    /// A uniformly random leaf.
    pub fn random_leaf(&self, rng: &mut ChaCha20Rng) -> u32 {
        // Leaves are at most 2^31 (the capacity is bounded at build time), so this fits.
        rng.random_range(0..self.tree.leaves()) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn slots_start_absent_and_remaps_stay_on_the_tree() {
        let tree = Tree::for_capacity(100);
        let mut map = PositionMap::new(100, tree);
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        assert_eq!(map.get(7), None);
        assert_eq!(map.get(100), None, "past the map");
        let mut seen = vec![false; tree.leaves() as usize];
        for _ in 0..2000 {
            let leaf = map.remap(7, &mut rng);
            assert_eq!(map.get(7), Some(leaf));
            seen[leaf as usize] = true;
        }
        assert!(seen.iter().all(|s| *s), "every leaf is reachable");
    }
}
