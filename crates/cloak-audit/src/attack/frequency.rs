//! Frequency analysis (the attack of Naveed et al. that Pancake and Waffle defend against): rank
//! the labels by how often the server saw them, rank the keys by how popular the auxiliary
//! knowledge says they are, and match rank to rank.

use super::{Attack, Auxiliary, Guesses};
use crate::view::ServerView;

pub struct FrequencyAnalysis;

/// Labels from most to least accessed (ties by address, so runs repeat exactly).
pub fn ranked_labels(view: &ServerView) -> Vec<(cloak_core::Addr, u64)> {
    let counts = crate::distinguish::label_counts(view, &view.span());
    let mut labels: Vec<_> = counts.into_iter().collect();
    labels.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    labels
}

impl Attack for FrequencyAnalysis {
    fn name(&self) -> &'static str {
        "frequency analysis"
    }

    fn describe(&self) -> &'static str {
        "matches the most accessed labels to the most popular keys, rank for rank"
    }

    fn guess(&self, view: &ServerView, aux: &Auxiliary, _seed: u64) -> Guesses {
        let labels = ranked_labels(view);
        let keys = aux.ranked_keys();
        Guesses(
            labels
                .into_iter()
                .zip(keys)
                .map(|((label, _), (key, _))| (label, key))
                .collect(),
        )
    }
}
