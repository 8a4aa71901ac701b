//! Waffle's parameters (paper Table 1), their defaults (§8.2), what makes a combination
//! impossible, and the bounds they guarantee (Theorems 7.1 and 7.2).
//!
//! | symbol | flag                  | meaning                                         | default            |
//! |--------|-----------------------|-------------------------------------------------|--------------------|
//! | `N`    | `--capacity`          | real objects (every slot of the store)          |                    |
//! | `B`    | `--waffle-batch`      | objects read (and written) per batch            | 2500               |
//! | `R`    | `--waffle-real`       | most client requests a batch takes              | 1000 (40% of `B`)  |
//! | `f_D`  | `--waffle-fake-dummy` | fake queries to dummy objects per batch         | 500 (20% of `B`)   |
//! | `C`    | `--waffle-cache`      | objects cached at the proxy                     | 2% of `N`          |
//! | `D`    | `--waffle-dummies`    | dummy objects                                   | `(N−1)/(B−R−f_D) = D/f_D` |
//!
//! Every batch reads `r ≤ R` objects clients asked for, `f_D` dummies and
//! `f_R = B − (r + f_D) ≥ B − R − f_D` least recently accessed real objects.
//!
//! Defaults for small stores: the paper's batch needs `N ≥ 2(B − f_D) + R` (the cache holds at
//! least `B − f_D + R` objects and storage must still hold the `B − f_D` real objects every batch
//! reads), i.e. `N ≥ 5000`. When `--waffle-batch` is not given, the batch shrinks to the largest
//! size up to `min(2500, N/4)` that fits, keeping the paper's proportions (`R = 40%`,
//! `f_D = 20%` of `B`); the cache is never below `B − f_D + R` (the paper's meaningful minimum,
//! Algorithm 1's assumption). So `N = 100,000` keeps the paper's batch with `C = 3000`, and
//! `N = 300` gets `B = 75, R = 30, f_D = 15, C = 90, D = 150`.

use std::time::Duration;

use super::Waffle;
use crate::{BuildError, Founding};

/// The longest time between batches (the only time between them with fixed timing).
pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_millis(20);

/// When batches go out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BatchTiming {
    /// One batch every interval, whatever the load: the server learns nothing from timing.
    #[default]
    Fixed,
    /// Also as soon as `R` requests wait (the paper's trigger), so a busy proxy does not wait
    /// for the timer; batch timing then reveals the request rate while it exceeds `R` per interval.
    Eager,
}

impl BatchTiming {
    /// The name `--waffle-timing` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchTiming::Fixed => "fixed",
            BatchTiming::Eager => "eager",
        }
    }
}

impl std::str::FromStr for BatchTiming {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fixed" => Ok(BatchTiming::Fixed),
            "eager" => Ok(BatchTiming::Eager),
            other => Err(format!(
                "batch timing must be fixed or eager, got {other:?}"
            )),
        }
    }
}

/// Waffle's settings as given; unset ones take the paper's defaults, scaled to the store.
#[derive(Clone, Debug)]
pub struct WaffleOptions {
    /// `B`.
    pub batch: Option<u32>,
    /// `R`.
    pub real: Option<u32>,
    /// `f_D`.
    pub fake_dummy: Option<u32>,
    /// `C`.
    pub cache: Option<u64>,
    /// `D`.
    pub dummies: Option<u64>,
    /// Longest time between batches (the only time between them with [`BatchTiming::Fixed`]).
    pub batch_interval: Duration,
    /// When batches go out.
    pub timing: BatchTiming,
    /// With fixed timing, when a batch's write-back leaves, as a fraction of `batch_interval`
    /// after the batch's start on the schedule (see [`crate::schedule`]).
    pub write_back_at: f64,
    /// Most slots waiting for a batch before clients are slowed down; `None`: `4R`.
    pub max_pending: Option<usize>,
}

impl Default for WaffleOptions {
    fn default() -> Self {
        Self {
            batch: None,
            real: None,
            fake_dummy: None,
            cache: None,
            dummies: None,
            batch_interval: DEFAULT_BATCH_INTERVAL,
            timing: BatchTiming::Fixed,
            write_back_at: crate::schedule::DEFAULT_WRITE_BACK_AT,
            max_pending: None,
        }
    }
}

impl WaffleOptions {
    /// A Waffle store for `store` under `master`'s keys, holding `start`'s records.
    pub(crate) fn build(&self, from: Founding<'_>) -> Result<Waffle, BuildError> {
        let (store, master) = (from.store, from.master);
        let params = Params::resolve(store.capacity, self)?;
        let codec = crate::sealed_codec(store, master)?;
        Ok(Waffle::new(params, codec, master, from.rng, from.start))
    }
}

