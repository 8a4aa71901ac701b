//! Records and the element format they are stored in.
//!
//! A *record* is what a logical slot holds: a client key, its value and the version of the write
//! that produced it (an empty key means the slot is free). An *element* is a record as storage
//! sees it:
//!
//! ```text
//! plaintext = slot (8) ‖ version (8) ‖ key length (2) ‖ value length (4) ‖ key ‖ value ‖ zeros
//! element   = seal(binding, plaintext)        // see cloak_crypto::Sealer
//! ```
//!
//! The value the engine stores is a [`crate::envelope`] (type and expiry) followed by the
//! client's data, so a record's value may be [`ENVELOPE_LEN`] bytes longer than `--value-size`:
//! the element grows by that constant, and its size stays a function of the store's creation
//! parameters alone.
//!
//! Every plaintext is padded to the same length so element sizes reveal nothing, and every
//! element carries its slot, key and version so the proxy's maps can be rebuilt from storage.

use bytes::{Bytes, BytesMut};
use cloak_crypto::{Binding, CryptoError, PreparedSeal, SEAL_OVERHEAD, Sealer};

use crate::envelope::ENVELOPE_LEN;
use crate::storage::Addr;
use crate::workers::on_every_core_mut;

/// A logical slot: the proxy's name for where a key lives, independent of where storage keeps it.
pub type Slot = u64;

/// The slot of a record that holds no block at all (padding in a bucket, a dummy object).
pub const NO_SLOT: Slot = Slot::MAX;

/// A slot's content: a key and its value, with the version of the write that made it (an
/// empty key is a free slot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Increases with every client write; the proxy uses it to order copies of a slot.
    pub version: u64,
    /// The client's key (empty: the slot is free).
    pub key: Bytes,
    /// The value.
    pub value: Bytes,
}

/// A record read in place: its key and value are views of the bytes it was decoded from, so
/// reading one shares no buffer (recovery opens millions of elements on every core, and a
/// `Bytes` slice of each, made and dropped on different threads, was a sixth of that work).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// As [`Record::version`].
    pub version: u64,
    /// As [`Record::key`].
    pub key: &'a [u8],
    /// As [`Record::value`].
    pub value: &'a [u8],
}

impl RecordView<'_> {
    /// The record, its key and value slices of `bytes`, the buffer this is a view of.
    ///
    /// # Panics
    /// If the view is not of `bytes` (as `Bytes::slice_ref`).
    pub fn shared_in(&self, bytes: &Bytes) -> Record {
        Record {
            version: self.version,
            key: bytes.slice_ref(self.key),
            value: bytes.slice_ref(self.value),
        }
    }
}

impl Record {
    /// The record of a free slot.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Whether the slot is free.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// The record as a view of its own bytes.
    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            version: self.version,
            key: &self.key,
            value: &self.value,
        }
    }

    /// The record with its key and value in allocations of their own. A record opened in
    /// place is a view of its element's buffer, which may be a whole storage answer (a value
    /// sliced from one frame keeps the frame alive); one kept beyond its batch (a client's
    /// answer, the cache) is detached, so it holds its own bytes and no more, and the element
    /// is left alone to be sealed again in place.
    pub fn detached(&self) -> Self {
        Self {
            version: self.version,
            key: Bytes::copy_from_slice(&self.key),
            value: Bytes::copy_from_slice(&self.value),
        }
    }
}

/// Sizes of the fixed-length record encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLayout {
    /// Longest key.
    pub max_key: usize,
    /// The largest client value (`--value-size`); a record holds it with its envelope.
    pub max_value: usize,
}

const HEADER_LEN: usize = 8 + 8 + 2 + 4;

/// Why an element did not open into a record of its slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElementError {
    /// No element where one must be.
    #[error("storage has no element where one must be")]
    Missing,
    /// Authentication failed.
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    /// Authentic but not a record of this layout.
    #[error("element decrypted but is malformed: {0}")]
    Malformed(&'static str),
    /// Of a length no element of this store has (none was opened).
    #[error("element is {0} bytes long, a length no element of this store has")]
    WrongLength(usize),
    /// A record of another slot.
    #[error("element belongs to slot {found}, expected slot {expected}")]
    WrongSlot {
        /// The slot the scheme read.
        expected: Slot,
        /// The slot the element names.
        found: Slot,
    },
}

