//! One batch of Algorithm 1: the read phase (lines 2–30) and the write phase (lines 31–46).
//!
//! Read phase, batch `t`: up to `R` slots clients touched are taken from the queue; a pending
//! write enters the cache (an uncached slot's old copy is read and dropped), a cached slot is
//! touched, an uncached one is read. Then `f_D` dummies and `f_R = B − r − f_D` least recently
//! accessed real objects in storage. Every object read gets timestamp `t`. The `B` labels go out
//! in one read request, in ascending order (labels are pseudorandom, so the order says nothing).
//!
//! Write phase: for every real object read, the least recently used cached object is evicted
//! and written back under its fresh label, and the object read enters the cache (keeping the
//! cache's newer value if a client wrote it); every dummy is written back under its fresh label.
//! `B` writes in one request, ascending, every element carrying batch `t` as its clear
//! generation whether it is an evicted object or a dummy (see [`super::labels`]). The `B` labels
//! read are deleted once the journal holds the records that now live only in the cache.
//!
//! Batches run one at a time: the next one may pick an object the last one wrote back, so it
//! must not read before that write is done. The only exception is [`Waffle::flush`], the last
//! write-back at shutdown.

use std::time::Instant;

use bytes::Bytes;
use cloak_core::{Addr, NO_SLOT, Record, Reply, SchemeError, StorageOp};

use super::labels::Object;
use super::params::BatchTiming;
use super::{Flight, FlightRead, Purpose, Stage, Waffle};

impl Waffle {
    /// Starts a batch if one is due on the schedule's grid (see [`crate::schedule`]: a grid
    /// point the previous batch is still busy at is skipped) or, with eager timing, if `R` slots
    /// wait.
    pub(super) fn maybe_start_batch(&mut self, now: Instant) {
        if self.stage != Stage::Running {
            return;
        }
        let busy = self.flight.is_some() || self.io.repeating();
        let full = self.params.timing == BatchTiming::Eager && self.queue.len() >= self.params.real;
        let leaves = if full && !busy {
            Some(self.schedule.restart(now))
        } else {
            self.schedule.due(now, busy)
        };
        let Some(leaves) = leaves else {
            return;
        };
        if self.draining && self.queue.is_empty() {
            self.flush();
            return;
        }
        self.retry_rekeeps();
        // The hold counts from when the read really leaves (see `crate::schedule`).
        self.start_batch(leaves);
    }

    fn start_batch(&mut self, started: Instant) {
        let t = self.batch + 1;
        self.batch = t;
        let mut reads = Vec::with_capacity(self.params.batch);

        // Client requests: up to R distinct slots, deduplicated by the queue.
        for _ in 0..self.params.real {
            let Some(slot) = self.queue.pop_front() else {
                break;
            };
            let write = match self.pending.get_mut(&slot) {
                Some(pending) => {
                    pending.queued = false;
                    pending.write.take()
                }
                None => None,
            };
            self.forget_if_idle(slot);
            let cached = self.cache.contains(&slot);
            match write {
                Some(record) => {
                    // Line 14: the written value enters the cache now; an uncached object's old
                    // copy is still read (and dropped), so the object leaves storage as usual.
                    self.cache.put(slot, record);
                    if !cached {
                        reads.push(self.take_real(slot, t));
                    }
                }
                None if cached => {
                    self.cache.promote(&slot);
                }
                None => reads.push(self.take_real(slot, t)),
            }
        }
        let requested = reads.len();

        // A dummy is rewritten by the batch that reads it, so its label's timestamp is also
        // the batch that wrote it.
        for (d, ts) in self.dummies.pick(t, &mut self.rng) {
            reads.push(self.read_of(Object::Dummy(d), ts, ts));
        }
        let fakes = self.params.batch - requested - self.params.fake_dummy;
        for _ in 0..fakes {
            let (ts, slot) = self
                .server
                .pop_oldest()
                .expect("storage holds N − C ≥ B − f_D real objects (checked at build)");
            self.ts[slot as usize] = t;
            reads.push(self.read_of(Object::Real(slot), ts, self.written[slot as usize]));
        }
        debug_assert_eq!(reads.len(), self.params.batch);

        reads.sort_unstable_by_key(|r| r.label);
        self.io.stats.real_accesses += requested as u64;
        self.io.stats.dummy_accesses += (reads.len() - requested) as u64;
        let op = StorageOp::Read(reads.iter().map(|r| r.label).collect());
        self.flight = Some(Flight {
            batch: t,
            started,
            reads,
        });
        self.io.send_at(started, Purpose::BatchRead, op);
    }

    /// Takes a real object out of storage's tree for batch `t`.
    fn take_real(&mut self, slot: u32, t: u64) -> FlightRead {
        let ts = self.ts[slot as usize];
        let held = self.server.remove(ts, slot);
        debug_assert!(held, "slot {slot} is neither cached nor in storage");
        self.ts[slot as usize] = t;
        self.read_of(Object::Real(slot), ts, self.written[slot as usize])
    }

    fn read_of(&self, object: Object, ts: u64, written: u64) -> FlightRead {
        FlightRead {
            label: self.labels.label(object, ts),
            object,
            ts,
            written,
        }
    }

