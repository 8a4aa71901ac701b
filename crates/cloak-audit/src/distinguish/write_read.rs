//! Write-to-read distances: for every read, how many batches ago its address was last written.
//! Waffle's adversary sees exactly this (its α, paper §5 and Figures 4–5: each object is written
//! under a fresh label and read at most α batches later), and its claim is that the histogram is
//! nearly the same for any two workloads.

use std::ops::Range;
use std::time::Duration;

use cloak_core::AccessKind;

use super::{Distinguisher, Event};
use crate::stats::{Category, buckets};
use crate::view::ServerView;

pub struct WriteReadDistance;

impl Distinguisher for WriteReadDistance {
    fn name(&self) -> &'static str {
        "write-to-read distance (α)"
    }

    fn looks_at(&self) -> &'static str {
        "for every read, the batches since its address was last written (Waffle's α histogram)"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        let mut events = Vec::new();
        for request in view.requests_in(&window) {
            if request.kind != AccessKind::Read {
                continue;
            }
            for access in view.accesses_of(request) {
                if let Some(alpha) = access.since_written {
                    events.push(Event {
                        at: request.at,
                        group: u64::from(request.batch),
                        category: buckets::of(u64::from(alpha)),
                        weight: 1,
                    });
                }
            }
        }
        events
    }

    fn label(&self, category: Category) -> String {
        buckets::label(category, "α")
    }

    fn about(&self, view: &ServerView) -> Option<String> {
        let alphas = view.accesses.iter().filter_map(|a| a.since_written);
        let (count, max) = alphas.fold((0u64, 0u32), |(n, m), a| (n + 1, m.max(a)));
        (count > 0).then(|| format!("largest α {max} batches over {count} reads"))
    }
}