impl RecordLayout {
    /// Length of one encoded record (before encryption).
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.max_key + self.max_stored_value()
    }

    /// Length of an element sealing `records` encoded records together: one for the dense
    /// schemes' elements, a bucket's worth for the tree schemes'.
    /// Saturates: options not yet validated may ask for absurd buckets.
    pub fn sealed_len(&self, records: usize) -> usize {
        records
            .saturating_mul(self.encoded_len())
            .saturating_add(SEAL_OVERHEAD)
    }

    /// Whether `len` is the length of an element sealing a whole number of records (one or
    /// more): no other length can open.
    pub fn seals_whole_records(&self, len: usize) -> bool {
        len.checked_sub(SEAL_OVERHEAD)
            .is_some_and(|sealed| sealed > 0 && sealed.is_multiple_of(self.encoded_len()))
    }

    /// The largest value a record holds: a client value of `max_value` in its envelope.
    pub fn max_stored_value(&self) -> usize {
        self.max_value + ENVELOPE_LEN
    }

    /// Appends the padded encoding of `record` for `slot` to `out`.
    pub fn encode(&self, slot: Slot, record: &Record, out: &mut Vec<u8>) {
        let start = out.len();
        out.reserve(self.encoded_len());
        self.encode_compact(slot, record, out);
        out.resize(start + self.encoded_len(), 0);
    }

    /// Appends the encoding without padding: for storage that may see lengths (the unsafe
    /// baseline).
    pub fn encode_compact(&self, slot: Slot, record: &Record, out: &mut Vec<u8>) {
        assert!(
            record.key.len() <= self.max_key && record.value.len() <= self.max_stored_value(),
            "record exceeds the layout; the engine checks sizes before this point"
        );
        // One allocation for the whole record: growing an empty buffer field by field
        // reallocates (and copies) it several times per write.
        out.reserve(HEADER_LEN + record.key.len() + record.value.len());
        out.extend_from_slice(&slot.to_le_bytes());
        out.extend_from_slice(&record.version.to_le_bytes());
        out.extend_from_slice(&(record.key.len() as u16).to_le_bytes());
        out.extend_from_slice(&(record.value.len() as u32).to_le_bytes());
        out.extend_from_slice(&record.key);
        out.extend_from_slice(&record.value);
    }

    /// Decodes one record, padded or compact; its key and value share `bytes`' buffer.
    pub fn decode(&self, bytes: &Bytes) -> Result<(Slot, Record), ElementError> {
        let (slot, view) = self.view(bytes)?;
        Ok((slot, view.shared_in(bytes)))
    }

    /// Decodes one record, padded or compact, as a view of `bytes`.
    pub fn view<'a>(&self, bytes: &'a [u8]) -> Result<(Slot, RecordView<'a>), ElementError> {
        if bytes.len() < HEADER_LEN || bytes.len() > self.encoded_len() {
            return Err(ElementError::Malformed("wrong length"));
        }
        let slot = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
        let version = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        let key_len = u16::from_le_bytes(bytes[16..18].try_into().expect("2 bytes")) as usize;
        let value_len = u32::from_le_bytes(bytes[18..22].try_into().expect("4 bytes")) as usize;
        if key_len > self.max_key
            || value_len > self.max_stored_value()
            || HEADER_LEN + key_len + value_len > bytes.len()
        {
            return Err(ElementError::Malformed("lengths exceed the element"));
        }
        let (key, rest) = bytes[HEADER_LEN..].split_at(key_len);
        let view = RecordView {
            version,
            key,
            value: &rest[..value_len],
        };
        Ok((slot, view))
    }
}

/// Seals and opens single-record elements: the format every dense scheme stores.
pub struct ElementCodec {
    /// The record layout every element pads to.
    pub layout: RecordLayout,
    /// What seals and opens the elements.
    pub sealer: Sealer,
}

impl ElementCodec {
    /// A codec for `layout` sealing with `sealer`.
    pub fn new(layout: RecordLayout, sealer: Sealer) -> Self {
        Self { layout, sealer }
    }

    /// Size of every element this codec produces.
    pub fn element_len(&self) -> usize {
        self.layout.sealed_len(1)
    }

    /// The element holding `slot`'s `record`, sealed for `binding`.
    pub fn seal(&mut self, binding: Binding, slot: Slot, record: &Record) -> Bytes {
        let layout = self.layout;
        Bytes::from(self.sealer.seal_with(binding, layout.encoded_len(), |out| {
            layout.encode(slot, record, out)
        }))
    }

