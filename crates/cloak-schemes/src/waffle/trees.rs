//! The timestamp-ordered balanced trees Waffle picks fake queries from (paper §4 Challenge 2,
//! §6.1): least recently accessed objects first.
//!
//! [`RealTree`] holds the real objects storage has (Algorithm 1 line 27 "ensure k is not in
//! cache": cached objects are simply not in it), ordered by `⟨timestamp, slot⟩`. Taking the
//! oldest is what bounds α for real objects (Theorem 7.1): an object written to storage has at
//! most `N − 1` objects ahead of it, each batch takes at least `B − R − f_D` of them, and every
//! object taken gets a newer timestamp than it.
//!
//! [`DummyTree`] does the same for dummies, plus the paper's re-randomisation (§6.2): each time
//! every dummy has been read since the last reset, all dummy timestamps are set to the current
//! batch and the ties are broken by fresh random numbers, so the order in which dummies come up
//! changes every round. Done literally, that lets a dummy read at the start of one round wait
//! until the end of the next, nearly `2D/f_D` batches, beyond Theorem 7.1's `α`. So each batch
//! first takes the dummies whose `α` deadline has come (at most `f_D` of them, since at most
//! `f_D` were read in any one batch) and fills the rest in the randomised order: the order is as
//! random as the bound allows, and the bound always holds.

use std::collections::BTreeSet;

use hashbrown::HashSet;
use rand::Rng;

/// Real objects in storage, oldest access first.
#[derive(Default)]
pub struct RealTree {
    set: BTreeSet<(u64, u32)>,
}

impl RealTree {
    pub fn insert(&mut self, ts: u64, slot: u32) {
        let fresh = self.set.insert((ts, slot));
        debug_assert!(fresh, "slot {slot} was already in storage's tree");
    }

    /// Takes `slot` out (storage is about to give it up); `false` if it was not in.
    pub fn remove(&mut self, ts: u64, slot: u32) -> bool {
        self.set.remove(&(ts, slot))
    }

    /// The least recently accessed object, taken out.
    pub fn pop_oldest(&mut self) -> Option<(u64, u32)> {
        self.set.pop_first()
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }
}

/// Dummy objects, in the order they are read.
pub struct DummyTree {
    per_batch: usize,
    /// A dummy written in batch `w` is read by batch `w + deadline` (`α + 1`).
    deadline: u64,
    /// `(timestamp, tie-break, dummy)`: reads go in this order.
    order: BTreeSet<(u64, u64, u32)>,
    keys: Vec<(u64, u64)>,
    /// The batch that last read each dummy (its label's timestamp), and the same by batch.
    read_in: Vec<u64>,
    by_read: BTreeSet<(u64, u32)>,
    /// Dummies not read since the last reset.
    unvisited: usize,
    visited: Vec<bool>,
}

impl DummyTree {
    /// `count` dummies, all written in batch 0 in a random order; `alpha` is Theorem 7.1's bound.
    pub fn new(count: usize, per_batch: usize, alpha: u64, rng: &mut impl Rng) -> Self {
        let mut tree = Self {
            per_batch,
            deadline: alpha + 1,
            order: BTreeSet::new(),
            keys: vec![(0, 0); count],
            read_in: vec![0; count],
            by_read: (0..count as u32).map(|d| (0, d)).collect(),
            unvisited: 0,
            visited: vec![false; count],
        };
        tree.reset(0, rng);
        tree
    }

    /// The `f_D` dummies batch `batch` reads, as `(dummy, timestamp of its current label)`; they
    /// are rewritten under `batch`.
    pub fn pick(&mut self, batch: u64, rng: &mut impl Rng) -> Vec<(u32, u64)> {
        // Dummies whose label was written in batch `due` or earlier must be read now.
        let mut picked: Vec<u32> = match batch.checked_sub(self.deadline) {
            Some(due) => {
                let mut due = self.by_read.range(..=(due, u32::MAX)).map(|&(_, d)| d);
                let picked = due.by_ref().take(self.per_batch).collect();
                debug_assert!(due.next().is_none(), "more dummies due than a batch reads");
                picked
            }
            None => Vec::new(),
        };
        let forced: HashSet<u32> = picked.iter().copied().collect();
        for &(_, _, d) in &self.order {
            if picked.len() == self.per_batch {
                break;
            }
            if !forced.contains(&d) {
                picked.push(d);
            }
        }
        let mut taken = Vec::with_capacity(picked.len());
        for d in picked {
            let i = d as usize;
            let (ts, tie) = self.keys[i];
            self.order.remove(&(ts, tie, d));
            self.by_read.remove(&(self.read_in[i], d));
            taken.push((d, self.read_in[i]));
            self.read_in[i] = batch;
            self.by_read.insert((batch, d));
            self.keys[i] = (batch, rng.random());
            self.order.insert((batch, self.keys[i].1, d));
            if !self.visited[i] {
                self.visited[i] = true;
                self.unvisited -= 1;
            }
        }
        if self.unvisited == 0 {
            self.reset(batch, rng);
        }
        taken
    }

    /// Every dummy to timestamp `batch` with a fresh random tie-break (§6.2).
    fn reset(&mut self, batch: u64, rng: &mut impl Rng) {
        self.order.clear();
        for (d, key) in self.keys.iter_mut().enumerate() {
            *key = (batch, rng.random());
            self.order.insert((key.0, key.1, d as u32));
        }
        self.visited.fill(false);
        self.unvisited = self.keys.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn real_objects_come_out_oldest_first() {
        let mut tree = RealTree::default();
        for (ts, slot) in [(3, 1), (0, 9), (0, 2), (7, 0)] {
            tree.insert(ts, slot);
        }
        assert!(tree.remove(3, 1));
        assert!(!tree.remove(3, 1));
        assert_eq!(tree.pop_oldest(), Some((0, 2)));
        assert_eq!(tree.pop_oldest(), Some((0, 9)));
        assert_eq!(tree.len(), 1);
    }

    /// Every dummy is read within `α + 1` batches of its last read, no batch reads one twice,
    /// and the order changes from round to round.
    #[test]
    fn dummies_respect_alpha_and_are_reshuffled() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        for (count, per_batch, alpha) in [(20, 5, 4), (23, 5, 5), (10, 3, 9), (6, 6, 1)] {
            let mut tree = DummyTree::new(count, per_batch, alpha, &mut rng);
            let mut last = vec![0u64; count];
            let mut orders = Vec::new();
            let mut order = Vec::new();
            for batch in 1..400u64 {
                let picked = tree.pick(batch, &mut rng);
                assert_eq!(picked.len(), per_batch);
                let mut ids: Vec<u32> = picked.iter().map(|p| p.0).collect();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), per_batch, "a dummy twice in batch {batch}");
                for (d, written) in picked {
                    assert_eq!(written, last[d as usize]);
                    let gap = batch - written - 1;
                    assert!(gap <= alpha, "dummy {d} waited {gap} > α = {alpha}");
                    last[d as usize] = batch;
                    order.push(d);
                }
                if order.len() >= count {
                    orders.push(std::mem::take(&mut order));
                }
            }
            if count > per_batch {
                orders.dedup();
                assert!(orders.len() > 10, "the dummy order never changes");
            }
        }
    }
}
