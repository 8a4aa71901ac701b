//! Pancake (paper §4–5): frequency smoothing, so that every access storage sees is a uniformly
//! random one of `2n` labels when client requests follow the estimate `π̂`.
//!
//! - *Selective replication* ([`smoothing`]): key `k` has `R(k) = ceil(π̂(k)·n)` replicas, each
//!   under its own label `PRF(k, j)`, and dummy replicas fill the store up to exactly `2n`
//!   labels (`replicas`).
//! - *Fake accesses and batching*: every client request adds its key to the query queue and
//!   sends one batch of `B = 3` accesses; each is real with probability `δ = 1/2` (the queue's
//!   head, or a key drawn from `π̂` when the queue is empty, at a uniformly chosen replica) or
//!   fake, drawn from `π_f`. Every access reads its label and writes it back re-encrypted.
//! - *UpdateCache* (`update_cache`): a write goes to the cache and reaches each replica on that
//!   replica's next access, never all at once.
//! - *Adaptation* ([`estimate`], `adapt`): a KS test on windows of requests detects that the
//!   requests left `π̂`; the replicas are then swapped under a temporary threshold `α′` that keeps
//!   every label at `1/(2n)` until every swap is done.
//!
//! Beyond the paper: a batch also goes out every `idle_batch_interval` on a fixed schedule. The
//! paper serves a queued request only with the next request's batch, which leaves the last
//! request of a quiet client waiting forever; sending only when something is queued would tell
//! the server that the last batch held no real access (all its coins came up fake, and fakes
//! avoid hot labels). A schedule that depends on nothing lets the queue drain and shows nothing.
//!
//! Storage: each label holds one element sealed with `ElementCodec`, bound to its label and to a
//! generation that grows with every write, so corrupted, swapped or replayed elements fail to
//! open. At most one access per label is at storage at a time (a batch that needs a label still
//! in flight waits, in order), so every read sees the previous write-back. Crash safety: a
//! write is journaled before it is acknowledged and released only when the UpdateCache entry
//! leaves (every replica holds it); recovery takes the newest version among replicas and the
//! journal, and a new instance rewrites every label from what was recovered.

mod adapt;
pub mod estimate;
mod locks;
mod options;
mod replicas;
pub mod smoothing;
mod update_cache;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cloak_core::recovery::leak_demo;
use cloak_core::{
    ElementCodec, Op, OpId, Record, RecoveredRecords, Reply, SchemeError, SchemeStats, Slot,
    StorageError, StorageOp,
};
use cloak_crypto::{Binding, Prf};
use hashbrown::{HashMap, HashSet};
use rand::Rng;
use rand::distr::Distribution;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha20Rng;
use rand_distr::weighted::WeightedAliasIndex;

use crate::Start;
use crate::shell::fill::{Fill, Pace};
use crate::shell::recovered::{read_for_client, take_for_fill};
use crate::shell::{Algorithm, Answer, Io, RequestPurpose};
pub use estimate::{
    ChangeDetector, DistributionError, DistributionFormat, Estimate, EstimateError, KeyWeights,
    KeyWeightsError, estimate_for_keys, parse_distribution,
};
use locks::Locks;
pub use options::{
    DEFAULT_BATCH_SIZE, DEFAULT_IDLE_BATCH_INTERVAL, DEFAULT_MAX_QUEUED, DEFAULT_SIGNIFICANCE,
    DEFAULT_WINDOW, PancakeOptions,
};
use replicas::{DUMMY, Replicas, element_slot};
use smoothing::{Plan, Threshold};
use update_cache::UpdateCache;

/// Labels written per request while the store is first filled.
const FILL_CHUNK: u64 = 1024;

/// The distributions accesses are drawn from, for `π̂` and, during a swap, its transition.
struct Phase {
    estimate: Estimate,
    threshold: Threshold,
    real: WeightedAliasIndex<f64>,
    fake: WeightedAliasIndex<f64>,
    /// While swapping: how many of their first replicas serve the reads of keys that gain some.
    serving: HashMap<u32, u32>,
    /// Cells handed to a new owner that do not hold its record yet.
    pending: usize,
    /// Replicas are being swapped (§5.1): the transition's distributions are in force.
    swapping: bool,
}