    /// Makes the next `n` seals share one epoch (see `Sealer::reserve`): call it before sealing
    /// a batch whose seals are drawn in another order than they are written.
    pub fn reserve(&mut self, n: usize) {
        self.sealer.reserve(n as u64);
    }

    /// Takes the next element's epoch and nonce from the sealer's one generator, for
    /// [`ElementCodec::seal_all`] (see `Sealer::prepare`).
    pub fn prepare(&mut self) -> PreparedSeal {
        self.sealer.prepare()
    }

    /// Seals a batch of elements, `(seal, binding, plaintext)` each, and returns them in the
    /// same order, encrypting on every core (the elements of a batch are independent). Each
    /// plaintext is taken (left `Plaintext::taken`).
    ///
    /// Why this shows the server nothing a one-by-one [`ElementCodec::seal`] would not: each
    /// element's nonce and epoch were drawn by [`ElementCodec::prepare`] on the caller's thread,
    /// in the caller's order; the threads only encrypt, and each result lands at its own index.
    /// So the bytes of every element and their order in the request are those of the sequential
    /// loop, whichever thread finishes first, and when the request leaves is the scheme's
    /// schedule's business. Sealing an opened element in its own buffer gives the same bytes as
    /// encoding its record into a new one (see [`Plaintext::Opened`]); only the proxy's memory
    /// differs.
    pub fn seal_all(&self, elements: &mut [(PreparedSeal, Binding, Plaintext)]) -> Vec<Bytes> {
        let layout = self.layout;
        on_every_core_mut(
            elements,
            |(seal, binding, plaintext)| match std::mem::replace(plaintext, Plaintext::taken()) {
                Plaintext::Record(slot, record) => {
                    Bytes::from(seal.seal_with(*binding, layout.encoded_len(), |out| {
                        layout.encode(slot, &record, out)
                    }))
                }
                Plaintext::Opened(element) => {
                    let mut buffer = own_buffer(element);
                    seal.seal_in_place(*binding, &mut buffer);
                    buffer.freeze()
                }
            },
        )
    }

    /// Opens a batch of elements, `(binding, element, expected slot)` each, on every core, each
    /// in its own buffer (see [`ElementCodec::open_in_place`]); the results come in the order
    /// given, and every element is taken (left `None`).
    pub fn open_all(
        &self,
        elements: &mut [(Binding, Option<Bytes>, Option<Slot>)],
    ) -> Vec<Result<Opened, ElementError>> {
        on_every_core_mut(elements, |(binding, element, expected)| {
            self.open_in_place(*binding, element.take(), *expected)
        })
    }

    /// Opens an element in its buffer and checks it holds `expected` (when the caller knows
    /// which slot): the record is a view of that buffer, which [`Plaintext::Opened`] seals
    /// again. The buffer is storage's own when nothing else holds it (the Redis backend gives
    /// every value its own), else a copy of the element: storage's answer is freed once its
    /// elements are opened, and a batch holds one copy of its elements from then on, not the
    /// answer, the records and the sealed write-back.
    pub fn open_in_place(
        &self,
        binding: Binding,
        element: Option<Bytes>,
        expected: Option<Slot>,
    ) -> Result<Opened, ElementError> {
        let mut buffer = own_buffer(element.ok_or(ElementError::Missing)?);
        let plaintext = self.sealer.open_in_place(binding, &mut buffer)?;
        let element = buffer.freeze();
        let (slot, record) = self.layout.decode(&element.slice(plaintext))?;
        match expected {
            Some(expected) if expected != slot => Err(ElementError::WrongSlot {
                expected,
                found: slot,
            }),
            _ => Ok(Opened {
                slot,
                record,
                element,
            }),
        }
    }

    /// Opens an element and checks it holds `expected` (when the caller knows which slot).
    pub fn open(
        &self,
        binding: Binding,
        element: Option<&Bytes>,
        expected: Option<Slot>,
    ) -> Result<(Slot, Record), ElementError> {
        // The caller keeps its element: opened in a copy (`open_in_place`'s own buffer).
        let opened = self.open_in_place(binding, element.cloned(), expected)?;
        Ok((opened.slot, opened.record))
    }
}

