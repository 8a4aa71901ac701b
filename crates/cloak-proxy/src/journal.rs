//! The proxy's journal: records only the proxy holds, kept on disk so a crash cannot lose them.
//!
//! Schemes decide what goes in (see `cloak_core::scheme`'s crash-safety notes); the core task
//! commits what they ask for in groups, one durable commit for every request that arrived while
//! the previous commit ran, and only then tells the scheme, which only then acknowledges the
//! writes those records carry.

use std::path::Path;

use bytes::Bytes;
use cloak_core::journal::{keeps, releases};
use cloak_core::{JournalOp, Record, Slot};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

/// Durable storage for journal records.
pub trait Journal: Send + Sync + 'static {
    /// Applies `ops` in order, durably and all together, before returning.
    fn commit(&self, ops: &[JournalOp]) -> Result<(), JournalError>;

    /// Every record the journal holds.
    fn records(&self) -> Result<Vec<(Slot, Record)>, JournalError>;
}

#[derive(Debug, thiserror::Error)]
#[error("journal: {0}")]
pub struct JournalError(String);

impl<E: Into<redb::Error>> From<E> for JournalError {
    fn from(error: E) -> Self {
        JournalError(error.into().to_string())
    }
}

/// slot → version ‖ key length ‖ key ‖ value
const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("records");

/// A journal in one redb file: crash-safe copy-on-write B-trees, fsynced on every commit.
pub struct DiskJournal {
    db: Database,
}

impl DiskJournal {
    pub fn open(path: &Path) -> Result<Self, JournalError> {
        // The records are keys and values in plaintext: the file is made owner-only before redb
        // opens it (redb would create it with the umask's permissions).
        let mut private = std::fs::OpenOptions::new();
        private.write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut private, 0o600);
        private
            .open(path)
            .map_err(|e| JournalError(format!("cannot create {}: {e}", path.display())))?;
        let db = Database::create(path)
            .map_err(|e| JournalError(format!("cannot open {}: {e}", path.display())))?;
        // Create the table now so reads of an empty journal work.
        let txn = db.begin_write()?;
        txn.open_table(RECORDS)?;
        txn.commit()?;
        Ok(Self { db })
    }
}

fn encode(record: &Record) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + record.key.len() + record.value.len());
    out.extend_from_slice(&record.version.to_le_bytes());
    out.extend_from_slice(&(record.key.len() as u16).to_le_bytes());
    out.extend_from_slice(&record.key);
    out.extend_from_slice(&record.value);
    out
}

fn decode(bytes: &[u8]) -> Result<Record, JournalError> {
    let bad = || JournalError("a journal record is malformed".into());
    let version = u64::from_le_bytes(
        bytes
            .get(..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let key_len = u16::from_le_bytes(
        bytes
            .get(8..10)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    let key = bytes.get(10..10 + key_len).ok_or_else(bad)?;
    Ok(Record {
        version,
        key: Bytes::copy_from_slice(key),
        value: Bytes::copy_from_slice(&bytes[10 + key_len..]),
    })
}

fn version_of(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

impl Journal for DiskJournal {
    fn commit(&self, ops: &[JournalOp]) -> Result<(), JournalError> {
        let txn = self.db.begin_write()?;
        {
            let mut table = txn.open_table(RECORDS)?;
            for op in ops {
                match op {
                    JournalOp::Keep(records) => {
                        for (slot, record) in records {
                            let held = table.get(*slot)?.map(|v| version_of(v.value()));
                            if keeps(held, record.version) {
                                table.insert(*slot, encode(record).as_slice())?;
                            }
                        }
                    }
                    JournalOp::Release(slots) => {
                        for (slot, version) in slots {
                            let held = table.get(*slot)?.map(|v| version_of(v.value()));
                            if held.is_some_and(|held| releases(held, *version)) {
                                table.remove(*slot)?;
                            }
                        }
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn records(&self) -> Result<Vec<(Slot, Record)>, JournalError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(RECORDS)?;
        let mut records = Vec::new();
        for entry in table.iter()? {
            let (slot, value) = entry?;
            records.push((slot.value(), decode(value.value())?));
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64, value: &str) -> Record {
        Record {
            version,
            key: "k".into(),
            value: Bytes::from(value.to_string()),
        }
    }

    #[test]
    fn records_survive_reopening_and_follow_the_journal_rules() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.redb");
        {
            let j = DiskJournal::open(&path).unwrap();
            j.commit(&[
                JournalOp::Keep(vec![(1, record(5, "five")), (2, record(3, "three"))]),
                JournalOp::Keep(vec![(1, record(4, "older"))]),
                JournalOp::Release(vec![(2, 3)]),
            ])
            .unwrap();
        }
        let j = DiskJournal::open(&path).unwrap();
        assert_eq!(j.records().unwrap(), vec![(1, record(5, "five"))]);
        j.commit(&[JournalOp::Release(vec![(1, 4)])]).unwrap();
        assert_eq!(
            j.records().unwrap().len(),
            1,
            "version 5 is newer than what storage has"
        );
        j.commit(&[JournalOp::Release(vec![(1, 5)])]).unwrap();
        assert!(j.records().unwrap().is_empty());
    }
}
