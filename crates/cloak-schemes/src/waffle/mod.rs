//! Waffle (Maiyya, Vemula, Agrawal, El Abbadi, Kerschbaum: "Waffle: An Online Oblivious
//! Datastore for Protecting Data Access Patterns"), Algorithm 1, against a passive persistent
//! adversary.
//!
//! Storage holds every real object the proxy does not cache and `D` dummy objects, each under a
//! label `PRF(object, ts)` that changes with every access (`labels`). Every batch reads exactly
//! `B` labels: the `r ≤ R` objects client requests need, `f_D` dummies and `f_R = B − r − f_D`
//! real objects, fakes taken least recently accessed first from timestamp-ordered trees
//! (`trees`). Every label read is deleted from storage. Real objects read go into an LRU cache
//! of `C` objects, and each one pushes the least recently used object out: it is written back
//! under a fresh label, so every batch also writes exactly `B` elements (`B − f_D` evicted real
//! objects and the `f_D` dummies under new labels). The server sees every label written once and
//! read once, within `α` batches of its write (Theorem 7.1), and every object read stays away
//! for more than `β` batches (Theorem 7.2); [`observe`] measures both on a recorded view.
//!
//! Where this follows the paper and where it had to choose:
//! - *Objects are slots.* The engine hands out a fixed space of `N` slots (`--capacity`), and
//!   every slot is a real object from the start whose record may be empty; a `SET` of a new key
//!   fills an empty record and `DEL` empties it. The paper instead swaps dummy objects in and out
//!   for inserts and deletes, which changes `N` and `D` and therefore α. Here the server sees the
//!   same fixed-size ciphertexts either way (empty and full records encrypt to the same size and
//!   look alike), `N` and `D` never change, and α and β hold for every key count.
//! - *Client requests per batch.* A batch takes up to `R` distinct slots that clients touched,
//!   in arrival order (Algorithm 1's `R` requests, deduplicated). Reads that the cache, or a
//!   pending write, can answer are answered at once rather than at the end of the batch (the
//!   server cannot see replies), but their LRU touch still waits for a batch and counts
//!   against `R`: Theorem 7.2 needs at most `R` touches per batch. Writes are acknowledged once
//!   journaled and enter the cache when a batch takes them (line 14), a write to an uncached
//!   object reading its old copy in that batch.
//! - *Timing.* With [`BatchTiming::Fixed`] (the default) a batch goes out every
//!   `--waffle-interval`, loaded or idle, so its timing tells the server nothing. With
//!   [`BatchTiming::Eager`] a batch also goes out as soon as `R` slots wait (the paper's trigger,
//!   lower latency under load), and the rate of batches then reveals the request rate while it
//!   exceeds `R` per interval.
//! - *Deletes* of the labels a batch read go out once the journal holds the records read (they
//!   now live only in the proxy's cache); their timing depends on the journal, not on the
//!   workload.
//! - *Start.* An earlier run's elements (found by a scan, authenticated with this store's key)
//!   are deleted once the new run has written its own and journaled the records it caches, so
//!   storage never holds more than `N − C + D` elements for long. The fill writes objects in a
//!   random order: labels are pseudorandom but positions are not, and in slot order they would
//!   tell the server which fake queries (taken oldest first, ties by slot) come next.
//! - *Shutdown.* [`cloak_core::Scheme::drain`] finishes the queued requests, then writes the whole cache to
//!   storage under fresh labels (one write of `C` elements, whatever the workload), so a proxy
//!   without a journal stops without losing the records only its cache held.

mod analysis;
mod batch;
mod clients;
mod labels;
mod params;
mod startup;
mod trees;

use std::collections::VecDeque;
use std::time::Instant;

use cloak_core::{
    Addr, ElementCodec, JournalId, Op, OpId, Record, Reply, SchemeError, SchemeStats, StorageError,
};
use cloak_crypto::MasterKey;
use hashbrown::{HashMap, HashSet};
use lru::LruCache;
use rand_chacha::ChaCha20Rng;

pub use analysis::{BatchShape, Observation, observe};
pub use labels::{LabelKey, Object};
pub use params::{
    BatchTiming, DEFAULT_BATCH_INTERVAL, PAPER_BATCH, ParamError, Params, WaffleOptions,
};

