//! An in-process driver with a virtual clock: the engine and its scheme against an in-memory
//! store, no sockets, no sleeping. Tests use it to step schemes precisely, the benchmark's
//! `--in-process` mode to simulate at full speed, and the auditor to record server views.
//!
//! Storage applies each request when the scheme sends it and answers `storage_delay` of virtual
//! time later; the journal makes a request durable `journal_delay` later. Virtual time only moves
//! when nothing is left to do at the current instant. [`Simulator::crash`] stops everything at
//! once and hands back what would survive a crash: storage and the durable journal.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::command::{Command, Outcome};
use crate::engine::{ClientId, Engine};
use crate::journal::JournalMap;
use crate::memory::MemoryStore;
use crate::scheme::{JournalId, JournalOp};
use crate::storage::{RequestId, StorageError, StorageOp, StorageReply, StorageRequest};
use crate::trace::{Observed, Trace};

/// Sees every storage request, values included, when storage receives it (see [`Simulator::tap`]).
type Tap = Box<dyn FnMut(Duration, &StorageOp) + Send>;

/// What storage answers a request with, when its time comes.
enum Answer {
    Ready(Result<StorageReply, StorageError>),
    /// A write applied only now (see [`Simulator::with_writes_landing_on_answer`]).
    Lands(StorageOp),
}

/// Runs an engine against an in-memory store and journal in virtual time: the tests' and the
/// auditor's proxy.
pub struct Simulator {
    engine: Engine,
    store: MemoryStore,
    start: Instant,
    now: Instant,
    storage_delay: Duration,
    storage_down: bool,
    /// Storage serves reads but refuses writes and deletes (a full disk).
    storage_full: bool,
    /// Storage applies nothing and answers every request with a reply of another kind.
    storage_confused: bool,
    in_flight: VecDeque<(Instant, RequestId, Answer)>,
    writes_land_on_answer: bool,
    /// Requests handed over to leave at a later instant (`StorageRequest::not_before`), in the
    /// order they leave.
    scheduled: BTreeMap<(Instant, RequestId), StorageRequest>,
    journal: JournalMap,
    journal_delay: Duration,
    journaling: VecDeque<(Instant, JournalId, JournalOp)>,
    trace: Option<Trace>,
    tap: Option<Tap>,
    /// Bytes moved to and from storage: addresses and values sent, values received.
    storage_bytes: u64,
    outcomes: HashMap<u64, (Duration, Outcome)>,
    next_token: u64,
}

impl Simulator {
    /// A simulation of `engine` on an empty store.
    pub fn new(engine: Engine) -> Self {
        Self::resume(engine, MemoryStore::new(), JournalMap::default())
    }

    /// A simulator over what an earlier one left behind (see [`Simulator::crash`]).
    pub fn resume(engine: Engine, store: MemoryStore, journal: JournalMap) -> Self {
        let start = Instant::now();
        Self {
            engine,
            store,
            start,
            now: start,
            storage_delay: Duration::ZERO,
            storage_down: false,
            storage_full: false,
            storage_confused: false,
            in_flight: VecDeque::new(),
            writes_land_on_answer: false,
            scheduled: BTreeMap::new(),
            journal,
            journal_delay: Duration::ZERO,
            journaling: VecDeque::new(),
            trace: None,
            tap: None,
            storage_bytes: 0,
            outcomes: HashMap::new(),
            next_token: 0,
        }
    }

    /// Virtual time each storage round trip takes.
    pub fn with_storage_delay(mut self, delay: Duration) -> Self {
        self.storage_delay = delay;
        self
    }

    /// Storage applies each write when it answers it rather than when it receives it, so a read
    /// sent meanwhile finds the elements from before the write: what real storage may do with
    /// requests that travel on different connections.
    pub fn with_writes_landing_on_answer(mut self) -> Self {
        self.writes_land_on_answer = true;
        self
    }

    /// Virtual time until a journal request is durable.
    pub fn with_journal_delay(mut self, delay: Duration) -> Self {
        self.journal_delay = delay;
        self
    }

