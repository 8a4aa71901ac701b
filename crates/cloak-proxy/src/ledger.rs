//! The state directory's ledger of its store: what the store was created with, and the version
//! of every slot the proxy last knew storage to hold.
//!
//! ```text
//! cloak ledger 3
//! key-fingerprint 3f9a…        (MasterKey::fingerprint: names the key, reveals nothing of it)
//! store-id 5c0e…               (the store's random id, see `store_id`)
//! scheme cloak
//! capacity 5000
//! key-size 128
//! value-size 1024
//! slots 2
//! 0 17                          (slot, version), one line each
//! 4 23
//! mac 9c1e…                     (HMAC-SHA256 of everything above, under the master key)
//! ```
//!
//! Why here and not in storage: the storage server is the party being checked, and everything it
//! holds it can delete or roll back, including a manifest; the state directory is the proxy's own
//! disk, which the design already trusts with the key and the journal. Keeping it here also
//! leaves the server's view of a restart exactly as it was (one full scan, one full fill): no
//! extra element that every scheme's scan, fill and clean-up would have to step around. A proxy
//! without a state directory still fails closed on what the elements themselves show (every
//! element fails to open under a wrong key; every element has the wrong length after a size
//! change), but it cannot detect a rollback: nothing it trusts remembers the store.
//!
//! When the versions are saved: at every start, once recovery has been checked (what storage and
//! the journal hold then), and at every clean stop, once every acknowledged write is in storage.
//! A rollback or deletion of anything older than the last save is detected, with the slot and
//! version it hit. What a save cannot cover: writes acknowledged after it when the proxy then
//! crashes (SIGKILL, power loss) — the next start checks those against the older save only, so a
//! server that drops or rolls back exactly those writes, and only after such a crash, goes
//! unnoticed; and elements that hold no record (padding, dummies), whose loss costs no data.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cloak_core::{Slot, SlotVersions};
use cloak_crypto::{FileMac, MasterKey};
use cloak_storage::dir::write_synced;

use crate::store_id::StoreId;

/// Version 3: elements are sealed under the store's id (see `store_id`); a store of version 2
/// sealed them without one. Version 2: values carry an envelope (type and expiry, see
/// `cloak_core::envelope`); a store of version 1 holds bare values, which this proxy must not
/// read as envelopes.
const HEADER: &str = "cloak ledger 3";
const HEADER_BEFORE_STORE_IDS: &str = "cloak ledger 2";
const HEADER_BEFORE_ENVELOPES: &str = "cloak ledger 1";
const FILE: &str = "ledger";

/// What a store was created with; a start with anything else is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreManifest {
    pub scheme: String,
    pub capacity: u64,
    pub key_size: usize,
    pub value_size: usize,
}

