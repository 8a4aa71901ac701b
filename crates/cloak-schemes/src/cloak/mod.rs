//! Cloak (paper §4): every batch takes exactly `b_d` addresses from each reuse-distance set.
//!
//! The server sees one batch every `Δ`, always the same size, always `b_d` addresses from the
//! set of reuse distance `d` (see [`Budgets`]). Which addresses those are is chosen from the
//! pending client ops first and then, for the rest of each set's budget, from the slots clients
//! touched most recently (§4.2). After the server answers, every element of the batch is
//! re-encrypted, the batch is permuted with a fresh CSPRNG permutation and written back to the
//! same addresses, and it becomes the newest set.
//!
//! Client ops are answered as early as correctness allows (§4.1, Algorithm 2): writes as soon as
//! they are in the proxy's journal (they are kept until written back), reads from the cache, from
//! a pending write, or by joining a pending read. At most one op per slot waits for a batch; when
//! too many wait, [`Scheme::accepts`](cloak_core::Scheme::accepts) turns false until a batch completes.
//!
//! After a crash the store is rebuilt from storage and the journal (`cloak_core::recovery`) and
//! a new instance starts from those records ([`Start`]) under a fresh random layout.

mod budgets;
mod options;
mod sets;
mod write_backs;

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cloak_core::{
    Addr, ElementCodec, Op, OpId, Plaintext, Record, RecoveredRecords, Reply, SchemeError,
    SchemeStats, Slot, StorageError, StorageOp,
};
use cloak_crypto::Binding;
use hashbrown::{HashMap, HashSet};
use lru::LruCache;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha20Rng;

pub use budgets::{BudgetError, Budgets};
pub use options::{
    CloakOptions, DEFAULT_BATCH_INTERVAL, DEFAULT_CACHE_SIZE, DEFAULT_FIRST_BUDGET,
    DEFAULT_ZIPF_EXPONENT,
};
use sets::Sets;
use write_backs::{WriteBack, WriteBacks};

use crate::Start;
use crate::schedule::Schedule;
use crate::shell::fill::{Fill, Pace};
use crate::shell::recovered::{read_for_client, take_for_fill};
use crate::shell::{Algorithm, Answer, Io, RequestPurpose};

/// Elements written per request while the store is first filled.
const FILL_CHUNK: u64 = 1024;

/// Cloak's parameters, checked (see [`CloakOptions::config`]).
#[derive(Clone, Debug)]
pub struct CloakConfig {
    /// The budgets every batch takes.
    pub budgets: Budgets,
    /// Fixed time between batch starts (`Δ`).
    pub batch_interval: Duration,
    /// From a batch's start on the grid to its write-back leaving (below `Δ`; see
    /// [`crate::schedule`]).
    pub write_back_hold: Duration,
    /// Records kept at the proxy to answer reads without a batch; 0 disables the cache.
    pub cache_size: usize,
    /// Most slots with an op waiting for a batch; `None` means twice the batch size (§7.1).
    pub max_pending: Option<usize>,
}

/// A client op waiting for a batch.
#[derive(Debug)]
enum Waiting {
    /// Reads answered together by one server read.
    Read(Vec<OpId>),
    /// A write to apply; every read of the slot is answered with it.
    Write(Record),
}

/// What a slot waits for: at most one op queued for the next batches, and at most one in the
/// batch in flight.
#[derive(Debug, Default)]
struct Pending {
    queued: Option<Waiting>,
    flight: Option<Waiting>,
}

/// The batch the server is serving.
struct Flight {
    batch: u64,
    /// When the batch's read left (its grid point, or later when the driver woke late); its
    /// write-back leaves a fixed hold after it.
    started: Instant,
    /// Addresses in ascending order, as sent.
    addrs: Vec<u32>,
    /// The slot each address held, and the batch that wrote it, before this batch.
    old_slots: Vec<u32>,
    old_generations: Vec<u64>,
    /// `addrs[j]` now holds `old_slots[perm[j]]`.
    perm: Vec<u32>,
    /// For the addresses an unanswered write-back was writing when the read left, by index in
    /// `addrs`: the element it wrote, used instead of storage's answer (see [`write_backs`]).
    written_meanwhile: Vec<(usize, Bytes)>,
}

