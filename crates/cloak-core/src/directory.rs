//! The key directory: which logical slot holds which client key.
//!
//! Keys are stored as 96 bits of a keyed hash (see `cloak_crypto::KeyHasher`): 16 bytes per key
//! with the slot, plus the table's overhead, whatever the key length. Clients cannot aim for a
//! collision without the hash key, and two of a billion keys collide by chance with probability
//! about 2^-37. The full key lives in the element and the engine compares it on every read, so
//! even then a read would answer nothing rather than another key's value.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use cloak_crypto::KeyHasher;

use crate::element::Slot;

/// The table's keys are already uniformly random, so their first 8 bytes are the hash.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(word);
        }
    }
}

type Hash = [u8; 12];

fn hash(hasher: &KeyHasher, key: &[u8]) -> Hash {
    let full = hasher.hash(key);
    full[..12].try_into().expect("12 of 16 bytes")
}

pub struct KeyDirectory {
    hasher: KeyHasher,
    slots: HashMap<Hash, u32, BuildHasherDefault<PassThrough>>,
    /// Slots not holding a key; popped from the end, and shrunk as the store fills.
    free: Vec<u32>,
    capacity: usize,
}

impl KeyDirectory {
    /// An empty directory handing out slots `0..capacity`.
    pub fn new(hasher: KeyHasher, capacity: usize) -> Self {
        assert!(capacity <= u32::MAX as usize, "capacity fits in 32 bits");
        Self {
            hasher,
            // Sized for a full store now, so it never resizes under load (and never leaves the
            // old table's memory behind in the allocator).
            slots: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            free: (0..capacity as u32).rev().collect(),
            capacity,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        self.slots
            .get(&hash(&self.hasher, key))
            .map(|&s| Slot::from(s))
    }

    /// The key's slot, allocating a free one for a new key: `Some((slot, is_new))`, or `None`
    /// when the key is new and no slot is free.
    pub fn get_or_insert(&mut self, key: &[u8]) -> Option<(Slot, bool)> {
        let hash = hash(&self.hasher, key);
        if let Some(&slot) = self.slots.get(&hash) {
            return Some((Slot::from(slot), false));
        }
        let slot = self.free.pop()?;
        // A full store needs no free list: give its memory back as it fills.
        if self.free.capacity() > 1024 && self.free.len() < self.free.capacity() / 4 {
            self.free.shrink_to(self.free.len() * 2);
        }
        self.slots.insert(hash, slot);
        Some((Slot::from(slot), true))
    }

    /// Forgets a key. Its slot is not reusable until [`KeyDirectory::release`]: the caller first
    /// makes sure storage no longer holds the old record.
    pub fn remove(&mut self, key: &[u8]) -> Option<Slot> {
        self.slots.remove(&hash(&self.hasher, key)).map(Slot::from)
    }

    pub fn release(&mut self, slot: Slot) {
        self.free.push(slot as u32);
    }

    /// A directory holding `keys` at their slots (after recovery), every other slot free.
    pub fn restore<'a>(
        hasher: KeyHasher,
        capacity: usize,
        keys: impl IntoIterator<Item = (Slot, &'a [u8])>,
    ) -> Self {
        let mut directory = Self::new(hasher, capacity);
        let mut taken = vec![false; capacity];
        for (slot, key) in keys {
            let hash = hash(&directory.hasher, key);
            directory.slots.insert(hash, slot as u32);
            taken[slot as usize] = true;
        }
        directory.free.retain(|&s| !taken[s as usize]);
        directory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_crypto::MasterKey;

    #[test]
    fn allocates_until_full_and_reuses_released_slots() {
        let mut d = KeyDirectory::new(KeyHasher::new(&MasterKey::from_bytes([0; 32])), 2);
        assert_eq!(d.get_or_insert(b"a"), Some((0, true)));
        assert_eq!(d.get_or_insert(b"a"), Some((0, false)));
        assert_eq!(d.get_or_insert(b"b"), Some((1, true)));
        assert_eq!(d.get_or_insert(b"c"), None);
        assert_eq!(d.remove(b"a"), Some(0));
        assert_eq!(d.get_or_insert(b"c"), None, "slot 0 is not released yet");
        d.release(0);
        assert_eq!(d.get_or_insert(b"c"), Some((0, true)));
        assert_eq!(d.get(b"b"), Some(1));
        assert_eq!(d.len(), 2);
    }
}
