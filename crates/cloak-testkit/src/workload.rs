//! Random per-client workloads checked against a `HashMap` model.
//!
//! Each client touches only keys of its own, so whatever the interleaving with other clients,
//! the outcome of each of its commands follows from its own earlier commands, which take effect
//! in the order it sent them. [`ClientModel::next_command`] draws a command and the outcome it must have.

use std::collections::HashMap;

use bytes::Bytes;
use cloak_core::{Command, Outcome, SetCondition, Simulator};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A closed loop: `clients` clients each keep `depth` commands in flight, drawn by `next` from
/// one rng seeded with `seed`, until `commands` were sent in all and every one has completed.
/// Every outcome must be a success (`Outcome::Error` fails the test).
pub fn drive_closed_loop(
    sim: &mut Simulator,
    clients: u64,
    depth: usize,
    commands: usize,
    seed: u64,
    mut next: impl FnMut(&mut ChaCha8Rng) -> Command,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut owner: HashMap<u64, u64> = HashMap::new();
    let mut in_flight = vec![0usize; clients as usize];
    let mut sent = 0;
    while sent < commands || !owner.is_empty() {
        for c in 0..clients {
            while sent < commands && in_flight[c as usize] < depth {
                let token = sim.submit(c, next(&mut rng));
                owner.insert(token, c);
                in_flight[c as usize] += 1;
                sent += 1;
            }
        }
        crate::suite::wait_for_outcomes(sim);
        for (token, _, outcome) in sim.drain_outcomes() {
            assert!(!matches!(outcome, Outcome::Error(_)), "{outcome:?}");
            let client = owner
                .remove(&token)
                .expect("an outcome for a command this loop sent");
            in_flight[client as usize] -= 1;
        }
    }
}

pub struct ClientModel {
    client: u64,
    keys: usize,
    max_value: usize,
    model: HashMap<Bytes, Bytes>,
    rng: ChaCha8Rng,
    counter: u64,
}

impl ClientModel {
    /// A client with `keys` keys of its own and values of up to `max_value` bytes.
    pub fn new(client: u64, keys: usize, max_value: usize, seed: u64) -> Self {
        Self {
            client,
            keys,
            max_value,
            model: HashMap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ client.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            counter: 0,
        }
    }

    pub fn key(&self, i: usize) -> Bytes {
        Bytes::from(format!("c{}:k{}", self.client, i))
    }

    /// The model's whole state.
    pub fn state(&self) -> HashMap<Bytes, Bytes> {
        self.model.clone()
    }

    /// Replaces the model's state (after a crash: with what the store really holds).
    pub fn set_state(&mut self, state: HashMap<Bytes, Bytes>) {
        self.model = state;
    }

    /// How many keys this client may touch.
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// Keys this client currently holds.
    pub fn len(&self) -> usize {
        self.model.len()
    }

    pub fn is_empty(&self) -> bool {
        self.model.is_empty()
    }

    fn random_key(&mut self) -> Bytes {
        let i = self.rng.random_range(0..self.keys);
        self.key(i)
    }

    fn random_value(&mut self) -> Bytes {
        self.counter += 1;
        let len = self.rng.random_range(0..=self.max_value);
        let tag = format!("{}:{}:", self.client, self.counter);
        let mut v: Vec<u8> = tag.into_bytes();
        v.resize(len.max(v.len()).min(self.max_value), b'x');
        v.truncate(self.max_value);
        Bytes::from(v)
    }

    /// The value the model holds for `key`.
    pub fn value(&self, key: &Bytes) -> Option<Bytes> {
        self.model.get(key).cloned()
    }

    /// The next command and the outcome the store must give it.
    pub fn next_command(&mut self) -> (Command, Outcome) {
        match self.rng.random_range(0..100) {
            0..35 => {
                let key = self.random_key();
                let expected = Outcome::Value(self.value(&key));
                (Command::Get(key), expected)
            }
            35..65 => {
                let (key, value) = (self.random_key(), self.random_value());
                let condition = match self.rng.random_range(0..10) {
                    0 => SetCondition::IfAbsent,
                    1 => SetCondition::IfPresent,
                    _ => SetCondition::Always,
                };
                let exists = self.model.contains_key(&key);
                let applies = match condition {
                    SetCondition::Always => true,
                    SetCondition::IfAbsent => !exists,
                    SetCondition::IfPresent => exists,
                };
                let expected = if applies {
                    self.model.insert(key.clone(), value.clone());
                    Outcome::Ok
                } else {
                    Outcome::Value(None)
                };
                (
                    Command::Set {
                        key,
                        value,
                        condition,
                    },
                    expected,
                )
            }
            65..75 => {
                let n = self.rng.random_range(1..=4);
                let keys: Vec<Bytes> = (0..n).map(|_| self.random_key()).collect();
                let expected = Outcome::Values(keys.iter().map(|k| self.value(k)).collect());
                (Command::MGet(keys), expected)
            }
            75..83 => {
                let n = self.rng.random_range(1..=4);
                let pairs: Vec<(Bytes, Bytes)> = (0..n)
                    .map(|_| (self.random_key(), self.random_value()))
                    .collect();
                for (k, v) in &pairs {
                    self.model.insert(k.clone(), v.clone());
                }
                (Command::MSet(pairs), Outcome::Ok)
            }
            83..93 => {
                let n = self.rng.random_range(1..=3);
                let keys: Vec<Bytes> = (0..n).map(|_| self.random_key()).collect();
                let removed = keys
                    .iter()
                    .filter(|k| self.model.remove(*k).is_some())
                    .count();
                (Command::Del(keys), Outcome::Integer(removed as i64))
            }
            _ => {
                let n = self.rng.random_range(1..=3);
                let keys: Vec<Bytes> = (0..n).map(|_| self.random_key()).collect();
                let count = keys.iter().filter(|k| self.model.contains_key(*k)).count();
                (Command::Exists(keys), Outcome::Integer(count as i64))
            }
        }
    }
}