/// Why Pancake sent a storage request.
#[derive(Clone, Debug)]
pub enum Purpose {
    /// Part of the initial fill.
    Fill,
    /// A batch's read.
    Read(u64),
    /// A batch's write-back.
    Write(u64),
}

/// One client request's (or one scheduled) batch of accesses.
struct Batch {
    cells: Vec<u32>,
    /// Positions serving a client's read that waits for storage: (position, op, slot).
    readers: Vec<(usize, OpId, u32)>,
    /// Cached records the write-back carries: (slot, version).
    cached: Vec<(u32, u64)>,
}

/// What one access found: whose record the label held, and that record (or why it is lost).
struct Seen {
    holds: u32,
    record: Result<Record, String>,
}

/// The Pancake algorithm (run it in a [`crate::Shell`]).
pub struct Pancake {
    batch_size: usize,
    interval: Duration,
    max_queued: usize,
    keys: usize,
    codec: ElementCodec,
    rng: ChaCha20Rng,
    replicas: Replicas,
    phase: Phase,
    detector: Option<ChangeDetector>,
    cache: UpdateCache,
    /// Records of keys gaining replicas, read from one of their replicas while swapping, to
    /// write into the labels they gain (§5.1 replica caching).
    fetched: HashMap<u32, Record>,
    /// Cells whose element failed authentication and that hold a placeholder since.
    corrupt: HashSet<u32>,
    /// Requests waiting for a real access: (slot, the read waiting on storage, if any).
    queue: VecDeque<(u32, Option<OpId>)>,
    batches: HashMap<u64, Batch>,
    next_batch: u64,
    /// Which formed batches wait for a label another batch holds.
    locks: Locks,
    /// Batches free to go before storage is filled, oldest first.
    held: Vec<u64>,
    /// Records the fill writes (recovered after a crash), read back from recovery's spool as
    /// the fill seals the labels of their replicas.
    initial: RecoveredRecords,
    /// Recovered slots whose record could not be read back: their replicas are written empty
    /// and their cells marked corrupt (see [`crate::shell::recovered`]).
    fill_lost: HashSet<u32>,
    /// How many of `initial` some client wrote. Until the fill is done, storage may hold some of
    /// them nowhere (a fill request overwrote a label that held one before the request with its
    /// new labels landed), so they count as unwritten: a clean stop waits for the fill, and the
    /// proxy keeps its recovery spool until then.
    recovered: u64,
    fill: Fill,
    filled: bool,
    next_generation: u64,
    next_tick: Option<Instant>,
    /// The proxy is stopping and no op will come again ([`Algorithm::settle`]): no idle batch
    /// is formed.
    settled: bool,
    io: Io<Purpose>,
    adaptations: u64,
    swaps: u64,
}

impl Pancake {
    /// A store of `estimate`'s slots holding `start`'s records; its first requests write every
    /// label. `options.estimate` is ignored: `estimate` is the one in force.
    pub fn new(
        options: &PancakeOptions,
        estimate: Estimate,
        prf: Prf,
        codec: ElementCodec,
        mut rng: ChaCha20Rng,
        start: Start,
    ) -> Self {
        let keys = estimate.probabilities().len();
        let plan = Plan::new(estimate.probabilities());
        let replicas = Replicas::new(prf, &plan.counts, plan.dummies, |names| {
            names.shuffle(&mut rng)
        });
        let detector = options
            .adapt
            .then(|| ChangeDetector::new(estimate.clone(), options.window, options.significance));
        let shape = Fill::shape(
            keys as u64,
            replicas.len() as u64,
            codec.element_len(),
            FILL_CHUNK,
        );
        let fill = Fill::new(
            replicas.len() as u64,
            FILL_CHUNK,
            Pace::new(start.fill_clock, shape),
        );
        let mut scheme = Self {
            batch_size: options.batch_size,
            interval: options.idle_batch_interval,
            max_queued: options.max_queued.max(1),
            keys,
            codec,
            rng,
            phase: Phase {
                estimate: estimate.clone(),
                threshold: Threshold::static_for(keys),
                real: WeightedAliasIndex::new(vec![1.0]).expect("one positive weight"),
                fake: WeightedAliasIndex::new(vec![1.0]).expect("one positive weight"),
                serving: HashMap::new(),
                pending: 0,
                swapping: false,
            },
            replicas,
            detector,
            cache: UpdateCache::default(),
            fetched: HashMap::new(),
            corrupt: HashSet::new(),
            queue: VecDeque::new(),
            batches: HashMap::new(),
            next_batch: 0,
            locks: Locks::default(),
            held: Vec::new(),
            recovered: start.records.written(),
            initial: start.records,
            fill_lost: HashSet::new(),
            fill,
            filled: false,
            next_generation: start.generation_base,
            next_tick: None,
            settled: false,
            io: Io::default(),
            adaptations: 0,
            swaps: 0,
        };
        scheme.phase = scheme.settled_phase(estimate);
        scheme.pump_fill(None);
        scheme
    }

