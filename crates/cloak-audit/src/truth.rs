//! Ground truth: which keys the element behind every access held. Only the auditor knows it: it
//! holds the key, so it opens every element storage receives (`Simulator::tap`) the way the
//! proxy's crash recovery does (`ElementFormat::records`), and remembers what each address holds.
//! Attacks never see it; it is how their guesses are scored.
//!
//! It also notes what needs no key at all: written elements whose client key appears in them
//! verbatim (a plaintext store).

use std::collections::HashMap;
use std::sync::Arc;

use cloak_bench::workload::key_number;
use cloak_core::{Addr, ElementFormat, MemoryStore, StorageOp};

/// The workload keys one element held (several for a bucket, none for a dummy or an empty slot).
pub type Keys = Arc<[u64]>;

#[derive(Clone, Debug, Default)]
pub struct Truth {
    /// For every access, in the order storage received them, the keys its element held.
    pub accesses: Vec<Keys>,
    /// Storage requests seen.
    pub requests: usize,
    /// Elements written, and how many of them carry their key in the clear.
    pub written: u64,
    pub plaintext: u64,
}

pub struct TruthRecorder {
    /// The encodings elements may be in, tried in order.
    formats: Vec<ElementFormat>,
    contents: HashMap<Addr, Keys>,
    nothing: Keys,
    truth: Truth,
}

impl TruthRecorder {
    /// Starts from what `store` holds now; elements are opened with the first of `formats` that
    /// opens them (a scheme's elements are all in one format, so no scheme needs naming).
    pub fn new(formats: Vec<ElementFormat>, store: &MemoryStore) -> Self {
        let mut recorder = Self {
            formats,
            contents: HashMap::new(),
            nothing: Arc::from([]),
            truth: Truth::default(),
        };
        for addr in store.addresses() {
            if let Some(element) = store.element(addr) {
                let keys = recorder.open(addr, &element).0;
                recorder.contents.insert(addr, keys);
            }
        }
        recorder
    }

    /// The keys `element` holds at `addr`, and whether one of them is visible in the clear.
    fn open(&self, addr: Addr, element: &[u8]) -> (Keys, bool) {
        let element_bytes = bytes::Bytes::copy_from_slice(element);
        let Some(records) = self
            .formats
            .iter()
            .find_map(|format| format.records(addr, &element_bytes).ok())
            .map(|(_, records)| records)
        else {
            return (self.nothing.clone(), false);
        };
        let clear = records.iter().any(|(_, record)| {
            !record.key.is_empty()
                && element
                    .windows(record.key.len())
                    .any(|w| w == record.key.as_ref())
        });
        let keys: Vec<u64> = records
            .iter()
            .filter_map(|(_, record)| key_number(&record.key))
            .collect();
        (Arc::from(keys), clear)
    }

    /// Notes one request as storage receives it.
    pub fn observe(&mut self, op: &StorageOp) {
        self.truth.requests += 1;
        match op {
            StorageOp::Read(addrs) => {
                for addr in addrs {
                    let keys = self.contents.get(addr).unwrap_or(&self.nothing).clone();
                    self.truth.accesses.push(keys);
                }
            }
            StorageOp::Write(writes) => {
                for (addr, element) in writes {
                    let (keys, clear) = self.open(*addr, element);
                    self.truth.written += 1;
                    self.truth.plaintext += u64::from(clear);
                    self.contents.insert(*addr, keys.clone());
                    self.truth.accesses.push(keys);
                }
            }
            StorageOp::Delete(addrs) => {
                for addr in addrs {
                    let keys = self.contents.remove(addr).unwrap_or(self.nothing.clone());
                    self.truth.accesses.push(keys);
                }
            }
            StorageOp::Scan { after, .. } => {
                let cursor = after.iter().map(|_| self.nothing.clone());
                self.truth.accesses.extend(cursor);
            }
        }
    }

    /// What was recorded so far; recording goes on from empty.
    pub fn take(&mut self) -> Truth {
        std::mem::take(&mut self.truth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use cloak_bench::workload::key_name;
    use cloak_core::{ElementCodec, Record, RecordLayout};
    use cloak_crypto::{Binding, MasterKey, Sealer};

    const LAYOUT: RecordLayout = RecordLayout {
        max_key: 32,
        max_value: 8,
    };

    fn record(key: u64) -> Record {
        Record {
            version: 1,
            key: Bytes::from(key_name(key)),
            value: Bytes::from_static(b"v"),
        }
    }

    #[test]
    fn follows_what_each_address_holds() {
        let master = MasterKey::from_bytes([3; 32]);
        let codec = || ElementCodec::new(LAYOUT, Sealer::new(&master).unwrap());
        let mut sealing = codec();
        let mut seal = |addr: Addr, key: u64| {
            let binding = Binding {
                address: addr,
                generation: 1,
            };
            sealing.seal(binding, key, &record(key))
        };
        let mut store = MemoryStore::new();
        store.apply(StorageOp::Write(vec![(1, seal(1, 10))]));
        let mut recorder = TruthRecorder::new(vec![ElementFormat::Sealed(codec())], &store);
        recorder.observe(&StorageOp::Read(vec![1, 2]));
        recorder.observe(&StorageOp::Write(vec![(2, seal(2, 20)), (1, seal(1, 30))]));
        recorder.observe(&StorageOp::Read(vec![2, 1]));
        recorder.observe(&StorageOp::Delete(vec![2]));
        recorder.observe(&StorageOp::Read(vec![2]));
        let truth = recorder.take();
        let keys: Vec<Vec<u64>> = truth.accesses.iter().map(|k| k.to_vec()).collect();
        assert_eq!(
            keys,
            [
                vec![10],
                vec![],
                vec![20],
                vec![30],
                vec![20],
                vec![30],
                vec![20],
                vec![]
            ]
        );
        assert_eq!((truth.requests, truth.written, truth.plaintext), (5, 2, 0));
    }

    #[test]
    fn sees_plaintext_keys() {
        let mut plain = Vec::new();
        LAYOUT.encode_compact(4, &record(4), &mut plain);
        let mut recorder =
            TruthRecorder::new(vec![ElementFormat::Plain(LAYOUT)], &MemoryStore::new());
        recorder.observe(&StorageOp::Write(vec![(4, Bytes::from(plain))]));
        let truth = recorder.take();
        assert_eq!(truth.accesses[0].to_vec(), [4]);
        assert_eq!((truth.written, truth.plaintext), (1, 1));
    }
}
