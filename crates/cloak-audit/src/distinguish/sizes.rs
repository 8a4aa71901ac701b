//! Sizes: how many addresses each request names, and how large each written element is. A
//! scheme that sends what it has when it has it shows the load in its request sizes; one that
//! stores values unpadded shows their lengths.

use std::ops::Range;
use std::time::Duration;

use cloak_core::AccessKind;

use super::{Distinguisher, Event};
use crate::stats::Category;
use crate::view::ServerView;

pub struct RequestSizes;

const KINDS: [AccessKind; 4] = [
    AccessKind::Read,
    AccessKind::Write,
    AccessKind::Delete,
    AccessKind::Scan,
];

impl Distinguisher for RequestSizes {
    fn name(&self) -> &'static str {
        "request sizes"
    }

    fn looks_at(&self) -> &'static str {
        "the kind of every request and how many addresses it names (batch sizes)"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        view.requests_in(&window)
            .iter()
            .map(|request| {
                let kind = KINDS.iter().position(|k| *k == request.kind).unwrap_or(0);
                Event {
                    at: request.at,
                    group: u64::from(request.batch),
                    category: (request.accesses.len() as Category) << 2 | kind as Category,
                    weight: 1,
                }
            })
            .collect()
    }

    fn label(&self, category: Category) -> String {
        let kind = match KINDS[(category & 3) as usize] {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::Delete => "delete",
            AccessKind::Scan => "scan",
        };
        format!("{kind}×{}", category >> 2)
    }
}

pub struct ElementSizes;

impl Distinguisher for ElementSizes {
    fn name(&self) -> &'static str {
        "element sizes"
    }

    fn looks_at(&self) -> &'static str {
        "the size of every element written"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        let mut events = Vec::new();
        for request in view.requests_in(&window) {
            for access in view.accesses_of(request) {
                if let Some(len) = access.value_len {
                    events.push(Event {
                        at: request.at,
                        group: u64::from(request.batch),
                        category: Category::from(len),
                        weight: 1,
                    });
                }
            }
        }
        events
    }

    fn label(&self, category: Category) -> String {
        format!("{category} B")
    }
}
