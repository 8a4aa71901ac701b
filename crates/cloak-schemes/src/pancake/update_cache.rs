//! The UpdateCache (paper §4.1–4.2): a key's newest record while some of its replicas are stale.
//!
//! Updating every replica of a key at once would show the server which labels belong together,
//! so a write updates nothing at once: the record waits here with the set of replica cells that
//! do not hold it yet, and every access to one of them (real or fake) writes it back there. The
//! entry leaves once every replica holds it and those writes are done; until then reads of the
//! key are answered from here, and the record stays in the proxy's journal (a crash must not
//! lose it, and the one replica holding it may be swapped away before the others catch up).

use hashbrown::HashMap;

use cloak_core::Record;

struct Entry {
    record: Record,
    /// Replica cells that do not hold `record` yet.
    stale: Vec<u32>,
    /// Writes of cached records sent and not yet done, whatever their version.
    writing: u32,
    /// Highest version a finished write put in storage (0: none of this entry's).
    stored: u64,
}

#[derive(Default)]
pub struct UpdateCache {
    entries: HashMap<u32, Entry>,
}

impl UpdateCache {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Entries whose newest record no finished write has put in storage yet.
    pub fn unwritten(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.stored < e.record.version)
            .count()
    }

    pub fn get(&self, slot: u32) -> Option<&Record> {
        self.entries.get(&slot).map(|e| &e.record)
    }

    /// A client wrote `record` to `slot`, whose replicas are `cells`: all of them are stale.
    pub fn write(&mut self, slot: u32, record: Record, cells: Vec<u32>) {
        let entry = self.entries.entry(slot).or_insert(Entry {
            record: Record::empty(),
            stale: Vec::new(),
            writing: 0,
            stored: 0,
        });
        entry.record = record;
        entry.stale = cells;
    }

    /// `cell` became a replica of `slot` that does not hold its cached record.
    pub fn add_stale(&mut self, slot: u32, cell: u32) {
        if let Some(entry) = self.entries.get_mut(&slot) {
            entry.stale.push(cell);
        }
    }

    /// The record to write back to `cell`, a replica of `slot`, if the cache has a newer one for
    /// it (or, with `even_if_fresh`, any cached one: its element was lost). The caller sends the
    /// write and reports it with [`UpdateCache::written`].
    pub fn take_for(&mut self, slot: u32, cell: u32, even_if_fresh: bool) -> Option<Record> {
        let entry = self.entries.get_mut(&slot)?;
        let position = entry.stale.iter().position(|&c| c == cell);
        if position.is_none() && !even_if_fresh {
            return None;
        }
        if let Some(position) = position {
            entry.stale.swap_remove(position);
        }
        entry.writing += 1;
        Some(entry.record.clone())
    }

    /// A write from [`UpdateCache::take_for`] of `version` is done. Returns the version to
    /// release from the journal when the entry leaves.
    pub fn written(&mut self, slot: u32, version: u64) -> Option<u64> {
        let entry = self.entries.get_mut(&slot)?;
        entry.writing -= 1;
        entry.stored = entry.stored.max(version);
        self.settle(slot)
    }

    /// `cell` is no longer a replica of `slot` (it was swapped away): storage may no longer hold
    /// the cached record anywhere, and the cell needs no update. Returns a version to release
    /// if the entry leaves.
    pub fn forget(&mut self, slot: u32, cell: u32) -> Option<u64> {
        let entry = self.entries.get_mut(&slot)?;
        entry.stale.retain(|&c| c != cell);
        entry.stored = 0;
        self.settle(slot)
    }

    fn settle(&mut self, slot: u32) -> Option<u64> {
        let entry = self.entries.get(&slot)?;
        if entry.stale.is_empty() && entry.writing == 0 {
            let version = entry.record.version;
            self.entries.remove(&slot);
            return Some(version);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64) -> Record {
        Record {
            version,
            key: "k".into(),
            value: format!("v{version}").into(),
        }
    }

    #[test]
    fn an_entry_leaves_once_every_replica_is_written() {
        let mut cache = UpdateCache::default();
        cache.write(4, record(1), vec![10, 11, 12]);
        assert_eq!(cache.unwritten(), 1);
        assert_eq!(cache.take_for(4, 99, false), None, "not a stale replica");
        assert_eq!(cache.take_for(4, 11, false), Some(record(1)));
        assert_eq!(cache.take_for(4, 11, false), None, "already being updated");
        assert_eq!(cache.written(4, 1), None, "10 and 12 are stale");
        assert_eq!(cache.unwritten(), 0, "one replica holds version 1");
        // A newer write makes every replica stale again while a write of version 1 is out.
        assert_eq!(cache.take_for(4, 10, false), Some(record(1)));
        cache.write(4, record(2), vec![10, 11, 12]);
        assert_eq!(cache.written(4, 1), None);
        assert_eq!(cache.unwritten(), 1);
        for cell in [10, 11] {
            assert_eq!(cache.take_for(4, cell, false), Some(record(2)));
            assert_eq!(cache.written(4, 2), None);
        }
        assert_eq!(
            cache.forget(4, 12),
            Some(2),
            "the last stale replica was swapped away"
        );
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.get(4), None);
    }
}
