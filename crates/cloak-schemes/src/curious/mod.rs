//! CURIOUS (paper 003, §6): a partition-based ORAM of `m` small tree subORAMs.
//!
//! The proxy keeps a position map (slot → subORAM and leaf) and an eviction cache; storage
//! keeps `m` complete `b`-ary trees of buckets of `z` blocks (Figure 4), one sealed element per
//! bucket. Every client op causes exactly one *access* (Figure 3's `schedule`):
//!
//! 1. `lookupPos`: if the slot's block is in a subORAM and not already being fetched, the access
//!    goes to that subORAM and leaf and will retrieve it. Otherwise (the block is cached, in
//!    transit, retained, or was never written) the access goes to a uniformly random subORAM and
//!    leaf: a dummy access, and the op is served from what the proxy knows (§6.2's concurrency
//!    model: a request for a block in transit waits for it to arrive).
//! 2. The access takes its subORAM's lock (accesses to other subORAMs run in parallel), reads
//!    the whole path, takes up to `c` blocks that the cache associates with that subORAM
//!    (`evictBlocks`), places the path's own blocks and the evicted ones on the path, each as
//!    deep as its leaf allows, and writes the whole path back. The retrieved block enters the cache under a fresh uniformly
//!    random subORAM and leaf (`addToCache`); evicted blocks that do not fit stay cached under a
//!    fresh random association. There is no stash.
//! 3. The op is answered once it took effect and its own access has read its path.
//!
//! # What the server sees, and why it does not depend on the requests
//!
//! Each access is a read of one full root-to-leaf path of one subORAM, then a write of exactly
//! those buckets, every bucket the same size and freshly encrypted. So the shape of every
//! access is fixed, and what is left is which subORAM and leaf, and when:
//!
//! - *Which subORAM* (Theorem 6.1): a block's subORAM is drawn uniformly when it enters the
//!   cache and is revealed once, by the access that fetches it; dummy accesses draw a fresh one.
//!   Theorem 6.1 shows each access alone is uniform, but not that it is independent of the
//!   earlier ones: Figure 3 evicts a block at the first access to its subORAM, so a key asked
//!   for again soon after is fetched from the subORAM just accessed (a hot key makes consecutive
//!   accesses repeat a subORAM at twice the chance rate). CURIOUS here keeps every block
//!   readable at the proxy for a window of `W = 16m` accesses after its subORAM is drawn
//!   (`retention`), so a fetch comes only after its subORAM has been accessed for unrelated
//!   reasons; then every access goes to a uniformly random subORAM independent of the earlier
//!   ones (up to a bias of about `e^−16`), whatever the op, key or workload. The leaf likewise.
//! - *Which blocks move*: how many blocks an access evicts, and whether it retrieves one, is
//!   hidden inside a full path of fixed-size buckets.
//! - *When*: an access starts when its op arrives (ORAMs do not hide the application's timing)
//!   or when the previous access to the same subORAM finishes. Whether two accesses wait for
//!   each other depends only on their subORAMs, which are uniform and independent of the
//!   requests. In particular two ops on one key never queue on one subORAM: the second one is
//!   a dummy access to a random subORAM (the leak of §4.2 that ObliviStore's implementation had).
//!   Every access holds its subORAM for the same time: its write-back waits for a journal commit
//!   whether or not it fetched a block (see `gates`).
//!
//! Not covered: commands the engine answers from its key directory without the scheme (a GET
//! of a key the store does not hold, EXISTS, DBSIZE, a SET NX of an existing key) make no
//! access, so the server sees fewer accesses than such requests. Cloak's fixed schedule hides
//! that; a per-request scheme would need the engine to send a dummy op for each.
//!
//! Answers to clients: an op is answered when its own access has read its path (plus, for a
//! write, when it is in the journal), so a cached key is not answered sooner than any other.
//! Two exceptions change only when the application hears back, not what storage sees for given
//! request times (the paper's model, §6.2): an op on a block in transit also waits for that
//! block, and with a disk journal writes wait for it while reads do not (as in Cloak). A client
//! that waits for each answer before its next request turns them into request timing.
//!
//! # Integrity
//!
//! Each bucket is sealed with its address and the generation (a counter above every earlier
//! run's) of the write that produced it, and the proxy remembers every bucket's generation.
//! A corrupted, swapped, replayed or missing bucket fails to open; a fetched block that is not
//! on its path is missing. Either way the op gets [`SchemeError::Integrity`] and the slot stays
//! lost until it is written again; the path is rewritten, which heals the bucket.
//!
//! # Crash safety (the reliability extension of §6.3, through the journal)
//!
//! §6.3 backs newly cached blocks up to a circular buffer in storage so that a client crash
//! loses (with high probability) nothing that lived only in the eviction cache. The proxy has
//! a write-ahead journal, which gives this without the probability: every record that is only
//! at the proxy is journaled before anything relies on it. A client write is journaled before
//! it is acknowledged; a retrieved block is journaled before the write-back that removes it from
//! storage is sent (so until then storage still has it, and reads of it are answered at once);
//! blocks that overflow are evicted blocks, journaled since they entered the cache. When a
//! write-back that evicted blocks is in storage, their journal entries are released. Recovery
//! (`cloak_core::recovery`) then finds every block in storage or in the journal.
//!
//! Graceful shutdown ([`Scheme::drain`](cloak_core::Scheme::drain)): the eviction cache would otherwise only empty while
//! clients keep sending ops, so once the proxy stops taking them and the accesses in flight are
//! done, CURIOUS writes the whole cache to a *drain area* of storage: always all of it (room for
//! the cache limit), so the write shows nothing but that the proxy stopped. Kept writes can take
//! the cache past that room (see `submit`); the drain then first makes dummy accesses until it
//! fits, whose number shows roughly how far past it was. Recovery reads the drain area like any
//! other element; the next run's fill overwrites it.

