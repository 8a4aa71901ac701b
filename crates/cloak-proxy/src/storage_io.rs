//! A runtime of its own for the traffic to storage, so that when a request leaves does not
//! depend on how busy the client side is.
//!
//! A storage request goes through tasks before it reaches the socket: the one the core starts
//! for it and the backend's connection task that writes it. On the runtime that also serves the
//! clients, those tasks queue behind connection tasks whenever clients are busy, so a batch read
//! or a held write-back left later under load than idle, and the server, which sees when each
//! request arrives, could tell the two apart. Here they run on a thread that does nothing else:
//! idle or loaded, a request is written as soon as the core hands it over. The backend must be
//! connected on this runtime (its connection tasks live where they were started): see
//! [`StorageIo::connect`].

use std::future::Future;

use tokio::runtime::{Builder, Handle, Runtime};

/// The storage traffic's runtime; dropping it stops its thread.
pub struct StorageIo {
    runtime: Option<Runtime>,
}

impl StorageIo {
    pub fn start() -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("cloak-storage-io")
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Where storage requests are started ([`crate::ProxyOptions::storage_io`]).
    pub fn handle(&self) -> Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle().clone(),
            None => unreachable!("the runtime is only taken when dropped"),
        }
    }

    /// Runs `connect` on this runtime, so the backend's connection tasks live here too.
    pub async fn connect<T: Send + 'static>(
        &self,
        connect: impl Future<Output = T> + Send + 'static,
    ) -> T {
        match self.handle().spawn(connect).await {
            Ok(connected) => connected,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_) => unreachable!("the runtime outlives this call"),
        }
    }
}

impl Drop for StorageIo {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which async code may not do.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
