//! The 16 logical databases of `SELECT`, as names inside the one store they share.
//!
//! Every database keeps its keys in the same directory and the same slots (capacity is shared),
//! so a client key must become a *stored key* that says which database it belongs to, without
//! two databases ever sharing a stored key:
//!
//! - database `n` (1..=15) stores `key ‖ zero padding ‖ 0xFF ‖ n ‖ len(key) as u16` (big-endian),
//!   exactly `max_key` bytes long, so its keys may be up to `max_key - 4` bytes long;
//! - database 0 stores its keys as they are, so stores written before databases existed read
//!   back unchanged, and its keys may still be `max_key` bytes long, except those that have
//!   exactly the form above (a zero-padded key ending in `0xFF`, a database number and its
//!   length; no text key does, since `0xFF` is never in UTF-8): such a key is refused.
//!
//! Every stored key therefore decodes to one database and key ([`decode`]), and [`encode`] is
//! its inverse: the encoding is collision-free. The cost against `--key-size` (= `max_key`):
//! nothing for database 0, four bytes for the others. What the storage server sees does not
//! change: keys only ever travel inside sealed elements of a fixed size, whatever their length.

use bytes::{BufMut, Bytes, BytesMut};

use crate::command::{Command, CommandError};

/// How many databases `SELECT` can choose from (Redis's default `databases 16`).
pub const DATABASES: u8 = 16;

/// Bytes an encoded key spends on its marker, database and length.
const TAIL: usize = 4;

/// Marks an encoded key (a byte no UTF-8 text contains).
const MARKER: u8 = 0xFF;

/// A database number, checked to be below [`DATABASES`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Db(u8);

impl Db {
    /// Database `index`, or `None` when there is no such database.
    pub fn new(index: i64) -> Option<Self> {
        u8::try_from(index).ok().filter(|&n| n < DATABASES).map(Db)
    }

    /// Its number.
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
        0 => max_key,
        _ => max_key.saturating_sub(TAIL).min(usize::from(u16::MAX)),
    }
}

/// The stored key for `key` in `db`; refused when it is too long for that database (or, in
/// database 0, when it has the form of another database's stored key).
pub fn encode(db: Db, key: &Bytes, max_key: usize) -> Result<Bytes, CommandError> {
    let limit = key_limit(db, max_key);
    if key.len() > limit {
        return Err(CommandError::KeyTooLong {
            len: key.len(),
            max: limit,
        });
    }
    if db.0 == 0 {
        return match encoded(key, max_key) {
            None => Ok(key.clone()),
            Some(_) => Err(CommandError::ReservedKey),
        };
    }
    let mut stored = BytesMut::with_capacity(max_key);
    stored.put_slice(key);
    stored.put_bytes(0, max_key - TAIL - key.len());
    stored.put_u8(MARKER);
    stored.put_u8(db.0);
    // Fits: `key_limit` keeps keys within u16.
    stored.put_u16(key.len() as u16);
    Ok(stored.freeze())
}

/// The database and client key a stored key stands for: another database's when it has the
/// encoded form, else database 0's.
pub fn decode(stored: &[u8], max_key: usize) -> (Db, &[u8]) {
    encoded(stored, max_key).unwrap_or((Db(0), stored))
}

/// The database and key of a stored key in the encoded form, if it is in it.
fn encoded(stored: &[u8], max_key: usize) -> Option<(Db, &[u8])> {
    if stored.len() != max_key || max_key < TAIL {
        return None;
    }
    let (body, tail) = stored.split_at(max_key - TAIL);
    if tail[0] != MARKER {
        return None;
    }
    let db = Db::new(i64::from(tail[1])).filter(|db| db.0 != 0)?;
    let len = usize::from(u16::from_be_bytes([tail[2], tail[3]]));
    let key = body.get(..len)?;
    body[len..].iter().all(|&b| b == 0).then_some((db, key))
}

/// The database a stored key belongs to (see [`decode`]).
pub fn db_of(stored: &[u8], max_key: usize) -> Db {
    decode(stored, max_key).0
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
        Command::SetExpiring {
            key: k,
            value,
            condition,
            expiry,
            name,
        } => Command::SetExpiring {
            key: key(k)?,
            value,
            condition,
            expiry,
            name,
        },
        Command::Expire {
            key: k,
            deadline,
            condition,
            name,
        } => Command::Expire {
            key: key(k)?,
            deadline,
            condition,
            name,
        },
        Command::Persist(k) => Command::Persist(key(k)?),
        Command::Ttl { key: k, unit } => Command::Ttl { key: key(k)?, unit },
        Command::GetEx {
            key: k,
            change,
            name,
        } => Command::GetEx {
            key: key(k)?,
            change,
            name,
        },
        Command::Type(k) => Command::Type(key(k)?),
        Command::Hash { key: k, op } => Command::Hash { key: key(k)?, op },
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
        Command::Script(names) => Command::Script(keys(names)?),
        Command::ScriptCall { unit, command } => Command::ScriptCall {
            unit,
            command: Box::new(in_db(*command, db, max_key)?),
        },
        Command::ScriptEnd(unit) => Command::ScriptEnd(unit),
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
        let key = Bytes::from_static(b"abcdefgh");
        assert_eq!(encode(db(0), &key, MAX).unwrap(), key);
        assert_eq!(decode(b"abcdefgh", MAX), (db(0), &b"abcdefgh"[..]));
        assert!(encode(db(0), &Bytes::from_static(b"abcdefghi"), MAX).is_err());
        // The one form database 0 cannot use: another database's stored key.
        let lookalike = encode(db(2), &Bytes::from_static(b"ab"), MAX).unwrap();
        assert_eq!(
            encode(db(0), &lookalike, MAX),
            Err(CommandError::ReservedKey)
        );
    }

    #[test]
    fn encoding_round_trips_and_never_collides() {
        let mut seen = std::collections::HashMap::new();
        let keys: Vec<Bytes> = ["", "a", "ab", "a\0", "abcd", "\0\0\0", "abcdefgh"]
            .iter()
            .map(|k| Bytes::from(k.to_string()))
            .chain([Bytes::from_static(&[b'a', 0, 0, 0, 0xFF, 1, 0, 1])])
            .collect();
        for n in 0..16 {
            for key in &keys {
                let Ok(stored) = encode(db(n), key, MAX) else {
                    continue;
                };
                assert_eq!(decode(&stored, MAX), (db(n), &key[..]));
                let previous = seen.insert(stored.clone(), (n, key.clone()));
                assert_eq!(previous, None, "{stored:?} is stored for two keys");
            }
        }
        assert!(seen.len() > 40, "most keys fit: {}", seen.len());
    }

    #[test]
    fn only_sixteen_databases_exist() {
        assert!(Db::new(15).is_some());
        assert!(Db::new(16).is_none());
        assert!(Db::new(-1).is_none());
        // Not the encoded form (database 16, database 0): database 0's own keys.
        assert_eq!(decode(&[b'a', 0, 0, 0, 0xFF, 16, 0, 1], MAX).0, db(0));
        assert_eq!(decode(&[b'a', 0, 0, 0, 0xFF, 0, 0, 1], MAX).0, db(0));
        assert_eq!(decode(&[b'a', 1, 0, 0, 0xFF, 3, 0, 1], MAX).0, db(0));
    }
}
