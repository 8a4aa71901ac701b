//! The schemes a Cloak proxy can run, each a sans-io [`cloak_core::Scheme`].
//!
//! | name        | what the server learns                                   |
//! |-------------|----------------------------------------------------------|
//! | `cloak`     | nothing beyond the public budgets (paper's Theorem 1)    |
//! | `pancake`   | uniform label accesses while requests follow `π̂` (§4)   |
//! | `waffle`    | α,β-uniform accesses (paper's Theorems 7.1–7.3)          |
//! | `curious`   | when ops arrive; nothing about which keys (Theorem 6.1)  |
//! | `path-oram` | one uniformly random root-to-leaf path per op            |
//! | `encrypted` | which label every op touches (contents hidden)           |
//! | `unsafe`    | everything (plaintext pass-through; the speed ceiling)   |
//!
//! [`build`] turns a name and options into a running scheme; adding a scheme is one module and
//! one arm there.

pub mod cloak;
pub mod curious;
mod encrypted;
pub mod pancake;
pub mod path_oram;
mod plaintext;
pub mod schedule;
pub mod shell;
pub mod waffle;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use cloak_core::{ElementCodec, ElementFormat, Record, RecordLayout, Scheme, Slot};
use cloak_crypto::{KeyError, MasterKey, Prf, Sealer};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

pub use cloak::{BudgetError, Budgets, Cloak, CloakConfig};
pub use curious::{Curious, CuriousConfig};
pub use encrypted::Encrypted;
pub use pancake::{Pancake, PancakeOptions};
pub use path_oram::{PathOram, PathOramConfig};
pub use plaintext::Unsafe;
pub use shell::Shell;
pub use waffle::{BatchTiming, Waffle, WaffleOptions};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemeName {
    Cloak,
    Waffle,
    Pancake,
    Curious,
    Encrypted,
    Unsafe,
    PathOram,
}

impl SchemeName {
    pub const ALL: [SchemeName; 7] = [
        SchemeName::Cloak,
        SchemeName::Waffle,
        SchemeName::Pancake,
        SchemeName::PathOram,
        SchemeName::Curious,
        SchemeName::Encrypted,
        SchemeName::Unsafe,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SchemeName::Cloak => "cloak",
            SchemeName::Pancake => "pancake",
            SchemeName::Waffle => "waffle",
            SchemeName::Curious => "curious",
            SchemeName::Encrypted => "encrypted",
            SchemeName::Unsafe => "unsafe",
            SchemeName::PathOram => "path-oram",
        }
    }
}

impl fmt::Display for SchemeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SchemeName {
    type Err = BuildError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| BuildError::UnknownScheme(s.to_string()))
    }
}

/// What every scheme needs to know about the store.
#[derive(Clone, Debug)]
pub struct StoreSpec {
    /// Keys the store must hold.
    pub capacity: u64,
    pub layout: RecordLayout,
    /// Seed for the scheme's CSPRNG; `None` seeds it from the operating system. Fixed seeds are
    /// for reproducible tests and simulations, never for deployments.
    pub seed: Option<u64>,
}

/// Where a new scheme instance begins: empty, or with the records recovered after a crash.
#[derive(Clone, Debug, Default)]
pub struct Start {
    /// Records the store holds from the start; other slots are empty.
    pub records: Vec<(Slot, Record)>,
    /// Every generation this instance binds into an element is above this, so no element from
    /// an earlier run can pass for a current one. Runs take it from their incarnation number.
    pub generation_base: u64,
}

impl Start {
    /// Generations are `incarnation << 40 | counter`: a trillion writes per run.
    pub fn generation_base(incarnation: u64) -> u64 {
        incarnation << 40
    }
}

