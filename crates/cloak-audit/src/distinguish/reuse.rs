//! Per-batch counts per reuse-distance set: Cloak's whole security argument (paper §5). A server
//! that tracks when it last saw every address knows each address's reuse distance, so it knows
//! the sets `S_d`; in every batch Cloak takes exactly `b_d` addresses from `S_d`, whatever the
//! workload, so these counts must be the same for any two workloads.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use cloak_core::AccessKind;

use super::{Distinguisher, Event};
use crate::stats::{Category, buckets};
use crate::view::ServerView;

/// Addresses not seen since the view began.
const UNSEEN: Category = Category::MAX;

pub struct ReuseDistanceSets;

impl Distinguisher for ReuseDistanceSets {
    fn name(&self) -> &'static str {
        "reuse-distance sets"
    }

    fn looks_at(&self) -> &'static str {
        "per batch, how many addresses come from each reuse-distance set (addresses last seen d \
         batches ago)"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        let mut events = Vec::new();
        for request in view.requests_in(&window) {
            if request.kind != AccessKind::Read {
                continue;
            }
            let mut counts: BTreeMap<Category, u64> = BTreeMap::new();
            for access in view.accesses_of(request) {
                let set = access
                    .reuse_distance
                    .map_or(UNSEEN, |d| buckets::of(u64::from(d)));
                *counts.entry(set).or_default() += 1;
            }
            events.extend(counts.into_iter().map(|(category, weight)| Event {
                at: request.at,
                group: u64::from(request.batch),
                category,
                weight,
            }));
        }
        events
    }

    fn label(&self, category: Category) -> String {
        if category == UNSEEN {
            "unseen".into()
        } else {
            buckets::label(category, "d")
        }
    }
}
