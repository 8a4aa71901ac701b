//! Reading a recovered record for the initial fill.
//!
//! Recovered values wait in recovery's spool on local disk until the fill places them
//! ([`RecoveredRecords::read_all`]). If one cannot be read back, the fill must still write the
//! slot's element (the fill writes every address whatever the data, so the server sees nothing
//! of it), but never as a silently empty key: the slot is marked corrupt, so reads of its key
//! fail with an integrity error until a client writes it again, and the empty record goes out at
//! version 0, below the version the ledger expects, so the next start names the slot as lost.

use cloak_core::recovery::leak_demo;
use cloak_core::{Record, RecoveredRecords, SchemeError, Slot};

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
/// `request` is the number of elements of the storage request these records go out in: so
/// many elements are read back from the spool whatever the slots hold, so that how long a
/// request takes to prepare does not tell the server how many of its elements carry records.
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
                tracing::error!(
                    slot,
                    %error,
                    "a recovered record is lost: reads of its key fail until a client writes it \
                     again"
                );
                corrupt.extend([slot]);
                *losses += 1;
                Record::empty()
            })
        })
        .collect()
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
}
