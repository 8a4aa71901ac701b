//! Where the elements live: the untrusted side of Cloak.
//!
//! One small trait, [`Storage`], executes a scheme's [`StorageOp`]s. Backends:
//! - [`MemoryStorage`]: in this process's memory;
//! - [`DiskStorage`]: in memory with every write logged and fsynced first (`--data-dir`);
//! - [`TcpStorage`]: a client for `cloak server` over the [`wire`] protocol;
//! - [`RedisStorage`]: a Redis or a Redis Cluster (whose hash slots are in [`slot`]);
//! - [`Observing`]: wraps any backend and records exactly what the server sees (the adversary's
//!   view), for tests and the auditor.
//!
//! [`server`] serves any backend over TCP: that is `cloak server`.

#![warn(missing_docs)]

mod admission;
pub mod dir;
mod disk;
mod fence;
pub mod handshake;
mod memory;
mod observing;
pub mod private_file;
mod reader_task;
mod redis_store;
pub mod server;
pub mod slot;
mod tcp;
pub mod tls;
mod waiting;
pub mod wire;

use async_trait::async_trait;
pub use cloak_core::{Addr, StorageError, StorageOp, StorageReply};

pub use admission::PENDING_HANDSHAKES;
pub use disk::{DiskError, DiskStorage, Opened};
pub use memory::MemoryStorage;
pub use observing::{Observing, TraceHandle};
pub use redis_store::{DEFAULT_PREFIX, RedisStorage, RedisTarget, UrlError};
pub use tcp::{Link, TcpStorage};

/// A storage backend. Requests in flight together may be applied in any order; a request issued
/// after another completed sees its effects. Written values may be slices of a much larger buffer
/// (a whole request frame): a backend that keeps them copies them, so it never pins the frame.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Executes `op`; the reply has the kind and size `op` calls for unless the backend is faulty.
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError>;

    /// Executes `op` once `release` completes: for a request whose time the storage server sees
    /// (a batch read or write-back on the scheme's schedule). A backend that encodes requests
    /// does so before the release, so that what is left between the release and the request's
    /// first byte on the wire is a little work of the same size whatever the request carries
    /// (encoding a write-back of a thousand elements takes a tenth of a millisecond, more on an
    /// idle CPU running slowly than on a busy one: the read-to-write-back gap showed it).
    async fn call_at(&self, op: StorageOp, release: Release) -> Result<StorageReply, StorageError> {
        release.await;
        self.call(op).await
    }

    /// Ends whatever the proxy this one replaces (killed, or stopped) still has on its way, and
    /// settles what it left half done: once this returns, nothing that proxy sent before it is
    /// applied any more. A proxy calls it first, before it reads anything: a write-back of a
    /// killed proxy applied in the middle of the recovery's scan would move elements from
    /// addresses not yet scanned to addresses already scanned, where the scan would see them
    /// nowhere. The server learns from it that a proxy is starting, which the scan after it
    /// shows anyway.
    ///
    /// A proxy that is still running is another matter. `cloak server` refuses it when it
    /// connects again (its connections name its own fence's token, no longer the last one),
    /// also after a restart when the server keeps its token in `--data-dir`. A
    /// single Redis does the same through a key holding the last fence's token, which every
    /// connection checks when it opens. On a Redis Cluster its connections are ended, but it
    /// connects again and its writes go on. Two proxies on one store are not supported.
    async fn fence(&self) -> Result<(), StorageError>;

    /// Where the elements are, for logs and `INFO` (never secret).
    fn describe(&self) -> String;
}

/// Said with an answer refused as longer than its request allows: a read's is also what a
/// store written with larger elements gives (an operator's mistake, not only a hostile server),
/// refused before the elements could be opened and checked.
const LONGER_ELEMENTS_HINT: &str = "; for a read, storage holds elements longer than this store \
     writes: written with another --value-size, --key-size or --scheme, or not by Cloak";

/// Completes when a request may leave (see [`Storage::call_at`]).
pub type Release = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

#[async_trait]
impl<S: Storage + ?Sized> Storage for std::sync::Arc<S> {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        (**self).call(op).await
    }

    async fn call_at(&self, op: StorageOp, release: Release) -> Result<StorageReply, StorageError> {
        (**self).call_at(op, release).await
    }

    async fn fence(&self) -> Result<(), StorageError> {
        (**self).fence().await
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}
