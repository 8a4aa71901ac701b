//! Label access frequencies: how often each address is touched. Pancake's claim (§4–5) is that
//! every label is accessed equally often whatever the workload; a deterministic label per key
//! (`encrypted`) shows the workload's key frequencies instead.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use cloak_core::Addr;

use super::{Distinguisher, Event};
use crate::stats::{self, Category, buckets};
use crate::view::ServerView;

pub struct LabelFrequency;

/// Accesses per address during `window`.
pub fn counts(view: &ServerView, window: &Range<Duration>) -> HashMap<Addr, u64> {
    let mut counts: HashMap<Addr, u64> = HashMap::new();
    for request in view.requests_in(window) {
        for access in view.accesses_of(request) {
            *counts.entry(access.addr).or_default() += 1;
        }
    }
    counts
}

impl Distinguisher for LabelFrequency {
    fn name(&self) -> &'static str {
        "label frequency"
    }

    fn looks_at(&self) -> &'static str {
        "how many times each address (label) is accessed: the spread of access frequencies"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        let mut frequencies: Vec<Category> = counts(view, &window)
            .into_values()
            .map(buckets::of)
            .collect();
        frequencies.sort_unstable();
        frequencies
            .into_iter()
            .enumerate()
            .map(|(label, category)| Event {
                at: window.start,
                group: label as u64,
                category,
                weight: 1,
            })
            .collect()
    }

    fn label(&self, category: Category) -> String {
        buckets::label(category, "accesses")
    }

    fn about(&self, view: &ServerView) -> Option<String> {
        let counts: Vec<u64> = counts(view, &view.span()).into_values().collect();
        if counts.is_empty() {
            return None;
        }
        let test = stats::uniformity(&counts);
        Some(format!(
            "{} labels, χ² vs uniform {:.0} on {} dof (p = {:.3})",
            counts.len(),
            test.statistic,
            test.dof,
            test.p_value
        ))
    }
}