mod bucket;
mod cache;
mod gates;
mod geometry;
mod lifecycle;
mod locks;
mod params;
mod placement;
mod position;
mod requests;
mod retention;

use std::collections::HashSet;
use std::time::Instant;

use bytes::Bytes;
use cloak_core::{
    ElementCodec, JournalId, Op, OpId, Record, RecoveredRecords, Reply, SchemeError, SchemeStats,
    Slot, StorageError, StorageOp,
};
use cloak_crypto::Binding;
use hashbrown::HashMap;
use rand::Rng;
use rand_chacha::ChaCha20Rng;

use crate::Start;
use crate::shell::fill::{Fill, FillShape, Pace};
use crate::shell::retry::Retry;
use crate::shell::{Algorithm, Answer as ShellAnswer, Io, RequestPurpose};

use bucket::BucketCodec;
use cache::{Assignment, Entry, EvictionCache};
use geometry::Layout;
use locks::{AccessId, SubLocks};
use placement::{Placed, place};
use position::{Place, PositionMap};
use requests::{Answer, Requests};
use retention::Retention;

pub use params::{
    CuriousConfig, CuriousOptions, DEFAULT_ARITY, DEFAULT_BUCKET_SIZE, DEFAULT_EVICTIONS,
    DEFAULT_MAX_IN_FLIGHT, default_cache_limit, default_partitions, default_retention,
};

/// Buckets written per request while the store is first filled.
const FILL_CHUNK: u64 = 256;

/// One access: a path read of one subORAM, then its write-back.
struct Access {
    sub: u32,
    leaf: u32,
    /// The client op that caused it (`None`: a dummy, for a refused read, whose access still
    /// happens, or for a drain shrinking the cache).
    op: Option<OpId>,
    /// The block it retrieves (`None`: a dummy access).
    target: Option<u32>,
    stage: Stage,
}

enum Stage {
    /// Waiting for its subORAM (or for the store to be filled).
    Queued,
    Reading,
    /// The write-back waits until the journal holds the blocks it removes from storage.
    Journaling {
        write: StorageOp,
        evicted: Vec<(u32, u64)>,
        keeps: Vec<u32>,
    },
    /// The write-back is at storage; `evicted` blocks (slot, version) are in it.
    Writing {
        evicted: Vec<(u32, u64)>,
    },
}

/// What a storage request is for.
#[derive(Clone, Debug)]
pub enum Purpose {
    /// Part of the initial fill, carrying recovered blocks as (slot, version).
    Fill(Vec<(u32, u64)>),
    /// An access's path read.
    Read(AccessId),
    /// An access's path write-back.
    Write(AccessId),
    /// The drain area, carrying the cache as (slot, version).
    Drain(Vec<(u32, u64)>),
}

/// What waits for a journal request before it writes to storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    Fill,
    Access(AccessId),
}

