//! The master key: loading, generating and deriving purpose-specific keys from it.

use std::path::Path;

use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};

/// Length of the master key in bytes.
const KEY_LEN: usize = 32;

/// Why a master key could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file could not be read.
    #[error("cannot read key file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The key has the wrong number of hexadecimal characters.
    #[error("a key must be {expected} hexadecimal characters (32 bytes), found {found} characters")]
    Length {
        /// Characters a key has.
        expected: usize,
        /// Characters found.
        found: usize,
    },
    /// The key is not hexadecimal.
    #[error("a key must be hexadecimal: {0}")]
    NotHex(#[from] hex::FromHexError),
    /// No randomness for a new key.
    #[error("the operating system's random number generator failed")]
    Random,
}

/// The proxy's 256-bit secret. Debug output never shows it.
#[derive(Clone)]
pub struct MasterKey([u8; KEY_LEN]);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// A fresh key from the operating system's CSPRNG.
    pub fn generate() -> Result<Self, KeyError> {
        random_bytes().map(Self)
    }

    /// A key with fixed bytes; for tests and reproducible simulations only.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// Parses the 64 hexadecimal characters written by [`MasterKey::to_hex`] (surrounding
    /// whitespace is ignored).
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        if text.len() != 2 * KEY_LEN {
            return Err(KeyError::Length {
                expected: 2 * KEY_LEN,
                found: text.len(),
            });
        }
        let mut bytes = [0u8; KEY_LEN];
        hex::decode_to_slice(text, &mut bytes)?;
        Ok(Self(bytes))
    }

    /// Reads a key file as written by `cloak keygen`.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_hex(&text)
    }

    /// The key as 64 hexadecimal characters, as key files hold it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The key of one partition of a cluster whose proxies share this key: independent of every
    /// other partition's, so an element a storage server moves from one partition's storage to
    /// another's fails to open there, as one sealed under a foreign key does.
    pub fn for_partition(&self, partition: u64) -> MasterKey {
        MasterKey(self.derive(&[b"cluster partition", &partition.to_be_bytes()]))
    }

    /// The key of one store: independent of every other store's, even of stores under the same
    /// key (two proxies given one `--key-file`, or partition `i` of two clusters sharing one), so
    /// an element a storage server copies from one store into another fails to open there, as
    /// one sealed under a foreign key does. `store` is the store's random id (see
    /// `cloak_proxy::store_id`); it is public, the derived key is not.
    pub fn for_store(&self, store: u128) -> MasterKey {
        MasterKey(self.derive(&[b"store", &store.to_be_bytes()]))
    }

    /// Derives `N` bytes of key material for one purpose. Distinct `purpose` strings give
    /// independent keys (HKDF-SHA256, RFC 5869).
    pub(crate) fn derive<const N: usize>(&self, purpose: &[&[u8]]) -> [u8; N] {
        struct Len(usize);
        impl hkdf::KeyType for Len {
            fn len(&self) -> usize {
                self.0
            }
        }
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"cloak/v1").extract(&self.0);
        let mut out = [0u8; N];
        // Both calls fail only when N exceeds 255 * 32 bytes, which no caller asks for.
        prk.expand(purpose, Len(N))
            .and_then(|okm| okm.fill(&mut out))
            .expect("HKDF output length is within bounds");
        out
    }
}

/// A random number from the operating system's CSPRNG.
pub fn random_u64() -> Result<u64, KeyError> {
    random_bytes().map(u64::from_le_bytes)
}

/// `N` bytes from the operating system's CSPRNG.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], KeyError> {
    let mut bytes = [0u8; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| KeyError::Random)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let key = MasterKey::generate().unwrap();
        let again = MasterKey::from_hex(&format!("  {}\n", key.to_hex())).unwrap();
        assert_eq!(key.0, again.0);
        assert!(matches!(
            MasterKey::from_hex("abcd"),
            Err(KeyError::Length { found: 4, .. })
        ));
        assert!(matches!(
            MasterKey::from_hex(&"zz".repeat(32)),
            Err(KeyError::NotHex(_))
        ));
    }

    #[test]
    fn purposes_give_independent_keys() {
        let key = MasterKey::from_bytes([1; 32]);
        let a: [u8; 32] = key.derive(&[b"a"]);
        let b: [u8; 32] = key.derive(&[b"b"]);
        assert_ne!(a, b);
        assert_eq!(a, key.derive::<32>(&[b"a"]));
    }

    #[test]
    fn partitions_get_their_own_keys() {
        let key = MasterKey::from_bytes([1; 32]);
        assert_ne!(key.for_partition(0).0, key.for_partition(1).0);
        assert_ne!(key.for_partition(0).0, key.0);
        assert_eq!(key.for_partition(3).0, key.for_partition(3).0);
    }

    #[test]
    fn stores_get_their_own_keys() {
        let key = MasterKey::from_bytes([1; 32]);
        assert_ne!(key.for_store(1).0, key.for_store(2).0);
        assert_ne!(key.for_store(1).0, key.0);
        assert_ne!(
            key.for_partition(0).for_store(1).0,
            key.for_partition(1).for_store(1).0
        );
        assert_eq!(key.for_store(7).0, key.for_store(7).0);
    }
}