/// Why Cloak sent a storage request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Part of the initial fill, carrying recovered records as (slot, version).
    Fill(Vec<(u32, u64)>),
    /// A batch's read.
    BatchRead,
    /// A batch's write-back.
    BatchWrite,
}

/// The Cloak algorithm (run it in a [`crate::Shell`]).
pub struct Cloak {
    budgets: Budgets,
    max_pending: usize,
    codec: ElementCodec,
    rng: ChaCha20Rng,

    /// Position map: slot → address and address → slot.
    pos: Vec<u32>,
    slot_at: Vec<u32>,
    /// The batch that last wrote each address: its set, and the generation its element is bound to.
    /// Kept as the low 32 bits: every live set is younger than `T + 1` batches, so the full id
    /// follows from the current one (see [`Cloak::batch_of`]); 4 bytes an address instead of 8.
    written_in: Vec<u32>,
    /// Logical clock of each slot's last client op (0: never), for dummy selection. It wraps;
    /// recency is measured as the wrapping distance from the current clock.
    touched: Vec<u32>,
    clock: u32,
    sets: Sets,
    /// Id of the next batch.
    batch: u64,

    pending: HashMap<u32, Pending>,
    queued: usize,
    cache: Option<LruCache<u32, Record>>,
    /// Slots whose element failed authentication and that no client has overwritten since.
    corrupt: HashSet<u32>,
    /// The batch whose read is out, until its answer is sealed into a write-back.
    flight: Option<Flight>,
    write_backs: WriteBacks,

    /// Records the initial fill places (recovered after a crash), by slot.
    initial: RecoveredRecords,
    /// How many recovered records the fill places. Until every chunk has landed, storage may
    /// hold some of them nowhere (a chunk overwrote a record's old address before the one with
    /// its new address landed), so they count as unwritten and a clean stop waits for the fill.
    recovered: u64,
    /// Addresses not yet written by the initial fill, and fill requests unanswered.
    fill: Fill,
    /// When batches start and write-backs leave.
    schedule: Schedule,
    /// The proxy is stopping and no op will come again ([`Algorithm::settle`]): no batch starts.
    settled: bool,
    /// Starts a batch as soon as the one before is done while requests wait, off the grid:
    /// the timing leak of [`crate::LEAK_DEMO_INTAKE_BATCHES_ENV`], for tests only.
    #[cfg(feature = "leak-demo")]
    leak_demo_intake_batches: bool,

    io: Io<Purpose>,
}

impl Cloak {
    /// A Cloak store of `config.budgets.capacity()` slots holding `start`'s records (the rest
    /// empty), with a random position map and set partition. Its first requests fill storage.
    pub fn new(
        config: CloakConfig,
        codec: ElementCodec,
        mut rng: ChaCha20Rng,
        start: Start,
    ) -> Self {
        let budgets = config.budgets;
        let n = usize::try_from(budgets.capacity())
            .ok()
            .filter(|&n| n < u32::MAX as usize)
            .expect("Cloak addresses fit in 32 bits; the CLI checks capacity");
        let t = budgets.sets();
        // Generations (batch ids) start above every earlier run's, so no element of an earlier
        // run can pass for a current one.
        let first_batch = start.generation_base + t as u64;

        // Random set partition of the slots (in a random order, which is also each set's initial
        // recency order), and an independent random position map.
        let mut slots: Vec<u32> = (0..n as u32).collect();
        slots.shuffle(&mut rng);
        let mut pos: Vec<u32> = (0..n as u32).collect();
        pos.shuffle(&mut rng);
        let mut slot_at = vec![0u32; n];
        for (slot, &addr) in pos.iter().enumerate() {
            slot_at[addr as usize] = slot as u32;
        }
        let mut sets = Sets::new(n, t);
        let mut written_in = vec![0u32; n];
        let mut members = slots.into_iter();
        for (d, size) in budgets.set_sizes().into_iter().enumerate() {
            let born = first_batch - (d as u64 + 1);
            let set = sets.born_in(born);
            for slot in members.by_ref().take(size as usize) {
                let addr = pos[slot as usize];
                written_in[addr as usize] = born as u32;
                sets.push_back(set, addr);
            }
        }

        let batch_size = budgets.batch_size();
        let initial = start.records;
        let shape = Fill::shape(n as u64, n as u64, codec.element_len(), FILL_CHUNK);
        Self {
            max_pending: config.max_pending.unwrap_or(2 * batch_size).max(1),
            cache: NonZeroUsize::new(config.cache_size).map(LruCache::new),
            budgets,
            codec,
            rng,
            pos,
            slot_at,
            written_in,
            touched: vec![0; n],
            clock: 0,
            sets,
            batch: first_batch,
            pending: HashMap::new(),
            queued: 0,
            settled: false,
            corrupt: HashSet::new(),
            flight: None,
            write_backs: WriteBacks::default(),
            recovered: initial.written(),
            initial,
            fill: Fill::new(n as u64, FILL_CHUNK, Pace::new(start.fill_clock, shape)),
            schedule: Schedule::new(config.batch_interval, Some(config.write_back_hold)),
            #[cfg(feature = "leak-demo")]
            leak_demo_intake_batches: false,
            io: Io::default(),
        }
        .with_fill_started()
    }

