//! The shell every scheme runs in: the storage plumbing written once, so that a scheme is its
//! algorithm and nothing else.
//!
//! [`Shell`] implements [`cloak_core::Scheme`] over an [`Algorithm`]. It owns what every scheme
//! needs around storage:
//!
//! - the in-flight table ([`in_flight`]): each request's id, kind and purpose, and the check that
//!   an answer has the kind and shape its request calls for (a `Done` answering a read is a
//!   failure, never "nothing stored"; an id it never sent is logged and ignored);
//! - failures ([`retry`]): a failed or malformed answer is counted, and the request is repeated
//!   after a growing backoff unless the algorithm gives it up; while storage fails, client ops
//!   that need it are answered "storage unavailable" ([`Io::unavailable`]);
//! - the timers ([`timers`]): the repeats' and the algorithm's own deadline;
//! - the [`cloak_core::Outbox`] and the journal completions it waits for, and the counters
//!   ([`Io`]);
//! - the initial fill's pacing ([`fill`]), the recovered records it writes ([`recovered`]), and
//!   the check that a client op names an existing slot.
//!
//! What the server sees stays the algorithm's choice alone: the shell sends exactly the requests
//! the algorithm asks for, in that order, and repeats a failed one unchanged (a repeat shows the
//! server nothing it did not cause by failing the request).

pub mod fill;
pub mod in_flight;
mod io;
pub mod recovered;
pub mod retry;
pub mod timers;

use std::fmt;
use std::time::Instant;

use cloak_core::{
    JournalId, Op, OpId, Outbox, Reply, RequestId, Scheme, SchemeError, SchemeStats, StorageError,
    StorageReply, StorageRequest,
};

pub use in_flight::Answer;
pub use io::Io;
use timers::{Timer, TimerTable};

/// What to do with a request storage failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// Repeat it unchanged after the backoff (the algorithm's state waits for it).
    Repeat,
    /// Drop it: the algorithm answered the clients it served, or will send what it still needs.
    GiveUp,
}

/// Why an algorithm sent a storage request; handed back with the request's answer.
pub trait RequestPurpose: fmt::Debug + Send {
    /// What a failure of a request sent for this purpose does to it. It is known when the
    /// request is sent, so the shell keeps a copy only of the requests it may have to repeat
    /// (a copy of every request is an allocation per request that a pass-through scheme, which
    /// never repeats a client's request, would pay for nothing). Most algorithms repeat every
    /// request: their state waits for it.
    fn on_failure(&self) -> OnFailure {
        OnFailure::Repeat
    }
}

/// One scheme's algorithm: what to send, what to do with an answer, what to do when storage is
/// down, and its own deadlines. The [`Shell`] around it does the rest.
pub trait Algorithm: Send {
    /// Why the algorithm sent a request; handed back with the request's answer.
    type Purpose: RequestPurpose;

    /// The name given to `--scheme`.
    const NAME: &'static str;

    /// The algorithm's connection to storage, clients and the journal.
    fn io(&mut self) -> &mut Io<Self::Purpose>;

    /// The same, to read.
    fn io_ref(&self) -> &Io<Self::Purpose>;

    /// Number of logical slots.
    fn slots(&self) -> u64;

    /// A client op on a slot below [`Algorithm::slots`].
    fn submit(&mut self, now: Instant, id: OpId, op: Op);

    /// The driver asks for a storage request and none is queued: send what has gathered since
    /// (ops that arrived together go out together). Most algorithms send as they go and keep
    /// the default, which sends nothing.
    fn poll(&mut self) {}

    /// Storage answered a request of this purpose, with an answer of the request's kind and
    /// shape.
    fn answered(&mut self, now: Instant, purpose: Self::Purpose, answer: Answer);

    /// Storage failed a request of this purpose (the shell has counted and logged it, and
    /// repeats it if [`RequestPurpose::on_failure`] says so): answer the clients that cannot
    /// wait.
    fn failed(&mut self, now: Instant, purpose: &Self::Purpose, error: &StorageError);

