//! Hashes: a key's fields and their values, kept as one encoded value within `--value-size`.
//!
//! ```text
//! data = (field length (4) ‖ field ‖ value length (4) ‖ value)*     // lengths little endian
//! ```
//!
//! Fields keep the order they were first set in, as a small Redis hash (a listpack) does, so
//! `HGETALL`, `HKEYS` and `HVALS` answer in the order Redis would. The engine reads and writes
//! the whole value, so a hash command is a read (and, for updates, a write) of one key: the
//! accesses a string command makes, sealed and padded the same way.

use bytes::{BufMut, Bytes, BytesMut};

use crate::command::{CommandError, Outcome};
use crate::long_double;

/// Bytes each field adds beyond its field's and value's own bytes.
const PER_FIELD: usize = 8;

/// A hash command: what it reads or changes in one key's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashOp {
    /// `HSET key field value …`: answers how many fields are new.
    Set(Vec<(Bytes, Bytes)>),
    /// `HMSET key field value …`: HSET that answers OK.
    MSet(Vec<(Bytes, Bytes)>),
    /// `HSETNX key field value`: sets only a new field.
    SetNx(Bytes, Bytes),
    /// `HDEL key field …`: answers how many existed; the key goes with its last field.
    Del(Vec<Bytes>),
    /// `HINCRBY key field increment`.
    IncrBy(Bytes, i64),
    /// `HINCRBYFLOAT key field increment` (a finite float, checked when parsed).
    IncrByFloat(Bytes, Bytes),
    /// `HGET`: one field's value.
    Get(Bytes),
    /// `HMGET`: several fields' values.
    MGet(Vec<Bytes>),
    /// `HGETALL`: every field and value.
    GetAll,
    /// `HEXISTS`: whether a field exists.
    Exists(Bytes),
    /// `HLEN`: how many fields.
    Len,
    /// `HKEYS`: the fields.
    Keys,
    /// `HVALS`: the values.
    Vals,
    /// `HSTRLEN`: a field's value's length.
    StrLen(Bytes),
}

/// What an update leaves in the hash.
pub enum HashChange {
    /// The hash is unchanged.
    Keep,
    /// The hash becomes this.
    Put(Hash),
    /// The last field went: the key goes too, as in Redis.
    Delete,
}

/// A decoded hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hash {
    fields: Vec<(Bytes, Bytes)>,
}

/// A stored hash that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a hash value is malformed")]
pub struct MalformedHash;

impl Hash {
    /// Reads a hash from its stored form.
    pub fn decode(data: &Bytes) -> Result<Self, MalformedHash> {
        let mut fields = Vec::new();
        let mut at = 0;
        let take = |at: &mut usize| -> Result<Bytes, MalformedHash> {
            let len_bytes = data.get(*at..*at + 4).ok_or(MalformedHash)?;
            let len = u32::from_le_bytes(len_bytes.try_into().map_err(|_| MalformedHash)?) as usize;
            let end = (*at + 4).checked_add(len).ok_or(MalformedHash)?;
            if end > data.len() {
                return Err(MalformedHash);
            }
            let slice = data.slice(*at + 4..end);
            *at = end;
            Ok(slice)
        };
        while at < data.len() {
            let field = take(&mut at)?;
            let value = take(&mut at)?;
            fields.push((field, value));
        }
        Ok(Self { fields })
    }

    /// The stored form: each field and value with their lengths.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        for (field, value) in &self.fields {
            out.put_u32_le(field.len() as u32);
            out.put_slice(field);
            out.put_u32_le(value.len() as u32);
            out.put_slice(value);
        }
        out.freeze()
    }

    /// How many bytes [`Hash::encode`] gives.
    pub fn encoded_len(&self) -> usize {
        self.fields
            .iter()
            .map(|(f, v)| PER_FIELD + f.len() + v.len())
            .sum()
    }

    fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.fields.iter().find(|(f, _)| f == field).map(|(_, v)| v)
    }

    /// Sets a field; `true` if it is new.
    fn set(&mut self, field: Bytes, value: Bytes) -> bool {
        match self.fields.iter_mut().find(|(f, _)| *f == field) {
            Some((_, held)) => {
                *held = value;
                false
            }
            None => {
                self.fields.push((field, value));
                true
            }
        }
    }

    fn remove(&mut self, field: &[u8]) -> bool {
        let before = self.fields.len();
        self.fields.retain(|(f, _)| f != field);
        self.fields.len() != before
    }
}

