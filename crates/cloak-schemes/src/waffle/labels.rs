//! Storage labels: `PRF(object, generation)`, a fresh one every time an object is written.
//!
//! Paper §4 (Challenge 4): an object is stored under `prf(k, ts_k)`, where `ts_k` is the
//! timestamp of its last access, so every write of an object goes to a label never used before
//! and the server cannot tell which earlier label it continues. Here the timestamp is the batch
//! that last read the object (0 for the initial fill), offset by this run's generation base so no
//! two runs of a store ever produce the same label. The same number is the generation the
//! element's AEAD binding carries, so an element is valid only at its own label.
//!
//! Real objects are the store's slots; dummy objects are numbered apart (top bit set), so the two
//! label spaces never meet. [`LabelKey`] turns a label back into its object and timestamp: AES is
//! a permutation, so whoever holds the key can link the server's view, which is what the
//! security analysis ([`super::observe`]) does to measure β.

use cloak_core::Addr;
use cloak_crypto::{Binding, MasterKey, Prf};

/// Purpose string separating Waffle's label key from every other derived key.
const PURPOSE: &str = "waffle";
/// Dummy objects are numbered from here, far above any slot.
const DUMMY_BASE: u64 = 1 << 63;

/// An object storage holds: one of the store's slots, or one of the dummies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Object {
    Real(u32),
    Dummy(u32),
}

impl Object {
    fn number(self) -> u64 {
        match self {
            Object::Real(slot) => u64::from(slot),
            Object::Dummy(d) => DUMMY_BASE | u64::from(d),
        }
    }

    fn from_number(number: u64) -> Option<Self> {
        if number & DUMMY_BASE != 0 {
            u32::try_from(number & !DUMMY_BASE).ok().map(Object::Dummy)
        } else {
            u32::try_from(number).ok().map(Object::Real)
        }
    }
}

/// Labels and bindings of one run.
#[derive(Clone)]
pub struct Labels {
    prf: Prf,
    generation_base: u64,
}

impl Labels {
    pub fn new(master: &MasterKey, generation_base: u64) -> Self {
        Self {
            prf: Prf::new(master, PURPOSE),
            generation_base,
        }
    }

    /// Where `object` is stored after an access at batch `ts`.
    pub fn binding(&self, object: Object, ts: u64) -> Binding {
        let generation = self.generation_base + ts;
        Binding {
            address: self.prf.label(object.number(), generation),
            generation,
        }
    }

    pub fn label(&self, object: Object, ts: u64) -> Addr {
        self.binding(object, ts).address
    }
}

/// Decodes labels for the security analysis (it needs the store's key).
#[derive(Clone)]
pub struct LabelKey {
    prf: Prf,
}

impl LabelKey {
    pub fn new(master: &MasterKey) -> Self {
        Self {
            prf: Prf::new(master, PURPOSE),
        }
    }

    /// The object a label belongs to and the generation it was written in; `None` for labels
    /// Waffle never makes (another scheme's addresses).
    pub fn decode(&self, label: Addr) -> Option<(Object, u64)> {
        let (number, generation) = self.prf.invert(label);
        Some((Object::from_number(number)?, generation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_differ_per_object_timestamp_and_run_and_decode_back() {
        let master = MasterKey::from_bytes([3; 32]);
        let run1 = Labels::new(&master, 0);
        let run2 = Labels::new(&master, 1 << 40);
        let key = LabelKey::new(&master);
        let objects = [
            Object::Real(0),
            Object::Real(7),
            Object::Dummy(0),
            Object::Dummy(7),
        ];
        let mut seen = std::collections::HashSet::new();
        for object in objects {
            for ts in 0..3 {
                for run in [&run1, &run2] {
                    let b = run.binding(object, ts);
                    assert!(seen.insert(b.address), "a label repeated");
                    assert_eq!(key.decode(b.address), Some((object, b.generation)));
                }
            }
        }
        assert_eq!(run2.binding(Object::Real(1), 5).generation, (1 << 40) + 5);
    }
}
