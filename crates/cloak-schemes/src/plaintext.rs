//! `unsafe`: plaintext pass-through, the throughput ceiling every other scheme is measured against.
//!
//! Each op becomes one storage access at address = slot, in the clear, sent as soon as the
//! driver polls: ops that arrive together go out together (one read request, one write request),
//! the way any Redis proxy pipelines. No encryption, no padding, no hiding. Records recovered
//! after a crash are written first, a few requests at a time (each repeated until stored), each
//! read back from recovery's spool as its request goes out; client ops wait for that.

use std::collections::HashSet;
use std::time::Instant;

use bytes::Bytes;
use cloak_core::{
    Addr, Op, OpId, RecordLayout, Reply, SchemeError, SchemeStats, Slot, StorageError, StorageOp,
};

use crate::Start;
use crate::shell::fill::{Fill, Pace};
use crate::shell::recovered::Restore;
use crate::shell::{Algorithm, Answer, Io, OnFailure, RequestPurpose};

/// Most recovered records in one storage request.
const REQUEST_LIMIT: usize = 1024;

/// Why a request was sent.
#[derive(Debug)]
pub enum Purpose {
    /// Recovered records, as (slot, version), to release from the journal once stored.
    Restore(Vec<(Slot, u64)>),
    /// Client reads, one per address in order.
    Reads(Vec<OpId>),
    /// Client writes.
    Writes(Vec<OpId>),
}

impl RequestPurpose for Purpose {
    fn on_failure(&self) -> OnFailure {
        match self {
            // A recovered record must not be lost.
            Purpose::Restore(_) => OnFailure::Repeat,
            // Its clients are answered "storage unavailable"; they may try again.
            Purpose::Reads(_) | Purpose::Writes(_) => OnFailure::GiveUp,
        }
    }
}

/// The longest element `unsafe` writes for records of `layout`: a record's encoding without
/// padding or sealing, at most as long as a full record's.
pub fn largest_element(layout: RecordLayout) -> usize {
    layout.encoded_len()
}

/// The `unsafe` algorithm.
pub struct Unsafe {
    slots: u64,
    layout: RecordLayout,
    reads: Vec<(OpId, Slot)>,
    writes: Vec<(OpId, Addr, Bytes)>,
    /// Client ops sent and not answered.
    in_flight: u64,
    /// Recovered records not yet sent, and how far writing them got.
    restore: Restore,
    restoring: Fill,
    /// Recovered records sent and not yet answered.
    restore_in_flight: u64,
    /// Slots whose recovered record could not be read back (see
    /// [`crate::shell::recovered`]): reads of them fail until a client writes them.
    corrupt: HashSet<Slot>,
    /// Client ops that arrived before the recovered records were stored.
    held: Vec<(OpId, Op)>,
    io: Io<Purpose>,
}

impl Unsafe {
    /// A pass-through store of `slots` slots whose first requests write `start`'s records.
    pub fn new(slots: u64, layout: RecordLayout, start: Start) -> Self {
        let restore = Restore::new(start.records);
        let mut scheme = Self {
            slots,
            layout,
            reads: Vec::new(),
            writes: Vec::new(),
            in_flight: 0,
            // Unpaced: the restore writes only the records there are, in the clear.
            restoring: Fill::new(restore.left(), REQUEST_LIMIT as u64, Pace::unpaced()),
            restore,
            restore_in_flight: 0,
            corrupt: HashSet::new(),
            held: Vec::new(),
            io: Io::default(),
        };
        scheme.pump_restore();
        scheme
    }

    /// Keeps a few requests of recovered records in flight, each read back and encoded as it
    /// goes out: a restart holds the values of those requests, not the store's.
    fn pump_restore(&mut self) {
        // The fill keeps a few requests in flight (`shell::fill::FILL_WINDOW`).
        while let Some(chunk) = self.restoring.next_chunk() {
            let records = self.restore.next_chunk(
                (chunk.end - chunk.start) as usize,
                &mut self.corrupt,
                &mut self.io.stats.fill_losses,
            );
            self.restore_in_flight += records.len() as u64;
            let versions = records.iter().map(|(slot, r)| (*slot, r.version)).collect();
            let writes = records
                .iter()
                .map(|(slot, record)| {
                    let mut bytes = Vec::new();
                    self.layout.encode_compact(*slot, record, &mut bytes);
                    (Addr::from(*slot), Bytes::from(bytes))
                })
                .collect();
            self.io
                .send(Purpose::Restore(versions), StorageOp::Write(writes));
        }
    }

