//! The version of every slot's last acknowledged write, kept by slot number.
//!
//! Every slot a store hands out is below its capacity, and a store that has run a while has
//! written most of them, so a vector indexed by slot costs 8 bytes a slot where a hash map of
//! (slot, version) pairs cost about 36 (16-byte entries, a control byte, and buckets at most
//! 7/8 full rounded up to a power of two: 2^21 of them for a million slots). Version 0 means
//! "never written", as it does in the ledger. Slots at or beyond the capacity can only come from
//! what recovery found in storage (a freed slot a larger store once used); they are kept apart
//! so the ledger still names them, and are never written again.

use crate::element::Slot;
use crate::integrity::SlotVersions;

/// Slot versions (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Acknowledged {
    /// By slot below the capacity; 0: never written.
    by_slot: Vec<u64>,
    /// Slots recovery found at or beyond the capacity.
    beyond: SlotVersions,
}

impl Acknowledged {
    /// No version for any of slots `0..capacity`.
    pub fn new(capacity: usize) -> Self {
        Self {
            by_slot: vec![0; capacity],
            beyond: SlotVersions::new(),
        }
    }

    /// Records that `slot` holds `version` or a later one.
    pub fn raise(&mut self, slot: Slot, version: u64) {
        let known = match usize::try_from(slot)
            .ok()
            .and_then(|i| self.by_slot.get_mut(i))
        {
            Some(known) => known,
            None => self.beyond.entry(slot).or_default(),
        };
        *known = (*known).max(version);
    }

    /// Every slot with a version above 0, and its version.
    pub fn versions(&self) -> SlotVersions {
        let by_slot = self
            .by_slot
            .iter()
            .enumerate()
            .filter(|(_, version)| **version > 0)
            .map(|(slot, version)| (slot as Slot, *version));
        let beyond = self.beyond.iter().filter(|(_, version)| **version > 0);
        by_slot
            .chain(beyond.map(|(slot, version)| (*slot, *version)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_highest_version_of_every_slot_beyond_the_capacity_too() {
        let mut acknowledged = Acknowledged::new(4);
        acknowledged.raise(1, 5);
        acknowledged.raise(1, 3);
        acknowledged.raise(3, 0);
        acknowledged.raise(9, 7);
        acknowledged.raise(9, 8);
        let expected: SlotVersions = [(1, 5), (9, 8)].into_iter().collect();
        assert_eq!(acknowledged.versions(), expected);
    }
}
