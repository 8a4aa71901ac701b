//! The key directory: which logical slot holds which client key.
//!
//! Each slot's key lives in one [`KeyArena`] (the key's own bytes plus 8 bytes a slot), and a
//! table of slot numbers (4 bytes a bucket) finds a key's slot: it is placed by a keyed hash of
//! the key (see `cloak_crypto::KeyHasher`), so clients cannot aim keys at one bucket without the
//! hash key, and a candidate is confirmed by comparing the whole key with the arena's, so two
//! keys never share a slot. At a million 16-byte keys that is about 34 bytes a key, against 54
//! when each slot kept a 12-byte hash for the table and a boxed copy of its key for listing.
//!
//! The commands that list keys (KEYS, SCAN, RANDOMKEY, FLUSHDB) read the arena: listing needs
//! no storage access at all, and the storage server sees nothing of it.
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
use crate::key_arena::KeyArena;
use crate::workers::on_every_core;

/// Keys [`KeyDirectory::restore`] records at a time (see [`Slots::insert_all_if_absent`]).
const RESTORE_CHUNK: usize = 1 << 16;

/// Where `key` goes in the table: 8 bytes of its keyed hash, which are uniformly random.
fn table_hash(hasher: &KeyHasher, key: &[u8]) -> u64 {
    let full = hasher.hash(key);
    u64::from_le_bytes(full[..8].try_into().expect("8 of 16 bytes"))
}

/// Which slot holds which key: the keys in an arena by slot, and a table of slot numbers that
/// finds a key's slot by comparing its candidates' keys in the arena.
struct Slots {
    hasher: KeyHasher,
    names: KeyArena,
    index: HashTable<u32>,
}