    /// Stops at once: storage keeps what it applied, the journal what was durable; everything
    /// else (the scheme's memory, answers in flight) is lost.
    pub fn crash(self) -> (MemoryStore, JournalMap) {
        (self.store, self.journal)
    }

    /// The journal's content.
    pub fn journal(&self) -> &JournalMap {
        &self.journal
    }

    /// Storage, for recovery in tests.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// Starts recording what the server sees.
    pub fn record(&mut self) {
        self.trace = Some(Trace::new());
    }

    /// Shows `tap` every storage request from now on, values included, with its time, as storage
    /// receives it. For a trusted auditor holding the key that needs the ground truth (which
    /// records each element holds); what the server sees is [`Simulator::record`]'s trace.
    pub fn tap(&mut self, tap: impl FnMut(Duration, &StorageOp) + Send + 'static) {
        self.tap = Some(Box::new(tap));
    }

    /// What the server saw since recording began (or the last [`Simulator::take_trace`]).
    pub fn observed(&self) -> &[Observed] {
        self.trace.as_deref().unwrap_or_default()
    }

    /// What the server saw since [`Simulator::record`], leaving recording on.
    pub fn take_trace(&mut self) -> Trace {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Bytes moved to and from storage so far.
    pub fn storage_bytes(&self) -> u64 {
        self.storage_bytes
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The server's memory, for tests that play a malicious server.
    pub fn store_mut(&mut self) -> &mut MemoryStore {
        &mut self.store
    }

    /// While down, every storage request fails.
    pub fn set_storage_down(&mut self, down: bool) {
        self.storage_down = down;
    }

    /// While full, storage serves reads and scans but refuses every write and delete, as a
    /// server whose disk is full does.
    pub fn set_storage_full(&mut self, full: bool) {
        self.storage_full = full;
    }

    /// While confused, storage applies nothing and answers each request with a reply of the
    /// wrong kind, as a buggy or hostile server might: `Done` to a read or a scan, a value per
    /// address to a write or a delete.
    pub fn set_storage_confused(&mut self, confused: bool) {
        self.storage_confused = confused;
    }

    /// The virtual time now.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Tells the engine no more commands will come (a proxy shutting down), at the current
    /// virtual time.
    pub fn drain(&mut self) {
        self.engine.drain(self.now);
        self.pump();
    }

    /// Submits a command at the current virtual time; returns a token for its outcome.
    pub fn submit(&mut self, client: ClientId, command: Command) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.engine.submit(self.now, client, token, command);
        self.pump();
        token
    }

    /// Takes a command's outcome if it has one.
    pub fn outcome(&mut self, token: u64) -> Option<Outcome> {
        self.outcomes.remove(&token).map(|(_, outcome)| outcome)
    }

    /// No storage request is unanswered (nor waiting for its time to leave).
    pub fn storage_idle(&self) -> bool {
        self.in_flight.is_empty() && self.scheduled.is_empty()
    }

    /// Whether command `token` has finished.
    pub fn has_outcome(&self, token: u64) -> bool {
        self.outcomes.contains_key(&token)
    }

    /// Whether any finished command is waiting to be taken.
    pub fn has_outcomes(&self) -> bool {
        !self.outcomes.is_empty()
    }

    /// Takes every outcome so far: `(token, virtual time it completed, outcome)`.
    pub fn drain_outcomes(&mut self) -> Vec<(u64, Duration, Outcome)> {
        self.outcomes
            .drain()
            .map(|(token, (at, outcome))| (token, at, outcome))
            .collect()
    }

    /// Submits a command and runs until it completes (at most an hour of virtual time).
    pub fn execute(&mut self, client: ClientId, command: Command) -> Option<Outcome> {
        let token = self.submit(client, command);
        let limit = self.now + Duration::from_secs(3600);
        while !self.outcomes.contains_key(&token) && self.step(limit) {}
        self.outcome(token)
    }

    /// Runs `duration` of virtual time.
    pub fn run_for(&mut self, duration: Duration) {
        let deadline = self.now + duration;
        while self.step(deadline) {}
        self.now = self.now.max(deadline);
    }

    /// Runs until `done()` holds or `limit` of virtual time passes; returns whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let deadline = self.now + limit;
        while !done(self) {
            if !self.step(deadline) {
                return done(self);
            }
        }
        true
    }

