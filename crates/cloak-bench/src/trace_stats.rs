//! A trace's temporal locality (Cloak paper §6, Figures 2–3): for every two consecutive accesses
//! to one key, the reuse distance `d = j − i` between their positions (so `d = 1` means the same
//! key twice in a row). The histogram is binned logarithmically (20 bins a decade; each bin's
//! value is its mean count per distance), and a Zipf law `count ≈ c · d^−s` is fitted by least
//! squares on log-log axes over the distances below the number of distinct keys, where the
//! curve is not yet cut off by the trace's finite key set.
//!
//! The recommendation follows Algorithm 3: budgets `b_j = ceil(b_1 / j^s)` with the fitted `s`,
//! and `b_1` chosen so that a batch is about as large as the requests that arrive during one
//! batch interval at the expected rate: then a workload that follows the fit fills batches.

use std::collections::HashMap;

use cloak_schemes::Budgets;

use crate::workload::{TraceError, Workload};

#[derive(Clone, Debug, serde::Serialize)]
pub struct TraceStats {
    pub requests: u64,
    pub writes: u64,
    pub keys: u64,
    /// `(distance, mean access pairs per distance)` for each non-empty log bin.
    pub histogram: Vec<(u64, u64)>,
    /// Fitted `s` and `c` of `c · d^−s`.
    pub exponent: f64,
    pub scale: f64,
}

const BINS_PER_DECADE: f64 = 20.0;

impl TraceStats {
    pub fn of(workload: &mut dyn Workload) -> Result<Self, TraceError> {
        let mut last: HashMap<u64, u64> = HashMap::new();
        let mut bins: HashMap<u32, u64> = HashMap::new();
        let (mut requests, mut writes) = (0u64, 0u64);
        while let Some(request) = workload.next_request()? {
            if let Some(previous) = last.insert(request.key, requests) {
                let d = requests - previous;
                *bins.entry(bin(d)).or_default() += 1;
            }
            requests += 1;
            writes += u64::from(request.write);
        }
        let keys = last.len() as u64;
        let mut histogram: Vec<(u64, u64)> = bins
            .into_iter()
            .map(|(b, count)| {
                let (lo, hi) = bin_span(b);
                let middle = ((lo as f64) * (hi as f64)).sqrt().round() as u64;
                (
                    middle.max(1),
                    (count as f64 / (hi - lo) as f64).round().max(1.0) as u64,
                )
            })
            .collect();
        histogram.sort_unstable();
        let fitted: Vec<(f64, f64)> = histogram
            .iter()
            .filter(|(d, _)| *d <= keys.max(2))
            .map(|&(d, c)| ((d as f64).ln(), (c as f64).ln()))
            .collect();
        let (exponent, scale) = fit(&fitted);
        Ok(Self {
            requests,
            writes,
            keys,
            histogram,
            exponent,
            scale,
        })
    }

    /// Cloak budgets for a store of `capacity` keys receiving `rate` requests per second with
    /// batches every `interval_s` seconds: `(b_1, s)`.
    pub fn recommend(&self, capacity: u64, rate: f64, interval_s: f64) -> (u32, f64) {
        let s = self.exponent.clamp(0.0, 3.0);
        let wanted = (rate * interval_s).max(1.0) as usize;
        (
            Budgets::first_budget_for_batch(capacity.max(1), s, wanted),
            s,
        )
    }
}

fn bin(d: u64) -> u32 {
    ((d as f64).log10() * BINS_PER_DECADE).floor() as u32
}

/// The distances `lo..hi` in bin `b`.
fn bin_span(b: u32) -> (u64, u64) {
    let edge = |k: u32| 10f64.powf(f64::from(k) / BINS_PER_DECADE).ceil() as u64;
    let (lo, hi) = (edge(b), edge(b + 1));
    (lo, hi.max(lo + 1))
}

/// Least squares of `y = ln c − s·x`: returns `(s, c)`.
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    if points.len() < 2 {
        return (0.0, points.first().map_or(1.0, |p| p.1.exp()));
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), p| (a + p.0, b + p.1));
    let (mx, my) = (sx / n, sy / n);
    let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(a, b), p| {
        (a + (p.0 - mx) * (p.1 - my), b + (p.0 - mx).powi(2))
    });
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (-slope, (my - slope * mx).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Temporal;

    #[test]
    fn recovers_the_exponent_of_a_synthetic_trace() {
        for s in [0.8, 1.2] {
            let mut w = TakeN(Temporal::new(20_000, s, 0.5, 4), 300_000);
            let stats = TraceStats::of(&mut w).unwrap();
            assert_eq!(stats.requests, 300_000);
            assert!(
                (stats.exponent - s).abs() < 0.2,
                "fitted {} for a trace made with s = {s}",
                stats.exponent
            );
            let (b1, exponent) = stats.recommend(20_000, 100_000.0, 0.02);
            assert!(b1 >= 1 && (exponent - stats.exponent.clamp(0.0, 3.0)).abs() < 1e-9);
            assert!(Budgets::zipf(20_000, b1, exponent).unwrap().batch_size() >= 2000);
        }
    }

    /// The first `n` requests of a workload.
    struct TakeN<W>(W, u64);

    impl<W: Workload> Workload for TakeN<W> {
        fn next_request(&mut self) -> Result<Option<crate::workload::Request>, TraceError> {
            if self.1 == 0 {
                return Ok(None);
            }
            self.1 -= 1;
            self.0.next_request()
        }

        fn describe(&self) -> String {
            self.0.describe()
        }
    }
}
