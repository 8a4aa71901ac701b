//! The public map of a Cloak cluster, with no I/O: Redis's hash slots ([`slot`]), which
//! partition owns each slot and which proxy hosts each partition ([`ClusterMap`]), the
//! cluster file that describes them ([`ClusterMap::from_toml`]), how a move or an added proxy
//! changes the map ([`ClusterMap::moved`], [`ClusterMap::with_proxy`], [`ClusterMap::newest`]),
//! and the secret that lets an operator move partitions and signs the maps the proxies keep
//! ([`ClusterSecret`]).
//!
//! # Why a cluster shows the storage server nothing new
//!
//! Each partition is an ordinary store of one scheme, with its own capacity, key, schedule,
//! journal and storage. The map is public configuration made with the cluster: which
//! slots a partition owns depends on the keys' hashes alone, never on how often or when they
//! are used. So each partition's traffic is its scheme's own fixed public schedule whatever the
//! keys are (for Cloak, a batch of `b_d` addresses from each reuse-distance set every interval,
//! idle or loaded); a storage server that sees every partition sees several independent such
//! schedules, each of which it could predict without knowing the workload. Routing happens at
//! the proxies, in memory, and never reaches storage.
//!
//! The cost: capacity is per partition. A partition that fills refuses new keys (`store is
//! full`) even while others have room, because moving a key to another partition would show
//! storage which keys are hot. Size each partition for its share of the keys with headroom for
//! the imbalance of hashing.

#![warn(missing_docs)]

mod change;
mod file;
mod map;
mod secret;
pub use cloak_storage::slot;

pub use change::ChangeError;
pub use file::FileError;
pub use map::{
    ClusterMap, MAX_NAME, MapError, Partition, PartitionSpec, Proxy, SlotRange, storage_of,
};
pub use secret::{ADMIN_USER, ClusterSecret, SecretError};
pub use slot::{CrossSlot, SLOTS, key_slot};