    /// The number of replicas of `slot` (a key's, not counting dummies), for tests and `INFO`.
    pub fn replica_count(&self, slot: Slot) -> usize {
        u32::try_from(slot).map_or(0, |s| self.replicas.count(s))
    }

    /// Keys whose newest record is still waiting in the UpdateCache for some replica.
    pub fn update_cache_len(&self) -> usize {
        self.cache.len()
    }

    /// Replica swaps not yet done (0 when no adaptation is in progress).
    pub fn pending_swaps(&self) -> usize {
        self.phase.pending
    }

    /// Adaptations started so far.
    pub fn adaptations(&self) -> u64 {
        self.adaptations
    }

    /// The static phase of `estimate`: `α = 1/n`, every replica serves reads.
    fn settled_phase(&self, estimate: Estimate) -> Phase {
        self.phase_for(
            estimate,
            Threshold::static_for(self.keys),
            HashMap::new(),
            0,
        )
    }

    fn phase_for(
        &self,
        estimate: Estimate,
        threshold: Threshold,
        serving: HashMap<u32, u32>,
        pending: usize,
    ) -> Phase {
        let p = estimate.probabilities();
        let fake: Vec<f64> = self
            .replicas
            .cells()
            .map(|(_, cell)| {
                if cell.owner == DUMMY || cell.pending() {
                    return threshold.fake_weight(0.0);
                }
                let owner = cell.owner;
                let serves = serving
                    .get(&owner)
                    .map_or(self.replicas.count(owner), |&s| s as usize);
                threshold.fake_weight(p[owner as usize] / serves as f64)
            })
            .collect();
        Phase {
            real: WeightedAliasIndex::new(p.to_vec()).expect("π̂ sums to 1"),
            fake: WeightedAliasIndex::new(fake).expect("π_f sums to 1"),
            estimate,
            threshold,
            serving,
            pending,
            swapping: pending > 0,
        }
    }

    /// Seals `record` (of `owner`) for `cell` under a fresh generation.
    ///
    /// Public: elements are sealed one per distinct label of each write request, in the order
    /// the request lists them (the fill in its shuffled cell order, a batch's write-back in its
    /// read order, when that read is answered and right before the write is sent), whether the
    /// access was real or fake and whatever the label holds. So the generation an element shows
    /// in the clear is the run's base plus the number of distinct labels in the writes storage
    /// received before it, counted up to this one: the server can number them itself.
    fn seal(&mut self, cell: u32, owner: u32, record: &Record) -> Bytes {
        self.next_generation += 1;
        let generation = self.next_generation;
        self.replicas.cell_mut(cell).generation = generation;
        let binding = Binding {
            address: self.replicas.label(cell),
            generation,
        };
        self.codec.seal(binding, element_slot(owner), record)
    }