    /// Handles the next event due no later than `deadline`; `false` if there is none.
    fn step(&mut self, deadline: Instant) -> bool {
        // A scheme may have requests before any event (Cloak fills storage at start); sending
        // them here rather than at construction lets a caller start recording first.
        self.pump();
        let next_reply = self.in_flight.front().map(|(at, ..)| *at);
        let next_journal = self.journaling.front().map(|(at, ..)| *at);
        let next_release = self.scheduled.first_key_value().map(|((at, _), _)| *at);
        let Some(next) = [
            next_reply,
            next_journal,
            next_release,
            self.engine.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min() else {
            return false;
        };
        if next > deadline {
            return false;
        }
        self.now = self.now.max(next);
        if next_journal.is_some_and(|at| at <= self.now) {
            let (_, id, op) = self.journaling.pop_front().expect("peeked");
            self.journal.apply(op);
            self.engine.handle_journaled(self.now, id, Ok(()));
        } else if next_reply.is_some_and(|at| at <= self.now) {
            let (_, id, answer) = self.in_flight.pop_front().expect("peeked");
            let result = match answer {
                Answer::Ready(result) => result,
                Answer::Lands(write) => Ok(self.store.apply(write)),
            };
            self.engine.handle_storage(self.now, self.now, id, result);
        } else if next_release.is_some_and(|at| at <= self.now) {
            let (_, request) = self.scheduled.pop_first().expect("peeked");
            self.transmit(request);
        } else {
            self.engine.handle_timeout(self.now);
        }
        self.pump();
        true
    }

    /// Storage receives `request` now: applies it (or fails it as the simulated storage is set
    /// to) and answers after the storage delay.
    fn transmit(&mut self, request: StorageRequest) {
        let refused =
            self.storage_full && matches!(request.op, StorageOp::Write(_) | StorageOp::Delete(_));
        let result = if self.storage_down {
            Err(StorageError("simulated storage outage".into()))
        } else if self.storage_confused {
            Ok(match &request.op {
                StorageOp::Read(_) | StorageOp::Scan { .. } => StorageReply::Done,
                op => StorageReply::Values(vec![None; op.len()]),
            })
        } else if refused {
            Err(StorageError(
                "simulated full disk: No space left on device".into(),
            ))
        } else {
            if let Some(trace) = &mut self.trace {
                let at = self.now - self.start;
                trace.push(Observed {
                    answered: Some(at + self.storage_delay),
                    ..Observed::of(at, &request.op)
                });
            }
            if let Some(tap) = &mut self.tap {
                tap(self.now - self.start, &request.op);
            }
            self.storage_bytes += request.op.sent_bytes();
            if self.writes_land_on_answer && matches!(request.op, StorageOp::Write(_)) {
                let answered = self.now + self.storage_delay;
                self.in_flight
                    .push_back((answered, request.id, Answer::Lands(request.op)));
                return;
            }
            let reply = self.store.apply(request.op);
            self.storage_bytes += reply.received_bytes();
            Ok(reply)
        };
        self.in_flight.push_back((
            self.now + self.storage_delay,
            request.id,
            Answer::Ready(result),
        ));
    }

    /// Sends what the engine wants sent and collects what it answered, until nothing moves.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(request) = self.engine.poll_storage() {
                moved = true;
                match request.not_before {
                    Some(at) if at > self.now => {
                        self.scheduled.insert((at, request.id), request);
                    }
                    _ => self.transmit(request),
                }
            }
            while let Some(request) = self.engine.poll_journal() {
                moved = true;
                self.journaling
                    .push_back((self.now + self.journal_delay, request.id, request.op));
            }
            // With no delay, the journal is durable within this same instant.
            while self.journal_delay.is_zero()
                && let Some((_, id, op)) = self.journaling.pop_front()
            {
                moved = true;
                self.journal.apply(op);
                self.engine.handle_journaled(self.now, id, Ok(()));
            }
            while let Some((token, outcome)) = self.engine.poll_outcome() {
                self.outcomes
                    .insert(token, (self.now - self.start, outcome));
            }
            if !moved {
                return;
            }
        }
    }
}