/// A block on its way into a path.
enum Moving {
    /// Read from the path.
    Read(u32, Record),
    /// Taken from the eviction cache.
    Evicted(u32, Entry),
}

impl Moving {
    fn record(&self) -> (Slot, &Record) {
        match self {
            Moving::Read(slot, record) => (Slot::from(*slot), record),
            Moving::Evicted(slot, entry) => (Slot::from(*slot), &entry.record),
        }
    }
}

/// The CURIOUS algorithm (run it in a [`crate::Shell`]).
pub struct Curious {
    config: CuriousConfig,
    layout: Layout,
    codec: BucketCodec,
    rng: ChaCha20Rng,

    positions: PositionMap,
    cache: EvictionCache,
    retention: Retention,
    locks: SubLocks,
    requests: Requests,
    accesses: HashMap<AccessId, Access>,
    next_access: AccessId,

    /// The generation that last wrote each bucket, by address.
    generations: Vec<u64>,
    next_generation: u64,

    /// Recovered blocks the initial fill places, as (address, slot) by address; the fill's
    /// requests took those before `staged_taken`.
    staged: Vec<(u64, u32)>,
    staged_taken: usize,
    /// The recovered records, read back from recovery's spool as the fill seals their buckets.
    initial: RecoveredRecords,
    /// Recovered slots whose record could not be read back (left out of their bucket, so
    /// reads of them fail until a client writes them).
    fill_lost: HashSet<u32>,
    /// How many recovered records the fill places. Until it is done, storage may hold some of
    /// them nowhere (a fill request overwrote the bucket that held one before the request with
    /// its new bucket landed), so they count as unwritten: a clean stop waits for the fill, and
    /// the proxy keeps its recovery spool until then.
    recovered: u64,
    /// The initial fill waits for the journal to hold recovered blocks that went to the cache.
    fill_gate: Option<Vec<u32>>,
    fill: Fill,
    filled: bool,

    draining: bool,
    drain_in_flight: bool,

    /// Accesses and the fill waiting for a journal request, and the blocks they wait for.
    gates: HashMap<JournalId, Vec<Gate>>,
    journal_retry: Retry<Gate>,
    io: Io<Purpose>,
    /// Evicted blocks in write-backs storage has not confirmed.
    evicting: usize,
    /// Evicted blocks that did not fit their path, since start.
    overflowed: u64,
    /// Reads refused because the eviction cache was full.
    refused: u64,
    /// A drain's dummy accesses, while the cache holds more than the drain area takes.
    drain_shrink: lifecycle::DrainShrink,
}

impl Curious {
    /// A CURIOUS store holding `start`'s records (the rest empty) under a fresh random layout.
    /// Its first requests fill storage.
    pub fn new(
        config: CuriousConfig,
        layout: Layout,
        codec: ElementCodec,
        rng: ChaCha20Rng,
        start: Start,
    ) -> Self {
        let slots = usize::try_from(config.capacity).expect("the capacity was checked");
        let elements = usize::try_from(layout.elements()).expect("storage layout fits memory");
        let fill_generation = start.generation_base + 1;
        let codec = BucketCodec::new(codec, config.bucket_size);
        let shape = FillShape {
            // Each bucket's blocks are read back, each possibly from an element of its own.
            reads_per_element: config.bucket_size as u64,
            ..Fill::shape(
                config.capacity,
                layout.elements(),
                codec.element_len(),
                FILL_CHUNK,
            )
        };
        let mut scheme = Self {
            codec,
            rng,
            positions: PositionMap::new(slots),
            cache: EvictionCache::new(config.partitions),
            retention: Retention::new(config.retention),
            locks: SubLocks::new(config.partitions),
            requests: Requests::default(),
            accesses: HashMap::new(),
            next_access: 0,
            generations: vec![fill_generation; elements],
            next_generation: fill_generation + 1,
            staged: Vec::new(),
            staged_taken: 0,
            initial: start.records,
            fill_lost: HashSet::new(),
            recovered: 0,
            fill_gate: None,
            fill: Fill::new(
                layout.elements(),
                FILL_CHUNK,
                Pace::new(start.fill_clock, shape),
            ),
            filled: false,
            draining: false,
            drain_in_flight: false,
            gates: HashMap::new(),
            journal_retry: Retry::default(),
            io: Io::default(),
            evicting: 0,
            overflowed: 0,
            refused: 0,
            drain_shrink: lifecycle::DrainShrink::default(),
            config,
            layout,
        };
        scheme.stage_recovered();
        scheme
    }

