//! `unsafe`: plaintext pass-through, the throughput ceiling every other scheme is measured against.
//!
//! Each op becomes one storage access at address = slot, in the clear, sent as soon as the
//! driver polls: ops that arrive together go out together (one read request, one write request),
//! the way any Redis proxy pipelines. No encryption, no padding, no hiding.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use cloak_core::{
    Addr, ElementError, Op, OpId, RecordLayout, Reply, RequestId, Scheme, SchemeError, SchemeStats,
    Slot, StorageError, StorageOp, StorageReply, StorageRequest,
};

pub struct Unsafe {
    slots: u64,
    layout: RecordLayout,
    reads: Vec<(OpId, Slot)>,
    writes: Vec<(OpId, Addr, Bytes)>,
    outstanding: HashMap<RequestId, Vec<OpId>>,
    next_request: u64,
    replies: VecDeque<(OpId, Reply)>,
    stats: SchemeStats,
}

impl Unsafe {
    pub fn new(slots: u64, layout: RecordLayout) -> Self {
        Self {
            slots,
            layout,
            reads: Vec::new(),
            writes: Vec::new(),
            outstanding: HashMap::new(),
            next_request: 0,
            replies: VecDeque::new(),
            stats: SchemeStats::default(),
        }
    }

    fn request(&mut self, ops: Vec<OpId>, op: StorageOp) -> StorageRequest {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.stats.batches += 1;
        self.stats.real_accesses += ops.len() as u64;
        self.outstanding.insert(id, ops);
        StorageRequest { id, op }
    }
}

impl Scheme for Unsafe {
    fn name(&self) -> &'static str {
        "unsafe"
    }

    fn slots(&self) -> u64 {
        self.slots
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        match op {
            Op::Read(slot) => self.reads.push((id, slot)),
            Op::Write(slot, record) => {
                let mut bytes = Vec::new();
                self.layout.encode_compact(slot, &record, &mut bytes);
                self.writes.push((id, Addr::from(slot), Bytes::from(bytes)));
            }
        }
    }

    fn handle_storage(
        &mut self,
        _now: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) {
        let Some(ops) = self.outstanding.remove(&id) else {
            return;
        };
        match result {
            Ok(StorageReply::Values(values)) if values.len() == ops.len() => {
                for (op, value) in ops.into_iter().zip(values) {
                    let reply = match value.map(|v| self.layout.decode(&v)) {
                        None => Reply::Value(Default::default()),
                        Some(Ok((_, record))) => Reply::Value(record),
                        Some(Err(error)) => {
                            self.stats.integrity_failures += 1;
                            Reply::Failed(SchemeError::Integrity(error.to_string()))
                        }
                    };
                    self.replies.push_back((op, reply));
                }
            }
            Ok(StorageReply::Done) => {
                self.replies
                    .extend(ops.into_iter().map(|op| (op, Reply::Written)));
            }
            Ok(_) => {
                let error = SchemeError::Integrity(ElementError::Missing.to_string());
                self.replies
                    .extend(ops.into_iter().map(|op| (op, Reply::Failed(error.clone()))));
            }
            Err(error) => {
                self.stats.storage_failures += 1;
                let error = SchemeError::StorageUnavailable(error);
                self.replies
                    .extend(ops.into_iter().map(|op| (op, Reply::Failed(error.clone()))));
            }
        }
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn poll_storage(&mut self) -> Option<StorageRequest> {
        if !self.reads.is_empty() {
            let (ops, slots): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.reads).into_iter().unzip();
            let addrs = slots.into_iter().map(Addr::from).collect();
            return Some(self.request(ops, StorageOp::Read(addrs)));
        }
        if !self.writes.is_empty() {
            let (ops, writes) = std::mem::take(&mut self.writes)
                .into_iter()
                .map(|(op, addr, bytes)| (op, (addr, bytes)))
                .unzip();
            return Some(self.request(ops, StorageOp::Write(writes)));
        }
        None
    }

    fn poll_reply(&mut self) -> Option<(OpId, Reply)> {
        self.replies.pop_front()
    }

    fn accepts(&self) -> bool {
        true
    }

    fn stats(&self) -> SchemeStats {
        SchemeStats {
            queued: self.outstanding.values().map(|v| v.len() as u64).sum(),
            ..self.stats.clone()
        }
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        vec![("oblivious", "no (plaintext pass-through)".into())]
    }
}
