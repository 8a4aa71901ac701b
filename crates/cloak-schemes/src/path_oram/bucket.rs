//! Buckets as storage sees them: one sealed element per bucket, holding `Z` padded records.
//!
//! ```text
//! plaintext = record ‖ record ‖ … (Z of them, each padded to the layout's size)
//! element   = seal(address ‖ generation, plaintext)
//! ```
//!
//! Empty places hold [`NO_SLOT`] records, so every bucket has the same size whatever it holds,
//! and a fresh nonce on every write makes a rewritten bucket look new whether or not its content
//! changed. This is the format `ElementCodec::open_found` reads back during recovery.

use bytes::Bytes;
use cloak_core::{ElementCodec, ElementError, NO_SLOT, Record, Slot};
use cloak_crypto::Binding;

use super::stash::Block;

pub struct BucketCodec {
    codec: ElementCodec,
    z: usize,
}

impl BucketCodec {
    pub fn new(codec: ElementCodec, z: usize) -> Self {
        Self { codec, z }
    }

    pub fn bucket_size(&self) -> usize {
        self.z
    }

    fn plaintext_len(&self) -> usize {
        self.z * self.codec.layout.encoded_len()
    }

    /// Size of every sealed bucket.
    pub fn element_len(&self) -> usize {
        self.codec.layout.sealed_len(self.z)
    }

    /// Seals a bucket holding `blocks` (at most `Z`).
    pub fn seal(&mut self, binding: Binding, blocks: &[Block]) -> Bytes {
        assert!(
            blocks.len() <= self.z,
            "eviction put more than Z blocks in a bucket"
        );
        let layout = self.codec.layout;
        let padding = self.z - blocks.len();
        let len = self.plaintext_len();
        Bytes::from(self.codec.sealer.seal_with(binding, len, |out| {
            for block in blocks {
                layout.encode(Slot::from(block.slot), &block.record, out);
            }
            for _ in 0..padding {
                layout.encode(NO_SLOT, &Record::empty(), out);
            }
        }))
    }

    /// Opens a bucket sealed with `binding` and returns its blocks; slots must be below `slots`.
    pub fn open(
        &self,
        binding: Binding,
        element: Option<&Bytes>,
        slots: usize,
    ) -> Result<Vec<(u32, Record)>, ElementError> {
        let element = element.ok_or(ElementError::Missing)?;
        let plaintext = Bytes::from(self.codec.sealer.open(binding, element)?);
        if plaintext.len() != self.plaintext_len() {
            return Err(ElementError::Malformed("a bucket of the wrong size"));
        }
        let record_len = self.codec.layout.encoded_len();
        let mut blocks = Vec::new();
        for start in (0..plaintext.len()).step_by(record_len) {
            let (slot, record) = self
                .codec
                .layout
                .decode(&plaintext.slice(start..start + record_len))?;
            if slot == NO_SLOT {
                continue;
            }
            match u32::try_from(slot) {
                Ok(slot) if (slot as usize) < slots => blocks.push((slot, record)),
                _ => {
                    return Err(ElementError::Malformed(
                        "a block of a slot beyond the store",
                    ));
                }
            }
        }
        Ok(blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_core::RecordLayout;
    use cloak_crypto::{MasterKey, Sealer};

    fn codec(z: usize) -> BucketCodec {
        let layout = RecordLayout {
            max_key: 8,
            max_value: 16,
        };
        let sealer = Sealer::new(&MasterKey::from_bytes([3; 32])).unwrap();
        BucketCodec::new(ElementCodec::new(layout, sealer), z)
    }

    fn block(slot: u32, value: &'static str) -> Block {
        Block {
            slot,
            record: Record {
                version: 1,
                key: Bytes::from_static(b"k"),
                value: Bytes::from_static(value.as_bytes()),
            },
            journaled: false,
        }
    }

    #[test]
    fn buckets_have_one_size_and_round_trip() {
        let mut c = codec(4);
        let at = Binding {
            address: 9,
            generation: 3,
        };
        let full = c.seal(
            at,
            &[block(1, "a"), block(2, "b"), block(3, "c"), block(4, "d")],
        );
        let empty = c.seal(at, &[]);
        assert_eq!(full.len(), empty.len());
        assert_eq!(full.len(), c.element_len());
        let opened = c.open(at, Some(&full), 10).unwrap();
        assert_eq!(opened.len(), 4);
        assert_eq!(opened[1], (2, block(2, "b").record));
        assert!(c.open(at, Some(&empty), 10).unwrap().is_empty());
        // Bound to address and generation; a slot beyond the store is refused.
        let elsewhere = Binding {
            address: 8,
            generation: 3,
        };
        let older = Binding {
            address: 9,
            generation: 2,
        };
        assert!(c.open(elsewhere, Some(&full), 10).is_err());
        assert!(c.open(older, Some(&full), 10).is_err());
        assert!(c.open(at, Some(&full), 3).is_err());
        assert_eq!(c.open(at, None, 10), Err(ElementError::Missing));
    }

    #[test]
    fn recovery_reads_every_block_of_a_bucket() {
        let mut c = codec(3);
        let at = Binding {
            address: 4,
            generation: 7,
        };
        let bucket = c.seal(at, &[block(5, "x"), block(6, "y")]);
        let layout = RecordLayout {
            max_key: 8,
            max_value: 16,
        };
        let reader = ElementCodec::new(
            layout,
            Sealer::new(&MasterKey::from_bytes([3; 32])).unwrap(),
        );
        let (generation, records) = reader.open_found(4, &bucket).unwrap();
        assert_eq!(generation, 7);
        let slots: Vec<Slot> = records.iter().map(|(s, _)| *s).collect();
        assert_eq!(slots, vec![5, 6]);
    }
}
