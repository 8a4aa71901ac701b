//! The shape of a Path ORAM tree: how many levels and leaves a capacity gets, where each bucket
//! is stored, and which buckets a root-to-leaf path visits.
//!
//! Buckets are numbered in heap order (root 0, the children of bucket `i` are `2i + 1` and
//! `2i + 2`), and a bucket's number is its storage address, so the tree occupies addresses
//! `0..buckets()`. Level 0 is the root and level `levels() - 1` holds the leaves.
//!
//! Size (the paper leaves it to the implementer): `levels = ceil(log2 N)` (at least 1), so
//! there are `2^(levels-1)` leaves, between `N/2` and `N`, and between `N - 1` and `2N - 1`
//! buckets: about one block per bucket of `Z`. Path ORAM's analysis uses one more level
//! (`L = ceil(log2 N)` in its notation), but its authors report that `L = ceil(log2 N) - 1`,
//! this tree, suffices in their experiments; it halves the storage. The stash bound that comes
//! with it (`--oram-stash-limit`) is measured by this crate's tests, not assumed.

use cloak_core::Addr;

/// The shape of a Path ORAM tree: a complete binary tree of buckets, stored level by level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tree {
    levels: u32,
}

impl Tree {
    /// The tree for a store of `capacity` blocks.
    pub fn for_capacity(capacity: u64) -> Self {
        let log2_ceil = if capacity <= 1 {
            0
        } else {
            u64::BITS - (capacity - 1).leading_zeros()
        };
        Self {
            levels: log2_ceil.max(1),
        }
    }

    /// Buckets on every root-to-leaf path.
    pub fn levels(&self) -> u32 {
        self.levels
    }

    /// Leaves, one per path.
    pub fn leaves(&self) -> u64 {
        1 << (self.levels - 1)
    }

    /// Buckets of the whole tree.
    pub fn buckets(&self) -> u64 {
        (1 << self.levels) - 1
    }

    /// The bucket at `level` on the path to `leaf`.
    pub fn bucket(&self, leaf: u32, level: u32) -> Addr {
        debug_assert!(u64::from(leaf) < self.leaves() && level < self.levels);
        // In 1-based heap numbering the leaf is `leaves + leaf`; its ancestor `k` levels up is
        // that number shifted right by `k`.
        let heap = (self.leaves() + u64::from(leaf)) >> (self.levels - 1 - level);
        Addr::from(heap - 1)
    }

    /// The buckets on the path to `leaf`, root first.
    pub fn path(&self, leaf: u32) -> Vec<Addr> {
        (0..self.levels).map(|l| self.bucket(leaf, l)).collect()
    }

    /// The deepest level the paths to leaves `a` and `b` share: a block mapped to `a` may rest
    /// in the buckets of `b`'s path from the root down to this level.
    pub fn shared_depth(&self, a: u32, b: u32) -> u32 {
        let differing_bits = u32::BITS - (a ^ b).leading_zeros();
        self.levels - 1 - differing_bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_capacity() {
        let sizes: Vec<(u64, u32, u64, u64)> = [1, 2, 3, 4, 5, 1000, 100_000, 1 << 20]
            .into_iter()
            .map(|n| {
                let t = Tree::for_capacity(n);
                (n, t.levels(), t.leaves(), t.buckets())
            })
            .collect();
        assert_eq!(
            sizes,
            vec![
                (1, 1, 1, 1),
                (2, 1, 1, 1),
                (3, 2, 2, 3),
                (4, 2, 2, 3),
                (5, 3, 4, 7),
                (1000, 10, 512, 1023),
                (100_000, 17, 65_536, 131_071),
                (1 << 20, 20, 1 << 19, (1 << 20) - 1),
            ]
        );
        for n in 2..3000u64 {
            let t = Tree::for_capacity(n);
            assert!(2 * t.leaves() >= n && t.leaves() <= n, "{n}");
        }
    }

    #[test]
    fn paths_run_from_the_root_to_their_own_leaf() {
        let t = Tree::for_capacity(16); // 4 levels, 8 leaves, 15 buckets
        assert_eq!(t.path(0), vec![0, 1, 3, 7]);
        assert_eq!(t.path(5), vec![0, 2, 5, 12]);
        assert_eq!(t.path(7), vec![0, 2, 6, 14]);
        let mut leaves: Vec<Addr> = (0..8).map(|leaf| t.bucket(leaf, 3)).collect();
        leaves.sort();
        assert_eq!(leaves, (7..15).collect::<Vec<_>>());
        for leaf in 0..8 {
            let path = t.path(leaf);
            for pair in path.windows(2) {
                assert!(pair[1] == 2 * pair[0] + 1 || pair[1] == 2 * pair[0] + 2);
            }
        }
    }

    #[test]
    fn shared_depth_is_where_two_paths_part() {
        let t = Tree::for_capacity(16);
        for a in 0..8 {
            for b in 0..8 {
                let shared = t
                    .path(a)
                    .iter()
                    .zip(t.path(b))
                    .filter(|(x, y)| **x == *y)
                    .count();
                assert_eq!(t.shared_depth(a, b), shared as u32 - 1, "{a} {b}");
            }
        }
        assert_eq!(Tree::for_capacity(1).shared_depth(0, 0), 0);
    }
}
