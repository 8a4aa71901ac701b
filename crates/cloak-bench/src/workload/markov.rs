//! Correlated queries: a Markov chain over the keys, where the next key depends on the one before
//! (the setting of the IHOP attack that Waffle §8.3.2 replays: readers following links between
//! Wikipedia articles).
//!
//! Every key has `fanout` successors, chosen at random once by the chain's `graph` seed (the
//! chain is part of the workload, so an adversary who picks it knows it). From a key, the walk
//! moves to its `i`-th successor with probability proportional to `1 / i^s`, or, with probability
//! `jump`, to a fresh start (a reader starting over), drawn from Zipf(`pop`) over a ranking of the
//! keys that the graph seed also fixes (some pages are popular entry points; `pop = 0` starts
//! anywhere uniformly). The walk itself is drawn from the run's seed, so two runs of one chain
//! are two samples of the same distribution.

use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;
use rand::seq::SliceRandom;
use rand::seq::index;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::Zipf;

use super::{Request, TraceError, Workload};

/// The shape of a chain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MarkovChain {
    pub fanout: usize,
    /// Zipf exponent over a key's successors.
    pub exponent: f64,
    /// Probability of jumping to a fresh start instead of following a successor.
    pub jump: f64,
    /// Zipf exponent of where jumps land.
    pub popularity: f64,
    /// Seed of the successor lists.
    pub graph: u64,
}

impl Default for MarkovChain {
    fn default() -> Self {
        Self {
            fanout: 4,
            exponent: 1.0,
            jump: 0.1,
            popularity: 1.0,
            graph: 1,
        }
    }
}

pub struct Markov {
    keys: u64,
    chain: MarkovChain,
    write_ratio: f64,
    /// Each key's successors, most likely first.
    successors: Vec<Vec<u32>>,
    step: WeightedIndex<f64>,
    /// Keys by popularity as a place to start, and the law of a start's rank.
    starts: Vec<u32>,
    start: Zipf<f64>,
    rng: ChaCha8Rng,
    current: u32,
}

impl Markov {
    /// A walk over keys `0..keys` (at least 1, at most 2^32) on `chain`, a fraction
    /// `write_ratio` of requests writes, the walk drawn from `seed`.
    pub fn new(keys: u64, chain: MarkovChain, write_ratio: f64, seed: u64) -> Self {
        let keys = keys.clamp(1, 1 << 32);
        let fanout = chain
            .fanout
            .clamp(1, (keys as usize).saturating_sub(1).max(1));
        let mut graph = ChaCha8Rng::seed_from_u64(chain.graph);
        let successors = (0..keys)
            .map(|key| {
                // One more than needed, so dropping the key itself still leaves `fanout`.
                let picked =
                    index::sample(&mut graph, keys as usize, (fanout + 1).min(keys as usize));
                picked
                    .into_iter()
                    .map(|k| k as u32)
                    .filter(|&k| u64::from(k) != key || keys == 1)
                    .take(fanout)
                    .collect()
            })
            .collect();
        let finite = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
        let exponent = finite(chain.exponent);
        let popularity = finite(chain.popularity);
        let mut starts: Vec<u32> = (0..keys).map(|k| k as u32).collect();
        starts.shuffle(&mut graph);
        let start = Zipf::new(keys as f64, popularity).expect("n ≥ 1 and s ≥ 0");
        let weights = (1..=fanout).map(|i| (i as f64).powf(-exponent));
        let step = WeightedIndex::new(weights).expect("positive finite weights");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let current = rng.random_range(0..keys) as u32;
        Self {
            keys,
            chain: MarkovChain {
                fanout,
                exponent,
                jump: chain.jump.clamp(0.0, 1.0),
                popularity,
                graph: chain.graph,
            },
            write_ratio: write_ratio.clamp(0.0, 1.0),
            successors,
            step,
            starts,
            start,
            rng,
            current,
        }
    }

    /// The successors of `key`, most likely first.
    pub fn successors(&self, key: u64) -> &[u32] {
        &self.successors[key as usize]
    }
}

impl Workload for Markov {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        let key = self.current;
        self.current = if self.rng.random_bool(self.chain.jump) {
            let rank = self.start.sample(&mut self.rng) as usize;
            self.starts[rank.clamp(1, self.starts.len()) - 1]
        } else {
            let next = &self.successors[key as usize];
            next[self.step.sample(&mut self.rng).min(next.len() - 1)]
        };
        let write = self.rng.random_bool(self.write_ratio);
        Ok(Some(Request {
            key: u64::from(key),
            write,
        }))
    }

    fn describe(&self) -> String {
        format!(
            "Markov chain ({} keys, {} successors each, Zipf s = {} over them, {:.0}% jumps to \
             Zipf({}) starts, graph {}, {:.0}% writes)",
            self.keys,
            self.chain.fanout,
            self.chain.exponent,
            self.chain.jump * 100.0,
            self.chain.popularity,
            self.chain.graph,
            self.write_ratio * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_follow_the_successor_lists() {
        let chain = MarkovChain {
            fanout: 3,
            exponent: 1.0,
            jump: 0.2,
            popularity: 0.0,
            graph: 7,
        };
        let mut w = Markov::new(200, chain, 0.0, 1);
        let lists: Vec<Vec<u32>> = (0..200).map(|k| w.successors(k).to_vec()).collect();
        assert!(lists.iter().enumerate().all(|(k, l)| {
            l.len() == 3 && !l.contains(&(k as u32)) && l.iter().all(|&s| s < 200)
        }));
        let mut previous = w.next_request().unwrap().unwrap().key;
        let (mut first, mut followed, n) = (0u32, 0u32, 30_000u32);
        for _ in 0..n {
            let key = w.next_request().unwrap().unwrap().key;
            let list = &lists[previous as usize];
            if list.contains(&(key as u32)) {
                followed += 1;
                first += u32::from(list[0] == key as u32);
            }
            previous = key;
        }
        // 80% follow a link (plus the jumps that land on one by chance: 0.2 · 3/200).
        let share = f64::from(followed) / f64::from(n);
        assert!((share - 0.803).abs() < 0.015, "followed {share}");
        // The first successor has weight 1 / (1 + 1/2 + 1/3) of the links.
        let share = f64::from(first) / f64::from(followed);
        assert!((share - 6.0 / 11.0).abs() < 0.02, "first successor {share}");
    }

    #[test]
    fn the_graph_seed_fixes_the_chain_and_the_run_seed_the_walk() {
        let chain = MarkovChain::default();
        let a = Markov::new(50, chain, 0.0, 1);
        let b = Markov::new(50, chain, 0.0, 2);
        assert!((0..50).all(|k| a.successors(k) == b.successors(k)));
        let other = Markov::new(50, MarkovChain { graph: 2, ..chain }, 0.0, 1);
        assert!((0..50).any(|k| a.successors(k) != other.successors(k)));
        let walk = |mut w: Markov| -> Vec<u64> {
            (0..100)
                .map(|_| w.next_request().unwrap().unwrap().key)
                .collect()
        };
        assert_ne!(walk(a), walk(b));
    }
}
