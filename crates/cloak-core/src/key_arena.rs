//! The key each slot holds, in one buffer: the key directory's store of key bytes.
//!
//! A key per slot as its own allocation costs a 16-byte pointer and length in the slot table
//! plus the allocator's size-class rounding of the key (a 16-byte key takes 32 bytes in all, a
//! 17-byte one 48). Here every key's bytes sit end to end in one arena and each slot keeps one
//! 8-byte span, so a key costs its own length plus 8 bytes. A removed key leaves a hole that
//! [`KeyArena::set`] reclaims by compacting once holes outweigh the live bytes, so the arena
//! stays under about twice the bytes of the keys it holds, at an amortised cost of one copy of
//! each key per removal of as many bytes.

/// Bits of a span that hold the key's length plus one (0: the slot holds no key). Keys are at
/// most 65,535 bytes (the longest `--key-size`).
const LENGTH_BITS: u32 = 17;
const LENGTH_MASK: u64 = (1 << LENGTH_BITS) - 1;
/// Longest key a span can describe.
pub const MAX_KEY_LEN: usize = (1 << (LENGTH_BITS - 1)) - 1;

/// Arenas smaller than this are never compacted: the copy would cost more than the holes.
const COMPACT_FLOOR: usize = 4096;

/// Key bytes by slot (see the module docs).
#[derive(Debug)]
pub struct KeyArena {
    /// Every live key's bytes, and holes left by removed keys.
    bytes: Vec<u8>,
    /// Per slot, `offset << LENGTH_BITS | (length + 1)`, or 0 for a slot holding no key.
    spans: Vec<u64>,
    /// Bytes of `bytes` no span refers to.
    holes: usize,
}

impl KeyArena {
    /// An arena for slots `0..slots`, all empty.
    pub fn new(slots: usize) -> Self {
        Self {
            bytes: Vec::new(),
            spans: vec![0; slots],
            holes: 0,
        }
    }

    /// The key `slot` holds, if any (`None` also for a slot beyond the arena).
    pub fn get(&self, slot: usize) -> Option<&[u8]> {
        let span = *self.spans.get(slot)?;
        let length = (span & LENGTH_MASK).checked_sub(1)? as usize;
        let offset = (span >> LENGTH_BITS) as usize;
        Some(&self.bytes[offset..offset + length])
    }

    /// Makes `slot` hold `key`.
    ///
    /// # Panics
    /// If `slot` is beyond the arena or `key` is longer than [`MAX_KEY_LEN`]: callers hand out
    /// slots below the arena's size and refuse longer keys before they get here.
    pub fn set(&mut self, slot: usize, key: &[u8]) {
        assert!(key.len() <= MAX_KEY_LEN, "a key longer than a span holds");
        self.clear(slot);
        self.compact_if_mostly_holes();
        let offset = self.bytes.len() as u64;
        self.bytes.extend_from_slice(key);
        self.spans[slot] = offset << LENGTH_BITS | (key.len() as u64 + 1);
    }

    /// Makes `slot` hold no key.
    pub fn clear(&mut self, slot: usize) {
        if let Some(span) = self.spans.get_mut(slot) {
            self.holes += ((*span & LENGTH_MASK).saturating_sub(1)) as usize;
            *span = 0;
        }
    }

    /// Every slot holding a key from `from` on, in slot order, with its key.
    pub fn keys_from(&self, from: usize) -> impl Iterator<Item = (usize, &[u8])> {
        (from..self.spans.len()).filter_map(|slot| Some((slot, self.get(slot)?)))
    }

    /// Makes room for `bytes` more bytes of keys, so that setting them copies nothing.
    pub fn reserve(&mut self, bytes: usize) {
        self.bytes.reserve_exact(bytes);
    }

    /// Gives back what a recovery's growth left over: once a store is restored, the arena holds
    /// exactly its keys.
    pub fn shrink_to_fit(&mut self) {
        self.compact();
        self.bytes.shrink_to_fit();
    }

    fn compact_if_mostly_holes(&mut self) {
        if self.bytes.len() >= COMPACT_FLOOR && self.holes > self.bytes.len() / 2 {
            self.compact();
        }
    }

    /// Copies every live key to the front, in slot order, and drops the holes.
    fn compact(&mut self) {
        if self.holes == 0 {
            return;
        }
        let mut packed = Vec::with_capacity(self.bytes.len() - self.holes);
        for span in &mut self.spans {
            let Some(length) = (*span & LENGTH_MASK).checked_sub(1) else {
                continue;
            };
            let offset = (*span >> LENGTH_BITS) as usize;
            let moved = packed.len() as u64;
            packed.extend_from_slice(&self.bytes[offset..offset + length as usize]);
            *span = moved << LENGTH_BITS | (length + 1);
        }
        self.bytes = packed;
        self.holes = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn empty_and_zero_length_keys_are_told_apart() {
        let mut arena = KeyArena::new(3);
        arena.set(1, b"");
        assert_eq!(arena.get(0), None);
        assert_eq!(arena.get(1), Some(&b""[..]));
        assert_eq!(arena.get(7), None, "beyond the arena");
        arena.set(2, &[b'k'; MAX_KEY_LEN]);
        assert_eq!(arena.get(2).map(<[u8]>::len), Some(MAX_KEY_LEN));
        let listed: Vec<_> = arena.keys_from(0).map(|(slot, _)| slot).collect();
        assert_eq!(listed, [1, 2]);
    }

    #[test]
    fn agrees_with_a_map_through_churn_and_stays_within_twice_its_keys() {
        let slots = 2_000;
        let mut arena = KeyArena::new(slots);
        let mut model: HashMap<usize, Vec<u8>> = HashMap::new();
        for round in 0..20usize {
            for slot in 0..slots {
                match (slot * 7 + round) % 5 {
                    0 | 1 => {
                        arena.clear(slot);
                        model.remove(&slot);
                    }
                    2 => {
                        let key = format!("round {round} slot {slot}").into_bytes();
                        arena.set(slot, &key);
                        model.insert(slot, key);
                    }
                    _ => {}
                }
            }
            for slot in 0..slots {
                assert_eq!(
                    arena.get(slot),
                    model.get(&slot).map(Vec::as_slice),
                    "slot {slot}"
                );
            }
            let live: usize = model.values().map(Vec::len).sum();
            assert!(
                arena.bytes.len() <= 2 * live + COMPACT_FLOOR + MAX_KEY_LEN,
                "round {round}: {} bytes held for {live} live",
                arena.bytes.len()
            );
        }
        arena.shrink_to_fit();
        let live: usize = model.values().map(Vec::len).sum();
        assert_eq!(arena.bytes.len(), live);
        assert_eq!(arena.keys_from(0).count(), model.len());
    }
}
