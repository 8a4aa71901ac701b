//! The value envelope: what a key's value is (a string or a hash) and when it expires, stored
//! in front of the client's data inside the record.
//!
//! ```text
//! value = magic (2) ‖ kind (1) ‖ deadline (8, Unix milliseconds, little endian; 0 = none) ‖ data
//! ```
//!
//! Why inside the value: the record is sealed as a whole and padded to one length (see
//! [`crate::element`]), so the storage server sees no new field, no new length and no new
//! request; only the proxy, which opens the element, reads the type and the deadline. The
//! element grows by [`ENVELOPE_LEN`] for every store alike, a constant of the format, so element
//! sizes stay a function of the creation parameters (`--key-size`, `--value-size`) alone.
//!
//! Why a magic: stores written before envelopes hold bare values. The ledger refuses them by
//! name when the proxy has a state directory; without one, sealed elements of the old size fail
//! to open, and a value that does not begin with the magic is refused at recovery rather than
//! read as a type and a deadline.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes the envelope adds in front of every value.
pub const ENVELOPE_LEN: usize = 2 + 1 + 8;

const MAGIC: [u8; 2] = [0xC1, 0x0E];

/// The Redis type of a key's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A string.
    String,
    /// A hash.
    Hash,
}

impl Kind {
    /// The name `TYPE` answers.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
        }
    }

    fn tag(self) -> u8 {
        match self {
            Kind::String => 1,
            Kind::Hash => 2,
        }
    }

    fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            1 => Some(Kind::String),
            2 => Some(Kind::Hash),
            _ => None,
        }
    }
}

/// A key's value as the engine sees it: its type, its deadline and its data (a string's bytes,
/// or a hash's encoding, see [`crate::hash`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What the value holds.
    pub kind: Kind,
    /// When the key expires, in Unix milliseconds; `None` for a key that lives until deleted.
    pub deadline: Option<u64>,
    /// The client's data.
    pub data: Bytes,
}

/// Why a stored value has no readable envelope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The value is shorter than an envelope or lacks its marker.
    #[error(
        "the value has no type and expiry envelope: the store was written by a Cloak from before \
         value envelopes, which this version cannot read"
    )]
    Missing,
    /// The type tag is not one this version knows.
    #[error("the value's envelope names an unknown type {0}")]
    UnknownKind(u8),
}

impl Entry {
    /// A string value without a deadline.
    pub fn string(data: Bytes) -> Self {
        Self {
            kind: Kind::String,
            deadline: None,
            data,
        }
    }

    /// The stored form: envelope, then data.
    pub fn seal(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(ENVELOPE_LEN + self.data.len());
        out.put_slice(&MAGIC);
        out.put_u8(self.kind.tag());
        out.put_u64_le(self.deadline.unwrap_or(0));
        out.put_slice(&self.data);
        out.freeze()
    }

    /// Reads a stored value; the data shares `value`'s buffer.
    pub fn open(value: &Bytes) -> Result<Self, EnvelopeError> {
        let (kind, deadline) = Self::header(value)?;
        Ok(Self {
            kind,
            deadline,
            data: value.slice(ENVELOPE_LEN..),
        })
    }

    /// The type and deadline of a stored value, from its envelope alone.
    pub fn header(value: &[u8]) -> Result<(Kind, Option<u64>), EnvelopeError> {
        if value.len() < ENVELOPE_LEN || value[..2] != MAGIC {
            return Err(EnvelopeError::Missing);
        }
        let kind = Kind::from_tag(value[2]).ok_or(EnvelopeError::UnknownKind(value[2]))?;
        let deadline = u64::from_le_bytes(value[3..11].try_into().expect("8 bytes"));
        Ok((kind, (deadline != 0).then_some(deadline)))
    }

    /// Whether the key is gone at `now` (Unix milliseconds), as Redis decides it: a deadline at
    /// or before now has passed.
    pub fn expired(&self, now: u64) -> bool {
        self.deadline.is_some_and(|at| at <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_bare_values_are_refused() {
        for entry in [
            Entry::string(Bytes::from_static(b"hello")),
            Entry {
                kind: Kind::Hash,
                deadline: Some(1_700_000_000_123),
                data: Bytes::new(),
            },
        ] {
            let sealed = entry.seal();
            assert_eq!(sealed.len(), ENVELOPE_LEN + entry.data.len());
            assert_eq!(Entry::open(&sealed), Ok(entry));
        }
        assert_eq!(
            Entry::open(&Bytes::from_static(b"a bare value from an old store")),
            Err(EnvelopeError::Missing)
        );
        let mut unknown = Entry::string(Bytes::new()).seal().to_vec();
        unknown[2] = 9;
        assert_eq!(
            Entry::open(&Bytes::from(unknown)),
            Err(EnvelopeError::UnknownKind(9))
        );
    }
}