    /// The budgets `b_1, …, b_T` every batch takes.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// Starts each batch from intake instead of the timer: as soon as the batch before is
    /// done while requests wait. The timing leak of [`crate::LEAK_DEMO_INTAKE_BATCHES_ENV`],
    /// for tests only.
    #[cfg(feature = "leak-demo")]
    fn leak_demo_batches_from_intake(mut self) -> Self {
        self.leak_demo_intake_batches = true;
        self
    }

    fn with_fill_started(mut self) -> Self {
        self.pump_fill(None);
        self
    }

    fn filled(&self) -> bool {
        self.fill.is_done()
    }

    /// Whether the schedule has ended: the proxy is stopping and no op will come again, so it
    /// waits for the batch in flight and its write-back, and exits. Until then batches keep the
    /// grid, whatever the stop's queue holds (ops a command makes after another's answer, like
    /// an INCR's write, come while draining), so a batch never leaves off the grid.
    fn stopped(&self) -> bool {
        self.settled
    }

    /// Keeps the initial fill's window of write requests full; once all are answered, the
    /// batch schedule starts at `now`.
    fn pump_fill(&mut self, now: Option<Instant>) {
        while let Some(chunk) = self.fill.next_chunk() {
            let addrs = chunk.start as u32..chunk.end as u32;
            let slots: Vec<u32> = addrs
                .clone()
                .map(|addr| self.slot_at[addr as usize])
                .collect();
            let records = take_for_fill(
                &mut self.initial,
                &slots,
                slots.len(),
                &mut self.corrupt,
                &mut self.io.stats.fill_losses,
            );
            let recovered = slots
                .iter()
                .zip(&records)
                .filter(|(_, record)| record.version > 0)
                .map(|(&slot, record)| (slot, record.version))
                .collect();
            // Nonces are drawn here in address order, as a one-by-one seal would draw them;
            // `ElementCodec::seal_all` says why sealing on every core shows the server nothing
            // new.
            let mut to_seal: Vec<_> = addrs
                .clone()
                .zip(slots)
                .zip(records)
                .map(|((addr, slot), record)| {
                    let binding = self.binding(addr, self.batch_of(addr));
                    let plaintext = Plaintext::Record(Slot::from(slot), record);
                    (self.codec.prepare(), binding, plaintext)
                })
                .collect();
            let writes = addrs
                .map(Addr::from)
                .zip(self.codec.seal_all(&mut to_seal))
                .collect();
            self.fill.send(
                &mut self.io,
                Purpose::Fill(recovered),
                StorageOp::Write(writes),
            );
        }
        if let Some(now) = now
            && self.filled()
            && !self.schedule.started()
        {
            tracing::info!(elements = self.pos.len(), "storage filled, batches start");
            self.schedule.start(now);
            // A recovery handed over every record; the emptied table would keep its peak size.
            self.initial = RecoveredRecords::default();
        }
    }

