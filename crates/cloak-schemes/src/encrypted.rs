//! `encrypted`: what "just encrypt it" gives. Values are sealed with AES-GCM and stored under a
//! deterministic pseudorandom label per slot, one storage access per op.
//!
//! Contents are hidden; the access pattern is not: the same key always touches the same label,
//! so the server sees exact access frequencies (the auditor's frequency attack breaks it).
//!
//! Each element is bound to its label and to a generation made of this run's base and the number
//! of write requests sent so far (the same for every element of a request), and the proxy
//! remembers the generation of every slot's last acknowledged write, so a replayed old element is
//! detected. The generation travels in the clear, so it counts what the server itself sees: the
//! write requests. (It used to be the client write's version, which the engine assigns as writes
//! arrive and again when they leave a client's queue: its gaps told the server that a client had
//! more writes to that key waiting.) That needs writes to a slot to land in
//! order, so each slot has at most one storage access in flight; later ops on it wait their turn
//! (reads join a read already in flight). Records recovered after a crash are rewritten under
//! this run's generations before any op on their slot runs, a few requests at a time, each read
//! back from recovery's spool as it goes out (so a restart holds those, not the store); until
//! then a read of one is answered from the recovered record.

use std::collections::{HashSet, VecDeque};

use hashbrown::HashMap;
use std::time::Instant;

use cloak_core::{
    Addr, ElementCodec, Op, OpId, Record, Reply, SchemeError, SchemeStats, Slot, StorageError,
    StorageOp,
};
use cloak_crypto::{Binding, Prf};

use crate::Start;
use crate::shell::recovered::Restore;
use crate::shell::retry::Retry;
use crate::shell::{Algorithm, Answer, Io, OnFailure, RequestPurpose};

/// Most slots in one storage request.
const REQUEST_LIMIT: usize = 1024;
/// Room for this many busy slots is kept when none is busy.
const LANES_KEPT: usize = 1 << 16;
/// Most recovered records being rewritten at once: a few requests' worth.
const RESTORING_LIMIT: u64 = 4 * REQUEST_LIMIT as u64;

/// The op a slot has at storage.
enum Active {
    Read(Vec<OpId>),
    /// A write; without an op it is a recovered record being rewritten.
    Write(Option<OpId>, Record),
}

#[derive(Default)]
struct Lane {
    active: Option<Active>,
    waiting: VecDeque<(OpId, Op)>,
}

/// A request's slots, in order, and for a write the generation its elements were sealed with.
#[derive(Debug)]
pub struct Access {
    slots: Vec<Slot>,
    written_as: Option<u64>,
}

impl RequestPurpose for Access {
    /// Never repeated as it was: its client ops are answered, and a recovered record it carried
    /// is sealed again under a new generation (`Encrypted::slot_failed`).
    fn on_failure(&self) -> OnFailure {
        OnFailure::GiveUp
    }
}

/// The `encrypted` algorithm.
pub struct Encrypted {
    prf: Prf,
    codec: ElementCodec,
    generation_base: u64,
    /// Generation of each slot's last acknowledged write in this run (0: none).
    generations: Vec<u64>,
    /// Write requests sent so far in this run.
    writes_sent: u64,
    lanes: HashMap<Slot, Lane>,
    /// Slots whose active op is not yet sent.
    unsent: VecDeque<Slot>,
    /// Recovered records whose rewrite failed, to seal again under a new generation and send
    /// (not the failed request: the client ops it carried were answered).
    requeue: Retry<Slot>,
    /// Recovered records not yet in a lane.
    restore: Restore,
    /// Recovered records in a lane, not yet rewritten.
    restoring: u64,
    /// Recovered records to rewrite, all told (for `INFO`'s loading progress).
    recovered: u64,
    /// Slots whose recovered record could not be read back (see [`crate::shell::recovered`]):
    /// reads of them fail until a client writes them.
    corrupt: HashSet<Slot>,
    io: Io<Access>,
}

impl Encrypted {
    /// A store of `slots` slots under `prf`'s labels whose first requests rewrite `start`'s
    /// records.
    pub fn new(slots: u64, prf: Prf, codec: ElementCodec, start: Start) -> Self {
        let restore = Restore::new(start.records);
        Self {
            prf,
            codec,
            generation_base: start.generation_base,
            generations: vec![0; slots as usize],
            writes_sent: 0,
            lanes: HashMap::new(),
            unsent: VecDeque::new(),
            requeue: Retry::default(),
            recovered: restore.left(),
            restore,
            restoring: 0,
            corrupt: HashSet::new(),
            io: Io::default(),
        }
    }

