//! CURIOUS's parameters: the paper's defaults, the ones it leaves open (derived from the
//! capacity here), and their validation.
//!
//! - `b = 3`, `z = 5`: the tree-based CURIOUS of Table 7.
//! - `m` (partitions), when not given: `⌈√n⌉`, ObliviStore's choice of partition count for
//!   partition-based ORAMs. Each subORAM then holds about `√n` blocks, so an access reads and
//!   writes `log_b √n + 1` buckets, and the eviction cache holds `O(√n)` blocks at the proxy
//!   (a large, growing outsource ratio), while `m` subORAMs leave room for `m` accesses at once.
//! - Tree depth: the smallest with `z · b^depth ≥ ⌈n/m⌉` (at least 1): the leaves alone hold a
//!   subORAM's nominal load, so a tree is at most about two-thirds full on average.
//! - `c = 2` evictions per access: each access that fetches a block adds one to the cache, and a
//!   subORAM is accessed exactly as often as blocks are assigned to it, so evicting one per
//!   access cannot keep up (the cache grows without bound) and two keep it near two blocks per
//!   subORAM (1.9 measured for 100,000 keys; three give 1.35).
//! - At most 128 accesses in flight, the paper's semaphore.
//! - Cache limit `4m + 256` blocks, about twice the typical occupancy plus room for small stores.
//! - Retention `16m` accesses (not in the paper; see `retention`): blocks stay readable at the
//!   proxy that long after their subORAM is drawn, about `16m` blocks at most.

use cloak_core::RecordLayout;

use super::Curious;
use super::geometry::{Layout, Tree};
use crate::{BuildError, Founding};

/// Children per tree node, `b` (Table 7).
pub const DEFAULT_ARITY: u32 = 3;
/// Blocks per bucket, `z` (Table 7).
pub const DEFAULT_BUCKET_SIZE: u32 = 5;
/// Cached blocks evicted to the subORAM of every access, `c` (see above: two keep up).
pub const DEFAULT_EVICTIONS: u32 = 2;
/// Most accesses scheduled at once (the paper's semaphore).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 128;

/// CURIOUS's parameters as given (paper §6); unset ones are derived from the capacity.
#[derive(Clone, Debug)]
pub struct CuriousOptions {
    /// Number of subORAMs `m`; `None`: `⌈√capacity⌉`.
    pub partitions: Option<u64>,
    /// Children per tree node, `b`.
    pub arity: u32,
    /// Blocks per bucket, `z`.
    pub bucket_size: u32,
    /// Cached blocks evicted to the subORAM of every access, `c` (at least 2).
    pub evictions: u32,
    /// Most accesses scheduled at once.
    pub max_in_flight: usize,
    /// Most blocks in the eviction cache before reads that would add one are refused (writes
    /// are kept, and may take it past); `None`: `4m + 256`.
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
            arity: DEFAULT_ARITY,
            bucket_size: DEFAULT_BUCKET_SIZE,
            evictions: DEFAULT_EVICTIONS,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            cache_limit: None,
            retention: None,
        }
    }
}

impl CuriousOptions {
    /// The size of every element (a bucket of `bucket_size` records sealed together) for
    /// records of `layout`.
    pub fn element_len(&self, layout: RecordLayout) -> usize {
        layout.sealed_len(self.bucket_size as usize)
    }

    /// A CURIOUS store for `store` under `master`'s keys, holding `start`'s records.
    pub(crate) fn build(&self, from: Founding<'_>) -> Result<Curious, BuildError> {
        let (store, master) = (from.store, from.master);
        let config = CuriousConfig::new(store.capacity, self).map_err(BuildError::Invalid)?;
        let layout = config.layout().map_err(BuildError::Invalid)?;
        let codec = crate::sealed_codec(store, master)?;
        Ok(Curious::new(config, layout, codec, from.rng, from.start))
    }
}

/// A CURIOUS store's parameters, checked.
#[derive(Clone, Debug)]
pub struct CuriousConfig {
    /// Keys the store holds, `n`.
    pub capacity: u64,
    /// Number of subORAMs, `m`.
    pub partitions: u32,
    /// Children per tree node, `b`.
    pub arity: u32,
    /// Blocks per bucket, `z`.
    pub bucket_size: usize,
    /// Cached blocks evicted to the subORAM of every access, `c`.
    pub evictions: usize,
    /// Most accesses scheduled at once.
    pub max_in_flight: usize,
    /// Most blocks in the eviction cache before reads that would add one are refused (writes
    /// are kept, and may take it past).
    pub cache_limit: usize,
    /// Accesses a block stays readable at the proxy after its subORAM is drawn (`retention`).
    pub retention: u64,
}

/// The default number of subORAMs for `capacity` keys.
pub fn default_partitions(capacity: u64) -> u64 {
    let mut m = (capacity as f64).sqrt().ceil() as u64;
    // Float rounding: make it exactly ⌈√n⌉.
    while m > 1 && (m - 1).saturating_mul(m - 1) >= capacity {
        m -= 1;
    }
    while m.saturating_mul(m) < capacity {
        m += 1;
    }
    m.max(1)
}

