//! Replica swapping (paper §5.1): moving from `π̂` to a new estimate `π̂′` while every access
//! stays uniform over the `2n` labels.
//!
//! The number of labels never changes, so every replica a key gains (list `G`) is a label
//! another key, or the dummy key, loses (list `L`). Each label in `L` is handed to a replica in
//! `G` at once, in a random pairing, and keeps its PRF label; it still holds its old record
//! until its next access (real or fake) writes the gaining key's record there — from the
//! UpdateCache, or from the record the proxy fetched when it last read one of that key's
//! replicas. Until every swap is done, reads of a gaining key use only its old replicas, the
//! handed-over labels get fake accesses only (like dummies), and the threshold is raised to
//! `α′ = max π̂′(k)/R(k)` so that Equation 1 still gives every label `1/(2n)`; the share of real
//! accesses drops to `1/(2nα′)` meanwhile. Then the normal distributions of `π̂′` take over.

use hashbrown::HashMap;
use rand::seq::SliceRandom;

use cloak_core::Slot;

use super::replicas::DUMMY;
use super::smoothing::{Plan, Threshold, transition_alpha};
use super::{Estimate, Pancake};

impl Pancake {
    /// Starts moving to `estimate`.
    pub(super) fn begin_swap(&mut self, estimate: Estimate) {
        let p = estimate.probabilities();
        let plan = Plan::new(p);
        let mut freed = Vec::new();
        let mut gaining: Vec<(u32, usize)> = Vec::new();
        let mut serving: HashMap<u32, u32> = HashMap::new();
        let owners = (0..self.keys as u32)
            .map(|slot| (slot, plan.counts[slot as usize] as usize))
            .chain(std::iter::once((DUMMY, plan.dummies as usize)));
        for (owner, want) in owners {
            let have = self.replicas.count(owner);
            if want < have {
                for cell in self.replicas.truncate(owner, want) {
                    self.corrupt.remove(&cell);
                    if owner != DUMMY
                        && let Some(version) = self.cache.forget(owner, cell)
                    {
                        self.io.out.release(Slot::from(owner), version);
                    }
                    freed.push(cell);
                }
            } else if want > have {
                gaining.push((owner, want - have));
                if owner != DUMMY {
                    serving.insert(owner, have as u32);
                }
            }
        }
        freed.shuffle(&mut self.rng);
        let pending = freed.len();
        for (owner, extra) in gaining {
            for cell in freed.split_off(freed.len() - extra) {
                self.replicas.push(owner, cell);
                if owner != DUMMY {
                    self.cache.add_stale(owner, cell);
                }
            }
        }
        debug_assert!(freed.is_empty(), "|G| = |L|");
        let alpha = transition_alpha(
            serving
                .iter()
                .map(|(&slot, &have)| (p[slot as usize], have)),
            self.keys,
        );
        tracing::info!(
            swaps = pending,
            alpha,
            "the requests left the distribution estimate; swapping replicas"
        );
        let threshold = Threshold {
            alpha,
            keys: self.keys,
        };
        self.phase = self.phase_for(estimate, threshold, serving, pending);
        if pending == 0 {
            self.finish_swap();
        }
    }

    /// Every swap is done: `π̂′`'s own distributions take over.
    pub(super) fn finish_swap(&mut self) {
        self.fetched.clear();
        let estimate = self.phase.estimate.clone();
        tracing::info!(swaps = self.swaps, "replica swapping done");
        self.phase = self.settled_phase(estimate.clone());
        if let Some(detector) = self.detector.as_mut() {
            detector.reset(estimate);
        }
    }
}