    /// Keeps the fill's window of writes full; once every label is written, batches may go.
    fn pump_fill(&mut self, now: Option<Instant>) {
        while let Some(chunk) = self.fill.next_chunk() {
            let cells = chunk.start as u32..chunk.end as u32;
            let records = self.recovered_owners(cells.clone());
            let mut live = 0;
            let writes = cells
                .map(|cell| {
                    let owner = self.replicas.cell(cell).owner;
                    if self.fill_lost.contains(&owner) {
                        // Its placeholder fails reads until the key is written again.
                        self.corrupt.insert(cell);
                    }
                    let record = (records.get(&owner).cloned()).unwrap_or_default();
                    live += usize::from(record.version > 0);
                    (self.replicas.label(cell), self.seal(cell, owner, &record))
                })
                .collect();
            leak_demo::slow_live_records(live);
            self.fill
                .send(&mut self.io, Purpose::Fill, StorageOp::Write(writes));
        }
        if let Some(now) = now
            && !self.filled
            && self.fill.is_done()
        {
            tracing::info!(
                labels = self.replicas.len(),
                "storage filled, batches start"
            );
            self.filled = true;
            for (slot, version, _) in self.initial.iter() {
                let lost = u32::try_from(slot).is_ok_and(|s| self.fill_lost.contains(&s));
                if version > 0 && !lost {
                    self.io.out.release(slot, version);
                }
            }
            // Every recovered record is in storage: the table would keep its peak size.
            self.initial = RecoveredRecords::default();
            self.next_tick = Some(now + self.interval);
            let held = std::mem::take(&mut self.held);
            self.dispatch(held);
        }
    }

    /// The recovered records of the keys owning `cells`, read back from the spool, each key's
    /// once, after as many reads of it as there are cells (see `take_for_fill`); a record that
    /// cannot be read back is counted once (its key goes into `fill_lost`).
    fn recovered_owners(&mut self, cells: std::ops::Range<u32>) -> HashMap<u32, Record> {
        let reads = cells.len();
        let mut owners: Vec<u32> = cells
            .map(|cell| self.replicas.cell(cell).owner)
            .filter(|&owner| owner != DUMMY && !self.fill_lost.contains(&owner))
            .collect();
        owners.sort_unstable();
        owners.dedup();
        let records = take_for_fill(
            &mut self.initial,
            &owners,
            reads,
            &mut self.fill_lost,
            &mut self.io.stats.fill_losses,
        );
        owners.into_iter().zip(records).collect()
    }

    /// A replica of `slot` that serves reads, chosen uniformly.
    fn serving_replica(&mut self, slot: u32) -> u32 {
        let serving = self
            .phase
            .serving
            .get(&slot)
            .map_or(self.replicas.count(slot), |&s| s as usize);
        let j = self.rng.random_range(0..serving);
        self.replicas.replica(slot, j)
    }

    /// Draws one batch of `B` accesses (Figure 2, Batch) and queues it for sending.
    fn form_batch(&mut self) {
        let delta = self.phase.threshold.real_probability().clamp(0.0, 1.0);
        let mut batch = Batch {
            cells: Vec::with_capacity(self.batch_size),
            readers: Vec::new(),
            cached: Vec::new(),
        };
        for position in 0..self.batch_size {
            let cell = if self.rng.random_bool(delta) {
                let (slot, reader) = match self.queue.pop_front() {
                    Some(request) => {
                        self.io.stats.real_accesses += 1;
                        request
                    }
                    None => {
                        self.io.stats.dummy_accesses += 1;
                        (self.phase.real.sample(&mut self.rng) as u32, None)
                    }
                };
                if let Some(op) = reader {
                    batch.readers.push((position, op, slot));
                }
                self.serving_replica(slot)
            } else {
                self.io.stats.dummy_accesses += 1;
                self.phase.fake.sample(&mut self.rng) as u32
            };
            batch.cells.push(cell);
        }
        let id = self.next_batch;
        self.next_batch += 1;
        let free = self.locks.enqueue(id, &batch.cells);
        self.batches.insert(id, batch);
        if free {
            self.dispatch(vec![id]);
        }
    }

    /// Batches formed and not sent yet: waiting for a label, or for storage to be filled.
    fn formed_unsent(&self) -> usize {
        self.locks.waiting() + self.held.len()
    }

    /// Sends the reads of `ready` batches, which hold all their labels now (held back until
    /// storage is filled).
    fn dispatch(&mut self, ready: Vec<u64>) {
        if !self.filled {
            self.held.extend(ready);
            return;
        }
        for id in ready {
            let labels = self.batches[&id]
                .cells
                .iter()
                .map(|&c| self.replicas.label(c))
                .collect();
            self.io.send(Purpose::Read(id), StorageOp::Read(labels));
        }
    }