    /// A request storage failed goes out again, unchanged (just before [`Algorithm::timeout`]).
    fn resending(&mut self, _purpose: &Self::Purpose) {}

    /// When the algorithm next needs [`Algorithm::timeout`], if ever.
    fn deadline(&self) -> Option<Instant> {
        None
    }

    /// The driver woke at (or after) a deadline, the algorithm's or the shell's: do what is due.
    fn timeout(&mut self, _now: Instant) {}

    /// A journal request is durable or failed; the outbox has already released the replies
    /// that waited for it.
    fn journaled(&mut self, _now: Instant, _id: JournalId, _result: Result<(), String>) {}

    /// See [`Scheme::drain`].
    fn drain(&mut self, _now: Instant) {}

    /// See [`Scheme::settle`].
    fn settle(&mut self) {}

    /// See [`Scheme::traffic_per_op`].
    fn traffic_per_op(&self) -> bool {
        false
    }

    /// See [`Scheme::reads_join_earlier_ops`].
    fn reads_join_earlier_ops(&self) -> bool {
        false
    }

    /// See [`Scheme::answers_on_a_schedule`].
    fn answers_on_a_schedule(&self) -> bool {
        false
    }

    /// See [`Scheme::accepts`].
    fn accepts(&self) -> bool {
        true
    }

    /// See [`Scheme::refusal`].
    fn refusal(&self) -> Option<SchemeError> {
        None
    }

    /// Fills in the counters that describe the present (queued, unwritten, schedule misses)
    /// over the running totals the shell hands in.
    fn current_stats(&self, _stats: &mut SchemeStats) {}

    /// See [`Scheme::describe`].
    fn describe(&self) -> Vec<(&'static str, String)>;
}

/// The slot of an op the shell passed to [`Algorithm::submit`], as the 32-bit slot numbers
/// the schemes keep: the shell passes only slots below [`Algorithm::slots`], and every scheme
/// has fewer than 2^32 (`crate::MAX_CAPACITY`).
pub fn slot32(op: &Op) -> u32 {
    op.slot() as u32
}

/// The two [`Algorithm`] accessors of an algorithm that keeps its [`Io`] in a field `io`, as
/// every scheme here does.
macro_rules! io_in_field {
    () => {
        fn io(&mut self) -> &mut $crate::shell::Io<Self::Purpose> {
            &mut self.io
        }

        fn io_ref(&self) -> &$crate::shell::Io<Self::Purpose> {
            &self.io
        }
    };
}
pub(crate) use io_in_field;

/// Whether answers count from when they were handled, not when they arrived: only in a
/// `leak-demo` build with [`crate::LEAK_DEMO_ANSWERS_HANDLED_ENV`] set.
fn leak_demo_answers_handled() -> bool {
    #[cfg(feature = "leak-demo")]
    {
        static SET: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            std::env::var_os(crate::LEAK_DEMO_ANSWERS_HANDLED_ENV).is_some()
        });
        *SET
    }
    #[cfg(not(feature = "leak-demo"))]
    false
}

/// A running scheme: an [`Algorithm`] in the shell that implements [`Scheme`] for it.
pub struct Shell<A> {
    algorithm: A,
    timers: TimerTable,
}

impl<A: Algorithm> Shell<A> {
    /// Runs `algorithm`; whatever it sent while it was built goes out first.
    pub fn new(algorithm: A) -> Self {
        let mut shell = Self {
            algorithm,
            timers: TimerTable::default(),
        };
        shell.set_timers();
        shell
    }

    /// The algorithm, for its own accessors.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// Every entry point ends here: the deadlines may have moved.
    fn set_timers(&mut self) {
        let retry = self.algorithm.io_ref().retry_at();
        self.timers.set(Timer::StorageRetry, retry);
        self.timers.set(Timer::Algorithm, self.algorithm.deadline());
    }