/// Cloak's parameters (paper §6–7; defaults are the paper's).
#[derive(Clone, Debug)]
pub struct CloakOptions {
    pub first_budget: u32,
    pub zipf_exponent: f64,
    /// Explicit budgets `b_1, b_2, …`; overrides `first_budget` and `zipf_exponent`.
    pub budgets: Option<Vec<u32>>,
    pub batch_interval: Duration,
    /// When a batch's write-back leaves, as a fraction of `batch_interval` after the batch's
    /// start on the schedule (see [`schedule`]).
    pub write_back_at: f64,
    pub cache_size: usize,
    pub max_pending: Option<usize>,
    /// Seal with counter nonces: Cloak seals each write-back in the order it read, so every
    /// nonce names the read position of its element and the server can undo the shuffle. Only
    /// for tests that show the auditor and the wire checks catch that leak; the `leak-demo`
    /// feature is enabled by test crates' dev-dependencies alone, never in a build users run.
    /// [`LEAK_DEMO_ENV`] in the environment does the same (for tests of the built binary).
    #[cfg(feature = "leak-demo")]
    pub leak_demo_counter_nonces: bool,
}

impl Default for CloakOptions {
    fn default() -> Self {
        Self {
            first_budget: 433,
            zipf_exponent: 1.0,
            budgets: None,
            batch_interval: Duration::from_millis(20),
            write_back_at: schedule::DEFAULT_WRITE_BACK_AT,
            cache_size: 1000,
            max_pending: None,
            #[cfg(feature = "leak-demo")]
            leak_demo_counter_nonces: false,
        }
    }
}

/// CURIOUS's parameters (paper §6; defaults and derived values in `curious::params`).
#[derive(Clone, Debug)]
pub struct CuriousOptions {
    /// Number of subORAMs `m`; `None`: `⌈√capacity⌉`.
    pub partitions: Option<u64>,
    /// Children per tree node, `b` (Table 7: 3).
    pub arity: u32,
    /// Blocks per bucket, `z` (Table 7: 5).
    pub bucket_size: u32,
    /// Cached blocks evicted to the subORAM of every access, `c` (at least 2).
    pub evictions: u32,
    /// Most accesses scheduled at once (the paper's semaphore, 128).
    pub max_in_flight: usize,
    /// Most blocks in the eviction cache before ops are refused; `None`: `4m + 256`.
    pub cache_limit: Option<usize>,
    /// Accesses a block stays readable at the proxy after its subORAM is drawn; `None`: `16m`.
    /// Not in the paper: it keeps a hot key's fetch from following its eviction (see
    /// `curious::retention`); 0 restores the paper's behaviour.
    pub retention: Option<u64>,
}

impl Default for CuriousOptions {
    fn default() -> Self {
        Self {
            partitions: None,
            arity: 3,
            bucket_size: 5,
            evictions: 2,
            max_in_flight: 128,
            cache_limit: None,
            retention: None,
        }
    }
}

/// Path ORAM's parameters (defaults: `Z = 4` and the stash bound 89 that CURIOUS §3.2 takes
/// from Path ORAM's Table 3).
#[derive(Clone, Debug)]
pub struct PathOramOptions {
    /// Blocks per bucket, `Z`.
    pub bucket_size: usize,
    /// Most blocks the stash may hold after an access.
    pub stash_limit: usize,
}

impl Default for PathOramOptions {
    fn default() -> Self {
        Self {
            bucket_size: 4,
            stash_limit: 89,
        }
    }
}

