//! Authenticated encryption of storage elements.
//!
//! Sealed layout: `epoch (8) ‖ nonce (12) ‖ generation (8) ‖ ciphertext ‖ tag (16)`.
//!
//! What the server can read of an element, and why each part is public:
//! - the *epoch*, a random 64-bit number drawn when a sealer starts and again every
//!   [`MESSAGES_PER_EPOCH`] messages; elements are encrypted under `HKDF(master, epoch)`. It
//!   travels in the clear so any run can derive the key of elements an earlier run wrote. It tells
//!   the server which run (and which stretch of 2^28 seals) wrote an element, nothing else.
//! - the *nonce*, 96 bits drawn from a ChaCha20 generator seeded by the operating system, fresh
//!   for every element. It carries no order: nonces used to be a counter, and because schemes seal
//!   a batch's elements in the order they were read, the counter of each written element named
//!   the position it was read from, which handed the server every batch's secret shuffle. Random
//!   nonces say nothing about the order, the number or the kind of elements sealed before.
//!   AES-GCM breaks if a (key, nonce) pair repeats: with `q` random nonces under one key the
//!   chance of any repeat is below `q² / 2^97`, so moving to a fresh epoch key every 2^28
//!   messages keeps it below 2^-41 per epoch (NIST SP 800-38D asks for 2^-32).
//! - the *generation* (below), which every scheme must set from public information only.
//! - the length, the same for every element of a store.
//!
//! Associated data binds each ciphertext to a [`Binding`]: the storage address it was written to
//! and the scheme's generation counter at that address (Cloak: the batch that wrote it). A server
//! that swaps, replays or corrupts an element makes [`Sealer::open`] fail. The generation also
//! travels in the clear, so a proxy that lost its state can still open what it finds with
//! [`Sealer::open_found`] and learn where each element stands. That is safe only while the
//! generation is something the server already knows (the batch or access whose write it
//! watched): a scheme must never put anything else there.
//!
//! With the `leak-demo` feature (tests only; nothing a user builds enables it)
//! [`Sealer::with_counter_nonces`] brings the old counter nonces back, so tests can show that the
//! auditor and the wire checks catch the leak they caused.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, Tag, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use crate::{KeyError, MasterKey};

const EPOCH_LEN: usize = 8;
const GENERATION_LEN: usize = 8;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = EPOCH_LEN + NONCE_LEN + GENERATION_LEN;
/// Bytes a sealed element has beyond its plaintext.
pub const SEAL_OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Messages sealed under one epoch key before moving to a fresh one (see the module docs).
pub const MESSAGES_PER_EPOCH: u64 = 1 << 28;

/// Where and when an element was written; authenticated, not encrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The storage address the element was written to.
    pub address: u128,
    /// Which write put it there; the scheme checks it to reject replays.
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

/// Why an element did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// Shorter than any sealed element (its length given).
    #[error("element is {0} bytes, shorter than any sealed element")]
    Truncated(usize),
    /// Authentication failed.
    #[error("element failed authentication (corrupted, swapped or replayed)")]
    Tampered,
    #[error(
        "element was sealed by another run of the proxy, not by this one: storage replayed an \
         element this run never wrote"
    )]
    /// Sealed under another run's epoch key.
    NotThisRun,
}

/// Where nonces come from.
enum Nonces {
    /// Fresh random nonces: they carry no order (the only mode a user can get).
    Random,
    /// A counter: each nonce tells how many elements were sealed before it.
    #[cfg(feature = "leak-demo")]
    Counter(u64),
}

/// Numbers every sealer made, so a thread's last key names the sealer it belongs to (see
/// [`Sealer::with_key`]).
static SEALERS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The key this thread last opened an element with, not of its sealer's current epoch: as
    /// (sealer, epoch, key). A restart's scan opens elements of a few epochs, each run of them
    /// by the same threads (see [`Sealer::with_key`]).
    static LAST_KEY: RefCell<Option<(u64, u64, Arc<LessSafeKey>)>> = const { RefCell::new(None) };
}

/// Seals and opens elements with AES-256-GCM under per-epoch keys derived from the master
/// key, each bound to its [`Binding`].
pub struct Sealer {
    /// This sealer's number among all the process made (see [`SEALERS`]).
    id: u64,
    master: MasterKey,
    epoch: u64,
    key: Arc<LessSafeKey>,
    /// Messages sealed under the current epoch.
    sealed: u64,
    /// Every epoch this sealer has sealed under (one per 2^28 seals): [`Sealer::open`] accepts
    /// only these.
    own: Vec<u64>,
    nonces: Nonces,
    /// Draws epochs and random nonces.
    rng: Box<ChaCha20Rng>,
    /// Keys of epochs seen while opening, so each is derived once.
    known: RwLock<HashMap<u64, Arc<LessSafeKey>>>,
}