    /// The write phase: the server answered the batch's reads. The write-back is sealed now and
    /// held for its time on the schedule (sent now if that has passed).
    pub(super) fn finish_read(&mut self, now: Instant, values: Vec<Option<Bytes>>) {
        let Some(flight) = self.flight.take() else {
            tracing::error!("a batch read answered with no batch in flight");
            return;
        };
        let t = flight.batch;
        let mut writes: Vec<(Addr, Bytes)> = Vec::with_capacity(values.len());
        let mut written = Vec::new();
        let mut cached_now = Vec::new();
        // Sealed in read order, written in address order: one epoch for the whole write, so
        // an epoch change cannot split it by read position (see `Sealer::reserve`). Each read
        // seals at most one element (a dummy's fresh copy, or the evicted victim's).
        self.codec.reserve(values.len());
        for (read, value) in flight.reads.iter().zip(values) {
            let binding = self.labels.binding(read.object, read.ts, read.written);
            match read.object {
                Object::Dummy(_) => {
                    if let Err(error) = self.codec.open(binding, value.as_ref(), Some(NO_SLOT)) {
                        self.io.stats.integrity_failures += 1;
                        tracing::error!(label = read.label, %error, "storage returned a bad dummy");
                    }
                    let fresh = self.labels.binding(read.object, t, t);
                    let element = self.codec.seal(fresh, NO_SLOT, &Record::empty());
                    writes.push((fresh.address, element));
                }
                Object::Real(slot) => {
                    let opened = self
                        .codec
                        .open(binding, value.as_ref(), Some(u64::from(slot)))
                        .map(|(_, record)| record);
                    // Line 40: make room first. The victim is never an object this batch
                    // touched: the cache holds at least B − f_D + R (checked at build).
                    if let Some((victim, record)) = self.cache.pop_lru() {
                        debug_assert_ne!(victim, slot);
                        writes.push(self.store_real(victim, &record, t));
                        if record.version > 0 {
                            written.push((victim, record.version));
                        }
                    }
                    self.take_in(slot, opened, read.label);
                    cached_now.push(slot);
                }
            }
        }
        writes.sort_unstable_by_key(|(address, _)| *address);
        self.unstored += written.len();
        let leaves = self.schedule.release_time(now, flight.started);
        self.io.send_at(
            leaves,
            Purpose::BatchWrite(written),
            StorageOp::Write(writes),
        );
        let labels = flight.reads.iter().map(|r| r.label).collect();
        self.delete_once_kept(cached_now, labels);
        self.flight = Some(flight);
    }

    /// Seals a cached real object for the write of batch `batch`, under the label of its last
    /// access, and puts it back in storage's tree.
    fn store_real(&mut self, slot: u32, record: &Record, batch: u64) -> (Addr, Bytes) {
        let ts = self.ts[slot as usize];
        // The clear generation is `batch`, the same for every element of this write; `ts` is
        // secret (it tells an evicted object from a dummy) and only the pseudorandom label
        // depends on it.
        let fresh = self.labels.binding(Object::Real(slot), ts, batch);
        self.written[slot as usize] = batch;
        self.server.insert(ts, slot);
        (fresh.address, self.codec.seal(fresh, slot.into(), record))
    }

    /// A real object read from storage enters the cache (lines 33–43).
    fn take_in(
        &mut self,
        slot: u32,
        opened: Result<Record, cloak_core::ElementError>,
        label: Addr,
    ) {
        if self.cache.contains(&slot) {
            // A client wrote it this batch: the cache is newer than storage's copy.
            if let Err(error) = opened {
                self.io.stats.integrity_failures += 1;
                tracing::error!(label, %error, "storage returned a bad element (overwritten)");
            }
            self.cache.promote(&slot);
            return;
        }
        let record = match opened {
            // A slot lost earlier holds an empty placeholder: it must not pass for data.
            Ok(record) if !self.corrupt.contains(&slot) => record,
            Ok(_) => Record::empty(),
            Err(error) => {
                self.io.stats.integrity_failures += 1;
                tracing::error!(label, %error, "storage returned a bad element");
                self.corrupt.insert(slot);
                Record::empty()
            }
        };
        let reply = if self.corrupt.contains(&slot) {
            Reply::Failed(SchemeError::Integrity(format!(
                "the element holding this key failed authentication (storage label {label:#x}); \
                 the value is lost until the key is written again"
            )))
        } else {
            Reply::Value(record.clone())
        };
        for reader in self.take_readers(slot) {
            self.answer(reader, slot, reply.clone());
        }
        self.cache.put(slot, record);
    }

    /// The batch's write-back is in storage.
    pub(super) fn finish_write(&mut self, written: Vec<(u32, u64)>) {
        self.stored(written);
        self.flight = None;
        self.io.stats.batches += 1;
    }

    /// Storage holds these client records again: the journal may drop them.
    pub(super) fn stored(&mut self, written: Vec<(u32, u64)>) {
        self.unstored -= written.len();
        for (slot, version) in written {
            self.io.out.release(u64::from(slot), version);
        }
    }

    /// Shutdown: every cached object goes back to storage under its fresh label, and no batch
    /// follows.
    fn flush(&mut self) {
        let mut writes = Vec::with_capacity(self.cache.len());
        let mut written = Vec::new();
        // Written after batch `self.batch`, whose write-back is done: the server has seen as
        // many batch reads before this write as before that one.
        let batch = self.batch;
        while let Some((slot, record)) = self.cache.pop_lru() {
            writes.push(self.store_real(slot, &record, batch));
            if record.version > 0 {
                written.push((slot, record.version));
            }
        }
        writes.sort_unstable_by_key(|(address, _)| *address);
        tracing::info!(
            elements = writes.len(),
            "wrote the cache to storage; no more batches"
        );
        self.stage = Stage::Drained;
        self.unstored += written.len();
        self.io
            .send(Purpose::Flush(written), StorageOp::Write(writes));
    }
}
