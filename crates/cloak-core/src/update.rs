//! Read-modify-write commands: what each does to a key's value, as a pure function of the value
//! the engine read. The engine does the reading, the holding of the key (see `engine::gate`)
//! and the writing (see `engine::unit`), so no other client's command on the key comes in
//! between.
//!
//! This is the one place a command turns a key's current [`Entry`] into a new one and an answer:
//! string updates (INCR, APPEND, SETRANGE, GETSET, `SET … GET`, SETNX, GETDEL, …), expiry
//! updates (EXPIRE, PERSIST, GETEX) and hash updates. Its type check is [`Update::kind`]: a
//! command for another type answers `WRONGTYPE` and changes nothing.
//!
//! Deadlines follow Redis: INCR, APPEND, SETRANGE and hash updates keep the key's deadline;
//! GETSET and `SET … GET` replace the value and drop it (unless `KEEPTTL`); SETNX makes a new
//! key without one.

use bytes::{Bytes, BytesMut};

use crate::command::{CommandError, Deadline, ExpireCondition, Outcome, SetCondition, SetExpiry};
use crate::envelope::{Entry, Kind};
use crate::hash::{Hash, HashChange, HashOp};
use crate::long_double;

/// What an update leaves in the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The value stays as it is.
    Keep,
    /// The value becomes this.
    Put(Entry),
    /// The key is deleted.
    Delete,
}

/// A read-modify-write of one key, its deadlines already resolved to Unix milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// INCR, INCRBY, DECR, DECRBY: add to the value read as a 64-bit integer.
    IncrBy(i64),
    /// INCRBYFLOAT with this increment (checked to be a float Redis accepts).
    IncrByFloat(Bytes),
    /// APPEND: answers the new length.
    Append(Bytes),
    /// SETRANGE: overwrite from `offset`, zero-padding a shorter value; answers the new length.
    SetRange {
        /// Where the new bytes start.
        offset: usize,
        /// The new bytes.
        value: Bytes,
    },
    /// GETSET and `SET … GET`: set the value when the condition holds, answer the old one.
    Replace {
        /// The new value.
        value: Bytes,
        /// `NX` or `XX`.
        condition: SetCondition,
        /// `SET … GET`'s expiry option: `None` (no option) drops the key's deadline, `KEEPTTL`
        /// keeps it, a deadline replaces it (one already past deletes the key, as in Redis).
        expiry: Option<SetExpiry>,
    },
    /// SETNX: set the value only if the key is absent; answers 1 if it did, else 0.
    SetIfAbsent(Bytes),
    /// GETDEL: answer the value and delete the key.
    GetDel,
    /// STRLEN (no write).
    Strlen,
    /// GETRANGE with Redis's inclusive, possibly negative, indexes (no write).
    GetRange {
        /// The first index.
        start: i64,
        /// The last index.
        end: i64,
    },
}

impl Update {
    /// The type the command works on; `None` for any type.
    pub fn kind(&self) -> Option<Kind> {
        match self {
            Update::Hash(_) => Some(Kind::Hash),
            // SETNX only asks whether the key exists, as in Redis.
            Update::Expire { .. } | Update::Persist | Update::SetIfAbsent(_) => None,
            // `SET … GET` / GETSET answer the old value, so it must be a string too.
            _ => Some(Kind::String),
        }
    }

    /// Whether the update may write the key (else it only reads it).
    pub fn may_write(&self) -> bool {
        match self {
            Update::Strlen | Update::GetRange { .. } => false,
            Update::Hash(op) => !op.is_read(),
            _ => true,
        }
    }

    /// The change and the answer, for the key's entry (`None`: no such key) at `now` (Unix
    /// milliseconds), with values limited to `max_value` bytes.
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
            string => match string_update(string, entry.as_ref(), now, max_value) {
                Ok((change, outcome)) => (change, outcome),
                Err(error) => (Change::Keep, Outcome::Error(error)),
            },
        }
    }
}

