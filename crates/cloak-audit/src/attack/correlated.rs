//! A correlated-query attack in the spirit of IHOP (Oya and Kerschbaum, USENIX Security 2022),
//! the attack that broke Pancake on correlated queries (Waffle §8.3.2).
//!
//! The server sees which label follows which; the adversary knows which key tends to follow
//! which (its auxiliary sample of the Markov chain it chose). It looks for the matching σ of
//! labels to keys that makes the observed sequence most likely:
//!
//! ```text
//! log L(σ) = Σ_i n_i · ln π(σ(i)) + Σ_{i,j} C_ij · ln P(σ(j) | σ(i))
//! ```
//!
//! with `n_i` the accesses to label `i`, `C_ij` how often `j` directly followed `i`, `π` and `P`
//! the keys' frequencies and transition probabilities (estimated from the sample, each row
//! shrunk towards `π` so sparse rows do not drown the frequencies in noise).
//!
//! Starting from frequency analysis, as IHOP does, gets stuck far from the truth when frequencies
//! are close (measured: under 15% of labels right on a clean Markov sequence). So a first
//! matching is grown greedily from the most confident labels along the chain's links, and then
//! improved by IHOP's rounds: free a random subset of labels, hold the rest, and give the free
//! ones the keys they held in the best arrangement, which is a linear assignment problem once
//! the others are held (solved exactly, Kuhn–Munkres).

use std::collections::HashMap;

use pathfinding::kuhn_munkres::kuhn_munkres;
use pathfinding::matrix::Matrix;
use rand::SeedableRng;
use rand::seq::index;
use rand_chacha::ChaCha8Rng;

use cloak_core::Addr;

use super::frequency::{ranked_keys, ranked_labels};
use super::{Attack, Auxiliary, Guesses};
use crate::view::ServerView;

pub struct CorrelatedQueries {
    /// Most labels (and keys) matched; the rest stay unguessed.
    pub max_labels: usize,
    /// Rounds of improvement, as how many times each label is freed on average.
    pub rounds_per_label: usize,
}

impl Default for CorrelatedQueries {
    fn default() -> Self {
        Self {
            max_labels: 500,
            rounds_per_label: 10,
        }
    }
}

/// Weight, in samples, of the prior that the next key is drawn from the keys' frequencies, as
/// if queries were independent: rows the sample saw little of lean on it instead of on noise.
const PRIOR: f64 = 5.0;

/// Fixed-point scale for the assignment solver's integer weights.
const SCALE: f64 = 1000.0;

impl Attack for CorrelatedQueries {
    fn name(&self) -> &'static str {
        "correlated queries (IHOP)"
    }

    fn describe(&self) -> &'static str {
        "matches labels to keys so that which label follows which best fits which key follows \
         which"
    }

    fn guess(&self, view: &ServerView, aux: &Auxiliary, seed: u64) -> Guesses {
        let Some(model) = Model::new(view, aux, self.max_labels, seed) else {
            return Guesses::default();
        };
        let mut sigma = model.grow();
        model.improve(&mut sigma, self.rounds_per_label, seed);
        model.guesses(&sigma)
    }
}

/// The likelihood of matchings, for one view and one auxiliary sample.
struct Model {
    m: usize,
    labels: Vec<(Addr, u64)>,
    keys: Vec<(u64, u64)>,
    /// Label `i` directly followed by label `j`: `out[i]` holds `(j, count)`, `into[j]` holds
    /// `(i, count)`; a label followed by itself is counted in `itself`.
    out: Vec<Vec<(usize, f64)>>,
    into: Vec<Vec<(usize, f64)>>,
    itself: Vec<f64>,
    log_pi: Vec<f64>,
    /// `ln P(l | k)` at `k * m + l`.
    log_p: Vec<f64>,
}

