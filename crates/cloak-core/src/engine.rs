//! The engine: Redis-like commands on top of a scheme, still without any I/O.
//!
//! It owns the [`KeyDirectory`] and turns each [`Command`] into slot operations for the
//! [`Scheme`], then gathers their replies into one [`Outcome`] per command. It also enforces the
//! ordering the schemes rely on: a client's later op on a slot waits in a *lane* until its earlier
//! ones have left the scheme (reads may join them in a scheme that allows it: see `lanes`), so
//! pipelined commands of a connection take effect in the order they were sent, while different
//! clients stay concurrent.
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
//! Types and deadlines (see [`crate::envelope`]) live in each value and, for the engine's own
//! use, in a [`Keyspace`]: `TYPE`, `TTL` and their relatives answer from it without touching
//! storage, like `EXISTS`, and a command for the wrong type answers `WRONGTYPE` (with the cover
//! reads an absent key would have had, so a failed type check shows storage nothing either).
//!
//! Commands that read a key and write what the read decides (INCR, APPEND, `SET … GET`, EXPIRE,
//! PERSIST, GETEX with an option, hash updates, RENAME, COPY, MSETNX, EXEC, …) run as *units*,
//! alone on their keys: see `engine/gate.rs` for how they wait and `engine/unit.rs` for how
//! they run. What each does to a value is [`Update::apply`], the one place of the type check.
//! To storage a unit is a read of each key it names and a write (or a cover read) of each key
//! it may write: the accesses of GETs and SETs, which every scheme already hides.
//!
//! Expired keys: a command never sees a key whose deadline has passed (each command first
//! forgets the expired keys it names), and a reaper deletes their elements through the scheme as
//! ordinary deletes, at most [`REAP_PER_TICK`] a tick, only while the scheme accepts ops, and
//! never for a key a unit holds. What storage can learn from the deletes: when they happen
//! follows deadlines clients chose, so the proxy makes accesses when no client asked for one.
//! Cloak and Waffle send fixed batches on a fixed schedule whatever they carry, and a delete
//! rides in one as any write does, so the server sees nothing. For schemes with traffic per op
//! (Path ORAM, CURIOUS, Pancake, `encrypted`), a delete is one access like any other (a
//! uniformly random path in a tree ORAM, smoothed replicas in Pancake): the server sees that an
//! access happened at that time, which it sees of every client op already, and not that it was
//! a deletion nor which key it touched (except `encrypted`, which shows every key's label by
//! design and so shows that this label was written at that time).

mod gate;
mod lanes;
mod listing;
mod unit;
mod watch;

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
// Keys here are the engine's own ids and slots, never chosen by clients: a fast hash is safe.
use hashbrown::{HashMap, HashSet};

use self::gate::{Gate, Waiter};
use self::lanes::Lanes;
use self::unit::Unit;
use self::watch::Watches;
use crate::acknowledged::Acknowledged;
use crate::command::{Command, CommandError, Deadline, Outcome, SetCondition, SetExpiry, TtlUnit};
use crate::database::DATABASES;
use crate::directory::KeyDirectory;
use crate::element::{Record, Slot};
use crate::envelope::{Entry, Kind};
use crate::hash::{Hash, HashOp};
use crate::integrity::SlotVersions;
use crate::keyspace::Keyspace;
use crate::scheme::{JournalId, JournalRequest, Op, OpId, Reply, Scheme, SchemeStats};
use crate::storage::{ExpectedReply, RequestId, StorageError, StorageReply, StorageRequest};
use crate::update::Update;

/// Identifies a client (a connection) for per-client ordering.
pub type ClientId = u64;

/// Most expired keys the reaper deletes per tick: bounded work, whatever expires at once.
pub const REAP_PER_TICK: usize = 32;
/// The reaper's lane and its deletes' command: nobody waits for their outcome.
const REAPER: ClientId = ClientId::MAX;
const NO_COMMAND: u64 = u64::MAX;

/// What a command may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key.
    pub max_key: usize,
    /// Largest value.
    pub max_value: usize,
    /// Most keys one MGET/MSET/DEL/EXISTS may name, which bounds a single command's memory.
    pub max_keys_per_command: usize,
}

