//! The key-value commands the proxy serves, independent of how they arrive (RESP, a benchmark,
//! a test) and of which scheme stores the data.

use bytes::Bytes;

use crate::keyspace::Db;
use crate::scheme::SchemeError;
use crate::update::Update;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetCondition {
    #[default]
    Always,
    /// Only if the key does not exist (`SET … NX`).
    IfAbsent,
    /// Only if the key exists (`SET … XX`).
    IfPresent,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Get(Bytes),
    Set {
        key: Bytes,
        value: Bytes,
        condition: SetCondition,
    },
    MGet(Vec<Bytes>),
    MSet(Vec<(Bytes, Bytes)>),
    /// Deletes keys; answers how many existed.
    Del(Vec<Bytes>),
    /// Answers how many of the keys exist (a key named twice counts twice, as in Redis).
    Exists(Vec<Bytes>),
    /// How many keys the database holds.
    DbSize(Db),
    /// A read-modify-write of one key (see [`Update`]).
    Update {
        key: Bytes,
        op: Update,
    },
    /// MSETNX: sets every pair, or none if any of the keys exists; answers 1 or 0.
    MSetNx(Vec<(Bytes, Bytes)>),
    /// RENAME, or RENAMENX with `only_if_absent`.
    Rename {
        from: Bytes,
        to: Bytes,
        only_if_absent: bool,
    },
    /// COPY (the destination may be in another database: it is just another stored key).
    Copy {
        from: Bytes,
        to: Bytes,
        replace: bool,
        /// `DB n`: the database `to` is in, when not the client's own (applied as keys are
        /// encoded, see [`crate::keyspace::in_db`]).
        to_db: Option<Db>,
    },
    /// KEYS: the database's keys matching a glob pattern.
    Keys {
        db: Db,
        pattern: Bytes,
    },
    /// SCAN: up to about `count` keys of the database from `cursor` on, and the next cursor.
    Scan {
        db: Db,
        cursor: u64,
        pattern: Option<Bytes>,
        /// `TYPE`: every key is a string, so any other type matches nothing.
        kind: Option<Bytes>,
        count: usize,
    },
    /// RANDOMKEY.
    RandomKey(Db),
    /// FLUSHDB (one database) or FLUSHALL (`None`): deletes every key, through the scheme.
    Flush(Option<Db>),
    /// WATCH: the client's next transaction fails if one of these keys is written first.
    Watch(Vec<Bytes>),
    /// UNWATCH (and what a closing connection sends, so its watches go too).
    Unwatch,
    /// EXEC: the queued commands, run together with nothing of another client in between.
    Transaction(Vec<Command>),
}

impl Command {
    /// The keys the command reads or writes (a transaction's: all its commands' keys).
    pub fn keys(&self) -> Vec<Bytes> {
        match self {
            Command::Get(key) | Command::Set { key, .. } | Command::Update { key, .. } => {
                vec![key.clone()]
            }
            Command::MGet(keys) | Command::Del(keys) | Command::Exists(keys) => keys.clone(),
            Command::MSet(pairs) | Command::MSetNx(pairs) => {
                pairs.iter().map(|(key, _)| key.clone()).collect()
            }
            Command::Rename { from, to, .. } | Command::Copy { from, to, .. } => {
                vec![from.clone(), to.clone()]
            }
            Command::Transaction(commands) => commands.iter().flat_map(Command::keys).collect(),
            Command::DbSize(_)
            | Command::Keys { .. }
            | Command::Scan { .. }
            | Command::RandomKey(_)
            | Command::Flush(_)
            | Command::Watch(_)
            | Command::Unwatch => Vec::new(),
        }
    }

    /// Whether the command may change a key.
    pub fn may_write(&self) -> bool {
        match self {
            Command::Update { op, .. } => op.may_write(),
            Command::Set { .. }
            | Command::MSet(_)
            | Command::MSetNx(_)
            | Command::Del(_)
            | Command::Rename { .. }
            | Command::Copy { .. }
            | Command::Flush(_) => true,
            Command::Transaction(commands) => commands.iter().any(Command::may_write),
            _ => false,
        }
    }

    /// Whether the command must run alone on its keys: it reads them and writes what it read
    /// decides (see `engine::unit`).
    pub fn runs_alone(&self) -> bool {
        matches!(
            self,
            Command::Update { .. }
                | Command::MSetNx(_)
                | Command::Rename { .. }
                | Command::Copy { .. }
                | Command::Transaction(_)
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A value or nil.
    Value(Option<Bytes>),
    Values(Vec<Option<Bytes>>),
    Ok,
    Integer(i64),
    Error(CommandError),
    /// An array of replies: EXEC's results, SCAN's cursor and keys.
    Multi(Vec<Outcome>),
    /// EXEC when a watched key changed: nothing ran (Redis's null array).
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("key is {len} bytes, the limit is {max} (set --key-size to store longer keys)")]
    KeyTooLong { len: usize, max: usize },
    #[error("value is {len} bytes, the limit is {max} (set --value-size to store larger values)")]
    ValueTooLarge { len: usize, max: usize },
    #[error(
        "store is full: all {capacity} keys are in use (delete keys or create a store with a larger --capacity)"
    )]
    StoreFull { capacity: usize },
    #[error("a command may name at most {max} keys, this one names {count}")]
    TooManyKeys { count: usize, max: usize },
    #[error(transparent)]
    Scheme(#[from] SchemeError),
    // Redis's own messages from here on: clients match on them.
    #[error("value is not an integer or out of range")]
    NotInteger,
    #[error("increment or decrement would overflow")]
    Overflow,
    #[error("value is not a valid float")]
    NotFloat,
    #[error("increment would produce NaN or Infinity")]
    NanOrInfinity,
    #[error("no such key")]
    NoSuchKey,
    /// A database-0 key with the form of another database's stored key (see `keyspace`).
    #[error("this key has the form Cloak uses for keys of databases 1 to 15; use another")]
    ReservedKey,
    #[error("source and destination objects are the same")]
    SameObject,
    /// A command a transaction cannot hold in Cloak.
    #[error("{0} is not supported inside MULTI by Cloak")]
    NotInTransaction(&'static str),
}