/// The paper's defaults (§8.2).
pub const PAPER_BATCH: u32 = 2500;
const REAL_SHARE: f64 = 0.4;
const FAKE_DUMMY_SHARE: f64 = 0.2;
const CACHE_SHARE: f64 = 0.02;

/// Why Waffle's parameters do not fit together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// `B` is below 2.
    #[error("--waffle-batch (B) must be at least 2, got {0}")]
    BatchTooSmall(u64),
    /// `R` is 0.
    #[error("--waffle-real (R) must be at least 1")]
    NoRealRequests,
    #[error(
        "--waffle-real (R = {real}) plus --waffle-fake-dummy (f_D = {fake_dummy}) must be less than \
         --waffle-batch (B = {batch}): every batch must read at least one real object no client \
         asked for, or objects nobody requests are never read again (α would be unbounded)"
    )]
    /// `R + f_D ≥ B`: no batch reads a real object nobody asked for.
    NoFakeReal {
        /// `B`.
        batch: u64,
        /// `R`.
        real: u64,
        /// `f_D`.
        fake_dummy: u64,
    },
    #[error(
        "--waffle-dummies (D = {dummies}) must be at least --waffle-fake-dummy (f_D = {fake_dummy}): \
         every batch reads f_D distinct dummy objects"
    )]
    /// `D < f_D`.
    TooFewDummies {
        /// `D`.
        dummies: u64,
        /// `f_D`.
        fake_dummy: u64,
    },
    #[error(
        "--waffle-dummies is {0} but --waffle-fake-dummy is 0: dummy objects would never be read \
         (α would be unbounded); set both or neither"
    )]
    /// Dummies without fake dummy reads.
    DummiesNeverRead(u64),
    #[error(
        "--waffle-cache (C = {cache}) must be at least B − f_D + R = {needed}: every batch evicts \
         B − f_D objects and may touch R more, and none of them may be evicted in the batch that \
         touched it (Algorithm 1's assumption; β would be negative)"
    )]
    /// `C < B − f_D + R`.
    CacheTooSmall {
        /// `C`.
        cache: u64,
        /// `B − f_D + R`.
        needed: u64,
    },
    #[error(
        "capacity {objects} is too small for these Waffle parameters: the proxy caches C = {cache} \
         objects and every batch reads B − f_D = {per_batch} real objects from storage, so the \
         store needs at least {needed} keys; raise --capacity or lower --waffle-batch / \
         --waffle-cache"
    )]
    /// The store is too small for `C` and `B`.
    TooFewObjects {
        /// `N`.
        objects: u64,
        /// `C`.
        cache: u64,
        /// `B − f_D`.
        per_batch: u64,
        /// The least `N` that works.
        needed: u64,
    },
    /// A parameter is beyond what the proxy supports.
    #[error("{what} is {value}, too large for Waffle (at most {max})")]
    TooLarge {
        /// Which parameter.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The largest supported.
        max: u64,
    },
    /// The batch interval is zero.
    #[error("--waffle-interval must be positive")]
    ZeroInterval,
    /// The write-back point is not in `[0, 1)`.
    #[error("{0}")]
    WriteBackAt(String),
}

/// Resolved and checked parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// `N`.
    pub objects: u64,
    /// `B`.
    pub batch: usize,
    /// `R`.
    pub real: usize,
    /// `f_D`.
    pub fake_dummy: usize,
    /// `C`.
    pub cache: usize,
    /// `D`.
    pub dummies: usize,
    /// The longest time between batches.
    pub batch_interval: Duration,
    /// When batches go out.
    pub timing: BatchTiming,
    /// From a batch's start on the schedule to its write-back leaving; `None` (eager timing):
    /// as soon as it is sealed.
    pub write_back_hold: Option<Duration>,
    /// Most slots waiting for a batch before clients are slowed down.
    pub max_pending: usize,
}

/// Largest count of any kind (objects are numbered with 32 bits).
const MAX_COUNT: u64 = u32::MAX as u64 - 1;

