//! A store's random id and its marker element (see `cloak_proxy::store_id` for how a start uses
//! them): the id picks the store's key ([`MasterKey::for_store`]); the marker keeps the id in
//! storage, tagged under the master key so the server can neither forge nor alter it.

use crate::key::random_bytes;
use crate::{FileMac, KeyError, MasterKey};

/// What a marker starts with: tells it apart from every other thing tagged under the master key
/// (the ledger's text starts "cloak ledger").
const MAGIC: &[u8; 16] = b"cloak store id 1";
const ID_LEN: usize = 16;

/// A store's random id: public (the marker holds it in the clear), never secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreId(pub u128);

impl std::fmt::Display for StoreId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl std::str::FromStr for StoreId {
    type Err = std::num::ParseIntError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        u128::from_str_radix(text, 16).map(StoreId)
    }
}

impl StoreId {
    /// The size of every marker element.
    pub const MARKER_LEN: usize = MAGIC.len() + ID_LEN + crate::mac::TAG_LEN;

    /// A fresh id from the operating system's CSPRNG: 128 bits, so no two stores draw the same.
    pub fn random() -> Result<Self, KeyError> {
        random_bytes().map(|bytes| StoreId(u128::from_be_bytes(bytes)))
    }

    /// The key this store's elements are sealed under.
    pub fn key(self, master: &MasterKey) -> MasterKey {
        master.for_store(self.0)
    }

    /// The marker element that names this store in storage, tagged under `master`.
    pub fn marker(self, master: &MasterKey) -> Vec<u8> {
        let mut marker = Vec::with_capacity(Self::MARKER_LEN);
        marker.extend_from_slice(MAGIC);
        marker.extend_from_slice(&self.0.to_be_bytes());
        let tag = FileMac::new(master).tag(&marker);
        marker.extend_from_slice(&tag);
        marker
    }

    /// The id a marker names, if `master` tagged it.
    pub fn from_marker(master: &MasterKey, marker: &[u8]) -> Option<StoreId> {
        if marker.len() != Self::MARKER_LEN || !marker.starts_with(MAGIC) {
            return None;
        }
        let (body, tag) = marker.split_at(MAGIC.len() + ID_LEN);
        if !FileMac::new(master).verify(body, tag) {
            return None;
        }
        let id: [u8; ID_LEN] = body[MAGIC.len()..].try_into().ok()?;
        Some(StoreId(u128::from_be_bytes(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_names_its_store_only_under_its_key() {
        let (key, other) = (
            MasterKey::from_bytes([1; 32]),
            MasterKey::from_bytes([2; 32]),
        );
        let id = StoreId(0x1234_5678_9abc_def0_0fed_cba9_8765_4321);
        let marker = id.marker(&key);
        assert_eq!(StoreId::from_marker(&key, &marker), Some(id));
        assert_eq!(StoreId::from_marker(&other, &marker), None);
        for i in 0..marker.len() {
            let mut bad = marker.clone();
            bad[i] ^= 1;
            assert_eq!(StoreId::from_marker(&key, &bad), None, "byte {i}");
        }
        assert_eq!(StoreId::from_marker(&key, &marker[1..]), None);
        assert_eq!(id.to_string().parse::<StoreId>().unwrap(), id);
    }
}
