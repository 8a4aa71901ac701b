//! Timing: the gaps between consecutive requests. Cloak sends a batch every Δ whether or not
//! anyone is asking (paper §3, §5), so its gaps are fixed; a scheme that sends on demand shows
//! when, and how hard, its clients work.

use std::ops::Range;
use std::time::Duration;

use super::{Distinguisher, Event};
use crate::stats::{Category, buckets};
use crate::view::ServerView;

pub struct Timing;

impl Distinguisher for Timing {
    fn name(&self) -> &'static str {
        "timing"
    }

    fn looks_at(&self) -> &'static str {
        "the gaps between consecutive requests (how many, and when)"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        let first = view.requests.partition_point(|r| r.at < window.start);
        let requests = view.requests_in(&window);
        requests
            .iter()
            .enumerate()
            .map(|(i, request)| {
                let previous = (first + i)
                    .checked_sub(1)
                    .map_or(Duration::ZERO, |p| view.requests[p].at);
                let gap = (request.at - previous).as_micros() as u64;
                Event {
                    at: request.at,
                    group: u64::from(request.batch),
                    category: buckets::of(gap),
                    weight: 1,
                }
            })
            .collect()
    }

    fn label(&self, category: Category) -> String {
        buckets::label(category, "gap µs")
    }
}