    fn binding(&self, addr: u32, generation: u64) -> Binding {
        Binding {
            address: Addr::from(addr),
            generation,
        }
    }

    /// The batch that last wrote `addr`.
    fn batch_of(&self, addr: u32) -> u64 {
        let age = (self.batch as u32).wrapping_sub(self.written_in[addr as usize]);
        self.batch - u64::from(age)
    }

    /// How long ago clients last touched `slot`, in client ops (never: longest).
    fn staleness(&self, slot: u32) -> u32 {
        match self.touched[slot as usize] {
            0 => u32::MAX,
            t => self.clock.wrapping_sub(t),
        }
    }

    fn set_of(&self, slot: u32) -> usize {
        let addr = self.pos[slot as usize];
        self.sets.born_in(self.batch_of(addr))
    }

    /// Records a client op on `slot` for dummy selection: the slot becomes the most recent
    /// member of its set.
    fn touch(&mut self, slot: u32) {
        self.clock = self.clock.wrapping_add(1).max(1);
        self.touched[slot as usize] = self.clock;
        let set = self.set_of(slot);
        self.sets.move_to_front(set, self.pos[slot as usize]);
    }

    /// Queues an op for the next batches that take from the slot's set.
    fn enqueue(&mut self, slot: u32, waiting: Waiting) {
        let set = self.set_of(slot);
        self.sets.get_mut(set).queue.push_back(slot);
        self.pending.entry(slot).or_default().queued = Some(waiting);
        self.queued += 1;
    }

    fn read(&mut self, id: OpId, slot: u32) {
        let pending = self.pending.get_mut(&slot);
        // A pending write is the newest value: answer with it (queued before in flight).
        if let Some(Pending {
            queued: Some(Waiting::Write(record)),
            ..
        })
        | Some(Pending {
            queued: None,
            flight: Some(Waiting::Write(record)),
        }) = pending.as_deref()
        {
            let reply = Reply::Value(record.clone());
            self.io.stats.cache_hits += 1;
            self.answer(id, slot, reply);
            return;
        }
        if let Some(record) = self.cache.as_mut().and_then(|c| c.get(&slot)) {
            let reply = Reply::Value(record.clone());
            self.io.stats.cache_hits += 1;
            self.answer(id, slot, reply);
            return;
        }
        self.io.stats.cache_misses += 1;
        if self.corrupt.contains(&slot) {
            let error = SchemeError::Integrity(
                "the element holding this key failed authentication earlier; the value is lost \
                 until the key is written again"
                    .into(),
            );
            self.io.out.reply(id, Reply::Failed(error));
            return;
        }
        if !self.filled() {
            self.read_recovered(id, slot);
            return;
        }
        if let Some(error) = self.io.unavailable() {
            self.io.out.reply(id, Reply::Failed(error));
            return;
        }
        match self.pending.get_mut(&slot) {
            Some(Pending {
                queued: Some(Waiting::Read(waiters)),
                ..
            })
            | Some(Pending {
                queued: None,
                flight: Some(Waiting::Read(waiters)),
            }) => {
                self.io.stats.joined_reads += 1;
                waiters.push(id);
            }
            _ => self.enqueue(slot, Waiting::Read(vec![id])),
        }
    }

    /// Answers a read of `slot` while the initial fill runs, from the records the restart
    /// recovered: its value is in recovery's spool on local disk, where the fill reads it too,
    /// so the read needs no storage request and shows the server nothing. Storage may not hold
    /// the record anywhere until the fill is done (a chunk overwrites its old address before the
    /// one with its new address lands), so before this such a read waited for the whole fill.
    /// A write during the fill is pending until the first batch and answers reads itself (see
    /// [`Cloak::read`]), so the recovered record is the newest value whenever this is reached.
    ///
    /// Its cost (one element read back and opened) is on this thread, which also prepares the
    /// fill's requests; those leave on the fill's public clock whatever the clients do, unless
    /// a flood of such reads makes one late, which is counted and logged like any late request
    /// (see `crate::shell::fill`).
    fn read_recovered(&mut self, id: OpId, slot: u32) {
        self.io.stats.recovered_reads += 1;
        let reply = match read_for_client(&mut self.initial, slot) {
            Ok(record) => {
                if let Some(cache) = self.cache.as_mut() {
                    cache.put(slot, record.detached());
                }
                Reply::Value(record)
            }
            Err(error) => Reply::Failed(error),
        };
        self.answer(id, slot, reply);
    }

