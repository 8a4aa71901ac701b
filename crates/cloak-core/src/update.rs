//! Read-modify-write string commands (INCR, APPEND, SETRANGE, GETSET, …) as one pure step:
//! the key's current value in, its new value and the reply out. The engine runs the step
//! between the read and the write of the key, with the key held (see `engine::unit`), so no
//! other client's command on it comes in between.

use bytes::{Bytes, BytesMut};

use crate::command::{CommandError, Outcome, SetCondition};
use crate::long_double;

/// An update of one key's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// INCR, INCRBY, DECR, DECRBY: add to the value read as a 64-bit integer.
    IncrBy(i64),
    /// INCRBYFLOAT with this increment (checked to be a float Redis accepts).
    IncrByFloat(Bytes),
    /// APPEND: answers the new length.
    Append(Bytes),
    /// SETRANGE: overwrite from `offset`, zero-padding a shorter value; answers the new length.
    SetRange { offset: usize, value: Bytes },
    /// GETSET and `SET … GET`: set the value when the condition holds, answer the old one.
    Replace {
        value: Bytes,
        condition: SetCondition,
    },
    /// SETNX: set the value only if the key is absent; answers 1 if it did, else 0.
    SetIfAbsent(Bytes),
    /// GETDEL: answer the value and delete the key.
    GetDel,
    /// STRLEN (no write).
    Strlen,
    /// GETRANGE with Redis's inclusive, possibly negative, indexes (no write).
    GetRange { start: i64, end: i64 },
}

/// What an update does to the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Keep,
    Put(Bytes),
    Delete,
}

/// An update's effect and reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub change: Change,
    pub outcome: Outcome,
}

impl Update {
    /// Whether the update may write the key (else it only reads it).
    pub fn may_write(&self) -> bool {
        !matches!(self, Update::Strlen | Update::GetRange { .. })
    }
}

/// Applies `update` to the key's `current` value (`None`: the key does not exist); values may
/// be at most `max_value` bytes. This is the one place an update's semantics live, so a type
/// check of the current value belongs here too.
pub fn apply(
    update: &Update,
    current: Option<&Bytes>,
    max_value: usize,
) -> Result<Applied, CommandError> {
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
    let put = |value: Bytes, outcome: Outcome| Applied {
        change: Change::Put(value),
        outcome,
    };
    let keep = |outcome: Outcome| Applied {
        change: Change::Keep,
        outcome,
    };
    Ok(match update {
        Update::IncrBy(increment) => {
            let value = current.map_or(Ok(0), |v| parse_integer(v))?;
            let sum = value
                .checked_add(*increment)
                .ok_or(CommandError::Overflow)?;
            put(Bytes::from(sum.to_string()), Outcome::Integer(sum))
        }
        Update::IncrByFloat(increment) => {
            let sum = long_double::add(current.map_or(&b"0"[..], |v| &v[..]), increment)?;
            fits(sum.len())?;
            put(sum.clone(), Outcome::Value(Some(sum)))
        }
        Update::Append(tail) => {
            let old = current.map_or(&[][..], |v| &v[..]);
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
            let old = current.map_or(&[][..], |v| &v[..]);
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
        Update::Replace { value, condition } => {
            let old = Outcome::Value(current.cloned());
            let holds = match condition {
                SetCondition::Always => true,
                SetCondition::IfAbsent => current.is_none(),
                SetCondition::IfPresent => current.is_some(),
            };
            if holds {
                put(value.clone(), old)
            } else {
                keep(old)
            }
        }
        Update::SetIfAbsent(value) => match current {
            None => put(value.clone(), Outcome::Integer(1)),
            Some(_) => keep(Outcome::Integer(0)),
        },
        Update::GetDel => Applied {
            change: match current {
                Some(_) => Change::Delete,
                None => Change::Keep,
            },
            outcome: Outcome::Value(current.cloned()),
        },
        Update::Strlen => keep(Outcome::Integer(current.map_or(0, Bytes::len) as i64)),
        Update::GetRange { start, end } => keep(Outcome::Value(Some(range(current, *start, *end)))),
    })
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
/// no spaces, within 64 bits.
pub fn parse_integer(value: &[u8]) -> Result<i64, CommandError> {
    let digits = value.strip_prefix(b"-").unwrap_or(value);
    let canonical = match digits {
        [b'0'] => value.len() == 1,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !canonical || value.len() > 20 {
        return Err(CommandError::NotInteger);
    }
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(CommandError::NotInteger)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(update: Update, current: Option<&str>) -> Result<Applied, CommandError> {
        apply(
            &update,
            current.map(|s| Bytes::from(s.to_string())).as_ref(),
            16,
        )
    }

    fn put(value: &str, outcome: Outcome) -> Result<Applied, CommandError> {
        Ok(Applied {
            change: Change::Put(Bytes::from(value.to_string())),
            outcome,
        })
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
            Ok(Applied {
                change: Change::Keep,
                outcome: Outcome::Integer(0)
            })
        );
        assert!(matches!(
            run(Update::Append("0123456789".into()), Some("0123456789")),
            Err(CommandError::ValueTooLarge { len: 20, max: 16 })
        ));
        let range = |start, end, value| match run(Update::GetRange { start, end }, value) {
            Ok(Applied {
                outcome: Outcome::Value(Some(v)),
                ..
            }) => v,
            other => panic!("{other:?}"),
        };
        assert_eq!(range(0, 3, Some("This is a string")), "This");
        assert_eq!(range(-3, -1, Some("This is a string")), "ing");
        assert_eq!(range(0, -1, Some("abc")), "abc");
        assert_eq!(range(10, 100, Some("abc")), "");
        assert_eq!(range(-1, -3, Some("abc")), "");
        assert_eq!(range(0, 5, None), "");
    }
}
