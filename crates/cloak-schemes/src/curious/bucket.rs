//! One bucket = one storage element: `z` padded records sealed together.
//!
//! ```text
//! plaintext = record₁ ‖ … ‖ record_z     // each the fixed-size record encoding; NO_SLOT pads
//! element   = seal(address ‖ generation, plaintext)
//! ```
//!
//! Every bucket has the same size whatever it holds, so the server cannot count real blocks.
//! The binding's generation is the write that produced the bucket; the proxy remembers the
//! generation of every bucket it wrote, so a bucket replayed from an earlier write (or moved
//! from another address, or altered) fails to open. Recovery after a crash reads buckets with
//! `ElementCodec::open_found`, which already takes several records per element.

use bytes::Bytes;
use cloak_core::{ElementCodec, ElementError, NO_SLOT, Record, Slot};
use cloak_crypto::Binding;

pub struct BucketCodec {
    codec: ElementCodec,
    bucket_size: usize,
}

impl BucketCodec {
    pub fn new(codec: ElementCodec, bucket_size: usize) -> Self {
        Self { codec, bucket_size }
    }

    /// Size of every bucket element.
    pub fn element_len(&self) -> usize {
        self.codec.layout.sealed_len(self.bucket_size)
    }

    /// Seals up to `bucket_size` records, padding the rest with empty [`NO_SLOT`] records.
    pub fn seal<'a>(
        &mut self,
        binding: Binding,
        records: impl IntoIterator<Item = (Slot, &'a Record)>,
    ) -> Bytes {
        let layout = self.codec.layout;
        let bucket_size = self.bucket_size;
        let padding = Record::empty();
        let len = bucket_size * layout.encoded_len();
        Bytes::from(self.codec.sealer.seal_with(binding, len, |out| {
            let mut written = 0;
            for (slot, record) in records {
                assert!(written < bucket_size, "a bucket holds at most z blocks");
                layout.encode(slot, record, out);
                written += 1;
            }
            for _ in written..bucket_size {
                layout.encode(NO_SLOT, &padding, out);
            }
        }))
    }

    /// Opens the bucket that must be at `binding` (address and the generation that last wrote
    /// it) and returns its blocks.
    pub fn open(
        &self,
        binding: Binding,
        element: Option<&Bytes>,
    ) -> Result<Vec<(Slot, Record)>, ElementError> {
        if element.is_some_and(|e| e.len() != self.element_len()) {
            return Err(ElementError::Malformed("a bucket of the wrong size"));
        }
        self.codec.open_records(binding, element)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_core::RecordLayout;
    use cloak_crypto::{MasterKey, Sealer};

    fn codec() -> BucketCodec {
        let layout = RecordLayout {
            max_key: 8,
            max_value: 16,
        };
        let sealer = Sealer::new(&MasterKey::from_bytes([4; 32])).unwrap();
        BucketCodec::new(ElementCodec::new(layout, sealer), 3)
    }

    fn record(value: &str) -> Record {
        Record {
            version: 1,
            key: "k".into(),
            value: Bytes::from(value.to_string()),
        }
    }

    #[test]
    fn buckets_have_one_size_and_hold_their_blocks() {
        let mut c = codec();
        let at = Binding {
            address: 9,
            generation: 5,
        };
        let (a, b) = (record("a"), record("bb"));
        let full = c.seal(at, [(1, &a), (2, &b)]);
        let empty = c.seal(at, []);
        assert_eq!(full.len(), c.element_len());
        assert_eq!(empty.len(), c.element_len());
        assert_eq!(c.open(at, Some(&full)).unwrap(), vec![(1, a), (2, b)]);
        assert!(c.open(at, Some(&empty)).unwrap().is_empty());
    }

    #[test]
    fn replayed_moved_altered_or_missing_buckets_do_not_open() {
        let mut c = codec();
        let at = Binding {
            address: 9,
            generation: 5,
        };
        let v = record("v");
        let sealed = c.seal(at, [(1, &v)]);
        let newer = Binding {
            generation: 6,
            ..at
        };
        let elsewhere = Binding { address: 10, ..at };
        assert!(c.open(newer, Some(&sealed)).is_err(), "replay");
        assert!(c.open(elsewhere, Some(&sealed)).is_err(), "swap");
        let mut bad = sealed.to_vec();
        bad[30] ^= 1;
        assert!(c.open(at, Some(&Bytes::from(bad))).is_err(), "corruption");
        assert_eq!(c.open(at, None), Err(ElementError::Missing));
    }
}