/// An element opened in its own buffer ([`ElementCodec::open_in_place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The slot it holds.
    pub slot: Slot,
    /// Its record, a view of `element`.
    pub record: Record,
    /// The element's buffer, holding the plaintext between room for the header and the tag.
    pub element: Bytes,
}

/// What [`ElementCodec::seal_all`] seals into one element.
#[derive(Debug)]
pub enum Plaintext {
    /// A slot's record, encoded into a new buffer.
    Record(Slot, Record),
    /// An element opened by [`ElementCodec::open_in_place`] (its [`Opened::element`]), sealed
    /// again with the same slot and record in its own buffer when nothing else holds it (no
    /// view of its record kept elsewhere, as a client's answer or the cache), else in a copy.
    /// Its plaintext is what [`RecordLayout::encode`] wrote when it was sealed (authenticated,
    /// so nobody else wrote it), so the bytes are those of [`Plaintext::Record`] with its record.
    Opened(Bytes),
}

impl Plaintext {
    /// What a taken plaintext leaves behind.
    fn taken() -> Self {
        Self::Opened(Bytes::new())
    }
}

/// `element`'s bytes in a buffer that may be written: its own when nothing else holds it, else
/// a copy (a value sliced from a storage answer shared by a batch, or an element an unanswered
/// write-back still holds: those must not change).
fn own_buffer(element: Bytes) -> BytesMut {
    element
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]))
}

impl ElementCodec {
    /// Opens an element found at `address` without knowing its generation (recovery scans);
    /// returns the generation that wrote it and every record it holds (an element may hold
    /// several padded records back to back, like an ORAM bucket), skipping [`NO_SLOT`] padding.
    pub fn open_found(
        &self,
        address: Addr,
        element: &Bytes,
    ) -> Result<(u64, Vec<(Slot, Record)>), ElementError> {
        let (generation, plaintext) = self.sealer.open_found(address, element)?;
        Ok((generation, self.records(Bytes::from(plaintext))?))
    }

    /// Opens an element of several records that this run sealed at `binding` (an ORAM bucket
    /// read back during the run), skipping [`NO_SLOT`] padding.
    pub fn open_records(
        &self,
        binding: Binding,
        element: Option<&Bytes>,
    ) -> Result<Vec<(Slot, Record)>, ElementError> {
        let element = element.ok_or(ElementError::Missing)?;
        self.records(Bytes::from(self.sealer.open(binding, element)?))
    }

    fn records(&self, plaintext: Bytes) -> Result<Vec<(Slot, Record)>, ElementError> {
        let views = self.views(&plaintext)?;
        Ok(views
            .into_iter()
            .map(|(slot, view)| (slot, view.shared_in(&plaintext)))
            .collect())
    }