impl StoreManifest {
    /// `(setting, value)` in file order; also the names used in messages.
    fn fields(&self) -> [(&'static str, String); 4] {
        [
            ("scheme", self.scheme.clone()),
            ("capacity", self.capacity.to_string()),
            ("key-size", self.key_size.to_string()),
            ("value-size", self.value_size.to_string()),
        ]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(
        "wrong key: the store was created with the key whose fingerprint is {stored}, but this \
         proxy has the key {given} (check --key-file and CLOAK_KEY; the state directory's own key \
         is used when neither is given)"
    )]
    WrongKey { stored: String, given: String },
    #[error(
        "{path} fails authentication: it was altered or damaged, so it cannot vouch for the store"
    )]
    Tampered { path: String },
    #[error("{path} is not a ledger this proxy can read: {reason}")]
    Malformed { path: String, reason: String },
    #[error(
        "the store was created with other settings: {0}; start with the settings it was created \
         with"
    )]
    Changed(String),
    #[error(
        "{path} belongs to a store written by a Cloak from before value envelopes (ledger \
         version 1): its values carry no type or expiry, and this version cannot read them; start \
         it with the Cloak that wrote it, or load its data into a new store"
    )]
    BeforeEnvelopes { path: String },
    #[error(
        "{path} belongs to a store written by a Cloak from before store ids (ledger version 2): \
         its elements are not bound to their store, and this version cannot read them; start it \
         with the Cloak that wrote it, and load its data into a new store"
    )]
    BeforeStoreIds { path: String },
    #[error("{path} cannot be saved before the store in storage is identified")]
    Unidentified { path: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// A state directory's ledger, opened and checked against this proxy's key and settings.
pub struct Ledger {
    path: PathBuf,
    mac: FileMac,
    fingerprint: String,
    manifest: StoreManifest,
    /// The store this ledger is about: read from the file, or, for a new ledger, the id
    /// [`crate::identify`] settled.
    store: Option<StoreId>,
    /// The versions the last save recorded: what storage must hold now (at least).
    pub expected: SlotVersions,
}

impl Ledger {
    /// Opens the ledger in `dir`. Without one (a new store, or a state directory from before
    /// ledgers) nothing is expected yet, and the first save records `manifest`.
    pub fn open(
        dir: &Path,
        master: &MasterKey,
        manifest: StoreManifest,
    ) -> Result<Self, LedgerError> {
        let path = dir.join(FILE);
        let mut ledger = Self {
            mac: FileMac::new(master),
            fingerprint: master.fingerprint(),
            manifest,
            store: None,
            expected: SlotVersions::new(),
            path,
        };
        match std::fs::read(&ledger.path) {
            Ok(bytes) => {
                let (store, expected) = ledger.check(&bytes)?;
                ledger.store = Some(store);
                ledger.expected = expected;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ledger.io(source)),
        }
        Ok(ledger)
    }

    /// The store the ledger remembers; `None` for a new ledger until `Ledger::bind_store`.
    pub fn store(&self) -> Option<StoreId> {
        self.store
    }

    /// Records which store this ledger is about, once [`crate::identify`] has checked it against
    /// the one it remembers.
    pub(crate) fn bind_store(&mut self, store: StoreId) {
        self.store = Some(store);
    }

    /// Durably replaces the ledger with `versions` (slots at version 0 were never written).
    pub fn save(&self, versions: &SlotVersions) -> Result<(), LedgerError> {
        let mut slots: Vec<(Slot, u64)> = versions
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(s, v)| (*s, *v))
            .collect();
        slots.sort_unstable();
        let store = self.store.ok_or_else(|| LedgerError::Unidentified {
            path: self.path.display().to_string(),
        })?;
        let mut text = format!(
            "{HEADER}\nkey-fingerprint {}\nstore-id {store}\n",
            self.fingerprint
        );
        for (name, value) in self.manifest.fields() {
            let _ = writeln!(text, "{name} {value}");
        }
        let _ = writeln!(text, "slots {}", slots.len());
        for (slot, version) in slots {
            let _ = writeln!(text, "{slot} {version}");
        }
        let tag = self.mac.tag(text.as_bytes());
        let _ = writeln!(text, "mac {}", hex::encode(tag));
        write_synced(&self.path, text.as_bytes()).map_err(|source| self.io(source))
    }

    /// Checks a ledger's key, tag and manifest, and reads its store and versions.
    fn check(&self, bytes: &[u8]) -> Result<(StoreId, SlotVersions), LedgerError> {
        let text = std::str::from_utf8(bytes).map_err(|_| self.malformed("not text"))?;
        let mut lines = text.lines();
        match lines.next() {
            Some(HEADER) => {}
            Some(HEADER_BEFORE_STORE_IDS) => {
                return Err(LedgerError::BeforeStoreIds {
                    path: self.path.display().to_string(),
                });
            }
            Some(HEADER_BEFORE_ENVELOPES) => {
                return Err(LedgerError::BeforeEnvelopes {
                    path: self.path.display().to_string(),
                });
            }
            _ => return Err(self.malformed("no ledger header")),
        }
        let stored =
            field(lines.next(), "key-fingerprint").ok_or_else(|| self.malformed("no key"))?;
        if stored != self.fingerprint {
            return Err(LedgerError::WrongKey {
                stored: stored.to_string(),
                given: self.fingerprint.clone(),
            });
        }
        let mac_at = text.rfind("mac ").ok_or_else(|| self.malformed("no tag"))?;
        let (body, tag_line) = text.split_at(mac_at);
        let tag =
            hex::decode(tag_line["mac ".len()..].trim()).map_err(|_| self.malformed("bad tag"))?;
        if !self.mac.verify(body.as_bytes(), &tag) {
            return Err(LedgerError::Tampered {
                path: self.path.display().to_string(),
            });
        }
        let store = field(lines.next(), "store-id")
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| self.malformed("no store id"))?;
        let mut changed = Vec::new();
        for (name, value) in self.manifest.fields() {
            let was = field(lines.next(), name).ok_or_else(|| self.malformed(name))?;
            if was != value {
                changed.push(format!(
                    "{} changed from {was} to {value}",
                    name.replace('-', " ")
                ));
            }
        }
        if !changed.is_empty() {
            return Err(LedgerError::Changed(changed.join(", ")));
        }
        let count: usize = field(lines.next(), "slots")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| self.malformed("no slot count"))?;
        let mut versions = SlotVersions::with_capacity(count);
        for line in lines.take(count) {
            let (slot, version) = line
                .split_once(' ')
                .and_then(|(s, v)| Some((s.parse().ok()?, v.parse().ok()?)))
                .ok_or_else(|| self.malformed("a bad slot line"))?;
            versions.insert(slot, version);
        }
        if versions.len() != count {
            return Err(self.malformed("fewer slots than it says"));
        }
        Ok((store, versions))
    }

    fn malformed(&self, reason: &str) -> LedgerError {
        LedgerError::Malformed {
            path: self.path.display().to_string(),
            reason: reason.to_string(),
        }
    }

    fn io(&self, source: std::io::Error) -> LedgerError {
        LedgerError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }
}

