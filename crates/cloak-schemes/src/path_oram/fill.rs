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
//!
//! Memory: the recovered values stay in recovery's spool on local disk. They are copied into the
//! journal a chunk at a time in spool order ([`KEEP_CHUNK`], each chunk durable before the next
//! is read), then read back again as the buckets holding them are sealed, so a restart holds a
//! few chunks of values at once, never the store's (issue 17). The fill holds each placed
//! block's bucket and slot, 8 bytes, beside recovery's table of what it found.

use std::collections::HashSet;
use std::time::Instant;

use cloak_core::recovery::leak_demo;
use cloak_core::{Addr, Outbox, Record, RecoveredRecords, SchemeError, Slot, StorageOp};
use cloak_crypto::Binding;

use super::Durability;
use super::bucket::BucketCodec;
use super::stash::Block;
use super::tree::Tree;
use crate::shell::fill::{Fill as ShellFill, FillClock, FillShape, Landed, Pace};
use crate::shell::recovered::{read_for_client, take_for_fill};

/// Bytes of buckets written per fill request (at least one bucket).
const CHUNK_BYTES: usize = 8 << 20;

/// Recovered records copied into the journal per journal request.
const KEEP_CHUNK: usize = 4096;

/// Buckets per fill request: [`CHUNK_BYTES`] of them, at least one.
fn buckets_per_request(element_len: usize) -> u64 {
    (CHUNK_BYTES / element_len.max(1)).max(1) as u64
}

pub struct Fill {
    /// Each placed block as (bucket, slot), by bucket; the chunks sent took those before `taken`.
    placed: Vec<(u32, u32)>,
    taken: usize,
    /// The recovered records, read back from the spool for the journal and for each chunk.
    initial: RecoveredRecords,
    /// Recovered slots whose record could not be read back: left out of their bucket (their
    /// leaf stays, so reads of them fail until a client writes them) and kept in the journal.
    lost: HashSet<u32>,
    /// Recovered slots whose record could not be read back to be kept in the journal: a read
    /// of one during the fill is not answered from the spool (see `recovered_for_client`).
    unkept: HashSet<u32>,
    buckets: u64,
    next: u64,
    pub outstanding: usize,
    /// Buckets per request: [`CHUNK_BYTES`] of them.
    chunk: u64,
    landed: Landed,
    /// Copying the recovered records into the journal; no chunk goes out before it is done.
    pub keeping: Keeping,
    pub generation: u64,
    /// When each request leaves (see [`crate::shell::fill`]).
    pub pace: Pace,
}

/// Copying the recovered records into the journal, a chunk at a time.
pub struct Keeping {
    /// Every recovered slot (a freed one too: its empty record must outlive old copies), in
    /// the order their values sit in the spool; the chunk being kept is `order[from..next]`.
    order: Vec<Slot>,
    from: usize,
    next: usize,
    /// Whether that chunk is durable.
    pub durability: Durability,
}

impl Keeping {
    /// Every chunk is kept and durable.
    pub fn is_done(&self) -> bool {
        self.next == self.order.len() && self.durability == Durability::Durable
    }
}

