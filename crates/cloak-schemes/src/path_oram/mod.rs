//! Path ORAM (Stefanov et al., CCS'13), the tree ORAM the CURIOUS paper evaluates (§3.2: `Z = 4`,
//! stash 89), as a sans-io [`Scheme`](cloak_core::Scheme).
//!
//! Storage holds a binary tree of buckets (`tree`), each one sealed element of `Z` padded
//! records (`bucket`). The proxy holds the position map, a leaf per slot (`position`), and
//! the stash (`stash`). Every client op is one `Access` of the paper:
//!
//! 1. read the whole path from the root to the leaf of the op's block (for a slot that never held
//!    a block, a uniformly random leaf), in one storage read;
//! 2. take the path's blocks into the stash, apply the op to the block, and map the block to a
//!    fresh uniformly random leaf;
//! 3. write the whole path back, every bucket sealed anew, filled greedily from the leaf up with
//!    the blocks of the stash whose own paths pass through it.
//!
//! # What the server sees
//! Per client op, one read of every bucket of a root-to-leaf path, then one write of the same
//! buckets, all of one size. The leaf read for a block was drawn from the proxy's CSPRNG at the
//! block's previous access and has influenced nothing the server saw since (it only decided where
//! that block rests, inside sealed buckets); a slot without a block reads a fresh random leaf. So
//! the leaves the server sees are independent uniform draws whatever the keys are, which is Path
//! ORAM's security argument. Contents are AES-GCM under fresh nonces: a rewritten bucket looks
//! new whether or not it changed. `tests/path_oram.rs` checks all of this on recorded views.
//!
//! # Many clients
//! Accesses are strictly sequential in their logic — each one's path read is processed, and its
//! eviction computed, only after the previous access's eviction — and they are pipelined in
//! their I/O: the next access's path read is sent as soon as the previous access's write-back is
//! sent, so an access costs about one round trip. Storage may apply a read and a write that are
//! in flight together in either order, and two consecutive paths always share the root (and
//! more), so a read sent while the previous write-back is in flight takes the buckets the two
//! share from the proxy's copy of that write-back, not from what storage answers. What storage
//! answers for them is still authenticated: it must be the bucket as it was before or after that
//! write. A write-back waits until the previous one has landed, because two writes of the root
//! in flight together could land in the wrong order. The server therefore sees the same
//! alternation of path reads and path writes whatever the requests are; only their timing
//! follows the clients, as in any ORAM (the paper's security definition leaves request timing to
//! the application).
//!
//! Every op costs exactly one access of its own, so how many accesses the server sees depends
//! only on how many ops arrive. Ops on the same slot share what can be shared *without* changing
//! that: a read is answered at once when the proxy already holds the newest value (a write still
//! waiting for its access, a block in the stash, or nothing for a slot that never held a block),
//! and reads that must wait for the path are answered by the first access of that slot that
//! reads it, not each by its own; a write is acknowledged as soon as it is journaled and answers
//! the reads waiting on that slot. The access each op brings still runs, in arrival order,
//! exactly as Path ORAM's access of that block (it remaps the block), so the server sees the
//! same thing as without the sharing. Clients learn values earlier; the server learns nothing new.
//!
//! # Crash safety
//! A block read from a path and left in the stash by the eviction exists only at the proxy once
//! the write-back lands. So the eviction keeps every such block in the journal, and the
//! write-back is sent only once the journal says they are durable. To keep that wait from
//! telling the server whether anything was kept, every write-back waits for a journal barrier
//! ([`Outbox::barrier`](cloak_core::Outbox::barrier)), empty or not. A block that was journaled (a stash block, a client
//! write) is released once a write-back that put it in a bucket has landed, unless by then it is
//! back in the stash (it stays journaled). A client write is kept before it is acknowledged, as
//! in every scheme. Blocks moving between buckets of one path are not journaled: that assumes a
//! write-back, one storage request, lands whole or not at all when the proxy dies, as Cloak's
//! permuted batch write-backs assume too (our server and the simulator apply a request whole;
//! `cloak_core::storage` does not promise it). At a drain (shutdown) the proxy runs dummy
//! accesses until the stash is empty, so storage alone holds everything.
//!
//! # Integrity
//! Each bucket is sealed with its address and a generation (this run's base plus a counter of
//! write-backs) that the proxy tracks per bucket, so a corrupted, swapped, replayed or deleted
//! bucket fails to open. Its blocks are then lost; the position map still says those slots hold
//! blocks, so reading one answers an integrity error rather than "no value", until a client
//! writes it again.
//!
//! # Stash bound
//! After each access the stash holds at most `--oram-stash-limit` blocks (89 by default: the
//! stash size CURIOUS (§3.2) takes from Path ORAM's Table 3 for `Z = 4`, "the most optimistic
//! parameter setting"); its high-water mark is in `INFO`, and `tests/path_oram.rs` measures it (11 over 21,000
//! accesses on a full tree of 1,000 blocks). Going over the limit is Path ORAM's failure event,
//! negligible at these settings: the proxy then refuses new ops with a clear error and runs dummy
//! accesses until the stash is back under the limit, losing nothing. Those extra accesses are
//! visible to the server, and so is the (negligible) event.