/// The value of a `name value` line.
fn field<'a>(line: Option<&'a str>, name: &str) -> Option<&'a str> {
    line?.strip_prefix(name)?.strip_prefix(' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(value_size: usize) -> StoreManifest {
        StoreManifest {
            scheme: "cloak".into(),
            capacity: 100,
            key_size: 16,
            value_size,
        }
    }

    const STORE: StoreId = StoreId(0xabc);

    /// A ledger in a new state directory, bound to [`STORE`].
    fn new_ledger(dir: &Path, key: &MasterKey) -> Ledger {
        let mut ledger = Ledger::open(dir, key, manifest(64)).unwrap();
        assert_eq!(ledger.store(), None, "a new ledger knows no store");
        ledger.bind_store(STORE);
        ledger
    }

    #[test]
    fn versions_and_the_store_round_trip_and_a_new_directory_expects_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let key = MasterKey::from_bytes([3; 32]);
        let unbound = Ledger::open(dir.path(), &key, manifest(64)).unwrap();
        assert!(matches!(
            unbound.save(&SlotVersions::new()),
            Err(LedgerError::Unidentified { .. })
        ));
        let ledger = new_ledger(dir.path(), &key);
        assert!(ledger.expected.is_empty());
        ledger
            .save(&SlotVersions::from([(1, 5), (7, 9), (8, 0)]))
            .unwrap();
        let again = Ledger::open(dir.path(), &key, manifest(64)).unwrap();
        assert_eq!(again.expected, SlotVersions::from([(1, 5), (7, 9)]));
        assert_eq!(again.store(), Some(STORE));
    }

    #[test]
    fn a_wrong_key_changed_sizes_and_edits_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let key = MasterKey::from_bytes([3; 32]);
        let ledger = new_ledger(dir.path(), &key);
        ledger.save(&SlotVersions::from([(1, 5)])).unwrap();

        let other = MasterKey::from_bytes([4; 32]);
        let error = Ledger::open(dir.path(), &other, manifest(64))
            .err()
            .unwrap();
        assert!(error.to_string().starts_with("wrong key"), "{error}");

        let error = Ledger::open(dir.path(), &key, manifest(32)).err().unwrap();
        assert!(
            error
                .to_string()
                .contains("value size changed from 64 to 32"),
            "{error}"
        );

        // Lowering a version by hand (to hide a rollback) breaks the tag.
        let path = dir.path().join(FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\n1 5\n", "\n1 4\n")).unwrap();
        let error = Ledger::open(dir.path(), &key, manifest(64)).err().unwrap();
        assert!(matches!(error, LedgerError::Tampered { .. }), "{error}");
    }

    #[test]
    fn stores_from_before_value_envelopes_and_store_ids_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let key = MasterKey::from_bytes([3; 32]);
        let ledger = new_ledger(dir.path(), &key);
        ledger.save(&SlotVersions::from([(1, 5)])).unwrap();
        let path = dir.path().join(FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(HEADER, HEADER_BEFORE_ENVELOPES)).unwrap();
        let error = Ledger::open(dir.path(), &key, manifest(64)).err().unwrap();
        assert!(
            matches!(error, LedgerError::BeforeEnvelopes { .. }),
            "{error}"
        );
        std::fs::write(&path, text.replace(HEADER, HEADER_BEFORE_STORE_IDS)).unwrap();
        let error = Ledger::open(dir.path(), &key, manifest(64)).err().unwrap();
        assert!(
            matches!(error, LedgerError::BeforeStoreIds { .. }),
            "{error}"
        );
    }
}