    /// A fresh uniformly random subORAM and leaf for a block entering the cache.
    fn assignment(&mut self) -> Assignment {
        let (sub, leaf) = self.random_position();
        Assignment {
            sub,
            leaf,
            drawn: self.next_access,
        }
    }

    fn random_position(&mut self) -> (u32, u32) {
        let leaves = self.layout.tree.leaves() as u32;
        (
            self.rng.random_range(0..self.config.partitions),
            self.rng.random_range(0..leaves),
        )
    }

    fn generation(&mut self) -> u64 {
        let generation = self.next_generation;
        self.next_generation += 1;
        generation
    }

    /// Starts the next access waiting for `sub`, if the subORAM is free.
    fn start_next(&mut self, sub: u32) {
        if !self.filled {
            return;
        }
        if let Some(id) = self.locks.acquire(sub) {
            let access = self.accesses.get_mut(&id).expect("queued accesses exist");
            access.stage = Stage::Reading;
            let path = self.layout.path(access.sub, access.leaf);
            self.io.send(Purpose::Read(id), StorageOp::Read(path));
        }
    }

    fn answer(&mut self, answer: Option<Answer>) {
        match answer {
            Some(Answer::Now(op, reply)) => self.io.out.reply(op, reply),
            Some(Answer::WhenDurable(op, slot, reply)) => {
                self.io.out.answer(op, Slot::from(slot), reply)
            }
            None => {}
        }
    }

    fn answer_all(&mut self, answers: Vec<Answer>) {
        for answer in answers {
            self.answer(Some(answer));
        }
    }

    /// Figure 3's `schedule`: the op takes effect now if the proxy knows the slot's record, and
    /// gets its access.
    fn schedule(&mut self, id: OpId, slot: u32, op: Op) {
        self.retention.expire(self.next_access);
        let write = match op {
            Op::Write(_, record) => Some(record),
            Op::Read(_) => None,
        };
        let journal = write
            .as_ref()
            .map(|record| self.io.out.keep(Slot::from(slot), record.clone()));
        self.requests.add(id, slot, write.clone().zip(journal));
        let place = self.positions.get(slot);
        let retained = matches!(place, Place::Stored { .. }) && self.retention.get(slot).is_some();
        let target = match place {
            Place::Stored { sub, leaf } if !retained => {
                self.positions.set(slot, Place::Fetching { sub, leaf });
                self.requests.wait_for_block(slot, id);
                self.io.stats.cache_misses += 1;
                Some((sub, leaf, slot))
            }
            Place::Fetching { .. } => {
                self.requests.wait_for_block(slot, id);
                self.io.stats.cache_misses += 1;
                None
            }
            // The proxy knows the record: the op takes effect now.
            Place::Stored { .. } | Place::Cached | Place::Absent | Place::Lost => {
                self.io.stats.cache_hits += 1;
                let reply = match write {
                    Some(record) => {
                        if place == Place::Cached {
                            self.cache.update(slot, record);
                        } else {
                            if retained {
                                self.retention.overwritten(slot);
                            }
                            let to = self.assignment();
                            self.cache.insert(slot, record, to);
                            self.positions.set(slot, Place::Cached);
                        }
                        Reply::Written
                    }
                    None => match place {
                        Place::Cached => Reply::Value(
                            self.cache
                                .record(slot)
                                .cloned()
                                .expect("cached slots are in the cache"),
                        ),
                        Place::Stored { .. } => {
                            Reply::Value(self.retention.get(slot).cloned().expect("checked above"))
                        }
                        Place::Lost => Reply::Failed(lost()),
                        _ => Reply::Value(Record::empty()),
                    },
                };
                let answer = self.requests.took_effect(id, reply);
                self.answer(answer);
                None
            }
        };
        match target {
            Some((sub, leaf, slot)) => {
                self.io.stats.real_accesses += 1;
                self.start_access(sub, leaf, Some(id), Some(slot));
            }
            None => {
                self.io.stats.dummy_accesses += 1;
                let (sub, leaf) = self.random_position();
                self.start_access(sub, leaf, Some(id), None);
            }
        }
    }