/// Parameters of every scheme, each used only by its scheme.
#[derive(Clone, Debug, Default)]
pub struct SchemeOptions {
    pub cloak: CloakOptions,
    pub pancake: PancakeOptions,
    pub waffle: WaffleOptions,
    pub curious: CuriousOptions,
    pub path_oram: PathOramOptions,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "unknown scheme {0:?}; choose one of: cloak, waffle, pancake, path-oram, curious, \
         encrypted, unsafe"
    )]
    UnknownScheme(String),
    #[error("capacity must be between 1 and {max}, got {got}")]
    Capacity { got: u64, max: u64 },
    #[error(transparent)]
    Budgets(#[from] BudgetError),
    #[error(
        "the budgets give {given} elements but the store needs {needed}; add budgets or raise them"
    )]
    BudgetsTooSmall { given: u64, needed: u64 },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Waffle(#[from] waffle::ParamError),
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Set in the environment of a process built with the `leak-demo` feature (the binary as the
/// tests build it), it makes every Cloak seal with counter nonces, as
/// [`CloakOptions::leak_demo_counter_nonces`] does. Builds without the feature never read it.
#[cfg(feature = "leak-demo")]
pub const LEAK_DEMO_ENV: &str = "CLOAK_LEAK_DEMO_COUNTER_NONCES";

/// Largest store any scheme supports (slots are 32-bit inside the schemes).
pub const MAX_CAPACITY: u64 = u32::MAX as u64 - 1;

/// How the named scheme encodes its elements, for recovery scans and for tools that write a
/// store for it.
pub fn element_format(
    name: SchemeName,
    layout: RecordLayout,
    master: &MasterKey,
) -> Result<ElementFormat, BuildError> {
    Ok(match name {
        SchemeName::Unsafe => ElementFormat::Plain(layout),
        _ => ElementFormat::Sealed(ElementCodec::new(layout, Sealer::new(master)?)),
    })
}

/// Builds the named scheme for `store`, with its keys derived from `master`, holding `start`'s
/// records.
pub fn build(
    name: SchemeName,
    store: &StoreSpec,
    options: &SchemeOptions,
    master: &MasterKey,
    start: Start,
) -> Result<Box<dyn Scheme>, BuildError> {
    if let Some((slot, _)) = start
        .records
        .iter()
        .find(|(s, r)| *s >= store.capacity && !r.is_empty())
    {
        return Err(BuildError::Invalid(format!(
            "recovered slot {slot} is beyond the capacity {}; start with the capacity the store \
             was created with",
            store.capacity
        )));
    }
    if store.capacity == 0 || store.capacity > MAX_CAPACITY {
        return Err(BuildError::Capacity {
            got: store.capacity,
            max: MAX_CAPACITY,
        });
    }
    let rng = match store.seed {
        Some(seed) => ChaCha20Rng::seed_from_u64(seed),
        None => ChaCha20Rng::from_os_rng(),
    };
    let codec = || -> Result<ElementCodec, BuildError> {
        Ok(ElementCodec::new(store.layout, Sealer::new(master)?))
    };
    Ok(match name {
        SchemeName::Cloak => {
            let o = &options.cloak;
            let budgets = match &o.budgets {
                Some(list) => Budgets::explicit(list.clone())?,
                None => Budgets::zipf(store.capacity, o.first_budget, o.zipf_exponent)?,
            };
            if budgets.capacity() < store.capacity {
                return Err(BuildError::BudgetsTooSmall {
                    given: budgets.capacity(),
                    needed: store.capacity,
                });
            }
            if budgets.capacity() > MAX_CAPACITY {
                return Err(BuildError::Capacity {
                    got: budgets.capacity(),
                    max: MAX_CAPACITY,
                });
            }
            if o.batch_interval.is_zero() {
                return Err(BuildError::Invalid(
                    "the batch interval must be positive".into(),
                ));
            }
            let config = CloakConfig {
                budgets,
                batch_interval: o.batch_interval,
                write_back_hold: schedule::write_back_hold(o.batch_interval, o.write_back_at)
                    .map_err(BuildError::Invalid)?,
                cache_size: o.cache_size,
                max_pending: o.max_pending,
            };
            #[cfg(feature = "leak-demo")]
            let codec = || -> Result<ElementCodec, BuildError> {
                let leaky = o.leak_demo_counter_nonces || std::env::var_os(LEAK_DEMO_ENV).is_some();
                Ok(match leaky {
                    true => ElementCodec::new(store.layout, Sealer::with_counter_nonces(master)?),
                    false => codec()?,
                })
            };
            Box::new(Shell::new(Cloak::new(config, codec()?, rng, start)))
        }
        SchemeName::Pancake => {
            let o = &options.pancake;
            let estimate = match &o.estimate {
                Some(estimate) => {
                    estimate
                        .check_slots(store.capacity)
                        .map_err(|e| BuildError::Invalid(format!("pancake distribution: {e}")))?;
                    estimate.clone()
                }
                None => pancake::Estimate::uniform(store.capacity as usize),
            };
            if !(1..=1024).contains(&o.batch_size) {
                return Err(BuildError::Invalid(format!(
                    "the pancake batch size must be between 1 and 1024 (the paper uses 3), got {}",
                    o.batch_size
                )));
            }
            if o.window == 0 {
                return Err(BuildError::Invalid(
                    "the pancake detection window must hold at least one request".into(),
                ));
            }
            if !(o.significance > 0.0 && o.significance < 1.0) {
                return Err(BuildError::Invalid(format!(
                    "the pancake KS significance must be strictly between 0 and 1 (the paper \
                     uses 0.05), got {}",
                    o.significance
                )));
            }
            if o.idle_batch_interval.is_zero() {
                return Err(BuildError::Invalid(
                    "the pancake idle batch interval must be positive".into(),
                ));
            }
            Box::new(Shell::new(Pancake::new(
                o,
                estimate,
                Prf::new(master, "pancake"),
                codec()?,
                rng,
                start,
            )))
        }
        SchemeName::Waffle => {
            let params = waffle::Params::resolve(store.capacity, &options.waffle)?;
            Box::new(Shell::new(Waffle::new(
                params,
                codec()?,
                master,
                rng,
                start,
            )))
        }
        SchemeName::Curious => {
            let config = CuriousConfig::new(store.capacity, &options.curious)
                .map_err(BuildError::Invalid)?;
            let layout = config.layout().map_err(BuildError::Invalid)?;
            Box::new(Shell::new(Curious::new(
                config,
                layout,
                codec()?,
                rng,
                start,
            )))
        }
        SchemeName::Encrypted => Box::new(Shell::new(Encrypted::new(
            store.capacity,
            Prf::new(master, "encrypted"),
            codec()?,
            start,
        ))),
        SchemeName::Unsafe => {
            Box::new(Shell::new(Unsafe::new(store.capacity, store.layout, start)))
        }
        SchemeName::PathOram => {
            let o = &options.path_oram;
            check_path_oram(store, o)?;
            let config = PathOramConfig {
                bucket_size: o.bucket_size,
                stash_limit: o.stash_limit,
            };
            Box::new(Shell::new(PathOram::new(
                config,
                store.capacity,
                codec()?,
                rng,
                start,
            )))
        }
    })
}

/// Largest Path ORAM store: the proxy keeps a generation per bucket (about `2N` of them).
pub const PATH_ORAM_MAX_CAPACITY: u64 = 1 << 28;
/// Largest path read or written in one storage request.
const PATH_ORAM_MAX_PATH_BYTES: u64 = 256 << 20;
const PATH_ORAM_MAX_BUCKET_SIZE: usize = 64;

fn check_path_oram(store: &StoreSpec, o: &PathOramOptions) -> Result<(), BuildError> {
    if !(1..=PATH_ORAM_MAX_BUCKET_SIZE).contains(&o.bucket_size) {
        return Err(BuildError::Invalid(format!(
            "--oram-bucket-size must be between 1 and {PATH_ORAM_MAX_BUCKET_SIZE} (Path ORAM \
             uses 4), got {}",
            o.bucket_size
        )));
    }
    if o.stash_limit == 0 {
        return Err(BuildError::Invalid(
            "--oram-stash-limit must be at least 1 (the default, 89, suits Z = 4)".into(),
        ));
    }
    if store.capacity > PATH_ORAM_MAX_CAPACITY {
        return Err(BuildError::Capacity {
            got: store.capacity,
            max: PATH_ORAM_MAX_CAPACITY,
        });
    }
    let tree = path_oram::Tree::for_capacity(store.capacity);
    let bucket = (o.bucket_size * store.layout.encoded_len() + cloak_crypto::SEAL_OVERHEAD) as u64;
    let path = bucket * u64::from(tree.levels());
    if path > PATH_ORAM_MAX_PATH_BYTES {
        return Err(BuildError::Invalid(format!(
            "a Path ORAM path of {} buckets of {bucket} bytes is {path} bytes, more than one \
             storage request may carry ({PATH_ORAM_MAX_PATH_BYTES}); lower --value-size or \
             --oram-bucket-size",
            tree.levels()
        )));
    }
    Ok(())
}
