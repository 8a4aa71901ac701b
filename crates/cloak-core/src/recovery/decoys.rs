//! The spool elements the fill's decoy reads may take, and which one each takes (why a fill
//! reads decoys at all: see `super::records`).
//!
//! A decoy stands in for the element of a record, so that a request with fewer live records
//! costs what a full one does. Two things make that hold whatever the storage server does:
//!
//! - **Only the store's own elements of its longest length are decoys.** Storage decides what
//!   the scan spools, and a hostile server can add elements of any length the scheme might
//!   write (a tree scheme's store takes any whole number of records, up to a bucket). Such an
//!   element does not open, so it never joins the pool; and of the elements that open, only
//!   those of the longest length do (a tree scheme's buckets, not a preload's one-record
//!   elements, nor the padding recovery adds). So no decoy costs less than the element of any
//!   record. Before, every spooled element was a decoy: an element the server added that was
//!   cheaper (or dearer) to read than a record's made each request's time follow how many
//!   decoys it read, that is how many live records it did not carry (finding H1 of the second
//!   review of the streaming restart).
//! - **Which element a decoy reads is secret.** It is drawn from a ChaCha20 generator seeded
//!   by the operating system at each start. Before, decoys walked a fixed public sequence, one
//!   step a decoy: a server that knew where some costly element sat knew which request would
//!   read it, and so how many decoys the requests before had read.
//!
//! What is left: a record of a store whose lengths legitimately mix (a tree scheme's store
//! restarted after a preload's one-record elements were partly filled into buckets) costs less
//! to read than a decoy, so a request carrying more of them is a little quicker. The fill's
//! public clock hides that unless a request overruns it, and a late request leaves on a later
//! tick (`cloak_schemes::shell::fill`).
//!
//! The places are kept as runs of elements that follow each other in the file: a store whose
//! elements all open is one run, and each element that does not open starts a new one, 24
//! bytes, whoever caused it.

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::RngCore;

use super::leak_demo;
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
    /// Adds `element`, one that opened: the pool keeps only elements of the longest length it
    /// has been given (see the module docs).
    pub fn add(&mut self, element: Spooled) {
        if !self.takes(element.len) {
            return;
        }
        if self.runs.last().is_some_and(|run| element.len > run.len)
            && !leak_demo::decoys_from_any_element()
        {
            self.runs.clear();
            self.elements = 0;
        }
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

    /// Whether an element of `len` bytes would join the pool: one no shorter than those in it.
    pub fn takes(&self, len: u32) -> bool {
        leak_demo::decoys_from_any_element() || self.runs.last().is_none_or(|run| len >= run.len)
    }

    /// How many elements the pool holds.
    pub fn len(&self) -> u64 {
        self.elements
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

    /// Elements that did not open are left out (each gap starts a run); shorter ones are left
    /// out and a longer one empties the pool, so every decoy costs the longest element's read.
    #[test]
    fn only_elements_that_opened_of_the_longest_length_are_decoys() {
        let mut pool = DecoyPool::default();
        let short: Vec<Spooled> = run(0, 50, 4).collect();
        short.iter().for_each(|&element| pool.add(element));
        assert_eq!(pool.len(), 4);
        let long: Vec<Spooled> = run(short[3].at + stride(50), 100, 6).collect();
        // The third did not open; a short element sits among the long ones.
        for (k, &element) in long.iter().enumerate() {
            if k != 2 {
                pool.add(element);
            }
            if k == 4 {
                assert!(!pool.takes(50));
                pool.add(Spooled {
                    at: 1 << 40,
                    len: 50,
                });
            }
        }
        let kept: Vec<Spooled> = (0..pool.len()).filter_map(|k| pool.nth(k)).collect();
        let expected: Vec<Spooled> = (long.iter().enumerate())
            .filter(|(k, _)| *k != 2)
            .map(|(_, element)| *element)
            .collect();
        assert_eq!(kept, expected);
        assert_eq!(
            pool.runs.len(),
            2,
            "the element that did not open split the run"
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