impl HashOp {
    /// Whether the command only reads (it never writes the key).
    pub fn is_read(&self) -> bool {
        !matches!(
            self,
            HashOp::Set(_)
                | HashOp::MSet(_)
                | HashOp::SetNx(..)
                | HashOp::Del(_)
                | HashOp::IncrBy(..)
                | HashOp::IncrByFloat(..)
        )
    }

    /// A read's answer for the key's hash (`None`: no such key).
    pub fn read(&self, hash: Option<&Hash>) -> Outcome {
        let empty = Hash::default();
        let hash = hash.unwrap_or(&empty);
        match self {
            HashOp::Get(field) => Outcome::Value(hash.get(field).cloned()),
            HashOp::MGet(fields) => {
                Outcome::Values(fields.iter().map(|f| hash.get(f).cloned()).collect())
            }
            HashOp::GetAll => Outcome::Pairs(hash.fields.clone()),
            HashOp::Exists(field) => Outcome::Integer(hash.get(field).is_some() as i64),
            HashOp::Len => Outcome::Integer(hash.fields.len() as i64),
            HashOp::Keys => {
                Outcome::Values(hash.fields.iter().map(|(f, _)| Some(f.clone())).collect())
            }
            HashOp::Vals => {
                Outcome::Values(hash.fields.iter().map(|(_, v)| Some(v.clone())).collect())
            }
            HashOp::StrLen(field) => {
                Outcome::Integer(hash.get(field).map_or(0, |v| v.len()) as i64)
            }
            // Updates answer through `update`; a read of one is a bug in the caller.
            HashOp::Set(_)
            | HashOp::MSet(_)
            | HashOp::SetNx(..)
            | HashOp::Del(_)
            | HashOp::IncrBy(..)
            | HashOp::IncrByFloat(..) => Outcome::Error(CommandError::NotARead),
        }
    }

    /// An update of the key's hash (`None`: no such key), within `max` encoded bytes.
    pub fn update(&self, hash: Option<Hash>, max: usize) -> (HashChange, Outcome) {
        let existed = hash.is_some();
        let mut hash = hash.unwrap_or_default();
        let answer = match self {
            HashOp::Set(pairs) | HashOp::MSet(pairs) => {
                let added = pairs
                    .iter()
                    .filter(|(f, v)| hash.set(f.clone(), v.clone()))
                    .count();
                match self {
                    HashOp::MSet(_) => Outcome::Ok,
                    _ => Outcome::Integer(added as i64),
                }
            }
            HashOp::SetNx(field, value) => {
                if hash.get(field).is_some() {
                    return (HashChange::Keep, Outcome::Integer(0));
                }
                hash.set(field.clone(), value.clone());
                Outcome::Integer(1)
            }
            HashOp::Del(fields) => {
                let removed = fields.iter().filter(|f| hash.remove(f)).count();
                let change = match (removed, hash.fields.is_empty()) {
                    (0, _) => HashChange::Keep,
                    (_, true) => HashChange::Delete,
                    (_, false) => HashChange::Put(hash),
                };
                return (change, Outcome::Integer(removed as i64));
            }
            HashOp::IncrBy(field, by) => {
                let held = match hash.get(field) {
                    None => 0,
                    Some(value) => match parse_integer(value) {
                        Some(n) => n,
                        None => {
                            return (
                                HashChange::Keep,
                                Outcome::Error(CommandError::HashValueNotInteger),
                            );
                        }
                    },
                };
                let Some(sum) = held.checked_add(*by) else {
                    return (HashChange::Keep, Outcome::Error(CommandError::Overflow));
                };
                hash.set(field.clone(), Bytes::from(sum.to_string()));
                Outcome::Integer(sum)
            }
            HashOp::IncrByFloat(field, by) => {
                let held = hash.get(field).cloned().unwrap_or(Bytes::from_static(b"0"));
                // The increment was checked when parsed, so a value that is not a float is the
                // field's.
                let sum = match long_double::add(&held, by) {
                    Ok(sum) => sum,
                    Err(CommandError::NotFloat) => {
                        return (
                            HashChange::Keep,
                            Outcome::Error(CommandError::HashValueNotFloat),
                        );
                    }
                    Err(error) => return (HashChange::Keep, Outcome::Error(error)),
                };
                hash.set(field.clone(), sum.clone());
                Outcome::Value(Some(sum))
            }
            read => return (HashChange::Keep, read.read(existed.then_some(&hash))),
        };
        let len = hash.encoded_len();
        if len > max {
            return (
                HashChange::Keep,
                Outcome::Error(CommandError::HashTooLarge { len, max }),
            );
        }
        (HashChange::Put(hash), answer)
    }
}

