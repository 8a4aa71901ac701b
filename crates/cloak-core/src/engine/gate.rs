//! Which commands must wait before they start, so that commands that run alone on their keys
//! (read-modify-writes, RENAME, COPY, MSETNX, EXEC: *units*) see nothing of another client
//! between their reads and their writes.
//!
//! A unit *holds* its keys from the moment it arrives until its writes are acknowledged. A
//! command that names a held key waits, and so does every later command of a client that has
//! one waiting (a client's commands keep their order). Waiting commands start in arrival order:
//! one starts only when no earlier waiting command shares a key or its client with it, and a
//! unit only once the slots of its keys have no op in the scheme (those came before it). So on
//! each key, every other command comes entirely before a unit or entirely after it.
//!
//! Nothing here reaches storage: it only delays when ops are handed to the scheme, in an order
//! the clients chose (which the scheme's fixed traffic hides, as it hides any arrival order).

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::Bytes;

use super::ClientId;
use crate::command::Command;

/// A command that has not started yet.
pub(super) struct Waiter {
    pub client: ClientId,
    pub token: u64,
    pub command: Command,
    /// The stored keys it names (for a unit, also those it holds, such as watched keys).
    pub keys: Vec<Bytes>,
    /// It acts on every key (FLUSHDB, FLUSHALL): it waits for all before it, and all after wait
    /// for it.
    pub everything: bool,
    pub unit: bool,
}

#[derive(Default)]
pub(super) struct Gate {
    waiting: VecDeque<Waiter>,
    /// Keys named by waiting commands, with how many name each. (Client keys: a randomly keyed
    /// hash, so clients cannot aim for collisions.)
    named: HashMap<Bytes, u32>,
    /// Keys held by running units, with how many hold each.
    held: HashMap<Bytes, u32>,
    /// Clients with a waiting command, and how many.
    clients: HashMap<ClientId, u32>,
    /// Waiting commands that act on every key.
    everything: u32,
}

impl Gate {
    /// Whether a command that does not run alone must still wait: it names a busy key, its
    /// client has a command waiting, or something that acts on every key is waiting for its turn
    /// or would be overtaken.
    pub fn must_wait(&self, client: ClientId, keys: &[Bytes], everything: bool) -> bool {
        let busy = |key: &Bytes| self.named.contains_key(key) || self.held.contains_key(key);
        self.everything > 0
            || self.clients.contains_key(&client)
            || (everything && !(self.waiting.is_empty() && self.held.is_empty()))
            || keys.iter().any(busy)
    }

    pub fn push(&mut self, waiter: Waiter) {
        for key in &waiter.keys {
            *self.named.entry(key.clone()).or_default() += 1;
        }
        *self.clients.entry(waiter.client).or_default() += 1;
        self.everything += u32::from(waiter.everything);
        self.waiting.push_back(waiter);
    }

    /// Nothing waits and no unit runs: every command may start at once.
    pub fn is_open(&self) -> bool {
        self.waiting.is_empty() && self.held.is_empty()
    }

    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Takes the first waiting command that may start now. `idle(keys)` says whether the slots
    /// of a unit's keys have no op in the scheme. A unit that starts holds its keys until
    /// [`Gate::release`].
    pub fn next_ready(&mut self, idle: impl Fn(&[Bytes]) -> bool) -> Option<Waiter> {
        let index = self.ready_index(idle)?;
        let waiter = self.waiting.remove(index)?;
        decrement(&mut self.clients, &waiter.client);
        self.everything -= u32::from(waiter.everything);
        for key in &waiter.keys {
            decrement(&mut self.named, key);
            if waiter.unit {
                *self.held.entry(key.clone()).or_default() += 1;
            }
        }
        Some(waiter)
    }

    /// Whether a running unit holds `key`.
    pub fn holds(&self, key: &Bytes) -> bool {
        self.held.contains_key(key)
    }

    /// Frees the keys a finished unit held.
    pub fn release(&mut self, keys: &[Bytes]) {
        for key in keys {
            decrement(&mut self.held, key);
        }
    }

    /// The first waiting command that shares no key and no client with an earlier one, names
    /// no key a running unit holds, and, for a unit, whose keys' slots are idle.
    fn ready_index(&self, idle: impl Fn(&[Bytes]) -> bool) -> Option<usize> {
        let mut earlier_keys: HashSet<&Bytes> = HashSet::new();
        let mut earlier_clients: HashSet<ClientId> = HashSet::new();
        for (index, waiter) in self.waiting.iter().enumerate() {
            let free = !earlier_clients.contains(&waiter.client)
                && (!waiter.everything || (index == 0 && self.held.is_empty()))
                && !waiter
                    .keys
                    .iter()
                    .any(|key| self.held.contains_key(key) || earlier_keys.contains(key))
                && (!waiter.unit || idle(&waiter.keys));
            if free {
                return Some(index);
            }
            if waiter.everything {
                // Nothing overtakes a command that acts on every key.
                return None;
            }
            earlier_keys.extend(&waiter.keys);
            earlier_clients.insert(waiter.client);
        }
        None
    }
}

fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, key: &K) {
    if let Some(count) = counts.get_mut(key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(key);
        }
    }
}
