//! Starting a run (paper §6.1), and deleting from storage only what the journal covers.
//!
//! Initialisation: `C` random slots go into the cache, every other slot and every dummy is
//! written to storage under its timestamp-0 label, in a random order. Before that, a scan lists
//! the elements an earlier run of this store left (a restart after a crash: recovery has read
//! them already); once the fill is complete and the journal holds the recovered records the
//! cache took, they are deleted. The server sees a scan, a write of `N − C + D` elements and a
//! delete of everything older, whatever the workload was.
//!
//! Deletes in general ([`Waffle::delete_once_kept`]): a label's element may only leave storage
//! once the journal holds the record it carried, which from then on lives only in the cache.

use std::mem;
use std::time::Instant;

use bytes::Bytes;
use cloak_core::{
    Addr, ElementCodec, JournalId, NO_SLOT, Record, RecoveredRecords, Reply, StorageOp,
};
use hashbrown::{HashMap, HashSet};
use lru::LruCache;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha20Rng;

use super::labels::{Labels, Object};
use super::params::Params;
use super::trees::{DummyTree, RealTree};
use super::{Deletion, Purpose, Stage, Waffle};
use crate::Start;
use crate::schedule::Schedule;
use crate::shell::Io;
use crate::shell::fill::{Fill, FillClock, FillShape, Pace};
use crate::shell::recovered::{read_for_client, take_for_fill};

/// Elements per scan request.
const SCAN_CHUNK: u32 = 4096;
/// Elements per fill request.
const FILL_CHUNK: u64 = 1024;
/// Labels per delete request.
const DELETE_CHUNK: usize = 4096;

pub(super) struct Startup {
    /// Recovered records of slots storage will hold, until the fill writes them.
    initial: RecoveredRecords,
    /// Cached slots holding recovered records: the journal must have them before the earlier
    /// run's elements go.
    cached_recovered: Vec<u32>,
    /// Elements an earlier run left (they open with this store's key).
    stale: Vec<Addr>,
    /// Objects the fill writes, in a random order, and how far it got.
    order: Vec<Object>,
    fill: Fill,
    /// The restart's public clock: the scan leaves on it, and the fill's pace starts from the
    /// scan's end (see [`crate::shell::fill`]).
    clock: Option<FillClock>,
    shape: FillShape,
}

impl Startup {
    pub(super) fn begin(
        params: Params,
        alpha: u64,
        beta: u64,
        codec: ElementCodec,
        labels: Labels,
        mut rng: ChaCha20Rng,
        start: Start,
    ) -> Waffle {
        let objects = params.objects as usize;
        let mut initial = start.records;
        let mut corrupt = HashSet::new();

        let mut cached: Vec<u32> = rand::seq::index::sample(&mut rng, objects, params.cache)
            .into_iter()
            .map(|i| i as u32)
            .collect();
        cached.shuffle(&mut rng);
        let mut cache = LruCache::unbounded();
        let mut cached_recovered = Vec::new();
        let mut fill_losses = 0;
        // As many reads whichever cached slots hold records: the scan waits for these.
        let records = take_for_fill(
            &mut initial,
            &cached,
            cached.len(),
            &mut corrupt,
            &mut fill_losses,
        );
        for (slot, record) in cached.into_iter().zip(records) {
            if record.version > 0 {
                cached_recovered.push(slot);
            }
            cache.put(slot, record);
        }

        let mut server = RealTree::default();
        let mut order = Vec::with_capacity(objects - params.cache + params.dummies);
        for slot in 0..objects as u32 {
            if !cache.contains(&slot) {
                server.insert(0, slot);
                order.push(Object::Real(slot));
            }
        }
        order.extend((0..params.dummies as u32).map(Object::Dummy));
        order.shuffle(&mut rng);
        let dummies = DummyTree::new(params.dummies, params.fake_dummy, alpha, &mut rng);

        let schedule = Schedule::new(params.batch_interval, params.write_back_hold);
        let shape = Fill::shape(
            objects as u64,
            order.len() as u64,
            codec.element_len(),
            FILL_CHUNK,
        );
        let clock = start.fill_clock;
        let mut waffle = Waffle {
            params,
            alpha,
            beta,
            codec,
            labels,
            rng,
            ts: vec![0; objects],
            written: vec![0; objects],
            server,
            cache,
            dummies,
            corrupt,
            pending: HashMap::new(),
            queue: Default::default(),
            stage: Stage::Scanning,
            startup: Startup {
                initial,
                cached_recovered,
                stale: Vec::new(),
                // Paced from the scan's end on (see `Waffle::scanned`).
                fill: Fill::new(order.len() as u64, FILL_CHUNK, Pace::unpaced()),
                order,
                clock,
                shape,
            },
            batch: 0,
            flight: None,
            schedule,
            draining: false,
            deletions: Vec::new(),
            rekeep: Vec::new(),
            unstored: 0,
            io: Io::default(),
        };
        waffle.io.stats.fill_losses = fill_losses;
        let scan = StorageOp::Scan {
            after: None,
            limit: SCAN_CHUNK,
        };
        // After a restart the scan is the first request the server sees after recovery's: it
        // leaves at the clock's public instant, so the pause before it does not tell how long
        // recovery's work (and the cached records' read-back above) took.
        match clock {
            Some(clock) => waffle
                .io
                .send_at(clock.first_request(shape), Purpose::Scan, scan),
            None => waffle.io.send(Purpose::Scan, scan),
        }
        waffle
    }
}