/// The engine's counters for `INFO`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Commands completed.
    pub commands: u64,
    /// Keys that exist.
    pub keys: u64,
    /// Keys the store holds.
    pub capacity: u64,
    /// Keys with a deadline (`INFO`'s `expires=`).
    pub expires: u64,
    /// Keys in each of the 16 databases (for INFO's keyspace section).
    pub keys_per_db: Vec<u64>,
    /// Keys with a deadline in each of the 16 databases (`expires=` of each keyspace line).
    pub expires_per_db: Vec<u64>,
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
    /// An answer computed from what was read (or known at the start).
    Computed(Outcome),
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
    /// A cover read that `n - 1` more follow, one after the other: the accesses of a command
    /// whose real ones would come one after the other too (an update's read, then its write).
    Covers(usize),
    /// A hash read: the key, and what to answer from its hash.
    View(Bytes, HashOp),
    /// A unit's read: the key, and where its whole entry (sealed, as stored) goes.
    Entry(Bytes, usize),
}

/// Converts between the driver's instants and Unix time, which deadlines are given in.
#[derive(Clone, Copy)]
struct WallClock {
    instant: Instant,
    unix_ms: u64,
}

impl WallClock {
    fn unix_ms(&self, at: Instant) -> u64 {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.unix_ms + after.as_millis() as u64,
            None => self
                .unix_ms
                .saturating_sub((self.instant - at).as_millis() as u64),
        }
    }

    fn instant(&self, unix_ms: u64) -> Instant {
        match unix_ms.checked_sub(self.unix_ms) {
            Some(after) => self.instant + Duration::from_millis(after),
            None => self
                .instant
                .checked_sub(Duration::from_millis(self.unix_ms - unix_ms))
                .unwrap_or(self.instant),
        }
    }
}

