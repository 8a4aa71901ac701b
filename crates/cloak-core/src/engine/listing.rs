//! Commands answered from the key directory alone (DBSIZE, KEYS, SCAN, RANDOMKEY) and the key
//! counts per database behind DBSIZE. None of them reaches storage: the directory keeps every
//! key, so the server cannot tell a listing happened.

use bytes::Bytes;
use rand_chacha::rand_core::RngCore;

use super::Engine;
use crate::command::Outcome;
use crate::database::{self, DATABASES, Db};
use crate::directory::KeyDirectory;
use crate::element::Slot;
use crate::pattern;

/// How many keys each database holds, counted once from a directory.
pub(super) fn count_by_db(directory: &KeyDirectory, max_key: usize) -> [usize; DATABASES as usize] {
    let mut sizes = [0; DATABASES as usize];
    for (_, key) in directory.keys_from(0) {
        sizes[usize::from(database::db_of(key, max_key).index())] += 1;
    }
    sizes
}

impl Engine {
    /// Counts a stored key in or out of its database's size.
    pub(super) fn count_key(&mut self, key: &[u8], added: bool) {
        let db = database::db_of(key, self.limits.max_key);
        let size = &mut self.db_sizes[usize::from(db.index())];
        *size = if added {
            *size + 1
        } else {
            size.saturating_sub(1)
        };
    }

    pub(super) fn db_size(&self, db: Db) -> usize {
        self.db_sizes[usize::from(db.index())]
    }

    /// The client keys of `db` from slot `from` on, with their slots.
    fn keys_of(&self, db: Db, from: Slot) -> impl Iterator<Item = (Slot, &[u8])> {
        let max_key = self.limits.max_key;
        self.directory
            .keys_from(from)
            .filter_map(move |(slot, stored)| {
                let (of, key) = database::decode(stored, max_key);
                (of == db).then_some((slot, key))
            })
    }

    /// The stored keys of `db`, or of every database.
    pub(super) fn stored_keys(&self, db: Option<Db>) -> Vec<Bytes> {
        let max_key = self.limits.max_key;
        self.directory
            .keys_from(0)
            .filter(|(_, stored)| db.is_none_or(|db| database::db_of(stored, max_key) == db))
            .map(|(_, stored)| Bytes::copy_from_slice(stored))
            .collect()
    }

    pub(super) fn list_keys(&self, db: Db, pattern: &[u8]) -> Outcome {
        Outcome::Values(
            self.keys_of(db, 0)
                .filter(|(_, key)| pattern::matches(pattern, key))
                .map(|(_, key)| Some(Bytes::copy_from_slice(key)))
                .collect(),
        )
    }

    /// SCAN's cursor is a slot number: a key keeps its slot while it exists, so a key present
    /// for a whole scan is returned exactly once, as Redis promises (at least once).
    pub(super) fn scan(
        &self,
        db: Db,
        cursor: u64,
        pattern: Option<&[u8]>,
        kind: Option<&[u8]>,
        count: usize,
    ) -> Outcome {
        let mut keys = Vec::new();
        // The slot of the first key not looked at; 0 once the walk reached the end.
        let mut next = 0;
        for (looked_at, (slot, key)) in self.keys_of(db, cursor).enumerate() {
            if looked_at == count {
                next = slot;
                break;
            }
            let of_kind = kind.is_none_or(|kind| {
                kind.eq_ignore_ascii_case(self.keyspace.kind(slot).name().as_bytes())
            });
            if of_kind && pattern.is_none_or(|p| pattern::matches(p, key)) {
                keys.push(Some(Bytes::copy_from_slice(key)));
            }
        }
        Outcome::Multi(vec![
            Outcome::Value(Some(Bytes::from(next.to_string()))),
            Outcome::Values(keys),
        ])
    }

    /// A key of `db` at or after a uniformly drawn slot (wrapping around), or nil.
    pub(super) fn random_key(&mut self, db: Db) -> Outcome {
        if self.db_size(db) == 0 {
            return Outcome::Value(None);
        }
        let capacity = self.directory.capacity() as u128;
        let start = ((u128::from(self.random.next_u64()) * capacity) >> 64) as Slot;
        let found = self
            .keys_of(db, start)
            .next()
            .or_else(|| self.keys_of(db, 0).next())
            .map(|(_, key)| Bytes::copy_from_slice(key));
        Outcome::Value(found)
    }
}
