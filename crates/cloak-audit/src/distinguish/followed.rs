//! Reuse along followed elements: the server follows elements through the write-backs by their
//! clear headers (`crate::links`) and, for every element read, notes how many batches passed
//! since that element was last read, and how many before that. Addresses alone give only the
//! first number, which Cloak fixes by its budgets; the pair tells whether the *same* element
//! keeps coming back (a key clients keep using) or a different one each time. When the links
//! are guesses (random nonces) the pair is that of a random element of the batch, the same for
//! every workload.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use cloak_core::AccessKind;

use super::{Distinguisher, Event};
use crate::links;
use crate::stats::Category;
use crate::view::ServerView;

/// Distances at or above this are counted together; `NEVER` stands for not read before.
const CAP: u64 = 16;
const NEVER: u64 = CAP;

pub struct FollowedReuse;

impl Distinguisher for FollowedReuse {
    fn name(&self) -> &'static str {
        "followed-element reuse"
    }

    fn looks_at(&self) -> &'static str {
        "batches since each read element (followed by nonce order) was last read, and before that"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        let elements = links::follow(view);
        // Per element: the batch it was last read in, and the distance it was read at then.
        let mut last: HashMap<u32, (u32, u64)> = HashMap::new();
        let mut events = Vec::new();
        for request in view.requests.iter().filter(|r| r.kind == AccessKind::Read) {
            for index in request.accesses.clone() {
                let element = elements.of_access[index];
                let (distance, before) = match last.get(&element) {
                    Some(&(batch, before)) => {
                        (u64::from(request.batch - batch).min(CAP - 1), before)
                    }
                    None => (NEVER, NEVER),
                };
                last.insert(element, (request.batch, distance));
                if window.contains(&request.at) {
                    events.push(Event {
                        at: request.at,
                        group: u64::from(request.batch),
                        category: before * (CAP + 1) + distance,
                        weight: 1,
                    });
                }
            }
        }
        events
    }

    fn label(&self, category: Category) -> String {
        let show = |d: u64| {
            if d == NEVER {
                "-".to_string()
            } else if d == CAP - 1 {
                format!("≥{d}")
            } else {
                d.to_string()
            }
        };
        format!(
            "d={} after {}",
            show(category % (CAP + 1)),
            show(category / (CAP + 1))
        )
    }
}