    fn failed(
        &mut self,
        now: Instant,
        purpose: A::Purpose,
        op: Option<cloak_core::StorageOp>,
        error: StorageError,
    ) {
        self.algorithm.io().stats.storage_failures += 1;
        self.algorithm.failed(now, &purpose, &error);
        // The in-flight table kept the request exactly when its purpose repeats it.
        match op {
            Some(op) => {
                tracing::warn!(%error, kind = op.kind(), ?purpose, "storage request failed; retrying");
                self.algorithm.io().repeat_later(now, error, purpose, op);
            }
            None => tracing::warn!(%error, ?purpose, "storage request failed"),
        }
    }
}

impl<A: Algorithm> Scheme for Shell<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    fn slots(&self) -> u64 {
        self.algorithm.slots()
    }

    fn submit(&mut self, now: Instant, id: OpId, op: Op) {
        if op.slot() >= self.algorithm.slots() {
            let error = SchemeError::Overloaded(format!("slot {} does not exist", op.slot()));
            self.algorithm.io().out.reply(id, Reply::Failed(error));
            return;
        }
        // A write reaching the scheme while it refuses new ops is one the engine took before the
        // refusal began: the algorithm keeps it (see `Scheme::refusal`).
        if let Op::Read(_) = op
            && let Some(error) = self.algorithm.refusal()
        {
            self.algorithm.io().out.reply(id, Reply::Failed(error));
            return;
        }
        self.algorithm.submit(now, id, op);
        self.set_timers();
    }

    fn handle_storage(
        &mut self,
        now: Instant,
        arrived: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    ) {
        let arrived = if leak_demo_answers_handled() {
            now
        } else {
            arrived
        };
        let Some(answered) = self.algorithm.io().answer(id, result, arrived) else {
            tracing::warn!(?id, "reply to an unknown storage request");
            return;
        };
        match answered.result {
            Ok(answer) => {
                self.algorithm.io().succeeded();
                self.algorithm.answered(now, answered.purpose, answer);
            }
            Err(error) => self.failed(now, answered.purpose, answered.op, error),
        }
        self.set_timers();
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.timers.is_expired(Timer::StorageRetry, now) {
            for (purpose, op) in self.algorithm.io().due(now) {
                self.algorithm.resending(&purpose);
                self.algorithm.io().send(purpose, op);
            }
        }
        self.algorithm.timeout(now);
        self.set_timers();
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    fn poll_storage(&mut self) -> Option<StorageRequest> {
        if let Some(request) = self.algorithm.io().poll() {
            return Some(request);
        }
        self.algorithm.poll();
        self.algorithm.io().poll()
    }

    fn outbox(&mut self) -> &mut Outbox {
        &mut self.algorithm.io().out
    }

    fn handle_journaled(&mut self, now: Instant, id: JournalId, result: Result<(), String>) {
        self.algorithm.io().out.handle_journaled(id, result.clone());
        self.algorithm.journaled(now, id, result);
        self.set_timers();
    }

    fn drain(&mut self, now: Instant) {
        self.algorithm.drain(now);
        self.set_timers();
    }

    fn settle(&mut self) {
        self.algorithm.settle();
        self.set_timers();
    }

    fn traffic_per_op(&self) -> bool {
        self.algorithm.traffic_per_op()
    }

    fn reads_join_earlier_ops(&self) -> bool {
        self.algorithm.reads_join_earlier_ops()
    }

    fn answers_on_a_schedule(&self) -> bool {
        self.algorithm.answers_on_a_schedule()
    }

    fn accepts(&self) -> bool {
        self.algorithm.accepts()
    }

    fn refusal(&self) -> Option<SchemeError> {
        self.algorithm.refusal()
    }

    fn stats(&self) -> SchemeStats {
        let io = self.algorithm.io_ref();
        let mut stats = io.stats.clone();
        stats.repeating = io.repeating_count() as u64;
        self.algorithm.current_stats(&mut stats);
        stats
    }

    fn describe(&self) -> Vec<(&'static str, String)> {
        self.algorithm.describe()
    }
}