    fn start_access(&mut self, sub: u32, leaf: u32, op: Option<OpId>, target: Option<u32>) {
        let access = self.next_access;
        self.next_access += 1;
        self.accesses.insert(
            access,
            Access {
                sub,
                leaf,
                op,
                target,
                stage: Stage::Queued,
            },
        );
        self.locks.enqueue(sub, access);
        self.start_next(sub);
    }

    /// Whether a read of `slot` would add a block to the eviction cache: it fetches one that
    /// neither the cache nor the retention holds.
    fn read_adds_to_cache(&self, slot: u32) -> bool {
        matches!(self.positions.get(slot), Place::Stored { .. })
            && self.retention.get(slot).is_none()
    }

    /// The path is read: serve the op, retrieve the target, evict, and write the path back
    /// (Figure 4's `retrieveBlockAndEvict`).
    fn finish_read(&mut self, id: AccessId, values: Vec<Option<Bytes>>) {
        let access = self.accesses.get(&id).expect("reading accesses exist");
        let (sub, leaf, op, target) = (access.sub, access.leaf, access.op, access.target);
        let path = self.layout.path(sub, leaf);

        let mut from_path = Vec::new();
        let mut retrieved = None;
        let mut damage = None;
        for (&address, value) in path.iter().zip(&values) {
            let binding = Binding {
                address,
                generation: self.generations[address as usize],
            };
            match self.codec.open(binding, value.as_ref()) {
                Ok(blocks) => {
                    for (slot, record) in blocks {
                        let Ok(slot) = u32::try_from(slot) else {
                            tracing::error!(slot, "a bucket holds a slot beyond the store");
                            continue;
                        };
                        if self.retention.take_ghost(slot, record.version) {
                            continue; // stale: overwritten while retained
                        }
                        if Some(slot) == target {
                            retrieved = Some(record);
                        } else if let Some(leaf) = self.positions.leaf_in(slot, sub) {
                            from_path.push(Placed {
                                leaf,
                                block: Moving::Read(slot, record),
                            });
                        } else {
                            tracing::error!(
                                slot,
                                sub,
                                "a bucket holds a block that belongs elsewhere; dropped"
                            );
                        }
                    }
                }
                Err(error) => {
                    self.io.stats.integrity_failures += 1;
                    tracing::error!(address, %error, "storage returned a bad bucket");
                    damage = Some(format!(
                        "a bucket on the path failed authentication (storage address {address}): \
                         {error}"
                    ));
                }
            }
        }

        // Figure 3: evictBlocks(s) before addToCache(k), so the block just retrieved stays.
        let evicted = self.cache.take(sub, self.config.evictions);
        let mut keeps = Vec::new();
        if let Some(slot) = target {
            let found = retrieved.ok_or_else(|| {
                if damage.is_none() {
                    self.io.stats.integrity_failures += 1;
                }
                SchemeError::Integrity(damage.clone().unwrap_or_else(|| {
                    format!("the block of this key is missing from its path (subORAM {sub})")
                }))
            });
            let (current, answers) = self.requests.arrive(slot, found);
            self.answer_all(answers);
            match current {
                Some(record) => {
                    let to = self.assignment();
                    self.cache.insert(slot, record, to);
                    self.positions.set(slot, Place::Cached);
                    keeps.push(slot);
                }
                None => self.positions.set(slot, Place::Lost),
            }
        }
        if let Some(op) = op {
            let answer = self.requests.path_read(op);
            self.answer(answer);
        }

        let guests = evicted
            .into_iter()
            .map(|(slot, entry)| Placed {
                leaf: entry.to.leaf,
                block: Moving::Evicted(slot, entry),
            })
            .collect();
        let placement = place(
            &self.layout.tree,
            leaf,
            self.config.bucket_size,
            from_path,
            guests,
        );
        for spilled in placement.overflow {
            let to = self.assignment();
            match spilled.block {
                Moving::Evicted(slot, entry) => {
                    self.overflowed += 1;
                    self.cache.reinsert(slot, entry, to);
                }
                Moving::Read(slot, record) => {
                    // Cannot happen (see `placement`); if it did, the block leaves storage.
                    tracing::error!(slot, "a block read from a path did not fit back");
                    self.cache.insert(slot, record, to);
                    self.positions.set(slot, Place::Cached);
                    keeps.push(slot);
                }
            }
        }

        // Public: every access, real or dummy, seals exactly one write-back here, when storage
        // answered its path read, and the journal lets write-backs go in the order they were
        // sealed; so the generation every bucket of this write shows in the clear is the run's
        // base plus the number of write-backs storage received before it, whatever the access
        // fetched or evicted. (Only a failed journal commit, retried, can hold a write-back
        // back behind later ones: that shows the failure, not the data.)
        let generation = self.generation();
        let mut evicted = Vec::new();
        let mut writes = Vec::with_capacity(path.len());
        for (&address, blocks) in path.iter().zip(&placement.buckets) {
            for block in blocks {
                if let Moving::Evicted(slot, entry) = block {
                    let leaf = entry.to.leaf;
                    self.positions.set(*slot, Place::Stored { sub, leaf });
                    self.retention
                        .evicted(*slot, &entry.record, entry.to.drawn, self.next_access);
                    evicted.push((*slot, entry.record.version));
                }
            }
            self.generations[address as usize] = generation;
            let binding = Binding {
                address,
                generation,
            };
            writes.push((
                address,
                self.codec.seal(binding, blocks.iter().map(Moving::record)),
            ));
        }
        self.evicting += evicted.len();
        let access = self.accesses.get_mut(&id).expect("reading accesses exist");
        access.stage = Stage::Journaling {
            write: StorageOp::Write(writes),
            evicted,
            keeps: keeps.clone(),
        };
        self.wait_for_journal(Gate::Access(id), keeps);
    }

