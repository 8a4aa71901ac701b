//! The clear headers of written elements (`epoch ‖ nonce ‖ generation`, see
//! `cloak_crypto::ClearHeader`): everything in them must depend on public information only.
//!
//! - **generation lag**: how far each written element's generation is behind the newest the
//!   server has seen. Cloak binds an element to the batch that wrote it (lag 0 for a whole
//!   write-back); a scheme that writes an object's last-read batch there marks which writes are
//!   dummies and how many reads of each batch were real.
//! - **nonce order**: how the nonce order of a write-back lines up with the positions its
//!   addresses were read at. Random nonces line up with nothing; a counter lines up with the
//!   sealing order, which is the read order of the element (and so the shuffle) when a scheme
//!   seals as it reads. On its own a view reports how many write-backs carry consecutive
//!   nonces: that alone shows the sealing order is readable.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use cloak_core::{AccessKind, Addr};

use super::{Distinguisher, Event};
use crate::links::nonce_ranks;
use crate::stats::{Category, buckets};
use crate::view::{ServerRequest, ServerView};

pub struct GenerationLag;

impl Distinguisher for GenerationLag {
    fn name(&self) -> &'static str {
        "generation lag"
    }

    fn looks_at(&self) -> &'static str {
        "how far each written element's clear generation is behind the newest seen so far"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        let mut newest = 0u64;
        let mut events = Vec::new();
        for request in view.requests.iter().filter(|r| r.kind == AccessKind::Write) {
            let generations: Vec<u64> = view
                .accesses_of(request)
                .iter()
                .filter_map(|a| a.header.map(|h| h.generation))
                .collect();
            newest = generations.iter().copied().fold(newest, u64::max);
            if !window.contains(&request.at) {
                continue;
            }
            events.extend(generations.into_iter().map(|g| Event {
                at: request.at,
                group: u64::from(request.batch),
                category: buckets::of(newest - g),
                weight: 1,
            }));
        }
        events
    }

    fn label(&self, category: Category) -> String {
        buckets::label(category, "lag")
    }

    fn about(&self, view: &ServerView) -> Option<String> {
        let mut epochs: Vec<u64> = view
            .accesses
            .iter()
            .filter_map(|a| a.header.map(|h| h.epoch))
            .collect();
        epochs.sort_unstable();
        epochs.dedup();
        (!epochs.is_empty()).then(|| format!("{} distinct epochs written", epochs.len()))
    }
}

/// Bins of the correlation scaled by `√(n − 1)`, which chance spreads as a standard normal
/// whatever the write-back's size: below −2, −2 to −1, …, 2 and above. Coarse bins keep every
/// category well filled, so chance differences between runs stay small.
const BINS: [f64; 5] = [-2.0, -1.0, 0.0, 1.0, 2.0];

pub struct NonceOrder;

/// Spearman's correlation between the nonce rank of each element of `write` and the position
/// its address was read at in `read`, for a write-back of exactly the addresses read, each
/// once, and at least 3 (others are left out: how many and which addresses repeat is the
/// addresses' business, and would pass for something the nonces said).
fn rank_correlation(view: &ServerView, read: &ServerRequest, write: &ServerRequest) -> Option<f64> {
    let position: HashMap<Addr, usize> = view
        .accesses_of(read)
        .iter()
        .enumerate()
        .map(|(i, a)| (a.addr, i))
        .collect();
    let distinct =
        position.len() == read.accesses.len() && write.accesses.len() == read.accesses.len();
    if !distinct
        || view
            .accesses_of(write)
            .iter()
            .any(|a| !position.contains_key(&a.addr))
    {
        return None;
    }
    let ranks = nonce_ranks(view, write)?;
    let pairs: Vec<(f64, f64)> = view
        .accesses_of(write)
        .iter()
        .zip(ranks)
        .filter_map(|(a, rank)| position.get(&a.addr).map(|&p| (p as f64, rank as f64)))
        .collect();
    if pairs.len() < 3 {
        return None;
    }
    // Both sides are re-ranked among the matched pairs, so Pearson's formula on them is
    // Spearman's correlation.
    let rerank = |values: Vec<f64>| -> Vec<f64> {
        let mut order: Vec<usize> = (0..values.len()).collect();
        order.sort_by(|&i, &j| values[i].total_cmp(&values[j]));
        let mut ranks = vec![0.0; values.len()];
        for (rank, i) in order.into_iter().enumerate() {
            ranks[i] = rank as f64;
        }
        ranks
    };
    let x = rerank(pairs.iter().map(|p| p.0).collect());
    let y = rerank(pairs.iter().map(|p| p.1).collect());
    let n = x.len() as f64;
    let mean = (n - 1.0) / 2.0;
    let covariance: f64 = x.iter().zip(&y).map(|(a, b)| (a - mean) * (b - mean)).sum();
    let variance: f64 = x.iter().map(|a| (a - mean) * (a - mean)).sum();
    Some(covariance / variance)
}

impl Distinguisher for NonceOrder {
    fn name(&self) -> &'static str {
        "nonce order"
    }

    fn looks_at(&self) -> &'static str {
        "how each write-back's nonce order correlates with the positions its addresses were read at"
    }

    fn observe(&self, view: &ServerView, window: Range<Duration>) -> Vec<Event> {
        view.write_backs()
            .filter(|(_, write)| window.contains(&write.at))
            .filter_map(|(read, write)| {
                let rho = rank_correlation(view, read, write)?;
                // By size too: small write-backs take only a few values of the correlation.
                let size = write.accesses.len().min(255) as Category;
                let z = rho * ((write.accesses.len() - 1) as f64).sqrt();
                let bin = BINS.iter().filter(|&&edge| z >= edge).count() as Category;
                Some(Event {
                    at: write.at,
                    group: u64::from(write.batch),
                    category: size << 8 | bin,
                    weight: 1,
                })
            })
            .collect()
    }

    fn label(&self, category: Category) -> String {
        let bin = (category & 255) as usize;
        let from = bin
            .checked_sub(1)
            .map_or("-∞".into(), |i| BINS[i].to_string());
        let to = BINS.get(bin).map_or("∞".into(), |e| e.to_string());
        format!("{} elements, ρ√(n−1) in [{from}, {to})", category >> 8)
    }

    fn about(&self, view: &ServerView) -> Option<String> {
        let (mut consecutive, mut write_backs) = (0, 0);
        for (_, write) in view.write_backs() {
            write_backs += 1;
            consecutive += usize::from(consecutive_nonces(view, write));
        }
        (consecutive > 0).then(|| {
            format!(
                "nonces consecutive in {consecutive} of {} write-backs: the sealing order is \
                 readable",
                write_backs
            )
        })
    }
}

/// The nonces of `write`'s elements are consecutive numbers (a counter), for 2 elements or more.
pub fn consecutive_nonces(view: &ServerView, write: &ServerRequest) -> bool {
    let Some(mut numbers) = view
        .accesses_of(write)
        .iter()
        .map(|a| a.header.map(|h| h.nonce_number()))
        .collect::<Option<Vec<u64>>>()
    else {
        return false;
    };
    numbers.sort_unstable();
    numbers.len() >= 2 && numbers.windows(2).all(|w| w[1] == w[0].wrapping_add(1))
}
