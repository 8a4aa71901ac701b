//! A runtime on a thread of its own, for the storage traffic: the tasks that write each request
//! to the backend's socket, whose timing the storage server sees.
//!
//! On the runtime that also serves the clients, a request's tasks waited behind the connection
//! tasks of the worker that started them whenever clients were busy, so a batch read or a held
//! write-back left later under load than idle, and the server could tell the two apart. On a
//! thread that does nothing else, they run as soon as the core hands a request over (the thread
//! still shares the CPUs with everything else: a host whose CPUs are all busy would delay it too,
//! which is why it asks for a real-time priority, see [`crate::priority`]).
//!
//! The core itself stays on the clients' runtime: on 2 cores, a thread of its own measured worse
//! under a heavy SET load (read-to-write-back gap median 11.1 ms against 10.3 ms idle, where on the
//! shared runtime it was 10.6 ms; `scripts/measure-batch-timing --pin`), as it then competed for
//! a CPU with the runtime's workers instead of taking turns among its tasks.
//!
//! A backend must be connected on this runtime (its connection tasks live where they were
//! started): see [`OwnThread::run`].

use std::future::Future;

use tokio::runtime::{Builder, Handle, Runtime};

/// A runtime with one worker thread; dropping it stops the thread.
pub struct OwnThread {
    runtime: Option<Runtime>,
}

impl OwnThread {
    /// Starts the thread, named `name` (as `top -H` and debuggers show it), at a real-time
    /// priority if the process may raise it (see [`crate::priority`]).
    pub fn start(name: &str) -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .on_thread_start(crate::priority::raise_this_thread)
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Where to spawn what should run on this thread.
    pub fn handle(&self) -> Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle().clone(),
            None => unreachable!("the runtime is only taken when dropped"),
        }
    }

    /// Runs `work` on this thread and waits for it (so the tasks it starts live here too).
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> T {
        match self.handle().spawn(work).await {
            Ok(done) => done,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_) => unreachable!("the runtime outlives this call"),
        }
    }
}

impl Drop for OwnThread {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which async code may not do.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
