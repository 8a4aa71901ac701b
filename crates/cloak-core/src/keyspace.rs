//! The 16 logical databases of `SELECT`, as names inside the one store they share.
//!
//! Every database keeps its keys in the same directory and the same slots (capacity is shared),
//! so a client key must become a *stored key* that says which database it belongs to, without
//! two databases ever sharing a stored key:
//!
//! - database 0 stores its keys as they are, so stores written before databases existed read
//!   back unchanged. Its keys may be up to `max_key - 1` bytes long.
//! - database `n` (1..=15) stores `key ‖ zero padding ‖ n ‖ len(key) as u16` (big-endian),
//!   exactly `max_key` bytes long, so its keys may be up to `max_key - 3` bytes long.
//!
//! A stored key of exactly `max_key` bytes is therefore always an encoded one, and one shorter is
//! always database 0's: the encoding is injective, and decoding needs nothing but the length.
//! The cost against `--key-size` (= `max_key`): one byte for database 0 (a store holding a key
//! of exactly `--key-size` bytes from before keeps it, but clients can no longer name it), three
//! for the others. What the storage server sees does not change: keys only ever travel inside
//! sealed elements of a fixed size, whatever their length.

use bytes::{BufMut, Bytes, BytesMut};

use crate::command::{Command, CommandError};

/// How many databases `SELECT` can choose from (Redis's default `databases 16`).
pub const DATABASES: u8 = 16;

/// Bytes an encoded key spends on its database and length.
const TAIL: usize = 3;

/// A database number, checked to be below [`DATABASES`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Db(u8);

impl Db {
    /// Database `index`, or `None` when there is no such database.
    pub fn new(index: i64) -> Option<Self> {
        u8::try_from(index).ok().filter(|&n| n < DATABASES).map(Db)
    }

    pub fn index(self) -> u8 {
        self.0
    }

    /// Every database, in order.
    pub fn all() -> impl Iterator<Item = Db> {
        (0..DATABASES).map(Db)
    }
}

/// The longest key a client may use in `db` when stored keys may be `max_key` bytes long.
pub fn key_limit(db: Db, max_key: usize) -> usize {
    match db.0 {
        0 => max_key.saturating_sub(1),
        _ => max_key.saturating_sub(TAIL).min(usize::from(u16::MAX)),
    }
}

/// The stored key for `key` in `db`; refused when it is too long for that database.
pub fn encode(db: Db, key: &Bytes, max_key: usize) -> Result<Bytes, CommandError> {
    let limit = key_limit(db, max_key);
    if key.len() > limit {
        return Err(CommandError::KeyTooLong {
            len: key.len(),
            max: limit,
        });
    }
    if db.0 == 0 {
        return Ok(key.clone());
    }
    let mut stored = BytesMut::with_capacity(max_key);
    stored.put_slice(key);
    stored.put_bytes(0, max_key - TAIL - key.len());
    stored.put_u8(db.0);
    // Fits: `key_limit` keeps keys within u16.
    stored.put_u16(key.len() as u16);
    Ok(stored.freeze())
}

/// The database and client key a stored key stands for; `None` for a stored key no encoding
/// makes (written by hand to the store, or with another `max_key`).
pub fn decode(stored: &[u8], max_key: usize) -> Option<(Db, &[u8])> {
    if stored.len() < max_key {
        return Some((Db(0), stored));
    }
    if stored.len() != max_key || max_key < TAIL {
        return None;
    }
    let (body, tail) = stored.split_at(max_key - TAIL);
    let db = Db::new(i64::from(tail[0])).filter(|db| db.0 != 0)?;
    let len = usize::from(u16::from_be_bytes([tail[1], tail[2]]));
    let key = body.get(..len)?;
    body[len..].iter().all(|&b| b == 0).then_some((db, key))
}

/// The database a stored key belongs to (see [`decode`]).
pub fn db_of(stored: &[u8], max_key: usize) -> Option<Db> {
    decode(stored, max_key).map(|(db, _)| db)
}