/// A string update of `current` (checked to be a string): the deadline is kept unless the
/// update replaces the value (see the module docs).
fn string_update(
    update: &Update,
    current: Option<&Entry>,
    now: u64,
    max_value: usize,
) -> Result<(Change, Outcome), CommandError> {
    let fits = |len: usize| {
        if len > max_value {
            Err(CommandError::ValueTooLarge {
                len,
                max: max_value,
            })
        } else {
            Ok(())
        }
    };
    let deadline = current.and_then(|entry| entry.deadline);
    let data = current.map(|entry| &entry.data);
    // The new value, keeping the key's deadline.
    let put = |value: Bytes, outcome: Outcome| {
        (
            Change::Put(Entry {
                deadline,
                ..Entry::string(value)
            }),
            outcome,
        )
    };
    let keep = |outcome: Outcome| (Change::Keep, outcome);
    Ok(match update {
        Update::IncrBy(increment) => {
            let value = data.map_or(Ok(0), |v| parse_integer(v))?;
            let sum = value
                .checked_add(*increment)
                .ok_or(CommandError::Overflow)?;
            put(Bytes::from(sum.to_string()), Outcome::Integer(sum))
        }
        Update::IncrByFloat(increment) => {
            let sum = long_double::add(data.map_or(&b"0"[..], |v| &v[..]), increment)?;
            fits(sum.len())?;
            put(sum.clone(), Outcome::Value(Some(sum)))
        }
        Update::Append(tail) => {
            let old = data.map_or(&[][..], |v| &v[..]);
            fits(old.len() + tail.len())?;
            let mut value = BytesMut::with_capacity(old.len() + tail.len());
            value.extend_from_slice(old);
            value.extend_from_slice(tail);
            put(
                value.freeze(),
                Outcome::Integer((old.len() + tail.len()) as i64),
            )
        }
        Update::SetRange { offset, value } => {
            let old = data.map_or(&[][..], |v| &v[..]);
            // Setting nothing changes nothing (and creates no key), as in Redis.
            if value.is_empty() {
                return Ok(keep(Outcome::Integer(old.len() as i64)));
            }
            let end = offset.saturating_add(value.len());
            fits(end)?;
            let mut new = BytesMut::from(old);
            if new.len() < end {
                new.resize(end, 0);
            }
            new[*offset..end].copy_from_slice(value);
            put(new.freeze(), Outcome::Integer(end.max(old.len()) as i64))
        }
        Update::Replace {
            value,
            condition,
            expiry,
        } => {
            let old = Outcome::Value(data.cloned());
            let holds = match condition {
                SetCondition::Always => true,
                SetCondition::IfAbsent => current.is_none(),
                SetCondition::IfPresent => current.is_some(),
            };
            if !holds {
                return Ok(keep(old));
            }
            let at = match expiry {
                None => None,
                Some(SetExpiry::Keep) => deadline.map(|at| at as i64),
                Some(SetExpiry::At(Deadline::At(at))) => Some(*at),
                Some(SetExpiry::At(Deadline::In(after))) => Some(
                    (now as i64)
                        .checked_add(*after)
                        .ok_or(CommandError::InvalidExpireTime("set"))?,
                ),
            };
            (with_deadline(Entry::string(value.clone()), at, now), old)
        }
        Update::SetIfAbsent(value) => match current {
            None => (
                Change::Put(Entry::string(value.clone())),
                Outcome::Integer(1),
            ),
            Some(_) => keep(Outcome::Integer(0)),
        },
        Update::GetDel => (
            match current {
                Some(_) => Change::Delete,
                None => Change::Keep,
            },
            Outcome::Value(data.cloned()),
        ),
        Update::Strlen => keep(Outcome::Integer(data.map_or(0, Bytes::len) as i64)),
        Update::GetRange { start, end } => keep(Outcome::Value(Some(range(data, *start, *end)))),
        Update::Hash(_) | Update::Expire { .. } | Update::Persist | Update::GetEx(_) => {
            unreachable!("`Update::apply` runs these itself")
        }
    })
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

/// Redis's GETRANGE (an absent key is an empty string).
fn range(current: Option<&Bytes>, start: i64, end: i64) -> Bytes {
    let Some(value) = current else {
        return Bytes::new();
    };
    let len = value.len() as i64;
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return Bytes::new();
    }
    let from_end = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (from_end(start), from_end(end).min(len - 1));
    if start > end {
        return Bytes::new();
    }
    value.slice(start as usize..=end as usize)
}