    /// Storage answered a batch's reads: answer clients, decide what each label gets, write back.
    fn finish_read(&mut self, id: u64, values: Vec<Option<Bytes>>) {
        let Some(mut batch) = self.batches.remove(&id) else {
            return;
        };
        let mut seen: HashMap<u32, (Seen, Bytes)> = HashMap::new();
        for (position, &cell) in batch.cells.iter().enumerate() {
            if seen.contains_key(&cell) {
                // The same label twice in a batch: one access decides, both positions write it.
                continue;
            }
            let value = values[position].as_ref();
            let access = self.access(cell, value, &mut batch.cached);
            seen.insert(cell, access);
        }
        for (position, op, slot) in std::mem::take(&mut batch.readers) {
            let (found, _) = &seen[&batch.cells[position]];
            let reply = match (self.cache.get(slot), found) {
                (Some(record), _) => Reply::Value(record.clone()),
                (None, Seen { holds, record }) if *holds == slot => match record {
                    Ok(record) => Reply::Value(record.clone()),
                    Err(reason) => Reply::Failed(SchemeError::Integrity(reason.clone())),
                },
                // The label changed hands before this read reached it: read the key again.
                _ => {
                    self.queue.push_front((slot, Some(op)));
                    continue;
                }
            };
            self.io.out.answer(op, Slot::from(slot), reply);
        }
        let writes = batch
            .cells
            .iter()
            .map(|&c| (self.replicas.label(c), seen[&c].1.clone()))
            .collect();
        self.batches.insert(id, batch);
        self.io.send(Purpose::Write(id), StorageOp::Write(writes));
        if self.phase.swapping && self.phase.pending == 0 {
            self.finish_swap();
        }
    }

    /// One access to `cell`: opens what storage returned and seals what goes back — the
    /// UpdateCache's newer record for a stale replica, a swapped-in key's record for a label it
    /// gains, else the same record re-encrypted.
    fn access(
        &mut self,
        cell: u32,
        value: Option<&Bytes>,
        cached: &mut Vec<(u32, u64)>,
    ) -> (Seen, Bytes) {
        let (owner, holds, generation) = {
            let c = self.replicas.cell(cell);
            (c.owner, c.holds, c.generation)
        };
        let binding = Binding {
            address: self.replicas.label(cell),
            generation,
        };
        let opened = self
            .codec
            .open(binding, value, Some(element_slot(holds)))
            .map(|(_, record)| record)
            .map_err(|error| {
                self.io.stats.integrity_failures += 1;
                tracing::error!(label = binding.address, %error, "storage returned a bad element");
                format!(
                    "the element holding this key failed authentication ({error}); the value is \
                     lost until the key is written again"
                )
            });
        let lost = opened.is_err() || self.corrupt.contains(&cell);
        let seen_record = match (&opened, lost) {
            (Ok(record), false) => Ok(record.clone()),
            (Err(reason), _) => Err(reason.clone()),
            (Ok(_), true) => Err(
                "the element holding this key failed authentication earlier; \
                                  the value is lost until the key is written again"
                    .to_string(),
            ),
        };
        let (writer, content) = if owner == DUMMY {
            if holds != DUMMY {
                self.swapped(cell);
            }
            (DUMMY, Record::empty())
        } else if holds == owner {
            let from_cache = self.cache.take_for(owner, cell, lost);
            match (from_cache, opened) {
                (Some(record), _) => {
                    cached.push((owner, record.version));
                    self.corrupt.remove(&cell);
                    (owner, record)
                }
                (None, Ok(record)) if !lost => {
                    if self.phase.serving.contains_key(&owner) && self.cache.get(owner).is_none() {
                        self.fetched.insert(owner, record.clone());
                    }
                    (owner, record)
                }
                (None, _) => {
                    self.corrupt.insert(cell);
                    (owner, Record::empty())
                }
            }
        } else {
            // The label was handed to `owner` and still holds `holds`' record (§5.1).
            let newest = match self.cache.take_for(owner, cell, false) {
                Some(record) => {
                    cached.push((owner, record.version));
                    Some(record)
                }
                None => self.fetched.get(&owner).cloned(),
            };
            match newest {
                Some(record) => {
                    self.swapped(cell);
                    (owner, record)
                }
                None => (holds, opened.unwrap_or_default()),
            }
        };
        let sealed = self.seal(cell, writer, &content);
        (
            Seen {
                holds,
                record: seen_record,
            },
            sealed,
        )
    }

