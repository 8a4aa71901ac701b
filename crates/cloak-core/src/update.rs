//! Read-modify-write commands: what each does to a key's value, as a pure function of the value
//! the engine read (the engine does the reading, the locking and the writing).
//!
//! This is the one place a command turns a key's current [`Entry`] into a new one and an answer.
//! Its type check is [`Update::kind`]: a command for another type answers `WRONGTYPE` and
//! changes nothing. String read-modify-write commands (INCR, APPEND, …) belong here as further
//! variants.

use crate::command::{CommandError, ExpireCondition, Outcome};
use crate::envelope::{Entry, Kind};
use crate::hash::{Hash, HashChange, HashOp};

/// What an update leaves in the key.
#[derive(Debug)]
pub enum Change {
    /// The value stays as it is.
    Keep,
    /// The value becomes this.
    Put(Entry),
    /// The key is deleted.
    Delete,
}

/// A read-modify-write of one key, its deadlines already resolved to Unix milliseconds.
#[derive(Clone, Debug)]
pub enum Update {
    /// A hash command.
    Hash(HashOp),
    /// A deadline at or before now deletes the key (as Redis does).
    Expire {
        /// The deadline, in Unix milliseconds.
        at: i64,
        /// `NX`, `XX`, `GT` or `LT`.
        condition: ExpireCondition,
    },
    /// `PERSIST`: remove the deadline.
    Persist,
    /// `GETEX` with an option: `None` removes the deadline.
    GetEx(Option<i64>),
}

impl Update {
    /// The type the command works on; `None` for any type.
    pub fn kind(&self) -> Option<Kind> {
        match self {
            Update::Hash(_) => Some(Kind::Hash),
            Update::GetEx(_) => Some(Kind::String),
            Update::Expire { .. } | Update::Persist => None,
        }
    }

    /// The change and the answer, for the key's entry (`None`: no such key) at `now`, with hashes
    /// limited to `max_value` bytes.
    pub fn apply(&self, entry: Option<Entry>, now: u64, max_value: usize) -> (Change, Outcome) {
        if let (Some(entry), Some(kind)) = (&entry, self.kind())
            && entry.kind != kind
        {
            return (Change::Keep, Outcome::Error(CommandError::WrongType));
        }
        match self {
            Update::Hash(op) => hash_update(op, entry, max_value),
            Update::Expire { at, condition } => {
                let Some(entry) = entry else {
                    return (Change::Keep, Outcome::Integer(0));
                };
                if !expire_allowed(*condition, entry.deadline, *at) {
                    return (Change::Keep, Outcome::Integer(0));
                }
                (with_deadline(entry, Some(*at), now), Outcome::Integer(1))
            }
            Update::Persist => match entry {
                Some(entry) if entry.deadline.is_some() => (
                    Change::Put(Entry {
                        deadline: None,
                        ..entry
                    }),
                    Outcome::Integer(1),
                ),
                _ => (Change::Keep, Outcome::Integer(0)),
            },
            Update::GetEx(at) => {
                let Some(entry) = entry else {
                    return (Change::Keep, Outcome::Value(None));
                };
                let answer = Outcome::Value(Some(entry.data.clone()));
                let change = match at {
                    None if entry.deadline.is_none() => Change::Keep,
                    _ => with_deadline(entry, *at, now),
                };
                (change, answer)
            }
        }
    }
}

/// The entry with a new deadline, or its deletion when the deadline has passed.
fn with_deadline(entry: Entry, at: Option<i64>, now: u64) -> Change {
    match at {
        Some(at) if at <= now as i64 => Change::Delete,
        at => Change::Put(Entry {
            deadline: at.map(|at| at as u64),
            ..entry
        }),
    }
}

/// Redis's `EXPIRE … NX | XX | GT | LT` (a key without a deadline has an infinite one).
fn expire_allowed(condition: ExpireCondition, held: Option<u64>, at: i64) -> bool {
    match (condition, held) {
        (ExpireCondition::Always, _) => true,
        (ExpireCondition::IfNone, held) => held.is_none(),
        (ExpireCondition::IfSome, held) => held.is_some(),
        (ExpireCondition::IfLater, None) => false,
        (ExpireCondition::IfLater, Some(held)) => at > held as i64,
        (ExpireCondition::IfEarlier, None) => true,
        (ExpireCondition::IfEarlier, Some(held)) => at < held as i64,
        (ExpireCondition::IfSomeAndEarlier, held) => held.is_some_and(|held| at < held as i64),
    }
}

fn hash_update(op: &HashOp, entry: Option<Entry>, max_value: usize) -> (Change, Outcome) {
    let deadline = entry.as_ref().and_then(|e| e.deadline);
    let hash = match entry.map(|e| Hash::decode(&e.data)).transpose() {
        Ok(hash) => hash,
        Err(_) => return (Change::Keep, Outcome::Error(CommandError::MalformedHash)),
    };
    let (change, answer) = op.update(hash, max_value);
    let change = match change {
        HashChange::Keep => Change::Keep,
        HashChange::Delete => Change::Delete,
        // A hash keeps its deadline through updates, as in Redis.
        HashChange::Put(hash) => Change::Put(Entry {
            kind: Kind::Hash,
            deadline,
            data: hash.encode(),
        }),
    };
    (change, answer)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn string(deadline: Option<u64>) -> Entry {
        Entry {
            kind: Kind::String,
            deadline,
            data: Bytes::from_static(b"v"),
        }
    }

    #[test]
    fn expire_conditions_follow_redis() {
        let expire = |condition, held, at| {
            Update::Expire { at, condition }
                .apply(Some(string(held)), 1_000, 64)
                .1
        };
        use ExpireCondition::*;
        assert_eq!(expire(IfNone, None, 5_000), Outcome::Integer(1));
        assert_eq!(expire(IfNone, Some(2_000), 5_000), Outcome::Integer(0));
        assert_eq!(expire(IfSome, None, 5_000), Outcome::Integer(0));
        assert_eq!(expire(IfLater, None, 5_000), Outcome::Integer(0));
        assert_eq!(expire(IfLater, Some(2_000), 5_000), Outcome::Integer(1));
        assert_eq!(expire(IfEarlier, None, 5_000), Outcome::Integer(1));
        assert_eq!(expire(IfEarlier, Some(2_000), 5_000), Outcome::Integer(0));
        let (change, answer) = Update::Expire {
            at: 1_000,
            condition: Always,
        }
        .apply(Some(string(None)), 1_000, 64);
        assert!(matches!(change, Change::Delete), "a past deadline deletes");
        assert_eq!(answer, Outcome::Integer(1));
    }

    #[test]
    fn the_type_check_answers_wrongtype() {
        let (change, answer) = Update::Hash(HashOp::Len).apply(Some(string(None)), 0, 64);
        assert!(matches!(change, Change::Keep));
        assert_eq!(answer, Outcome::Error(CommandError::WrongType));
        let (_, answer) = Update::Persist.apply(Some(string(Some(5))), 0, 64);
        assert_eq!(answer, Outcome::Integer(1));
    }
}
