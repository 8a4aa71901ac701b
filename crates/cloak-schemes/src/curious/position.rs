//! The position map (Figure 3, local state 1): where each slot's block is.
//!
//! A block exists for every slot that was ever written (a deleted slot keeps an empty record,
//! whose version tells recovery that older copies are dead). It is in exactly one place: in a
//! subORAM on the path to its leaf, or in the eviction cache. A block being fetched is still
//! in its subORAM until the access that fetches it reads the path.

/// Where a slot's block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Never written: no block anywhere; reads see an empty record.
    Absent,
    /// Its block failed authentication (or vanished from storage); reads fail until a write.
    Lost,
    /// In subORAM `sub`, on the path to `leaf` (or on its way there in a write-back).
    Stored { sub: u32, leaf: u32 },
    /// In subORAM `sub` on the path to `leaf`, and an access that will retrieve it is scheduled:
    /// the block is "in transit" (§6.2).
    Fetching { sub: u32, leaf: u32 },
    /// In the eviction cache.
    Cached,
}

pub struct PositionMap {
    places: Vec<Place>,
}

impl PositionMap {
    pub fn new(slots: usize) -> Self {
        Self {
            places: vec![Place::Absent; slots],
        }
    }

    pub fn len(&self) -> usize {
        self.places.len()
    }

    pub fn get(&self, slot: u32) -> Place {
        self.places[slot as usize]
    }

    pub fn set(&mut self, slot: u32, place: Place) {
        self.places[slot as usize] = place;
    }

    /// Where `slot` sits in subORAM `sub`, if it does (fetched or not).
    pub fn leaf_in(&self, slot: u32, sub: u32) -> Option<u32> {
        match self.get(slot) {
            Place::Stored { sub: s, leaf } | Place::Fetching { sub: s, leaf } if s == sub => {
                Some(leaf)
            }
            _ => None,
        }
    }
}
