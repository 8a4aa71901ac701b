//! The spool elements the fill's decoy reads may take, and which one each takes (why a fill
//! reads decoys at all: see `super::records`).
//!
//! A decoy stands in for the element of a record, so that a request with fewer live records
//! costs what a full one does. Four things make that hold whatever the storage server does:
//!
//! - **Only the store's own elements are decoys.** Storage decides what the scan spools, and a
//!   hostile server can add elements of any length the scheme might write (a tree scheme's
//!   store takes any whole number of records, up to a bucket). Such an element does not open,
//!   so it never joins the pool. Before, every spooled element was a decoy: the server's,
//!   cheaper or dearer to read than a record's, made each request's time follow how many
//!   decoys it read, that is how many live records it did not carry (finding H1 of the second
//!   review of the streaming restart). A scheme whose elements all have one length (the dense
//!   ones) gets padding of that length in the place of each element that does not open
//!   (`super::Recovery::open_spooled`), so its pool is every place storage had an element,
//!   in one run; a tree scheme's gets none, since padding in the place of each would let the
//!   server choose how many of its decoys are one record long.
//! - **Every read costs what the longest element's does.** Every element that opened is as
//!   likely, whatever its length, and a shorter one is read with the bytes after it and its
//!   opening followed by the work the longest has beyond it
//!   (`RecoveredRecords::reading_as_long_as`). A tree scheme's store may mix lengths (a
//!   preload's one-record elements beside buckets), and a server holding old genuine elements
//!   can replay them, which open, to choose the mix: without the evening, the cost of a
//!   request followed which lengths its records and decoys came from (review M1 of this pool).
//!   A first attempt kept the longest length only: one genuine bucket replayed among a
//!   preloaded store's one-record elements then became every decoy (review H-a).
//! - **Which element a decoy reads is secret.** It is drawn from a ChaCha20 generator seeded
//!   by the operating system at each start. Before, decoys walked a fixed public sequence, one
//!   step a decoy: a server that knew where some costly element sat knew which request would
//!   read it, and so how many decoys the requests before had read.
//! - **Finding decoys costs the same whatever the request carries.** A decoy's place costs a
//!   search of the pool's runs, a record's a lookup: every request draws as many places as it
//!   makes reads, whatever the decoys it needs (review M2; a server can force a tree scheme's
//!   pool into many runs).
//!
//! The places are kept as runs of elements that follow each other in the spool: a store whose
//! elements all open (or are padded in place) is one run, and each gap or change of length
//! starts a new one, 24 bytes.

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::RngCore;

use super::spool::{Spooled, stride};

/// The elements decoys may read (see the module docs).
#[derive(Debug, Default)]
pub struct DecoyPool {
    runs: Vec<Run>,
    /// Elements in every run.
    elements: u64,
}

/// Elements of one length that follow each other in the spool.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// How many elements of the pool come before it.
    first: u64,
    /// Where its first element is.
    at: u64,
    /// The length of each of its elements.
    len: u32,
}

impl DecoyPool {
    /// Adds `element`, one that opened (see the module docs).
    pub fn add(&mut self, element: Spooled) {
        let follows = self.runs.last().is_some_and(|run| {
            run.len == element.len
                && run.at + (self.elements - run.first) * stride(run.len) == element.at
        });
        if !follows {
            self.runs.push(Run {
                first: self.elements,
                at: element.at,
                len: element.len,
            });
        }
        self.elements += 1;
    }

    /// How many elements the pool holds.
    pub fn len(&self) -> u64 {
        self.elements
    }

    /// Runs the places are kept in.
    #[cfg(test)]
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Gives back the room of runs that will not come (once recovery is done).
    pub fn shrink_to_fit(&mut self) {
        self.runs.shrink_to_fit();
    }

    /// The `k`th element of the pool, if it holds that many.
    fn nth(&self, k: u64) -> Option<Spooled> {
        if k >= self.elements {
            return None;
        }
        let run = self.runs[self.runs.partition_point(|run| run.first <= k) - 1];
        Some(Spooled {
            at: run.at + (k - run.first) * stride(run.len),
            len: run.len,
        })
    }

    /// An element of the pool drawn by `random` (each as likely, to within 2^-64 of the pool's
    /// size), or `None` for an empty pool.
    pub fn draw(&self, random: &mut ChaCha20Rng) -> Option<Spooled> {
        // The high half of a 128-bit product: uniform over the pool without a division.
        let k = (u128::from(random.next_u64()) * u128::from(self.elements)) >> 64;
        self.nth(k as u64)
    }
}

#[cfg(test)]
mod tests {
    use rand_chacha::rand_core::SeedableRng;

    use super::*;

    /// `count` elements of `len` bytes from `at` on, as a spool places them one after another.
    fn run(at: u64, len: u32, count: u64) -> impl Iterator<Item = Spooled> {
        (0..count).map(move |k| Spooled {
            at: at + k * stride(len),
            len,
        })
    }

    #[test]
    fn a_spool_whose_elements_all_open_is_one_run_found_by_number() {
        let mut pool = DecoyPool::default();
        let elements: Vec<Spooled> = run(0, 100, 1000).collect();
        elements.iter().for_each(|&element| pool.add(element));
        assert_eq!(pool.runs.len(), 1);
        assert_eq!(pool.len(), 1000);
        for (k, element) in elements.iter().enumerate() {
            assert_eq!(pool.nth(k as u64), Some(*element));
        }
        assert_eq!(pool.nth(1000), None);
        assert_eq!(DecoyPool::default().nth(0), None);
    }

    /// Elements that did not open are left out: each gap, and each change of length, starts
    /// a run; every element added is found, whatever its length.
    #[test]
    fn gaps_and_lengths_start_runs_and_every_element_added_is_found() {
        let mut pool = DecoyPool::default();
        let short: Vec<Spooled> = run(0, 50, 4).collect();
        let long: Vec<Spooled> = run(short[3].at + stride(50), 100, 6).collect();
        // The third long one did not open.
        let added: Vec<Spooled> = (short.iter().chain(&long).enumerate())
            .filter(|(k, _)| *k != 6)
            .map(|(_, element)| *element)
            .collect();
        added.iter().for_each(|&element| pool.add(element));
        let found: Vec<Spooled> = (0..pool.len()).filter_map(|k| pool.nth(k)).collect();
        assert_eq!(found, added);
        assert_eq!(
            pool.runs.len(),
            3,
            "short ones, long ones, long ones after the gap"
        );
    }

    /// Every element is drawn about as often, and two starts draw different sequences.
    #[test]
    fn draws_cover_the_pool_evenly_in_an_order_each_start_draws_afresh() {
        let mut pool = DecoyPool::default();
        run(0, 10, 3)
            .chain(run(1000, 10, 5))
            .for_each(|element| pool.add(element));
        let mut random = ChaCha20Rng::from_os_rng();
        let mut counts = std::collections::BTreeMap::new();
        let draws = 80_000;
        for _ in 0..draws {
            *counts
                .entry(pool.draw(&mut random).unwrap().at)
                .or_insert(0u32) += 1;
        }
        assert_eq!(counts.len(), 8, "every element drawn");
        assert!(
            counts.values().all(|&n| n.abs_diff(draws / 8) < 600),
            "{counts:?}"
        );
        let sequence = || {
            let mut random = ChaCha20Rng::from_os_rng();
            (0..64)
                .map(|_| pool.draw(&mut random).unwrap().at)
                .collect::<Vec<_>>()
        };
        assert_ne!(sequence(), sequence());
        assert_eq!(DecoyPool::default().draw(&mut random), None);
    }
}
