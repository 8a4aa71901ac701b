//! WATCH: which clients watch which keys, and which of them saw a watched key written since.
//!
//! A write counts from the moment the engine takes it (the order commands take effect in),
//! whoever sent it, the watching client included, as in Redis. Nothing here reaches storage.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use super::ClientId;

#[derive(Default)]
pub(super) struct Watches {
    /// Who watches each stored key (client keys: a randomly keyed hash).
    watchers: HashMap<Bytes, HashSet<ClientId>>,
    /// What each client watches.
    watching: HashMap<ClientId, Vec<Bytes>>,
    /// Clients one of whose watched keys was written.
    dirty: HashSet<ClientId>,
}

impl Watches {
    pub fn watch(&mut self, client: ClientId, keys: Vec<Bytes>) {
        for key in &keys {
            self.watchers.entry(key.clone()).or_default().insert(client);
        }
        self.watching.entry(client).or_default().extend(keys);
    }

    /// The keys `client` watches.
    pub fn keys_of(&self, client: ClientId) -> &[Bytes] {
        self.watching.get(&client).map_or(&[], Vec::as_slice)
    }

    /// `key` was written: every client watching it will see its transaction fail.
    pub fn touched(&mut self, key: &[u8]) {
        if let Some(clients) = self.watchers.get(key) {
            self.dirty.extend(clients);
        }
    }

    /// Forgets what `client` watches; answers whether a watched key was written meanwhile.
    pub fn unwatch(&mut self, client: ClientId) -> bool {
        for key in self.watching.remove(&client).unwrap_or_default() {
            if let Some(clients) = self.watchers.get_mut(&key) {
                clients.remove(&client);
                if clients.is_empty() {
                    self.watchers.remove(&key);
                }
            }
        }
        self.dirty.remove(&client)
    }
}
