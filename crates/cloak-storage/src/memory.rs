//! Elements in this process's memory.

use std::sync::Mutex;

use async_trait::async_trait;
use cloak_core::MemoryStore;

use crate::{Storage, StorageError, StorageOp, StorageReply};

/// Elements in this process's memory, lost when it exits.
#[derive(Default)]
pub struct MemoryStorage {
    store: Mutex<MemoryStore>,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of elements and their total size in bytes.
    pub fn usage(&self) -> (usize, usize) {
        let store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        (store.len(), store.bytes())
    }

    /// Runs `f` on the elements; for tests that play a malicious server.
    pub fn with_store<T>(&self, f: impl FnOnce(&mut MemoryStore) -> T) -> T {
        f(&mut self.store.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[async_trait]
impl Storage for MemoryStorage {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        // A poisoned lock means a panic mid-apply elsewhere; the map itself is still consistent
        // because MemoryStore::apply never panics between its updates.
        Ok(self
            .store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply(op))
    }

    /// Nothing to fence: no other process reaches this process's memory.
    async fn fence(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}
