//! A storage server's state held in memory: the map every in-memory backend applies requests to.
//!
//! Dense schemes (Cloak, the ORAMs) address storage with small integers and rewrite the same
//! addresses over and over, so small addresses live in a vector indexed by address, and a write
//! of an element the size of the one it replaces overwrites that buffer in place: no hashing, no
//! allocation, no free. Pseudorandom labels live in a hash map. Written values are always copied
//! into buffers the store owns, so it never keeps a caller's (often much larger) buffer alive.

use bytes::Bytes;
use hashbrown::HashMap;

use crate::storage::{Addr, StorageOp, StorageReply};

/// Addresses below this are dense and kept in a vector (at most 16M entries).
const DENSE_LIMIT: Addr = 1 << 24;

/// Addresses are chosen by the trusted proxy (dense integers or PRF labels), so a fast
/// non-keyed hash is safe for the labels.
#[derive(Default)]
pub struct MemoryStore {
    dense: Vec<Option<Bytes>>,
    sparse: HashMap<Addr, Bytes>,
    elements: usize,
    bytes: usize,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn get(&self, addr: Addr) -> Option<&Bytes> {
        if addr < DENSE_LIMIT {
            self.dense.get(addr as usize)?.as_ref()
        } else {
            self.sparse.get(&addr)
        }
    }

    fn take(&mut self, addr: Addr) -> Option<Bytes> {
        if addr < DENSE_LIMIT {
            self.dense.get_mut(addr as usize).and_then(Option::take)
        } else {
            self.sparse.remove(&addr)
        }
    }

    fn put(&mut self, addr: Addr, value: &[u8]) {
        let new = match self.take(addr) {
            Some(old) => {
                self.bytes -= old.len();
                match (old.len() == value.len()).then(|| old.try_into_mut()) {
                    // Nobody else holds the old buffer: reuse it.
                    Some(Ok(mut buffer)) => {
                        buffer.copy_from_slice(value);
                        buffer.freeze()
                    }
                    _ => Bytes::copy_from_slice(value),
                }
            }
            None => {
                self.elements += 1;
                Bytes::copy_from_slice(value)
            }
        };
        self.bytes += value.len();
        if addr < DENSE_LIMIT {
            let index = addr as usize;
            if index >= self.dense.len() {
                self.dense.resize(index + 1, None);
            }
            self.dense[index] = Some(new);
        } else {
            self.sparse.insert(addr, new);
        }
    }

    fn remove(&mut self, addr: Addr) {
        if let Some(old) = self.take(addr) {
            self.elements -= 1;
            self.bytes -= old.len();
        }
    }

    /// Applies a request.
    pub fn apply(&mut self, op: StorageOp) -> StorageReply {
        match op {
            StorageOp::Read(addrs) => {
                StorageReply::Values(addrs.iter().map(|a| self.get(*a).cloned()).collect())
            }
            StorageOp::Write(writes) => {
                for (addr, value) in writes {
                    self.put(addr, &value);
                }
                StorageReply::Done
            }
            StorageOp::Delete(addrs) => {
                for addr in addrs {
                    self.remove(addr);
                }
                StorageReply::Done
            }
            StorageOp::Scan { after, limit } => {
                let limit = limit as usize;
                // Nothing lies after the last address (the store marker's): saturating there
                // would hand it back again, out of order.
                let Some(first) = after.map_or(Some(0), |a| a.checked_add(1)) else {
                    return StorageReply::Entries(Vec::new());
                };
                // Dense addresses come first and are already in order.
                let mut found: Vec<Addr> = if first < DENSE_LIMIT {
                    (first as usize..self.dense.len())
                        .filter(|&i| self.dense[i].is_some())
                        .take(limit)
                        .map(|i| i as Addr)
                        .collect()
                } else {
                    Vec::new()
                };
                if found.len() < limit {
                    // Hash order is unstable: pick the lowest labels above the cursor. O(n)
                    // per call is fine for a scan that only recovery runs.
                    let mut labels: Vec<Addr> = self
                        .sparse
                        .keys()
                        .copied()
                        .filter(|a| *a >= first)
                        .collect();
                    let room = (limit - found.len()).min(labels.len());
                    if room < labels.len() {
                        labels.select_nth_unstable(room);
                        labels.truncate(room);
                    }
                    labels.sort_unstable();
                    found.extend(labels);
                }
                StorageReply::Entries(
                    found
                        .into_iter()
                        .filter_map(|a| Some((a, self.get(a)?.clone())))
                        .collect(),
                )
            }
        }
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        self.elements
    }