    /// A handed-over label now holds its new owner's record.
    fn swapped(&mut self, cell: u32) {
        let c = self.replicas.cell_mut(cell);
        c.holds = c.owner;
        self.phase.pending -= 1;
        self.swaps += 1;
    }

    /// Storage holds a batch's write-back.
    fn finish_write(&mut self, id: u64) {
        let Some(batch) = self.batches.remove(&id) else {
            return;
        };
        let ready = self.locks.release(id, &batch.cells);
        for (slot, version) in batch.cached {
            if let Some(version) = self.cache.written(slot, version) {
                self.io.out.release(Slot::from(slot), version);
            }
        }
        self.io.stats.batches += 1;
        self.dispatch(ready);
    }

    /// Counts a request for drift detection, and starts swapping when the window says so.
    fn observe(&mut self, slot: u32) {
        if self.phase.swapping {
            return;
        }
        let Some(detector) = self.detector.as_mut() else {
            return;
        };
        if let Some(estimate) = detector.observe(slot) {
            self.adaptations += 1;
            self.begin_swap(estimate);
        }
    }
}

/// Every request is repeated after a failure: the algorithm's state waits for it.
impl RequestPurpose for Purpose {}

impl Algorithm for Pancake {
    type Purpose = Purpose;
    const NAME: &'static str = "pancake";

    crate::shell::io_in_field!();

    fn slots(&self) -> u64 {
        self.keys as u64
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        let slot = crate::shell::slot32(&op);
        // The read waiting for this request's access, if the proxy cannot answer it itself.
        let reader = match op {
            Op::Write(_, record) => {
                self.io.out.keep(Slot::from(slot), record.clone());
                self.fetched.remove(&slot);
                let cells = self.replicas.of(slot);
                self.cache.write(slot, record, cells);
                self.io.out.answer(id, Slot::from(slot), Reply::Written);
                None
            }
            Op::Read(_) => match self.cache.get(slot) {
                Some(record) => {
                    let reply = Reply::Value(record.clone());
                    self.io.stats.cache_hits += 1;
                    self.io.out.answer(id, Slot::from(slot), reply);
                    None
                }
                // Before storage is filled no batch goes out, and a write during the fill waits
                // in the update cache (the arm above), so a recovered record is its slot's
                // newest value: it is answered from recovery's spool on local disk, with no
                // storage request, instead of after the whole fill. The read's work is on the
                // thread that prepares the fill's requests, which leave on the fill's public
                // clock (`crate::shell::fill`) unless a flood of reads makes one late. A slot
                // the fill already found unreadable waits for its batch, which fails the read.
                None if !self.filled && !self.fill_lost.contains(&slot) => {
                    self.io.stats.cache_misses += 1;
                    self.io.stats.recovered_reads += 1;
                    let reply = read_for_client(&mut self.initial, slot)
                        .map_or_else(Reply::Failed, Reply::Value);
                    self.io.out.answer(id, Slot::from(slot), reply);
                    None
                }
                None => {
                    self.io.stats.cache_misses += 1;
                    match self.io.unavailable() {
                        // Storage is down: say so now rather than after the backoff.
                        Some(error) => {
                            self.io.out.reply(id, Reply::Failed(error));
                            None
                        }
                        None => Some(id),
                    }
                }
            },
        };
        // Every request takes its place in the queue and its batch, however it was answered (a
        // write, a cache hit, a recovered record during the fill, a refusal while storage is
        // down): the server sees a batch for each, so the batches after a fill or an outage are
        // the ones it would have seen had every request waited.
        self.queue.push_back((slot, reader));
        self.observe(slot);
        self.form_batch();
    }