impl Sealer {
    /// A sealer starting at a fresh random epoch, with random nonces.
    pub fn new(master: &MasterKey) -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        SystemRandom::new()
            .fill(&mut seed)
            .map_err(|_| KeyError::Random)?;
        Ok(Self::start(master, ChaCha20Rng::from_seed(seed)))
    }

    /// A sealer that numbers its nonces 0, 1, 2, … in the order it seals: every element then
    /// tells the server how many were sealed before it. Only for tests that show the leak is
    /// caught.
    #[cfg(feature = "leak-demo")]
    pub fn with_counter_nonces(master: &MasterKey) -> Result<Self, KeyError> {
        let mut sealer = Self::new(master)?;
        sealer.nonces = Nonces::Counter(0);
        Ok(sealer)
    }

    fn start(master: &MasterKey, mut rng: ChaCha20Rng) -> Self {
        let epoch = rng.next_u64();
        let key = Arc::new(epoch_key(master, epoch));
        let known = HashMap::from([(epoch, key.clone())]);
        Self {
            id: SEALERS.fetch_add(1, Ordering::Relaxed),
            master: master.clone(),
            epoch,
            key,
            sealed: 0,
            own: vec![epoch],
            nonces: Nonces::Random,
            rng: Box::new(rng),
            known: RwLock::new(known),
        }
    }

    fn next_nonce(&mut self) -> [u8; NONCE_LEN] {
        let mut nonce = [0u8; NONCE_LEN];
        match &mut self.nonces {
            Nonces::Random => self.rng.fill_bytes(&mut nonce),
            #[cfg(feature = "leak-demo")]
            Nonces::Counter(counter) => {
                nonce[..8].copy_from_slice(&counter.to_le_bytes());
                *counter += 1;
            }
        }
        nonce
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
        self.prepare().seal_with(binding, len, write)
    }

    /// Makes the next `n` seals share one epoch: if fewer than `n` remain in the current one,
    /// moves to a fresh epoch now. A scheme that draws a batch's seals in one order and writes
    /// them in another (Cloak draws in read order and writes in its secret shuffle) calls this
    /// first: an epoch that changed part-way through the batch would be in the clear on every
    /// element and split the written elements into "sealed first" and "sealed last", naming
    /// where the batch's first reads went. `n` is the batch's size, which is public.
    pub fn reserve(&mut self, n: u64) {
        if self.sealed.saturating_add(n) > MESSAGES_PER_EPOCH {
            self.next_epoch();
        }
    }

    /// Takes the next element's epoch key and nonce, in the order elements are sealed; the
    /// encryption itself ([`PreparedSeal::seal_with`]) may then run on any thread. What the
    /// server reads of the result is what [`Sealer::seal_with`] would have written: the nonce
    /// comes from the same generator, drawn here one element at a time, so it stays random
    /// whichever thread encrypts or finishes first.
    pub fn prepare(&mut self) -> PreparedSeal {
        if self.sealed == MESSAGES_PER_EPOCH {
            self.next_epoch();
        }
        self.sealed += 1;
        PreparedSeal {
            epoch: self.epoch,
            nonce: self.next_nonce(),
            key: self.key.clone(),
        }
    }

    /// Decrypts and authenticates an element this sealer sealed with `binding`: what a scheme
    /// reads back during a run. Every scheme rewrites all of storage under its own sealer before
    /// it serves (the initial fill), so an element from another run is a replay, even one
    /// whose address and generation match (runs whose generation bases collide would otherwise
    /// accept each other's elements).
    pub fn open(&self, binding: Binding, sealed: &[u8]) -> Result<Vec<u8>, CryptoError> {
        open_copy(sealed, |copy| self.open_in_place(binding, copy))
    }

    /// Decrypts and authenticates an element found at `address` without knowing which
    /// generation or which run wrote it (as after a crash); returns that generation with the
    /// plaintext. A replayed older element passes: callers that know the generation use
    /// [`Sealer::open`].
    pub fn open_found(&self, address: u128, sealed: &[u8]) -> Result<(u64, Vec<u8>), CryptoError> {
        let header = Self::header(sealed)?;
        let binding = Binding {
            address,
            generation: header.generation,
        };
        let plaintext = open_copy(sealed, |copy| self.open_in_place_at(binding, header, copy))?;
        Ok((header.generation, plaintext))
    }

    fn header(sealed: &[u8]) -> Result<ClearHeader, CryptoError> {
        ClearHeader::read(sealed).ok_or(CryptoError::Truncated(sealed.len()))
    }

    /// Like [`Sealer::open`], but decrypts in the element's own buffer: on success `sealed`
    /// holds the plaintext at the returned range (between the clear header and the tag), and
    /// no buffer is allocated. A batch opened this way holds one copy of its elements, not two.
    /// On failure the buffer's content is unspecified (it may be partly decrypted): callers
    /// must not use it.
    pub fn open_in_place(
        &self,
        binding: Binding,
        sealed: &mut [u8],
    ) -> Result<std::ops::Range<usize>, CryptoError> {
        let header = Self::header(sealed)?;
        if !self.own.contains(&header.epoch) {
            return Err(CryptoError::NotThisRun);
        }
        self.open_in_place_at(binding, header, sealed)
    }

    /// Decrypts `sealed`, whose header `header` was read from it, bound to `binding`, in
    /// place; returns where the plaintext lies.
    fn open_in_place_at(
        &self,
        binding: Binding,
        header: ClearHeader,
        sealed: &mut [u8],
    ) -> Result<std::ops::Range<usize>, CryptoError> {
        // The clear generation must be the one authenticated; a mismatch fails below anyway,
        // this only gives the clearer error first.
        if header.generation != binding.generation {
            return Err(CryptoError::Tampered);
        }
        let ClearHeader { epoch, nonce, .. } = header;
        let end = sealed.len() - TAG_LEN;
        let tag: [u8; TAG_LEN] = sealed[end..].try_into().expect("16 bytes");

        self.with_key(epoch, |key| {
            key.open_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(binding.aad()),
                Tag::from(tag),
                &mut sealed[HEADER_LEN..end],
                0..,
            )
        })
        .map_err(|_| CryptoError::Tampered)?;
        Ok(HEADER_LEN..end)
    }

    /// Runs `open` with the key of `epoch`, touching nothing other threads touch when it can:
    /// the current epoch's key is borrowed, and another epoch's comes from the key this thread
    /// used last if it is the same sealer's and epoch's. Every worker thread opens elements at
    /// once (a batch, or a restart's scan): taking each key from the shared table locked it and
    /// counted a reference to the key, and those counters bouncing between the cores were 17%
    /// of a ten-million-key restart's samples while it opened the scanned elements.
    fn with_key<T>(&self, epoch: u64, open: impl FnOnce(&LessSafeKey) -> T) -> T {
        if epoch == self.epoch {
            return open(&self.key);
        }
        LAST_KEY.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((sealer, last_epoch, key)) = &*last
                && *sealer == self.id
                && *last_epoch == epoch
            {
                return open(key);
            }
            let key = self.key_for(epoch);
            let opened = open(&key);
            *last = Some((self.id, epoch, key));
            opened
        })
    }

    /// Does the work of opening `len` more sealed bytes (decrypting and authenticating them in
    /// place, which fails) on a buffer of zeros, and drops the result: opening an element and
    /// then spending what a longer one has beyond it costs what opening the longer one does.
    /// Recovery's read-back evens out elements of different lengths with it, so that its time,
    /// which the storage server may see, does not follow which it read (see
    /// `cloak_core::recovery`'s decoys).
    pub fn spend_opening(&self, len: usize) {
        if len == 0 {
            return;
        }
        let mut bytes = vec![0; len];
        // No element is sealed with a zero nonce under this key (nonces are random), and
        // nothing is learned from an open that fails: the bytes are thrown away.
        let outcome = self.key.open_in_place_separate_tag(
            Nonce::assume_unique_for_key([0; NONCE_LEN]),
            Aad::empty(),
            Tag::from([0; TAG_LEN]),
            &mut bytes,
            0..,
        );
        std::hint::black_box((outcome.is_ok(), &bytes));
    }

    /// A fresh random epoch, not the next number: the new epoch must not link to the old one.
    fn next_epoch(&mut self) {
        self.epoch = self.rng.next_u64();
        self.key = self.key_for(self.epoch);
        self.sealed = 0;
        self.own.push(self.epoch);
    }

    fn key_for(&self, epoch: u64) -> Arc<LessSafeKey> {
        if epoch == self.epoch {
            return self.key.clone();
        }
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

/// One element's seal with its epoch key and nonce already chosen (see [`Sealer::prepare`]).
pub struct PreparedSeal {
    epoch: u64,
    nonce: [u8; NONCE_LEN],
    key: Arc<LessSafeKey>,
}

impl PreparedSeal {
    /// Encrypts the `len` bytes that `write` appends, bound to `binding`.
    pub fn seal_with(
        &self,
        binding: Binding,
        len: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + SEAL_OVERHEAD);
        out.resize(HEADER_LEN, 0);
        write(&mut out);
        assert_eq!(
            out.len(),
            HEADER_LEN + len,
            "seal_with wrote the wrong length"
        );
        out.resize(HEADER_LEN + len + TAG_LEN, 0);
        self.seal_in_place(binding, &mut out);
        out
    }

    /// Seals the plaintext that `element` holds between room for the clear header (its first
    /// [`SEAL_OVERHEAD`]` - 16` bytes) and room for the tag (its last 16), in place: the
    /// layout [`Sealer::open_in_place`] leaves, so an element opened in its own buffer is
    /// sealed again without another copy. The bytes are those [`PreparedSeal::seal_with`]
    /// gives for the same plaintext.
    ///
    /// # Panics
    /// If `element` is shorter than [`SEAL_OVERHEAD`] (a caller's bug: elements have one size).
    pub fn seal_in_place(&self, binding: Binding, element: &mut [u8]) {
        assert!(element.len() >= SEAL_OVERHEAD, "no room for the seal");
        let end = element.len() - TAG_LEN;
        element[..EPOCH_LEN].copy_from_slice(&self.epoch.to_le_bytes());
        element[EPOCH_LEN..EPOCH_LEN + NONCE_LEN].copy_from_slice(&self.nonce);
        element[EPOCH_LEN + NONCE_LEN..HEADER_LEN]
            .copy_from_slice(&binding.generation.to_le_bytes());
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(self.nonce),
                Aad::from(binding.aad()),
                &mut element[HEADER_LEN..end],
            )
            // ring only refuses messages longer than GCM's 64 GiB limit.
            .expect("element fits AES-GCM's message limit");
        element[end..].copy_from_slice(tag.as_ref());
    }
}

