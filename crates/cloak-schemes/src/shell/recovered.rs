//! The recovered records a new instance's fill writes, handed out one slot at a time.
//!
//! A fill asks for every slot's record once, in the random order of its new layout. Keeping
//! them in the vector recovery sorted by slot, and finding each by binary search, costs nothing
//! beyond the records themselves; a hash map of them cost about twice their count in 72-byte
//! buckets (150 MB at a million records, on top of the 80 MB vector it was built from). Each
//! value is dropped as the fill takes it, so a restart's memory falls as the fill goes.

use cloak_core::{Record, Slot};

/// Recovered records by slot (see the module docs).
#[derive(Debug, Default)]
pub struct RecoveredRecords {
    /// Sorted by slot, one record per slot; a taken record is left empty.
    records: Vec<(Slot, Record)>,
}

impl RecoveredRecords {
    /// The records of `records`; of two for one slot, the later one counts (as when they were
    /// collected into a map).
    pub fn new(mut records: Vec<(Slot, Record)>) -> Self {
        // Stable, and linear on the sorted input recovery gives.
        records.sort_by_key(|(slot, _)| *slot);
        records.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        Self { records }
    }

    /// Records some client wrote (version above 0).
    pub fn written(&self) -> u64 {
        self.records.iter().filter(|(_, r)| r.version > 0).count() as u64
    }

    /// `slot`'s record, leaving it empty here: a fill takes each slot once. Empty for a slot
    /// recovery found nothing for.
    pub fn take(&mut self, slot: Slot) -> Record {
        match self.records.binary_search_by_key(&slot, |(s, _)| *s) {
            Ok(i) => std::mem::take(&mut self.records[i].1),
            Err(_) => Record::empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn record(version: u64) -> Record {
        Record {
            version,
            key: Bytes::from(format!("key {version}")),
            value: Bytes::from_static(b"value"),
        }
    }

    #[test]
    fn each_slot_gives_its_latest_record_once() {
        let mut records = RecoveredRecords::new(vec![
            (9, record(1)),
            (3, record(2)),
            (9, record(3)),
            (5, Record::empty()),
        ]);
        assert_eq!(
            records.written(),
            2,
            "slot 9 once, slot 3; not the empty slot 5"
        );
        assert_eq!(records.take(9), record(3), "the later of two for a slot");
        assert_eq!(records.take(9), Record::empty(), "taken once");
        assert_eq!(records.take(3), record(2));
        assert_eq!(records.take(4), Record::empty(), "nothing recovered there");
        assert_eq!(records.written(), 0);
    }
}