    /// The records of an opened element's `plaintext`, as views of it, skipping [`NO_SLOT`]
    /// padding.
    pub fn views<'a>(
        &self,
        plaintext: &'a [u8],
    ) -> Result<Vec<(Slot, RecordView<'a>)>, ElementError> {
        let len = self.layout.encoded_len();
        if plaintext.is_empty() || !plaintext.len().is_multiple_of(len) {
            return Err(ElementError::Malformed("not a whole number of records"));
        }
        let mut views = Vec::new();
        for record in plaintext.chunks_exact(len) {
            let (slot, view) = self.layout.view(record)?;
            if slot != NO_SLOT {
                views.push((slot, view));
            }
        }
        Ok(views)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::PER_THREAD;
    use cloak_crypto::{ClearHeader, MasterKey};

    fn codec() -> ElementCodec {
        let layout = RecordLayout {
            max_key: 16,
            max_value: 32,
        };
        ElementCodec::new(
            layout,
            Sealer::new(&MasterKey::from_bytes([1; 32])).unwrap(),
        )
    }

    /// A batch sealed and opened on several threads comes back in the order given, each
    /// element bound to its own address and holding its own record, with a nonce of its own.
    #[test]
    fn batches_seal_and_open_in_order_on_several_threads() {
        let mut c = codec();
        let n = 5 * PER_THREAD + 7; // several shares, the last one short
        let batch: Vec<(Binding, Slot, Record)> = (0..n as u64)
            .map(|i| {
                let record = Record {
                    version: i + 1,
                    key: Bytes::from(format!("k{i}")),
                    value: Bytes::from(i.to_le_bytes().to_vec()),
                };
                let binding = Binding {
                    address: u128::from(i) * 3,
                    generation: 2,
                };
                (binding, i + 100, record)
            })
            .collect();
        let mut prepared: Vec<_> = batch
            .iter()
            .map(|(binding, slot, record)| {
                let plaintext = Plaintext::Record(*slot, record.clone());
                (c.prepare(), *binding, plaintext)
            })
            .collect();
        let sealed = c.seal_all(&mut prepared);
        assert_eq!(sealed.len(), n);
        let nonces: std::collections::HashSet<_> = sealed
            .iter()
            .map(|e| ClearHeader::read(e).unwrap().nonce)
            .collect();
        assert_eq!(nonces.len(), n, "every element has a nonce of its own");
        let mut to_open: Vec<_> = batch
            .iter()
            .zip(&sealed)
            .map(|((binding, slot, _), element)| (*binding, Some(element.clone()), Some(*slot)))
            .collect();
        let opened = c.open_all(&mut to_open);
        assert!(to_open.iter().all(|(_, element, _)| element.is_none()));
        for ((_, slot, record), opened) in batch.iter().zip(&opened) {
            let opened = opened.as_ref().unwrap();
            assert_eq!((opened.slot, &opened.record), (*slot, record));
        }
        // Each element opens only at its own address.
        let mut swapped = [(batch[1].0, Some(sealed[0].clone()), None)];
        assert!(c.open_all(&mut swapped)[0].is_err());

        // Sealed again in their own buffers, they open to the same records; the element a
        // reader still holds a view of is sealed in a copy, and that view is left as it was.
        let kept = opened[0].as_ref().unwrap().record.clone();
        let mut again: Vec<_> = batch
            .iter()
            .zip(opened)
            .map(|((binding, _, _), opened)| {
                let element = opened.unwrap().element;
                (c.prepare(), *binding, Plaintext::Opened(element))
            })
            .collect();
        let resealed = c.seal_all(&mut again);
        assert_eq!(kept, batch[0].2);
        for ((binding, slot, record), element) in batch.iter().zip(resealed) {
            let opened = c
                .open_in_place(*binding, Some(element), Some(*slot))
                .unwrap();
            assert_eq!(&opened.record, record);
        }
    }

    /// An element opened and sealed again in its own buffer is byte for byte the element that
    /// encoding its record into a new buffer gives, with the same seal.
    #[test]
    fn sealing_in_place_gives_the_bytes_of_sealing_the_record() {
        let mut c = codec();
        let at = Binding {
            address: 5,
            generation: 1,
        };
        let record = Record {
            version: 3,
            key: Bytes::from_static(b"key"),
            value: Bytes::from_static(b"short value"),
        };
        let element = c.seal(at, 9, &record);
        let opened = c.open_in_place(at, Some(element), Some(9)).unwrap();
        let next = Binding {
            address: 6,
            generation: 2,
        };
        let seal = c.prepare();
        let expected = Bytes::from(seal.seal_with(next, c.layout.encoded_len(), |out| {
            c.layout.encode(9, &record, out)
        }));
        let Opened { element, .. } = opened;
        let sealed = c.seal_all(&mut [(seal, next, Plaintext::Opened(element))]);
        assert_eq!(sealed, vec![expected]);
    }

    #[test]
    fn elements_have_one_size_and_round_trip() {
        let mut c = codec();
        let at = Binding {
            address: 5,
            generation: 1,
        };
        let full = Record {
            version: 9,
            key: Bytes::from_static(b"k"),
            value: Bytes::from(vec![7u8; 32 + ENVELOPE_LEN]),
        };
        let a = c.seal(at, 3, &full);
        let b = c.seal(at, 3, &Record::empty());
        assert_eq!(a.len(), b.len());
        assert_eq!(a.len(), c.element_len());
        assert_eq!(c.open(at, Some(&a), Some(3)).unwrap(), (3, full));
        assert_eq!(c.open(at, Some(&b), None).unwrap(), (3, Record::empty()));
        assert_eq!(
            c.open(at, Some(&a), Some(4)),
            Err(ElementError::WrongSlot {
                expected: 4,
                found: 3
            })
        );
        assert_eq!(c.open(at, None, Some(3)), Err(ElementError::Missing));
        assert_eq!(
            c.open_found(5, &b).unwrap(),
            (1, vec![(3, Record::empty())])
        );
    }
}