/// Reads a value as Redis's `string2ll` does: optional `-`, digits, no leading zeros, no `+`,
/// no spaces, within 64 bits (the one reading, [`crate::hash::parse_integer`], with INCR's error).
pub fn parse_integer(value: &[u8]) -> Result<i64, CommandError> {
    crate::hash::parse_integer(value).ok_or(CommandError::NotInteger)
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

    /// The update of a string without a deadline; an error answer becomes `Err`.
    fn run(update: Update, current: Option<&str>) -> Result<(Change, Outcome), CommandError> {
        let entry = current.map(|s| Entry::string(Bytes::from(s.to_string())));
        match update.apply(entry, 0, 16) {
            (_, Outcome::Error(error)) => Err(error),
            applied => Ok(applied),
        }
    }

    fn put(value: &str, outcome: Outcome) -> Result<(Change, Outcome), CommandError> {
        Ok((
            Change::Put(Entry::string(Bytes::from(value.to_string()))),
            outcome,
        ))
    }

    #[test]
    fn integers_are_read_strictly_and_never_overflow() {
        assert_eq!(run(Update::IncrBy(1), None), put("1", Outcome::Integer(1)));
        assert_eq!(
            run(Update::IncrBy(-5), Some("3")),
            put("-2", Outcome::Integer(-2))
        );
        for bad in [
            "",
            "+1",
            "01",
            "-0",
            " 1",
            "1 ",
            "1.0",
            "x",
            "99999999999999999999",
        ] {
            assert_eq!(
                run(Update::IncrBy(1), Some(bad)),
                Err(CommandError::NotInteger),
                "{bad:?}"
            );
        }
        assert_eq!(
            run(Update::IncrBy(1), Some(&i64::MAX.to_string())),
            Err(CommandError::Overflow)
        );
        assert_eq!(parse_integer(b"-9223372036854775808"), Ok(i64::MIN));
    }

    #[test]
    fn string_edits_follow_redis() {
        assert_eq!(
            run(Update::Append("def".into()), Some("abc")),
            put("abcdef", Outcome::Integer(6))
        );
        assert_eq!(
            run(
                Update::SetRange {
                    offset: 2,
                    value: "xy".into()
                },
                Some("a")
            ),
            put("a\0xy", Outcome::Integer(4))
        );
        assert_eq!(
            run(
                Update::SetRange {
                    offset: 5,
                    value: "".into()
                },
                None
            ),
            Ok((Change::Keep, Outcome::Integer(0)))
        );
        assert!(matches!(
            run(Update::Append("0123456789".into()), Some("0123456789")),
            Err(CommandError::ValueTooLarge { len: 20, max: 16 })
        ));
        let range = |start, end, value| match run(Update::GetRange { start, end }, value) {
            Ok((_, Outcome::Value(Some(v)))) => v,
            other => panic!("{other:?}"),
        };
        assert_eq!(range(0, 3, Some("This is a string")), "This");
        assert_eq!(range(-3, -1, Some("This is a string")), "ing");
        assert_eq!(range(0, -1, Some("abc")), "abc");
        assert_eq!(range(10, 100, Some("abc")), "");
        assert_eq!(range(-1, -3, Some("abc")), "");
        assert_eq!(range(0, 5, None), "");
    }

    #[test]
    fn string_updates_keep_or_drop_deadlines_as_redis_does() {
        let timed = |value: &str| Entry {
            deadline: Some(9_000),
            ..Entry::string(Bytes::from(value.to_string()))
        };
        let (change, _) = Update::IncrBy(1).apply(Some(timed("1")), 0, 64);
        assert!(matches!(
            change,
            Change::Put(Entry {
                deadline: Some(9_000),
                ..
            })
        ));
        let replace = |expiry| Update::Replace {
            value: "x".into(),
            condition: SetCondition::Always,
            expiry,
        };
        let (change, _) = replace(None).apply(Some(timed("1")), 0, 64);
        assert!(matches!(change, Change::Put(Entry { deadline: None, .. })));
        let (change, _) = replace(Some(SetExpiry::Keep)).apply(Some(timed("1")), 0, 64);
        assert!(matches!(
            change,
            Change::Put(Entry {
                deadline: Some(9_000),
                ..
            })
        ));
        let hash = Entry {
            kind: Kind::Hash,
            ..timed("")
        };
        assert_eq!(
            Update::IncrBy(1).apply(Some(hash), 0, 64).1,
            Outcome::Error(CommandError::WrongType)
        );
    }
}