mod bucket;
mod fill;
mod options;
mod position;
mod stash;
mod tree;

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use cloak_core::{
    Addr, ElementCodec, JournalId, Op, OpId, Record, Reply, SchemeError, SchemeStats, Slot,
    StorageError, StorageOp,
};
use cloak_crypto::Binding;
use hashbrown::HashMap;
use rand_chacha::ChaCha20Rng;

use crate::Start;
use crate::shell::fill::FILL_WINDOW;
use crate::shell::retry::Retry;
use crate::shell::{Algorithm, Answer, Io, RequestPurpose};
use bucket::BucketCodec;
use fill::Fill;
pub use options::{DEFAULT_BUCKET_SIZE, DEFAULT_STASH_LIMIT, MAX_CAPACITY, PathOramOptions};
use position::PositionMap;
use stash::{Block, Eviction, Stash, evict};
pub use tree::Tree;

/// Accesses owed to client ops beyond which the driver stops submitting (backpressure).
const MAX_QUEUED: usize = 1024;

/// Path ORAM's parameters, checked (see [`PathOramOptions::config`]).
#[derive(Clone, Debug)]
pub struct PathOramConfig {
    /// Blocks per bucket, `Z`.
    pub bucket_size: usize,
    /// Most blocks the stash may hold after an access.
    pub stash_limit: usize,
}

/// Client ops on one slot that are not done with its accesses.
#[derive(Default)]
struct Waiting {
    /// Reads answered by the next access of this slot that reads its path.
    readers: Vec<OpId>,
    /// The newest acknowledged write, applied to the block by that access.
    write: Option<Record>,
    /// Accesses of this slot queued or being read.
    accesses: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Slot(u32),
    /// An access for no block: only to evict (while draining or after a stash overflow).
    Dummy,
}

/// The access whose path read is in flight.
struct Reading {
    target: Target,
    leaf: u32,
    /// The previous write-back was in flight when the read was sent, so storage may answer the
    /// buckets both touch from before or after it.
    overlaps_write: bool,
}

/// Whether records kept in the journal are durable yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    Waiting(JournalId),
    /// The journal refused them; they are kept again after a backoff.
    Failed,
    Durable,
}

/// An access's write-back of its path.
struct WriteBack {
    path: Vec<Addr>,
    generation: u64,
    /// Each bucket's generation before this write-back, root first.
    previous: Vec<u64>,
    /// Each bucket's blocks, root first: what a read sent before this lands must see.
    contents: Vec<Vec<Block>>,
    /// The sealed buckets, until sent.
    op: Option<StorageOp>,
    /// Journaled blocks it puts into buckets, as (slot, version): released once it lands.
    releases: Vec<(u32, u64)>,
    /// Blocks it takes out of storage (they stay in the stash), kept in the journal first.
    dropped: Vec<u32>,
    durability: Durability,
    landed: bool,
}

/// Why Path ORAM sent a storage request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Part of the initial fill.
    Fill,
    /// An access's path read.
    Read,
    /// An access's path write-back.
    Write,
}

/// The Path ORAM algorithm (run it in a [`crate::Shell`]).
pub struct PathOram {
    tree: Tree,
    stash_limit: usize,
    codec: BucketCodec,
    rng: ChaCha20Rng,
    positions: PositionMap,
    stash: Stash,
    /// The generation each bucket was last sealed under.
    generations: Vec<u64>,
    next_generation: u64,

