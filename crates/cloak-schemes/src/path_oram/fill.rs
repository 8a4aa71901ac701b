//! The initial fill: every bucket is written once, in address order, before the first access.
//!
//! A new store is all empty buckets. After a crash the new instance starts from the recovered
//! records: each gets a uniformly random leaf and goes into the deepest bucket of its path with
//! room (blocks that find none start in the stash). The server sees every address written once,
//! whatever the records are.
//!
//! Crash safety: the fill overwrites the buckets the records were recovered from, in chunks that
//! may land in any order, so every recovered record is kept in the journal before the first
//! chunk is sent and released only once the whole fill has landed (a partial fill may have
//! erased a record's old copy before writing its new one, or written a deleted slot's new empty
//! record while its old copy still sits in an unwritten bucket).

use std::collections::HashMap;
use std::time::Instant;

use cloak_core::recovery::leak_demo;
use cloak_core::{Addr, Record, StorageOp};
use cloak_crypto::Binding;

use super::Durability;
use super::bucket::BucketCodec;
use super::stash::Block;
use super::tree::Tree;
use crate::shell::fill::{Fill as ShellFill, FillClock, Landed, Pace};

/// Bytes of buckets written per fill request (at least one bucket).
const CHUNK_BYTES: usize = 8 << 20;

/// Buckets per fill request: [`CHUNK_BYTES`] of them, at least one.
fn buckets_per_request(element_len: usize) -> u64 {
    (CHUNK_BYTES / element_len.max(1)).max(1) as u64
}

pub struct Fill {
    /// The blocks placed in each non-empty bucket, until its chunk is sealed.
    placed: HashMap<Addr, Vec<Block>>,
    buckets: u64,
    next: u64,
    pub outstanding: usize,
    /// Buckets per request: [`CHUNK_BYTES`] of them.
    chunk: u64,
    landed: Landed,
    /// Whether the recovered records are in the journal; no chunk goes out before they are.
    pub durability: Durability,
    /// The recovered records, released from the journal once the fill is complete.
    pub recovered: Vec<(u32, Record)>,
    pub generation: u64,
    /// When each request leaves (see [`crate::shell::fill`]).
    pub pace: Pace,
}

impl Fill {
    /// Places `blocks` (each mapped by `leaf_of`) into an empty tree; returns the fill and the
    /// blocks that found no room. Its requests leave on `pace`.
    pub fn new(
        tree: &Tree,
        z: usize,
        generation: u64,
        blocks: Vec<Block>,
        leaf_of: impl Fn(u32) -> u32,
        pace: Pace,
    ) -> (Self, Vec<Block>) {
        let recovered = blocks.iter().map(|b| (b.slot, b.record.clone())).collect();
        let mut placed: HashMap<Addr, Vec<Block>> = HashMap::new();
        let mut left = Vec::new();
        'blocks: for block in blocks {
            let leaf = leaf_of(block.slot);
            for level in (0..tree.levels()).rev() {
                let bucket = placed.entry(tree.bucket(leaf, level)).or_default();
                if bucket.len() < z {
                    bucket.push(block);
                    continue 'blocks;
                }
            }
            left.push(block);
        }
        let fill = Self {
            placed,
            buckets: tree.buckets(),
            next: 0,
            outstanding: 0,
            chunk: 1,
            landed: Landed::new(tree.buckets()),
            durability: Durability::Durable,
            recovered,
            generation,
            pace,
        };
        (fill, left)
    }

    /// The pace of a fill of `tree`'s buckets of `element_len` bytes for `slots` slots, on
    /// `clock`.
    pub fn pace(clock: Option<FillClock>, tree: &Tree, slots: u64, element_len: usize) -> Pace {
        let request = buckets_per_request(element_len);
        let shape = ShellFill::shape(slots, tree.buckets(), element_len, request);
        Pace::new(clock, shape)
    }

    /// The next chunk of sealed buckets to write, if any is left.
    pub fn next_chunk(&mut self, codec: &mut BucketCodec) -> Option<StorageOp> {
        if self.next == self.buckets {
            return None;
        }
        self.chunk = buckets_per_request(codec.element_len());
        let end = (self.next + self.chunk).min(self.buckets);
        let mut live = 0;
        let writes = (self.next..end)
            .map(|address| {
                let address = Addr::from(address);
                let blocks = self.placed.remove(&address).unwrap_or_default();
                live += blocks.len();
                // Public: every bucket of the fill shows the run's first generation.
                let binding = Binding {
                    address,
                    generation: self.generation,
                };
                (address, codec.seal(binding, &blocks))
            })
            .collect();
        leak_demo::slow_live_records(live);
        self.next = end;
        self.outstanding += 1;
        Some(StorageOp::Write(writes))
    }

    /// A request of the fill is in storage, its answer having arrived at `arrived`.
    pub fn landed(&mut self, arrived: Instant) {
        self.outstanding -= 1;
        self.pace.answered(arrived);
        self.landed.chunk(self.chunk);
        if self.is_done() {
            self.pace.report();
        }
    }

    /// Buckets in storage, of all the fill writes.
    pub fn status(&self) -> (u64, u64) {
        self.landed.status()
    }

    /// Every chunk is written and answered.
    pub fn is_done(&self) -> bool {
        self.next == self.buckets && self.outstanding == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_core::Record;

    #[test]
    fn blocks_take_the_deepest_free_bucket_of_their_path() {
        let tree = Tree::for_capacity(8); // 3 levels, 4 leaves
        let blocks = (0..7)
            .map(|slot| Block {
                slot,
                record: Record::empty(),
                journaled: true,
            })
            .collect();
        // Every block on leaf 2 with Z = 2: two in the leaf bucket, two above, two in the root,
        // one left over.
        let (fill, left) = Fill::new(&tree, 2, 1, blocks, |_| 2, Pace::unpaced());
        assert_eq!(left.len(), 1);
        for level in 0..3 {
            assert_eq!(fill.placed[&tree.bucket(2, level)].len(), 2);
        }
        assert_eq!(fill.recovered.len(), 7);
    }
}
