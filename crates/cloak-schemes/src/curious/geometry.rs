//! Where CURIOUS keeps its buckets: the shape of one subORAM (a complete `b`-ary tree of
//! buckets, paper Figure 4) and the storage layout of all `m` subORAMs plus the drain area.
//!
//! Buckets of a tree are numbered in level order: the root is 0 and the children of bucket `i`
//! are `b·i + 1 ..= b·i + b`, so level `ℓ` starts at `(b^ℓ − 1)/(b − 1)` and the bucket at
//! level `ℓ` on the path to leaf `l` is that start plus `l / b^(depth − ℓ)`. Storage address of
//! bucket `i` of subORAM `s` is `s · buckets + i`; the drain area (see `drain` in `mod.rs`)
//! follows the last subORAM.

use cloak_core::Addr;

/// One subORAM's tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    arity: u64,
    depth: u32,
    /// First bucket of each level.
    level_start: Vec<u64>,
    /// Leaves under one bucket of each level: `b^(depth − ℓ)`.
    span: Vec<u64>,
}

impl Tree {
    /// A tree of `depth + 1` levels. `None` if it would have more than `u32::MAX` leaves.
    pub fn new(arity: u32, depth: u32) -> Option<Self> {
        let arity = u64::from(arity.max(2));
        let leaves = arity.checked_pow(depth)?;
        if leaves > u64::from(u32::MAX) {
            return None;
        }
        let mut level_start = Vec::with_capacity(depth as usize + 1);
        let mut span = Vec::with_capacity(depth as usize + 1);
        let (mut start, mut width) = (0u64, 1u64);
        for level in 0..=depth {
            level_start.push(start);
            span.push(arity.pow(depth - level));
            start += width;
            width *= arity;
        }
        Some(Self {
            arity,
            depth,
            level_start,
            span,
        })
    }

    /// The smallest tree (depth at least 1) whose leaf level alone has room for `blocks`
    /// blocks of `bucket_size`: the nominal load of a subORAM then fills at most about
    /// `(b − 1)/b` of the tree, leaving the upper levels as headroom for random fluctuations.
    pub fn for_blocks(arity: u32, bucket_size: usize, blocks: u64) -> Option<Self> {
        let mut depth = 1;
        loop {
            let tree = Self::new(arity, depth)?;
            if tree.leaves().saturating_mul(bucket_size as u64) >= blocks {
                return Some(tree);
            }
            depth += 1;
        }
    }

    pub fn arity(&self) -> u32 {
        self.arity as u32
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    pub fn leaves(&self) -> u64 {
        self.span[0]
    }

    pub fn buckets(&self) -> u64 {
        self.level_start[self.depth as usize] + self.leaves()
    }

    /// Buckets on one root-to-leaf path.
    pub fn path_len(&self) -> usize {
        self.depth as usize + 1
    }

    /// The bucket at `level` on the path to `leaf`.
    pub fn bucket(&self, leaf: u32, level: u32) -> u64 {
        self.level_start[level as usize] + u64::from(leaf) / self.span[level as usize]
    }

    /// The path to `leaf`, root first.
    pub fn path(&self, leaf: u32) -> impl Iterator<Item = u64> + '_ {
        (0..=self.depth).map(move |level| self.bucket(leaf, level))
    }

    /// The deepest level whose bucket lies on the paths to both leaves.
    pub fn common_level(&self, a: u32, b: u32) -> u32 {
        // Levels only go up to `depth`, and the root is shared by every path.
        (0..=self.depth)
            .rev()
            .find(|&level| {
                let span = self.span[level as usize];
                u64::from(a) / span == u64::from(b) / span
            })
            .unwrap_or(0)
    }
}

/// Where every bucket of the store lives.
#[derive(Clone, Debug)]
pub struct Layout {
    pub tree: Tree,
    pub partitions: u32,
    /// Buckets of the drain area, after the last subORAM.
    pub drain_buckets: u64,
}

impl Layout {
    pub fn address(&self, sub: u32, bucket: u64) -> Addr {
        Addr::from(u64::from(sub) * self.tree.buckets() + bucket)
    }

    /// The path to `leaf` of subORAM `sub`, root first, as storage addresses.
    pub fn path(&self, sub: u32, leaf: u32) -> Vec<Addr> {
        self.tree
            .path(leaf)
            .map(|bucket| self.address(sub, bucket))
            .collect()
    }

    /// The drain area's buckets.
    pub fn drain_area(&self) -> impl Iterator<Item = Addr> + use<> {
        let start = u64::from(self.partitions) * self.tree.buckets();
        (start..start + self.drain_buckets).map(Addr::from)
    }

    /// Every bucket of the store: the subORAMs, then the drain area.
    pub fn elements(&self) -> u64 {
        u64::from(self.partitions) * self.tree.buckets() + self.drain_buckets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ternary_tree_numbers_its_buckets_in_level_order() {
        let t = Tree::new(3, 2).unwrap();
        assert_eq!((t.leaves(), t.buckets(), t.path_len()), (9, 13, 3));
        assert_eq!(t.path(0).collect::<Vec<_>>(), vec![0, 1, 4]);
        assert_eq!(t.path(4).collect::<Vec<_>>(), vec![0, 2, 8]);
        assert_eq!(t.path(8).collect::<Vec<_>>(), vec![0, 3, 12]);
        // Children of bucket i are 3i+1 ..= 3i+3 on every path.
        for leaf in 0..9 {
            let path: Vec<u64> = t.path(leaf).collect();
            for pair in path.windows(2) {
                assert!((3 * pair[0] + 1..=3 * pair[0] + 3).contains(&pair[1]));
            }
        }
        assert_eq!(t.common_level(0, 2), 1);
        assert_eq!(t.common_level(0, 3), 0);
        assert_eq!(t.common_level(5, 5), 2);
    }

    #[test]
    fn trees_are_sized_so_the_leaves_hold_the_nominal_load() {
        // 316 blocks of a 100,000-key store with 317 subORAMs: 3^4 leaves × 5 ≥ 316 > 3^3 × 5.
        let t = Tree::for_blocks(3, 5, 316).unwrap();
        assert_eq!((t.depth(), t.leaves(), t.buckets()), (4, 81, 121));
        assert_eq!(Tree::for_blocks(3, 5, 1).unwrap().depth(), 1);
        assert_eq!(Tree::for_blocks(2, 4, 1000).unwrap().depth(), 8);
        assert!(Tree::new(3, 40).is_none(), "more leaves than 32 bits hold");
    }

    #[test]
    fn addresses_of_subtrees_and_drain_area_do_not_overlap() {
        let layout = Layout {
            tree: Tree::new(3, 1).unwrap(),
            partitions: 3,
            drain_buckets: 2,
        };
        assert_eq!(layout.path(1, 2), vec![4, 7]);
        assert_eq!(layout.drain_area().collect::<Vec<_>>(), vec![12, 13]);
        assert_eq!(layout.elements(), 14);
    }
}