impl Params {
    /// Applies the defaults for a store of `objects` slots and checks the combination.
    pub fn resolve(objects: u64, options: &WaffleOptions) -> Result<Self, ParamError> {
        if options.batch_interval.is_zero() {
            return Err(ParamError::ZeroInterval);
        }
        if let Some(batch) = options.batch {
            return Self::with_batch(objects, u64::from(batch), options);
        }
        // The paper's batch, or the largest smaller one the store can hold.
        let top = (objects / 4).clamp(2, u64::from(PAPER_BATCH));
        let first = Self::with_batch(objects, top, options);
        if first.is_ok() {
            return first;
        }
        (2..top)
            .rev()
            .find_map(|batch| Self::with_batch(objects, batch, options).ok())
            .ok_or_else(|| first.expect_err("checked above"))
    }

    fn with_batch(objects: u64, batch: u64, options: &WaffleOptions) -> Result<Self, ParamError> {
        let share = |fraction: f64| (batch as f64 * fraction).round() as u64;
        let real = options.real.map_or(share(REAL_SHARE).max(1), u64::from);
        let fake_dummy = options
            .fake_dummy
            .map_or(share(FAKE_DUMMY_SHARE), u64::from);
        let least_cache = (batch + real).saturating_sub(fake_dummy);
        let cache = options.cache.unwrap_or_else(|| {
            let share = (objects as f64 * CACHE_SHARE).ceil() as u64;
            share.max(least_cache)
        });
        let fake_real = batch.saturating_sub(real + fake_dummy);
        let dummies = options.dummies.unwrap_or_else(|| {
            // Theorem 7.1's balance, (N−1)/(B−R−f_D) = D/f_D, rounded up.
            if fake_dummy == 0 || fake_real == 0 {
                0
            } else {
                (fake_dummy * objects.saturating_sub(1)).div_ceil(fake_real)
            }
        });

        for (what, value) in [
            ("--capacity", objects),
            ("--waffle-batch", batch),
            ("--waffle-cache", cache),
            ("--waffle-dummies", dummies),
        ] {
            if value > MAX_COUNT {
                return Err(ParamError::TooLarge {
                    what,
                    value,
                    max: MAX_COUNT,
                });
            }
        }
        if batch < 2 {
            return Err(ParamError::BatchTooSmall(batch));
        }
        if real == 0 {
            return Err(ParamError::NoRealRequests);
        }
        if fake_real == 0 {
            return Err(ParamError::NoFakeReal {
                batch,
                real,
                fake_dummy,
            });
        }
        if cache < least_cache {
            return Err(ParamError::CacheTooSmall {
                cache,
                needed: least_cache,
            });
        }
        let per_batch = batch - fake_dummy;
        if objects < cache + per_batch {
            return Err(ParamError::TooFewObjects {
                objects,
                cache,
                per_batch,
                needed: cache + per_batch,
            });
        }
        if fake_dummy == 0 && dummies > 0 {
            return Err(ParamError::DummiesNeverRead(dummies));
        }
        if dummies < fake_dummy {
            return Err(ParamError::TooFewDummies {
                dummies,
                fake_dummy,
            });
        }
        Ok(Self {
            objects,
            batch: batch as usize,
            real: real as usize,
            fake_dummy: fake_dummy as usize,
            cache: cache as usize,
            dummies: dummies as usize,
            batch_interval: options.batch_interval,
            timing: options.timing,
            write_back_hold: match options.timing {
                BatchTiming::Fixed => Some(
                    crate::schedule::write_back_hold(options.batch_interval, options.write_back_at)
                        .map_err(ParamError::WriteBackAt)?,
                ),
                BatchTiming::Eager => None,
            },
            max_pending: options.max_pending.unwrap_or(4 * real as usize).max(1),
        })
    }

    /// `B − R − f_D`: the fewest fake queries to real objects a batch makes.
    pub fn min_fake_real(&self) -> usize {
        self.batch - self.real - self.fake_dummy
    }

    /// Theorem 7.1: every object written to storage is read within `α` further batches,
    /// `α = ⌈max((N−1)/(B−R−f_D), D/f_D)⌉` (with `0/0 = 0`).
    pub fn alpha(&self) -> u64 {
        let reals = (self.objects - 1).div_ceil(self.min_fake_real() as u64);
        let dummies = match self.fake_dummy {
            0 => 0,
            f => (self.dummies as u64).div_ceil(f as u64),
        };
        reals.max(dummies)
    }

