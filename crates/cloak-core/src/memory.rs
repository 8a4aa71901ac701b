//! A storage server's state held in memory: the map every in-memory backend applies requests to.

use bytes::Bytes;
use hashbrown::HashMap;

use crate::storage::{Addr, StorageOp, StorageReply};

/// Addresses are chosen by the trusted proxy (dense integers or PRF labels), so a fast
/// non-keyed hash is safe here.
#[derive(Default)]
pub struct MemoryStore {
    elements: HashMap<Addr, Bytes>,
    bytes: usize,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a request, taking ownership of written values.
    pub fn apply(&mut self, op: StorageOp) -> StorageReply {
        match op {
            StorageOp::Read(addrs) => StorageReply::Values(
                addrs
                    .iter()
                    .map(|a| self.elements.get(a).cloned())
                    .collect(),
            ),
            StorageOp::Write(writes) => {
                for (addr, value) in writes {
                    self.bytes += value.len();
                    if let Some(old) = self.elements.insert(addr, value) {
                        self.bytes -= old.len();
                    }
                }
                StorageReply::Done
            }
            StorageOp::Delete(addrs) => {
                for addr in addrs {
                    if let Some(old) = self.elements.remove(&addr) {
                        self.bytes -= old.len();
                    }
                }
                StorageReply::Done
            }
        }
    }

    pub fn len(&self) -> usize {
        self.elements.len()
    }

    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// Total bytes of all elements.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Direct access for tests that play a malicious server.
    pub fn get_mut(&mut self, addr: Addr) -> Option<&mut Bytes> {
        self.elements.get_mut(&addr)
    }

    pub fn addresses(&self) -> impl Iterator<Item = Addr> + '_ {
        self.elements.keys().copied()
    }
}