impl Startup {
    /// `slot`'s recovered record, for a client's read before the fill is done (the slot is not
    /// cached: the cached slots' records went to the cache when the scheme was built). It is
    /// read from recovery's spool on local disk, where the fill reads it too: no storage request,
    /// so the server sees nothing of it. Storage may not hold it anywhere until the fill is done
    /// (the fill overwrites the store), so before this such a read waited for the whole fill.
    /// Its cost is on the thread that prepares the fill's requests, which leave on the fill's
    /// public clock unless a flood of reads makes one late (counted and logged, see
    /// [`crate::shell::fill`]).
    ///
    /// Not during Waffle's own scan of storage: its pages go out as the page before is answered,
    /// off any clock, so work done between them (a flood of such reads) would show in their
    /// gaps. Reads wait through the scan and are answered as the fill starts.
    pub(super) fn read_recovered(&mut self, slot: u32) -> Reply {
        match read_for_client(&mut self.initial, slot) {
            Ok(record) => Reply::Value(record),
            Err(error) => Reply::Failed(error),
        }
    }

    /// While the fill runs (or the scan before it): elements written, of all it writes.
    pub(super) fn filling(&self) -> Option<(u64, u64)> {
        self.fill.filling()
    }
}

impl Waffle {
    /// A page of the scan: note this store's elements, then scan on or start the fill.
    pub(super) fn scanned(&mut self, now: Instant, arrived: Instant, entries: Vec<(Addr, Bytes)>) {
        let complete = entries.len() < SCAN_CHUNK as usize;
        let last = entries.last().map(|(address, _)| *address);
        for (address, element) in entries {
            // Anything else in the backend is not ours to delete.
            if self.codec.open_found(address, &element).is_ok() {
                self.startup.stale.push(address);
            }
        }
        if complete {
            self.stage = Stage::Filling;
            let shape = self.startup.shape;
            // From the last page's arrival, which the server caused, not from when the proxy got
            // to it (see `Scheme::handle_storage`).
            let pace = self
                .startup
                .clock
                .map(|clock| clock.pace_after(arrived, shape));
            self.startup
                .fill
                .set_pace(pace.unwrap_or_else(Pace::unpaced));
            self.pump_fill(now);
            // The fill's first requests are prepared: from here on they leave on its clock.
            self.answer_waiting_from_recovered();
        } else {
            let op = StorageOp::Scan {
                after: last,
                limit: SCAN_CHUNK,
            };
            self.io.send(Purpose::Scan, op);
        }
    }

