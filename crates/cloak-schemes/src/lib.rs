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
//! Each scheme is its algorithm and nothing else: it implements [`shell::Algorithm`] (what to
//! send, what to do with an answer, what to do when storage is down, its own deadlines), and
//! the [`Shell`] around it implements [`cloak_core::Scheme`] once for all of them (in-flight
//! requests, reply checks, retries, timers, the outbox, the fill's pacing, the counters). Each
//! scheme's options, defaults (one constant each) and validation live in its own module.
//!
//! [`build`] turns a name and options into a running scheme; adding a scheme is one module (an
//! `Algorithm` and its options) and one arm there.

#![warn(missing_docs)]

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

use cloak_core::{
    ElementCodec, ElementFormat, Record, RecordLayout, RecoveredRecords, Scheme, Slot,
};
use cloak_crypto::{KeyError, MasterKey, Prf, Sealer};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

pub use cloak::{BudgetError, Budgets, Cloak, CloakConfig, CloakOptions};
pub use curious::{Curious, CuriousConfig, CuriousOptions};
pub use encrypted::Encrypted;
pub use pancake::{Pancake, PancakeOptions};
pub use path_oram::{PathOram, PathOramConfig, PathOramOptions};
pub use plaintext::Unsafe;
use shell::Algorithm;
pub use shell::Shell;
pub use shell::fill::FillClock;
pub use waffle::{BatchTiming, Waffle, WaffleOptions};

/// The schemes `--scheme` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemeName {
    /// `cloak`: this paper's scheme.
    Cloak,
    /// `waffle`: Waffle (Maiyya et al.).
    Waffle,
    /// `pancake`: Pancake (Grubbs et al.).
    Pancake,
    /// `curious`: CURIOUS, tree-based.
    Curious,
    /// `encrypted`: sealed values under fixed labels, no hiding of accesses.
    Encrypted,
    /// `unsafe`: plaintext pass-through.
    Unsafe,
    /// `path-oram`: Path ORAM.
    PathOram,
}

impl SchemeName {
    /// Every scheme, in the order listings show them.
    pub const ALL: [SchemeName; 7] = [
        SchemeName::Cloak,
        SchemeName::Waffle,
        SchemeName::Pancake,
        SchemeName::PathOram,
        SchemeName::Curious,
        SchemeName::Encrypted,
        SchemeName::Unsafe,
    ];

    /// The name `--scheme` takes.
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
    /// The largest key and value every element holds.
    pub layout: RecordLayout,
    /// Seed for the scheme's CSPRNG; `None` seeds it from the operating system. Fixed seeds are
    /// for reproducible tests and simulations, never for deployments.
    pub seed: Option<u64>,
}

/// Where a new scheme instance begins: empty, or with the records recovered after a crash.
#[derive(Debug, Default)]
pub struct Start {
    /// Records the store holds from the start; other slots are empty. Their values wait in
    /// recovery's spool on local disk: every scheme reads them back a chunk at a time as its
    /// fill writes them, so a restart never holds every value at once (issue 17).
    pub records: RecoveredRecords,
    /// Every generation this instance binds into an element is above this, so no element from
    /// an earlier run can pass for a current one. Runs take it from their incarnation number.
    pub generation_base: u64,
    /// The public clock a restart's fill runs on (see [`shell::fill`]); `None` fills as fast
    /// as it can (records handed over by a test or tool, with nothing to hide from a server).
    pub fill_clock: Option<FillClock>,
}

impl Start {
    /// Generations are `incarnation << 40 | counter`: a trillion writes per run.
    pub fn generation_base(incarnation: u64) -> u64 {
        incarnation << 40
    }

    /// A start with `records` in memory (tests, tools).
    pub fn with(records: Vec<(Slot, Record)>, generation_base: u64) -> Self {
        Self {
            records: records.into(),
            generation_base,
            fill_clock: None,
        }
    }
}

/// Parameters of every scheme, each used only by its scheme.
#[derive(Clone, Debug, Default)]
pub struct SchemeOptions {
    /// Cloak's.
    pub cloak: CloakOptions,
    /// Pancake's.
    pub pancake: PancakeOptions,
    /// Waffle's.
    pub waffle: WaffleOptions,
    /// CURIOUS's.
    pub curious: CuriousOptions,
    /// Path ORAM's.
    pub path_oram: PathOramOptions,
}

impl SchemeOptions {
    /// The largest element `name` writes for records of `layout` with these options, in bytes:
    /// public (the storage server sees every element's size), and what bounds storage's answers
    /// to reads. Each arm is the function the scheme sizes its elements with, so a scheme whose
    /// elements change size changes its bound with them.
    pub fn largest_element(&self, name: SchemeName, layout: RecordLayout) -> usize {
        match name {
            // One sealed record per element (`ElementCodec::element_len`).
            SchemeName::Cloak
            | SchemeName::Waffle
            | SchemeName::Pancake
            | SchemeName::Encrypted => layout.sealed_len(1),
            SchemeName::PathOram => self.path_oram.element_len(layout),
            SchemeName::Curious => self.curious.element_len(layout),
            SchemeName::Unsafe => plaintext::largest_element(layout),
        }
    }

    /// The one length of every element `name`'s stores hold for records of `layout`, if there
    /// is one: a dense scheme's elements each seal one record, whoever wrote them (the proxy,
    /// or a tool's preload through `ElementFormat::encode`), so recovery takes an element of
    /// any other length for damage without opening it. A tree scheme's buckets seal several
    /// records (and a preload's elements one), and `unsafe` writes records as long as they are.
    pub fn exact_element(&self, name: SchemeName, layout: RecordLayout) -> Option<usize> {
        match name {
            SchemeName::Cloak
            | SchemeName::Waffle
            | SchemeName::Pancake
            | SchemeName::Encrypted => Some(layout.sealed_len(1)),
            SchemeName::PathOram | SchemeName::Curious | SchemeName::Unsafe => None,
        }
    }
}

