//! `unsafe`: plaintext pass-through, the throughput ceiling every other scheme is measured against.
//!
//! Each op becomes one storage access at address = slot, in the clear, sent as soon as the
//! driver polls: ops that arrive together go out together (one read request, one write request),
//! the way any Redis proxy pipelines. No encryption, no padding, no hiding. Records recovered
//! after a crash are written first (retried until stored); client ops wait for that.

use hashbrown::HashMap;
use std::time::Instant;

use bytes::Bytes;
use cloak_core::{
    Addr, ElementError, Op, OpId, Outbox, RecordLayout, Reply, RequestId, Scheme, SchemeError,
    SchemeStats, Slot, StorageError, StorageOp, StorageReply, StorageRequest,
};

use crate::Start;
use crate::retry::Retry;

/// Most recovered records in one storage request.
const REQUEST_LIMIT: usize = 1024;

/// Recovered records to write, as (slot, version, encoding).
type Recovered = Vec<(Slot, u64, Bytes)>;

pub struct Unsafe {
    slots: u64,
    layout: RecordLayout,
    reads: Vec<(OpId, Slot)>,
    writes: Vec<(OpId, Addr, Bytes)>,
    outstanding: HashMap<RequestId, Vec<OpId>>,
    /// Recovered records not yet stored: waiting to be sent, and in flight.
    recovering: Recovered,
    restoring: HashMap<RequestId, Recovered>,
    retry: Retry<Recovered>,
    /// Client ops that arrived before the recovered records were stored.
    held: Vec<(OpId, Op)>,
    next_request: u64,
    out: Outbox,
    stats: SchemeStats,
}

impl Unsafe {
    pub fn new(slots: u64, layout: RecordLayout, start: Start) -> Self {
        let recovering = start
            .records
            .into_iter()
            .filter(|(_, record)| !record.is_empty())
            .map(|(slot, record)| {
                let mut bytes = Vec::new();
                layout.encode_compact(slot, &record, &mut bytes);
                (slot, record.version, Bytes::from(bytes))
            })
            .collect();
        Self {
            slots,
            layout,
            reads: Vec::new(),
            writes: Vec::new(),
            outstanding: HashMap::new(),
            recovering,
            restoring: HashMap::new(),
            retry: Retry::default(),
            held: Vec::new(),
            next_request: 0,
            out: Outbox::default(),
            stats: SchemeStats::default(),
        }
    }

    fn restored(&self) -> bool {
        self.recovering.is_empty() && self.restoring.is_empty() && !self.retry.is_waiting()
    }

    fn next_id(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    fn request(&mut self, ops: Vec<OpId>, op: StorageOp) -> StorageRequest {
        let id = self.next_id();
        self.stats.batches += 1;
        self.stats.real_accesses += ops.len() as u64;
        self.outstanding.insert(id, ops);
        StorageRequest { id, op }
    }

    fn accept(&mut self, id: OpId, op: Op) {
        match op {
            Op::Read(slot) => self.reads.push((id, slot)),
            Op::Write(slot, record) => {
                let mut bytes = Vec::new();
                self.layout.encode_compact(slot, &record, &mut bytes);
                self.writes.push((id, Addr::from(slot), Bytes::from(bytes)));
            }
        }
    }

    fn restore_answered(
        &mut self,
        now: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) {
        let Some(records) = self.restoring.remove(&id) else {
            return;
        };
        match result {
            Ok(StorageReply::Done) => {
                self.retry.succeeded();
                for (slot, version, _) in records {
                    self.out.release(slot, version);
                }
                if self.restored() {
                    for (id, op) in std::mem::take(&mut self.held) {
                        self.accept(id, op);
                    }
                }
            }
            Ok(reply) => {
                let error =
                    StorageError(format!("storage answered {} to a write", reply.summary()));
                self.retry.fail(now, error, records);
            }
            Err(error) => self.retry.fail(now, error, records),
        }
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
        if self.restored() {
            self.accept(id, op);
        } else {
            self.held.push((id, op));
        }
    }

    fn handle_storage(
        &mut self,
        now: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) {
        if self.restoring.contains_key(&id) {
            return self.restore_answered(now, id, result);
        }
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
                    self.out.reply(op, reply);
                }
            }
            Ok(StorageReply::Done) => self.out.reply_all(ops, Reply::Written),
            Ok(_) => {
                let error = SchemeError::Integrity(ElementError::Missing.to_string());
                self.out.reply_all(ops, Reply::Failed(error));
            }
            Err(error) => {
                self.stats.storage_failures += 1;
                let error = SchemeError::StorageUnavailable(error);
                self.out.reply_all(ops, Reply::Failed(error));
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        for records in self.retry.due(now) {
            self.recovering.extend(records);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.retry.at()
    }

    fn poll_storage(&mut self) -> Option<StorageRequest> {
        if !self.recovering.is_empty() {
            // From the end: taking from the front would move the rest every time.
            let rest = self.recovering.len().saturating_sub(REQUEST_LIMIT);
            let records: Recovered = self.recovering.split_off(rest);
            if self.recovering.is_empty() {
                self.recovering = Recovered::new();
            }
            let writes = records
                .iter()
                .map(|(slot, _, bytes)| (Addr::from(*slot), bytes.clone()))
                .collect();
            let id = self.next_id();
            self.restoring.insert(id, records);
            return Some(StorageRequest {
                id,
                op: StorageOp::Write(writes),
            });
        }
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

    fn outbox(&mut self) -> &mut Outbox {
        &mut self.out
    }

    fn accepts(&self) -> bool {
        true
    }

    fn stats(&self) -> SchemeStats {
        SchemeStats {
            queued: self
                .outstanding
                .values()
                .map(|v| v.len() as u64)
                .sum::<u64>()
                + self.held.len() as u64,
            ..self.stats.clone()
        }
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        vec![("oblivious", "no (plaintext pass-through)".into())]
    }
}