    fn accept(&mut self, id: OpId, op: Op) {
        match op {
            Op::Read(slot) if self.corrupt.contains(&slot) => {
                let error = "this key's recovered record cannot be read back; write it again";
                let reply = Reply::Failed(SchemeError::Integrity(error.into()));
                self.io.out.reply(id, reply);
            }
            Op::Read(slot) => self.reads.push((id, slot)),
            Op::Write(slot, record) => {
                self.corrupt.remove(&slot);
                let mut bytes = Vec::new();
                self.layout.encode_compact(slot, &record, &mut bytes);
                self.writes.push((id, Addr::from(slot), Bytes::from(bytes)));
            }
        }
    }

    fn send(&mut self, purpose: Purpose, ops: usize, op: StorageOp) {
        self.io.stats.batches += 1;
        self.io.stats.real_accesses += ops as u64;
        self.in_flight += ops as u64;
        self.io.send(purpose, op);
    }

    fn read_reply(&mut self, value: Option<Bytes>) -> Reply {
        match value.map(|v| self.layout.decode(&v)) {
            None => Reply::Value(Default::default()),
            Some(Ok((_, record))) => Reply::Value(record),
            Some(Err(error)) => {
                self.io.stats.integrity_failures += 1;
                Reply::Failed(SchemeError::Integrity(error.to_string()))
            }
        }
    }
}

impl Algorithm for Unsafe {
    type Purpose = Purpose;
    const NAME: &'static str = "unsafe";

    crate::shell::io_in_field!();

    fn slots(&self) -> u64 {
        self.slots
    }

    fn submit(&mut self, _now: Instant, id: OpId, op: Op) {
        if self.restoring.is_done() {
            self.accept(id, op);
        } else {
            self.held.push((id, op));
        }
    }

    fn poll(&mut self) {
        self.pump_restore();
        if !self.reads.is_empty() {
            let (ops, slots): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.reads).into_iter().unzip();
            let addrs = slots.into_iter().map(Addr::from).collect();
            let count = ops.len();
            self.send(Purpose::Reads(ops), count, StorageOp::Read(addrs));
        }
        if !self.writes.is_empty() {
            let (ops, writes): (Vec<_>, Vec<_>) = std::mem::take(&mut self.writes)
                .into_iter()
                .map(|(op, addr, bytes)| (op, (addr, bytes)))
                .unzip();
            let count = ops.len();
            self.send(Purpose::Writes(ops), count, StorageOp::Write(writes));
        }
    }

    fn answered(&mut self, _now: Instant, purpose: Purpose, answer: Answer) {
        match purpose {
            Purpose::Restore(records) => {
                self.restore_in_flight -= records.len() as u64;
                for (slot, version) in records {
                    self.io.out.release(slot, version);
                }
                // Released above: the fill only counts the answer.
                self.restoring
                    .written(answer.arrived(), Vec::new(), &mut self.io.out);
                self.pump_restore();
                if self.restoring.is_done() {
                    for (id, op) in std::mem::take(&mut self.held) {
                        self.accept(id, op);
                    }
                }
            }
            Purpose::Reads(ops) => {
                self.in_flight -= ops.len() as u64;
                for (op, value) in ops.into_iter().zip(answer.values()) {
                    let reply = self.read_reply(value);
                    self.io.out.reply(op, reply);
                }
            }
            Purpose::Writes(ops) => {
                self.in_flight -= ops.len() as u64;
                self.io.out.reply_all(ops, Reply::Written);
            }
        }
    }

    fn failed(&mut self, _now: Instant, purpose: &Purpose, error: &StorageError) {
        // A failed restore is repeated (see `on_failure`); the clients of a failed read or
        // write learn now.
        if let Purpose::Reads(ops) | Purpose::Writes(ops) = purpose {
            self.in_flight -= ops.len() as u64;
            let reply = Reply::Failed(SchemeError::StorageUnavailable(error.clone()));
            self.io.out.reply_all(ops.iter().copied(), reply);
        }
    }

    fn current_stats(&self, stats: &mut SchemeStats) {
        stats.filling = self.restoring.filling();
        stats.queued = self.in_flight + self.held.len() as u64;
        // Recovered records count as unwritten until each is stored, so a stop waits for them,
        // the recovery spool (where those not yet sent are read from) is kept, and the proxy's
        // start is not over before they are in storage.
        stats.unwritten = self.restore.left() + self.restore_in_flight;
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        vec![("oblivious", "no (plaintext pass-through)".into())]
    }
}