    /// Replies about `slot`, once whatever was written to it is durable.
    fn answer(&mut self, op: OpId, slot: u32, reply: Reply) {
        self.io.out.answer(op, Slot::from(slot), reply);
    }

    fn write(&mut self, id: OpId, slot: u32, record: Record) {
        if let Some(cache) = self.cache.as_mut() {
            cache.put(slot, record.clone());
        }
        self.corrupt.remove(&slot);
        self.io.out.keep(Slot::from(slot), record.clone());
        let pending = self.pending.entry(slot).or_default();
        let mut waiters = Vec::new();
        for waiting in [&mut pending.queued, &mut pending.flight] {
            if let Some(Waiting::Read(w)) = waiting {
                waiters.append(w);
            }
        }
        match &mut pending.queued {
            // Keep the queue position; the newest write replaces whatever waited.
            Some(waiting) => *waiting = Waiting::Write(record.clone()),
            None => self.enqueue(slot, Waiting::Write(record.clone())),
        }
        for waiter in waiters {
            self.answer(waiter, slot, Reply::Value(record.clone()));
        }
        self.answer(id, slot, Reply::Written);
    }

    /// Starts the batch due on the grid, unless the one before is unfinished (then that grid
    /// point is skipped: see [`crate::schedule`]).
    fn maybe_start_batch(&mut self, now: Instant) {
        if self.stopped() {
            return;
        }
        let busy = self.flight.is_some() || !self.write_backs.has_room() || self.io.repeating();
        #[cfg(feature = "leak-demo")]
        if self.leak_demo_intake_batches && !busy && self.queued > 0 {
            let leaves = self.schedule.restart(now);
            self.start_batch(leaves);
            return;
        }
        if let Some(leaves) = self.schedule.due(now, busy) {
            // The hold counts from when the read really leaves (see `crate::schedule`).
            self.start_batch(leaves);
        }
    }

    fn start_batch(&mut self, started: Instant) {
        let batch = self.batch;
        let size = self.budgets.batch_size();
        let mut addrs = Vec::with_capacity(size);
        let mut reals = 0u64;
        for d in 1..=self.budgets.sets() {
            let set = self.sets.born_in(batch - d as u64);
            let budget = self.budgets.budget(d) as usize;
            let mut taken = 0;
            while taken < budget {
                let Some(slot) = self.sets.get_mut(set).queue.pop_front() else {
                    break;
                };
                let addr = self.pos[slot as usize];
                self.sets.unlink(set, addr);
                let pending = self.pending.entry(slot).or_default();
                pending.flight = pending.queued.take();
                self.queued -= 1;
                addrs.push(addr);
                taken += 1;
            }
            reals += taken as u64;
            // Dummies: the rest of the budget, most recently touched first (§4.2). Which slots
            // this picks (touched or untouched, ties in slot order) is invisible to the server:
            // every batch moved its slots to addresses by a fresh uniform permutation, and no
            // header field links an address to the one its element came from (random nonces;
            // one generation per write-back), so the addresses taken from a set are a uniform
            // random subset of it whatever rule chose the slots behind them.
            for _ in taken..budget {
                let addr = self
                    .sets
                    .pop_front(set)
                    .expect("set d holds at least b_d addresses");
                addrs.push(addr);
            }
        }
        debug_assert_eq!(addrs.len(), size);

        // The order of the request must not reveal which addresses were real.
        addrs.sort_unstable();
        let old_slots: Vec<u32> = addrs.iter().map(|&a| self.slot_at[a as usize]).collect();
        let old_generations: Vec<u64> = addrs.iter().map(|&a| self.batch_of(a)).collect();
        let mut perm: Vec<u32> = (0..size as u32).collect();
        perm.shuffle(&mut self.rng);
        for (&addr, &from) in addrs.iter().zip(&perm) {
            let slot = old_slots[from as usize];
            self.pos[slot as usize] = addr;
            self.slot_at[addr as usize] = slot;
            self.written_in[addr as usize] = batch as u32;
        }

        // The batch becomes the newest set, most recently touched slots first; ties in slot order.
        let newest = self.sets.born_in(batch);
        debug_assert_eq!(self.sets.get(newest).len(), 0, "the oldest set emptied");
        debug_assert!(self.sets.get(newest).queue.is_empty());
        let mut by_recency = old_slots.clone();
        by_recency.sort_unstable_by_key(|&s| (self.staleness(s), s));
        for slot in by_recency {
            self.sets.push_back(newest, self.pos[slot as usize]);
        }

        self.batch += 1;
        self.io.stats.real_accesses += reals;
        self.io.stats.dummy_accesses += size as u64 - reals;
        let read = StorageOp::Read(addrs.iter().map(|&a| Addr::from(a)).collect());
        let written_meanwhile = addrs
            .iter()
            .enumerate()
            .filter_map(|(i, &addr)| Some((i, self.write_backs.element_at(addr)?.clone())))
            .collect();
        self.flight = Some(Flight {
            batch,
            started,
            addrs,
            old_slots,
            old_generations,
            perm,
            written_meanwhile,
        });
        self.io.send_at(started, Purpose::BatchRead, read);
    }

