//! Client ops: answered as early as linearizability allows, handed to batches through a queue of
//! distinct slots.
//!
//! The newest value of a slot is, in order: a pending write, the cache, storage. A read is
//! answered at once from the first two; otherwise it waits for the batch that reads the slot
//! (or for a write, which answers it). Until a restart's fill is done, storage's part is the
//! records the restart recovered, which wait on local disk for the fill: once the fill is
//! under way a read is answered from them at once, with no storage request, and the reads
//! that waited through Waffle's own scan are answered as it starts ([`super::startup`] says
//! why that shows the server nothing, and why not during the scan). A write is acknowledged
//! once journaled and waits in the queue for a batch to put it in the cache. Every op queues its slot once, so a batch takes up
//! to `R` distinct slots in arrival order, and with them at most `R` touches of the LRU order,
//! which Theorem 7.2's β relies on.

use std::mem;
use std::time::Instant;

use cloak_core::{Op, OpId, Record, Reply, SchemeError};

use super::params::BatchTiming;
use super::{Stage, Waffle};

impl Waffle {
    pub(super) fn submit_op(&mut self, now: Instant, id: OpId, op: Op) {
        if self.stage == Stage::Drained {
            let error = SchemeError::Overloaded(
                "the proxy is shutting down and has written its cache to storage".into(),
            );
            self.io.out.reply(id, Reply::Failed(error));
            return;
        }
        let slot = crate::shell::slot32(&op);
        match op {
            Op::Read(_) => self.read(id, slot),
            Op::Write(_, record) => self.write(id, slot, record),
        }
        if self.params.timing == BatchTiming::Eager {
            self.maybe_start_batch(now);
        }
    }

    fn read(&mut self, id: OpId, slot: u32) {
        let newest = self
            .pending
            .get(&slot)
            .and_then(|p| p.write.clone())
            .or_else(|| {
                let cached = self.cache.peek(&slot)?;
                Some(cached.clone())
            });
        if let Some(record) = newest {
            self.io.stats.cache_hits += 1;
            let reply = match self.corrupt.contains(&slot) {
                true => Reply::Failed(lost(slot)),
                false => Reply::Value(record),
            };
            self.answer(id, slot, reply);
            self.enqueue_if_running(slot);
            return;
        }
        self.io.stats.cache_misses += 1;
        if self.corrupt.contains(&slot) {
            self.io.out.reply(id, Reply::Failed(lost(slot)));
            return;
        }
        if self.stage == Stage::Filling {
            self.answer_from_recovered(slot, [id]);
            return;
        }
        if let Some(error) = self.io.unavailable() {
            self.io.out.reply(id, Reply::Failed(error));
            return;
        }
        let readers = &mut self.pending.entry(slot).or_default().readers;
        if !readers.is_empty() {
            // The slot is fetched once for every reader waiting on it.
            self.io.stats.joined_reads += 1;
        }
        readers.push(id);
        // During Waffle's own scan the read waits, unqueued, to be answered as the fill starts.
        self.enqueue_if_running(slot);
    }

    fn write(&mut self, id: OpId, slot: u32, record: Record) {
        self.corrupt.remove(&slot);
        self.io.out.keep(u64::from(slot), record.clone());
        let pending = self.pending.entry(slot).or_default();
        let readers = mem::take(&mut pending.readers);
        pending.write = Some(record.clone());
        self.enqueue(slot);
        for reader in readers {
            self.answer(reader, slot, Reply::Value(record.clone()));
        }
        self.answer(id, slot, Reply::Written);
    }

    /// Puts `slot` in the queue for the next batches, once, for a read answered without one,
    /// so the batch brings it into the cache, unless batches have not started: nothing takes
    /// from the queue before then, and a queue full of such reads (the scheme accepts no op
    /// while it holds `max_pending` slots) would stop every client until the fill's end. The
    /// read then leaves the slot where it is, as a read answered by a write does.
    fn enqueue_if_running(&mut self, slot: u32) {
        if self.stage == Stage::Running {
            self.enqueue(slot);
        }
    }

    /// Answers every read waiting through Waffle's own scan from the recovered records, once
    /// the fill is under way.
    pub(super) fn answer_waiting_from_recovered(&mut self) {
        let waiting: Vec<u32> = (self.pending.iter())
            .filter(|(_, pending)| !pending.readers.is_empty())
            .map(|(&slot, _)| slot)
            .collect();
        for slot in waiting {
            let readers = self.take_readers(slot);
            self.answer_from_recovered(slot, readers);
        }
    }

    /// Answers `readers` of `slot` from its recovered record, read once for all of them.
    fn answer_from_recovered(&mut self, slot: u32, readers: impl IntoIterator<Item = OpId>) {
        let reply = self.startup.read_recovered(slot);
        for reader in readers {
            self.io.stats.recovered_reads += 1;
            self.answer(reader, slot, reply.clone());
        }
    }

    /// Puts `slot` in the queue for the next batches, once.
    fn enqueue(&mut self, slot: u32) {
        let pending = self.pending.entry(slot).or_default();
        if !pending.queued {
            pending.queued = true;
            self.queue.push_back(slot);
        }
    }

    /// The reads waiting for `slot`'s value from storage.
    pub(super) fn take_readers(&mut self, slot: u32) -> Vec<OpId> {
        let readers = match self.pending.get_mut(&slot) {
            Some(pending) => mem::take(&mut pending.readers),
            None => return Vec::new(),
        };
        self.forget_if_idle(slot);
        readers
    }

    /// Drops `slot`'s entry once nothing waits on it.
    pub(super) fn forget_if_idle(&mut self, slot: u32) {
        if let Some(p) = self.pending.get(&slot)
            && !p.queued
            && p.readers.is_empty()
            && p.write.is_none()
        {
            self.pending.remove(&slot);
        }
    }
}

fn lost(slot: u32) -> SchemeError {
    SchemeError::Integrity(format!(
        "the element holding slot {slot} failed authentication earlier; the value is lost until \
         the key is written again"
    ))
}
