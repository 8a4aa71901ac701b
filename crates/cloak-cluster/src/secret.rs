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
//! proxy holding the secret can have made it. And it signs the health answers a move relies on
//! ([`ClusterSecret::sign_health`]), fresh for each question, so that whoever answers in a
//! proxy's place cannot say it let a partition go.
//!
//! Every MAC made here starts with a label of its kind (`MAP_LABEL`, `HEALTH_LABEL`), so a
//! MAC of one kind is never a valid MAC of another made with the same secret.

use ring::hmac;

/// The user an operator's tool authenticates as to run admin commands.
pub const ADMIN_USER: &str = "cloak-admin";

/// The fewest bytes a secret may have: a guessable one would make every proxy an open door.
const MIN_SECRET_BYTES: usize = 16;

/// What a map's MAC covers besides the map, so that it is never a valid MAC of anything else
/// made with the same secret.
const MAP_LABEL: &[u8] = b"cloak cluster map\n";

/// What a health answer's MAC covers besides its fields (see [`ClusterSecret::sign_health`]).
const HEALTH_LABEL: &[u8] = b"cloak health report\n";

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
    /// Fewer than `MIN_SECRET_BYTES` bytes.
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
        self.mac(&[MAP_LABEL, canonical.as_bytes()].concat())
    }

    /// Whether `mac` (hexadecimal) is the MAC of `canonical` under this secret.
    pub(crate) fn verifies(&self, canonical: &str, mac: &str) -> bool {
        self.check(&[MAP_LABEL, canonical.as_bytes()].concat(), mac)
    }

    /// The MAC, in hexadecimal, of the health answer `report` that proxy `proxy` (its name in
    /// the map) gives to the question that carried `nonce`.
    ///
    /// The nonce makes it fresh: an answer recorded earlier (a proxy saying it let a
    /// partition go, before it took it back) is no answer to a new question. The name makes it
    /// that proxy's: every proxy holds the same secret, so without it an answer one proxy gives
    /// could be passed off as another's (the one that serves the partition). Each field is
    /// length-prefixed, so no two different triples give the same bytes.
    pub fn sign_health(&self, nonce: &str, proxy: &str, report: &str) -> String {
        self.mac(&health_message(nonce, proxy, report))
    }

    /// Whether `mac` (hexadecimal) is [`ClusterSecret::sign_health`]'s MAC of those fields.
    pub fn verifies_health(&self, nonce: &str, proxy: &str, report: &str, mac: &str) -> bool {
        self.check(&health_message(nonce, proxy, report), mac)
    }

    /// The HMAC-SHA256 of `message` under the secret, in hexadecimal.
    fn mac(&self, message: &[u8]) -> String {
        let tag = hmac::sign(&self.key, message);
        tag.as_ref()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// Whether `mac` (hexadecimal) is the HMAC-SHA256 of `message`, compared in constant time.
    fn check(&self, message: &[u8], mac: &str) -> bool {
        let Some(bytes) = from_hex(mac) else {
            return false;
        };
        hmac::verify(&self.key, message, &bytes).is_ok()
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

/// What a health answer's MAC covers: the label, then each field after its length.
fn health_message(nonce: &str, proxy: &str, report: &str) -> Vec<u8> {
    let mut message = HEALTH_LABEL.to_vec();
    for field in [nonce, proxy, report] {
        message.extend_from_slice(&(field.len() as u64).to_be_bytes());
        message.extend_from_slice(field.as_bytes());
    }
    message
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

    #[test]
    fn a_health_mac_binds_the_nonce_the_proxy_and_the_report() {
        let secret = ClusterSecret::new(b"0123456789abcdef0123", "f").unwrap();
        let other = ClusterSecret::new(b"0123456789abcdef0124", "f").unwrap();
        let report = "epoch 1 cluster c0\n2 ok\n";
        let mac = secret.sign_health("n1", "a", report);
        assert!(secret.verifies_health("n1", "a", report, &mac));
        // Replayed to another question, passed off as another proxy's, changed, or forged.
        assert!(!secret.verifies_health("n2", "a", report, &mac));
        assert!(!secret.verifies_health("n1", "b", report, &mac));
        assert!(!secret.verifies_health("n1", "a", "epoch 1 cluster c0\n", &mac));
        assert!(!other.verifies_health("n1", "a", report, &mac));
        // Fields cannot trade bytes across their boundaries.
        assert!(!secret.verifies_health("n1a", "", report, &mac));
        // Never a map's MAC, nor a map's MAC a health answer's.
        assert!(!secret.verifies(report, &mac));
        let map_mac = secret.sign(report);
        assert!(!secret.verifies_health("", "", report, &map_mac));
    }
}
