//! The key-value commands the proxy serves, independent of how they arrive (RESP, a benchmark,
//! a test) and of which scheme stores the data.

use bytes::Bytes;

use crate::scheme::SchemeError;

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
    DbSize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A value or nil.
    Value(Option<Bytes>),
    Values(Vec<Option<Bytes>>),
    Ok,
    Integer(i64),
    Error(CommandError),
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
}