/// What anyone can read of a sealed element: its header, as the server sees it. The auditor
/// reads it to check that nothing in it depends on more than public information.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClearHeader {
    /// The key epoch the element was sealed in.
    pub epoch: u64,
    /// The element's nonce.
    pub nonce: [u8; NONCE_LEN],
    /// The generation of the element's binding, in the clear.
    pub generation: u64,
}

impl ClearHeader {
    /// The header of `sealed`; `None` if it is too short to be a sealed element.
    pub fn read(sealed: &[u8]) -> Option<Self> {
        if sealed.len() < SEAL_OVERHEAD {
            return None;
        }
        let word = |at: usize| -> u64 {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&sealed[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&sealed[EPOCH_LEN..EPOCH_LEN + NONCE_LEN]);
        Some(Self {
            epoch: word(0),
            nonce,
            generation: word(EPOCH_LEN + NONCE_LEN),
        })
    }

    /// The nonce's first 8 bytes as a little-endian number: where a counter would sit, so an
    /// attacker orders elements by it (random nonces make that order random).
    pub fn nonce_number(&self) -> u64 {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&self.nonce[..8]);
        u64::from_le_bytes(bytes)
    }
}

fn epoch_key(master: &MasterKey, epoch: u64) -> LessSafeKey {
    let bytes: [u8; 32] = master.derive(&[b"element epoch", &epoch.to_le_bytes()]);
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &bytes).expect("32-byte AES-256 key"))
}

