//! The key-value commands the proxy serves, independent of how they arrive (RESP, a benchmark,
//! a test) and of which scheme stores the data.

use bytes::Bytes;

use crate::database::Db;
use crate::envelope::EnvelopeError;
use crate::hash::HashOp;
use crate::scheme::SchemeError;
use crate::update::Update;

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
    /// `SET` with an expiry option, `SETEX`, `PSETEX`: a string with a deadline, or keeping the
    /// key's deadline (`KEEPTTL`). A plain [`Command::Set`] clears it, as in Redis.
    SetExpiring {
        /// The key.
        key: Bytes,
        /// The value.
        value: Bytes,
        /// `NX` or `XX`.
        condition: SetCondition,
        /// The deadline, or `KEEPTTL`.
        expiry: SetExpiry,
        /// The command's name, for Redis's `invalid expire time in '…' command`.
        name: &'static str,
    },
    /// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT`: answers 1 if the deadline was set (or the
    /// key deleted, for a deadline already past), 0 for no key or a failed condition.
    Expire {
        /// The key.
        key: Bytes,
        /// The new deadline.
        deadline: Deadline,
        /// `NX`, `XX`, `GT` or `LT`.
        condition: ExpireCondition,
        /// The command's name, for Redis's `invalid expire time in '…' command`.
        name: &'static str,
    },
    /// `PERSIST`: answers 1 if a deadline was removed.
    Persist(Bytes),
    /// `TTL`, `PTTL`, `EXPIRETIME`, `PEXPIRETIME`: -2 for no key, -1 for no deadline.
    Ttl {
        /// The key.
        key: Bytes,
        /// What the answer counts in.
        unit: TtlUnit,
    },
    /// `GETEX`: a string's value, changing its deadline on the way.
    GetEx {
        /// The key.
        key: Bytes,
        /// The deadline to set or remove; `None` leaves it.
        change: Option<GetExChange>,
        /// The command's name, for its errors.
        name: &'static str,
    },
    /// `TYPE`: `string`, `hash` or `none`.
    Type(Bytes),
    /// A hash command on one key.
    Hash {
        /// The key.
        key: Bytes,
        /// What to do with the hash.
        op: HashOp,
    },
    /// How many keys the database holds.
    DbSize(Db),
    /// A read-modify-write of one key (see [`Update`]).
    Update {
        /// The key.
        key: Bytes,
        /// What to do with its value.
        op: Update,
    },
    /// MSETNX: sets every pair, or none if any of the keys exists; answers 1 or 0.
    MSetNx(Vec<(Bytes, Bytes)>),
    /// RENAME, or RENAMENX with `only_if_absent`.
    Rename {
        /// The key renamed.
        from: Bytes,
        /// Its new name.
        to: Bytes,
        /// RENAMENX: only if `to` does not exist.
        only_if_absent: bool,
    },
    /// COPY (the destination may be in another database: it is just another stored key).
    Copy {
        /// The key copied.
        from: Bytes,
        /// The copy's name.
        to: Bytes,
        /// `REPLACE`: overwrite an existing `to`.
        replace: bool,
        /// `DB n`: the database `to` is in, when not the client's own (applied as keys are
        /// encoded, see [`crate::database::in_db`]).
        to_db: Option<Db>,
    },
    /// KEYS: the database's keys matching a glob pattern.
    Keys {
        /// The database.
        db: Db,
        /// The glob pattern.
        pattern: Bytes,
    },
    /// SCAN: up to about `count` keys of the database from `cursor` on, and the next cursor.
    Scan {
        /// The database.
        db: Db,
        /// Where to go on from (0: the start).
        cursor: u64,
        /// `MATCH`.
        pattern: Option<Bytes>,
        /// `TYPE`: only keys of this type.
        kind: Option<Bytes>,
        /// `COUNT`.
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
    /// A script's start (EVAL): holds and reads these keys (the script's KEYS) as one unit, then
    /// answers [`Outcome::ScriptStarted`]; the script's calls follow as [`Command::ScriptCall`]
    /// and [`Command::ScriptEnd`] finishes it (see `engine::unit`).
    Script(Vec<Bytes>),
    /// One `redis.call` of a running script: runs at once on the unit's keys in memory.
    ScriptCall {
        /// The unit [`Outcome::ScriptStarted`] named.
        unit: u64,
        /// What the script called.
        command: Box<Command>,
    },
    /// The script of this unit finished: writes what it changed, then answers.
    ScriptEnd(u64),
}

