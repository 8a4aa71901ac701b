//! Authenticated encryption of storage elements.
//!
//! Sealed layout: `epoch (8) ‖ nonce (12) ‖ generation (8) ‖ ciphertext ‖ tag (16)`.
//!
//! Nonces: AES-GCM fails badly if a (key, nonce) pair repeats, and random 96-bit nonces are only
//! safe for about 2^32 messages per key, which a busy proxy writes in hours. So each proxy run
//! draws a random 64-bit *epoch*, encrypts under the key `HKDF(master, epoch)`, and uses a counter
//! as the nonce; after 2^32 messages it moves to the next epoch. The epoch travels in the clear so
//! any run can derive the key to decrypt elements written by an earlier one.
//!
//! Associated data binds each ciphertext to a [`Binding`]: the storage address it was written to
//! and the scheme's generation counter at that address (Cloak: the batch that wrote it). A server
//! that swaps, replays or corrupts an element makes [`Sealer::open`] fail. The generation also
//! travels in the clear (the server saw that write happen, so it learns nothing), so a proxy that
//! lost its state can still open what it finds with [`Sealer::open_found`] and learn where each
//! element stands.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, Tag, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use crate::{KeyError, MasterKey};

const EPOCH_LEN: usize = 8;
const GENERATION_LEN: usize = 8;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = EPOCH_LEN + NONCE_LEN + GENERATION_LEN;
/// Bytes a sealed element has beyond its plaintext.
pub const SEAL_OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Messages per epoch before moving to the next one.
const MESSAGES_PER_EPOCH: u64 = 1 << 32;

/// Where and when an element was written; authenticated, not encrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub address: u128,
    pub generation: u64,
}

impl Binding {
    fn aad(&self) -> [u8; 32] {
        let mut aad = [0u8; 32];
        aad[..16].copy_from_slice(&self.address.to_le_bytes());
        aad[16..24].copy_from_slice(&self.generation.to_le_bytes());
        aad[24..].copy_from_slice(b"cloak/v1");
        aad
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    #[error("element is {0} bytes, shorter than any sealed element")]
    Truncated(usize),
    #[error("element failed authentication (corrupted, swapped or replayed)")]
    Tampered,
}

pub struct Sealer {
    master: MasterKey,
    epoch: u64,
    key: Arc<LessSafeKey>,
    counter: u64,
    /// Keys of epochs seen while opening, so each is derived once.
    known: RwLock<HashMap<u64, Arc<LessSafeKey>>>,
}

impl Sealer {
    /// A sealer starting at a fresh random epoch.
    pub fn new(master: &MasterKey) -> Result<Self, KeyError> {
        let mut epoch = [0u8; 8];
        SystemRandom::new()
            .fill(&mut epoch)
            .map_err(|_| KeyError::Random)?;
        Ok(Self::with_epoch(master, u64::from_le_bytes(epoch)))
    }

    /// A sealer at a given epoch. Two sealers with one master key must never share an epoch;
    /// use [`Sealer::new`] unless you control that (tests, separate workers).
    pub fn with_epoch(master: &MasterKey, epoch: u64) -> Self {
        let key = Arc::new(epoch_key(master, epoch));
        let known = HashMap::from([(epoch, key.clone())]);
        Self {
            master: master.clone(),
            epoch,
            key,
            counter: 0,
            known: RwLock::new(known),
        }
    }

    /// Encrypts `plaintext` bound to `binding`.
    pub fn seal(&mut self, binding: Binding, plaintext: &[u8]) -> Vec<u8> {
        self.seal_with(binding, plaintext.len(), |out| {
            out.extend_from_slice(plaintext)
        })
    }