    waiting: HashMap<u32, Waiting>,
    queue: VecDeque<Target>,
    filling: Option<Fill>,
    reading: Option<Reading>,
    /// Computed, waiting for its journal barrier and for the previous write-back to land.
    prepared: Option<WriteBack>,
    /// The last write-back sent; kept after it lands until the next is sent (a read sent while
    /// it was in flight may still be waiting for its answer).
    written: Option<WriteBack>,
    draining: bool,

    journal_retry: Retry<()>,
    io: Io<Purpose>,
    accesses: u64,
    stash_overflows: u64,
}

impl PathOram {
    /// A Path ORAM of `slots` slots holding `start`'s records; its first requests fill storage.
    pub fn new(
        config: PathOramConfig,
        slots: u64,
        codec: ElementCodec,
        mut rng: ChaCha20Rng,
        start: Start,
    ) -> Self {
        let tree = Tree::for_capacity(slots);
        let z = config.bucket_size;
        let mut positions = PositionMap::new(slots as usize, tree);
        let mut io = Io::default();
        // Generations start above every earlier run's (see `Start::generation_base`).
        let fill_generation = start.generation_base + 1;
        for (slot, _, _) in start.records.iter() {
            if let Some(slot) = u32::try_from(slot).ok().filter(|&s| u64::from(s) < slots) {
                positions.remap(slot, &mut rng);
            }
        }
        let codec = BucketCodec::new(codec, z);
        let pace = Fill::pace(start.fill_clock, &tree, z, slots, codec.element_len());
        let (fill, left) = Fill::new(
            &tree,
            z,
            fill_generation,
            start.records,
            |slot| positions.get(slot),
            pace,
            &mut io.stats.fill_losses,
        );
        let mut stash = Stash::default();
        stash.put_back(left);
        let mut scheme = Self {
            tree,
            stash_limit: config.stash_limit,
            codec,
            rng,
            positions,
            stash,
            generations: vec![fill_generation; tree.buckets() as usize],
            next_generation: fill_generation + 1,
            waiting: HashMap::new(),
            queue: VecDeque::new(),
            filling: Some(fill),
            reading: None,
            prepared: None,
            written: None,
            draining: false,
            journal_retry: Retry::default(),
            io,
            accesses: 0,
            stash_overflows: 0,
        };
        scheme.progress();
        scheme
    }

    /// The tree storage holds.
    pub fn tree(&self) -> Tree {
        self.tree
    }

    fn z(&self) -> usize {
        self.codec.bucket_size()
    }

    fn overflowing(&self) -> bool {
        self.stash.len() > self.stash_limit
    }

    fn overflow_error(&self) -> SchemeError {
        SchemeError::Overloaded(format!(
            "the Path ORAM stash overflowed: {} blocks wait at the proxy, more than \
             --oram-stash-limit {}; new requests are refused until evictions bring it back under \
             the limit (nothing is lost). With Z >= 4 and the default limit this is vanishingly \
             rare: check --oram-bucket-size and --oram-stash-limit",
            self.stash.len(),
            self.stash_limit
        ))
    }

    fn send(&mut self, purpose: Purpose, op: StorageOp) {
        self.note_read_sent(purpose);
        self.io.send(purpose, op);
    }

    /// A path read goes out (again, after a failure): whether it may see the previous
    /// write-back applied or not depends on whether that is still in flight now.
    fn note_read_sent(&mut self, purpose: Purpose) {
        if purpose == Purpose::Read
            && let Some(reading) = &mut self.reading
        {
            reading.overlaps_write = self.written.as_ref().is_some_and(|w| !w.landed);
        }
    }

