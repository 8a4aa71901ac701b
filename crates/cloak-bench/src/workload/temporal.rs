//! The Cloak paper's temporal workload (§7.1): sample a reuse distance `d` from Zipf(s) and
//! access the key whose recency rank is `d` (1: the key accessed last).
//!
//! Recency is kept as access times: a [`Fenwick`] tree marks, for every key, the time of its last
//! access, so the key of rank `d` is the `(keys - d + 1)`-th mark, found in O(log n); an access
//! moves the key's mark to a new time. When times run out the marks are renumbered in order.
//! Keys start in a random recency order.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};

use super::fenwick::Fenwick;
use super::{Request, TraceError, Workload};

pub struct Temporal {
    keys: u32,
    exponent: f64,
    write_ratio: f64,
    zipf: Zipf<f64>,
    rng: ChaCha8Rng,
    marks: Fenwick,
    /// The key whose last access is at each time (stale where the mark is gone).
    owner: Vec<u32>,
    /// Each key's last access time.
    latest: Vec<u32>,
    now: usize,
}

impl Temporal {
    /// `keys` keys (at least 1, at most 2^31), Zipf exponent `exponent` ≥ 0 (0: uniform over
    /// recency ranks), a fraction `write_ratio` of writes.
    pub fn new(keys: u64, exponent: f64, write_ratio: f64, seed: u64) -> Self {
        let keys = u32::try_from(keys.clamp(1, 1 << 31)).expect("clamped");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut order: Vec<u32> = (0..keys).collect();
        order.shuffle(&mut rng);
        let mut temporal = Self {
            keys,
            exponent,
            write_ratio: write_ratio.clamp(0.0, 1.0),
            zipf: Zipf::new(f64::from(keys), exponent.max(0.0)).expect("n ≥ 1 and s ≥ 0"),
            rng,
            marks: Fenwick::new(2 * keys as usize),
            owner: vec![0; 2 * keys as usize + 1],
            latest: vec![0; keys as usize],
            now: 0,
        };
        for key in order {
            temporal.stamp(key);
        }
        temporal
    }

    /// Marks `key` as accessed now.
    fn stamp(&mut self, key: u32) {
        if self.now == self.marks.size() {
            self.renumber();
        }
        self.now += 1;
        self.marks.mark(self.now);
        self.owner[self.now] = key;
        self.latest[key as usize] = self.now as u32;
    }

    /// Moves every key's mark to times `1..=keys`, in the same order.
    fn renumber(&mut self) {
        // A time is live when it is still its owner's latest access.
        let live: Vec<u32> = (1..=self.now)
            .filter(|&t| self.latest[self.owner[t] as usize] as usize == t)
            .map(|t| self.owner[t])
            .collect();
        self.marks = Fenwick::new(self.marks.size());
        self.now = 0;
        for key in live {
            self.now += 1;
            self.marks.mark(self.now);
            self.owner[self.now] = key;
            self.latest[key as usize] = self.now as u32;
        }
    }

    /// Accesses the key of recency rank `d` (clamped to `1..=keys`) and returns it.
    pub fn access(&mut self, d: u64) -> u64 {
        let d = d.clamp(1, u64::from(self.keys)) as u32;
        let time = self
            .marks
            .kth(self.keys - d + 1)
            .expect("every key has one mark");
        let key = self.owner[time];
        self.marks.unmark(time);
        // No time is the key's until it is stamped again (times start at 1), so a renumbering
        // inside `stamp` does not keep the old one.
        self.latest[key as usize] = 0;
        self.stamp(key);
        u64::from(key)
    }
}

impl Workload for Temporal {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        let d = self.zipf.sample(&mut self.rng) as u64;
        let write = self.rng.random_bool(self.write_ratio);
        Ok(Some(Request {
            key: self.access(d),
            write,
        }))
    }

    fn describe(&self) -> String {
        format!(
            "temporal (Zipf s = {} over recency, {} keys, {:.0}% writes)",
            self.exponent,
            self.keys,
            self.write_ratio * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_naive_move_to_front_list() {
        let mut fast = Temporal::new(50, 1.0, 0.5, 3);
        // The same initial order, read back from the marks: most recent first.
        let mut list: Vec<u64> = (1..=50)
            .map(|d| {
                let t = fast.marks.kth(50 - d + 1).unwrap();
                u64::from(fast.owner[t])
            })
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        // Enough accesses to renumber the marks several times.
        for _ in 0..1_000 {
            let d = rng.random_range(1..=50u64);
            let expected = list.remove(d as usize - 1);
            list.insert(0, expected);
            assert_eq!(fast.access(d), expected);
        }
    }

    #[test]
    fn recency_ranks_follow_zipf() {
        // Rank 1 (the key accessed last, again) has probability 1/H(n, s); rank 2 half that
        // for s = 1. Count both from the key stream alone.
        let mut w = Temporal::new(10_000, 1.0, 0.0, 2);
        let (mut first, mut second) = (None, None);
        let (mut rank1, mut rank2) = (0u32, 0u32);
        let n = 200_000;
        for _ in 0..n {
            let key = w.next_request().unwrap().unwrap().key;
            if first == Some(key) {
                rank1 += 1;
            } else {
                if second == Some(key) {
                    rank2 += 1;
                }
                second = first;
            }
            first = Some(key);
        }
        let h: f64 = (1..=10_000).map(|j| 1.0 / f64::from(j)).sum();
        let p1 = f64::from(rank1) / f64::from(n);
        let p2 = f64::from(rank2) / f64::from(n);
        assert!(
            (p1 * h - 1.0).abs() < 0.05,
            "P(d = 1) = {p1}, expected {}",
            1.0 / h
        );
        assert!(
            (p2 * h * 2.0 - 1.0).abs() < 0.08,
            "P(d = 2) = {p2}, expected {}",
            0.5 / h
        );
    }
}