/// `command` as a client of `db` means it: every key it names stored in `db` (COPY's destination
/// in its `DB`, if it names one), and the database it asks about set to `db`.
pub fn in_db(command: Command, db: Db, max_key: usize) -> Result<Command, CommandError> {
    let key = |key: Bytes| encode(db, &key, max_key);
    let keys = |keys: Vec<Bytes>| keys.into_iter().map(key).collect::<Result<Vec<_>, _>>();
    let pairs = |pairs: Vec<(Bytes, Bytes)>| {
        pairs
            .into_iter()
            .map(|(k, v)| Ok((key(k)?, v)))
            .collect::<Result<Vec<_>, CommandError>>()
    };
    Ok(match command {
        Command::Get(k) => Command::Get(key(k)?),
        Command::Set {
            key: k,
            value,
            condition,
        } => Command::Set {
            key: key(k)?,
            value,
            condition,
        },
        Command::Update { key: k, op } => Command::Update { key: key(k)?, op },
        Command::MGet(ks) => Command::MGet(keys(ks)?),
        Command::Del(ks) => Command::Del(keys(ks)?),
        Command::Exists(ks) => Command::Exists(keys(ks)?),
        Command::Watch(ks) => Command::Watch(keys(ks)?),
        Command::MSet(ps) => Command::MSet(pairs(ps)?),
        Command::MSetNx(ps) => Command::MSetNx(pairs(ps)?),
        Command::Rename {
            from,
            to,
            only_if_absent,
        } => Command::Rename {
            from: key(from)?,
            to: key(to)?,
            only_if_absent,
        },
        Command::Copy {
            from,
            to,
            replace,
            to_db,
        } => Command::Copy {
            from: key(from)?,
            to: encode(to_db.unwrap_or(db), &to, max_key)?,
            replace,
            to_db,
        },
        Command::DbSize(_) => Command::DbSize(db),
        Command::Keys { pattern, .. } => Command::Keys { db, pattern },
        Command::Scan {
            cursor,
            pattern,
            kind,
            count,
            ..
        } => Command::Scan {
            db,
            cursor,
            pattern,
            kind,
            count,
        },
        Command::RandomKey(_) => Command::RandomKey(db),
        Command::Flush(Some(_)) => Command::Flush(Some(db)),
        Command::Flush(None) => Command::Flush(None),
        Command::Unwatch => Command::Unwatch,
        Command::Transaction(commands) => Command::Transaction(
            commands
                .into_iter()
                .map(|command| in_db(command, db, max_key))
                .collect::<Result<_, _>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 8;

    fn db(n: i64) -> Db {
        Db::new(n).unwrap()
    }

    #[test]
    fn database_zero_keys_are_stored_unchanged() {
        let key = Bytes::from_static(b"abcdefg");
        assert_eq!(encode(db(0), &key, MAX).unwrap(), key);
        assert_eq!(decode(b"abcdefg", MAX), Some((db(0), &b"abcdefg"[..])));
        assert!(encode(db(0), &Bytes::from_static(b"abcdefgh"), MAX).is_err());
    }

    #[test]
    fn encoding_round_trips_and_never_collides() {
        let mut seen = std::collections::HashMap::new();
        let keys: Vec<Bytes> = ["", "a", "ab", "a\0", "abcde", "\0\0\0"]
            .iter()
            .map(|k| Bytes::from(k.to_string()))
            .collect();
        for n in 0..16 {
            for key in &keys {
                if key.len() > key_limit(db(n), MAX) {
                    assert!(encode(db(n), key, MAX).is_err());
                    continue;
                }
                let stored = encode(db(n), key, MAX).unwrap();
                assert_eq!(decode(&stored, MAX), Some((db(n), &key[..])));
                let previous = seen.insert(stored.clone(), (n, key.clone()));
                assert_eq!(previous, None, "{stored:?} is stored for two keys");
            }
        }
    }

    #[test]
    fn only_sixteen_databases_exist() {
        assert!(Db::new(15).is_some());
        assert!(Db::new(16).is_none());
        assert!(Db::new(-1).is_none());
        assert_eq!(decode(&[b'a', 0, 0, 0, 0, 16, 0, 1], MAX), None);
        assert_eq!(decode(&[b'a', 1, 0, 0, 0, 3, 0, 1], MAX), None);
    }
}