    /// Moves everything along that can move: the fill, the prepared write-back, the next access.
    fn progress(&mut self) {
        if let Some(fill) = &mut self.filling {
            if !fill.keep_next(&mut self.io.out) {
                return;
            }
            let mut chunks = Vec::new();
            while fill.outstanding < FILL_WINDOW
                && let Some(op) = fill.next_chunk(&mut self.codec, &mut self.io.stats.fill_losses)
            {
                chunks.push(op);
            }
            let done = fill.is_done();
            for op in chunks {
                fill.pace.send(&mut self.io, Purpose::Fill, op);
            }
            if !done {
                return;
            }
            let fill = self.filling.take().expect("checked above");
            for (slot, version) in fill.stored() {
                if !self.stash.contains(slot) {
                    self.io.out.release(Slot::from(slot), version);
                }
            }
            tracing::info!(
                buckets = self.tree.buckets(),
                stash = self.stash.len(),
                "storage filled, Path ORAM accesses start"
            );
        }
        if let Some(prepared) = &self.prepared
            && prepared.durability == Durability::Durable
            && self.written.as_ref().is_none_or(|w| w.landed)
        {
            let mut prepared = self.prepared.take().expect("checked above");
            let op = prepared
                .op
                .take()
                .expect("a prepared write-back holds its request");
            self.written = Some(prepared);
            self.send(Purpose::Write, op);
        }
        if self.reading.is_none() && self.prepared.is_none() {
            self.start_access();
        }
    }

    /// Starts the next access: the next op's, or a dummy one while the stash must shrink.
    fn start_access(&mut self) {
        let target = match self.queue.pop_front() {
            Some(target) => target,
            None if self.overflowing() || (self.draining && !self.stash.is_empty()) => {
                Target::Dummy
            }
            None => return,
        };
        let leaf = match target {
            Target::Slot(slot) => self.positions.get(slot),
            Target::Dummy => None,
        }
        .unwrap_or_else(|| self.positions.random_leaf(&mut self.rng));
        self.accesses += 1;
        self.io.stats.batches += 1;
        match target {
            Target::Slot(_) => self.io.stats.real_accesses += 1,
            Target::Dummy => self.io.stats.dummy_accesses += 1,
        }
        self.reading = Some(Reading {
            target,
            leaf,
            overlaps_write: false,
        });
        let path = self.tree.path(leaf);
        self.send(Purpose::Read, StorageOp::Read(path));
    }

    /// The path read came back: take its blocks, serve the access's op, evict, prepare the
    /// write-back.
    fn finish_read(&mut self, values: Vec<Option<Bytes>>) {
        let reading = self.reading.take().expect("a path read is in flight");
        let path = self.tree.path(reading.leaf);
        let overlay = self.written.as_ref().filter(|_| reading.overlaps_write);
        let mut blocks: Vec<Block> = Vec::new();
        let mut lost = false;
        for (level, (&address, value)) in path.iter().zip(&values).enumerate() {
            if let Some(write) = overlay.filter(|w| w.path[level] == address) {
                // Storage may have applied the write-back or not: either bucket is genuine, and
                // the proxy's copy is the current one.
                let genuine = [write.generation, write.previous[level]].iter().any(|&g| {
                    let binding = Binding {
                        address,
                        generation: g,
                    };
                    self.codec
                        .open(binding, value.as_ref(), self.positions.slots())
                        .is_ok()
                });
                if !genuine {
                    self.io.stats.integrity_failures += 1;
                    tracing::error!(
                        address,
                        "storage returned a bad bucket (the proxy had a copy)"
                    );
                }
                blocks.extend(write.contents[level].iter().map(|b| Block {
                    journaled: false,
                    ..b.clone()
                }));
                continue;
            }
            let binding = Binding {
                address,
                generation: self.generations[address as usize],
            };
            match self
                .codec
                .open(binding, value.as_ref(), self.positions.slots())
            {
                Ok(found) => blocks.extend(found.into_iter().map(|(slot, record)| Block {
                    slot,
                    record,
                    journaled: false,
                })),
                Err(error) => {
                    lost = true;
                    self.io.stats.integrity_failures += 1;
                    tracing::error!(address, %error, "storage returned a bad bucket; its blocks are lost");
                }
            }
        }
        blocks.extend(self.stash.take_all());
        if let Target::Slot(slot) = reading.target {
            self.serve(slot, &mut blocks, lost);
        }
        // Every block has a leaf: blocks enter the tree only through writes, which map them.
        blocks.retain(|b| {
            let mapped = self.positions.get(b.slot).is_some();
            if !mapped {
                tracing::error!(slot = b.slot, "a block without a leaf; dropped");
            }
            mapped
        });
        let positions = &self.positions;
        let eviction = evict(&self.tree, self.z(), reading.leaf, blocks, |slot| {
            positions.get(slot).unwrap_or(0)
        });
        self.prepare_write(path, eviction);
    }