/// The default retention window: `16m` accesses, after which a block's subORAM has been accessed
/// (and the block evicted) for unrelated reasons except with probability about `e^−16`.
pub fn default_retention(partitions: u32) -> u64 {
    16 * u64::from(partitions)
}

/// The default eviction-cache limit for `partitions` subORAMs.
pub fn default_cache_limit(partitions: u32) -> usize {
    4 * partitions as usize + 256
}

impl CuriousConfig {
    /// The options for a store of `capacity` keys with the defaults applied, checked; the
    /// error says which flag is wrong.
    pub fn new(capacity: u64, o: &CuriousOptions) -> Result<Self, String> {
        if o.arity < 2 {
            return Err(format!(
                "--curious-arity must be at least 2 (got {})",
                o.arity
            ));
        }
        if !(1..=64).contains(&o.bucket_size) {
            return Err(format!(
                "--curious-bucket-size must be between 1 and 64 blocks (got {})",
                o.bucket_size
            ));
        }
        if o.bucket_size <= 2 {
            // Allowed, but measured in the simulator (a review of the kept writes): with one-
            // or two-block buckets evictions often find no room on their path, and writes,
            // which the cache keeps past its limit, held it at 340–1,407 blocks against a
            // limit of 40, refusing reads meanwhile.
            tracing::warn!(
                bucket_size = o.bucket_size,
                "with buckets of one or two blocks the CURIOUS eviction cache overflows often: \
                 under writes it grows past --curious-cache-limit, and reads that would add to \
                 it are refused meanwhile; 3 or more is recommended (5 by default)"
            );
        }
        if o.evictions < 2 {
            return Err(format!(
                "--curious-evictions must be at least 2 (got {}): every access that fetches a \
                 block adds one to the eviction cache, so evicting fewer than two per access lets \
                 the cache grow without bound",
                o.evictions
            ));
        }
        if o.max_in_flight == 0 {
            return Err("--curious-max-in-flight must be at least 1".into());
        }
        let partitions = o.partitions.unwrap_or_else(|| default_partitions(capacity));
        if partitions == 0 || partitions > capacity {
            return Err(format!(
                "--curious-partitions must be between 1 and the capacity {capacity} (got \
                 {partitions})"
            ));
        }
        let partitions = u32::try_from(partitions).map_err(|_| "too many partitions")?;
        let cache_limit = o
            .cache_limit
            .unwrap_or_else(|| default_cache_limit(partitions));
        if cache_limit < o.evictions as usize {
            return Err(format!(
                "--curious-cache-limit must be at least the evictions per access ({})",
                o.evictions
            ));
        }
        let retention = o.retention.unwrap_or_else(|| default_retention(partitions));
        Ok(Self {
            retention,
            capacity,
            partitions,
            arity: o.arity,
            bucket_size: o.bucket_size as usize,
            evictions: o.evictions as usize,
            max_in_flight: o.max_in_flight,
            cache_limit,
        })
    }

    /// Blocks a subORAM holds on average when the store is full.
    pub fn blocks_per_partition(&self) -> u64 {
        self.capacity.div_ceil(u64::from(self.partitions))
    }

    /// Where the buckets live: `m` trees, then a drain area that holds a full cache.
    pub fn layout(&self) -> Result<Layout, String> {
        let tree = Tree::for_blocks(self.arity, self.bucket_size, self.blocks_per_partition())
            .ok_or("the subORAM trees would have more than 2^32 leaves; add partitions")?;
        Ok(Layout {
            tree,
            partitions: self.partitions,
            drain_buckets: (self.cache_limit as u64).div_ceil(self.bucket_size as u64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_default_to_the_square_root_of_the_capacity() {
        for (n, m) in [
            (1, 1),
            (2, 2),
            (4, 2),
            (5, 3),
            (100_000, 317),
            (1_000_000, 1000),
        ] {
            assert_eq!(default_partitions(n), m, "capacity {n}");
        }
        let config = CuriousConfig::new(100_000, &CuriousOptions::default()).unwrap();
        let layout = config.layout().unwrap();
        assert_eq!((config.partitions, layout.tree.depth()), (317, 4));
        assert_eq!(config.cache_limit, 4 * 317 + 256);
        assert_eq!(layout.drain_buckets, (4 * 317 + 256_u64).div_ceil(5));
    }

    #[test]
    fn bad_parameters_are_explained() {
        let bad = |o: CuriousOptions| CuriousConfig::new(1000, &o).unwrap_err();
        let d = CuriousOptions::default;
        assert!(bad(CuriousOptions { arity: 1, ..d() }).contains("arity"));
        assert!(
            bad(CuriousOptions {
                bucket_size: 0,
                ..d()
            })
            .contains("bucket-size")
        );
        assert!(
            bad(CuriousOptions {
                evictions: 1,
                ..d()
            })
            .contains("without bound")
        );
        assert!(
            bad(CuriousOptions {
                partitions: Some(1001),
                ..d()
            })
            .contains("partitions")
        );
        assert!(
            bad(CuriousOptions {
                cache_limit: Some(1),
                ..d()
            })
            .contains("cache-limit")
        );
    }
}
