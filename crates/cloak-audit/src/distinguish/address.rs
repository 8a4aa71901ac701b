//! Which addresses are accessed: the per-access address distribution. For a tree ORAM the
//! addresses of a path reveal its leaf, and Path ORAM's claim is that leaves are uniform and
//! independent of the workload; for CURIOUS, which subORAM is touched. Dense addresses (below
//! 2^32: slots, buckets, positions) are categories as they are; pseudorandom labels are grouped
//! by their top 16 bits, which a uniform labelling spreads evenly.

use std::ops::Range;
use std::time::Duration;

use cloak_core::Addr;

use super::{Distinguisher, Event};
use crate::stats::Category;
use crate::view::ServerView;

pub struct AddressDistribution;

const DENSE: Addr = 1 << 32;

impl Distinguisher for AddressDistribution {
    fn name(&self) -> &'static str {
        "address distribution"
    }

    fn looks_at(&self) -> &'static str {
        "which addresses are accessed (dense addresses as they are, labels by their top 16 bits)"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        let mut events = Vec::new();
        for request in view.requests_in(&window) {
            for access in view.accesses_of(request) {
                let category = if access.addr < DENSE {
                    access.addr as Category
                } else {
                    (1 << 32) + (access.addr >> 112) as Category
                };
                events.push(Event {
                    at: request.at,
                    group: u64::from(request.batch),
                    category,
                    weight: 1,
                });
            }
        }
        events
    }

    fn label(&self, category: Category) -> String {
        if category < 1 << 32 {
            format!("address {category}")
        } else {
            format!("labels {:04x}…", category - (1 << 32))
        }
    }
}
