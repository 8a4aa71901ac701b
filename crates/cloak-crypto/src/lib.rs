//! Cryptography for the trusted proxy: one master key, and what is derived from it.
//!
//! - [`MasterKey`]: the 256-bit secret every other key comes from (key file, `CLOAK_KEY`, or
//!   ephemeral). It never leaves the proxy.
//! - [`Sealer`]: authenticated encryption of storage elements (AES-256-GCM) with associated data
//!   that binds each ciphertext to where and when it was written.
//! - [`Prf`]: pseudorandom 128-bit storage labels for schemes that address storage by label.
//! - [`KeyHasher`]: a keyed 128-bit hash of client keys for the proxy's key directory.
//! - [`FileMac`]: tags on the proxy's own state files; [`MasterKey::fingerprint`] names a key.
//! - [`StoreId`]: a store's random id, which its elements' key is derived with, and its marker.
//!
//! Every derived key is separated by an HKDF label, so no two uses share a key.

#![warn(missing_docs)]

mod hash;
mod key;
mod mac;
mod prf;
mod sealer;
mod store_id;

pub use hash::KeyHasher;
pub use key::{KeyError, MasterKey, random_u64};
pub use mac::FileMac;
pub use prf::Prf;
pub use sealer::{Binding, ClearHeader, CryptoError, PreparedSeal, SEAL_OVERHEAD, Sealer};
pub use store_id::StoreId;