    /// The server answered the batch read: answer clients, apply writes, re-encrypt, and hand
    /// the write-back over to leave at its time on the schedule (now if that has passed).
    fn finish_read(&mut self, now: Instant, mut values: Vec<Option<Bytes>>) {
        let mut flight = self.flight.take().expect("a batch is in flight");
        for (i, element) in std::mem::take(&mut flight.written_meanwhile) {
            values[i] = Some(element);
        }
        let mut written = Vec::new();
        // Where each element goes: `addrs[perm[j]]`'s element moves to `addrs[j]`.
        let mut moves_to = vec![0u32; flight.perm.len()];
        for (to, &from) in flight.perm.iter().enumerate() {
            moves_to[from as usize] = to as u32;
        }
        // Open every element on every core, settle each slot in read order, then seal the batch
        // in write order on every core: the plaintexts of one batch are held meanwhile (a
        // batch's worth of memory, fixed by the budgets). `ElementCodec::seal_all` says why
        // sealing on several threads shows the server nothing new. Each element's nonce is drawn
        // as it is settled, in read order: random nonces are independent draws, so their order
        // says nothing; the leak demo's counter nonces make it name the shuffle, as the original
        // bug did, which is what the demo exists to show. The epoch is the one field whose
        // change follows the drawing order, so the batch's seals are first reserved in one epoch.
        //
        // Memory: each element is opened in its own buffer and, unless a write replaces it,
        // sealed again in that buffer (`ElementCodec::open_in_place`); a record answered to a
        // client or cached is a detached copy (`Record::detached`), so it holds no buffer. Storage's answer is taken apart by the opening and
        // freed with it, so from then on the batch is held once, not as the answer, the records
        // and the write-back side by side. The write-back's bytes are those a new buffer would
        // get; only the sealing's CPU time depends (a copy of about a kilobyte per element
        // answered to a client) on which slots were real, like the settling before it, and
        // the write-back leaves at its fixed hold after the read whatever that time was.
        let mut to_open: Vec<_> = values
            .into_iter()
            .enumerate()
            .map(|(i, value)| {
                let binding = self.binding(flight.addrs[i], flight.old_generations[i]);
                let slot = Slot::from(flight.old_slots[i]);
                (binding, value, Some(slot))
            })
            .collect();
        let opened = self.codec.open_all(&mut to_open);
        drop(to_open);
        self.codec.reserve(flight.addrs.len());
        let mut to_seal = Vec::with_capacity(flight.addrs.len());
        for (i, opened) in opened.into_iter().enumerate() {
            let (addr, slot) = (flight.addrs[i], flight.old_slots[i]);
            let pending = self.pending.get_mut(&slot);
            let waiting = pending.and_then(|p| p.flight.take());
            let newer_write_queued = matches!(
                self.pending.get(&slot),
                Some(Pending {
                    queued: Some(Waiting::Write(_)),
                    ..
                })
            );
            let content = match (waiting, opened) {
                (Some(Waiting::Write(record)), _) => {
                    // The write replaces whatever the element held: a slot an earlier batch
                    // found corrupt (while this write waited) holds data again.
                    self.corrupt.remove(&slot);
                    written.push((slot, record.version));
                    Plaintext::Record(Slot::from(slot), record)
                }
                // A slot lost earlier holds an empty placeholder: it must not pass for data.
                (waiting, Ok(opened)) if !self.corrupt.contains(&slot) => {
                    if let Some(Waiting::Read(waiters)) = waiting {
                        // Detached: a view would keep the element's buffer, which may be a
                        // whole storage answer, alive as long as the cache keeps the record.
                        let record = opened.record.detached();
                        for waiter in waiters {
                            self.answer(waiter, slot, Reply::Value(record.clone()));
                        }
                        if !newer_write_queued && let Some(cache) = self.cache.as_mut() {
                            cache.put(slot, record);
                        }
                    }
                    // The slot keeps its record: the element is sealed again as it is.
                    Plaintext::Opened(opened.element)
                }
                (waiting, opened) => {
                    if let Err(error) = &opened {
                        self.io.stats.integrity_failures += 1;
                        tracing::error!(address = addr, %error, "storage returned a bad element");
                    }
                    // The cache, when it has the slot, holds its newest value: nothing is lost.
                    let known = self.cache.as_mut().and_then(|c| c.peek(&slot).cloned());
                    if let Some(Waiting::Read(waiters)) = waiting {
                        for waiter in waiters {
                            let reply = match &known {
                                Some(record) => Reply::Value(record.clone()),
                                None => Reply::Failed(SchemeError::Integrity(format!(
                                    "the element holding this key failed authentication \
                                     (storage address {addr}); the value is lost until the key \
                                     is written again"
                                ))),
                            };
                            self.answer(waiter, slot, reply);
                        }
                    }
                    let record = match known {
                        Some(record) => {
                            self.corrupt.remove(&slot);
                            record
                        }
                        None => {
                            self.corrupt.insert(slot);
                            Record::empty()
                        }
                    };
                    Plaintext::Record(Slot::from(slot), record)
                }
            };
            if let Some(p) = self.pending.get(&slot)
                && p.queued.is_none()
                && p.flight.is_none()
            {
                self.pending.remove(&slot);
            }
            let to = moves_to[i] as usize;
            let binding = self.binding(flight.addrs[to], flight.batch);
            to_seal.push((to, (self.codec.prepare(), binding, content)));
        }
        // Into write order: `moves_to` is a permutation, so every destination comes once.
        to_seal.sort_unstable_by_key(|(to, _)| *to);
        let mut to_seal: Vec<_> = to_seal.into_iter().map(|(_, seal)| seal).collect();
        let write_back = WriteBack {
            elements: self.codec.seal_all(&mut to_seal),
            addrs: flight.addrs,
            written,
            started: flight.started,
            sent: false,
        };
        if self.write_backs.push(write_back) {
            self.send_write_back(now);
        }
    }