    /// Serves the access of `slot`: applies its waiting write, answers its waiting reads, and
    /// maps its block to a fresh leaf. `lost`: a bucket of the path failed authentication.
    fn serve(&mut self, slot: u32, blocks: &mut Vec<Block>, lost: bool) {
        let (readers, write) = match self.waiting.get_mut(&slot) {
            Some(waiting) => {
                waiting.accesses -= 1;
                let taken = (std::mem::take(&mut waiting.readers), waiting.write.take());
                if waiting.accesses == 0 {
                    self.waiting.remove(&slot);
                }
                taken
            }
            None => (Vec::new(), None),
        };
        let found = blocks.iter().position(|b| b.slot == slot);
        let reply = match (write, found) {
            (Some(record), found) => {
                let block = Block {
                    slot,
                    record: record.clone(),
                    journaled: true,
                };
                match found {
                    Some(i) => blocks[i] = block,
                    None => blocks.push(block),
                }
                self.positions.remap(slot, &mut self.rng);
                Reply::Value(record)
            }
            (None, Some(i)) => {
                self.positions.remap(slot, &mut self.rng);
                Reply::Value(blocks[i].record.clone())
            }
            (None, None) if self.positions.get(slot).is_none() => Reply::Value(Record::empty()),
            (None, None) => {
                // Its block should be on this path: a bucket holding it failed authentication.
                // The slot keeps a leaf, so later reads fail too until a client writes it.
                if !lost {
                    self.io.stats.integrity_failures += 1;
                    tracing::error!(slot, "a block is missing from its path");
                }
                self.positions.remap(slot, &mut self.rng);
                Reply::Failed(SchemeError::Integrity(
                    "the bucket holding this key failed authentication; the value is lost until \
                     the key is written again"
                        .into(),
                ))
            }
        };
        for reader in readers {
            self.io.out.answer(reader, Slot::from(slot), reply.clone());
        }
    }

    /// Seals the evicted path under a new generation and journals the blocks it drops.
    fn prepare_write(&mut self, path: Vec<Addr>, eviction: Eviction) {
        // Public: every access, real or dummy, writes back its path exactly once, and write-backs
        // are prepared and sent one at a time in access order, so the generation every bucket
        // of this write shows in the clear is the run's base plus the number of path
        // write-backs storage received before it.
        let generation = self.next_generation;
        self.next_generation += 1;
        let mut previous = Vec::with_capacity(path.len());
        let mut writes = Vec::with_capacity(path.len());
        let mut releases = Vec::new();
        for (&address, bucket) in path.iter().zip(&eviction.buckets) {
            let generation_slot = &mut self.generations[address as usize];
            previous.push(*generation_slot);
            *generation_slot = generation;
            let binding = Binding {
                address,
                generation,
            };
            writes.push((address, self.codec.seal(binding, bucket)));
            releases.extend(
                bucket
                    .iter()
                    .filter(|b| b.journaled)
                    .map(|b| (b.slot, b.record.version)),
            );
        }
        let mut dropped = Vec::new();
        let left: Vec<Block> = eviction
            .left
            .into_iter()
            .map(|mut block| {
                if !block.journaled {
                    self.io
                        .out
                        .keep(Slot::from(block.slot), block.record.clone());
                    dropped.push(block.slot);
                    block.journaled = true;
                }
                block
            })
            .collect();
        let was_overflowing = self.overflowing();
        self.stash.put_back(left);
        if self.overflowing() && !was_overflowing {
            self.stash_overflows += 1;
            tracing::error!(
                stash = self.stash.len(),
                limit = self.stash_limit,
                "Path ORAM stash overflow: refusing new requests until evictions shrink it"
            );
        }
        self.prepared = Some(WriteBack {
            path,
            generation,
            previous,
            contents: eviction.buckets,
            op: Some(StorageOp::Write(writes)),
            releases,
            dropped,
            durability: Durability::Waiting(self.io.out.barrier()),
            landed: false,
        });
    }

    /// The last write-back landed: release the journaled blocks it stored.
    fn write_landed(&mut self) {
        let Some(written) = &mut self.written else {
            return;
        };
        written.landed = true;
        for &(slot, version) in &written.releases {
            // Back in the stash since: it stays journaled (and was kept again if needed).
            if !self.stash.contains(slot) {
                self.io.out.release(Slot::from(slot), version);
            }
        }
        written.releases.clear();
    }

