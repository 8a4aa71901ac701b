//! The adversary's view: every request storage receives, in order, as the server sees it.
//!
//! Recorded by the observing storage wrapper and by the simulator; read by the tests that check
//! each scheme's security claim and by the auditor. It keeps everything the server receives:
//! the addresses, every byte of every value written (shared with the request, not copied: a
//! `Bytes` clone is a reference count) and when each request arrived and was answered.

use std::time::Duration;

use bytes::Bytes;

use crate::storage::{Addr, StorageOp};

/// A storage request's kind, as the server sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A read.
    Read,
    /// A write.
    Write,
    /// A delete.
    Delete,
    /// A scan.
    Scan,
}

/// One request as the server saw it: when it came and when it was answered, what kind, which
/// addresses, which bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Time since observation began.
    pub at: Duration,
    /// When the answer left storage (time since observation began); `None` while unanswered
    /// or when the request failed.
    pub answered: Option<Duration>,
    /// Its kind.
    pub kind: AccessKind,
    /// The addresses it names, in request order.
    pub addrs: Vec<Addr>,
    /// Every value written, byte for byte, in request order (empty for reads and deletes).
    pub values: Vec<Bytes>,
}

impl Observed {
    /// `op` as the server receives it at `at`, not yet answered.
    pub fn of(at: Duration, op: &StorageOp) -> Self {
        let (kind, addrs, values) = match op {
            StorageOp::Read(addrs) => (AccessKind::Read, addrs.clone(), Vec::new()),
            StorageOp::Write(writes) => (
                AccessKind::Write,
                writes.iter().map(|(a, _)| *a).collect(),
                writes.iter().map(|(_, v)| v.clone()).collect(),
            ),
            StorageOp::Delete(addrs) => (AccessKind::Delete, addrs.clone(), Vec::new()),
            // The cursor is all the server is told.
            StorageOp::Scan { after, .. } => (
                AccessKind::Scan,
                after.iter().copied().collect(),
                Vec::new(),
            ),
        };
        Self {
            at,
            answered: None,
            kind,
            addrs,
            values,
        }
    }

    /// The size of every value written, in request order.
    pub fn value_lens(&self) -> impl Iterator<Item = usize> + '_ {
        self.values.iter().map(Bytes::len)
    }
}

/// Requests as the server saw them, in the order it received them.
pub type Trace = Vec<Observed>;
