//! Storage labels and bindings: an element is stored under `PRF(object, ts)` and carries, in the
//! clear, the batch whose write put it there.
//!
//! Paper §4 (Challenge 4): an object is stored under `prf(k, ts_k)`, where `ts_k` is the
//! timestamp of its last access, so every write of an object goes to a label never used before
//! and the server cannot tell which earlier label it continues. Here the timestamp is the batch
//! that last read the object (0 for the initial fill), offset by this run's generation base so no
//! two runs of a store ever produce the same label.
//!
//! What the server reads of an element, and why it is public:
//! - the *label* is pseudorandom, and every label is written once and read once.
//! - the *generation* in the element's clear header is the batch whose write-back stored it
//!   (0: the fill), plus the run's base: the number of batch reads the server had seen when it
//!   received the write, the same for every element of one write request. It must not be the
//!   label's timestamp: an evicted object was last read in an earlier batch and a dummy in this
//!   one, so that timestamp marked every dummy of a write-back and told how many of the batch's
//!   reads were real objects that stayed in the cache (the request rate).
//!
//! The binding authenticates both, so an element is valid only at its own label (the label is
//! never reused, which rules out replays) and only with the write that stored it; the proxy
//! remembers each object's write batch to open it. Real objects are the store's slots; dummy
//! objects are numbered apart (top bit set), so the two label spaces never meet. [`LabelKey`]
//! turns a label back into its object and timestamp: AES is a permutation, so whoever holds the
//! key can link the server's view, which is what the security analysis ([`super::observe`]) does
//! to measure β.

use cloak_core::Addr;
use cloak_crypto::{Binding, MasterKey, Prf};

/// Purpose string separating Waffle's label key from every other derived key.
const PURPOSE: &str = "waffle";
/// Dummy objects are numbered from here, far above any slot.
const DUMMY_BASE: u64 = 1 << 63;

/// An object storage holds: one of the store's slots, or one of the dummies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Object {
    /// The real object of a slot.
    Real(u32),
    /// A dummy object, by number.
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

    /// The binding of `object`'s element under its label for an access at batch `ts`, written
    /// by the write-back of batch `written` (0: the fill).
    pub fn binding(&self, object: Object, ts: u64, written: u64) -> Binding {
        Binding {
            address: self.label(object, ts),
            // Public: the batch whose write the server received (see the module docs).
            generation: self.generation_base + written,
        }
    }

    /// Where `object` is stored after an access at batch `ts`.
    pub fn label(&self, object: Object, ts: u64) -> Addr {
        self.prf.label(object.number(), self.generation_base + ts)
    }
}

/// Decodes labels for the security analysis (it needs the store's key).
#[derive(Clone)]
pub struct LabelKey {
    prf: Prf,
}

impl LabelKey {
    /// The label key of the store whose master key is `master`.
    pub fn new(master: &MasterKey) -> Self {
        Self {
            prf: Prf::new(master, PURPOSE),
        }
    }

    /// The object a label belongs to and its timestamp (the run's generation base plus the
    /// batch that last read the object); `None` for labels Waffle never makes (another scheme's
    /// addresses).
    pub fn decode(&self, label: Addr) -> Option<(Object, u64)> {
        let (number, ts) = self.prf.invert(label);
        Some((Object::from_number(number)?, ts))
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
                for (run, base) in [(&run1, 0), (&run2, 1 << 40)] {
                    let label = run.label(object, ts);
                    assert!(seen.insert(label), "a label repeated");
                    assert_eq!(key.decode(label), Some((object, base + ts)));
                }
            }
        }
    }

    /// The label follows the object's timestamp; the clear generation only the write's batch.
    #[test]
    fn the_generation_is_the_writing_batch_not_the_timestamp() {
        let run = Labels::new(&MasterKey::from_bytes([3; 32]), 1 << 40);
        let evicted = run.binding(Object::Real(1), 2, 5);
        let dummy = run.binding(Object::Dummy(1), 5, 5);
        assert_eq!(evicted.address, run.label(Object::Real(1), 2));
        assert_eq!(evicted.generation, (1 << 40) + 5);
        assert_eq!(evicted.generation, dummy.generation);
    }
}
