//! Authentication of the proxy's own files (HMAC-SHA256 under a key derived from the master key),
//! and the key's fingerprint.
//!
//! The state directory is the proxy's trusted disk, but a file there can still be damaged, or
//! belong to a run with another key: a tag tells both apart from a file this key wrote. The
//! fingerprint names a key without revealing it (an HKDF output, so it says nothing about the key
//! or any other key derived from it), so an operator can be told "wrong key" plainly.

use ring::hmac;

use crate::MasterKey;

/// Length of a [`FileMac::tag`].
pub const TAG_LEN: usize = 32;

/// Tags and checks files the proxy writes for itself.
pub struct FileMac {
    key: hmac::Key,
}

impl FileMac {
    /// The MAC of the store whose master key is `master`.
    pub fn new(master: &MasterKey) -> Self {
        let key: [u8; 32] = master.derive(&[b"state file mac"]);
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, &key),
        }
    }

    /// The tag (HMAC-SHA256) of `data`.
    pub fn tag(&self, data: &[u8]) -> [u8; TAG_LEN] {
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(hmac::sign(&self.key, data).as_ref());
        out
    }

    /// Whether `tag` is this key's tag of `data` (compared in constant time).
    pub fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        hmac::verify(&self.key, data, tag).is_ok()
    }
}

impl MasterKey {
    /// A short public name for this key: 16 hexadecimal characters.
    pub fn fingerprint(&self) -> String {
        let bytes: [u8; 8] = self.derive(&[b"key fingerprint"]);
        hex::encode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_verify_only_under_the_same_key_and_data() {
        let (a, b) = (
            MasterKey::from_bytes([1; 32]),
            MasterKey::from_bytes([2; 32]),
        );
        let tag = FileMac::new(&a).tag(b"ledger");
        assert!(FileMac::new(&a).verify(b"ledger", &tag));
        assert!(!FileMac::new(&a).verify(b"ledgeR", &tag));
        assert!(!FileMac::new(&b).verify(b"ledger", &tag));
        assert_eq!(a.fingerprint(), a.fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint().len(), 16);
    }
}
