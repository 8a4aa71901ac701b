//! The adversary's view: every request storage receives, in order, as the server sees it.
//!
//! Recorded by the observing storage wrapper and by the simulator; read by the tests that check
//! each scheme's security claim and by the auditor.

use std::time::Duration;

use crate::storage::{Addr, StorageOp};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    Read,
    Write,
    Delete,
    Scan,
}

/// One request as the server saw it: when, what kind, which addresses, how many bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Time since observation began.
    pub at: Duration,
    pub kind: AccessKind,
    pub addrs: Vec<Addr>,
    /// Size of every value written (empty for reads and deletes).
    pub value_lens: Vec<usize>,
}

impl Observed {
    pub fn of(at: Duration, op: &StorageOp) -> Self {
        match op {
            StorageOp::Read(addrs) => Self {
                at,
                kind: AccessKind::Read,
                addrs: addrs.clone(),
                value_lens: Vec::new(),
            },
            StorageOp::Write(writes) => Self {
                at,
                kind: AccessKind::Write,
                addrs: writes.iter().map(|(a, _)| *a).collect(),
                value_lens: writes.iter().map(|(_, v)| v.len()).collect(),
            },
            StorageOp::Delete(addrs) => Self {
                at,
                kind: AccessKind::Delete,
                addrs: addrs.clone(),
                value_lens: Vec::new(),
            },
            // The cursor is all the server is told.
            StorageOp::Scan { after, .. } => Self {
                at,
                kind: AccessKind::Scan,
                addrs: after.iter().copied().collect(),
                value_lens: Vec::new(),
            },
        }
    }
}

pub type Trace = Vec<Observed>;