    fn answered(&mut self, now: Instant, purpose: Purpose, answer: Answer) {
        match purpose {
            Purpose::Fill => {
                // The recovered records are released once the whole fill is in (`pump_fill`).
                self.fill
                    .written(answer.arrived(), Vec::new(), &mut self.io.out);
                self.pump_fill(Some(now));
            }
            Purpose::Read(batch) => self.finish_read(batch, answer.values()),
            Purpose::Write(batch) => self.finish_write(batch),
        }
    }

    /// Storage failed a request: every reader waiting for storage learns now, whether its
    /// batch was sent, is blocked behind a label whose write-back storage refuses, or is not
    /// formed yet. Their accesses still happen as drawn (the batches keep their labels); the
    /// request is repeated after a backoff (repeating it shows the server nothing new).
    fn failed(&mut self, _now: Instant, _purpose: &Purpose, error: &StorageError) {
        let reply = Reply::Failed(SchemeError::StorageUnavailable(error.clone()));
        for batch in self.batches.values_mut() {
            let readers = std::mem::take(&mut batch.readers);
            self.io
                .out
                .reply_all(readers.into_iter().map(|(_, op, _)| op), reply.clone());
        }
        for (_, reader) in &mut self.queue {
            if let Some(op) = reader.take() {
                self.io.out.reply(op, reply.clone());
            }
        }
    }

    fn timeout(&mut self, now: Instant) {
        // The schedule ends with the stop: the proxy waits for the batches in flight, and exits.
        if self.settled {
            self.next_tick = None;
            return;
        }
        if let Some(due) = self.next_tick
            && due <= now
        {
            // A fixed schedule: a late tick moves the next one, it never sends two at once.
            let next = due + self.interval;
            self.next_tick = Some(if next <= now {
                now + self.interval
            } else {
                next
            });
            // Not while storage fails or batches pile up: nothing would drain, and the server
            // sees the stall anyway.
            if !self.io.repeating() && self.formed_unsent() < self.max_queued {
                self.form_batch();
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.next_tick
    }

    /// Every op is an access of its own: absent keys need cover reads.
    fn traffic_per_op(&self) -> bool {
        true
    }

    fn settle(&mut self) {
        self.settled = true;
    }

    fn accepts(&self) -> bool {
        self.queue.len() + self.formed_unsent() < self.max_queued
    }

    fn current_stats(&self, stats: &mut SchemeStats) {
        stats.filling = self.fill.filling();
        stats.queued = self.queue.len() as u64;
        let filling = if self.filled { 0 } else { self.recovered };
        stats.unwritten = self.cache.unwritten() as u64 + filling;
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        let dummies = self.replicas.count(DUMMY);
        let mut fields = vec![
            ("batch_size", self.batch_size.to_string()),
            ("labels", self.replicas.len().to_string()),
            ("replicas", (self.replicas.len() - dummies).to_string()),
            ("dummy_replicas", dummies.to_string()),
            ("alpha", format!("{:.6e}", self.phase.threshold.alpha)),
            (
                "real_probability",
                format!("{:.4}", self.phase.threshold.real_probability()),
            ),
            (
                "estimate",
                match self.phase.estimate.samples() {
                    None => "given".to_string(),
                    Some(samples) => format!("observed over {samples} requests"),
                },
            ),
            ("update_cache", self.cache.len().to_string()),
            ("queued", self.queue.len().to_string()),
            ("adaptations", self.adaptations.to_string()),
            ("pending_swaps", self.phase.pending.to_string()),
            ("swaps_done", self.swaps.to_string()),
            (
                "idle_batch_interval_ms",
                format!("{}", self.interval.as_secs_f64() * 1e3),
            ),
            ("element_bytes", self.codec.element_len().to_string()),
            ("storage_filled", self.filled.to_string()),
        ];
        if let Some(detector) = &self.detector {
            fields.push(("window", detector.window().to_string()));
            fields.push(("ks_critical", format!("{:.6}", detector.critical())));
            if let Some(d) = detector.last_statistic {
                fields.push(("ks_last_statistic", format!("{d:.6}")));
            }
        } else {
            fields.push(("adaptation", "off".to_string()));
        }
        fields
    }
}
