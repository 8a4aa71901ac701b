//! Path ORAM's options, their defaults (`Z = 4` and the stash bound 89 that CURIOUS §3.2 takes
//! from Path ORAM's Table 3) and their validation.

use cloak_core::RecordLayout;

use super::{PathOram, PathOramConfig, Tree};
use crate::{BuildError, Founding, StoreSpec};

/// Blocks per bucket, `Z`.
pub const DEFAULT_BUCKET_SIZE: usize = 4;
/// Most blocks the stash may hold after an access (suits `Z = 4`).
pub const DEFAULT_STASH_LIMIT: usize = 89;
/// Largest Path ORAM store: the proxy keeps a generation per bucket (about `2N` of them).
pub const MAX_CAPACITY: u64 = 1 << 28;
/// Largest path read or written in one storage request.
const MAX_PATH_BYTES: u64 = 256 << 20;
const MAX_BUCKET_SIZE: usize = 64;

/// Path ORAM's parameters.
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
            bucket_size: DEFAULT_BUCKET_SIZE,
            stash_limit: DEFAULT_STASH_LIMIT,
        }
    }
}

impl PathOramOptions {
    /// The size of every element (a bucket of `Z` records sealed together) for records of
    /// `layout`.
    pub fn element_len(&self, layout: RecordLayout) -> usize {
        layout.sealed_len(self.bucket_size)
    }

    /// The options, checked against `store`.
    pub fn config(&self, store: &StoreSpec) -> Result<PathOramConfig, BuildError> {
        if !(1..=MAX_BUCKET_SIZE).contains(&self.bucket_size) {
            return Err(BuildError::Invalid(format!(
                "--oram-bucket-size must be between 1 and {MAX_BUCKET_SIZE} (Path ORAM uses \
                 {DEFAULT_BUCKET_SIZE}), got {}",
                self.bucket_size
            )));
        }
        if self.stash_limit == 0 {
            return Err(BuildError::Invalid(format!(
                "--oram-stash-limit must be at least 1 (the default, {DEFAULT_STASH_LIMIT}, suits \
                 Z = {DEFAULT_BUCKET_SIZE})"
            )));
        }
        if store.capacity > MAX_CAPACITY {
            return Err(BuildError::Capacity {
                got: store.capacity,
                max: MAX_CAPACITY,
            });
        }
        let tree = Tree::for_capacity(store.capacity);
        let bucket = self.element_len(store.layout) as u64;
        let path = bucket * u64::from(tree.levels());
        if path > MAX_PATH_BYTES {
            return Err(BuildError::Invalid(format!(
                "a Path ORAM path of {} buckets of {bucket} bytes is {path} bytes, more than one \
                 storage request may carry ({MAX_PATH_BYTES}); lower --value-size or \
                 --oram-bucket-size",
                tree.levels()
            )));
        }
        Ok(PathOramConfig {
            bucket_size: self.bucket_size,
            stash_limit: self.stash_limit,
        })
    }

    /// A Path ORAM store for `store` under `master`'s keys, holding `start`'s records.
    pub(crate) fn build(&self, from: Founding<'_>) -> Result<PathOram, BuildError> {
        let (store, master) = (from.store, from.master);
        let config = self.config(store)?;
        let codec = crate::sealed_codec(store, master)?;
        Ok(PathOram::new(
            config,
            store.capacity,
            codec,
            from.rng,
            from.start,
        ))
    }
}