    /// Encrypts the `len` bytes that `write` appends, without an intermediate copy.
    pub fn seal_with(
        &mut self,
        binding: Binding,
        len: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Vec<u8> {
        if self.counter == MESSAGES_PER_EPOCH {
            self.next_epoch();
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce[..8].copy_from_slice(&self.counter.to_le_bytes());
        self.counter += 1;

        let mut out = Vec::with_capacity(len + SEAL_OVERHEAD);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&binding.generation.to_le_bytes());
        write(&mut out);
        assert_eq!(
            out.len(),
            HEADER_LEN + len,
            "seal_with wrote the wrong length"
        );
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(binding.aad()),
                &mut out[HEADER_LEN..],
            )
            // ring only refuses messages longer than GCM's 64 GiB limit.
            .expect("element fits AES-GCM's message limit");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// Decrypts and authenticates an element sealed with `binding`.
    pub fn open(&self, binding: Binding, sealed: &[u8]) -> Result<Vec<u8>, CryptoError> {
        self.open_at(binding, sealed)
    }

    /// Decrypts and authenticates an element found at `address` without knowing which
    /// generation wrote it (as after a crash); returns that generation with the plaintext.
    /// A replayed older element passes: callers that know the generation use [`Sealer::open`].
    pub fn open_found(&self, address: u128, sealed: &[u8]) -> Result<(u64, Vec<u8>), CryptoError> {
        let generation = Self::generation(sealed)?;
        let binding = Binding {
            address,
            generation,
        };
        Ok((generation, self.open_at(binding, sealed)?))
    }

    fn generation(sealed: &[u8]) -> Result<u64, CryptoError> {
        if sealed.len() < SEAL_OVERHEAD {
            return Err(CryptoError::Truncated(sealed.len()));
        }
        let at = EPOCH_LEN + NONCE_LEN;
        Ok(u64::from_le_bytes(
            sealed[at..at + GENERATION_LEN].try_into().expect("8 bytes"),
        ))
    }

    fn open_at(&self, binding: Binding, sealed: &[u8]) -> Result<Vec<u8>, CryptoError> {
        // The clear generation must be the one authenticated; a mismatch fails below anyway,
        // this only gives the clearer error first.
        if Self::generation(sealed)? != binding.generation {
            return Err(CryptoError::Tampered);
        }
        let (header, rest) = sealed.split_at(HEADER_LEN);
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        let epoch = u64::from_le_bytes(header[..EPOCH_LEN].try_into().expect("8 bytes"));
        let nonce: [u8; NONCE_LEN] = header[EPOCH_LEN..EPOCH_LEN + NONCE_LEN]
            .try_into()
            .expect("12 bytes");
        let tag: [u8; TAG_LEN] = tag.try_into().expect("16 bytes");

        let key = self.key_for(epoch);
        let mut plaintext = ciphertext.to_vec();
        key.open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(binding.aad()),
            Tag::from(tag),
            &mut plaintext,
            0..,
        )
        .map_err(|_| CryptoError::Tampered)?;
        Ok(plaintext)
    }

    fn next_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.key = self.key_for(self.epoch);
        self.counter = 0;
    }

    fn key_for(&self, epoch: u64) -> Arc<LessSafeKey> {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        if let Some(key) = known.get(&epoch) {
            return key.clone();
        }
        drop(known);
        // Epochs come from ciphertexts the server controls; cap the cache so a malicious server
        // cannot grow it without bound (an unknown epoch then fails authentication anyway).
        let key = Arc::new(epoch_key(&self.master, epoch));
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        if known.len() < 4096 {
            known.insert(epoch, key.clone());
        }
        key
    }
}

fn epoch_key(master: &MasterKey, epoch: u64) -> LessSafeKey {
    let bytes: [u8; 32] = master.derive(&[b"element epoch", &epoch.to_le_bytes()]);
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &bytes).expect("32-byte AES-256 key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        Sealer::new(&MasterKey::from_bytes([3; 32])).unwrap()
    }
    const AT: Binding = Binding {
        address: 42,
        generation: 7,
    };

    #[test]
    fn round_trip() {
        let mut s = sealer();
        let sealed = s.seal(AT, b"hello");
        assert_eq!(sealed.len(), 5 + SEAL_OVERHEAD);
        assert_eq!(s.open(AT, &sealed).unwrap(), b"hello");
    }

    #[test]
    fn equal_plaintexts_give_different_ciphertexts() {
        let mut s = sealer();
        assert_ne!(s.seal(AT, b"same"), s.seal(AT, b"same"));
    }

    #[test]
    fn tampering_swapping_and_replay_are_detected() {
        let mut s = sealer();
        let sealed = s.seal(AT, b"value");
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(s.open(AT, &bad).is_err(), "flipped byte {i} accepted");
        }
        let elsewhere = Binding { address: 43, ..AT };
        let older = Binding {
            generation: 6,
            ..AT
        };
        assert_eq!(s.open(elsewhere, &sealed), Err(CryptoError::Tampered));
        assert_eq!(s.open(older, &sealed), Err(CryptoError::Tampered));
        assert_eq!(s.open(AT, &sealed[..10]), Err(CryptoError::Truncated(10)));
    }

    #[test]
    fn found_elements_reveal_their_generation() {
        let mut s = sealer();
        let sealed = s.seal(AT, b"v");
        assert_eq!(
            s.open_found(AT.address, &sealed).unwrap(),
            (7, b"v".to_vec())
        );
        assert!(
            s.open_found(99, &sealed).is_err(),
            "still bound to its address"
        );
        let mut forged = sealed.clone();
        forged[EPOCH_LEN + NONCE_LEN] ^= 1;
        assert!(
            s.open_found(AT.address, &forged).is_err(),
            "the clear generation is authenticated"
        );
    }

    #[test]
    fn another_run_with_the_same_key_can_open() {
        let master = MasterKey::from_bytes([5; 32]);
        let sealed = Sealer::new(&master).unwrap().seal(AT, b"kept");
        assert_eq!(
            Sealer::new(&master).unwrap().open(AT, &sealed).unwrap(),
            b"kept"
        );
        let other = Sealer::new(&MasterKey::from_bytes([6; 32])).unwrap();
        assert!(other.open(AT, &sealed).is_err());
    }

    #[test]
    fn epochs_rotate_before_the_counter_wraps() {
        let mut s = sealer();
        let first = s.epoch;
        s.counter = MESSAGES_PER_EPOCH;
        let sealed = s.seal(AT, b"x");
        assert_eq!(s.epoch, first.wrapping_add(1));
        assert_eq!(s.open(AT, &sealed).unwrap(), b"x");
    }
}