use crate::Start;
use crate::schedule::Schedule;
use crate::shell::{Algorithm, Answer, Io, RequestPurpose};
use labels::Labels;
use startup::Startup;
use trees::{DummyTree, RealTree};

/// Where the scheme is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Listing what an earlier run left in storage.
    Scanning,
    /// Writing every object storage holds.
    Filling,
    Running,
    /// The cache was written to storage at shutdown; no batch goes out any more.
    Drained,
}

/// Why a storage request was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A page of the scan for an earlier run's elements.
    Scan,
    /// Part of the initial fill, carrying these recovered records as (slot, version).
    Fill(Vec<(u32, u64)>),
    /// A batch's read.
    BatchRead,
    /// A batch's write-back, carrying these client records as (slot, version).
    BatchWrite(Vec<(u32, u64)>),
    /// Labels read (or left by an earlier run) leaving storage.
    Delete,
    /// The cache written at shutdown, carrying these client records.
    Flush(Vec<(u32, u64)>),
}

/// A client slot waiting for a batch.
#[derive(Debug, Default)]
struct Pending {
    /// In the queue of slots the next batches take.
    queued: bool,
    /// Reads waiting for the slot's value from storage.
    readers: Vec<OpId>,
    /// The newest acknowledged write, not yet in the cache.
    write: Option<Record>,
}

/// One label of the batch in flight.
#[derive(Clone, Copy, Debug)]
struct FlightRead {
    label: Addr,
    object: Object,
    /// The timestamp the label was written under.
    ts: u64,
    /// The batch whose write-back stored the element (its binding's generation).
    written: u64,
}

/// The batch the server is serving.
struct Flight {
    batch: u64,
    /// When the batch's read left; a fixed-timing write-back leaves a fixed hold after it.
    started: Instant,
    /// In the order sent (ascending labels).
    reads: Vec<FlightRead>,
}

/// Labels storage may delete once the journal holds the records they carried.
struct Deletion {
    journal: JournalId,
    slots: Vec<u32>,
    labels: Vec<Addr>,
}

/// The Waffle algorithm (run it in a [`crate::Shell`]).
pub struct Waffle {
    params: Params,
    alpha: u64,
    beta: u64,
    codec: ElementCodec,
    labels: Labels,
    rng: ChaCha20Rng,

    /// Timestamp of each real object's label (the batch that last read it; 0: the fill).
    ts: Vec<u64>,
    /// The batch whose write-back stored each real object's element in storage (0: the fill),
    /// which its binding carries in the clear; meaningless while the object is cached.
    written: Vec<u64>,
    /// Real objects storage holds.
    server: RealTree,
    /// Real objects the proxy holds, most recently used first; storage has no copy of them.
    cache: LruCache<u32, Record>,
    dummies: DummyTree,
    /// Slots whose record failed authentication and that no client has written since.
    corrupt: HashSet<u32>,

    pending: HashMap<u32, Pending>,
    queue: VecDeque<u32>,

    stage: Stage,
    startup: Startup,
    /// Timestamp of the last batch started (0: the fill).
    batch: u64,
    flight: Option<Flight>,
    /// When batches start and write-backs leave.
    schedule: Schedule,
    draining: bool,
    deletions: Vec<Deletion>,
    /// Deletions whose journal request failed: kept again when the next batch starts.
    rekeep: Vec<Deletion>,
    /// Client records on their way back to storage.
    unstored: usize,

    io: Io<Purpose>,
}

impl Waffle {
    /// A Waffle store holding `start`'s records (the rest empty): `C` random slots in the cache,
    /// everything else written to storage by the first requests.
    pub fn new(
        params: Params,
        codec: ElementCodec,
        master: &MasterKey,
        rng: ChaCha20Rng,
        start: Start,
    ) -> Self {
        let alpha = params.alpha();
        let beta = params.beta();
        let labels = Labels::new(master, start.generation_base);
        Startup::begin(params, alpha, beta, codec, labels, rng, start)
    }

    /// The parameters in force.
    pub fn params(&self) -> &Params {
        &self.params
    }

