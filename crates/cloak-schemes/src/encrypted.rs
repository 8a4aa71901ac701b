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
//! this run's generations before any op on their slot runs.

use std::collections::VecDeque;

use hashbrown::HashMap;
use std::time::Instant;

use cloak_core::{
    Addr, ElementCodec, Op, OpId, Outbox, Record, Reply, RequestId, Scheme, SchemeError,
    SchemeStats, Slot, StorageError, StorageOp, StorageReply, StorageRequest,
};
use cloak_crypto::{Binding, Prf};

use crate::Start;
use crate::retry::Retry;

/// Most slots in one storage request.
const REQUEST_LIMIT: usize = 1024;
/// Room for this many busy slots is kept when none is busy.
const LANES_KEPT: usize = 1 << 16;

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
    /// Each request's slots, and the generation its elements were sealed with (writes).
    outstanding: HashMap<RequestId, (Vec<Slot>, u64)>,
    next_request: u64,
    /// Recovered records whose rewrite failed, to send again.
    retry: Retry<Slot>,
    out: Outbox,
    stats: SchemeStats,
}

impl Encrypted {
    pub fn new(slots: u64, prf: Prf, codec: ElementCodec, start: Start) -> Self {
        let mut scheme = Self {
            prf,
            codec,
            generation_base: start.generation_base,
            generations: vec![0; slots as usize],
            writes_sent: 0,
            lanes: HashMap::new(),
            unsent: VecDeque::new(),
            outstanding: HashMap::new(),
            next_request: 0,
            retry: Retry::default(),
            out: Outbox::default(),
            stats: SchemeStats::default(),
        };
        for (slot, record) in start.records {
            if !record.is_empty() {
                scheme.lanes.entry(slot).or_default().active = Some(Active::Write(None, record));
                scheme.unsent.push_back(slot);
            }
        }
        scheme
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
        let lane = self.lanes.get_mut(&slot).expect("slot has a lane");
        match lane.active.take() {
            Some(Active::Read(waiters)) => self.out.reply_all(waiters, reply),
            Some(Active::Write(Some(id), _)) => self.out.reply(id, reply),
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
            return Reply::Value(Record::empty());
        }
        match self
            .codec
            .open(self.binding(slot, generation), value.as_ref(), Some(slot))
        {
            Ok((_, record)) => Reply::Value(record),
            Err(error) => {
                self.stats.integrity_failures += 1;
                Reply::Failed(SchemeError::Integrity(error.to_string()))
            }
        }
    }

    fn written(&mut self, slot: Slot, generation: u64) {
        let lane = self.lanes.get(&slot).expect("slot has a lane");
        if let Some(Active::Write(op, record)) = &lane.active {
            self.generations[slot as usize] = generation;
            if op.is_none() {
                self.out.release(slot, record.version);
            }
        }
        self.advance(slot, Reply::Written);
    }

    fn failed(&mut self, now: Instant, slot: Slot, error: StorageError) {
        let lane = self.lanes.get(&slot).expect("slot has a lane");
        if let Some(Active::Write(None, _)) = lane.active {
            // A recovered record must not be lost: send it again later.
            self.retry.fail(now, error, slot);
            return;
        }
        self.advance(slot, Reply::Failed(SchemeError::StorageUnavailable(error)));
    }

    fn request(&mut self, slots: Vec<Slot>, generation: u64, op: StorageOp) -> StorageRequest {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.stats.batches += 1;
        self.stats.real_accesses += slots.len() as u64;
        self.outstanding.insert(id, (slots, generation));
        StorageRequest { id, op }
    }
}

impl Scheme for Encrypted {
    fn name(&self) -> &'static str {
        "encrypted"
    }

    fn slots(&self) -> u64 {
        self.generations.len() as u64
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        let slot = op.slot();
        if slot >= self.slots() {
            let error = SchemeError::Overloaded(format!("slot {slot} does not exist"));
            self.out.reply(id, Reply::Failed(error));
            return;
        }
        match self.lanes.get_mut(&slot) {
            None => self.activate(slot, id, op),
            Some(lane) => match (&mut lane.active, &op) {
                (Some(Active::Read(waiters)), Op::Read(_)) if lane.waiting.is_empty() => {
                    waiters.push(id)
                }
                _ => lane.waiting.push_back((id, op)),
            },
        }
    }

    fn handle_storage(
        &mut self,
        now: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) {
        let Some((slots, generation)) = self.outstanding.remove(&id) else {
            return;
        };
        match result {
            Ok(StorageReply::Values(values)) if values.len() == slots.len() => {
                self.retry.succeeded();
                for (slot, value) in slots.into_iter().zip(values) {
                    let reply = self.read_reply(slot, value);
                    self.advance(slot, reply);
                }
            }
            Ok(StorageReply::Done) => {
                self.retry.succeeded();
                for slot in slots {
                    self.written(slot, generation);
                }
            }
            other => {
                let error = match other {
                    Err(error) => error,
                    Ok(reply) => StorageError(format!(
                        "storage answered {} to a request for {} slots",
                        reply.summary(),
                        slots.len()
                    )),
                };
                self.stats.storage_failures += 1;
                for slot in slots {
                    self.failed(now, slot, error.clone());
                }
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        let due = self.retry.due(now);
        self.unsent.extend(due);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.retry.at()
    }

    fn poll_storage(&mut self) -> Option<StorageRequest> {
        if self.unsent.is_empty() {
            return None;
        }
        let take = self.unsent.len().min(REQUEST_LIMIT);
        let batch: Vec<Slot> = self.unsent.drain(..take).collect();
        let (reads, writes): (Vec<Slot>, Vec<Slot>) = batch
            .into_iter()
            .partition(|slot| matches!(self.lanes[slot].active, Some(Active::Read(_))));
        // One kind per request; the other kind waits for the next poll.
        if !writes.is_empty() {
            self.unsent.extend(reads);
            self.writes_sent += 1;
            let generation = self.generation_base + self.writes_sent;
            let elements = writes
                .iter()
                .map(|&slot| {
                    let Some(Active::Write(_, record)) = &self.lanes[&slot].active else {
                        unreachable!("partitioned as a write")
                    };
                    let binding = self.binding(slot, generation);
                    (binding.address, self.codec.seal(binding, slot, record))
                })
                .collect();
            return Some(self.request(writes, generation, StorageOp::Write(elements)));
        }
        let labels = reads.iter().map(|&slot| self.label(slot)).collect();
        Some(self.request(reads, 0, StorageOp::Read(labels)))
    }

    fn outbox(&mut self) -> &mut Outbox {
        &mut self.out
    }

    fn accepts(&self) -> bool {
        true
    }

    fn stats(&self) -> SchemeStats {
        SchemeStats {
            queued: self.lanes.len() as u64,
            ..self.stats.clone()
        }
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
