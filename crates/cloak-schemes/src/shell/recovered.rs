//! Reading a recovered record for the initial fill, or for a scheme that writes each record back
//! to its own place ([`Restore`]).
//!
//! Recovered values wait in recovery's spool on local disk until the fill places them
//! ([`RecoveredRecords::read_all`]). If one cannot be read back, the fill must still write the
//! slot's element (the fill writes every address whatever the data, so the server sees nothing
//! of it), but never as a silently empty key: the slot is marked corrupt, so reads of its key
//! fail with an integrity error until a client writes it again, and the empty record goes out at
//! version 0, below the version the ledger expects, so the next start names the slot as lost.

use cloak_core::recovery::leak_demo;
use cloak_core::{Record, RecoveredRecords, RecoveryError, SchemeError, Slot};

/// `slot`'s recovered record for a client's read before the fill is done: read back from the
/// spool on local disk, with no storage request (the schemes that call this say why that
/// shows the server nothing). A record that cannot be read back is an integrity error, as the
/// fill will find it.
pub fn read_for_client(initial: &mut RecoveredRecords, slot: u32) -> Result<Record, SchemeError> {
    initial.read(Slot::from(slot)).map_err(|error| {
        SchemeError::Integrity(format!(
            "this key's recovered record cannot be read back: {error}"
        ))
    })
}

/// The recovered records of `slots` for the fill, in that order (read back a request's worth at
/// a time, see [`RecoveredRecords::read_all`]); a record that cannot be read back is logged, its
/// slot goes into `corrupt`, `losses` counts it, and the fill writes it empty (see the module
/// docs).
///
/// `request` is the most elements of the spool the records of the storage request they go out
/// in could come from, which is public: the request's elements times the records an element
/// holds (one, or a tree scheme's blocks a bucket). So many elements are read back from the
/// spool whatever the slots hold, so that how long a request takes to prepare does not tell the
/// server how many of its elements carry records.
pub fn take_for_fill(
    initial: &mut RecoveredRecords,
    slots: &[u32],
    request: usize,
    corrupt: &mut impl Extend<u32>,
    losses: &mut u64,
) -> Vec<Record> {
    let wanted: Vec<Slot> = slots.iter().map(|&slot| Slot::from(slot)).collect();
    let taken = initial.read_all(&wanted, request);
    leak_demo::slow_live_records(
        taken
            .iter()
            .filter(|taken| taken.as_ref().is_ok_and(|record| record.version > 0))
            .count(),
    );
    slots
        .iter()
        .zip(taken)
        .map(|(&slot, taken)| {
            taken.unwrap_or_else(|error| {
                lost(u64::from(slot), &error, losses);
                corrupt.extend([slot]);
                Record::empty()
            })
        })
        .collect()
}

/// A recovered record could not be read back: logged and counted; its caller marks the slot
/// corrupt, so reads of its key fail until a client writes it again.
fn lost(slot: Slot, error: &RecoveryError, losses: &mut u64) {
    tracing::error!(
        slot,
        %error,
        "a recovered record is lost: reads of its key fail until a client writes it again"
    );
    *losses += 1;
}

/// The recovered records of a scheme that writes each back to its own place (`encrypted`,
/// `unsafe`), handed over a chunk at a time and read back from recovery's spool as each chunk
/// goes out: a restart holds the values of the chunks in flight, never the store's (issue 17).
/// A client's op on a recovered slot may take its record before its turn ([`Restore::take`]).
///
/// A record that cannot be read back is logged and counted in `losses`, and its slot goes into
/// `corrupt` (see the module docs); it is handed over as nothing.
#[derive(Debug, Default)]
pub struct Restore {
    records: RecoveredRecords,
    /// Slots holding a key, in the order their values sit in the spool, so the chunks walk it
    /// forward; the chunks have got to `next`.
    order: Vec<Slot>,
    next: usize,
    /// Whether a recovered slot's record has been handed over, by slot.
    handed: Vec<bool>,
    /// Records not handed over yet.
    left: u64,
}

impl Restore {
    /// A restore of `records`' slots that hold a key (a freed slot needs nothing written).
    pub fn new(records: RecoveredRecords) -> Self {
        let order = records.live_in_spool_order();
        let highest = order.iter().max().map_or(0, |&slot| slot as usize + 1);
        Self {
            left: order.len() as u64,
            handed: vec![false; highest],
            order,
            next: 0,
            records,
        }
    }

    /// Records not handed over yet.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// Every record has been handed over.
    pub fn is_done(&self) -> bool {
        self.left == 0
    }