/// A decimal integer as Redis reads one (`string2ll`): an optional minus sign and digits, no
/// spaces, no plus sign, no leading zeros, within 64 bits.
pub fn parse_integer(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && text != "-0";
    if !canonical {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn hashes_round_trip_in_insertion_order() {
        let (change, answer) =
            HashOp::Set(vec![(b("z"), b("1")), (b("a"), b("2")), (b("z"), b("3"))])
                .update(None, 100);
        assert_eq!(answer, Outcome::Integer(2));
        let HashChange::Put(hash) = change else {
            panic!("a new hash is written")
        };
        let decoded = Hash::decode(&hash.encode()).unwrap();
        assert_eq!(decoded, hash);
        assert_eq!(
            HashOp::GetAll.read(Some(&decoded)),
            Outcome::Pairs(vec![(b("z"), b("3")), (b("a"), b("2"))])
        );
        assert!(Hash::decode(&Bytes::from_static(&[9, 0, 0, 0, 1])).is_err());
    }

    #[test]
    fn updates_give_redis_answers_and_errors() {
        let start = Hash {
            fields: vec![(b("n"), b("5")), (b("s"), b("x"))],
        };
        let (_, answer) = HashOp::IncrBy(b("n"), -7).update(Some(start.clone()), 100);
        assert_eq!(answer, Outcome::Integer(-2));
        let (_, answer) = HashOp::IncrBy(b("s"), 1).update(Some(start.clone()), 100);
        assert_eq!(answer, Outcome::Error(CommandError::HashValueNotInteger));
        let (_, answer) = HashOp::IncrBy(b("n"), i64::MAX).update(Some(start.clone()), 100);
        assert_eq!(answer, Outcome::Error(CommandError::Overflow));
        let (change, answer) =
            HashOp::Del(vec![b("n"), b("s"), b("n")]).update(Some(start.clone()), 100);
        assert_eq!(answer, Outcome::Integer(2));
        assert!(matches!(change, HashChange::Delete));
        let (_, answer) =
            HashOp::Set(vec![(b("big"), Bytes::from(vec![0; 90]))]).update(Some(start), 100);
        assert_eq!(
            answer,
            Outcome::Error(CommandError::HashTooLarge { len: 121, max: 100 })
        );
    }

    #[test]
    fn integers_parse_as_redis_parses_them() {
        assert_eq!(parse_integer(b"-12"), Some(-12));
        assert_eq!(parse_integer(b"0"), Some(0));
        for bad in [
            "",
            "-",
            "+1",
            " 1",
            "01",
            "-0",
            "1.0",
            "99999999999999999999",
        ] {
            assert_eq!(parse_integer(bad.as_bytes()), None, "{bad}");
        }
    }
}