    /// Hands the oldest write-back to storage, if it has not left yet. Sealing is done: what it
    /// carries, and when it leaves, no longer depends on which slots were real (only an overrun
    /// makes it late: sealed late, or the write-back before it answered late; see
    /// `crate::schedule`).
    fn send_write_back(&mut self, now: Instant) {
        let Some(write_back) = self.write_backs.next_to_send() else {
            return;
        };
        write_back.sent = true;
        let writes = write_back
            .addrs
            .iter()
            .map(|&addr| Addr::from(addr))
            .zip(write_back.elements.iter().cloned())
            .collect();
        let leaves = self.schedule.release_time(now, write_back.started);
        self.io
            .send_at(leaves, Purpose::BatchWrite, StorageOp::Write(writes));
    }
}

/// Every request is repeated after a failure: the algorithm's state waits for it.
impl RequestPurpose for Purpose {}

impl Algorithm for Cloak {
    type Purpose = Purpose;
    const NAME: &'static str = "cloak";

    crate::shell::io_in_field!();

    fn slots(&self) -> u64 {
        self.pos.len() as u64
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        let slot = crate::shell::slot32(&op);
        self.touch(slot);
        match op {
            Op::Read(_) => self.read(id, slot),
            Op::Write(_, record) => self.write(id, slot, record),
        }
    }