    /// Keeps again the records a failed journal request carried, and waits for them anew.
    fn journal_again(&mut self) {
        if let Some(fill) = &mut self.filling {
            fill.keep_again(&mut self.io.out);
        }
        if let Some(prepared) = &mut self.prepared
            && prepared.durability == Durability::Failed
        {
            for &slot in &prepared.dropped {
                if let Some(record) = self.stash.get(slot) {
                    self.io.out.keep(Slot::from(slot), record.clone());
                }
            }
            prepared.durability = Durability::Waiting(self.io.out.barrier());
        }
    }

    fn enqueue(&mut self, slot: u32) -> &mut Waiting {
        self.queue.push_back(Target::Slot(slot));
        let waiting = self.waiting.entry(slot).or_default();
        waiting.accesses += 1;
        waiting
    }

    fn read(&mut self, id: OpId, slot: u32) {
        let answered = self.answer_without_storage(id, slot);
        // The op brings its access however it was answered: the server sees one access per op,
        // and writes (taken and queued even while storage is down) bring theirs, so a read
        // answered here or refused bringing none would let the accesses tell reads from writes.
        let waiting = self.enqueue(slot);
        if !answered {
            waiting.readers.push(id);
        }
    }

    /// Answers a read of `slot` that needs no access to be answered, and says whether it did:
    /// from a write waiting for its access, the stash, a slot that holds nothing, the recovered
    /// records during the fill, or as refused while storage is down.
    fn answer_without_storage(&mut self, id: OpId, slot: u32) -> bool {
        let known = match self.waiting.get(&slot).and_then(|w| w.write.as_ref()) {
            Some(record) => Some(record.clone()),
            None => match self.stash.get(slot) {
                Some(record) => Some(record.clone()),
                None => self.positions.get(slot).is_none().then(Record::empty),
            },
        };
        if let Some(record) = known {
            self.io.stats.cache_hits += 1;
            self.io
                .out
                .answer(id, Slot::from(slot), Reply::Value(record));
            return true;
        }
        self.io.stats.cache_misses += 1;
        // While the fill runs no access does (see `progress`), so with no write waiting for the
        // slot its recovered record is its newest value: it is answered from recovery's spool on
        // local disk, with no storage request, instead of after the whole fill. The read's work
        // is on the thread that prepares the fill's requests, which leave on the fill's public
        // clock (`crate::shell::fill`) unless a flood of reads makes one late. Replied at once,
        // not once the fill's journal copy of the record is durable: no chunk of the fill goes
        // out before that copy is, so until then storage still holds the element recovery read
        // it from (or the journal, the record recovery took from it), and the value is durable
        // either way.
        if let Some(reply) =
            (self.filling.as_mut()).and_then(|fill| fill.recovered_for_client(slot))
        {
            self.io.stats.recovered_reads += 1;
            let reply = reply.map_or_else(Reply::Failed, Reply::Value);
            self.io.out.reply(id, reply);
            return true;
        }
        if let Some(error) = self.io.unavailable() {
            // Storage is down: say so now rather than after the outage.
            self.io.out.reply(id, Reply::Failed(error));
            return true;
        }
        false
    }

    fn write(&mut self, id: OpId, slot: u32, record: Record) {
        self.io.out.keep(Slot::from(slot), record.clone());
        let waiting = self.enqueue(slot);
        let readers = std::mem::take(&mut waiting.readers);
        waiting.write = Some(record.clone());
        for reader in readers {
            self.io
                .out
                .answer(reader, Slot::from(slot), Reply::Value(record.clone()));
        }
        self.io.out.answer(id, Slot::from(slot), Reply::Written);
    }
}

/// Every request is repeated after a failure: the algorithm's state waits for it.
impl RequestPurpose for Purpose {}

impl Algorithm for PathOram {
    type Purpose = Purpose;
    const NAME: &'static str = "path-oram";

    crate::shell::io_in_field!();

    fn slots(&self) -> u64 {
        self.positions.slots() as u64
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        let slot = crate::shell::slot32(&op);
        match op {
            Op::Read(_) => self.read(id, slot),
            Op::Write(_, record) => self.write(id, slot, record),
        }
        self.progress();
    }