    fn finish_write(&mut self, id: AccessId) {
        let Some(access) = self.accesses.remove(&id) else {
            return;
        };
        if let Stage::Writing { evicted } = access.stage {
            self.evicting -= evicted.len();
            for (slot, version) in evicted {
                self.io.out.release(Slot::from(slot), version);
            }
        }
        self.io.stats.batches += 1;
        self.locks.release(access.sub);
        self.start_next(access.sub);
        self.maybe_drain();
    }

    fn unwritten(&self) -> usize {
        let filling = if self.filled {
            0
        } else {
            self.recovered as usize
        };
        self.cache.unsaved() + self.evicting + self.requests.transit_writes() + filling
    }
}

fn lost() -> SchemeError {
    SchemeError::Integrity(
        "the block holding this key failed authentication earlier; the value is lost until the \
         key is written again"
            .into(),
    )
}

/// Every request is repeated after a failure: the algorithm's state waits for it.
impl RequestPurpose for Purpose {}

impl Algorithm for Curious {
    type Purpose = Purpose;
    const NAME: &'static str = "curious";

    crate::shell::io_in_field!();

    fn slots(&self) -> u64 {
        self.positions.len() as u64
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        let slot = crate::shell::slot32(&op);
        // The limit holds back reads only. A write is never refused here: the engine changed
        // its key directory for it before handing it over (a DEL took the key out, a SET of a
        // new key listed it), so a refusal would leave the directory saying what storage does
        // not hold. Kept writes can take the cache past its limit, each by one block, and each
        // makes its access like any op, whose evictions drain the cache.
        if matches!(op, Op::Read(_))
            && self.cache.len() >= self.config.cache_limit
            && self.read_adds_to_cache(slot)
        {
            // Refused, but the access still happens (as a dummy): the server sees one access per
            // op as always, and the evictions it makes are what drains the cache.
            self.refused += 1;
            tracing::error!(
                limit = self.config.cache_limit,
                "eviction cache full; refusing reads that would add to it"
            );
            let error = SchemeError::Overloaded(format!(
                "the CURIOUS eviction cache holds {} blocks, its limit; raise \
                 --curious-cache-limit or --curious-evictions",
                self.cache.len()
            ));
            self.io.out.reply(id, Reply::Failed(error));
            self.io.stats.dummy_accesses += 1;
            let (sub, leaf) = self.random_position();
            self.start_access(sub, leaf, None, None);
            return;
        }
        self.schedule(id, slot, op);
    }

    fn answered(&mut self, now: Instant, purpose: Purpose, answer: ShellAnswer) {
        match purpose {
            Purpose::Fill(recovered) => {
                self.fill
                    .written(answer.arrived(), recovered, &mut self.io.out);
                self.pump_fill(Some(now));
            }
            Purpose::Read(access) => self.finish_read(access, answer.values()),
            Purpose::Write(access) => self.finish_write(access),
            Purpose::Drain(saved) => {
                for (slot, version) in saved {
                    self.cache.mark_saved(slot, version);
                    self.io.out.release(Slot::from(slot), version);
                }
                self.drain_in_flight = false;
                self.maybe_drain();
            }
        }
    }

