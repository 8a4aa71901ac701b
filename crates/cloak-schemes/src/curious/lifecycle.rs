//! A CURIOUS store's life at the edges: the initial fill, which writes every bucket once with
//! the recovered records placed under a fresh random layout, and the drain at shutdown, which
//! writes the whole eviction cache to the drain area so storage alone holds every block.
//!
//! Both write every bucket of their area whatever the data, so they show the server only that
//! the proxy started or stopped; a drain whose cache is past the drain area's room makes dummy
//! accesses first (see [`DrainShrink`]).

use std::time::Instant;

use cloak_core::recovery::leak_demo;
use cloak_core::{Addr, Record, RecoveredRecords, Slot, StorageOp};
use cloak_crypto::Binding;

use super::cache::Assignment;
use super::position::Place;
use super::{Curious, Gate, Purpose};
use crate::shell::recovered::take_for_fill;

impl Curious {
    /// Places recovered records in the trees the fill will write, each under a fresh random
    /// subORAM and leaf; the few that fit nowhere go to the cache, and the fill waits until the
    /// journal holds them (the fill overwrites where the previous run kept them). Only the slots
    /// are placed: the values stay in recovery's spool until the chunk holding their bucket is
    /// sealed ([`Curious::pump_fill`]), so a restart never holds the store's values at once.
    pub(super) fn stage_recovered(&mut self) {
        let z = self.config.bucket_size;
        // Blocks placed in each bucket, while placing: a byte a bucket (`z` is far below 256).
        let mut fullness = vec![0u8; self.generations.len()];
        let mut staged = Vec::new();
        let mut overflow = Vec::new();
        let recovered: Vec<(u32, u64)> = (self.initial.iter())
            .filter_map(|(slot, version, _)| Some((u32::try_from(slot).ok()?, version)))
            .filter(|&(slot, version)| (slot as usize) < self.positions.len() && version > 0)
            .collect();
        for (slot, _) in recovered {
            let (sub, leaf) = self.random_position();
            let tree = &self.layout.tree;
            let free = (0..=tree.depth()).rev().find_map(|level| {
                let address = u64::try_from(self.layout.address(sub, tree.bucket(leaf, level)))
                    .expect("addresses are below the element count");
                let full = &mut fullness[address as usize];
                (usize::from(*full) < z).then(|| {
                    *full += 1;
                    address
                })
            });
            // A block whose record cannot be read back stays placed, and so missing from its
            // path: reads of it fail until a client writes it.
            self.positions.set(slot, Place::Stored { sub, leaf });
            match free {
                Some(address) => staged.push((address, slot)),
                None => overflow.push((slot, sub, leaf)),
            }
        }
        staged.sort_unstable();
        self.recovered = staged.len() as u64;
        self.staged = staged;
        let slots: Vec<u32> = overflow.iter().map(|&(slot, _, _)| slot).collect();
        let records = self.read_recovered(&slots, 0);
        let mut cached = Vec::new();
        for ((slot, sub, leaf), record) in overflow.into_iter().zip(records) {
            if self.fill_lost.contains(&slot) {
                continue;
            }
            let to = Assignment {
                sub,
                leaf,
                drawn: 0,
            };
            self.cache.insert(slot, record, to);
            self.positions.set(slot, Place::Cached);
            cached.push(slot);
        }
        self.fill_gate = Some(cached.clone());
        self.wait_for_journal(Gate::Fill, cached);
    }

    /// The recovered records of `slots`, read back from the spool after at least `reads`
    /// reads of it; those that cannot be read back go into `fill_lost` (see
    /// [`take_for_fill`]).
    fn read_recovered(&mut self, slots: &[u32], reads: usize) -> Vec<Record> {
        take_for_fill(
            &mut self.initial,
            slots,
            reads,
            &mut self.fill_lost,
            &mut self.io.stats.fill_losses,
        )
    }

    /// Keeps the fill's window of write requests full; once all are answered, accesses start.
    pub(super) fn pump_fill(&mut self, now: Option<Instant>) {
        if self.fill_gate.is_some() {
            return;
        }
        while let Some(chunk) = self.fill.next_chunk() {
            let first = self.staged_taken;
            while (self.staged.get(self.staged_taken)).is_some_and(|&(at, _)| at < chunk.end) {
                self.staged_taken += 1;
            }
            let (addresses, slots): (Vec<u64>, Vec<u32>) = self.staged[first..self.staged_taken]
                .iter()
                .copied()
                .unzip();
            // As many elements read back as the request's buckets could hold blocks, whatever
            // they hold: each block may come from an element of its own, so fewer would let a
            // chunk of many blocks read more than one of few (see `take_for_fill`). The fill's
            // clock gives that many reads their time (`FillShape::reads_per_element`).
            let reads = self.fill.reads(&chunk);
            let records = self.read_recovered(&slots, reads);
            let mut blocks = addresses
                .into_iter()
                .zip(slots)
                .zip(records)
                .filter(|((_, slot), _)| !self.fill_lost.contains(slot))
                .peekable();
            let mut recovered = Vec::new();
            let mut writes = Vec::with_capacity((chunk.end - chunk.start) as usize);
            for address in chunk {
                let mut bucket = Vec::new();
                while let Some(((_, slot), record)) = blocks.next_if(|((at, _), _)| *at == address)
                {
                    recovered.push((slot, record.version));
                    bucket.push((Slot::from(slot), record));
                }
                // Public: every bucket of the fill shows the run's first generation.
                let binding = Binding {
                    address: Addr::from(address),
                    generation: self.generations[address as usize],
                };
                let sealed = self
                    .codec
                    .seal(binding, bucket.iter().map(|(slot, r)| (*slot, r)));
                writes.push((binding.address, sealed));
            }
            leak_demo::slow_live_records(recovered.len());
            self.fill.send(
                &mut self.io,
                Purpose::Fill(recovered),
                StorageOp::Write(writes),
            );
        }
        if now.is_some() && !self.filled && self.fill.is_done() {
            let buckets = self.layout.elements();
            tracing::info!(buckets, "storage filled, accesses start");
            self.filled = true;
            // Every recovered record is in storage: the table would keep its peak size.
            self.initial = RecoveredRecords::default();
            self.staged = Vec::new();
            for sub in self.locks.waiting_subs() {
                self.start_next(sub);
            }
            self.maybe_drain();
        }
    }

