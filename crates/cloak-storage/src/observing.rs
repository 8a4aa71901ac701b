//! A wrapper that records what the server sees, request by request.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use cloak_core::{Observed, Trace};

use crate::{Storage, StorageError, StorageOp, StorageReply};

/// Shared access to a trace being recorded.
#[derive(Clone, Default)]
pub struct TraceHandle(Arc<Mutex<Trace>>);

impl TraceHandle {
    /// Takes what was recorded so far; recording continues.
    pub fn take(&self) -> Trace {
        std::mem::take(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct Observing<S> {
    inner: S,
    trace: TraceHandle,
    start: Instant,
}

impl<S: Storage> Observing<S> {
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
        let seen = Observed::of(self.start.elapsed(), &op);
        self.trace
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(seen);
        self.inner.call(op).await
    }

    fn describe(&self) -> String {
        format!("observed {}", self.inner.describe())
    }
}
