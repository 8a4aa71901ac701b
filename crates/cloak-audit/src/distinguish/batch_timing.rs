//! Batch timing: when each batch starts, and how long after its read is answered its
//! write-back goes out. Cloak starts a batch every Δ from a timer and seals a fixed amount of
//! work per batch, so neither may move with the load; a proxy whose loop serves clients before
//! it seals, or lets intake delay the next batch, shows how busy it is in both.

use std::ops::Range;
use std::time::Duration;

use cloak_core::AccessKind;

use super::{Distinguisher, Event};
use crate::stats::{Category, buckets};
use crate::view::ServerView;

/// The gaps between consecutive batch starts (read requests), in µs.
pub fn batch_intervals(view: &ServerView) -> Vec<(Duration, u64)> {
    let reads = view.requests.iter().filter(|r| r.kind == AccessKind::Read);
    reads
        .clone()
        .zip(reads.skip(1))
        .map(|(before, after)| (after.at, (after.at - before.at).as_micros() as u64))
        .collect()
}

/// For every write-back, the time from its read being answered to the write going out, in µs
/// (write-backs whose read was not seen answered are left out).
pub fn write_back_delays(view: &ServerView) -> Vec<(Duration, u64)> {
    view.write_backs()
        .filter_map(|(read, write)| {
            let answered = read.answered?;
            Some((
                write.at,
                write.at.saturating_sub(answered).as_micros() as u64,
            ))
        })
        .collect()
}

/// The 10th, 50th, 90th and 99th percentiles of `values` (nearest rank); zeros when empty.
pub fn percentiles(values: impl IntoIterator<Item = u64>) -> [u64; 4] {
    let mut sorted: Vec<u64> = values.into_iter().collect();
    sorted.sort_unstable();
    [0.10, 0.50, 0.90, 0.99].map(|q| {
        let rank = ((q * sorted.len() as f64).ceil() as usize).saturating_sub(1);
        sorted.get(rank).copied().unwrap_or(0)
    })
}

/// `p10/p50/p90/p99 = a / b / c / d ms`.
fn describe(values: &[(Duration, u64)]) -> Option<String> {
    if values.is_empty() {
        return None;
    }
    let [p10, p50, p90, p99] = percentiles(values.iter().map(|v| v.1)).map(|us| us as f64 / 1e3);
    Some(format!(
        "p10/p50/p90/p99 = {p10:.2} / {p50:.2} / {p90:.2} / {p99:.2} ms over {}",
        values.len()
    ))
}

fn events(values: Vec<(Duration, u64)>, window: &Range<Duration>) -> Vec<Event> {
    values
        .into_iter()
        .filter(|(at, _)| window.contains(at))
        .enumerate()
        .map(|(i, (at, us))| Event {
            at,
            group: i as u64,
            category: buckets::of(us),
            weight: 1,
        })
        .collect()
}

pub struct BatchIntervals;

impl Distinguisher for BatchIntervals {
    fn name(&self) -> &'static str {
        "batch intervals"
    }

    fn looks_at(&self) -> &'static str {
        "the time between consecutive batch starts (read requests)"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        events(batch_intervals(view), &window)
    }

    fn label(&self, category: Category) -> String {
        buckets::label(category, "interval µs")
    }

    fn about(&self, view: &ServerView) -> Option<String> {
        describe(&batch_intervals(view))
    }
}

pub struct WriteBackDelay;

impl Distinguisher for WriteBackDelay {
    fn name(&self) -> &'static str {
        "write-back delay"
    }

    fn looks_at(&self) -> &'static str {
        "the time from a batch's read being answered to its write-back"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        events(write_back_delays(view), &window)
    }

    fn label(&self, category: Category) -> String {
        buckets::label(category, "delay µs")
    }

    fn about(&self, view: &ServerView) -> Option<String> {
        describe(&write_back_delays(view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        assert_eq!(percentiles(1..=100), [10, 50, 90, 99]);
        assert_eq!(percentiles([7]), [7; 4]);
        assert_eq!(percentiles([]), [0; 4]);
    }
}
