//! The engine: Redis-like commands on top of a scheme, still without any I/O.
//!
//! It owns the [`KeyDirectory`] and turns each [`Command`] into slot operations for the
//! [`Scheme`], then gathers their replies into one [`Outcome`] per command. It also enforces the
//! ordering the schemes rely on: two ops of one client on one slot never sit in the scheme at the
//! same time (the later waits in a *lane*), so pipelined commands of a connection take effect in
//! the order they were sent, while different clients stay concurrent.
//!
//! Schemes whose every op makes storage traffic of its own ([`Scheme::traffic_per_op`]: tree
//! ORAMs, Pancake, `encrypted`) would show storage whether a key exists if the engine answered
//! a GET of an absent key, or skipped a conditional SET, without them: one op, one access, or
//! none. For them every key a GET, MGET, SET or DEL names becomes exactly one op: an absent key
//! (or a SET whose condition fails) becomes a *cover read* of a slot drawn uniformly at random,
//! whose value is dropped. In a tree ORAM a read of any slot is one uniformly random path, so
//! storage sees the same traffic whichever keys exist. (EXISTS and DBSIZE never reach the
//! scheme, for any key.)
//!
//! Commands that read a key and write what the read decides (INCR, APPEND, RENAME, EXEC, …) run
//! as *units*, alone on their keys: see [`gate`] for how they wait and [`unit`] for how they run.

mod gate;
mod listing;
mod unit;
mod watch;

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
// Keys here are the engine's own ids and slots, never chosen by clients: a fast hash is safe.
use hashbrown::{HashMap, HashSet};

use self::gate::{Gate, Waiter};
use self::unit::Unit;
use self::watch::Watches;
use crate::command::{Command, CommandError, Outcome, SetCondition};
use crate::directory::KeyDirectory;
use crate::element::{Record, Slot};
use crate::integrity::SlotVersions;
use crate::keyspace::DATABASES;
use crate::scheme::{JournalId, JournalRequest, Op, OpId, Reply, Scheme, SchemeStats};
use crate::storage::{ExpectedReply, RequestId, StorageError, StorageReply, StorageRequest};
use crate::update::Update;

/// Identifies a client (a connection) for per-client ordering.
pub type ClientId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_key: usize,
    pub max_value: usize,
    /// Most keys one MGET/MSET/DEL/EXISTS may name, which bounds a single command's memory.
    pub max_keys_per_command: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub commands: u64,
    pub keys: u64,
    pub capacity: u64,
    /// Keys in each of the 16 databases (for INFO's keyspace section).
    pub keys_per_db: Vec<u64>,
}

/// What a command still waits for, and how to answer it.
struct Waiting {
    token: u64,
    shape: Shape,
    values: Vec<Option<Bytes>>,
    remaining: usize,
    error: Option<CommandError>,
}

enum Shape {
    Value,
    Values,
    Ok,
    Integer(i64),
    /// A unit's reads: it goes on to run its commands.
    UnitRead(u64),
    /// A unit's writes: it answers.
    UnitWritten(u64),
}

/// Why an op is in the scheme.
struct Route {
    command: u64,
    client: ClientId,
    slot: Slot,
    expect: Expect,
    /// For writes: the version, which becomes the slot's acknowledged version once written.
    version: Option<u64>,
}

/// What an op's reply is for.
enum Expect {
    /// A read: the key the client asked for, and where its value goes.
    Value(Bytes, usize),
    /// A write or a delete.
    Written,
    /// A cover read (see the module docs): its value is nobody's and is dropped.
    Cover,
}

pub struct Engine {
    scheme: Box<dyn Scheme>,
    directory: KeyDirectory,
    limits: Limits,
    next_version: u64,
    next_op: u64,
    next_command: u64,
    routes: HashMap<OpId, Route>,
    commands: HashMap<u64, Waiting>,
    /// Ops held back per (client, slot) behind the one in the scheme.
    lanes: HashMap<(ClientId, Slot), VecDeque<(OpId, Op)>>,
    /// Ops created and not yet answered, per slot: a deleted key's slot is reused only at zero,
    /// so no late write of the old key can land on the new one.
    slot_refs: HashMap<Slot, u32>,
    /// Slots of deleted keys waiting for their last op.
    releasing: HashSet<Slot>,
    /// What answers each storage request the scheme has sent and storage not yet answered.
    in_flight: HashMap<RequestId, ExpectedReply>,
    outcomes: VecDeque<(u64, Outcome)>,
    commands_done: u64,
    /// Draws the slots of cover reads; `None` for schemes that need none.
    cover: Option<ChaCha20Rng>,
    /// The version of every slot's last acknowledged write (`DEL`s too), from recovery on: what
    /// storage holds once the scheme is drained, for the next start to check storage against.
    acknowledged: SlotVersions,
    /// Commands waiting for keys that units hold (see [`gate`]).
    gate: Gate,
    /// Set when a unit ended or a slot went idle: waiting commands may start now.
    gate_moved: bool,
    units: HashMap<u64, Unit>,
    next_unit: u64,
    watches: Watches,
    /// How many keys each database holds.
    db_sizes: [usize; DATABASES as usize],
    /// Draws RANDOMKEY's starting slot.
    random: ChaCha20Rng,
}