/// Why a scheme cannot be built with these options.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "unknown scheme {0:?}; choose one of: cloak, waffle, pancake, path-oram, curious, \
         encrypted, unsafe"
    )]
    /// No scheme has this name.
    UnknownScheme(String),
    /// The store is empty or larger than the scheme supports.
    #[error("capacity must be between 1 and {max}, got {got}")]
    Capacity {
        /// The capacity asked for.
        got: u64,
        /// The largest supported.
        max: u64,
    },
    /// Cloak's budgets are invalid.
    #[error(transparent)]
    Budgets(#[from] BudgetError),
    #[error(
        "the budgets give {given} elements but the store needs {needed}; add budgets or raise them"
    )]
    /// Cloak's budgets give fewer elements than the store needs.
    BudgetsTooSmall {
        /// Elements the budgets give.
        given: u64,
        /// Keys the store needs.
        needed: u64,
    },
    /// An option is out of range (the message names it).
    #[error("{0}")]
    Invalid(String),
    /// Waffle's parameters do not fit together.
    #[error(transparent)]
    Waffle(#[from] waffle::ParamError),
    /// The key material cannot be derived.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Set in the environment of a process built with the `leak-demo` feature (the binary as the
/// tests build it), it makes every Cloak seal with counter nonces, as
/// [`CloakOptions::leak_demo_counter_nonces`] does. Builds without the feature never read it.
#[cfg(feature = "leak-demo")]
pub const LEAK_DEMO_ENV: &str = "CLOAK_LEAK_DEMO_COUNTER_NONCES";

/// Set in the environment of a process built with the `leak-demo` feature, it makes every
/// Cloak start a batch as soon as the one before is done while client requests wait, instead
/// of at its grid point: batches then come faster the busier the clients are, as when batches
/// were started by the core's loop (issue 12 §3), the timing leak the wire tests must catch.
/// Builds without the feature never read it.
#[cfg(feature = "leak-demo")]
pub const LEAK_DEMO_INTAKE_BATCHES_ENV: &str = "CLOAK_LEAK_DEMO_INTAKE_BATCHES";

/// Set in the environment of a process built with the `leak-demo` feature, it makes every
/// scheme's restart fill send each request as soon as it is prepared, without the fill's public
/// clock (`shell::fill`): the pause after the scan and the gaps between fill requests then follow
/// how many records the store holds (review finding 6), the leak `fill_timing` must catch.
/// Builds without the feature never read it.
#[cfg(feature = "leak-demo")]
pub const LEAK_DEMO_UNPACED_FILL_ENV: &str = "CLOAK_LEAK_DEMO_UNPACED_FILL";

/// Set in the environment of a process built with the `leak-demo` feature, it makes every
/// scheme time what follows a storage answer from when the proxy handled the answer instead of
/// when it arrived (`cloak_core::Scheme::handle_storage`): a restart's fill request that leaves
/// an interval after an answer the server held then leaves later the busier the proxy was with
/// clients, the leak `fill_timing` must catch. Builds without the feature never read it.
#[cfg(feature = "leak-demo")]
pub const LEAK_DEMO_ANSWERS_HANDLED_ENV: &str = "CLOAK_LEAK_DEMO_ANSWERS_HANDLED";

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

/// What every scheme is built from: the store, the master key its keys derive from, its CSPRNG
/// and the records it starts with.
pub(crate) struct Founding<'a> {
    store: &'a StoreSpec,
    master: &'a MasterKey,
    rng: ChaCha20Rng,
    start: Start,
}

/// The sealed-element codec every scheme but `unsafe` stores its elements with.
fn sealed_codec(store: &StoreSpec, master: &MasterKey) -> Result<ElementCodec, BuildError> {
    Ok(ElementCodec::new(store.layout, Sealer::new(master)?))
}

/// Builds the named scheme for `store`, with its keys derived from `master`, holding `start`'s
/// records: the checks every scheme shares, then the scheme's own options build it.
pub fn build(
    name: SchemeName,
    store: &StoreSpec,
    options: &SchemeOptions,
    master: &MasterKey,
    start: Start,
) -> Result<Box<dyn Scheme>, BuildError> {
    if let Some((slot, _, _)) = start
        .records
        .iter()
        .find(|(s, _, key)| *s >= store.capacity && !key.is_empty())
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
    let from = Founding {
        store,
        master,
        rng,
        start,
    };
    Ok(match name {
        SchemeName::Cloak => running(options.cloak.build(from)?),
        SchemeName::Pancake => running(options.pancake.build(from)?),
        SchemeName::Waffle => running(options.waffle.build(from)?),
        SchemeName::Curious => running(options.curious.build(from)?),
        SchemeName::PathOram => running(options.path_oram.build(from)?),
        SchemeName::Encrypted => running(Encrypted::new(
            store.capacity,
            Prf::new(master, "encrypted"),
            sealed_codec(store, master)?,
            from.start,
        )),
        SchemeName::Unsafe => running(Unsafe::new(store.capacity, store.layout, from.start)),
    })
}

/// `algorithm` in its shell, as the driver takes it.
fn running<A: Algorithm + 'static>(algorithm: A) -> Box<dyn Scheme> {
    Box::new(Shell::new(algorithm))
}