    fn answer(&mut self, op: OpId, slot: u32, reply: Reply) {
        self.io.out.answer(op, u64::from(slot), reply);
    }

    /// Records only the proxy holds that clients wrote: pending writes, the cache, write-backs
    /// in flight.
    fn unwritten(&self) -> u64 {
        let pending = self.pending.values().filter(|p| p.write.is_some()).count();
        let cached = self.cache.iter().filter(|(_, r)| r.version > 0).count();
        (pending + cached + self.unstored) as u64
    }
}

/// Every request is repeated after a failure: the algorithm's state waits for it.
impl RequestPurpose for Purpose {}

impl Algorithm for Waffle {
    type Purpose = Purpose;
    const NAME: &'static str = "waffle";

    crate::shell::io_in_field!();

    fn slots(&self) -> u64 {
        self.params.objects
    }

    fn submit(&mut self, now: Instant, id: OpId, op: Op) {
        self.submit_op(now, id, op);
    }

    fn answered(&mut self, now: Instant, purpose: Purpose, answer: Answer) {
        match purpose {
            Purpose::Scan => {
                let arrived = answer.arrived();
                self.scanned(now, arrived, answer.entries());
            }
            Purpose::BatchRead => self.finish_read(now, answer.values()),
            Purpose::Fill(recovered) => self.filled_chunk(now, answer.arrived(), recovered),
            Purpose::BatchWrite(written) => self.finish_write(written),
            Purpose::Flush(written) => self.stored(written),
            Purpose::Delete => {}
        }
        self.maybe_start_batch(now);
    }

    /// Storage failed a request: every client waiting to read learns now, whether its read is
    /// in this batch or queued for a later one (no batch starts until this request succeeds).
    /// The request is repeated after a backoff (repeating it shows the server nothing new).
    fn failed(&mut self, _now: Instant, _purpose: &Purpose, error: &StorageError) {
        let reply = Reply::Failed(SchemeError::StorageUnavailable(error.clone()));
        let waiting: Vec<u32> = self.pending.keys().copied().collect();
        for slot in waiting {
            let readers = self.take_readers(slot);
            self.io.out.reply_all(readers, reply.clone());
        }
    }

    fn timeout(&mut self, now: Instant) {
        self.maybe_start_batch(now);
    }

    fn deadline(&self) -> Option<Instant> {
        match self.stage {
            Stage::Running => self.schedule.next_wake(),
            _ => None,
        }
    }

    fn journaled(&mut self, _now: Instant, id: JournalId, result: Result<(), String>) {
        self.kept(id, result);
    }

    fn drain(&mut self, now: Instant) {
        self.draining = true;
        self.maybe_start_batch(now);
    }

    fn accepts(&self) -> bool {
        self.queue.len() < self.params.max_pending
    }

    fn current_stats(&self, stats: &mut SchemeStats) {
        stats.filling = self.startup.filling();
        stats.queued = self.queue.len() as u64;
        stats.unwritten = self.unwritten();
        stats.missed_batches = self.schedule.missed();
        stats.late_write_backs = self.schedule.late();
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        let p = &self.params;
        vec![
            ("objects", p.objects.to_string()),
            ("batch_size", p.batch.to_string()),
            ("real_per_batch", p.real.to_string()),
            ("fake_dummy_per_batch", p.fake_dummy.to_string()),
            ("min_fake_real_per_batch", p.min_fake_real().to_string()),
            ("cache_size", p.cache.to_string()),
            ("dummies", p.dummies.to_string()),
            ("theoretical_alpha", self.alpha.to_string()),
            ("theoretical_beta", self.beta.to_string()),
            (
                "batch_interval_ms",
                format!("{}", p.batch_interval.as_secs_f64() * 1e3),
            ),
            ("batch_timing", p.timing.as_str().to_string()),
            ("max_pending", p.max_pending.to_string()),
            ("element_bytes", self.codec.element_len().to_string()),
            (
                "storage_filled",
                matches!(self.stage, Stage::Running | Stage::Drained).to_string(),
            ),
            ("batch_timestamp", self.batch.to_string()),
            ("cached_objects", self.cache.len().to_string()),
            ("real_objects_in_storage", self.server.len().to_string()),
        ]
    }
}
