//! Pseudorandom storage labels: `label(a, b)` is AES-256 applied to the 128-bit block `a ‖ b`.
//!
//! AES is a pseudorandom permutation, so distinct inputs give distinct, unpredictable labels;
//! schemes that address storage by label (encrypted-only, Waffle, Pancake) use this.

use aes::Aes256;
use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};

use crate::MasterKey;

/// A pseudorandom function from two 64-bit inputs to a 128-bit storage label (one AES-256
/// block).
#[derive(Clone)]
pub struct Prf {
    cipher: Aes256,
}

impl Prf {
    /// A PRF for one purpose (for example a scheme's name); different purposes are independent.
    pub fn new(master: &MasterKey, purpose: &str) -> Self {
        let key: [u8; 32] = master.derive(&[b"label prf", purpose.as_bytes()]);
        Self {
            cipher: Aes256::new(&key.into()),
        }
    }

    /// The label of `(a, b)`: for example a slot and a timestamp or replica number.
    pub fn label(&self, a: u64, b: u64) -> u128 {
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&a.to_le_bytes());
        block[8..].copy_from_slice(&b.to_le_bytes());
        let mut block = block.into();
        self.cipher.encrypt_block(&mut block);
        u128::from_le_bytes(block.into())
    }

    /// The `(a, b)` whose label this is: AES is a permutation, so whoever holds the key can
    /// tell which object and generation a label names (an auditor linking the server's view).
    pub fn invert(&self, label: u128) -> (u64, u64) {
        let mut block = label.to_le_bytes().into();
        self.cipher.decrypt_block(&mut block);
        let block: [u8; 16] = block.into();
        let (a, b) = block.split_at(8);
        (
            u64::from_le_bytes(a.try_into().expect("8 bytes")),
            u64::from_le_bytes(b.try_into().expect("8 bytes")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_deterministic_and_separated() {
        let master = MasterKey::from_bytes([9; 32]);
        let p = Prf::new(&master, "x");
        let q = Prf::new(&master, "y");
        assert_eq!(p.label(1, 2), p.label(1, 2));
        assert_ne!(p.label(1, 2), p.label(2, 1));
        assert_ne!(p.label(1, 2), q.label(1, 2));
        assert_eq!(p.invert(p.label(1, 2)), (1, 2));
        assert_eq!(q.invert(q.label(u64::MAX, 7)), (u64::MAX, 7));
    }
}
