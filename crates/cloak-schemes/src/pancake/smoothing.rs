//! Frequency smoothing's arithmetic (paper §4.2 and §5.1): how many replicas each key gets, and
//! the fake access distribution that tops every label up to the same probability.
//!
//! With `n` keys, threshold `α` and `2n` labels, key `k` with estimated probability `π̂(k)` gets
//! `R(k) = ceil(π̂(k)/α)` replicas (at least one, so every key can be stored), dummies fill the
//! labels up to `2n`, and each access is real with probability `δ = 1/(2nα)` (a replica of a key
//! drawn from `π̂`, uniformly among its replicas) or fake with probability `1 − δ`, drawn from
//!
//! ```text
//! π_f(k, j) = (α − π̂(k)/R(k)) / (2nα − 1)        π_f(D, j) = α / (2nα − 1)
//! ```
//!
//! so every label is accessed with probability exactly `1/(2n)` (Equation 1). In the static case
//! `α = 1/n`, so `δ = 1/2` and `2nα − 1 = 1`. While replicas are being swapped after the estimate
//! changed (§5.1), the same formulas hold with a temporarily raised `α′`, and the labels being
//! handed to a key that gains replicas are accessed only by fakes, like dummies.

/// Float slack when rounding `π̂(k)·n` up: `2.0000000001` replicas' worth is two replicas.
const ROUNDING_SLACK: f64 = 1e-9;

/// `R(k) = max(1, ceil(π̂(k) / α))` with `α = 1/n`.
pub fn replica_count(probability: f64, keys: usize) -> u32 {
    let exact = probability * keys as f64 - ROUNDING_SLACK;
    (exact.ceil().max(1.0)).min(u32::MAX as f64) as u32
}

/// Replica counts for an estimate over `n` keys, and the dummies that make them `2n` labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Replicas of each key.
    pub counts: Vec<u32>,
    /// Dummy replicas that make the labels `2n`.
    pub dummies: u64,
}

impl Plan {
    /// `estimate` sums to 1. Because `ceil(x) ≤ x + 1`, the counts sum to at most `n + n = 2n`
    /// (paper: `n′ ≤ n + 1/α`), so the dummies are never negative.
    pub fn new(estimate: &[f64]) -> Self {
        let n = estimate.len();
        let counts: Vec<u32> = estimate.iter().map(|&p| replica_count(p, n)).collect();
        let replicas: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let labels = 2 * n as u64;
        debug_assert!(replicas <= labels, "n′ ≤ 2n for a normalised estimate");
        Plan {
            counts,
            dummies: labels.saturating_sub(replicas),
        }
    }

    /// Replicas of all keys together, `n′`.
    pub fn replicas(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }
}

/// The threshold `α`, the real-access probability `δ = 1/(2nα)` and the fake weights that
/// follow from them, for `n` keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    /// The threshold `α`.
    pub alpha: f64,
    /// Keys, `n`.
    pub keys: usize,
}

impl Threshold {
    /// The static threshold `α = 1/n`.
    pub fn static_for(keys: usize) -> Self {
        Self {
            alpha: 1.0 / keys as f64,
            keys,
        }
    }

    /// Probability that an access is real.
    pub fn real_probability(&self) -> f64 {
        1.0 / (2.0 * self.keys as f64 * self.alpha)
    }

    /// `π_f` of a label whose real accesses have probability `real_share` (`π̂(k)/R(k)` for a
    /// replica that serves reads, 0 for dummies and for labels being handed over). Clamped at 0
    /// against rounding: the counts guarantee `real_share ≤ α` up to float error.
    pub fn fake_weight(&self, real_share: f64) -> f64 {
        let denominator = 2.0 * self.keys as f64 * self.alpha - 1.0;
        if denominator <= 0.0 {
            // One key and one replica of it: every access can be real.
            return 0.0;
        }
        ((self.alpha - real_share) / denominator).max(0.0)
    }
}

/// `α′ = max_k π̂′(k) / R(k)` over the keys that gain replicas, where `R(k)` is the count they
/// have now (§5.1); never below `1/n`.
pub fn transition_alpha(gaining: impl IntoIterator<Item = (f64, u32)>, keys: usize) -> f64 {
    gaining
        .into_iter()
        .map(|(p, serving)| p / f64::from(serving.max(1)))
        .fold(1.0 / keys as f64, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_example() {
        // π = (1/2, 1/3, 1/6) over n = 3 keys: a gets two replicas, b and c one, D two (Fig. 1).
        let plan = Plan::new(&[0.5, 1.0 / 3.0, 1.0 / 6.0]);
        assert_eq!(plan.counts, vec![2, 1, 1]);
        assert_eq!(plan.dummies, 2);
        let t = Threshold::static_for(3);
        assert!((t.real_probability() - 0.5).abs() < 1e-12);
        // Fake distribution (1/12, 1/12, 0, 1/6, 1/3, 1/3).
        let fakes = [
            t.fake_weight(0.25),
            t.fake_weight(0.25),
            t.fake_weight(1.0 / 3.0),
            t.fake_weight(1.0 / 6.0),
            t.fake_weight(0.0),
            t.fake_weight(0.0),
        ];
        let want = [1.0 / 12.0, 1.0 / 12.0, 0.0, 1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0];
        for (got, want) in fakes.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{fakes:?}");
        }
        // Every label: δ·real + (1−δ)·fake = 1/6.
        let reals = [0.25, 0.25, 1.0 / 3.0, 1.0 / 6.0, 0.0, 0.0];
        for (real, fake) in reals.iter().zip(fakes) {
            assert!((0.5 * real + 0.5 * fake - 1.0 / 6.0).abs() < 1e-12);
        }
    }

    #[test]
    fn labels_are_always_two_per_key() {
        for estimate in [
            vec![1.0],
            vec![0.25; 4],
            vec![0.97, 0.01, 0.01, 0.01],
            vec![0.0, 0.0, 0.0, 1.0],
            (1..=100)
                .map(|k| 1.0 / k as f64 / 5.187_377_517_639_621)
                .collect(),
        ] {
            let plan = Plan::new(&estimate);
            assert_eq!(plan.replicas() + plan.dummies, 2 * estimate.len() as u64);
            for (&p, &r) in estimate.iter().zip(&plan.counts) {
                assert!(r >= 1 && p / f64::from(r) <= 1.0 / estimate.len() as f64 + 1e-12);
            }
        }
    }

    #[test]
    fn the_transition_keeps_every_label_at_one_over_2n() {
        // Fig. 3: a, b, c with one replica each and D with three; a becomes hot (π̂′(a) = 1/2)
        // and gains a replica taken from D.
        let n = 3;
        let new = [0.5, 0.25, 0.25];
        let alpha = transition_alpha([(new[0], 1)], n);
        assert!((alpha - 0.5).abs() < 1e-12);
        let t = Threshold { alpha, keys: n };
        let delta = t.real_probability();
        // (a,1) serves every real a; (a,2) is D's old label, fake-only until swapped; b, c
        // keep one replica; D keeps two.
        let reals = [0.5, 0.0, 0.25, 0.25, 0.0, 0.0];
        let total: f64 = reals
            .iter()
            .map(|&r| delta * r + (1.0 - delta) * t.fake_weight(r))
            .inspect(|&p| assert!((p - 1.0 / 6.0).abs() < 1e-12))
            .sum();
        assert!((total - 1.0).abs() < 1e-12);
    }
}
