//! Cloak's options as given, their defaults (the paper's, §7), and their validation into a
//! [`CloakConfig`].

use std::time::Duration;

use cloak_core::ElementCodec;
use cloak_crypto::Sealer;

use super::{Budgets, Cloak, CloakConfig};
use crate::{BuildError, Founding, MAX_CAPACITY, schedule};

/// The paper's first budget `b_1` for a million keys (§7.1: a batch of about 4,000).
pub const DEFAULT_FIRST_BUDGET: u32 = 433;
/// The exponent `s` of the budgets `b_j = ⌈b_1 / j^s⌉`.
pub const DEFAULT_ZIPF_EXPONENT: f64 = 1.0;
/// The time `Δ` between batch starts.
pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_millis(20);
/// Records cached at the proxy (the paper's, for a million keys).
pub const DEFAULT_CACHE_SIZE: usize = 1000;

/// Cloak's parameters (paper §6–7; defaults are the paper's).
#[derive(Clone, Debug)]
pub struct CloakOptions {
    /// The budget `b_1` of reuse-distance set 1; later budgets follow Zipf.
    pub first_budget: u32,
    /// The exponent `s` of the budgets `b_j = ⌈b_1 / j^s⌉`.
    pub zipf_exponent: f64,
    /// Explicit budgets `b_1, b_2, …`; overrides `first_budget` and `zipf_exponent`.
    pub budgets: Option<Vec<u32>>,
    /// The fixed time `Δ` between batch starts.
    pub batch_interval: Duration,
    /// When a batch's write-back leaves, as a fraction of `batch_interval` after the batch's
    /// start on the schedule (see [`schedule`]).
    pub write_back_at: f64,
    /// Records kept at the proxy to answer reads without a batch; 0 disables the cache.
    pub cache_size: usize,
    /// Most slots with an op waiting for a batch; `None` means twice the batch size (§7.1).
    pub max_pending: Option<usize>,
    /// Seal with counter nonces: Cloak seals each write-back in the order it read, so every
    /// nonce names the read position of its element and the server can undo the shuffle. Only
    /// for tests that show the auditor and the wire checks catch that leak; the `leak-demo`
    /// feature is enabled by test crates' dev-dependencies alone, never in a build users run.
    /// [`crate::LEAK_DEMO_ENV`] in the environment does the same (for tests of the built binary).
    #[cfg(feature = "leak-demo")]
    pub leak_demo_counter_nonces: bool,
}

impl Default for CloakOptions {
    fn default() -> Self {
        Self {
            first_budget: DEFAULT_FIRST_BUDGET,
            zipf_exponent: DEFAULT_ZIPF_EXPONENT,
            budgets: None,
            batch_interval: DEFAULT_BATCH_INTERVAL,
            write_back_at: schedule::DEFAULT_WRITE_BACK_AT,
            cache_size: DEFAULT_CACHE_SIZE,
            max_pending: None,
            #[cfg(feature = "leak-demo")]
            leak_demo_counter_nonces: false,
        }
    }
}

impl CloakOptions {
    /// The budgets and timing for a store of `capacity` keys, checked.
    pub fn config(&self, capacity: u64) -> Result<CloakConfig, BuildError> {
        let budgets = match &self.budgets {
            Some(list) => Budgets::explicit(list.clone())?,
            None => Budgets::zipf(capacity, self.first_budget, self.zipf_exponent)?,
        };
        if budgets.capacity() < capacity {
            return Err(BuildError::BudgetsTooSmall {
                given: budgets.capacity(),
                needed: capacity,
            });
        }
        if budgets.capacity() > MAX_CAPACITY {
            return Err(BuildError::Capacity {
                got: budgets.capacity(),
                max: MAX_CAPACITY,
            });
        }
        if self.batch_interval.is_zero() {
            return Err(BuildError::Invalid(
                "the batch interval must be positive".into(),
            ));
        }
        Ok(CloakConfig {
            budgets,
            batch_interval: self.batch_interval,
            write_back_hold: schedule::write_back_hold(self.batch_interval, self.write_back_at)
                .map_err(BuildError::Invalid)?,
            cache_size: self.cache_size,
            max_pending: self.max_pending,
        })
    }

    /// A Cloak store for `store` under `master`'s keys, holding `start`'s records.
    pub(crate) fn build(&self, from: Founding<'_>) -> Result<Cloak, BuildError> {
        let (store, master) = (from.store, from.master);
        let config = self.config(store.capacity)?;
        let sealer = Sealer::new(master)?;
        #[cfg(feature = "leak-demo")]
        let sealer = match self.leak_demo_counter_nonces
            || std::env::var_os(crate::LEAK_DEMO_ENV).is_some()
        {
            true => Sealer::with_counter_nonces(master)?,
            false => sealer,
        };
        let codec = ElementCodec::new(store.layout, sealer);
        let cloak = Cloak::new(config, codec, from.rng, from.start);
        #[cfg(feature = "leak-demo")]
        let cloak = match std::env::var_os(crate::LEAK_DEMO_INTAKE_BATCHES_ENV) {
            Some(_) => cloak.leak_demo_batches_from_intake(),
            None => cloak,
        };
        Ok(cloak)
    }
}
