//! Writing a path back (Figure 4's "rewrite path p, pushing blocks down to the leaf as far as
//! possible"): every block goes to the deepest bucket of the path that also lies on the path
//! to its own leaf and still has room. There is no stash: what fits nowhere is handed back to
//! the eviction cache.
//!
//! Blocks that were read from the path are placed before blocks evicted from the cache, level by
//! level. At each level every block still waiting may go to that level or any above it, so the
//! blocks are interchangeable for the rest of the sweep and preferring the path's own blocks
//! costs nothing; and since the path's own blocks fitted before (minus the one retrieved), they
//! always fit again. Only evicted blocks can overflow, so a block never leaves storage by
//! overflowing: only the retrieved block does, which keeps crash safety simple (see `mod.rs`).

use super::geometry::Tree;

/// A block to place: its leaf, and what the caller needs to seal it.
pub struct Placed<T> {
    pub leaf: u32,
    pub block: T,
}

/// The path's buckets (root first) and the evicted blocks that did not fit.
pub struct Placement<T> {
    pub buckets: Vec<Vec<T>>,
    pub overflow: Vec<Placed<T>>,
}

/// Places `from_path` (blocks read from the path to `leaf`, which must all lie on it) and then
/// `evicted` on that path, at most `bucket_size` per bucket.
pub fn place<T>(
    tree: &Tree,
    leaf: u32,
    bucket_size: usize,
    from_path: Vec<Placed<T>>,
    evicted: Vec<Placed<T>>,
) -> Placement<T> {
    let levels = tree.path_len();
    // Blocks by the deepest level they may occupy, path blocks and evicted ones apart.
    let mut own: Vec<Vec<Placed<T>>> = (0..levels).map(|_| Vec::new()).collect();
    let mut guests: Vec<Vec<Placed<T>>> = (0..levels).map(|_| Vec::new()).collect();
    for block in from_path {
        own[tree.common_level(leaf, block.leaf) as usize].push(block);
    }
    for block in evicted {
        guests[tree.common_level(leaf, block.leaf) as usize].push(block);
    }
    let mut buckets: Vec<Vec<T>> = (0..levels).map(|_| Vec::new()).collect();
    let (mut waiting_own, mut waiting_guests) = (Vec::new(), Vec::new());
    for level in (0..levels).rev() {
        waiting_own.append(&mut own[level]);
        waiting_guests.append(&mut guests[level]);
        let bucket = &mut buckets[level];
        while bucket.len() < bucket_size {
            match waiting_own.pop().or_else(|| waiting_guests.pop()) {
                Some(placed) => bucket.push(placed.block),
                None => break,
            }
        }
    }
    assert!(
        waiting_own.is_empty(),
        "blocks read from a path always fit back on it"
    );
    Placement {
        buckets,
        overflow: waiting_guests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(leaves: &[u32], first: u32) -> Vec<Placed<u32>> {
        leaves
            .iter()
            .enumerate()
            .map(|(i, &leaf)| Placed {
                leaf,
                block: first + i as u32,
            })
            .collect()
    }

    #[test]
    fn blocks_go_as_deep_as_their_own_path_allows() {
        let tree = Tree::new(3, 2).unwrap();
        // Path to leaf 0 is buckets 0, 1, 4. Leaf 1 shares buckets 0 and 1; leaf 4 only the root.
        let p = place(&tree, 0, 2, blocks(&[0, 1], 10), blocks(&[4, 0, 0], 20));
        // The path's own block takes the leaf bucket first; evicted ones fill what is left.
        assert_eq!(p.buckets[2], vec![10, 22]);
        assert_eq!(p.buckets[1], vec![11, 21]);
        assert_eq!(p.buckets[0], vec![20]);
        assert!(p.overflow.is_empty());
    }

    #[test]
    fn only_evicted_blocks_overflow_and_path_blocks_always_fit() {
        let tree = Tree::new(3, 2).unwrap();
        // Two path blocks that can only sit in the root fill it; evicted root-only blocks spill.
        let p = place(&tree, 0, 2, blocks(&[8, 7], 1), blocks(&[5, 6, 0], 10));
        let mut root = p.buckets[0].clone();
        root.sort();
        assert_eq!(root, vec![1, 2]);
        assert_eq!(p.buckets[2], vec![12]);
        let mut spilled: Vec<u32> = p.overflow.iter().map(|b| b.block).collect();
        spilled.sort();
        assert_eq!(spilled, vec![10, 11]);
    }
}