    /// Theorem 7.2: an object read from storage is written back only after more than `β`
    /// further batches, `β = ⌊C/(B−f_D+R) − 1⌋` (never negative once the cache is large enough).
    pub fn beta(&self) -> u64 {
        (self.cache / (self.batch - self.fake_dummy + self.real)) as u64 - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explicit(b: u32, r: u32, fd: u32, c: u64, d: u64) -> WaffleOptions {
        WaffleOptions {
            batch: Some(b),
            real: Some(r),
            fake_dummy: Some(fd),
            cache: Some(c),
            dummies: Some(d),
            ..WaffleOptions::default()
        }
    }

    /// Table 2 of the paper (N = 1M): the theoretical α and β of each security level.
    #[test]
    fn the_papers_table_2_bounds() {
        let n = 1_000_000;
        let high = Params::resolve(n, &explicit(10_000, 25, 3914, 990_000, 4000)).unwrap();
        assert_eq!((high.alpha(), high.beta()), (165, 161));
        let medium = Params::resolve(n, &explicit(2500, 1000, 500, 20_000, 350_000)).unwrap();
        assert_eq!((medium.alpha(), medium.beta()), (1000, 5));
        // "R = 0.8B − 1": one fake query to a real object per batch.
        let low = Params::resolve(n, &explicit(2500, 1999, 500, 20_000, 350_000)).unwrap();
        assert_eq!((low.alpha(), low.beta()), (999_999, 4));
    }

    #[test]
    fn paper_defaults_balance_the_two_alpha_ratios() {
        let p = Params::resolve(1 << 20, &WaffleOptions::default()).unwrap();
        assert_eq!(
            (p.batch, p.real, p.fake_dummy, p.cache),
            (2500, 1000, 500, 20_972)
        );
        // D = f_D (N−1)/(B−R−f_D) = 500 · 1048575 / 1000, rounded up.
        assert_eq!(p.dummies, 524_288);
        assert_eq!(p.alpha(), 1049);
        assert_eq!(p.beta(), 5);

        // `cloak up`'s 100,000 keys: the paper's batch, the cache raised to its minimum.
        let up = Params::resolve(100_000, &WaffleOptions::default()).unwrap();
        assert_eq!(
            (up.batch, up.real, up.fake_dummy, up.cache, up.dummies),
            (2500, 1000, 500, 3000, 50_000)
        );
        assert_eq!((up.alpha(), up.beta()), (100, 0));
    }

    #[test]
    fn small_stores_get_scaled_defaults() {
        for (n, want) in [
            (300, (75, 30, 15, 90, 150)),
            (50, (12, 5, 2, 15, 20)),
            (20, (5, 2, 1, 6, 10)),
            (5, (2, 1, 0, 3, 0)),
        ] {
            let p = Params::resolve(n, &WaffleOptions::default()).unwrap();
            assert_eq!(
                (p.batch, p.real, p.fake_dummy, p.cache, p.dummies),
                want,
                "N = {n}"
            );
            assert!(p.alpha() >= 1, "N = {n}");
        }
        assert!(matches!(
            Params::resolve(4, &WaffleOptions::default()),
            Err(ParamError::TooFewObjects { needed: 5, .. })
        ));
    }

    #[test]
    fn impossible_combinations_are_refused_with_the_flag_to_change() {
        let n = 1_000_000;
        let cases = [
            (explicit(100, 60, 40, 1000, 100), "plus --waffle-fake-dummy"),
            (
                explicit(100, 40, 20, 1000, 10),
                "must be at least --waffle-fake-dummy",
            ),
            (explicit(100, 40, 0, 1000, 10), "never be read"),
            (
                explicit(100, 40, 20, 119, 100),
                "--waffle-cache (C = 119) must be at least",
            ),
            (explicit(1, 1, 0, 1000, 0), "at least 2"),
            (explicit(100, 0, 20, 1000, 100), "at least 1"),
        ];
        for (options, text) in cases {
            let error = Params::resolve(n, &options).unwrap_err().to_string();
            assert!(error.contains(text), "{error}");
        }
        let error = Params::resolve(300, &explicit(2500, 1000, 500, 3000, 500))
            .unwrap_err()
            .to_string();
        assert!(error.contains("raise --capacity"), "{error}");
        let zero = WaffleOptions {
            batch_interval: Duration::ZERO,
            ..WaffleOptions::default()
        };
        assert_eq!(Params::resolve(n, &zero), Err(ParamError::ZeroInterval));
        // A batch given alone keeps the paper's proportions.
        let p = Params::resolve(
            10_000,
            &WaffleOptions {
                batch: Some(100),
                ..WaffleOptions::default()
            },
        )
        .unwrap();
        assert_eq!((p.real, p.fake_dummy, p.cache), (40, 20, 200));
    }
}
