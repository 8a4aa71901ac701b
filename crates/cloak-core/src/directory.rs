//! The key directory: which logical slot holds which client key.
//!
//! Keys are stored as 96 bits of a keyed hash (see `cloak_crypto::KeyHasher`): about 22 bytes
//! per slot with the index that finds them, whatever the key length. Clients cannot aim for a
//! collision without the hash key, and two of a billion keys collide by chance with probability
//! about 2^-37. The full key lives in the element and the engine compares it on every read, so
//! even then a read would answer nothing rather than another key's value.
//!
//! The keys themselves are kept too, by slot, for the commands that list keys (KEYS, SCAN,
//! RANDOMKEY, FLUSHDB): 16 bytes a slot plus the key's own bytes. Listing therefore needs no
//! storage access at all, and the storage server sees nothing of it.
//!
//! A key can also be *designated* a slot before it exists ([`KeyDirectory::designate`]): the
//! slot is kept for that key alone (it is not in the free list, and it returns to the key, not
//! to the free list, when the key is deleted), while `get` still says the key does not exist.
//! Schemes only know slots; this lets the proxy tell a scheme about named keys at build time
//! (Pancake's access distribution from a key-weight file).

use std::collections::{HashMap, HashSet};

use cloak_crypto::KeyHasher;
use hashbrown::HashTable;

use crate::element::Slot;

type Hash = [u8; 12];

fn hash(hasher: &KeyHasher, key: &[u8]) -> Hash {
    let full = hasher.hash(key);
    full[..12].try_into().expect("12 of 16 bytes")
}

/// A key hash is already uniformly random: its first 8 bytes serve as the table's hash.
fn table_hash(hash: &Hash) -> u64 {
    u64::from_le_bytes(hash[..8].try_into().expect("8 of 12 bytes"))
}

/// Which slot holds which key hash, in about 22 bytes a slot at full load: each slot's hash in a
/// vector indexed by slot, and a table of slot numbers (4 bytes a bucket) that finds a hash's
/// slot by looking its candidates up in that vector. A map from hash to slot would spend a
/// 16-byte bucket on each entry, and keep up to twice as many buckets as keys.
struct Slots {
    /// The hash of the key each slot holds; meaningful only for slots in `index`.
    held: Vec<Hash>,
    index: HashTable<u32>,
}

impl Slots {
    fn with_capacity(capacity: usize) -> Self {
        Self {
            held: vec![[0; 12]; capacity],
            index: HashTable::with_capacity(capacity),
        }
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn get(&self, hash: &Hash) -> Option<u32> {
        self.index
            .find(table_hash(hash), |&slot| self.held[slot as usize] == *hash)
            .copied()
    }

    /// Records `hash` at `slot`; the caller knows `hash` is not in the table yet.
    fn insert(&mut self, hash: Hash, slot: u32) {
        self.held[slot as usize] = hash;
        let held = &self.held;
        self.index.insert_unique(table_hash(&hash), slot, |&slot| {
            table_hash(&held[slot as usize])
        });
    }

    fn remove(&mut self, hash: &Hash) -> Option<u32> {
        let held = &self.held;
        let entry = self
            .index
            .find_entry(table_hash(hash), |&slot| held[slot as usize] == *hash)
            .ok()?;
        Some(entry.remove().0)
    }
}

/// Which slot each key has: keys are stored as keyed hashes, slots handed out from a free
/// list.
pub struct KeyDirectory {
    hasher: KeyHasher,
    slots: Slots,
    /// Slots not holding a key; popped from the end, and shrunk as the store fills.
    free: Vec<u32>,
    capacity: usize,
    /// Keys given a slot in advance, and those slots.
    designated: HashMap<Hash, u32>,
    designated_slots: HashSet<u32>,
    /// The key each slot holds, for listing; `None` for slots holding none.
    names: Vec<Option<Box<[u8]>>>,
}

impl KeyDirectory {
    /// An empty directory handing out slots `0..capacity`.
    pub fn new(hasher: KeyHasher, capacity: usize) -> Self {
        assert!(capacity <= u32::MAX as usize, "capacity fits in 32 bits");
        Self {
            hasher,
            // Sized for a full store now, so it never resizes under load (and never leaves the
            // old table's memory behind in the allocator).
            slots: Slots::with_capacity(capacity),
            free: (0..capacity as u32).rev().collect(),
            capacity,
            designated: HashMap::new(),
            designated_slots: Default::default(),
            names: vec![None; capacity],
        }
    }