    /// Puts a recovered record in its slot's lane, to be rewritten ahead of any op on the slot.
    fn restore_record(&mut self, slot: Slot, record: Record) {
        self.restoring += 1;
        self.lanes.entry(slot).or_default().active = Some(Active::Write(None, record));
        self.unsent.push_back(slot);
    }

    /// Once the requests queued have gone, the next recovered records join the queue (client
    /// ops go first), while few enough are being rewritten.
    fn restore_more(&mut self) {
        if self.restoring + REQUEST_LIMIT as u64 > RESTORING_LIMIT {
            return;
        }
        // A chunk whose records were all lost queues nothing, and no answer would come to
        // call this again: the next chunk is taken at once.
        while !self.restore.is_done() && self.unsent.is_empty() {
            let chunk = self.restore.next_chunk(
                REQUEST_LIMIT,
                &mut self.corrupt,
                &mut self.io.stats.fill_losses,
            );
            for (slot, record) in chunk {
                self.restore_record(slot, record);
            }
        }
    }

    fn label(&self, slot: Slot) -> Addr {
        self.prf.label(slot, 0)
    }

    fn binding(&self, slot: Slot, generation: u64) -> Binding {
        Binding {
            address: self.label(slot),
            generation,
        }
    }

    fn activate(&mut self, slot: Slot, id: OpId, op: Op) {
        let active = match op {
            Op::Read(_) => Active::Read(vec![id]),
            Op::Write(_, record) => Active::Write(Some(id), record),
        };
        self.lanes.entry(slot).or_default().active = Some(active);
        self.unsent.push_back(slot);
    }

    /// The slot's active op is answered; start the next one waiting.
    fn advance(&mut self, slot: Slot, reply: Reply) {
        let Some(lane) = self.lanes.get_mut(&slot) else {
            return;
        };
        match lane.active.take() {
            Some(Active::Read(waiters)) => self.io.out.reply_all(waiters, reply),
            Some(Active::Write(Some(id), _)) => self.io.out.reply(id, reply),
            Some(Active::Write(None, _)) | None => {}
        }
        match lane.waiting.pop_front() {
            Some((id, op)) => self.activate(slot, id, op),
            None => {
                self.lanes.remove(&slot);
                // A recovery gives every recovered slot a lane at once; the table would keep
                // that size (about 150 bytes a key) after they are all written back.
                let capacity = self.lanes.capacity();
                if capacity > LANES_KEPT && self.lanes.len() * 64 < capacity {
                    self.lanes.shrink_to(self.lanes.len() * 2);
                }
            }
        }
    }

    fn read_reply(&mut self, slot: Slot, value: Option<bytes::Bytes>) -> Reply {
        let generation = self.generations[slot as usize];
        // Nothing written in this run: whatever storage holds there is from an earlier run
        // (recovered slots are rewritten before any op on them), so the slot is empty.
        if generation == 0 {
            if self.corrupt.contains(&slot) {
                let error = "this key's recovered record cannot be read back; write it again";
                return Reply::Failed(SchemeError::Integrity(error.into()));
            }
            return Reply::Value(Record::empty());
        }
        match self
            .codec
            .open(self.binding(slot, generation), value.as_ref(), Some(slot))
        {
            Ok((_, record)) => Reply::Value(record),
            Err(error) => {
                self.io.stats.integrity_failures += 1;
                Reply::Failed(SchemeError::Integrity(error.to_string()))
            }
        }
    }

    fn written(&mut self, slot: Slot, generation: u64) {
        if let Some(Active::Write(op, record)) =
            self.lanes.get(&slot).and_then(|l| l.active.as_ref())
        {
            self.generations[slot as usize] = generation;
            if op.is_none() {
                self.io.out.release(slot, record.version);
                self.restoring -= 1;
            } else {
                self.corrupt.remove(&slot);
            }
        }
        self.advance(slot, Reply::Written);
    }

    fn slot_failed(&mut self, now: Instant, slot: Slot, error: &StorageError) {
        let recovered = matches!(
            self.lanes.get(&slot).and_then(|l| l.active.as_ref()),
            Some(Active::Write(None, _))
        );
        if recovered {
            // A recovered record must not be lost: seal it again and send it later.
            self.requeue.fail(now, error.clone(), slot);
            return;
        }
        let reply = Reply::Failed(SchemeError::StorageUnavailable(error.clone()));
        self.advance(slot, reply);
    }

