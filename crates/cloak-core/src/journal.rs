//! What the proxy's journal holds: for each slot, the newest record a scheme asked to keep.
//!
//! This is the journal's meaning; the simulator uses it as is and the proxy's durable journal
//! (in `--state-dir`) applies the same rules to what it stores.

use std::collections::HashMap;

use crate::element::{Record, Slot};
use crate::scheme::JournalOp;

/// The journal's content: the newest kept record of each slot (in memory; the proxy's
/// journal file replays into one).
#[derive(Clone, Debug, Default)]
pub struct JournalMap {
    records: HashMap<Slot, Record>,
}

impl JournalMap {
    /// Applies a journal request: keeps newer records, drops released ones.
    pub fn apply(&mut self, op: JournalOp) {
        match op {
            JournalOp::Keep(records) => {
                for (slot, record) in records {
                    if keeps(self.records.get(&slot).map(|r| r.version), record.version) {
                        self.records.insert(slot, record);
                    }
                }
            }
            JournalOp::Release(slots) => {
                for (slot, version) in slots {
                    if self
                        .records
                        .get(&slot)
                        .is_some_and(|r| releases(r.version, version))
                    {
                        self.records.remove(&slot);
                    }
                }
            }
        }
    }

    /// Slots with a kept record.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is kept.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every kept record, by slot.
    pub fn records(&self) -> impl Iterator<Item = (Slot, &Record)> {
        self.records.iter().map(|(s, r)| (*s, r))
    }
}

/// Whether a journal holding `held` should take a record of version `incoming`.
pub fn keeps(held: Option<u64>, incoming: u64) -> bool {
    held.is_none_or(|held| held <= incoming)
}

/// Whether a release up to `released` drops an entry of version `held`.
pub fn releases(held: u64, released: u64) -> bool {
    held <= released
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(version: u64) -> Record {
        Record {
            version,
            key: "k".into(),
            value: "v".into(),
        }
    }

    #[test]
    fn newest_version_wins_and_releases_only_drop_what_storage_has() {
        let mut j = JournalMap::default();
        j.apply(JournalOp::Keep(vec![(1, rec(5)), (2, rec(3))]));
        j.apply(JournalOp::Keep(vec![(1, rec(4))]));
        assert_eq!(j.records().find(|(s, _)| *s == 1).unwrap().1.version, 5);
        j.apply(JournalOp::Release(vec![(1, 4), (2, 3)]));
        assert_eq!(
            j.len(),
            1,
            "slot 1 holds version 5, newer than what storage has"
        );
        j.apply(JournalOp::Release(vec![(1, 5)]));
        assert!(j.is_empty());
    }
}
