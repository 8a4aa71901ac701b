//! A wrapper that records what the server sees, request by request: the request as sent (every
//! byte written included), when it was sent, and when its answer came back.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use async_trait::async_trait;
use cloak_core::{Observed, Trace};

use crate::{Storage, StorageError, StorageOp, StorageReply};

/// The trace so far, and how many requests were taken from it before (so an answer that comes
/// back after its request was taken is not written onto another request).
#[derive(Default)]
struct Recorded {
    trace: Trace,
    taken: usize,
}

/// Shared access to a trace being recorded.
#[derive(Clone, Default)]
pub struct TraceHandle(Arc<Mutex<Recorded>>);

impl TraceHandle {
    fn lock(&self) -> MutexGuard<'_, Recorded> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes what was recorded so far; recording continues. Requests still unanswered are
    /// taken without their answer time.
    pub fn take(&self) -> Trace {
        let mut recorded = self.lock();
        let trace = std::mem::take(&mut recorded.trace);
        recorded.taken += trace.len();
        trace
    }

    /// Requests held, not yet taken.
    pub fn len(&self) -> usize {
        self.lock().trace.len()
    }

    /// Whether no request is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records a request; returns its number for [`TraceHandle::answered`].
    fn push(&self, seen: Observed) -> usize {
        let mut recorded = self.lock();
        recorded.trace.push(seen);
        recorded.taken + recorded.trace.len() - 1
    }

    /// Notes when request `number` was answered, if it is still held.
    fn answered(&self, number: usize, at: std::time::Duration) {
        let mut recorded = self.lock();
        let Some(index) = number.checked_sub(recorded.taken) else {
            return;
        };
        if let Some(seen) = recorded.trace.get_mut(index) {
            seen.answered = Some(at);
        }
    }
}

/// A backend that records every request it passes on, with when it was sent and answered:
/// what the storage server sees.
pub struct Observing<S> {
    inner: S,
    trace: TraceHandle,
    start: Instant,
}

impl<S: Storage> Observing<S> {
    /// Wraps `inner`; the handle reads what it records.
    pub fn new(inner: S) -> (Self, TraceHandle) {
        let trace = TraceHandle::default();
        let observing = Self {
            inner,
            trace: trace.clone(),
            start: Instant::now(),
        };
        (observing, trace)
    }
}

#[async_trait]
impl<S: Storage> Storage for Observing<S> {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        let number = self.trace.push(Observed::of(self.start.elapsed(), &op));
        let reply = self.inner.call(op).await;
        if reply.is_ok() {
            self.trace.answered(number, self.start.elapsed());
        }
        reply
    }

    // `call_at` keeps the trait's own: it waits for the release and then calls `call`, so a
    // timed request is recorded when it leaves (the server sees nothing of it before).

    // Not recorded: a fence carries no address and comes once, before anything else, at every
    // start; the trace is the requests that touch the store.
    async fn fence(&self) -> Result<(), StorageError> {
        self.inner.fence().await
    }

    fn describe(&self) -> String {
        format!("observed {}", self.inner.describe())
    }
}
