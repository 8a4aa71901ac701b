//! The cluster secret: what lets an operator move partitions, kept apart from the client
//! password every application has.
//!
//! Redis-ACL style, an operator's tool proves it with `AUTH cloak-admin <secret>` ([`ADMIN_USER`]);
//! only such a connection may run the `CLOAK` commands that change which proxy serves what. The
//! client password (or none) grants key commands only. The secret lives in a file of its own on
//! the proxies' and the operator's machines (`cloak keygen -o FILE` makes one), never in the
//! cluster file, which is public configuration copied everywhere.
//!
//! Each proxy also signs every map it keeps with the secret ([`ClusterSecret::sign`]), so a map
//! changed on disk, or one a peer answers at a restart, is checked before it is believed: only a
//! proxy holding the secret can have made it.

use ring::hmac;

/// The user an operator's tool authenticates as to run admin commands.
pub const ADMIN_USER: &str = "cloak-admin";

/// The fewest bytes a secret may have: a guessable one would make every proxy an open door.
const MIN_SECRET_BYTES: usize = 16;

/// What a map's MAC covers besides the map, so that it is never a valid MAC of anything else
/// made with the same secret.
const MAP_LABEL: &[u8] = b"cloak cluster map\n";

/// The cluster's shared secret.
#[derive(Clone)]
pub struct ClusterSecret {
    /// What `AUTH cloak-admin` must give.
    text: String,
    key: hmac::Key,
}

/// Why a secret cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Fewer than [`MIN_SECRET_BYTES`] bytes.
    #[error(
        "the cluster secret in {0} is shorter than 16 bytes; make one with `cloak keygen -o FILE`"
    )]
    TooShort(String),
    /// Not one word of printable text (it is sent with `AUTH`).
    #[error(
        "the cluster secret in {0} must be one word of printable ASCII (`cloak keygen` writes one)"
    )]
    NotText(String),
}

impl ClusterSecret {
    /// The secret from the bytes of `source` (a file's name, for errors), without surrounding
    /// whitespace.
    pub fn new(bytes: &[u8], source: &str) -> Result<Self, SecretError> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort(source.to_string()));
        }
        if !trimmed.iter().all(u8::is_ascii_graphic) {
            return Err(SecretError::NotText(source.to_string()));
        }
        Ok(Self {
            text: String::from_utf8_lossy(trimmed).into_owned(),
            key: hmac::Key::new(hmac::HMAC_SHA256, trimmed),
        })
    }

    /// What a tool sends with `AUTH cloak-admin`.
    pub fn password(&self) -> &str {
        &self.text
    }

    /// Whether `password` is the secret, compared without an early exit (so a reply's timing
    /// does not tell how much of a guess was right).
    pub fn admits(&self, password: &[u8]) -> bool {
        let expected = self.text.as_bytes();
        password.len() == expected.len()
            && password
                .iter()
                .zip(expected)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// The MAC of `canonical` (a map's [`crate::ClusterMap::to_toml`]), in hexadecimal.
    pub(crate) fn sign(&self, canonical: &str) -> String {
        let tag = hmac::sign(&self.key, &labelled(canonical));
        tag.as_ref()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// Whether `mac` (hexadecimal) is the MAC of `canonical` under this secret.
    pub(crate) fn verifies(&self, canonical: &str, mac: &str) -> bool {
        let Some(bytes) = from_hex(mac) else {
            return false;
        };
        hmac::verify(&self.key, &labelled(canonical), &bytes).is_ok()
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

fn labelled(canonical: &str) -> Vec<u8> {
    [MAP_LABEL, canonical.as_bytes()].concat()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_admits_only_itself_and_must_be_long_text() {
        let secret = ClusterSecret::new(b"  0123456789abcdef0123\n", "f").unwrap();
        assert_eq!(secret.password(), "0123456789abcdef0123");
        assert!(secret.admits(b"0123456789abcdef0123"));
        assert!(!secret.admits(b"0123456789abcdef0124"));
        assert!(!secret.admits(b"0123456789abcdef012"));
        assert!(matches!(
            ClusterSecret::new(b"short", "f"),
            Err(SecretError::TooShort(_))
        ));
        assert!(matches!(
            ClusterSecret::new(b"0123456789 abcdef0123", "f"),
            Err(SecretError::NotText(_))
        ));
        assert_eq!(format!("{secret:?}"), "ClusterSecret(..)");
    }

    #[test]
    fn a_mac_verifies_only_its_text_under_its_secret() {
        let secret = ClusterSecret::new(b"0123456789abcdef0123", "f").unwrap();
        let other = ClusterSecret::new(b"0123456789abcdef0124", "f").unwrap();
        let mac = secret.sign("epoch = 1\n");
        assert_eq!(mac.len(), 64);
        assert!(secret.verifies("epoch = 1\n", &mac));
        assert!(!secret.verifies("epoch = 2\n", &mac));
        assert!(!other.verifies("epoch = 1\n", &mac));
        assert!(!secret.verifies("epoch = 1\n", "zz"));
    }
}
