//! A store's identity: a random 128-bit id drawn when the store is created, bound into every
//! element it writes, so that a storage server cannot pass one store's elements off as another's.
//!
//! Why: elements are bound to their address and generation only, under a key derived from the
//! master key. Two stores that share a master key (one `--key-file` for two proxies, or partition
//! `i` of two clusters) would accept each other's elements, and a server could copy a value from
//! one into the other between two runs. Every element is now sealed under
//! [`MasterKey::for_store`] of the store's id, so an element of another store fails to open and
//! is reported as damage at its address, like any forged element.
//!
//! Where the id lives:
//! - in storage, in a small marker element at [`STORE_MARKER`] (the id and its tag under the
//!   master key), so a proxy without a state directory finds it at every restart;
//! - in the state directory's ledger, when there is one: the proxy's own disk, which the server
//!   cannot swap. A marker naming another store than the ledger, or no marker for a store the
//!   ledger remembers, refuses the start and says which.
//!
//! What stays undetectable without a state directory: a whole store swapped or rolled back,
//! marker included, for another copy under the same key. The proxy has nothing but the key to
//! compare with, and every copy the key sealed authenticates.
//!
//! What the server sees: one read of the marker and, when there is none, a scan of one element
//! (is storage empty?) and the marker's write when the store is created. Both happen at start,
//! before any client is served, the same at every start of a store: they depend on nothing a
//! client does.

use cloak_core::{STORE_MARKER, StorageError, StorageOp, StorageReply};
pub use cloak_crypto::StoreId;
use cloak_crypto::{KeyError, MasterKey};
use cloak_storage::Storage;

use crate::ledger::Ledger;

/// Why a store's identity could not be settled; each refuses the start.
#[derive(Debug, thiserror::Error)]
pub enum StoreIdError {
    #[error(
        "storage's store marker (address {STORE_MARKER}) does not authenticate under this key: \
         the proxy has the wrong key, or the storage server forged or altered the marker"
    )]
    Unauthentic,
    #[error(
        "storage holds store {storage}'s elements, this proxy's state is store {ours}: the \
         storage server swapped in another store's elements under the same key (or --storage \
         names another store's storage); start with that store's state directory, or give this \
         store's storage"
    )]
    OtherStore { storage: StoreId, ours: StoreId },
    #[error(
        "storage holds no store marker, but this proxy's state is store {ours}: the storage \
         server deleted the marker (and maybe the store), or --storage names another storage. \
         If this is the store's storage, --accept-data-loss writes the marker back from the \
         state directory and starts on what storage holds"
    )]
    MarkerMissing { ours: StoreId },
    #[error(
        "storage holds elements but no store marker: a store created by a Cloak from before \
         store ids, or the storage server deleted the marker. Start it with the Cloak that wrote \
         it, and load its data into a new store (an empty storage)"
    )]
    Unmarked,
    #[error("storage answered {0} where the store marker was asked for")]
    Malformed(String),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("cannot draw a store id: {0}")]
    Random(#[from] KeyError),
}

/// The id of the store in `storage`, checked against the one `ledger` remembers; a new id (its
/// marker written, the ledger told) when storage is empty and no ledger remembers one. A marker
/// missing from a store the ledger remembers is an error, unless `accept_data_loss`: the ledger
/// then vouches for the id and the marker is written back.
pub async fn identify(
    storage: &dyn Storage,
    master: &MasterKey,
    ledger: Option<&mut Ledger>,
    accept_data_loss: bool,
) -> Result<StoreId, StoreIdError> {
    let ours = ledger.as_ref().and_then(|ledger| ledger.store());
    let id = match (read_marker(storage).await?, ours) {
        (Some(marker), ours) => {
            let found = StoreId::from_marker(master, &marker).ok_or(StoreIdError::Unauthentic)?;
            match ours {
                Some(ours) if ours != found => {
                    return Err(StoreIdError::OtherStore {
                        storage: found,
                        ours,
                    });
                }
                _ => found,
            }
        }
        (None, Some(ours)) if !accept_data_loss => {
            return Err(StoreIdError::MarkerMissing { ours });
        }
        (None, Some(ours)) => {
            tracing::warn!(store = %ours, "--accept-data-loss: writing back the store's marker");
            write_marker(storage, master, ours).await?;
            ours
        }
        (None, None) => {
            if !is_empty(storage).await? {
                return Err(StoreIdError::Unmarked);
            }
            let id = StoreId::random()?;
            write_marker(storage, master, id).await?;
            tracing::info!(store = %id, "a new store");
            id
        }
    };
    if let Some(ledger) = ledger {
        ledger.bind_store(id);
    }
    Ok(id)
}

