//! Where the elements live: the untrusted side of Cloak.
//!
//! One small trait, [`Storage`], executes a scheme's [`StorageOp`]s. Backends:
//! - [`MemoryStorage`]: in this process's memory;
//! - [`DiskStorage`]: in memory with every write logged and fsynced first (`--data-dir`);
//! - [`TcpStorage`]: a client for `cloak server` over the [`wire`] protocol;
//! - [`RedisStorage`]: a Redis or a Redis Cluster;
//! - [`Observing`]: wraps any backend and records exactly what the server sees (the adversary's
//!   view), for tests and the auditor.
//!
//! [`server`] serves any backend over TCP: that is `cloak server`.

#![warn(missing_docs)]

pub mod dir;
mod disk;
pub mod handshake;
mod memory;
mod observing;
mod redis_store;
pub mod server;
mod tcp;
pub mod tls;
pub mod wire;

use async_trait::async_trait;
pub use cloak_core::{Addr, StorageError, StorageOp, StorageReply};

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

    /// Where the elements are, for logs and `INFO` (never secret).
    fn describe(&self) -> String;
}

#[async_trait]
impl<S: Storage + ?Sized> Storage for std::sync::Arc<S> {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        (**self).call(op).await
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}