/// The plaintext of `sealed`, opened by `open` in a copy of its own (the element is left as it
/// was): the bytes between the clear header and the tag, where `open` says they lie.
fn open_copy(
    sealed: &[u8],
    open: impl FnOnce(&mut [u8]) -> Result<std::ops::Range<usize>, CryptoError>,
) -> Result<Vec<u8>, CryptoError> {
    let mut plaintext = sealed.to_vec();
    let range = open(&mut plaintext)?;
    plaintext.truncate(range.end);
    plaintext.drain(..range.start);
    Ok(plaintext)
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

    /// A thread's last key is its sealer's: another sealer of another master key opening the
    /// same element, at the same epoch, on the same thread, derives its own key and fails; one
    /// of the same master opens it.
    #[test]
    fn a_threads_last_key_serves_only_the_sealer_that_took_it() {
        let mut writer = sealer();
        let sealed = writer.seal(AT, b"record");
        let same_master = sealer();
        let other_master = Sealer::new(&MasterKey::from_bytes([4; 32])).unwrap();
        for _ in 0..2 {
            assert_eq!(
                same_master.open_found(AT.address, &sealed).unwrap(),
                (AT.generation, b"record".to_vec())
            );
            assert!(other_master.open_found(AT.address, &sealed).is_err());
        }
        assert_eq!(writer.open(AT, &sealed).unwrap(), b"record");
    }

    /// The epochs of `n` seals drawn now, as a batch of `n` would draw them.
    fn batch_epochs(sealer: &mut Sealer, n: usize) -> Vec<u64> {
        (0..n).map(|_| sealer.prepare().epoch).collect()
    }

    /// Found by review: a batch whose seals straddled an epoch change showed, in the clear,
    /// which of its elements were sealed first. A reserved batch never straddles one.
    #[test]
    fn a_reserved_batch_never_straddles_an_epoch_change() {
        let mut unreserved = sealer();
        unreserved.sealed = MESSAGES_PER_EPOCH - 3;
        let epochs = batch_epochs(&mut unreserved, 8);
        assert_ne!(
            epochs[0], epochs[7],
            "without a reservation the batch straddles"
        );

        let mut reserved = sealer();
        let before = reserved.epoch;
        reserved.sealed = MESSAGES_PER_EPOCH - 3;
        reserved.reserve(8);
        let epochs = batch_epochs(&mut reserved, 8);
        assert!(
            epochs.iter().all(|&e| e == epochs[0] && e != before),
            "{epochs:x?}"
        );
        // With room left, a reservation changes nothing.
        let epoch = reserved.epoch;
        reserved.reserve(8);
        assert_eq!(batch_epochs(&mut reserved, 8), vec![epoch; 8]);
        // Every epoch it sealed under still opens.
        assert_eq!(reserved.own.len(), 2);
    }

    #[test]
    fn round_trip() {
        let mut s = sealer();
        let sealed = s.seal(AT, b"hello");
        assert_eq!(sealed.len(), 5 + SEAL_OVERHEAD);
        assert_eq!(s.open(AT, &sealed).unwrap(), b"hello");
    }

    /// Opening and sealing in the element's own buffer gives what the copying calls give, and
    /// a failed in-place open is an error like a failed copying one.
    #[test]
    fn in_place_open_and_seal_match_the_copying_ones() {
        let mut s = sealer();
        let sealed = s.seal(AT, b"in place");
        let mut element = sealed.clone();
        let range = s.open_in_place(AT, &mut element).unwrap();
        assert_eq!(&element[range.clone()], b"in place");
        assert_eq!(s.open(AT, &sealed).unwrap(), b"in place");

        let seal = s.prepare();
        let copied = seal.seal_with(AT, range.len(), |out| out.extend_from_slice(b"in place"));
        seal.seal_in_place(AT, &mut element);
        assert_eq!(element, copied, "same bytes, header and tag included");

        let mut tampered = sealed.clone();
        tampered[HEADER_LEN] ^= 1;
        assert_eq!(
            s.open_in_place(AT, &mut tampered),
            Err(CryptoError::Tampered)
        );
        let elsewhere = Binding { address: 43, ..AT };
        assert_eq!(
            s.open_in_place(elsewhere, &mut sealed.clone()),
            Err(CryptoError::Tampered)
        );
        assert_eq!(
            s.open_in_place(AT, &mut sealed[..10].to_vec()),
            Err(CryptoError::Truncated(10))
        );
    }

    #[test]
    fn the_clear_header_is_what_the_seal_wrote() {
        let mut s = sealer();
        let sealed = s.seal(AT, b"hello");
        let header = ClearHeader::read(&sealed).unwrap();
        assert_eq!(header.epoch, s.epoch);
        assert_eq!(header.generation, AT.generation);
        assert_eq!(header.nonce[..], sealed[EPOCH_LEN..EPOCH_LEN + NONCE_LEN]);
        assert_eq!(ClearHeader::read(&sealed[..SEAL_OVERHEAD - 1]), None);
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
    fn another_run_with_the_same_key_recovers_but_never_accepts_as_its_own() {
        let master = MasterKey::from_bytes([5; 32]);
        let sealed = Sealer::new(&master).unwrap().seal(AT, b"kept");
        let next_run = Sealer::new(&master).unwrap();
        assert_eq!(
            next_run.open_found(AT.address, &sealed).unwrap(),
            (AT.generation, b"kept".to_vec())
        );
        assert_eq!(
            next_run.open(AT, &sealed),
            Err(CryptoError::NotThisRun),
            "same address and generation, but not written by this run"
        );
        let other = Sealer::new(&MasterKey::from_bytes([6; 32])).unwrap();
        assert!(other.open_found(AT.address, &sealed).is_err());
    }

    /// Partition 0 of two clusters under one key: the stores' ids tell their elements apart.
    #[test]
    fn another_stores_element_does_not_open() {
        let master = MasterKey::from_bytes([5; 32]).for_partition(0);
        let sealed = Sealer::new(&master.for_store(1)).unwrap().seal(AT, b"a's");
        let other = Sealer::new(&master.for_store(2)).unwrap();
        assert_eq!(
            other.open_found(AT.address, &sealed),
            Err(CryptoError::Tampered)
        );
    }

    #[test]
    fn epochs_rotate_to_a_fresh_random_epoch() {
        let mut s = sealer();
        let first = s.epoch;
        let before = s.seal(AT, b"old");
        s.sealed = MESSAGES_PER_EPOCH;
        let sealed = s.seal(AT, b"x");
        assert_ne!(s.epoch, first);
        assert_ne!(
            s.epoch,
            first.wrapping_add(1),
            "an epoch must not follow from the last"
        );
        assert_eq!(s.open(AT, &sealed).unwrap(), b"x");
        assert_eq!(
            s.open(AT, &before).unwrap(),
            b"old",
            "older epochs still open"
        );
    }

    fn nonce_of(sealed: &[u8]) -> [u8; NONCE_LEN] {
        sealed[EPOCH_LEN..EPOCH_LEN + NONCE_LEN].try_into().unwrap()
    }

    /// How many of the neighbouring pairs among 2,000 consecutive nonces are ascending.
    fn ascending_nonce_pairs(s: &mut Sealer) -> usize {
        let nonces: Vec<u128> = (0..2000)
            .map(|_| {
                let mut wide = [0u8; 16];
                wide[..NONCE_LEN].copy_from_slice(&nonce_of(&s.seal(AT, b"v")));
                u128::from_le_bytes(wide)
            })
            .collect();
        let distinct: std::collections::HashSet<_> = nonces.iter().collect();
        assert_eq!(distinct.len(), nonces.len(), "a nonce repeated");
        nonces.windows(2).filter(|w| w[0] < w[1]).count()
    }

    /// Binomial(1999, 1/2): mean 999.5, sd 22; 6 sd either way.
    const NO_ORDER: std::ops::RangeInclusive<usize> = 867..=1132;

    /// The header a server reads must not tell in which order elements were sealed. With a
    /// counter, the nonces of a batch sort into the order they were sealed; random nonces sort
    /// into a uniformly random order, so about half of the neighbouring pairs are ascending.
    #[test]
    fn nonces_carry_no_order() {
        let mut s = sealer();
        let ascending = ascending_nonce_pairs(&mut s);
        assert!(
            NO_ORDER.contains(&ascending),
            "{ascending} of 1999 ascending"
        );
        let epochs: std::collections::HashSet<_> = (0..10)
            .map(|_| s.seal(AT, b"v")[..EPOCH_LEN].to_vec())
            .collect();
        assert_eq!(epochs.len(), 1, "one epoch within a run");
    }

    /// The check above catches the leak it is there for.
    #[cfg(feature = "leak-demo")]
    #[test]
    fn the_order_check_flags_counter_nonces() {
        let mut s = Sealer::with_counter_nonces(&MasterKey::from_bytes([3; 32])).unwrap();
        let ascending = ascending_nonce_pairs(&mut s);
        assert!(
            !NO_ORDER.contains(&ascending),
            "{ascending} of 1999 ascending"
        );
    }

    #[cfg(feature = "leak-demo")]
    #[test]
    fn counter_nonces_count_for_the_leak_demo() {
        let mut s = Sealer::with_counter_nonces(&MasterKey::from_bytes([3; 32])).unwrap();
        for i in 0..5u64 {
            let sealed = s.seal(AT, b"v");
            assert_eq!(nonce_of(&sealed)[..8], i.to_le_bytes());
            assert_eq!(s.open(AT, &sealed).unwrap(), b"v");
        }
    }
}
