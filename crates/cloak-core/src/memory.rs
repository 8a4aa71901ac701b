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
            StorageOp::Scan { after, limit } => {
                // Hash order is unstable, so pick the lowest addresses above the cursor; O(n) per
                // call is fine for a scan that only recovery runs.
                let mut found: Vec<Addr> = self
                    .elements
                    .keys()
                    .copied()
                    .filter(|a| after.is_none_or(|after| *a > after))
                    .collect();
                let limit = (limit as usize).min(found.len());
                if limit < found.len() {
                    found.select_nth_unstable(limit);
                    found.truncate(limit);
                }
                found.sort_unstable();
                StorageReply::Entries(
                    found
                        .into_iter()
                        .map(|a| (a, self.elements[&a].clone()))
                        .collect(),
                )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_visit_every_element_once_in_address_order() {
        let mut store = MemoryStore::new();
        let writes = (0..10u128)
            .map(|a| (a * 7 % 10, Bytes::from(vec![a as u8])))
            .collect();
        store.apply(StorageOp::Write(writes));
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let StorageReply::Entries(entries) = store.apply(StorageOp::Scan { after, limit: 3 })
            else {
                panic!("a scan answers entries");
            };
            seen.extend(entries.iter().map(|(a, _)| *a));
            if entries.len() < 3 {
                break;
            }
            after = entries.last().map(|(a, _)| *a);
        }
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
    }
}
