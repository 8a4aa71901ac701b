//! A keyed hash of client keys: where the key directory's table places a key, so clients cannot
//! aim many keys at one bucket.
//!
//! SipHash-1-3 with a 128-bit output and a secret key: clients cannot aim for collisions without
//! the key, and accidental collisions among 2^32 keys have probability below 2^-64.

use siphasher::sip128::{Hasher128, SipHasher13};
use std::hash::Hasher;

use crate::MasterKey;

/// Hashes client keys for the key directory under a key derived from the master key, so
/// the directory's hashes say nothing to whoever cannot compute them.
#[derive(Clone)]
pub struct KeyHasher {
    key: [u8; 16],
}

impl KeyHasher {
    /// The hasher of the store whose master key is `master`.
    pub fn new(master: &MasterKey) -> Self {
        Self {
            key: master.derive(&[b"key directory"]),
        }
    }

    /// The 128-bit keyed hash (SipHash-1-3) of `key`.
    pub fn hash(&self, key: &[u8]) -> [u8; 16] {
        let mut hasher = SipHasher13::new_with_key(&self.key);
        hasher.write(key);
        hasher.finish128().as_bytes()
    }
}