    fn send(&mut self, slots: Vec<Slot>, written_as: Option<u64>, op: StorageOp) {
        self.io.stats.batches += 1;
        self.io.stats.real_accesses += slots.len() as u64;
        self.io.send(Access { slots, written_as }, op);
    }
}

impl Algorithm for Encrypted {
    type Purpose = Access;
    const NAME: &'static str = "encrypted";

    crate::shell::io_in_field!();

    fn slots(&self) -> u64 {
        self.generations.len() as u64
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        let slot = op.slot();
        // A recovered record whose turn has not come yet goes first.
        if let Some(record) =
            (self.restore).take(slot, &mut self.corrupt, &mut self.io.stats.fill_losses)
        {
            self.restore_record(slot, record);
        }
        match self.lanes.get_mut(&slot) {
            None => self.activate(slot, id, op),
            Some(lane) => match (&mut lane.active, &op) {
                (Some(Active::Read(waiters)), Op::Read(_)) if lane.waiting.is_empty() => {
                    waiters.push(id)
                }
                // A recovered record waiting to be rewritten is its slot's newest value while
                // no op waits behind it: a read is answered from it at once, not after the
                // restart's rewrite reaches its slot (storage is sent nothing for it; this scheme
                // hides no access pattern anyway).
                (Some(Active::Write(None, record)), Op::Read(_)) if lane.waiting.is_empty() => {
                    self.io.stats.recovered_reads += 1;
                    self.io.out.reply(id, Reply::Value(record.clone()));
                }
                _ => lane.waiting.push_back((id, op)),
            },
        }
    }

    fn answered(&mut self, _now: Instant, access: Access, answer: Answer) {
        self.requeue.succeeded();
        match access.written_as {
            None => {
                for (slot, value) in access.slots.into_iter().zip(answer.values()) {
                    let reply = self.read_reply(slot, value);
                    self.advance(slot, reply);
                }
            }
            Some(generation) => {
                for slot in access.slots {
                    self.written(slot, generation);
                }
            }
        }
    }

    fn failed(&mut self, now: Instant, access: &Access, error: &StorageError) {
        for &slot in &access.slots {
            self.slot_failed(now, slot, error);
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.requeue.at()
    }

    fn timeout(&mut self, now: Instant) {
        let due = self.requeue.due(now);
        self.unsent.extend(due);
    }

    fn poll(&mut self) {
        self.restore_more();
        if self.unsent.is_empty() {
            return;
        }
        let take = self.unsent.len().min(REQUEST_LIMIT);
        let batch: Vec<Slot> = self.unsent.drain(..take).collect();
        let (reads, writes): (Vec<Slot>, Vec<Slot>) = batch.into_iter().partition(|slot| {
            matches!(
                self.lanes.get(slot).and_then(|l| l.active.as_ref()),
                Some(Active::Read(_))
            )
        });
        // One kind per request; the other kind waits for the next poll.
        if !writes.is_empty() {
            self.unsent.extend(reads);
            self.writes_sent += 1;
            // Why the server may see it: it counts write requests, which the server counts too.
            let generation = self.generation_base + self.writes_sent;
            let elements = writes
                .iter()
                .filter_map(|&slot| {
                    let Some(Active::Write(_, record)) =
                        self.lanes.get(&slot).and_then(|l| l.active.as_ref())
                    else {
                        return None;
                    };
                    let binding = self.binding(slot, generation);
                    Some((binding.address, self.codec.seal(binding, slot, record)))
                })
                .collect();
            return self.send(writes, Some(generation), StorageOp::Write(elements));
        }
        let labels = reads.iter().map(|&slot| self.label(slot)).collect();
        self.send(reads, None, StorageOp::Read(labels));
    }

    fn current_stats(&self, stats: &mut SchemeStats) {
        stats.queued = self.lanes.len() as u64;
        // Until each is rewritten, so a stop waits for them and the recovery spool (where those
        // not yet in a lane are read from) is kept.
        let unwritten = self.restore.left() + self.restoring;
        stats.unwritten = unwritten;
        // Loading while they are (reads of them are answered meanwhile, from the spool).
        stats.filling = (unwritten > 0).then_some((self.recovered - unwritten, self.recovered));
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "oblivious",
                "no (deterministic labels leak the access pattern)".into(),
            ),
            ("element_bytes", self.codec.element_len().to_string()),
        ]
    }
}