impl Model {
    fn new(view: &ServerView, aux: &Auxiliary, max_labels: usize, seed: u64) -> Option<Self> {
        let mut labels = ranked_labels(view, seed);
        let mut keys = ranked_keys(aux, seed);
        let m = labels.len().min(keys.len()).min(max_labels);
        if m == 0 {
            return None;
        }
        labels.truncate(m);
        keys.truncate(m);
        let label_index: HashMap<Addr, usize> = labels
            .iter()
            .enumerate()
            .map(|(i, (l, _))| (*l, i))
            .collect();
        let key_index: HashMap<u64, usize> =
            keys.iter().enumerate().map(|(i, (k, _))| (*k, i)).collect();

        // What the server saw: label i directly followed by label j.
        let mut observed: HashMap<(usize, usize), u64> = HashMap::new();
        let sequence: Vec<Option<usize>> = view
            .accesses
            .iter()
            .map(|a| label_index.get(&a.addr).copied())
            .collect();
        for pair in sequence.windows(2) {
            if let (Some(i), Some(j)) = (pair[0], pair[1]) {
                *observed.entry((i, j)).or_default() += 1;
            }
        }
        let mut out: Vec<Vec<(usize, f64)>> = vec![Vec::new(); m];
        let mut into: Vec<Vec<(usize, f64)>> = vec![Vec::new(); m];
        let mut itself = vec![0.0; m];
        for (&(i, j), &c) in &observed {
            if i == j {
                itself[i] = c as f64;
            } else {
                out[i].push((j, c as f64));
                into[j].push((i, c as f64));
            }
        }

        // What the adversary expects: key frequencies and transitions.
        let total = aux.samples.max(1) as f64;
        let log_pi: Vec<f64> = keys
            .iter()
            .map(|(_, n)| ((*n as f64 + 0.5) / (total + 0.5 * m as f64)).ln())
            .collect();
        let mut rows = vec![0.0; m];
        let mut counts = vec![0.0; m * m];
        for (&(a, b), &c) in &aux.transitions {
            if let (Some(&k), Some(&l)) = (key_index.get(&a), key_index.get(&b)) {
                counts[k * m + l] += c as f64;
                rows[k] += c as f64;
            }
        }
        let pi: Vec<f64> = log_pi.iter().map(|l| l.exp()).collect();
        let log_p: Vec<f64> = counts
            .iter()
            .enumerate()
            .map(|(at, &c)| ((c + PRIOR * pi[at % m]) / (rows[at / m] + PRIOR)).ln())
            .collect();
        Some(Self {
            m,
            labels,
            keys,
            out,
            into,
            itself,
            log_pi,
            log_p,
        })
    }

    fn lp(&self, k: usize, l: usize) -> f64 {
        self.log_p[k * self.m + l]
    }

    /// A first matching grown greedily: the label whose best key beats its second best by the
    /// widest margin is matched first, and every match adds, to the labels next to it, the
    /// evidence of which keys sit next to its key. Frequencies place the most popular keys;
    /// the chain's links carry the matching from there to the rest.
    fn grow(&self) -> Vec<usize> {
        let m = self.m;
        let mut score: Vec<f64> = (0..m * m)
            .map(|at| self.labels[at / m].1 as f64 * self.log_pi[at % m])
            .collect();
        let mut sigma = vec![usize::MAX; m];
        let mut taken = vec![false; m];
        for _ in 0..m {
            // The unmatched label with the widest margin, and its best key.
            let mut pick: Option<(f64, usize, usize)> = None;
            for i in (0..m).filter(|&i| sigma[i] == usize::MAX) {
                let row = &score[i * m..(i + 1) * m];
                let (mut best, mut second) = ((f64::NEG_INFINITY, 0), f64::NEG_INFINITY);
                for (k, &v) in row.iter().enumerate().filter(|(k, _)| !taken[*k]) {
                    if v > best.0 {
                        second = best.0;
                        best = (v, k);
                    } else if v > second {
                        second = v;
                    }
                }
                let margin = if second.is_finite() {
                    best.0 - second
                } else {
                    f64::MAX
                };
                if pick.is_none_or(|(widest, ..)| margin > widest) {
                    pick = Some((margin, i, best.1));
                }
            }
            let Some((_, i, k)) = pick else { break };
            sigma[i] = k;
            taken[k] = true;
            for &(j, c) in &self.out[i] {
                for l in 0..m {
                    score[j * m + l] += c * self.lp(k, l);
                }
            }
            for &(j, c) in &self.into[i] {
                for l in 0..m {
                    score[j * m + l] += c * self.lp(l, k);
                }
            }
        }
        sigma
    }

