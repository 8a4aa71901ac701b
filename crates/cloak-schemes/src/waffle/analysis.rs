//! Waffle's security measured on a recorded server view (paper §8.3): the α and β the server
//! actually saw, and the shape of every batch.
//!
//! Batches are counted as the server sees them: every read request starts a batch, and writes
//! and deletes belong to the batch of the read before them (those before any read, the initial
//! fill, to batch 0). For a label written in batch `w` and read in batch `j`, the observed
//! `α = j − w − 1` (Definition 1: the read comes within `α + 1` accesses; an object written in one
//! batch and read in the next has α = 0). The server alone can measure α, never β: a read
//! label is gone for good and the object comes back under a label it cannot link. With the
//! store's [`LabelKey`], every label decodes to its object, so the analysis also measures, for
//! each real object read in batch `i` and written back in batch `j`, `β = j − i − 1`
//! (Definition 1: `i + β < j`; dummies are excluded as in Theorem 7.2's proof).

use std::collections::{BTreeMap, HashMap, HashSet};

use cloak_core::{AccessKind, Addr, Observed};

use super::labels::{LabelKey, Object};

/// What one batch looked like to the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchShape {
    /// Labels read.
    pub reads: usize,
    /// Labels written.
    pub writes: usize,
    /// Labels deleted.
    pub deletes: usize,
    /// Labels of dummy objects among the reads and the writes (only with the key; the server
    /// cannot tell them apart).
    pub dummy_reads: usize,
    /// Labels of dummy objects among the writes.
    pub dummy_writes: usize,
}

/// What a recorded server view shows of Waffle's guarantees (see [`observe`]).
#[derive(Clone, Debug, Default)]
pub struct Observation {
    /// Index 0 is everything before the first read (the initial fill); batch `k` starts with the
    /// `k`-th read request.
    pub batches: Vec<BatchShape>,
    /// Largest α among labels written and later read.
    pub max_alpha: Option<u64>,
    /// How many labels had each α.
    pub alphas: BTreeMap<u64, u64>,
    /// Smallest β among real objects read and later written back (needs the key).
    pub min_beta: Option<i64>,
    /// How many reads `min_beta` was taken over.
    pub beta_samples: u64,
    /// Labels read again after their first read (Waffle never does this).
    pub reread_labels: u64,
    /// Labels written again after their first write (Waffle never reuses a label).
    pub rewritten_labels: u64,
    /// Labels a read request names twice (a duplicate would reveal contention).
    pub duplicate_reads: u64,
    /// Labels read that were not written while recording (written before recording began).
    pub unknown_reads: u64,
    /// Labels deleted that had not been read.
    pub deleted_unread: u64,
    /// Labels written and not read by the end of the trace, and the largest number of batches
    /// one of them has waited: a lower bound on the α it will have.
    pub unread: u64,
    /// The most batches a label still unread has waited.
    pub longest_unread: Option<u64>,
}

/// Measures α (and, with `key`, β) on `trace`.
pub fn observe(trace: &[Observed], key: Option<&LabelKey>) -> Observation {
    let mut seen = Observation {
        batches: vec![BatchShape::default()],
        ..Observation::default()
    };
    let mut batch: u64 = 0;
    let mut written: HashMap<Addr, u64> = HashMap::new();
    let mut ever_written: HashSet<Addr> = HashSet::new();
    let mut read: HashSet<Addr> = HashSet::new();
    // Real objects read and not yet written back: slot → batch of the read.
    let mut taken: HashMap<u32, u64> = HashMap::new();
    let decode = |label: Addr| key.and_then(|k| k.decode(label)).map(|(object, _)| object);
    for observed in trace {
        match observed.kind {
            AccessKind::Read => {
                batch += 1;
                seen.batches.push(BatchShape {
                    reads: observed.addrs.len(),
                    ..BatchShape::default()
                });
                let mut in_batch = HashSet::with_capacity(observed.addrs.len());
                for &label in &observed.addrs {
                    if !in_batch.insert(label) {
                        seen.duplicate_reads += 1;
                        continue;
                    }
                    if !read.insert(label) {
                        seen.reread_labels += 1;
                    }
                    match written.remove(&label) {
                        Some(w) => {
                            let alpha = batch - w - 1;
                            seen.max_alpha = seen.max_alpha.max(Some(alpha));
                            *seen.alphas.entry(alpha).or_default() += 1;
                        }
                        None => seen.unknown_reads += 1,
                    }
                    match decode(label) {
                        Some(Object::Real(slot)) => {
                            taken.insert(slot, batch);
                        }
                        Some(Object::Dummy(_)) => seen.batches[batch as usize].dummy_reads += 1,
                        None => {}
                    }
                }
            }
            AccessKind::Write => {
                seen.batches[batch as usize].writes += observed.addrs.len();
                for &label in &observed.addrs {
                    if !ever_written.insert(label) {
                        seen.rewritten_labels += 1;
                    }
                    written.insert(label, batch);
                    match decode(label) {
                        Some(Object::Real(slot)) => {
                            if let Some(i) = taken.remove(&slot) {
                                let beta = batch as i64 - i as i64 - 1;
                                seen.min_beta = Some(seen.min_beta.map_or(beta, |b| b.min(beta)));
                                seen.beta_samples += 1;
                            }
                        }
                        Some(Object::Dummy(_)) => seen.batches[batch as usize].dummy_writes += 1,
                        None => {}
                    }
                }
            }
            AccessKind::Delete => {
                seen.batches[batch as usize].deletes += observed.addrs.len();
                seen.deleted_unread += observed
                    .addrs
                    .iter()
                    .filter(|label| !read.contains(label))
                    .count() as u64;
            }
            AccessKind::Scan => {}
        }
    }
    seen.unread = written.len() as u64;
    seen.longest_unread = written.values().map(|&w| batch - w).max();
    seen
}

impl Observation {
    /// Batches after the initial fill.
    pub fn rounds(&self) -> &[BatchShape] {
        &self.batches[1..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn op(kind: AccessKind, addrs: &[Addr]) -> Observed {
        Observed {
            at: Duration::ZERO,
            answered: None,
            kind,
            addrs: addrs.to_vec(),
            values: Vec::new(),
        }
    }

    #[test]
    fn alpha_counts_batches_between_write_and_read() {
        use AccessKind::*;
        let trace = [
            op(Write, &[1, 2, 3]),
            op(Read, &[1]),
            op(Write, &[4]),
            op(Delete, &[1]),
            op(Read, &[2, 4]),
            op(Read, &[3, 3, 9]),
            op(Write, &[4]),
            op(Delete, &[7]),
        ];
        let o = observe(&trace, None);
        assert_eq!(o.batches.len(), 4);
        assert_eq!(
            o.batches[1],
            BatchShape {
                reads: 1,
                writes: 1,
                deletes: 1,
                ..BatchShape::default()
            }
        );
        // 1: written in 0, read in 1 → 0; 2: read in 2 → 1; 4: written in 1, read in 2 → 0;
        // 3: read in 3 → 2.
        assert_eq!(o.max_alpha, Some(2));
        assert_eq!(o.alphas, BTreeMap::from([(0, 2), (1, 1), (2, 1)]));
        assert_eq!(o.duplicate_reads, 1);
        assert_eq!(o.unknown_reads, 1);
        assert_eq!(o.rewritten_labels, 1);
        assert_eq!(o.deleted_unread, 1);
        assert_eq!((o.unread, o.longest_unread), (1, Some(0)));
        assert_eq!(o.min_beta, None);
    }
}
