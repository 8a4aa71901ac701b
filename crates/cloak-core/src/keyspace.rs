//! What the engine remembers of every key besides its slot: its type and its deadline.
//!
//! The envelope in each element is the durable copy (see [`crate::envelope`]); this is the
//! proxy's memory of it, rebuilt from the elements at recovery. It lets `TYPE`, `TTL` and the
//! type check of every command answer without touching storage (like `EXISTS`), and it tells
//! the reaper which keys are due, in deadline order.

use std::collections::BTreeSet;

use bytes::Bytes;
// Keys here are slots, never chosen by clients: a fast hash is safe.
use hashbrown::{HashMap, HashSet};

use crate::element::Slot;
use crate::envelope::Kind;

/// Each key's type and deadline, kept in memory beside the directory and rebuilt from the elements at start.
#[derive(Clone, Debug, Default)]
pub struct Keyspace {
    /// Slots holding hashes; every other key is a string.
    hashes: HashSet<Slot>,
    /// The deadline and key of every key that has one (the key, so the reaper can delete it).
    deadlines: HashMap<Slot, (u64, Bytes)>,
    /// The same deadlines, earliest first.
    due: BTreeSet<(u64, Slot)>,
}

impl Keyspace {
    /// The type of the key in `slot`.
    pub fn kind(&self, slot: Slot) -> Kind {
        if self.hashes.contains(&slot) {
            Kind::Hash
        } else {
            Kind::String
        }
    }

    /// The deadline of the key in `slot`, in Unix milliseconds.
    pub fn deadline(&self, slot: Slot) -> Option<u64> {
        self.deadlines.get(&slot).map(|(at, _)| *at)
    }

    /// The key in `slot`, when it has a deadline (the keys the reaper may delete).
    pub fn key_of(&self, slot: Slot) -> Option<&Bytes> {
        self.deadlines.get(&slot).map(|(_, key)| key)
    }

    /// The keys that have a deadline, in no order.
    pub fn expiring_keys(&self) -> impl Iterator<Item = &Bytes> {
        self.deadlines.values().map(|(_, key)| key)
    }

    /// Records what `slot` holds now.
    pub fn set(&mut self, slot: Slot, key: &[u8], kind: Kind, deadline: Option<u64>) {
        self.clear(slot);
        if kind == Kind::Hash {
            self.hashes.insert(slot);
        }
        if let Some(at) = deadline {
            self.deadlines
                .insert(slot, (at, Bytes::copy_from_slice(key)));
            self.due.insert((at, slot));
        }
    }

    /// Forgets `slot` (its key was deleted).
    pub fn clear(&mut self, slot: Slot) {
        self.hashes.remove(&slot);
        if let Some((at, _)) = self.deadlines.remove(&slot) {
            self.due.remove(&(at, slot));
        }
    }

    /// How many keys have a deadline (`INFO`'s `expires=`).
    pub fn expiring(&self) -> usize {
        self.deadlines.len()
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Every deadline and its slot, earliest first.
    pub fn by_deadline(&self) -> impl Iterator<Item = (u64, Slot)> + '_ {
        self.due.iter().copied()
    }

    /// The slots and keys whose deadline is at or before `now`, earliest first.
    pub fn due(&self, now: u64) -> impl Iterator<Item = (Slot, &Bytes)> {
        self.due
            .iter()
            .take_while(move |(at, _)| *at <= now)
            .map(|(_, slot)| (*slot, &self.deadlines[slot].1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::Record;
    use crate::envelope::{Entry, EnvelopeError};
    use crate::recovery::RecoveredRecords;

    #[test]
    fn deadlines_come_due_in_order_and_restore_from_envelopes() {
        let record = |key: &'static [u8], deadline| Record {
            version: 1,
            key: Bytes::from_static(key),
            value: Entry {
                kind: Kind::String,
                deadline,
                data: Bytes::new(),
            }
            .seal(),
        };
        let records = vec![
            (1, record(b"late", Some(300))),
            (2, record(b"early", Some(100))),
            (3, record(b"never", None)),
            (4, Record::empty()),
        ];
        let mut keyspace = RecoveredRecords::from(records).keyspace().unwrap();
        assert_eq!(keyspace.expiring(), 2);
        assert_eq!(keyspace.next_deadline(), Some(100));
        let due: Vec<Slot> = keyspace.due(300).map(|(slot, _)| slot).collect();
        assert_eq!(due, vec![2, 1]);
        keyspace.clear(2);
        assert_eq!(keyspace.due(299).count(), 0);
        keyspace.set(3, &Bytes::from_static(b"never"), Kind::Hash, None);
        assert_eq!(keyspace.kind(3), Kind::Hash);

        let bare = vec![(
            7,
            Record {
                version: 1,
                key: Bytes::from_static(b"old"),
                value: Bytes::from_static(b"no envelope"),
            },
        )];
        assert_eq!(
            RecoveredRecords::from(bare).keyspace().err(),
            Some((7, EnvelopeError::Missing))
        );
    }
}