    /// Rounds of: free some labels, hold the rest, reassign the freed ones optimally.
    fn improve(&self, sigma: &mut [usize], rounds_per_label: usize, seed: u64) {
        let m = self.m;
        if m < 2 {
            return;
        }
        let free = (m / 4).clamp(2, 100).min(m);
        let rounds = (rounds_per_label * m).div_ceil(free).max(50);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut is_free = vec![false; m];
        for _ in 0..rounds {
            let freed: Vec<usize> = index::sample(&mut rng, m, free).into_vec();
            for &i in &freed {
                is_free[i] = true;
            }
            let offered: Vec<usize> = freed.iter().map(|&i| sigma[i]).collect();
            let weights = Matrix::from_fn(free, free, |(a, b)| {
                let (i, k) = (freed[a], offered[b]);
                let mut w =
                    self.labels[i].1 as f64 * self.log_pi[k] + self.itself[i] * self.lp(k, k);
                for &(j, c) in &self.out[i] {
                    if !is_free[j] {
                        w += c * self.lp(k, sigma[j]);
                    }
                }
                for &(j, c) in &self.into[i] {
                    if !is_free[j] {
                        w += c * self.lp(sigma[j], k);
                    }
                }
                (w * SCALE).round() as i64
            });
            let (_, assignment) = kuhn_munkres(&weights);
            for (a, &b) in assignment.iter().enumerate() {
                sigma[freed[a]] = offered[b];
            }
            for &i in &freed {
                is_free[i] = false;
            }
        }
    }

    fn guesses(&self, sigma: &[usize]) -> Guesses {
        Guesses::by_label(
            sigma
                .iter()
                .enumerate()
                .map(|(i, &k)| (self.labels[i].0, self.keys[k].0))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloak_bench::workload::{self, Markov, MarkovChain, Request};
    use cloak_core::{AccessKind, Observed};
    use std::time::Duration;

    /// A server view of `requests`, one read each, key `k` under label `1000 + k`.
    fn clean_view(requests: &[Request]) -> ServerView {
        let trace: Vec<Observed> = requests
            .iter()
            .enumerate()
            .map(|(t, r)| Observed {
                at: Duration::from_micros(t as u64),
                answered: None,
                kind: AccessKind::Read,
                addrs: vec![1000 + u128::from(r.key)],
                values: Vec::new(),
            })
            .collect();
        ServerView::new(&trace, Duration::ZERO, Duration::from_secs(1))
    }

    #[test]
    fn recovers_a_chain_from_a_clean_sequence() {
        for popularity in [1.0, 0.0] {
            let chain = MarkovChain {
                popularity,
                ..MarkovChain::default()
            };
            let run = |seed| workload::take(&mut Markov::new(100, chain, 0.0, seed), 5000).unwrap();
            let view = clean_view(&run(1));
            let aux = Auxiliary::from_requests(&run(2));
            let guesses = CorrelatedQueries::default().guess(&view, &aux, 1);
            let right = guesses
                .labels
                .iter()
                .filter(|&(&label, &key)| label == 1000 + u128::from(key))
                .count();
            // Frequency analysis alone places a handful (the chain's frequencies are close).
            let frequency = super::super::FrequencyAnalysis.guess(&view, &aux, 1);
            let by_frequency = frequency
                .labels
                .iter()
                .filter(|&(&label, &key)| label == 1000 + u128::from(key))
                .count();
            assert!(
                right >= 90 && right > 3 * by_frequency,
                "pop {popularity}: {right} labels right, frequency analysis {by_frequency}"
            );
        }
    }
}