impl Slots {
    fn with_capacity(hasher: KeyHasher, capacity: usize) -> Self {
        Self {
            hasher,
            names: KeyArena::new(capacity),
            index: HashTable::with_capacity(capacity),
        }
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn get(&self, key: &[u8]) -> Option<u32> {
        let names = &self.names;
        self.index
            .find(table_hash(&self.hasher, key), |&slot| {
                names.get(slot as usize) == Some(key)
            })
            .copied()
    }

    /// Records `key` at `slot`; the caller knows `key` is not in the table yet.
    fn insert(&mut self, key: &[u8], slot: u32) {
        self.names.set(slot as usize, key);
        let (names, hasher) = (&self.names, &self.hasher);
        // The table is made for every slot at once, so it never grows and this rehash (of
        // keys the arena holds) never runs in practice.
        self.index
            .insert_unique(table_hash(hasher, key), slot, |&slot| {
                table_hash(hasher, names.get(slot as usize).unwrap_or_default())
            });
    }

    /// Records each of `keys` (slots with their keys, in slot order, fewer than 2^32) that the
    /// table does not hold yet at its slot; a key listed twice keeps its first slot. What a
    /// restart does for every key of the store, so it is done for many at once: the keys'
    /// hashes on every core, and the table's entries in the table's own order.
    fn insert_all_if_absent(&mut self, keys: &[(Slot, &[u8])]) {
        let hasher = &self.hasher;
        let hashes = on_every_core(keys, |(_, key)| table_hash(hasher, key));
        for (slot, key) in keys {
            self.names.set(*slot as usize, key);
        }
        // Where a probe for each hash starts is its low bits (`hashbrown`'s table of a power
        // of two buckets holds 7 in 8 of them): in that order the inserts sweep the table
        // instead of each landing at random, a cache miss (at ten million keys those misses
        // were a quarter of the time from opening the scanned elements to listening). Were the
        // table laid out otherwise, the order would only cost speed, never correctness. Each
        // key is sorted as one number, the start above its place in `keys` (the low 32 bits),
        // so that of two keys starting alike the one listed first goes first. A table of more
        // than 2^32 buckets (billions of slots) loses the start's top bits to the shift: its
        // order is coarser, which again costs speed only.
        let mask = self.index.capacity().next_power_of_two() as u64 - 1;
        let mut order: Vec<u64> = (hashes.iter().enumerate())
            .map(|(i, hash)| (hash & mask) << 32 | i as u64)
            .collect();
        order.sort_unstable();
        let names = &mut self.names;
        for i in order.into_iter().map(|packed| packed as u32 as usize) {
            let (slot, key) = keys[i];
            let entry = self.index.entry(
                hashes[i],
                |&held| held != slot as u32 && names.get(held as usize) == Some(key),
                |&held| table_hash(hasher, names.get(held as usize).unwrap_or_default()),
            );
            match entry {
                hashbrown::hash_table::Entry::Occupied(_) => names.clear(slot as usize),
                hashbrown::hash_table::Entry::Vacant(vacant) => {
                    vacant.insert(slot as u32);
                }
            }
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<u32> {
        let names = &self.names;
        let entry = self
            .index
            .find_entry(table_hash(&self.hasher, key), |&slot| {
                names.get(slot as usize) == Some(key)
            })
            .ok()?;
        let slot = entry.remove().0;
        self.names.clear(slot as usize);
        Some(slot)
    }
}

/// Which slot each key has: keys kept by slot in an arena, slots handed out from a free list.
pub struct KeyDirectory {
    slots: Slots,
    /// Slots not holding a key; popped from the end, and shrunk as the store fills.
    free: Vec<u32>,
    capacity: usize,
    /// Keys given a slot in advance, and those slots.
    designated: HashMap<Box<[u8]>, u32>,
    designated_slots: HashSet<u32>,
}

impl KeyDirectory {
    /// An empty directory handing out slots `0..capacity`.
    pub fn new(hasher: KeyHasher, capacity: usize) -> Self {
        Self::with_keys(hasher, capacity, std::iter::empty())
    }

    /// The key `slot` holds, if any.
    pub fn key_at(&self, slot: Slot) -> Option<&[u8]> {
        self.slots.names.get(usize::try_from(slot).ok()?)
    }

    /// The keys held at slots `from..`, in slot order, with their slots. A key keeps its slot for
    /// as long as it exists, so walking slots in order (SCAN's cursor) meets every key that
    /// exists throughout the walk exactly once, whatever else is added or removed meanwhile.
    pub fn keys_from(&self, from: Slot) -> impl Iterator<Item = (Slot, &[u8])> {
        self.slots
            .names
            .keys_from(usize::try_from(from).unwrap_or(usize::MAX))
            .map(|(slot, key)| (slot as Slot, key))
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
        self.slots.get(key).map(Slot::from)
    }

    /// The key's slot, allocating a free one for a new key: `Some((slot, is_new))`, or `None`
    /// when the key is new and no slot is free.
    pub fn get_or_insert(&mut self, key: &[u8]) -> Option<(Slot, bool)> {
        if let Some(slot) = self.slots.get(key) {
            return Some((Slot::from(slot), false));
        }
        if let Some(&slot) = self.designated.get(key) {
            self.slots.insert(key, slot);
            return Some((Slot::from(slot), true));
        }
        let slot = self.free.pop()?;
        // A full store needs no free list: give its memory back as it fills.
        if self.free.capacity() > 1024 && self.free.len() < self.free.capacity() / 4 {
            self.free.shrink_to(self.free.len() * 2);
        }
        self.slots.insert(key, slot);
        Some((Slot::from(slot), true))
    }

    /// Forgets a key. Its slot is not reusable until [`KeyDirectory::release`]: the caller first
    /// makes sure storage no longer holds the old record.
    pub fn remove(&mut self, key: &[u8]) -> Option<Slot> {
        self.slots.remove(key).map(Slot::from)
    }

    /// Makes a removed key's slot free again (see [`KeyDirectory::remove`]).
    pub fn release(&mut self, slot: Slot) {
        // A designated slot waits for its own key.
        if !self.is_designated(slot) {
            self.free.push(slot as u32);
        }
    }

    /// Whether `slot` is kept for a designated key (see [`KeyDirectory::designate`]).
    pub fn is_designated(&self, slot: Slot) -> bool {
        self.designated_slots.contains(&(slot as u32))
    }

    /// The slot `key` has or will have: its slot if it exists, else one set aside for it now
    /// (`None` when no slot is free). The key does not exist until it is inserted.
    pub fn designate(&mut self, key: &[u8]) -> Option<Slot> {
        if let Some(slot) = self
            .slots
            .get(key)
            .or_else(|| self.designated.get(key).copied())
        {
            return Some(Slot::from(slot));
        }
        let slot = self.free.pop()?;
        self.designated.insert(key.into(), slot);
        self.designated_slots.insert(slot);
        Some(Slot::from(slot))
    }

    /// Whether every one of `keys` can be inserted now (keys that exist take no slot, designated
    /// keys take their own).
    pub fn has_room_for<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) -> bool {
        let needed = keys
            .into_iter()
            .filter(|key| self.slots.get(key).is_none() && !self.designated.contains_key(*key))
            .count();
        needed <= self.free.len()
    }

    /// A directory holding `keys` at their slots (after recovery), every other slot free.
    pub fn restore<'a, I>(hasher: KeyHasher, capacity: usize, keys: I) -> Self
    where
        I: IntoIterator<Item = (Slot, &'a [u8])>,
        I::IntoIter: Clone,
    {
        Self::with_keys(hasher, capacity, keys.into_iter())
    }

    /// A directory of `capacity` slots holding `keys` at their slots.
    ///
    /// The keys are walked twice (an iterator over what recovery holds is cheap to clone): once
    /// to size the arena for their bytes, then to record them. Grown as the keys came, the
    /// arena was copied at each doubling and once more to fit, into memory the system had to
    /// hand over anew: at ten million keys, faulting in fresh pages was a third of the serial
    /// time between opening the scanned elements and listening.
    fn with_keys<'a>(
        hasher: KeyHasher,
        capacity: usize,
        mut keys: impl Iterator<Item = (Slot, &'a [u8])> + Clone,
    ) -> Self {
        assert!(capacity <= u32::MAX as usize, "capacity fits in 32 bits");
        // Sized for a full store now, so it never resizes under load (and never leaves the old
        // table's memory behind in the allocator).
        let mut slots = Slots::with_capacity(hasher, capacity);
        slots
            .names
            .reserve(keys.clone().map(|(_, key)| key.len()).sum());
        loop {
            let chunk: Vec<(Slot, &[u8])> = keys.by_ref().take(RESTORE_CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            // A key recovered twice keeps its first slot (recovery hands over each key once).
            slots.insert_all_if_absent(&chunk);
        }
        // Made once the keys are in, not before and then filtered: a full store's is empty.
        let mut free = Vec::with_capacity(capacity - slots.len());
        free.extend(
            (0..capacity as u32)
                .rev()
                .filter(|&slot| slots.names.get(slot as usize).is_none()),
        );
        // Holes only if a key was listed twice.
        slots.names.shrink_to_fit();
        Self {
            slots,
            free,
            capacity,
            designated: HashMap::new(),
            designated_slots: HashSet::new(),
        }
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

    /// A restore of more keys than it records at once, with a key listed twice within one
    /// chunk and once across two: each keeps its first slot, and the other slots are free.
    #[test]
    fn a_restore_of_many_keys_keeps_each_key_at_its_first_slot() {
        let slots = 2 * RESTORE_CHUNK as u64 + 100;
        let key = |slot: u64| match slot {
            // Duplicates of slot 3's key: in its chunk, and in the next one.
            10 => b"key:3".to_vec(),
            s if s == RESTORE_CHUNK as u64 + 7 => b"key:3".to_vec(),
            s => format!("key:{s}").into_bytes(),
        };
        let keys: Vec<(Slot, Vec<u8>)> = (0..slots).map(|slot| (slot, key(slot))).collect();
        let mut restored = KeyDirectory::restore(
            KeyHasher::new(&MasterKey::from_bytes([7; 32])),
            slots as usize + 2,
            keys.iter().map(|(slot, key)| (*slot, &key[..])),
        );
        assert_eq!(restored.len(), slots as usize - 2);
        for slot in (0..slots).filter(|&s| key(s) != b"key:3" || s == 3) {
            assert_eq!(restored.get(&key(slot)), Some(slot), "slot {slot}");
            assert_eq!(restored.key_at(slot), Some(&key(slot)[..]));
        }
        assert_eq!(restored.key_at(10), None, "a second copy is not listed");
        let mut free: Vec<Slot> = (0..4)
            .filter_map(|i| restored.get_or_insert(format!("new:{i}").as_bytes()))
            .map(|(slot, _)| slot)
            .collect();
        free.sort_unstable();
        assert_eq!(
            free,
            [10, RESTORE_CHUNK as u64 + 7, slots, slots + 1],
            "the second copies' slots are free"
        );
    }
}
