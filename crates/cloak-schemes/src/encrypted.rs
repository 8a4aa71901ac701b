//! `encrypted`: what "just encrypt it" gives. Values are sealed with AES-GCM and stored under a
//! deterministic pseudorandom label per slot, one storage access per op.
//!
//! Contents are hidden; the access pattern is not: the same key always touches the same label,
//! so the server sees exact access frequencies (the auditor's frequency attack breaks it).
//!
//! Each element is bound to its label and to the version of the write that produced it, and the
//! proxy remembers the last acknowledged version of every slot, so a replayed old element is
//! detected. That needs writes to a slot to land in order, so each slot has at most one storage
//! access in flight; later ops on it wait their turn (reads join a read already in flight).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use cloak_core::{
    Addr, ElementCodec, Op, OpId, Record, Reply, RequestId, Scheme, SchemeError, SchemeStats, Slot,
    StorageError, StorageOp, StorageReply, StorageRequest,
};
use cloak_crypto::{Binding, Prf};

/// The op a slot has at storage.
enum Active {
    Read(Vec<OpId>),
    Write(OpId, Record),
}

#[derive(Default)]
struct Lane {
    active: Option<Active>,
    waiting: VecDeque<(OpId, Op)>,
}

pub struct Encrypted {
    prf: Prf,
    codec: ElementCodec,
    /// Version of the last acknowledged write of each slot (0: never written).
    versions: Vec<u64>,
    lanes: HashMap<Slot, Lane>,
    /// Slots whose active op is not yet sent.
    unsent: Vec<Slot>,
    outstanding: HashMap<RequestId, Vec<Slot>>,
    next_request: u64,
    replies: VecDeque<(OpId, Reply)>,
    stats: SchemeStats,
}

impl Encrypted {
    pub fn new(slots: u64, prf: Prf, codec: ElementCodec) -> Self {
        Self {
            prf,
            codec,
            versions: vec![0; slots as usize],
            lanes: HashMap::new(),
            unsent: Vec::new(),
            outstanding: HashMap::new(),
            next_request: 0,
            replies: VecDeque::new(),
            stats: SchemeStats::default(),
        }
    }

    fn label(&self, slot: Slot) -> Addr {
        self.prf.label(slot, 0)
    }

    fn activate(&mut self, slot: Slot, id: OpId, op: Op) {
        let active = match op {
            Op::Read(_) => Active::Read(vec![id]),
            Op::Write(_, record) => Active::Write(id, record),
        };
        self.lanes.entry(slot).or_default().active = Some(active);
        self.unsent.push(slot);
    }

    /// The slot's active op is answered; start the next one waiting.
    fn advance(&mut self, slot: Slot, reply: Reply) {
        let lane = self.lanes.get_mut(&slot).expect("slot has a lane");
        match lane.active.take() {
            Some(Active::Read(waiters)) => self
                .replies
                .extend(waiters.into_iter().map(|w| (w, reply.clone()))),
            Some(Active::Write(id, _)) => self.replies.push_back((id, reply)),
            None => {}
        }
        match lane.waiting.pop_front() {
            Some((id, op)) => self.activate(slot, id, op),
            None => {
                self.lanes.remove(&slot);
            }
        }
    }

    fn request(&mut self, slots: Vec<Slot>, op: StorageOp) -> StorageRequest {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.stats.batches += 1;
        self.stats.real_accesses += slots.len() as u64;
        self.outstanding.insert(id, slots);
        StorageRequest { id, op }
    }
}

impl Scheme for Encrypted {
    fn name(&self) -> &'static str {
        "encrypted"
    }

    fn slots(&self) -> u64 {
        self.versions.len() as u64
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        let slot = op.slot();
        if slot >= self.slots() {
            let error = SchemeError::Overloaded(format!("slot {slot} does not exist"));
            self.replies.push_back((id, Reply::Failed(error)));
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
        _now: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) {
        let Some(slots) = self.outstanding.remove(&id) else {
            return;
        };
        match result {
            Ok(StorageReply::Values(values)) if values.len() == slots.len() => {
                for (slot, value) in slots.into_iter().zip(values) {
                    let version = self.versions[slot as usize];
                    let reply = match (version, value) {
                        (0, None) => Reply::Value(Record::empty()),
                        (0, Some(_)) => Reply::Failed(SchemeError::Integrity(
                            "storage holds an element for a slot never written".into(),
                        )),
                        (_, value) => {
                            let binding = Binding {
                                address: self.label(slot),
                                generation: version,
                            };
                            match self.codec.open(binding, value.as_ref(), Some(slot)) {
                                Ok((_, record)) => Reply::Value(record),
                                Err(error) => {
                                    Reply::Failed(SchemeError::Integrity(error.to_string()))
                                }
                            }
                        }
                    };
                    if matches!(reply, Reply::Failed(_)) {
                        self.stats.integrity_failures += 1;
                    }
                    self.advance(slot, reply);
                }
            }
            Ok(StorageReply::Done) => {
                for slot in slots {
                    let lane = self.lanes.get(&slot).expect("slot has a lane");
                    if let Some(Active::Write(_, record)) = &lane.active {
                        self.versions[slot as usize] = record.version;
                    }
                    self.advance(slot, Reply::Written);
                }
            }
            other => {
                let error = match other {
                    Err(error) => error,
                    Ok(_) => {
                        StorageError("storage answered with the wrong number of values".into())
                    }
                };
                self.stats.storage_failures += 1;
                for slot in slots {
                    self.advance(
                        slot,
                        Reply::Failed(SchemeError::StorageUnavailable(error.clone())),
                    );
                }
            }
        }
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn poll_storage(&mut self) -> Option<StorageRequest> {
        if self.unsent.is_empty() {
            return None;
        }
        let (reads, writes): (Vec<Slot>, Vec<Slot>) = std::mem::take(&mut self.unsent)
            .into_iter()
            .partition(|slot| matches!(self.lanes[slot].active, Some(Active::Read(_))));
        if !writes.is_empty() {
            let elements = writes
                .iter()
                .map(|&slot| {
                    let Some(Active::Write(_, record)) = &self.lanes[&slot].active else {
                        unreachable!("partitioned as a write")
                    };
                    let label = self.label(slot);
                    let binding = Binding {
                        address: label,
                        generation: record.version,
                    };
                    (label, self.codec.seal(binding, slot, record))
                })
                .collect();
            self.unsent = reads;
            return Some(self.request(writes, StorageOp::Write(elements)));
        }
        let labels = reads.iter().map(|&slot| self.label(slot)).collect();
        Some(self.request(reads, StorageOp::Read(labels)))
    }

    fn poll_reply(&mut self) -> Option<(OpId, Reply)> {
        self.replies.pop_front()
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