impl Engine {
    /// An engine for a store of `capacity` keys (at most the scheme's slot count).
    pub fn new(scheme: Box<dyn Scheme>, directory: KeyDirectory, limits: Limits) -> Self {
        assert!(
            directory.capacity() as u64 <= scheme.slots(),
            "the scheme has fewer slots than the directory's capacity"
        );
        let scheme_needs_cover = scheme.traffic_per_op();
        let db_sizes = listing::count_by_db(&directory, limits.max_key);
        Self {
            scheme,
            directory,
            limits,
            next_version: 1,
            next_op: 0,
            next_command: 0,
            routes: HashMap::new(),
            commands: HashMap::new(),
            lanes: HashMap::new(),
            slot_refs: HashMap::new(),
            releasing: HashSet::new(),
            in_flight: HashMap::new(),
            outcomes: VecDeque::new(),
            commands_done: 0,
            cover: scheme_needs_cover.then(ChaCha20Rng::from_os_rng),
            acknowledged: SlotVersions::new(),
            gate: Gate::default(),
            gate_moved: false,
            units: HashMap::new(),
            next_unit: 0,
            watches: Watches::default(),
            db_sizes,
            random: ChaCha20Rng::from_os_rng(),
        }
    }

    /// Continues version numbers from `next` (after recovery: above every recovered version).
    pub fn with_next_version(mut self, next: u64) -> Self {
        self.next_version = next.max(1);
        self
    }

    /// Starts from the slot versions recovery found (what storage holds at the start).
    pub fn with_acknowledged(mut self, versions: SlotVersions) -> Self {
        self.acknowledged = versions;
        self
    }

    /// The version of every slot's last acknowledged write, recovered ones included. Storage
    /// holds at least these once [`SchemeStats::unwritten`] is zero.
    pub fn acknowledged(&self) -> &SlotVersions {
        &self.acknowledged
    }

