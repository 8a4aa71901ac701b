//! The replies every client together leaves unread, held to one proxy-wide limit.
//!
//! Each connection already stops at its own `--client-reply-limit`, but thousands of clients
//! that never read could each stay just under it: `--total-reply-limit` bounds their sum. When a
//! new reply takes the sum past it, the client holding the most unread replies is disconnected
//! (with a log line naming it), as Redis's `client-output-buffer-limit` disconnects a client past
//! its class's limit; clients that read hold little and are not the ones cut.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::clients::{Client, ClientList};

/// One connection's share of the proxy-wide count: what its writer holds unwritten. Dropping it
/// (the connection is gone) returns the share.
pub struct Unread {
    list: Arc<ClientList>,
    client: Arc<Client>,
}

impl Unread {
    pub fn new(list: Arc<ClientList>, client: Arc<Client>) -> Self {
        Self { list, client }
    }

    /// Notes that `bytes` of replies wait unwritten now. A client already being disconnected
    /// is no longer counted, so it cannot make another one be cut.
    pub fn set(&self, bytes: usize) {
        if !self.client.cut.load(Ordering::Relaxed) {
            self.list.note_unread(&self.client, bytes);
        }
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        self.list.note_unread(&self.client, 0);
    }
}