    /// The next `max` records not handed over yet (fewer at the end), in spool order.
    pub fn next_chunk(
        &mut self,
        max: usize,
        corrupt: &mut impl Extend<Slot>,
        losses: &mut u64,
    ) -> Vec<(Slot, Record)> {
        if self.is_done() {
            return Vec::new();
        }
        let mut slots = Vec::with_capacity(max.min(self.left as usize));
        while slots.len() < max
            && let Some(&slot) = self.order.get(self.next)
        {
            self.next += 1;
            if self.hand_over(slot) {
                slots.push(slot);
            }
        }
        let records = self.records.read_all(&slots, 0);
        let chunk = slots
            .into_iter()
            .zip(records)
            .filter_map(|(slot, record)| match record {
                Ok(record) => Some((slot, record)),
                Err(error) => {
                    lost(slot, &error, losses);
                    corrupt.extend([slot]);
                    None
                }
            })
            .collect();
        self.release_when_done();
        chunk
    }

    /// `slot`'s record, if it was recovered and is not handed over yet (a client's op on it is
    /// about to run, and must find it first). `None` too if it cannot be read back (see the
    /// type's docs).
    pub fn take(
        &mut self,
        slot: Slot,
        corrupt: &mut impl Extend<Slot>,
        losses: &mut u64,
    ) -> Option<Record> {
        if !self.hand_over(slot) {
            return None;
        }
        let record = self.records.read(slot);
        self.release_when_done();
        record
            .inspect_err(|error| {
                lost(slot, error, losses);
                corrupt.extend([slot]);
            })
            .ok()
    }

    /// Marks `slot`'s record handed over; `false` if it is not a recovered slot's or was
    /// handed over before.
    fn hand_over(&mut self, slot: Slot) -> bool {
        let Some(handed) = usize::try_from(slot)
            .ok()
            .and_then(|at| self.handed.get_mut(at))
        else {
            return false;
        };
        if *handed || self.records.get(slot).is_none_or(|(_, key)| key.is_none()) {
            return false;
        }
        *handed = true;
        self.left -= 1;
        true
    }

    /// Once every record is handed over, drops the table and the lists (their peak size).
    fn release_when_done(&mut self) {
        if self.is_done() {
            *self = Self::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn a_record_read_back_is_handed_over_and_nothing_is_marked() {
        let record = Record {
            version: 4,
            key: Bytes::from_static(b"key"),
            value: Bytes::from_static(b"value"),
        };
        let mut initial = RecoveredRecords::from(vec![(2, record.clone())]);
        let (mut corrupt, mut losses) = (Vec::new(), 0);
        assert_eq!(
            take_for_fill(&mut initial, &[3, 2], 2, &mut corrupt, &mut losses),
            [Record::empty(), record]
        );
        assert!(corrupt.is_empty());
        assert_eq!(losses, 0);
    }

    fn recovered(slots: &[u64]) -> RecoveredRecords {
        let record = |slot: u64| Record {
            version: slot + 1,
            key: Bytes::from(format!("k{slot}")),
            value: Bytes::from(format!("v{slot}")),
        };
        let mut records: Vec<(Slot, Record)> = slots.iter().map(|&s| (s, record(s))).collect();
        // A freed slot: recovered, with no key, so nothing to restore.
        records.push((
            7,
            Record {
                version: 3,
                ..Record::empty()
            },
        ));
        RecoveredRecords::from(records)
    }

    #[test]
    fn a_restore_hands_each_record_over_once_in_chunks_or_out_of_turn() {
        let mut restore = Restore::new(recovered(&[1, 2, 4, 5, 9]));
        let (mut corrupt, mut losses) = (Vec::new(), 0);
        assert_eq!(restore.left(), 5);
        let slots = |chunk: Vec<(Slot, Record)>| -> Vec<Slot> {
            chunk
                .into_iter()
                .inspect(|(slot, record)| assert_eq!(record.value, format!("v{slot}")))
                .map(|(slot, _)| slot)
                .collect()
        };
        assert_eq!(
            slots(restore.next_chunk(2, &mut corrupt, &mut losses)),
            [1, 2]
        );
        // A client's op takes slot 5 before its turn; slot 2 went with the chunk, slots 3 and 7
        // hold nothing to restore, and slot 100 was never recovered.
        let taken = restore.take(5, &mut corrupt, &mut losses);
        assert_eq!(taken.map(|r| r.value), Some(Bytes::from("v5")));
        for slot in [5, 2, 3, 7, 100] {
            assert!(
                restore.take(slot, &mut corrupt, &mut losses).is_none(),
                "{slot}"
            );
        }
        assert_eq!(restore.left(), 2);
        assert_eq!(
            slots(restore.next_chunk(2, &mut corrupt, &mut losses)),
            [4, 9]
        );
        assert!(restore.is_done());
        assert!(restore.next_chunk(2, &mut corrupt, &mut losses).is_empty());
        assert!(corrupt.is_empty());
        assert_eq!(losses, 0);
    }

    #[test]
    fn a_restore_done_out_of_turn_drops_its_table() {
        let mut restore = Restore::new(recovered(&[3]));
        let (mut corrupt, mut losses) = (Vec::new(), 0);
        assert!(restore.take(3, &mut corrupt, &mut losses).is_some());
        assert!(restore.is_done());
        assert!(restore.records.is_empty() && restore.handed.is_empty());
    }
}