/// Runs commands on a scheme (see the module docs).
pub struct Engine {
    scheme: Box<dyn Scheme>,
    directory: KeyDirectory,
    limits: Limits,
    next_version: u64,
    next_op: u64,
    next_command: u64,
    routes: HashMap<OpId, Route>,
    commands: HashMap<u64, Waiting>,
    /// Ops held back behind earlier ones on their slot: see [`Lanes`].
    lanes: Lanes,
    /// Ops created and not yet answered, per slot: a deleted key's slot is reused only at zero,
    /// so no late write of the old key can land on the new one.
    slot_refs: HashMap<Slot, u32>,
    /// Slots of deleted keys waiting for their last op.
    releasing: HashSet<Slot>,
    /// What answers each storage request the scheme has sent and storage not yet answered.
    in_flight: HashMap<RequestId, ExpectedReply>,
    /// Set by [`Engine::drain`]: the proxy is stopping.
    stopping: bool,
    outcomes: VecDeque<(u64, Outcome)>,
    commands_done: u64,
    /// Draws the slots of cover reads; `None` for schemes that need none.
    cover: Option<ChaCha20Rng>,
    /// The version of every slot's last acknowledged write (`DEL`s too), from recovery on: what
    /// storage holds once the scheme is drained, for the next start to check storage against.
    /// `None` when nothing saves them (no ledger, see [`Engine::without_acknowledged`]).
    acknowledged: Option<Acknowledged>,
    /// Every key's type and deadline.
    keyspace: Keyspace,
    clock: WallClock,
    /// Slots of expired keys, gone from the directory, whose elements the reaper has yet to
    /// delete (their slots come free once it has), in the order they expired; a slot no longer
    /// in `reaping` is skipped.
    expired: VecDeque<Slot>,
    /// The slots in `expired` the reaper is still to delete: a designated key created again
    /// takes its slot out (see [`Engine::insert_key`]) without a search through `expired`.
    reaping: HashSet<Slot>,
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
        let lanes = Lanes::new(scheme.reads_join_earlier_ops());
        let db_sizes = listing::count_by_db(&directory, limits.max_key);
        let acknowledged = Some(Acknowledged::new(directory.capacity()));
        Self {
            scheme,
            directory,
            limits,
            next_version: 1,
            next_op: 0,
            next_command: 0,
            routes: HashMap::new(),
            commands: HashMap::new(),
            lanes,
            slot_refs: HashMap::new(),
            releasing: HashSet::new(),
            in_flight: HashMap::new(),
            stopping: false,
            outcomes: VecDeque::new(),
            commands_done: 0,
            cover: scheme_needs_cover.then(ChaCha20Rng::from_os_rng),
            acknowledged,
            keyspace: Keyspace::default(),
            clock: WallClock {
                instant: Instant::now(),
                unix_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            },
            expired: VecDeque::new(),
            reaping: HashSet::new(),
            gate: Gate::default(),
            gate_moved: false,
            units: HashMap::new(),
            next_unit: 0,
            watches: Watches::default(),
            db_sizes,
            random: ChaCha20Rng::from_os_rng(),
        }
    }

    /// Starts from the types and deadlines recovery found (see [`crate::RecoveredRecords::keyspace`]).
    pub fn with_keyspace(mut self, keyspace: Keyspace) -> Self {
        self.keyspace = keyspace;
        self
    }

    /// Sets which Unix time (in milliseconds) `instant` is; by default, the system clock's at
    /// the engine's creation. Tests and simulations pin it.
    pub fn with_wall_clock(mut self, instant: Instant, unix_ms: u64) -> Self {
        self.clock = WallClock { instant, unix_ms };
        self
    }

    /// How many keys have a deadline (`INFO`'s keyspace line, `expires=`).
    pub fn expiring_keys(&self) -> usize {
        self.keyspace.expiring()
    }

    /// Continues version numbers from `next` (after recovery: above every recovered version).
    pub fn with_next_version(mut self, next: u64) -> Self {
        self.next_version = next.max(1);
        self
    }

    /// Starts from the slot versions recovery found (what storage holds at the start).
    pub fn with_acknowledged(mut self, versions: impl IntoIterator<Item = (Slot, u64)>) -> Self {
        if let Some(acknowledged) = &mut self.acknowledged {
            for (slot, version) in versions {
                acknowledged.raise(slot, version);
            }
        }
        self
    }

    /// Keeps no slot versions: for a proxy without a ledger, where nothing would ever read them.
    /// They cost 8 bytes a slot (8 MB at a million keys), and recovery's versions need not be
    /// gathered at all.
    pub fn without_acknowledged(mut self) -> Self {
        self.acknowledged = None;
        self
    }

    /// The version of every slot's last acknowledged write, recovered ones included (slots
    /// never written are left out); `None` if the engine keeps none
    /// ([`Engine::without_acknowledged`]). Storage holds at least these once
    /// [`SchemeStats::unwritten`] is zero.
    pub fn acknowledged(&self) -> Option<SlotVersions> {
        self.acknowledged.as_ref().map(Acknowledged::versions)
    }

    /// The sizes and counts commands must stay within.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The scheme it runs on.
    pub fn scheme(&self) -> &dyn Scheme {
        self.scheme.as_ref()
    }

    /// Its counters.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            commands: self.commands_done,
            keys: self.directory.len() as u64,
            capacity: self.directory.capacity() as u64,
            expires: self.keyspace.expiring() as u64,
            keys_per_db: self.db_sizes.iter().map(|&n| n as u64).collect(),
            expires_per_db: self.expiring_per_db(),
        }
    }

    /// How many keys with a deadline each database holds.
    fn expiring_per_db(&self) -> Vec<u64> {
        let mut counts = vec![0; DATABASES as usize];
        for key in self.keyspace.expiring_keys() {
            counts[usize::from(crate::database::db_of(key, self.limits.max_key).index())] += 1;
        }
        counts
    }

    /// The scheme's counters.
    pub fn scheme_stats(&self) -> SchemeStats {
        self.scheme.stats()
    }

    /// Storage requests handed out by [`Engine::poll_storage`] and not yet answered (or failed).
    pub fn storage_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Backpressure from the scheme: stop submitting while `false`.
    pub fn accepts(&self) -> bool {
        self.scheme.accepts()
    }

    /// Takes a command; its outcome comes from [`Engine::poll_outcome`] with the same `token`.
    pub fn submit(&mut self, now: Instant, client: ClientId, token: u64, command: Command) {
        // A running script's calls and end act on the keys its unit already holds: they pass the
        // gate (which would have them wait for that very unit).
        match command {
            Command::ScriptCall { unit, command } => {
                let outcome = self.script_call(client, unit, &command);
                self.finish(token, outcome);
                self.drain_replies(now);
                return;
            }
            Command::ScriptEnd(unit) => {
                self.script_end(now, client, token, unit);
                self.drain_replies(now);
                return;
            }
            _ => {}
        }
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

    /// Hands storage's answer, which arrived at `arrived`, to the scheme at `now`, checked
    /// first: a reply of the wrong kind or size for its request reaches the scheme as an error
    /// (see [`ExpectedReply`]), and a reply to a request that is not in flight (never sent, or
    /// answered already) is dropped.
    ///
    /// The scheme gets both instants (see [`Scheme::handle_storage`]); the commands the answer
    /// unblocks run at `now`, like any other (a TTL counts from then).
    pub fn handle_storage(
        &mut self,
        now: Instant,
        arrived: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) {
        let Some(expected) = self.in_flight.remove(&id) else {
            tracing::warn!(?id, "dropped a storage reply to no request in flight");
            return;
        };
        self.scheme
            .handle_storage(now, arrived, id, expected.check(result));
        self.drain_replies(now);
    }

    /// The scheme's timer (when due) and the reaper's tick.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.scheme.poll_timeout().is_some_and(|at| at <= now) {
            self.scheme.handle_timeout(now);
        }
        if !self.stopping {
            self.reap(now);
        }
        self.drain_replies(now);
    }

    /// No more commands will come: the scheme writes out what it holds (see [`Scheme::drain`]),
    /// and the reaper stops, so that no op of the engine's own comes after the last command's
    /// (what expires meanwhile is reaped by the next start).
    pub fn drain(&mut self, now: Instant) {
        self.stopping = true;
        self.scheme.drain(now);
        self.drain_replies(now);
    }

    /// No command waits and nothing is unwritten after [`Engine::drain`]: see
    /// [`Scheme::settle`].
    pub fn settle(&mut self) {
        self.scheme.settle();
    }

    /// When the engine next needs [`Engine::handle_timeout`], if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.scheme.poll_timeout(), self.reap_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the reaper has work it can do: never while the scheme refuses ops, nor for keys
    /// held by updates (it would find nothing to do, and a driver would spin).
    fn reap_at(&self) -> Option<Instant> {
        if self.stopping || !self.scheme.accepts() {
            return None;
        }
        if !self.expired.is_empty() {
            return Some(self.clock.instant);
        }
        self.keyspace
            .by_deadline()
            .find(|(_, slot)| !self.held(*slot))
            .map(|(at, _)| self.clock.instant(at))
    }

    /// Forgets up to [`REAP_PER_TICK`] keys that are due and deletes as many expired elements
    /// through the scheme (see the module docs for what storage sees).
    fn reap(&mut self, now: Instant) {
        self.forget_due(now, REAP_PER_TICK);
        for _ in 0..REAP_PER_TICK {
            if !self.scheme.accepts() {
                break;
            }
            let Some(slot) = self.expired.pop_front() else {
                break;
            };
            if self.reaping.remove(&slot) {
                self.delete_slot(now, REAPER, NO_COMMAND, slot, Expect::Written);
            }
        }
    }

    /// Whether a unit holds the key in `slot` (the reaper leaves it alone meanwhile).
    fn held(&self, slot: Slot) -> bool {
        self.keyspace
            .key_of(slot)
            .is_some_and(|key| self.gate.holds(key))
    }

    /// Takes an expired key out of the directory; its element waits for the reaper.
    fn forget_expired(&mut self, slot: Slot, key: &Bytes) {
        if self.directory.get(key) == Some(slot) {
            self.remove_key(key);
            self.watches.touched(key);
        }
        self.keyspace.clear(slot);
        if self.reaping.insert(slot) {
            self.expired.push_back(slot);
        }
    }

    /// Forgets every key whose deadline has passed (but those units hold).
    fn forget_all_expired(&mut self, now: Instant) {
        self.forget_due(now, usize::MAX);
    }

    /// Forgets up to `most` keys whose deadline has passed, leaving those units hold.
    fn forget_due(&mut self, now: Instant, most: usize) {
        let unix = self.clock.unix_ms(now);
        let due: Vec<(Slot, Bytes)> = self
            .keyspace
            .due(unix)
            .filter(|(_, key)| !self.gate.holds(key))
            .take(most)
            .map(|(slot, key)| (slot, key.clone()))
            .collect();
        for (slot, key) in due {
            self.forget_expired(slot, &key);
        }
    }

    /// Forgets the expired keys a command names, so it never sees them.
    fn forget_expired_named(&mut self, now: Instant, command: &Command) {
        if self.keyspace.expiring() == 0 {
            return;
        }
        let unix = self.clock.unix_ms(now);
        let expired: Vec<(Slot, Bytes)> = command
            .keys()
            .into_iter()
            .filter_map(|key| {
                let slot = self.directory.get(&key)?;
                let at = self.keyspace.deadline(slot)?;
                (at <= unix).then_some((slot, key))
            })
            .collect();
        for (slot, key) in expired {
            if self.directory.get(&key) == Some(slot) {
                self.forget_expired(slot, &key);
            }
        }
    }

    /// The next storage request to send.
    pub fn poll_storage(&mut self) -> Option<StorageRequest> {
        let request = self.scheme.poll_storage()?;
        self.in_flight
            .insert(request.id, request.op.expected_reply());
        Some(request)
    }

    /// The next journal request to make durable.
    pub fn poll_journal(&mut self) -> Option<JournalRequest> {
        self.scheme.outbox().poll_journal()
    }

    /// A journal request is durable (`Ok`) or could not be made durable.
    pub fn handle_journaled(&mut self, now: Instant, id: JournalId, result: Result<(), String>) {
        self.scheme.handle_journaled(now, id, result);
        self.drain_replies(now);
    }

    /// The next finished command, by the token it was submitted with.
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
        self.forget_expired_named(now, &command);
        if matches!(
            command,
            Command::DbSize(_)
                | Command::Keys { .. }
                | Command::Scan { .. }
                | Command::RandomKey(_)
        ) {
            // Listings never show a key whose deadline passed, reaped or not.
            self.forget_all_expired(now);
        }
        let unix = self.clock.unix_ms(now);
        match command {
            Command::Get(key)
            | Command::GetEx {
                key, change: None, ..
            } => {
                let slot = self.directory.get(&key);
                if slot.is_some_and(|slot| self.keyspace.kind(slot) != Kind::String) {
                    return self.answer_covered(now, client, token, wrong_type(), 1);
                }
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
            } => self.set(now, client, token, key, Entry::string(value), condition)?,
            Command::SetExpiring {
                key,
                value,
                condition,
                expiry,
                name,
            } => {
                let deadline = match expiry {
                    SetExpiry::Keep => self
                        .directory
                        .get(&key)
                        .and_then(|slot| self.keyspace.deadline(slot)),
                    SetExpiry::At(deadline) => Some(resolve(deadline, unix, name)? as u64),
                };
                let entry = Entry {
                    deadline,
                    ..Entry::string(value)
                };
                self.set(now, client, token, key, entry, condition)?;
            }
            Command::Ttl { key, unit } => {
                return Err(Outcome::Integer(self.ttl(&key, unit, unix)));
            }
            Command::Type(key) => {
                let kind = self
                    .directory
                    .get(&key)
                    .map(|slot| self.keyspace.kind(slot));
                return Err(Outcome::Status(kind.map_or("none", Kind::name)));
            }
            Command::Hash { key, op } if op.is_read() => {
                let slot = self.directory.get(&key);
                if slot.is_some_and(|slot| self.keyspace.kind(slot) != Kind::Hash) {
                    return self.answer_covered(now, client, token, wrong_type(), 1);
                }
                let Some(slot) = slot else {
                    return self.answer_covered(now, client, token, op.read(None), 1);
                };
                let id = self.wait(token, Shape::Computed(op.read(None)), 0, 1);
                self.start_op(now, client, id, slot, Expect::View(key, op), Op::Read);
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
                    self.write(
                        now,
                        client,
                        id,
                        slot,
                        key,
                        Entry::string(value),
                        Expect::Written,
                    );
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
            | Command::Expire { .. }
            | Command::Persist(_)
            | Command::GetEx { .. }
            | Command::Hash { .. }
            | Command::MSetNx(_)
            | Command::Rename { .. }
            | Command::Copy { .. }
            | Command::Transaction(_)
            | Command::Script(_) => {
                unreachable!("`submit` sends every unit through the gate to `begin_unit`")
            }
            Command::ScriptCall { .. } | Command::ScriptEnd(_) => {
                unreachable!("`submit` runs a script's calls and end on its unit")
            }
        }
        Ok(())
    }

    /// `SET` and its relatives: writes `entry` under `key` unless `condition` fails.
    fn set(
        &mut self,
        now: Instant,
        client: ClientId,
        token: u64,
        key: Bytes,
        entry: Entry,
        condition: SetCondition,
    ) -> Result<(), Outcome> {
        let exists = self.directory.get(&key).is_some();
        let skip = match condition {
            SetCondition::Always => false,
            SetCondition::IfAbsent => exists,
            SetCondition::IfPresent => !exists,
        };
        if skip {
            return self.answer_covered(now, client, token, Outcome::Value(None), 1);
        }
        let slot = self.slot_for(&key)?;
        self.watches.touched(&key);
        let id = self.wait(token, Shape::Ok, 0, 1);
        self.write(now, client, id, slot, key, entry, Expect::Written);
        Ok(())
    }

    /// The key's slot, taking a free one for a new key.
    fn slot_for(&mut self, key: &[u8]) -> Result<Slot, Outcome> {
        match self.insert_key(key) {
            Some((slot, _)) => Ok(slot),
            None => Err(Outcome::Error(CommandError::StoreFull {
                capacity: self.directory.capacity(),
            })),
        }
    }

    /// `TTL` and its relatives, from the keyspace alone.
    fn ttl(&self, key: &[u8], unit: TtlUnit, unix: u64) -> i64 {
        let Some(slot) = self.directory.get(key) else {
            return -2;
        };
        let Some(at) = self.keyspace.deadline(slot) else {
            return -1;
        };
        unit::ttl(at, unit, unix)
    }

    /// Answers at once, after the cover reads the command would have made on an existing key
    /// (`ops` of them, for schemes that need covers: see the module docs).
    fn answer_covered(
        &mut self,
        now: Instant,
        client: ClientId,
        token: u64,
        outcome: Outcome,
        ops: usize,
    ) -> Result<(), Outcome> {
        if self.cover.is_none() {
            return Err(outcome);
        }
        let id = self.wait(token, Shape::Computed(outcome), 0, ops);
        self.cover_as(now, client, id, Expect::Covers(ops));
        Ok(())
    }

    /// Deletes the element of a key already gone from the directory; its slot comes free once
    /// every op on it is done.
    ///
    /// The delete reaches the scheme only after every op taken before it on the slot has left
    /// it, whichever client sent them, and the ops taken on the slot after it wait behind it (a
    /// key designated this slot gets it back at once: see [`KeyDirectory::designate`]). Another
    /// client's write waiting in its lane there took effect before the delete: had the delete
    /// gone first, the scheme would answer reads taken before it with its empty record, and that
    /// write would land after it on a slot no key maps to any more (its record left in storage
    /// for a restart's scan). The lanes keep that order (`Lanes::arrive_delete`).
    fn delete_slot(
        &mut self,
        now: Instant,
        client: ClientId,
        command: u64,
        slot: Slot,
        expect: Expect,
    ) {
        self.keyspace.clear(slot);
        self.releasing.insert(slot);
        let version = self.version();
        let op = Op::Write(
            slot,
            Record {
                version,
                ..Record::empty()
            },
        );
        let id = self.route_op(client, command, slot, expect, &op);
        if let Some((id, op)) = self.lanes.arrive_delete(client, id, op) {
            self.scheme.submit(now, id, op);
        }
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
            self.delete_slot(now, client, id, slot, Expect::Written);
        }
        Ok(())
    }

    /// Gives a key a slot (a new key counts in its database).
    ///
    /// A designated key that expired gets its slot back at once, maybe before the reaper has
    /// deleted the expired element there: the reaper then leaves the slot alone. The new key's
    /// write replaces that element anyway, and the delete, going in after the write, would wipe
    /// the new value and clear its type and deadline. (Other slots come back only from the free
    /// list, which takes an expired key's slot only once its delete is done.)
    fn insert_key(&mut self, key: &[u8]) -> Option<(Slot, bool)> {
        let inserted = self.directory.get_or_insert(key);
        if let Some((slot, true)) = inserted {
            self.count_key(key, true);
            if self.directory.is_designated(slot) {
                self.reaping.remove(&slot);
            }
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

    /// What fails a command before anything changes, so it has no effect: a write while the
    /// scheme refuses new ops, and size limits.
    fn check(&self, command: &Command) -> Result<(), CommandError> {
        // Before the directory changes: see `Scheme::refusal`.
        if command.may_write()
            && let Some(error) = self.scheme.refusal()
        {
            return Err(CommandError::Scheme(error));
        }
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
            Command::Set { key, value, .. } | Command::SetExpiring { key, value, .. } => {
                key_ok(key).and(value_ok(value))
            }
            Command::Expire { key, .. }
            | Command::Persist(key)
            | Command::Ttl { key, .. }
            | Command::GetEx { key, .. }
            | Command::Type(key)
            | Command::Hash { key, .. } => key_ok(key),
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
            Command::Script(keys) => {
                count_ok(keys.len())?;
                keys.iter().try_for_each(key_ok)
            }
            // Each call is checked as it runs.
            Command::ScriptCall { .. } | Command::ScriptEnd(_) => Ok(()),
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
        self.cover_as(now, client, command, Expect::Cover);
    }

    /// A cover read whose reply goes to `expect`.
    fn cover_as(&mut self, now: Instant, client: ClientId, command: u64, expect: Expect) {
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
            if !self.lanes.busy(client, slot) {
                break;
            }
            slot = draw();
        }
        self.start_op(now, client, command, slot, expect, Op::Read);
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        now: Instant,
        client: ClientId,
        command: u64,
        slot: Slot,
        key: Bytes,
        entry: Entry,
        expect: Expect,
    ) {
        self.keyspace.set(slot, &key, entry.kind, entry.deadline);
        let record = Record {
            version: self.version(),
            key,
            value: entry.seal(),
        };
        self.start_op(now, client, command, slot, expect, |slot| {
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
        let op = op(slot);
        let id = self.route_op(client, command, slot, expect, &op);
        self.enter(now, client, id, op);
    }

    /// Hands `op` to the scheme, or holds it in its client's lane until the ops before it let it
    /// in (see [`Lanes`]).
    fn enter(&mut self, now: Instant, client: ClientId, id: OpId, op: Op) {
        if let Some((id, op)) = self.lanes.arrive(client, id, op) {
            self.scheme.submit(now, id, op);
        }
    }

    /// Gives `op` an id whose reply goes to `command`, and counts it on its slot.
    fn route_op(
        &mut self,
        client: ClientId,
        command: u64,
        slot: Slot,
        expect: Expect,
        op: &Op,
    ) -> OpId {
        let id = OpId(self.next_op);
        self.next_op += 1;
        self.routes.insert(
            id,
            Route {
                command,
                client,
                slot,
                expect,
                version: written_version(op),
            },
        );
        *self.slot_refs.entry(slot).or_default() += 1;
        id
    }

    /// `op` as it enters the scheme after waiting: a write gets its version now. Versions must
    /// follow the order writes reach the scheme (the order they take effect), since the journal
    /// and recovery keep the newest version; another client's write may have reached the scheme
    /// while this one waited.
    fn versioned_now(&mut self, id: OpId, op: Op) -> Op {
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
        if let Some(route) = self.routes.get_mut(&id) {
            route.version = written_version(&op);
        }
        op
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

    /// Whether `record` holds a key whose deadline has passed, which no command may see. The
    /// keyspace forgets such keys as commands name them, but storage may still hold the record:
    /// the reaper had not deleted it yet when a read was taken, or a write that was to replace
    /// it failed (a designated key written again after it expired takes its slot back before
    /// the reaper deletes the old record, and the reaper then leaves the slot to that write).
    fn past_its_deadline(&self, record: &Record, now: Instant) -> bool {
        !record.is_empty()
            && Entry::open(&record.value).is_ok_and(|entry| entry.expired(self.clock.unix_ms(now)))
    }

    fn complete_op(&mut self, now: Instant, id: OpId, reply: Reply) {
        let Some(route) = self.routes.remove(&id) else {
            tracing::error!(?id, "scheme replied to an op it was never given");
            return;
        };

        // Let the ops this one held back into the scheme.
        for (next, op) in self.lanes.leave(route.client, route.slot) {
            let op = self.versioned_now(next, op);
            self.scheme.submit(now, next, op)
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
            && let Some(acknowledged) = &mut self.acknowledged
        {
            acknowledged.raise(route.slot, version);
        }
        let route = match route.expect {
            Expect::Covers(left) => {
                if left > 1 {
                    self.cover_as(now, route.client, route.command, Expect::Covers(left - 1));
                }
                Route {
                    expect: Expect::Cover,
                    ..route
                }
            }
            _ => route,
        };
        let reply = match reply {
            Reply::Value(record) if self.past_its_deadline(&record, now) => {
                Reply::Value(Record::empty())
            }
            reply => reply,
        };
        let Some(waiting) = self.commands.get_mut(&route.command) else {
            return;
        };
        match (reply, route.expect) {
            (Reply::Value(record), Expect::Value(key, index)) => {
                // The slot may have changed hands since the read began; only the key's own
                // record answers it. A hash answers MGET with nil, as in Redis.
                if !record.is_empty() && record.key == key {
                    match Entry::open(&record.value) {
                        Ok(entry) if entry.kind == Kind::String => {
                            waiting.values[index] = Some(entry.data)
                        }
                        Ok(_) => {}
                        Err(error) => {
                            waiting.error.get_or_insert(error.into());
                        }
                    }
                }
            }
            (Reply::Value(record), Expect::Entry(key, index)) => {
                if !record.is_empty() && record.key == key {
                    waiting.values[index] = Some(record.value);
                }
            }
            (Reply::Value(record), Expect::View(key, op)) => {
                if !record.is_empty() && record.key == key {
                    let answer = match Entry::open(&record.value) {
                        Ok(entry) if entry.kind == Kind::Hash => match Hash::decode(&entry.data) {
                            Ok(hash) => op.read(Some(&hash)),
                            Err(_) => Outcome::Error(CommandError::MalformedHash),
                        },
                        Ok(_) => wrong_type(),
                        Err(error) => Outcome::Error(error.into()),
                    };
                    waiting.shape = Shape::Computed(answer);
                }
            }
            (Reply::Written | Reply::Value(_), Expect::Written)
            | (Reply::Value(_), Expect::Cover) => {}
            // A cover read that fails fails its command, as a read of a present key would.
            (Reply::Failed(error), _) => {
                waiting.error.get_or_insert(CommandError::Scheme(error));
            }
            (reply, _) => {
                tracing::error!(?reply, "scheme gave the wrong kind of reply");
            }
        }
        self.count_done(now, route.command, None);
    }

    /// Counts one of a command's ops done, and answers the command after its last.
    fn count_done(&mut self, now: Instant, command: u64, error: Option<CommandError>) {
        let Some(waiting) = self.commands.get_mut(&command) else {
            return;
        };
        if let Some(error) = error {
            waiting.error.get_or_insert(error);
        }
        waiting.remaining -= 1;
        if waiting.remaining == 0 {
            let waiting = self.commands.remove(&command).expect("looked up above");
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
                (None, Shape::Computed(outcome)) => outcome,
            };
            self.finish(waiting.token, outcome);
        }
    }

    fn finish(&mut self, token: u64, outcome: Outcome) {
        self.commands_done += 1;
        self.outcomes.push_back((token, outcome));
    }
}

fn wrong_type() -> Outcome {
    Outcome::Error(CommandError::WrongType)
}

/// A client's deadline in Unix milliseconds, or Redis's error for one beyond 64 bits.
fn resolve(deadline: Deadline, unix: u64, name: &'static str) -> Result<i64, Outcome> {
    match deadline {
        Deadline::At(at) => Ok(at),
        Deadline::In(after) => (unix as i64)
            .checked_add(after)
            .ok_or(Outcome::Error(CommandError::InvalidExpireTime(name))),
    }
}

/// The version a write op carries; `None` for reads.
fn written_version(op: &Op) -> Option<u64> {
    match op {
        Op::Write(_, record) => Some(record.version),
        Op::Read(_) => None,
    }
}
