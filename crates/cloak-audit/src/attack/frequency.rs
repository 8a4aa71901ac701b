//! Frequency analysis (the attack of Naveed et al. that Pancake and Waffle defend against): rank
//! the labels by how often the server saw them, rank the keys by how popular the auxiliary
//! knowledge says they are, and match rank to rank.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::{Attack, Auxiliary, Guesses};
use crate::view::ServerView;

pub struct FrequencyAnalysis;

/// `items` from the largest count to the smallest, ties in an order drawn from `seed` (an order
/// taken from the addresses or key numbers could line up by accident, as slots and keys do in
/// the plaintext store, and pass for an attack's success).
pub fn by_count<T>(mut items: Vec<(T, u64)>, seed: u64) -> Vec<(T, u64)> {
    items.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    items.sort_by_key(|item| std::cmp::Reverse(item.1));
    items
}

/// Labels from most to least accessed.
pub fn ranked_labels(view: &ServerView, seed: u64) -> Vec<(cloak_core::Addr, u64)> {
    let counts = crate::distinguish::label_counts(view, &view.span());
    by_count(counts.into_iter().collect(), seed)
}

/// Keys from most to least popular in the auxiliary sample.
pub fn ranked_keys(aux: &Auxiliary, seed: u64) -> Vec<(u64, u64)> {
    by_count(
        aux.frequencies.iter().map(|(&k, &n)| (k, n)).collect(),
        seed ^ 1,
    )
}

impl Attack for FrequencyAnalysis {
    fn name(&self) -> &'static str {
        "frequency analysis"
    }

    fn describe(&self) -> &'static str {
        "matches the most accessed labels to the most popular keys, rank for rank"
    }

    fn guess(&self, view: &ServerView, aux: &Auxiliary, seed: u64) -> Guesses {
        let labels = ranked_labels(view, seed);
        let keys = ranked_keys(aux, seed);
        Guesses::by_label(
            labels
                .into_iter()
                .zip(keys)
                .map(|((label, _), (key, _))| (label, key))
                .collect(),
        )
    }
}