    /// Whether no element is held.
    pub fn is_empty(&self) -> bool {
        self.elements == 0
    }

    /// Total bytes of all elements.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The element at `addr`; with [`MemoryStore::replace`], for tests that play a malicious
    /// server.
    pub fn element(&self, addr: Addr) -> Option<Bytes> {
        self.get(addr).cloned()
    }

    /// Puts `bytes` at `addr`, whatever was there (tests that play a malicious server).
    pub fn replace(&mut self, addr: Addr, bytes: &[u8]) {
        self.put(addr, bytes);
    }

    /// Every address that holds an element, in ascending order.
    pub fn addresses(&self) -> Vec<Addr> {
        let dense = (0..self.dense.len())
            .filter(|&i| self.dense[i].is_some())
            .map(|i| i as Addr);
        dense.chain(self.sparse.keys().copied()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_visit_every_element_once_in_address_order() {
        let mut store = MemoryStore::new();
        let label = DENSE_LIMIT + 5;
        let writes = (0..10u128)
            .map(|a| (a * 7 % 10, Bytes::from(vec![a as u8])))
            .chain([
                (label, Bytes::from_static(b"l")),
                (label + 1, Bytes::from_static(b"m")),
            ])
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
        let mut want: Vec<Addr> = (0..10).collect();
        want.extend([label, label + 1]);
        assert_eq!(seen, want);
    }

    /// A scan that stopped at the last address (a full chunk ending at the store marker) asks
    /// for what comes after it: nothing, not the marker again (found when Path ORAM's 2^L − 1
    /// buckets and the marker made a whole number of chunks).
    #[test]
    fn nothing_comes_after_the_last_address() {
        let mut store = MemoryStore::new();
        store.apply(StorageOp::Write(vec![(
            Addr::MAX,
            Bytes::from_static(b"m"),
        )]));
        let reply = store.apply(StorageOp::Scan {
            after: Some(Addr::MAX),
            limit: 10,
        });
        assert!(matches!(reply, StorageReply::Entries(entries) if entries.is_empty()));
    }

    #[test]
    fn overwrites_reuse_buffers_and_counts_stay_right() {
        let mut store = MemoryStore::new();
        store.apply(StorageOp::Write(vec![(3, Bytes::from_static(b"abc"))]));
        let StorageReply::Values(held) = store.apply(StorageOp::Read(vec![3])) else {
            panic!()
        };
        // A reader still holds the old value: the write must not change what it sees.
        store.apply(StorageOp::Write(vec![(3, Bytes::from_static(b"xyz"))]));
        assert_eq!(held[0].as_deref(), Some(&b"abc"[..]));
        store.apply(StorageOp::Write(vec![(3, Bytes::from_static(b"longer"))]));
        store.apply(StorageOp::Write(vec![(
            DENSE_LIMIT,
            Bytes::from_static(b"l"),
        )]));
        assert_eq!((store.len(), store.bytes()), (2, 7));
        store.apply(StorageOp::Delete(vec![3, DENSE_LIMIT, 99]));
        assert_eq!((store.len(), store.bytes()), (0, 0));
        assert_eq!(
            store.apply(StorageOp::Read(vec![3])),
            StorageReply::Values(vec![None])
        );
    }
}