    fn answered(&mut self, now: Instant, purpose: Purpose, answer: Answer) {
        match purpose {
            Purpose::Fill(recovered) => {
                self.fill
                    .written(answer.arrived(), recovered, &mut self.io.out);
                self.pump_fill(Some(now));
            }
            Purpose::BatchRead => self.finish_read(now, answer.values()),
            Purpose::BatchWrite => {
                if let Some(write_back) = self.write_backs.answered() {
                    for (slot, version) in write_back.written {
                        self.io.out.release(Slot::from(slot), version);
                    }
                }
                self.io.stats.batches += 1;
                self.send_write_back(now);
            }
        }
        self.maybe_start_batch(now);
    }

    /// Storage failed a request: every client waiting to read learns now, whether its read is
    /// in this batch or queued for a later one (no batch starts until this request succeeds,
    /// which may take as long as a full disk or a dead server does). The request is repeated
    /// after a backoff (repeating it shows the server nothing new).
    fn failed(&mut self, _now: Instant, _purpose: &Purpose, error: &StorageError) {
        let reply = Reply::Failed(SchemeError::StorageUnavailable(error.clone()));
        for pending in self.pending.values_mut() {
            for waiting in [&mut pending.flight, &mut pending.queued] {
                if let Some(Waiting::Read(waiters)) = waiting {
                    self.io.out.reply_all(waiters.drain(..), reply.clone());
                }
            }
        }
    }

    fn timeout(&mut self, now: Instant) {
        self.maybe_start_batch(now);
    }

    fn deadline(&self) -> Option<Instant> {
        if self.stopped() {
            return None;
        }
        self.schedule.next_wake()
    }

    fn settle(&mut self) {
        self.settled = true;
    }

    /// A read takes the pending write's value, or joins the read waiting on its slot (queued, or
    /// in flight when none is queued), or finds the slot in the cache, which then holds its
    /// newest value: no read waits on a cached slot, since the cache takes a slot's value only
    /// from a write (which answers the reads waiting there) or from the batch answering them.
    /// So no read gets an older value than an op submitted before it.
    fn reads_join_earlier_ops(&self) -> bool {
        true
    }

    /// A read that misses waits for the next batch on the grid.
    fn answers_on_a_schedule(&self) -> bool {
        true
    }

    fn accepts(&self) -> bool {
        self.queued < self.max_pending
    }

    fn current_stats(&self, stats: &mut SchemeStats) {
        stats.filling = self.fill.filling();
        let pending_writes = self
            .pending
            .values()
            .flat_map(|p| [&p.queued, &p.flight])
            .filter(|w| matches!(w, Some(Waiting::Write(_))))
            .count() as u64;
        let writing_back = self.write_backs.unwritten() as u64;
        let filling = if self.filled() { 0 } else { self.recovered };
        stats.queued = self.queued as u64;
        stats.unwritten = pending_writes + writing_back + filling;
        stats.missed_batches = self.schedule.missed();
        stats.late_write_backs = self.schedule.late();
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        vec![
            ("budgets", self.budgets.to_string()),
            ("reuse_distance_sets", self.budgets.sets().to_string()),
            ("batch_size", self.budgets.batch_size().to_string()),
            (
                "batch_interval_ms",
                format!("{}", self.schedule.interval().as_secs_f64() * 1e3),
            ),
            (
                "write_back_after_ms",
                format!(
                    "{}",
                    self.schedule.hold_time().unwrap_or_default().as_secs_f64() * 1e3
                ),
            ),
            ("elements", self.pos.len().to_string()),
            ("element_bytes", self.codec.element_len().to_string()),
            (
                "cache_size",
                self.cache.as_ref().map_or(0, |c| c.cap().get()).to_string(),
            ),
            ("max_pending", self.max_pending.to_string()),
            ("storage_filled", self.filled().to_string()),
            ("next_batch_id", self.batch.to_string()),
        ]
    }
}
