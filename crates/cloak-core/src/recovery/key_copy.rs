//! A recovered record's own copy of its key, held inline when it is short.
//!
//! A restart holds one for every slot of the store at once (see `records::Found`). Boxed, a
//! 16-byte key cost 16 bytes of pointer and length plus a 16-byte allocation, made on the core
//! that opened its element and freed on another when the fill ended: ten million allocations,
//! and ten million pages' worth of fresh memory faulted in during the restart. Most keys are
//! short, so a key of up to [`INLINE`] bytes is kept in the 24 bytes the type takes anyway, and
//! only a longer one is boxed.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// The longest key held inline: what fits beside its length in the 24 bytes a boxed key's
/// variant takes with the enum's tag.
pub(super) const INLINE: usize = 22;

/// A key's bytes (see the module docs). Compares and hashes as its bytes.
#[derive(Clone)]
pub(super) enum KeyCopy {
    /// A key of up to [`INLINE`] bytes: the first `len` of `bytes`.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A longer key.
    Boxed(Box<[u8]>),
}

impl Default for KeyCopy {
    fn default() -> Self {
        KeyCopy::Inline {
            len: 0,
            bytes: [0; INLINE],
        }
    }
}

impl From<&[u8]> for KeyCopy {
    fn from(key: &[u8]) -> Self {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key);
                KeyCopy::Inline { len, bytes }
            }
            _ => KeyCopy::Boxed(key.into()),
        }
    }
}

impl Deref for KeyCopy {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            KeyCopy::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyCopy::Boxed(key) => key,
        }
    }
}

impl PartialEq for KeyCopy {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for KeyCopy {}

impl Hash for KeyCopy {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl fmt::Debug for KeyCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn takes_what_a_boxed_key_and_its_tag_take() {
        assert_eq!(std::mem::size_of::<KeyCopy>(), 24);
    }

    #[test]
    fn keys_of_every_length_come_back_as_they_went_in_and_compare_as_bytes() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 300] {
            let key: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
            let copy = KeyCopy::from(&key[..]);
            assert_eq!(&*copy, &key[..], "{len} bytes");
            assert_eq!(matches!(copy, KeyCopy::Inline { .. }), len <= INLINE);
            assert_eq!(
                copy,
                KeyCopy::Boxed(key.clone().into()),
                "{len} bytes, either way"
            );
        }
        let seed = hashbrown::DefaultHashBuilder::default();
        let short = KeyCopy::from(&b"key:000000001234"[..]);
        assert_eq!(
            seed.hash_one(&short),
            seed.hash_one(KeyCopy::Boxed(b"key:000000001234"[..].into())),
            "hashed as its bytes, whichever way it is held"
        );
    }
}