/// A deadline as a client gives it, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// From now (`EX`, `PX`, `EXPIRE`, `PEXPIRE`; negative is already past).
    In(i64),
    /// A Unix time (`EXAT`, `PXAT`, `EXPIREAT`, `PEXPIREAT`).
    At(i64),
}

/// A `SET`'s deadline option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetExpiry {
    /// `KEEPTTL`: the key keeps the deadline it had.
    Keep,
    /// A new deadline.
    At(Deadline),
}

/// `EXPIRE`'s `NX | XX | GT | LT` (a key without a deadline counts as an infinite one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExpireCondition {
    /// Whatever deadline the key has.
    #[default]
    Always,
    /// Only if the key has no deadline.
    IfNone,
    /// Only if the key has one.
    IfSome,
    /// Only if the new deadline is later.
    IfLater,
    /// Only if the new deadline is earlier.
    IfEarlier,
    /// `XX LT`: only if the key has a deadline and the new one is earlier.
    IfSomeAndEarlier,
}

/// What `TTL` and its relatives answer in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlUnit {
    /// `TTL`: seconds left, rounded.
    Seconds,
    /// `PTTL`.
    Millis,
    /// `EXPIRETIME`: the Unix time in seconds, rounded.
    UnixSeconds,
    /// `PEXPIRETIME`.
    UnixMillis,
}

/// `GETEX`'s option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetExChange {
    /// `PERSIST`: remove the deadline.
    Persist,
    /// `EX`, `PX`, `EXAT`, `PXAT`: a new deadline.
    At(Deadline),
}

impl Command {
    /// The keys the command reads or writes, in order, repeats included (a transaction's: all
    /// its commands' keys).
    pub fn keys(&self) -> Vec<Bytes> {
        match self {
            Command::Get(key)
            | Command::Set { key, .. }
            | Command::Update { key, .. }
            | Command::SetExpiring { key, .. }
            | Command::Expire { key, .. }
            | Command::Persist(key)
            | Command::Ttl { key, .. }
            | Command::GetEx { key, .. }
            | Command::Type(key)
            | Command::Hash { key, .. } => vec![key.clone()],
            Command::MGet(keys) | Command::Del(keys) | Command::Exists(keys) => keys.clone(),
            Command::MSet(pairs) | Command::MSetNx(pairs) => {
                pairs.iter().map(|(key, _)| key.clone()).collect()
            }
            Command::Rename { from, to, .. } | Command::Copy { from, to, .. } => {
                vec![from.clone(), to.clone()]
            }
            Command::Transaction(commands) => commands.iter().flat_map(Command::keys).collect(),
            Command::Script(keys) => keys.clone(),
            // A script's calls and end act on the keys its start holds.
            Command::ScriptCall { .. } | Command::ScriptEnd(_) => Vec::new(),
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
            Command::Hash { op, .. } => !op.is_read(),
            Command::GetEx { change, .. } => change.is_some(),
            Command::Set { .. }
            | Command::SetExpiring { .. }
            | Command::Expire { .. }
            | Command::Persist(_)
            | Command::MSet(_)
            | Command::MSetNx(_)
            | Command::Del(_)
            | Command::Rename { .. }
            | Command::Copy { .. }
            | Command::Script(_)
            | Command::Flush(_) => true,
            Command::Transaction(commands) => commands.iter().any(Command::may_write),
            _ => false,
        }
    }