    /// While draining, once no access is in flight, writes the whole cache to the drain area,
    /// after dummy accesses if it does not fit there (see [`DrainShrink`]).
    pub(super) fn maybe_drain(&mut self) {
        if !self.draining
            || !self.filled
            || self.drain_in_flight
            || !self.accesses.is_empty()
            || self.io.repeating()
            || self.unwritten() == 0
            || self.drain_shrink.gave_up
        {
            return;
        }
        let z = self.config.bucket_size;
        let room = self.layout.drain_buckets as usize * z;
        let shrink = &mut self.drain_shrink;
        if self.cache.len() < shrink.last {
            shrink.stalled = 0;
        }
        shrink.last = self.cache.len();
        if self.cache.len() > room {
            if shrink.stalled < 4 * self.config.partitions {
                // A round of them at once, as many as would evict the excess if each evicted
                // its full share (evictions are at least 2, checked in `params`).
                let excess = self.cache.len() - room;
                let round = excess
                    .div_ceil(self.config.evictions)
                    .min(self.config.max_in_flight);
                shrink.stalled = shrink
                    .stalled
                    .saturating_add(u32::try_from(round).unwrap_or(u32::MAX));
                for _ in 0..round {
                    self.io.stats.dummy_accesses += 1;
                    let (sub, leaf) = self.random_position();
                    self.start_access(sub, leaf, None, None);
                }
                return;
            }
            // Written once: writing the same blocks again would not save the others.
            shrink.gave_up = true;
            tracing::error!(
                cached = self.cache.len(),
                room,
                "the eviction cache is larger than the drain area; the rest stays in the journal"
            );
        }
        let blocks: Vec<(u32, Record)> = self
            .cache
            .iter()
            .take(room)
            .map(|(slot, entry)| (slot, entry.record.clone()))
            .collect();
        let saved = blocks.iter().map(|(s, r)| (*s, r.version)).collect();
        // Public: the drain is one more write after every access's (see `finish_read`).
        let generation = self.generation();
        let mut chunks = blocks.chunks(z);
        let mut writes = Vec::new();
        for address in self.layout.drain_area() {
            self.generations[address as usize] = generation;
            let binding = Binding {
                address,
                generation,
            };
            let bucket = chunks.next().unwrap_or_default();
            let sealed = self.codec.seal(
                binding,
                bucket.iter().map(|(slot, r)| (Slot::from(*slot), r)),
            );
            writes.push((address, sealed));
        }
        tracing::info!(
            blocks = blocks.len(),
            "writing the eviction cache to the drain area"
        );
        self.drain_in_flight = true;
        self.io
            .send(Purpose::Drain(saved), StorageOp::Write(writes));
    }
}

/// A drain's dummy accesses. Writes are kept when the cache is full (see `Curious::submit`), so
/// it can hold more than the drain area takes; the drain then makes dummy accesses first, in
/// rounds of as many as would evict the excess (at most the accesses allowed in flight), whose
/// evictions take blocks out of it. Their subORAMs are drawn independently, so running them
/// together shows nothing their number does not. The server sees more accesses before the
/// drain, and their number shows roughly how far past the drain area's room the cache was,
/// which can follow the workload's locality (ops on cached keys add no block); with the default
/// limit the cache stays far below that room. A cache that stops shrinking (paths too full to
/// take its blocks) gets four accesses a subORAM without progress; then the drain writes what
/// fits, once, and the rest stays in the journal.
#[derive(Debug)]
pub(super) struct DrainShrink {
    /// The cache's size when the last one was made.
    last: usize,
    /// Made since a round last left the cache smaller.
    stalled: u32,
    /// It stopped shrinking and the drain wrote what fits: nothing more is written.
    gave_up: bool,
}

impl Default for DrainShrink {
    fn default() -> Self {
        Self {
            last: usize::MAX,
            stalled: 0,
            gave_up: false,
        }
    }
}
