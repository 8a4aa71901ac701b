//! The task that reads a pipelined connection's answers, stopped when its connection is dropped
//! (the Redis pipe and the `cloak server` client).
//!
//! A connection dropped (retired after a failure or a timeout, replaced, or dropped with its
//! storage) must stop its reader, which then drops the reading half and so closes the socket.
//! Otherwise the reader waits for the server to close first, and a server that never does keeps
//! the task and the socket for good. Over TLS that is any server: both halves of
//! `tokio::io::split` share one stream, so dropping the writing half neither closes the socket
//! nor tells the server anything (on plain TCP it at least sends a FIN).

use std::future::Future;

use tokio::task::AbortHandle;

/// A connection's reader task, aborted when this is dropped.
pub(crate) struct ReaderTask(AbortHandle);

impl ReaderTask {
    /// Runs `reader` until it ends or this is dropped.
    pub fn spawn(reader: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(reader).abort_handle())
    }
}

impl Drop for ReaderTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