    /// The key `slot` holds, if any.
    pub fn key_at(&self, slot: Slot) -> Option<&[u8]> {
        self.names.get(slot as usize)?.as_deref()
    }

    /// The keys held at slots `from..`, in slot order, with their slots. A key keeps its slot for
    /// as long as it exists, so walking slots in order (SCAN's cursor) meets every key that
    /// exists throughout the walk exactly once, whatever else is added or removed meanwhile.
    pub fn keys_from(&self, from: Slot) -> impl Iterator<Item = (Slot, &[u8])> {
        self.names
            .iter()
            .enumerate()
            .skip(usize::try_from(from).unwrap_or(usize::MAX))
            .filter_map(|(slot, name)| Some((slot as Slot, name.as_deref()?)))
    }

    /// Slots it hands out.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keys it holds.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.slots.len() == 0
    }

    /// The key's slot, if the key exists.
    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        self.slots.get(&hash(&self.hasher, key)).map(Slot::from)
    }

    /// The key's slot, allocating a free one for a new key: `Some((slot, is_new))`, or `None`
    /// when the key is new and no slot is free.
    pub fn get_or_insert(&mut self, key: &[u8]) -> Option<(Slot, bool)> {
        let hash = hash(&self.hasher, key);
        if let Some(slot) = self.slots.get(&hash) {
            return Some((Slot::from(slot), false));
        }
        if let Some(&slot) = self.designated.get(&hash) {
            self.slots.insert(hash, slot);
            self.names[slot as usize] = Some(key.into());
            return Some((Slot::from(slot), true));
        }
        let slot = self.free.pop()?;
        // A full store needs no free list: give its memory back as it fills.
        if self.free.capacity() > 1024 && self.free.len() < self.free.capacity() / 4 {
            self.free.shrink_to(self.free.len() * 2);
        }
        self.slots.insert(hash, slot);
        self.names[slot as usize] = Some(key.into());
        Some((Slot::from(slot), true))
    }

    /// Forgets a key. Its slot is not reusable until [`KeyDirectory::release`]: the caller first
    /// makes sure storage no longer holds the old record.
    pub fn remove(&mut self, key: &[u8]) -> Option<Slot> {
        let slot = self.slots.remove(&hash(&self.hasher, key))?;
        self.names[slot as usize] = None;
        Some(Slot::from(slot))
    }

    /// Makes a removed key's slot free again (see [`KeyDirectory::remove`]).
    pub fn release(&mut self, slot: Slot) {
        // A designated slot waits for its own key.
        if !self.designated_slots.contains(&(slot as u32)) {
            self.free.push(slot as u32);
        }
    }

    /// The slot `key` has or will have: its slot if it exists, else one set aside for it now
    /// (`None` when no slot is free). The key does not exist until it is inserted.
    pub fn designate(&mut self, key: &[u8]) -> Option<Slot> {
        let hash = hash(&self.hasher, key);
        if let Some(slot) = self
            .slots
            .get(&hash)
            .or_else(|| self.designated.get(&hash).copied())
        {
            return Some(Slot::from(slot));
        }
        let slot = self.free.pop()?;
        self.designated.insert(hash, slot);
        self.designated_slots.insert(slot);
        Some(Slot::from(slot))
    }

    /// Whether every one of `keys` can be inserted now (keys that exist take no slot, designated
    /// keys take their own).
    pub fn has_room_for<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) -> bool {
        let needed = keys
            .into_iter()
            .map(|key| hash(&self.hasher, key))
            .filter(|h| self.slots.get(h).is_none() && !self.designated.contains_key(h))
            .count();
        needed <= self.free.len()
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
            // A key recovered twice keeps its first slot (recovery hands over each key once).
            if directory.slots.get(&hash).is_none() {
                directory.slots.insert(hash, slot as u32);
                directory.names[slot as usize] = Some(key.into());
            }
            taken[slot as usize] = true;
        }
        directory.free.retain(|&s| !taken[s as usize]);
        // A full store's free list is empty: give back the 4 bytes a slot it was made with.
        directory.free.shrink_to_fit();
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
        assert_eq!(d.key_at(0), Some(&b"c"[..]));
        let listed: Vec<_> = d.keys_from(1).collect();
        assert_eq!(listed, [(1, &b"b"[..])]);
    }

    #[test]
    fn designated_slots_wait_for_their_key() {
        let mut d = KeyDirectory::new(KeyHasher::new(&MasterKey::from_bytes([0; 32])), 3);
        assert_eq!(d.get_or_insert(b"a"), Some((0, true)));
        assert_eq!(d.designate(b"a"), Some(0), "an existing key keeps its slot");
        assert_eq!(d.designate(b"hot"), Some(1));
        assert_eq!(d.designate(b"hot"), Some(1));
        assert_eq!(d.get(b"hot"), None, "designated, not inserted");
        assert_eq!(d.len(), 1);
        assert!(d.has_room_for([&b"x"[..], &b"hot"[..]]));
        assert!(!d.has_room_for([&b"x"[..], &b"y"[..]]));
        assert_eq!(d.get_or_insert(b"x"), Some((2, true)), "slot 1 is not free");
        assert_eq!(d.get_or_insert(b"y"), None);
        assert_eq!(d.get_or_insert(b"hot"), Some((1, true)));
        assert_eq!(d.remove(b"hot"), Some(1));
        d.release(1);
        assert_eq!(d.get_or_insert(b"y"), None, "slot 1 stays hot's");
        assert_eq!(d.get_or_insert(b"hot"), Some((1, true)));
        assert_eq!(d.designate(b"z"), None, "no slot left");
    }

    #[test]
    fn agrees_with_a_plain_map_through_inserts_removes_and_a_restore() {
        let hasher = || KeyHasher::new(&MasterKey::from_bytes([7; 32]));
        let mut d = KeyDirectory::new(hasher(), 5_000);
        let mut model = HashMap::new();
        let key = |i: u32| format!("key:{i}").into_bytes();
        for round in 0..3u32 {
            for i in 0..5_000u32 {
                // Each round removes a different third of the keys and inserts the rest.
                if (i + round) % 3 == 0 {
                    if let Some(slot) = d.remove(&key(i)) {
                        assert_eq!(model.remove(&i), Some(slot));
                        d.release(slot);
                    }
                } else {
                    let (slot, is_new) = d.get_or_insert(&key(i)).expect("room");
                    assert_eq!(is_new, !model.contains_key(&i));
                    assert_eq!(*model.entry(i).or_insert(slot), slot);
                }
            }
            assert_eq!(d.len(), model.len());
            for i in 0..5_000u32 {
                assert_eq!(d.get(&key(i)), model.get(&i).copied(), "key {i}");
            }
        }
        let keys: Vec<(Slot, Vec<u8>)> = model.iter().map(|(&i, &slot)| (slot, key(i))).collect();
        let restored = KeyDirectory::restore(
            hasher(),
            5_000,
            keys.iter().map(|(slot, key)| (*slot, &key[..])),
        );
        assert_eq!(restored.len(), model.len());
        for (slot, key) in &keys {
            assert_eq!(restored.get(key), Some(*slot));
        }
        assert!(restored.has_room_for((0..(5_000 - model.len()) as u32).map(|_| &b"new"[..])));
    }
}
