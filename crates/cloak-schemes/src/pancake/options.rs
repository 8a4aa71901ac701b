//! Pancake's options, their defaults (the paper's: `B = 3`, `α = 1/n` so `δ = 1/2`, a KS test at
//! 95% confidence over windows of 10 million requests) and their validation.

use std::time::Duration;

use cloak_crypto::Prf;

use super::{Estimate, Pancake};
use crate::{BuildError, Founding};

/// Accesses per client request, `B`.
pub const DEFAULT_BATCH_SIZE: usize = 3;
/// Largest batch accepted.
const MAX_BATCH_SIZE: usize = 1024;
/// Requests per drift-detection window, `w`.
pub const DEFAULT_WINDOW: u64 = 10_000_000;
/// Significance of the Kolmogorov–Smirnov drift test (95% confidence).
pub const DEFAULT_SIGNIFICANCE: f64 = 0.05;
/// Time between the batches that go out when clients pause.
pub const DEFAULT_IDLE_BATCH_INTERVAL: Duration = Duration::from_millis(10);
/// Requests waiting for batches before clients are slowed down.
pub const DEFAULT_MAX_QUEUED: usize = 10_000;

/// Pancake's parameters (paper §4–6).
#[derive(Clone, Debug)]
pub struct PancakeOptions {
    /// `π̂` per slot at start; `None` is uniform.
    pub estimate: Option<Estimate>,
    /// Accesses per client request (`B`).
    pub batch_size: usize,
    /// Detect drift and swap replicas (§5); without it `π̂` never changes.
    pub adapt: bool,
    /// Requests per detection window (`w`).
    pub window: u64,
    /// KS test significance (the paper's 95% confidence is 0.05).
    pub significance: f64,
    /// Batches also go out on this fixed schedule, so queued requests drain when clients pause.
    pub idle_batch_interval: Duration,
    /// Most requests waiting for batches before clients are slowed down.
    pub max_queued: usize,
}

impl Default for PancakeOptions {
    fn default() -> Self {
        Self {
            estimate: None,
            batch_size: DEFAULT_BATCH_SIZE,
            adapt: true,
            window: DEFAULT_WINDOW,
            significance: DEFAULT_SIGNIFICANCE,
            idle_batch_interval: DEFAULT_IDLE_BATCH_INTERVAL,
            max_queued: DEFAULT_MAX_QUEUED,
        }
    }
}

impl PancakeOptions {
    /// The estimate in force for a store of `capacity` keys, once the options are checked.
    pub fn estimate(&self, capacity: u64) -> Result<Estimate, BuildError> {
        if !(1..=MAX_BATCH_SIZE).contains(&self.batch_size) {
            return Err(BuildError::Invalid(format!(
                "the pancake batch size must be between 1 and {MAX_BATCH_SIZE} (the paper uses \
                 {DEFAULT_BATCH_SIZE}), got {}",
                self.batch_size
            )));
        }
        if self.window == 0 {
            return Err(BuildError::Invalid(
                "the pancake detection window must hold at least one request".into(),
            ));
        }
        if !(self.significance > 0.0 && self.significance < 1.0) {
            return Err(BuildError::Invalid(format!(
                "the pancake KS significance must be strictly between 0 and 1 (the paper uses \
                 {DEFAULT_SIGNIFICANCE}), got {}",
                self.significance
            )));
        }
        if self.idle_batch_interval.is_zero() {
            return Err(BuildError::Invalid(
                "the pancake idle batch interval must be positive".into(),
            ));
        }
        match &self.estimate {
            Some(estimate) => {
                estimate
                    .check_slots(capacity)
                    .map_err(|e| BuildError::Invalid(format!("pancake distribution: {e}")))?;
                Ok(estimate.clone())
            }
            None => Ok(Estimate::uniform(capacity as usize)),
        }
    }

    /// A Pancake store for `store` under `master`'s keys, holding `start`'s records.
    pub(crate) fn build(&self, from: Founding<'_>) -> Result<Pancake, BuildError> {
        let (store, master) = (from.store, from.master);
        let estimate = self.estimate(store.capacity)?;
        let prf = Prf::new(master, "pancake");
        let codec = crate::sealed_codec(store, master)?;
        Ok(Pancake::new(
            self, estimate, prf, codec, from.rng, from.start,
        ))
    }
}
