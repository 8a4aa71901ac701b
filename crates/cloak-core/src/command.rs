//! The key-value commands the proxy serves, independent of how they arrive (RESP, a benchmark,
//! a test) and of which scheme stores the data.

use bytes::Bytes;

use crate::scheme::SchemeError;

/// When a `SET` takes effect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetCondition {
    /// Always (plain `SET`).
    #[default]
    Always,
    /// Only if the key does not exist (`SET … NX`).
    IfAbsent,
    /// Only if the key exists (`SET … XX`).
    IfPresent,
}

/// A client command the engine executes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `GET key`.
    Get(Bytes),
    /// `SET key value [NX|XX]`.
    Set {
        /// The key.
        key: Bytes,
        /// The new value.
        value: Bytes,
        /// When it takes effect.
        condition: SetCondition,
    },
    /// `MGET key…`.
    MGet(Vec<Bytes>),
    /// `MSET key value…`.
    MSet(Vec<(Bytes, Bytes)>),
    /// Deletes keys; answers how many existed.
    Del(Vec<Bytes>),
    /// Answers how many of the keys exist (a key named twice counts twice, as in Redis).
    Exists(Vec<Bytes>),
    /// `DBSIZE`: how many keys exist.
    DbSize,
}

/// A command's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A value or nil.
    Value(Option<Bytes>),
    /// One value or nil per key.
    Values(Vec<Option<Bytes>>),
    /// Done.
    Ok,
    /// A count.
    Integer(i64),
    /// Refused or failed.
    Error(CommandError),
}

/// Why a command was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// A key is longer than the limit.
    #[error("key is {len} bytes, the limit is {max} (set --key-size to store longer keys)")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value is larger than the limit.
    #[error("value is {len} bytes, the limit is {max} (set --value-size to store larger values)")]
    ValueTooLarge {
        /// The value's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    #[error(
        "store is full: all {capacity} keys are in use (delete keys or create a store with a larger --capacity)"
    )]
    /// A new key finds no free slot.
    StoreFull {
        /// Keys the store holds.
        capacity: usize,
    },
    /// The command names more keys than the limit.
    #[error("a command may name at most {max} keys, this one names {count}")]
    TooManyKeys {
        /// Keys the command names.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The scheme could not serve one of its ops.
    #[error(transparent)]
    Scheme(#[from] SchemeError),
}