    /// Storage failed a request: every read not answered yet learns now, whichever request
    /// failed (a refused write-back holds its subORAM, and reads behind it would otherwise wait
    /// as long as storage refuses). The request is repeated after a backoff (repeating a
    /// request shows the server nothing new).
    fn failed(&mut self, _now: Instant, _purpose: &Purpose, error: &StorageError) {
        let failure = SchemeError::StorageUnavailable(error.clone());
        for answer in self.requests.fail_reads(&failure) {
            self.answer(Some(answer));
        }
    }

    fn timeout(&mut self, now: Instant) {
        for gate in self.journal_retry.due(now) {
            let slots = self.gated_slots(gate);
            self.wait_for_journal(gate, slots);
        }
        self.maybe_drain();
    }

    fn deadline(&self) -> Option<Instant> {
        self.journal_retry.at()
    }

    fn journaled(&mut self, now: Instant, id: JournalId, result: Result<(), String>) {
        let answers = self.requests.journaled(id, &result);
        self.answer_all(answers);
        for gate in self.gates.remove(&id).unwrap_or_default() {
            match &result {
                Ok(()) => self.pass_gate(gate),
                Err(reason) => self.journal_failed(now, gate, reason),
            }
        }
        if result.is_ok() {
            self.journal_retry.succeeded();
        }
    }

    fn drain(&mut self, _now: Instant) {
        self.draining = true;
        self.maybe_drain();
    }

    /// Every op is an access of its own: absent keys need cover reads.
    fn traffic_per_op(&self) -> bool {
        true
    }

    fn accepts(&self) -> bool {
        self.accesses.len() < self.config.max_in_flight
    }

    /// While storage is known to be down, reads and new writes fail at once without an access.
    /// (A read the full eviction cache refuses still makes its access, as a dummy, so that
    /// refusal is the scheme's to make, op by op; writes it keeps, see `submit`.)
    fn refusal(&self) -> Option<SchemeError> {
        self.io.unavailable()
    }

    fn current_stats(&self, stats: &mut SchemeStats) {
        stats.filling = self.fill.filling();
        stats.queued = self.requests.len() as u64;
        stats.unwritten = self.unwritten() as u64;
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        let tree = &self.layout.tree;
        let element = self.codec.element_len();
        let path = tree.path_len();
        vec![
            ("partitions", self.config.partitions.to_string()),
            ("arity", tree.arity().to_string()),
            ("bucket_size", self.config.bucket_size.to_string()),
            ("tree_depth", tree.depth().to_string()),
            ("leaves_per_partition", tree.leaves().to_string()),
            ("buckets_per_partition", tree.buckets().to_string()),
            ("evictions_per_access", self.config.evictions.to_string()),
            ("max_in_flight", self.config.max_in_flight.to_string()),
            ("elements", self.layout.elements().to_string()),
            ("element_bytes", element.to_string()),
            (
                "buckets_per_access",
                format!("{path} read + {path} written"),
            ),
            ("bytes_per_access", (2 * path * (element + 16)).to_string()),
            ("eviction_cache_blocks", self.cache.len().to_string()),
            (
                "eviction_cache_high_water",
                self.cache.high_water().to_string(),
            ),
            ("eviction_cache_limit", self.config.cache_limit.to_string()),
            ("eviction_cache_refusals", self.refused.to_string()),
            ("overflowed_blocks", self.overflowed.to_string()),
            ("retention_accesses", self.retention.window().to_string()),
            ("retained_blocks", self.retention.len().to_string()),
            ("ghost_blocks", self.retention.ghosts().to_string()),
            ("accesses_in_flight", self.accesses.len().to_string()),
            ("drain_area_buckets", self.layout.drain_buckets.to_string()),
            ("storage_filled", self.filled.to_string()),
        ]
    }
}

/// What the unit tests of this module's parts share.
#[cfg(test)]
mod fixtures {
    use cloak_core::Record;

    /// A record of key `k` at `version`, its value naming the version.
    pub fn record(version: u64) -> Record {
        Record {
            version,
            key: "k".into(),
            value: format!("v{version}").into(),
        }
    }
}