    /// Keeps the fill's window of write requests full; once all are answered, batches start.
    fn pump_fill(&mut self, now: Instant) {
        while let Some(chunk) = self.startup.fill.next_chunk() {
            let objects = &self.startup.order[chunk.start as usize..chunk.end as usize];
            let reals: Vec<u32> = objects
                .iter()
                .filter_map(|object| match object {
                    Object::Real(slot) => Some(*slot),
                    Object::Dummy(_) => None,
                })
                .collect();
            // As many reads as the request has elements, dummies too: how many of them are
            // dummies is as secret as which.
            let mut taken = take_for_fill(
                &mut self.startup.initial,
                &reals,
                objects.len(),
                &mut self.corrupt,
                &mut self.io.stats.fill_losses,
            )
            .into_iter();
            let mut recovered = Vec::new();
            let mut writes = Vec::with_capacity(objects.len());
            for &object in objects {
                let (slot, record) = match object {
                    Object::Real(slot) => (u64::from(slot), taken.next().unwrap_or_default()),
                    Object::Dummy(_) => (NO_SLOT, Record::empty()),
                };
                if record.version > 0 {
                    recovered.push((slot as u32, record.version));
                }
                let binding = self.labels.binding(object, 0, 0);
                writes.push((binding.address, self.codec.seal(binding, slot, &record)));
            }
            writes.sort_unstable_by_key(|(address, _)| *address);
            self.startup.fill.send(
                &mut self.io,
                Purpose::Fill(recovered),
                StorageOp::Write(writes),
            );
        }
        if self.startup.fill.is_done() {
            self.fill_done(now);
        }
    }

    pub(super) fn filled_chunk(
        &mut self,
        now: Instant,
        arrived: Instant,
        recovered: Vec<(u32, u64)>,
    ) {
        self.startup
            .fill
            .written(arrived, recovered, &mut self.io.out);
        self.pump_fill(now);
    }

    fn fill_done(&mut self, now: Instant) {
        tracing::info!(
            elements = self.startup.order.len(),
            cached = self.cache.len(),
            earlier = self.startup.stale.len(),
            "storage filled, batches start"
        );
        self.startup.order = Vec::new();
        // The fill read every record; the table would keep a restart's peak.
        self.startup.initial = RecoveredRecords::default();
        self.stage = Stage::Running;
        self.schedule.start(now);
        let slots = mem::take(&mut self.startup.cached_recovered);
        let stale = mem::take(&mut self.startup.stale);
        self.delete_once_kept(slots, stale);
    }

    /// Deletes `labels` from storage once the journal holds the cached records of `slots`.
    ///
    /// The deletes wait for a journal commit even when nothing needs keeping: if they went out
    /// at once then, the pause between a batch's write and its deletes would tell the server
    /// whether the batch read any object holding data, which real requests always do and fake
    /// reads of a sparse store mostly do not. Nothing to keep journals a [`NO_SLOT`] marker,
    /// which recovery ignores.
    pub(super) fn delete_once_kept(&mut self, slots: Vec<u32>, labels: Vec<Addr>) {
        let mut journal: Option<JournalId> = None;
        for &slot in &slots {
            if let Some(record) = self.cache.peek(&slot)
                && record.version > 0
            {
                journal = Some(self.io.out.keep(u64::from(slot), record.clone()));
            }
        }
        let journal = journal.unwrap_or_else(|| self.io.out.keep(NO_SLOT, Record::empty()));
        self.deletions.push(Deletion {
            journal,
            slots,
            labels,
        });
    }

    fn send_deletes(&mut self, mut labels: Vec<Addr>) {
        labels.sort_unstable();
        for chunk in labels.chunks(DELETE_CHUNK) {
            self.io
                .send(Purpose::Delete, StorageOp::Delete(chunk.to_vec()));
        }
    }

    /// A journal request finished: deletions it covered go out, or wait to be kept again.
    pub(super) fn kept(&mut self, id: JournalId, result: Result<(), String>) {
        let (done, waiting): (Vec<Deletion>, Vec<Deletion>) = mem::take(&mut self.deletions)
            .into_iter()
            .partition(|d| d.journal == id);
        self.deletions = waiting;
        for deletion in done {
            match &result {
                Ok(()) => self.send_deletes(deletion.labels),
                Err(error) => {
                    tracing::warn!(
                        %error,
                        records = deletion.slots.len(),
                        "the journal could not keep cached records; their storage copies stay \
                         until it can"
                    );
                    self.rekeep.push(deletion);
                }
            }
        }
    }

    /// Tries again the deletions whose journal request failed.
    pub(super) fn retry_rekeeps(&mut self) {
        for deletion in mem::take(&mut self.rekeep) {
            self.delete_once_kept(deletion.slots, deletion.labels);
        }
    }
}