    fn answered(&mut self, _now: Instant, purpose: Purpose, answer: Answer) {
        match purpose {
            Purpose::Read => self.finish_read(answer.values()),
            Purpose::Write => self.write_landed(),
            Purpose::Fill => {
                if let Some(fill) = &mut self.filling {
                    fill.landed(answer.arrived());
                }
            }
        }
        self.progress();
    }

    /// Storage failed a request: repeat it after a backoff (repeating shows the server nothing
    /// new). Every read waiting for storage learns now, whichever request failed: no access
    /// starts until this one succeeds.
    fn failed(&mut self, _now: Instant, _purpose: &Purpose, error: &StorageError) {
        let reply = Reply::Failed(SchemeError::StorageUnavailable(error.clone()));
        for (&slot, waiting) in &mut self.waiting {
            for reader in waiting.readers.drain(..) {
                self.io.out.answer(reader, Slot::from(slot), reply.clone());
            }
        }
        self.progress();
    }

    fn resending(&mut self, purpose: &Purpose) {
        self.note_read_sent(*purpose);
    }

    fn timeout(&mut self, now: Instant) {
        if !self.journal_retry.due(now).is_empty() {
            self.journal_again();
        }
        self.progress();
    }

    fn deadline(&self) -> Option<Instant> {
        self.journal_retry.at()
    }

    fn journaled(&mut self, now: Instant, id: JournalId, result: Result<(), String>) {
        let waiting_on = Durability::Waiting(id);
        let settled = match &result {
            Ok(()) => Durability::Durable,
            Err(error) => {
                tracing::error!(%error, "the journal refused blocks leaving storage; retrying");
                Durability::Failed
            }
        };
        let mut matched = false;
        if let Some(fill) = &mut self.filling
            && fill.keeping.durability == waiting_on
        {
            fill.keeping.durability = settled;
            matched = true;
        }
        if let Some(prepared) = &mut self.prepared
            && prepared.durability == waiting_on
        {
            prepared.durability = settled;
            matched = true;
        }
        match settled {
            Durability::Failed if matched => {
                self.journal_retry
                    .fail(now, StorageError("journal unavailable".into()), ());
            }
            Durability::Durable if matched => self.journal_retry.succeeded(),
            _ => {}
        }
        self.progress();
    }

    fn drain(&mut self, _now: Instant) {
        self.draining = true;
        self.progress();
    }

    /// Every op is an access of its own: absent keys need cover reads.
    fn traffic_per_op(&self) -> bool {
        true
    }

    fn accepts(&self) -> bool {
        self.queue.len() < MAX_QUEUED
    }

    /// While the stash overflows, reads and new writes are refused without an access.
    fn refusal(&self) -> Option<SchemeError> {
        self.overflowing().then(|| self.overflow_error())
    }

    fn current_stats(&self, stats: &mut SchemeStats) {
        let waiting_writes = self.waiting.values().filter(|w| w.write.is_some()).count();
        let landing = [&self.prepared, &self.written]
            .into_iter()
            .flatten()
            .map(|w| w.releases.len())
            .sum::<usize>();
        let filling = self.filling.as_ref().map_or(0, Fill::recovered);
        stats.filling = self.filling.as_ref().map(Fill::status);
        stats.queued = (self.queue.len() + usize::from(self.reading.is_some())) as u64;
        stats.unwritten = (waiting_writes + self.stash.len() + landing + filling) as u64;
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        let levels = self.tree.levels() as usize;
        let z = self.z();
        let bucket_bytes = self.codec.element_len();
        vec![
            ("bucket_size", z.to_string()),
            ("tree_levels", levels.to_string()),
            ("tree_leaves", self.tree.leaves().to_string()),
            ("buckets", self.tree.buckets().to_string()),
            ("element_bytes", bucket_bytes.to_string()),
            ("blocks_per_access", (2 * z * levels).to_string()),
            ("bytes_per_access", (2 * levels * bucket_bytes).to_string()),
            ("accesses", self.accesses.to_string()),
            ("stash_blocks", self.stash.len().to_string()),
            ("stash_high_water", self.stash.high_water().to_string()),
            ("stash_limit", self.stash_limit.to_string()),
            ("stash_overflows", self.stash_overflows.to_string()),
            ("storage_filled", self.filling.is_none().to_string()),
        ]
    }
}