async fn write_marker(
    storage: &dyn Storage,
    master: &MasterKey,
    id: StoreId,
) -> Result<(), StoreIdError> {
    let marker = id.marker(master).into();
    storage
        .call(StorageOp::Write(vec![(STORE_MARKER, marker)]))
        .await?;
    Ok(())
}

async fn read_marker(storage: &dyn Storage) -> Result<Option<bytes::Bytes>, StoreIdError> {
    match storage.call(StorageOp::Read(vec![STORE_MARKER])).await? {
        StorageReply::Values(mut values) if values.len() == 1 => Ok(values.remove(0)),
        other => Err(StoreIdError::Malformed(other.summary())),
    }
}

async fn is_empty(storage: &dyn Storage) -> Result<bool, StoreIdError> {
    match storage
        .call(StorageOp::Scan {
            after: None,
            limit: 1,
        })
        .await?
    {
        StorageReply::Entries(entries) => Ok(entries.is_empty()),
        other => Err(StoreIdError::Malformed(other.summary())),
    }
}

#[cfg(test)]
mod tests {
    use cloak_storage::MemoryStorage;

    use super::*;
    use crate::ledger::StoreManifest;

    fn ledger(dir: &tempfile::TempDir, key: &MasterKey) -> Ledger {
        let manifest = StoreManifest {
            scheme: "cloak".into(),
            capacity: 10,
            key_size: 8,
            value_size: 8,
        };
        Ledger::open(dir.path(), key, manifest).unwrap()
    }

    #[tokio::test]
    async fn a_store_is_made_once_and_every_mix_up_is_refused_by_name() {
        let key = MasterKey::from_bytes([1; 32]);
        let (a, b) = (MemoryStorage::new(), MemoryStorage::new());
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ledger(&dir, &key);
        let id = identify(&a, &key, Some(&mut ledger), false).await.unwrap();
        assert_eq!(ledger.store(), Some(id));
        assert_eq!(identify(&a, &key, None, false).await.unwrap(), id);
        let other = identify(&b, &key, None, false).await.unwrap();
        assert_ne!(other, id);

        let swapped = identify(&b, &key, Some(&mut ledger), false).await;
        assert!(
            matches!(swapped, Err(StoreIdError::OtherStore { storage, ours })
                if storage == other && ours == id),
            "{swapped:?}"
        );
        let wrong_key = identify(&a, &MasterKey::from_bytes([2; 32]), None, false).await;
        assert!(matches!(wrong_key, Err(StoreIdError::Unauthentic)));

        a.call(StorageOp::Delete(vec![STORE_MARKER])).await.unwrap();
        let missing = identify(&a, &key, Some(&mut ledger), false).await;
        assert!(
            matches!(missing, Err(StoreIdError::MarkerMissing { ours }) if ours == id),
            "{missing:?}"
        );
        a.call(StorageOp::Write(vec![(0, vec![1u8; 8].into())]))
            .await
            .unwrap();
        let unmarked = identify(&a, &key, None, false).await;
        assert!(matches!(unmarked, Err(StoreIdError::Unmarked)));
        // The ledger vouches: an accepted loss writes the marker back.
        assert_eq!(
            identify(&a, &key, Some(&mut ledger), true).await.unwrap(),
            id
        );
        assert_eq!(identify(&a, &key, None, false).await.unwrap(), id);
    }
}