    /// The sizes and counts commands must stay within.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn scheme(&self) -> &dyn Scheme {
        self.scheme.as_ref()
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            commands: self.commands_done,
            keys: self.directory.len() as u64,
            capacity: self.directory.capacity() as u64,
            keys_per_db: self.db_sizes.iter().map(|&n| n as u64).collect(),
        }
    }

    pub fn scheme_stats(&self) -> SchemeStats {
        self.scheme.stats()
    }

    /// Backpressure from the scheme: stop submitting while `false`.
    pub fn accepts(&self) -> bool {
        self.scheme.accepts()
    }

    /// Takes a command; its outcome comes from [`Engine::poll_outcome`] with the same `token`.
    pub fn submit(&mut self, now: Instant, client: ClientId, token: u64, command: Command) {
        // The common case, kept free of the gate's bookkeeping.
        if self.gate.is_open() && !command.runs_alone() {
            self.begin(now, client, token, command);
            self.drain_replies(now);
            return;
        }
        let mut keys = command.keys();
        let everything = matches!(command, Command::Flush(_));
        let unit = command.runs_alone();
        if unit || self.gate.must_wait(client, &keys, everything) {
            if let Command::Transaction(_) = command {
                // Held too, so no write can slip in between EXEC and the watch check.
                keys.extend_from_slice(self.watches.keys_of(client));
            }
            self.gate.push(Waiter {
                client,
                token,
                command,
                keys,
                everything,
                unit,
            });
            self.gate_moved = true;
        } else {
            self.begin(now, client, token, command);
        }
        self.drain_replies(now);
    }

    fn begin(&mut self, now: Instant, client: ClientId, token: u64, command: Command) {
        if let Err(outcome) = self.start(now, client, token, command) {
            self.finish(token, outcome);
        }
    }

    /// Starts every waiting command the gate lets through.
    fn advance(&mut self, now: Instant) {
        while std::mem::take(&mut self.gate_moved) && self.gate.has_waiting() {
            loop {
                let (directory, refs) = (&self.directory, &self.slot_refs);
                let idle = |keys: &[Bytes]| {
                    keys.iter()
                        .all(|key| directory.get(key).is_none_or(|s| !refs.contains_key(&s)))
                };
                let Some(waiter) = self.gate.next_ready(idle) else {
                    break;
                };
                if waiter.unit {
                    self.begin_unit(now, waiter);
                } else {
                    self.begin(now, waiter.client, waiter.token, waiter.command);
                }
            }
        }
        self.gate_moved = false;
    }

    /// Hands storage's answer to the scheme, checked first: a reply of the wrong kind or size
    /// for its request reaches the scheme as an error (see [`ExpectedReply`]), and a reply to a
    /// request that is not in flight (never sent, or answered already) is dropped.
    pub fn handle_storage(
        &mut self,
        now: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) {
        let Some(expected) = self.in_flight.remove(&id) else {
            tracing::warn!(?id, "dropped a storage reply to no request in flight");
            return;
        };
        self.scheme.handle_storage(now, id, expected.check(result));
        self.drain_replies(now);
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.scheme.handle_timeout(now);
        self.drain_replies(now);
    }

    /// No more commands will come: the scheme writes out what it holds (see [`Scheme::drain`]).
    pub fn drain(&mut self, now: Instant) {
        self.scheme.drain(now);
        self.drain_replies(now);
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.scheme.poll_timeout()
    }

    pub fn poll_storage(&mut self) -> Option<StorageRequest> {
        let request = self.scheme.poll_storage()?;
        self.in_flight
            .insert(request.id, request.op.expected_reply());
        Some(request)
    }

    pub fn poll_journal(&mut self) -> Option<JournalRequest> {
        self.scheme.outbox().poll_journal()
    }

    pub fn handle_journaled(&mut self, now: Instant, id: JournalId, result: Result<(), String>) {
        self.scheme.handle_journaled(now, id, result);
        self.drain_replies(now);
    }

    pub fn poll_outcome(&mut self) -> Option<(u64, Outcome)> {
        self.outcomes.pop_front()
    }

    /// Starts a command, or returns its outcome at once when it needs no storage access.
    fn start(
        &mut self,
        now: Instant,
        client: ClientId,
        token: u64,
        command: Command,
    ) -> Result<(), Outcome> {
        self.check(&command).map_err(Outcome::Error)?;
        match command {
            Command::Get(key) => {
                let slot = self.directory.get(&key);
                if slot.is_none() && self.cover.is_none() {
                    return Err(Outcome::Value(None));
                }
                let id = self.wait(token, Shape::Value, 1, 1);
                self.read_or_cover(now, client, id, slot, key, 0);
            }
            Command::MGet(keys) => {
                let slots: Vec<_> = keys.iter().map(|k| self.directory.get(k)).collect();
                let ops = match self.cover {
                    Some(_) => keys.len(),
                    None => slots.iter().flatten().count(),
                };
                if ops == 0 {
                    return Err(Outcome::Values(vec![None; keys.len()]));
                }
                let id = self.wait(token, Shape::Values, keys.len(), ops);
                for (index, (key, slot)) in keys.into_iter().zip(slots).enumerate() {
                    self.read_or_cover(now, client, id, slot, key, index);
                }
            }
            Command::Set {
                key,
                value,
                condition,
            } => {
                let exists = self.directory.get(&key).is_some();
                let skip = match condition {
                    SetCondition::Always => false,
                    SetCondition::IfAbsent => exists,
                    SetCondition::IfPresent => !exists,
                };
                if skip {
                    if self.cover.is_none() {
                        return Err(Outcome::Value(None));
                    }
                    let id = self.wait(token, Shape::Value, 1, 1);
                    self.cover(now, client, id);
                    return Ok(());
                }
                let capacity = self.directory.capacity();
                let (slot, _) = self
                    .insert_key(&key)
                    .ok_or(Outcome::Error(CommandError::StoreFull { capacity }))?;
                self.watches.touched(&key);
                let id = self.wait(token, Shape::Ok, 0, 1);
                self.write(now, client, id, slot, key, value);
            }
            Command::MSet(pairs) => {
                // A key named twice takes its last value, as in Redis, and is written once: no
                // reader and no crash can see the value in between.
                let mut last: HashMap<Bytes, usize> = HashMap::new();
                for (i, (key, _)) in pairs.iter().enumerate() {
                    last.insert(key.clone(), i);
                }
                let pairs: Vec<(Bytes, Bytes)> = pairs
                    .into_iter()
                    .enumerate()
                    .filter(|(i, (key, _))| last[key] == *i)
                    .map(|(_, pair)| pair)
                    .collect();
                // Refused as a whole when the store cannot take every new key (keys are distinct
                // here; slots of deleted keys come back only once released).
                if !self
                    .directory
                    .has_room_for(pairs.iter().map(|(key, _)| &key[..]))
                {
                    return Err(Outcome::Error(CommandError::StoreFull {
                        capacity: self.directory.capacity(),
                    }));
                }
                let id = self.wait(token, Shape::Ok, 0, pairs.len());
                for (key, value) in pairs {
                    let (slot, _) = self
                        .insert_key(&key)
                        .expect("free slots were counted above");
                    self.watches.touched(&key);
                    self.write(now, client, id, slot, key, value);
                }
            }
            Command::Del(keys) => return self.delete(now, client, token, keys, true),
            Command::Flush(db) => {
                let keys = self.stored_keys(db);
                return self.delete(now, client, token, keys, false);
            }
            Command::Exists(keys) => {
                let count = keys
                    .iter()
                    .filter(|k| self.directory.get(k).is_some())
                    .count();
                return Err(Outcome::Integer(count as i64));
            }
            Command::DbSize(db) => return Err(Outcome::Integer(self.db_size(db) as i64)),
            Command::Keys { db, pattern } => return Err(self.list_keys(db, &pattern)),
            Command::Scan {
                db,
                cursor,
                pattern,
                kind,
                count,
            } => {
                return Err(self.scan(db, cursor, pattern.as_deref(), kind.as_deref(), count));
            }
            Command::RandomKey(db) => return Err(self.random_key(db)),
            Command::Watch(keys) => {
                self.watches.watch(client, keys);
                return Err(Outcome::Ok);
            }
            Command::Unwatch => {
                self.watches.unwatch(client);
                return Err(Outcome::Ok);
            }
            Command::Update { .. }
            | Command::MSetNx(_)
            | Command::Rename { .. }
            | Command::Copy { .. }
            | Command::Transaction(_) => {
                unreachable!("`submit` sends every unit through the gate to `begin_unit`")
            }
        }
        Ok(())
    }

    /// Deletes keys (DEL, UNLINK, FLUSHDB): a write of an empty record to each existing key's
    /// slot, the same write a SET makes, so storage cannot tell a delete from an update. Answers
    /// how many existed when `counted`, else OK.
    fn delete(
        &mut self,
        now: Instant,
        client: ClientId,
        token: u64,
        keys: Vec<Bytes>,
        counted: bool,
    ) -> Result<(), Outcome> {
        let slots: Vec<Slot> = keys
            .iter()
            .filter_map(|key| {
                let slot = self.remove_key(key)?;
                self.watches.touched(key);
                Some(slot)
            })
            .collect();
        let covers = match self.cover {
            Some(_) => keys.len() - slots.len(),
            None => 0,
        };
        let deleted = slots.len();
        let shape = match counted {
            true => Shape::Integer(deleted as i64),
            false => Shape::Ok,
        };
        if slots.is_empty() && covers == 0 {
            return Err(match counted {
                true => Outcome::Integer(0),
                false => Outcome::Ok,
            });
        }
        let id = self.wait(token, shape, 0, deleted + covers);
        for _ in 0..covers {
            self.cover(now, client, id);
        }
        for slot in slots {
            self.delete_slot(now, client, id, slot);
        }
        Ok(())
    }

    /// Gives a key a slot (a new key counts in its database).
    fn insert_key(&mut self, key: &[u8]) -> Option<(Slot, bool)> {
        let inserted = self.directory.get_or_insert(key);
        if let Some((_, true)) = inserted {
            self.count_key(key, true);
        }
        inserted
    }

    /// Forgets a key (see [`KeyDirectory::remove`]).
    fn remove_key(&mut self, key: &[u8]) -> Option<Slot> {
        let removed = self.directory.remove(key);
        if removed.is_some() {
            self.count_key(key, false);
        }
        removed
    }

    /// Size limits, checked before anything changes so a bad command has no effect.
    fn check(&self, command: &Command) -> Result<(), CommandError> {
        let limits = self.limits;
        let key_ok = |key: &Bytes| {
            if key.len() > limits.max_key {
                Err(CommandError::KeyTooLong {
                    len: key.len(),
                    max: limits.max_key,
                })
            } else {
                Ok(())
            }
        };
        let value_ok = |value: &Bytes| {
            if value.len() > limits.max_value {
                Err(CommandError::ValueTooLarge {
                    len: value.len(),
                    max: limits.max_value,
                })
            } else {
                Ok(())
            }
        };
        let count_ok = |count: usize| {
            if count > limits.max_keys_per_command {
                Err(CommandError::TooManyKeys {
                    count,
                    max: limits.max_keys_per_command,
                })
            } else {
                Ok(())
            }
        };
        match command {
            Command::Get(key) => key_ok(key),
            Command::Set { key, value, .. } => key_ok(key).and(value_ok(value)),
            Command::MGet(keys)
            | Command::Del(keys)
            | Command::Exists(keys)
            | Command::Watch(keys) => {
                count_ok(keys.len())?;
                keys.iter().try_for_each(key_ok)
            }
            Command::MSet(pairs) | Command::MSetNx(pairs) => {
                count_ok(pairs.len())?;
                pairs
                    .iter()
                    .try_for_each(|(k, v)| key_ok(k).and(value_ok(v)))
            }
            Command::Update { key, op } => {
                key_ok(key)?;
                match op {
                    Update::Append(value)
                    | Update::SetRange { value, .. }
                    | Update::Replace { value, .. }
                    | Update::SetIfAbsent(value) => value_ok(value),
                    _ => Ok(()),
                }
            }
            Command::Rename { from, to, .. } | Command::Copy { from, to, .. } => {
                key_ok(from).and(key_ok(to))
            }
            // Its commands are checked one by one as they run (a failing one answers its error
            // in EXEC's array, as in Redis).
            Command::Transaction(commands) => count_ok(commands.len()),
            Command::DbSize(_)
            | Command::Keys { .. }
            | Command::Scan { .. }
            | Command::RandomKey(_)
            | Command::Flush(_)
            | Command::Unwatch => Ok(()),
        }
    }

    fn wait(&mut self, token: u64, shape: Shape, values: usize, remaining: usize) -> u64 {
        let id = self.next_command;
        self.next_command += 1;
        self.commands.insert(
            id,
            Waiting {
                token,
                shape,
                values: vec![None; values],
                remaining,
                error: None,
            },
        );
        id
    }

    fn version(&mut self) -> u64 {
        let version = self.next_version;
        self.next_version += 1;
        version
    }

    /// Reads `key` from its slot, or sends a cover read when it has none (with a scheme that
    /// needs covers; the caller counted the op).
    fn read_or_cover(
        &mut self,
        now: Instant,
        client: ClientId,
        command: u64,
        slot: Option<Slot>,
        key: Bytes,
        index: usize,
    ) {
        match slot {
            Some(slot) => self.start_op(
                now,
                client,
                command,
                slot,
                Expect::Value(key, index),
                Op::Read,
            ),
            None => self.cover(now, client, command),
        }
    }

    /// A read of a uniformly random slot whose value is dropped (see the module docs); nothing
    /// for schemes that need no covers.
    fn cover(&mut self, now: Instant, client: ClientId, command: u64) {
        let Some(rng) = self.cover.as_mut() else {
            return;
        };
        // Multiply-shift: uniform up to a bias of capacity / 2^64. A slot this client already
        // has an op on is drawn again: the cover would wait behind that op in its lane, where
        // the reads of distinct keys it stands in for run at once (so storage would see the
        // accesses one after the other). Bounded, for a client with ops on almost every slot.
        let capacity = self.directory.capacity() as u128;
        let mut draw = || ((u128::from(rng.next_u64()) * capacity) >> 64) as Slot;
        let mut slot = draw();
        for _ in 0..64 {
            if !self.lanes.contains_key(&(client, slot)) {
                break;
            }
            slot = draw();
        }
        self.start_op(now, client, command, slot, Expect::Cover, Op::Read);
    }

    fn write(
        &mut self,
        now: Instant,
        client: ClientId,
        command: u64,
        slot: Slot,
        key: Bytes,
        value: Bytes,
    ) {
        let record = Record {
            version: self.version(),
            key,
            value,
        };
        self.start_op(now, client, command, slot, Expect::Written, |slot| {
            Op::Write(slot, record)
        });
    }

    /// Sends an op to the scheme, or holds it in its lane behind an earlier one.
    fn start_op(
        &mut self,
        now: Instant,
        client: ClientId,
        command: u64,
        slot: Slot,
        expect: Expect,
        op: impl FnOnce(Slot) -> Op,
    ) {
        let id = OpId(self.next_op);
        self.next_op += 1;
        let op = op(slot);
        self.routes.insert(
            id,
            Route {
                command,
                client,
                slot,
                expect,
                version: written_version(&op),
            },
        );
        *self.slot_refs.entry(slot).or_default() += 1;
        match self.lanes.get_mut(&(client, slot)) {
            Some(lane) => lane.push_back((id, op)),
            None => {
                self.lanes.insert((client, slot), VecDeque::new());
                self.scheme.submit(now, id, op);
            }
        }
    }

    fn drain_replies(&mut self, now: Instant) {
        loop {
            while let Some((id, reply)) = self.scheme.outbox().poll_reply() {
                self.complete_op(now, id, reply);
            }
            if !(self.gate_moved && self.gate.has_waiting()) {
                self.gate_moved = false;
                return;
            }
            self.advance(now);
        }
    }

    fn complete_op(&mut self, now: Instant, id: OpId, reply: Reply) {
        let Some(route) = self.routes.remove(&id) else {
            tracing::error!(?id, "scheme replied to an op it was never given");
            return;
        };

        // Let the next op of this client on this slot into the scheme. A write gets its version
        // now: versions must follow the order writes reach the scheme (the order they take
        // effect), since the journal and recovery keep the newest version; another client's
        // write may have reached the scheme while this one waited.
        let lane_key = (route.client, route.slot);
        match self.lanes.get_mut(&lane_key).and_then(VecDeque::pop_front) {
            Some((next, op)) => {
                let op = match op {
                    Op::Write(slot, record) => Op::Write(
                        slot,
                        Record {
                            version: self.version(),
                            ..record
                        },
                    ),
                    read => read,
                };
                if let Some(route) = self.routes.get_mut(&next) {
                    route.version = written_version(&op);
                }
                self.scheme.submit(now, next, op)
            }
            None => {
                self.lanes.remove(&lane_key);
            }
        }
        let refs = self.slot_refs.entry(route.slot).or_default();
        *refs -= 1;
        if *refs == 0 {
            self.slot_refs.remove(&route.slot);
            self.gate_moved = true;
            if self.releasing.remove(&route.slot) {
                self.directory.release(route.slot);
            }
        }

        if matches!(reply, Reply::Written)
            && let Some(version) = route.version
        {
            let known = self.acknowledged.entry(route.slot).or_default();
            *known = (*known).max(version);
        }
        let Some(waiting) = self.commands.get_mut(&route.command) else {
            return;
        };
        match (reply, route.expect) {
            (Reply::Value(record), Expect::Value(key, index)) => {
                // The slot may have changed hands since the read began; only the key's own
                // record answers it.
                if !record.is_empty() && record.key == key {
                    waiting.values[index] = Some(record.value);
                }
            }
            (Reply::Written, Expect::Written) | (Reply::Value(_), Expect::Cover) => {}
            // A cover read that fails fails its command, as a read of a present key would.
            (Reply::Failed(error), _) => {
                waiting.error.get_or_insert(CommandError::Scheme(error));
            }
            (reply, _) => {
                tracing::error!(?reply, "scheme gave the wrong kind of reply");
            }
        }
        waiting.remaining -= 1;
        if waiting.remaining == 0 {
            let waiting = self
                .commands
                .remove(&route.command)
                .expect("looked up above");
            let outcome = match (waiting.error, waiting.shape) {
                (error, Shape::UnitRead(unit)) => {
                    return self.unit_read(now, unit, waiting.values, error);
                }
                (error, Shape::UnitWritten(unit)) => return self.unit_written(unit, error),
                (Some(error), _) => Outcome::Error(error),
                (None, Shape::Value) => Outcome::Value(waiting.values.into_iter().next().flatten()),
                (None, Shape::Values) => Outcome::Values(waiting.values),
                (None, Shape::Ok) => Outcome::Ok,
                (None, Shape::Integer(n)) => Outcome::Integer(n),
            };
            self.finish(waiting.token, outcome);
        }
    }

    fn finish(&mut self, token: u64, outcome: Outcome) {
        self.commands_done += 1;
        self.outcomes.push_back((token, outcome));
    }
}

/// The version a write op carries; `None` for reads.
fn written_version(op: &Op) -> Option<u64> {
    match op {
        Op::Write(_, record) => Some(record.version),
        Op::Read(_) => None,
    }
}