impl Fill {
    /// Places `initial`'s records (each slot mapped by `leaf_of`) into an empty tree; returns
    /// the fill and the blocks that found no room, read back for the stash. Its requests leave
    /// on `pace`; `losses` counts records that cannot be read back.
    pub fn new(
        tree: &Tree,
        z: usize,
        generation: u64,
        initial: RecoveredRecords,
        leaf_of: impl Fn(u32) -> Option<u32>,
        pace: Pace,
        losses: &mut u64,
    ) -> (Self, Vec<Block>) {
        let order: Vec<Slot> = initial
            .in_spool_order()
            .into_iter()
            .filter(|&slot| u32::try_from(slot).ok().and_then(&leaf_of).is_some())
            .collect();
        // Fullness by bucket, while placing: a byte a bucket (`z` is far below 256).
        let mut fullness = vec![0u8; tree.buckets() as usize];
        let mut placed = Vec::with_capacity(order.len());
        let mut left = Vec::new();
        'slots: for (slot, _, _) in initial.iter() {
            let Some((slot, leaf)) = u32::try_from(slot)
                .ok()
                .and_then(|slot| Some((slot, leaf_of(slot)?)))
            else {
                continue;
            };
            for level in (0..tree.levels()).rev() {
                let bucket = tree.bucket(leaf, level);
                let full = &mut fullness[bucket as usize];
                if usize::from(*full) < z {
                    *full += 1;
                    placed.push((bucket as u32, slot));
                    continue 'slots;
                }
            }
            left.push(slot);
        }
        drop(fullness);
        placed.sort_unstable();
        let mut fill = Self {
            placed,
            taken: 0,
            initial,
            lost: HashSet::new(),
            unkept: HashSet::new(),
            buckets: tree.buckets(),
            next: 0,
            outstanding: 0,
            chunk: 1,
            landed: Landed::new(tree.buckets()),
            keeping: Keeping {
                order,
                from: 0,
                next: 0,
                durability: Durability::Durable,
            },
            generation,
            pace,
        };
        let stashed = fill.read_back(&left, 0, losses);
        let left = left
            .into_iter()
            .zip(stashed)
            .filter(|(slot, _)| !fill.lost.contains(slot))
            .map(|(slot, record)| Block {
                slot,
                record,
                journaled: true,
            })
            .collect();
        (fill, left)
    }

    /// The pace of a fill of `tree`'s buckets of `element_len` bytes, `z` blocks each, for
    /// `slots` slots, on `clock`.
    pub fn pace(
        clock: Option<FillClock>,
        tree: &Tree,
        z: usize,
        slots: u64,
        element_len: usize,
    ) -> Pace {
        let request = buckets_per_request(element_len);
        let shape = FillShape {
            // Each bucket's blocks are read back, each possibly from an element of its own;
            // `next_chunk` makes as many reads as this pace says (`Pace::reads`).
            reads_per_element: z as u64,
            ..ShellFill::shape(slots, tree.buckets(), element_len, request)
        };
        Pace::new(clock, shape)
    }

    /// Once the chunk kept last is durable, keeps the next one in `out`'s journal; whether
    /// every chunk is kept and durable.
    pub fn keep_next(&mut self, out: &mut Outbox) -> bool {
        let keeping = &mut self.keeping;
        if keeping.durability == Durability::Durable && keeping.next < keeping.order.len() {
            keeping.from = keeping.next;
            keeping.next = (keeping.from + KEEP_CHUNK).min(keeping.order.len());
            self.keep_chunk(out);
        }
        let done = self.keeping.is_done();
        if done {
            // The order is not needed again (8 bytes a recovered slot for the rest of the fill).
            self.keeping.order = Vec::new();
            (self.keeping.from, self.keeping.next) = (0, 0);
        }
        done
    }

    /// Keeps again the chunk the journal refused.
    pub fn keep_again(&mut self, out: &mut Outbox) {
        if self.keeping.durability == Durability::Failed {
            self.keep_chunk(out);
        }
    }

    /// Keeps `order[from..next]` and waits for it. A record that cannot be read back is not
    /// kept (it goes into `unkept`); the chunk that should carry it counts it lost.
    fn keep_chunk(&mut self, out: &mut Outbox) {
        let keeping = &mut self.keeping;
        let slots = &keeping.order[keeping.from..keeping.next];
        for (&slot, record) in slots.iter().zip(self.initial.read_all(slots, 0)) {
            match record {
                Ok(record) => {
                    out.keep(slot, record);
                }
                Err(_) => self.unkept.extend(u32::try_from(slot)),
            }
        }
        keeping.durability = Durability::Waiting(out.barrier());
    }

    /// The next chunk of sealed buckets to write, if any is left; `losses` counts the records
    /// of its blocks that cannot be read back.
    pub fn next_chunk(&mut self, codec: &mut BucketCodec, losses: &mut u64) -> Option<StorageOp> {
        if self.next == self.buckets {
            return None;
        }
        self.chunk = buckets_per_request(codec.element_len());
        let end = (self.next + self.chunk).min(self.buckets);
        let first = self.taken;
        while self
            .placed
            .get(self.taken)
            .is_some_and(|&(bucket, _)| u64::from(bucket) < end)
        {
            self.taken += 1;
        }
        let (buckets, slots): (Vec<u32>, Vec<u32>) =
            self.placed[first..self.taken].iter().copied().unzip();
        // As many elements read back as the request's buckets could hold blocks, whatever
        // they hold (see `take_for_fill`): each block may come from an element of its own, so
        // fewer would let a chunk of many blocks read more than one of few, and its time would
        // follow the live records. The pace gives that many reads their time ([`Fill::pace`]).
        let reads = self.pace.reads(end - self.next);
        let records = self.read_back(&slots, reads, losses);
        let mut blocks = buckets
            .into_iter()
            .zip(slots)
            .zip(records)
            .filter(|((_, slot), _)| !self.lost.contains(slot))
            .peekable();
        leak_demo::slow_live_records(self.taken - first);
        let writes = (self.next..end)
            .map(|address| {
                let mut bucket = Vec::new();
                while let Some(((_, slot), record)) =
                    blocks.next_if(|((at, _), _)| u64::from(*at) == address)
                {
                    bucket.push(Block {
                        slot,
                        record,
                        journaled: true,
                    });
                }
                let address = Addr::from(address);
                // Public: every bucket of the fill shows the run's first generation.
                let binding = Binding {
                    address,
                    generation: self.generation,
                };
                (address, codec.seal(binding, &bucket))
            })
            .collect();
        self.next = end;
        self.outstanding += 1;
        Some(StorageOp::Write(writes))
    }

    /// The records of `slots` read back, after at least `reads` reads of the spool; those that
    /// cannot be read back go into `lost`.
    fn read_back(
        &mut self,
        slots: &[u32],
        reads: usize,
        losses: &mut u64,
    ) -> Vec<cloak_core::Record> {
        take_for_fill(&mut self.initial, slots, reads, &mut self.lost, losses)
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

    /// `slot`'s recovered record for a client's read while the fill runs (see
    /// [`read_for_client`]), or `None` for a slot whose record the fill already found it could
    /// not read back: that one waits for its access, which fails as its lost block does. Were
    /// it answered from a read back that worked the second time, the client would see a value
    /// that is in neither the journal nor, once a chunk overwrites its old bucket, storage.
    pub fn recovered_for_client(&mut self, slot: u32) -> Option<Result<Record, SchemeError>> {
        let unreadable = self.lost.contains(&slot) || self.unkept.contains(&slot);
        (!unreadable).then(|| read_for_client(&mut self.initial, slot))
    }

    /// Recovered records the fill carries (for a stop, which waits for them).
    pub fn recovered(&self) -> usize {
        self.initial.len()
    }

    /// The recovered records now in storage, as (slot, version), once the fill is done: the
    /// journal may drop them (not those lost, which it keeps).
    pub fn stored(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.initial
            .iter()
            .filter_map(|(slot, version, _)| Some((u32::try_from(slot).ok()?, version)))
            .filter(|(slot, _)| !self.lost.contains(slot))
    }

    /// Every chunk is written and answered.
    pub fn is_done(&self) -> bool {
        self.next == self.buckets && self.outstanding == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_core::{JournalOp, Record};

    fn records(slots: std::ops::Range<u64>) -> RecoveredRecords {
        let record = |slot: u64| Record {
            version: 1,
            key: format!("k{slot}").into(),
            value: format!("v{slot}").into(),
        };
        RecoveredRecords::from(slots.map(|s| (s, record(s))).collect::<Vec<_>>())
    }

    #[test]
    fn blocks_take_the_deepest_free_bucket_of_their_path() {
        let tree = Tree::for_capacity(8); // 3 levels, 4 leaves
        // Every block on leaf 2 with Z = 2: two in the leaf bucket, two above, two in the root,
        // one left over.
        let mut losses = 0;
        let (fill, left) = Fill::new(
            &tree,
            2,
            1,
            records(0..7),
            |_| Some(2),
            Pace::unpaced(),
            &mut losses,
        );
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].record.value, "v6");
        for level in 0..3 {
            let bucket = tree.bucket(2, level) as u32;
            let held = fill.placed.iter().filter(|(b, _)| *b == bucket).count();
            assert_eq!(held, 2, "level {level}");
        }
        assert_eq!(fill.recovered(), 7);
        assert_eq!(losses, 0);
    }

    /// The recovered records go into the journal a chunk at a time, each chunk once the one
    /// before is durable, and every chunk is kept before the fill may start.
    #[test]
    fn recovered_records_are_kept_a_chunk_at_a_time() {
        let n = (KEEP_CHUNK + 10) as u64;
        let tree = Tree::for_capacity(n);
        let (mut fill, _) = Fill::new(
            &tree,
            4,
            1,
            records(0..n),
            |slot| Some(slot % 8),
            Pace::unpaced(),
            &mut 0,
        );
        let mut out = Outbox::default();
        let mut kept = 0;
        for chunk in [KEEP_CHUNK, 10] {
            assert!(!fill.keep_next(&mut out), "not all kept yet");
            // The chunk waits for its barrier: nothing more is kept meanwhile.
            assert!(!fill.keep_next(&mut out));
            let request = out.poll_journal().expect("a chunk is kept");
            let JournalOp::Keep(records) = &request.op else {
                panic!("{:?}", request.op)
            };
            assert_eq!(records.len(), chunk);
            kept += records.len();
            assert_eq!(fill.keeping.durability, Durability::Waiting(request.id));
            fill.keeping.durability = Durability::Durable;
        }
        assert!(fill.keep_next(&mut out), "every chunk is durable");
        assert!(out.poll_journal().is_none());
        assert_eq!(kept as u64, n);
    }
}