    /// Whether the command must run alone on its keys: it reads them and writes what it read
    /// decides (see `engine::unit`). Every read-modify-write is one: string updates, expiry
    /// updates, hash updates, MSETNX, RENAME, COPY, EXEC and scripts.
    pub fn runs_alone(&self) -> bool {
        match self {
            Command::Update { .. }
            | Command::Script(_)
            | Command::Expire { .. }
            | Command::Persist(_)
            | Command::MSetNx(_)
            | Command::Rename { .. }
            | Command::Copy { .. }
            | Command::Transaction(_) => true,
            Command::GetEx { change, .. } => change.is_some(),
            Command::Hash { op, .. } => !op.is_read(),
            _ => false,
        }
    }
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
    /// A status line (`TYPE`'s answer).
    Status(&'static str),
    /// Field and value pairs (`HGETALL`): a flat array in RESP2, a map in RESP3.
    Pairs(Vec<(Bytes, Bytes)>),
    /// Refused or failed.
    Error(CommandError),
    /// An array of replies: EXEC's results, SCAN's cursor and keys.
    Multi(Vec<Outcome>),
    /// EXEC when a watched key changed: nothing ran (Redis's null array).
    Aborted,
    /// A script's unit holds and has read its keys: the id its calls name. Only the proxy's
    /// scripting sees this; a client gets the script's own reply.
    ScriptStarted(u64),
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
    /// A command on a key of another type.
    #[error("Operation against a key holding the wrong kind of value")]
    WrongType,
    /// A deadline out of range, named by the command's name.
    #[error("invalid expire time in '{0}' command")]
    InvalidExpireTime(&'static str),
    /// `HINCRBY` on a field that does not hold an integer.
    #[error("hash value is not an integer")]
    HashValueNotInteger,
    /// `HINCRBYFLOAT` on a field that does not hold a float.
    #[error("hash value is not a float")]
    HashValueNotFloat,
    /// An increment that would overflow.
    #[error("increment or decrement would overflow")]
    Overflow,
    /// A hash that would outgrow the value size.
    #[error(
        "hash would take {len} bytes, the limit is {max} (set --value-size to store larger hashes)"
    )]
    HashTooLarge {
        /// Bytes the hash would take.
        len: usize,
        /// The most a value may take.
        max: usize,
    },
    /// A stored value whose envelope cannot be read.
    #[error("a stored value cannot be read: {0}")]
    Envelope(#[from] EnvelopeError),
    /// A stored hash that cannot be decoded.
    #[error("a stored hash cannot be read")]
    MalformedHash,
    /// A bug: a hash update answered as a read.
    #[error("internal error: a hash update was answered as a read")]
    NotARead,
    /// A value that is not a 64-bit integer (INCR and its relatives).
    #[error("value is not an integer or out of range")]
    NotInteger,
    /// A value or increment that is not a float (INCRBYFLOAT).
    #[error("value is not a valid float")]
    NotFloat,
    /// An increment that would produce NaN or infinity.
    #[error("increment would produce NaN or Infinity")]
    NanOrInfinity,
    /// RENAME of a key that does not exist.
    #[error("no such key")]
    NoSuchKey,
    /// A database-0 key with the form of another database's stored key (see `database`).
    #[error("this key has the form Cloak uses for keys of databases 1 to 15; use another")]
    ReservedKey,
    /// COPY onto itself.
    #[error("source and destination objects are the same")]
    SameObject,
    /// A command a transaction or a script cannot hold in Cloak.
    #[error("{0} is not supported inside MULTI or a script by Cloak")]
    NotInTransaction(&'static str),
    /// A script named a key it did not declare in KEYS: its unit read only those.
    #[error(
        "Script attempted to access a key not declared in KEYS (Cloak reads a script's keys before it runs)"
    )]
    UndeclaredKey,
    /// A script call or end for a unit that is not this client's running script.
    #[error("internal error: no such running script")]
    NoRunningScript,
}

impl CommandError {
    /// The error line a Redis client gets: Redis's code (`WRONGTYPE`, else `ERR`), then the text.
    pub fn redis_line(&self) -> String {
        match self {
            CommandError::WrongType => format!("WRONGTYPE {self}"),
            _ => format!("ERR {self}"),
        }
    }
}
