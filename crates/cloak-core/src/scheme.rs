//! The one trait every oblivious (or deliberately non-oblivious) scheme implements.
//!
//! A scheme is a sans-io state machine in the style of quinn-proto's `Connection`:
//!
//! ```text
//!   submit(op) ───────►┌──────────┐────► poll_storage()  → driver sends to storage
//!   handle_storage() ─►│  Scheme  │────► poll_reply()    → driver answers the client
//!   handle_timeout() ─►└──────────┘────► poll_timeout()  → driver wakes it then
//! ```
//!
//! The driver calls `submit`/`handle_*` when something happens, then drains `poll_storage` and
//! the scheme's [`Outbox`] (replies and journal requests) until both are empty, then sleeps
//! until the next event or `poll_timeout`.
//! Every submitted op gets exactly one reply. A scheme never blocks, never reads a clock (time
//! arrives as `now`), and draws every security-relevant choice from its own seeded CSPRNG, so a
//! simulation with the same seed and inputs is reproducible.
//!
//! Ordering contract: the driver ([`crate::Engine`]) never has two ops of one client on one slot
//! inside the scheme at once, so a scheme may reorder ops of *different* clients on a slot (they
//! are concurrent) but each client sees its own ops in order. The one exception is a scheme that
//! opts in with [`Scheme::reads_join_earlier_ops`]: its reads may come while earlier ops of their
//! client on the slot are still inside (never a write, and never a read behind a waiting write).
//!
//! Crash safety: a record the scheme holds only at the proxy (an acknowledged write not yet
//! written back, a block in a stash or cache that storage no longer has) would die with the
//! process. The scheme asks the driver to keep such records in the proxy's journal
//! (through its [`Outbox`]) and waits for [`Scheme::handle_journaled`] before it relies on them,
//! in particular before it acknowledges a write or lets a read see it; once storage holds a
//! record again it releases the journal entry. Recovery (see `crate::recovery`) rebuilds every
//! slot from storage plus the journal.

use std::time::Instant;

use crate::element::{Record, Slot};
use crate::outbox::Outbox;
use crate::storage::{RequestId, StorageError, StorageReply, StorageRequest};

/// Identifies a client operation so its reply can be matched to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// A client operation on one logical slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read the slot's record.
    Read(Slot),
    /// Replace the slot's record; an empty record frees the slot.
    Write(Slot, Record),
}

impl Op {
    /// The slot it is on.
    pub fn slot(&self) -> Slot {
        match self {
            Op::Read(slot) | Op::Write(slot, _) => *slot,
        }
    }
}

/// A scheme's answer to an op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The slot's current record (empty if the slot is free).
    Value(Record),
    /// The write is acknowledged: every later read sees it.
    Written,
    /// The op failed.
    Failed(SchemeError),
}

/// Why an op failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemeError {
    /// Storage failed or answered something malformed.
    #[error("storage unavailable: {0}")]
    StorageUnavailable(#[from] StorageError),
    #[error(
        "integrity violation: storage returned a corrupted, swapped or replayed element for this key ({0})"
    )]
    /// Storage returned an element that is not the slot's current one.
    Integrity(String),
    /// The scheme refuses the op (full, or the slot does not exist).
    #[error("{0}")]
    Overloaded(String),
    /// The journal could not keep the write.
    #[error("the proxy could not make this write durable, so it may or may not take effect: {0}")]
    Durability(String),
}

/// Identifies a journal request so its completion can be matched to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JournalId(pub u64);

/// What a journal request asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalOp {
    /// Keep these records durably; for a slot, the highest version kept wins.
    Keep(Vec<(Slot, Record)>),
    /// Storage holds these slots at these versions (or newer) now: entries up to those versions
    /// may be dropped. Nothing waits for it (drivers answer it anyway; schemes ignore that).
    Release(Vec<(Slot, u64)>),
}

/// A request to the proxy's journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalRequest {
    /// Its id, for [`Scheme::handle_journaled`].
    pub id: JournalId,
    /// What it asks.
    pub op: JournalOp,
}

/// Counters every scheme keeps (zero where a counter does not apply).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchemeStats {
    /// Storage round trips the scheme started (batches, paths, single accesses).
    pub batches: u64,
    /// Storage accesses that served a client op.
    pub real_accesses: u64,
    /// Storage accesses made only to hide the real ones.
    pub dummy_accesses: u64,
    /// Reads answered at the proxy.
    pub cache_hits: u64,
    /// Reads that needed storage.
    pub cache_misses: u64,
    /// Of the misses, reads that joined a read of the same slot already waiting for storage:
    /// answered by that read's access, with none of their own.
    pub joined_reads: u64,
    /// Of the misses, reads answered while the initial fill ran from the records the restart
    /// recovered (recovery's spool, on local disk): no storage access.
    pub recovered_reads: u64,
    /// Client ops waiting for storage right now.
    pub queued: u64,
    /// Writes acknowledged to clients that storage does not hold yet; a proxy may stop only
    /// when this is zero.
    pub unwritten: u64,
    /// Storage requests that failed and wait to be sent again: a stopping proxy waits for them
    /// as for those in flight (see [`Scheme::drain`]).
    pub repeating: u64,
    /// Elements that failed authentication or decoding.
    pub integrity_failures: u64,
    /// Storage requests that failed or were answered malformed.
    pub storage_failures: u64,
    /// Batch times a fixed schedule skipped because the batch before was unfinished when they
    /// came (storage or the proxy overran the interval).
    pub missed_batches: u64,
    /// Write-backs that left after their scheduled time because the batch's read was answered or
    /// re-encrypted too late: each shows the server how late the proxy was (see
    /// `cloak_schemes::schedule`).
    pub late_write_backs: u64,
    /// Recovered records the initial fill could not read back from recovery's spool (each is
    /// lost until a client writes its key again): while any is, the proxy keeps the spool for
    /// the operator instead of deleting it.
    pub fill_losses: u64,
    /// While the initial fill runs: elements it wrote, of all it writes. `INFO` says the proxy
    /// is loading; reads the scheme cannot answer without storage wait until it is done.
    pub filling: Option<(u64, u64)>,
}

impl SchemeStats {
    /// Fraction of storage accesses that served clients.
    pub fn utilisation(&self) -> f64 {
        let all = self.real_accesses + self.dummy_accesses;
        if all == 0 {
            0.0
        } else {
            self.real_accesses as f64 / all as f64
        }
    }
}

/// A sans-io scheme (see the module docs).
pub trait Scheme: Send {
    /// The name given to `--scheme`.
    fn name(&self) -> &'static str;

    /// Number of logical slots; the key directory hands out slots below this.
    fn slots(&self) -> u64;

    /// Takes a client op; its reply comes later from [`Outbox::poll_reply`].
    fn submit(&mut self, now: Instant, id: OpId, op: Op);

    /// Takes storage's answer to a request from [`Scheme::poll_storage`], which arrived at
    /// `arrived` (at or before `now`). Through the [`Engine`](crate::Engine), an `Ok` answer is
    /// always of the request's kind and size (values for each address read, `Done` for a write
    /// or delete, at most `limit` scanned entries); anything else arrives as an error (see
    /// [`crate::ExpectedReply`]).
    ///
    /// A request the scheme times from an answer counts from `arrived`, an instant the server
    /// caused: `now` comes later the busier the proxy was with clients when the answer came, and
    /// the server would see that in the request's timing.
    fn handle_storage(
        &mut self,
        now: Instant,
        arrived: Instant,
        id: RequestId,
        result: Result<StorageReply, StorageError>,
    );

    /// Called at (or after) the instant [`Scheme::poll_timeout`] returned.
    fn handle_timeout(&mut self, now: Instant);

    /// When the scheme next needs [`Scheme::handle_timeout`], if ever.
    fn poll_timeout(&self) -> Option<Instant>;

    /// The next storage request to send.
    fn poll_storage(&mut self) -> Option<StorageRequest>;

    /// Where the scheme's replies and journal requests wait for the driver.
    fn outbox(&mut self) -> &mut Outbox;

    /// A journal request is durable (`Ok`) or could not be made durable (`Err`, with a reason for
    /// the client). Schemes that must act once a record is safe (say, before removing it from
    /// storage) extend this; the default releases the replies that waited.
    fn handle_journaled(&mut self, _now: Instant, id: JournalId, result: Result<(), String>) {
        self.outbox().handle_journaled(id, result);
    }

    /// The driver is shutting down: no more ops will be submitted. A scheme that holds records
    /// only at the proxy by design (a cache whose storage copies were deleted, a stash) writes
    /// them to storage now, so that [`SchemeStats::unwritten`] can reach zero and a proxy
    /// without a journal stops without losing them. The default does nothing.
    fn drain(&mut self, _now: Instant) {}

    /// After [`Scheme::drain`], once no command waits and nothing is unwritten: no op will come
    /// again. A scheme with traffic of its own (dummy or idle batches) starts no more of it, so
    /// that the requests in flight are its last; the driver exits once they are answered, since
    /// a write-back cut off midway can leave an element at no address. Being final, this shows
    /// the server nothing a stop did not: the schedule simply ends. The default does nothing.
    fn settle(&mut self) {}

    /// Whether every op makes storage traffic of its own (a tree ORAM's path, Pancake's batch,
    /// `encrypted`'s label) rather than riding traffic on a fixed schedule (Cloak, Waffle).
    /// Then an op the engine answers alone would show, by the access it does not cause, that a
    /// key is absent, so the engine sends cover reads instead (see `engine`). Default: `false`.
    fn traffic_per_op(&self) -> bool {
        false
    }

    /// Whether a read may join ops of its client on its slot that are still in the scheme,
    /// instead of waiting for them in the engine's lane. That holds when the scheme answers a
    /// read with the slot's newest value as of its submission or a newer one, and never with an
    /// older value than it answered an op submitted before it: what a client pipelining
    /// reads then writes then reads of one key must see. Cloak's pending table does: a read
    /// joins the read already waiting, or takes the pending write's value. A read that waited
    /// in the lane instead waits for a whole batch more whenever its client reads one key twice
    /// within a batch (on a replayed trace with strong temporal locality, a third of all ops).
    /// Writes always wait for every earlier op of their client on the slot (a write answers the
    /// reads waiting on its slot with its own value). Default: `false`.
    fn reads_join_earlier_ops(&self) -> bool {
        false
    }

    /// Whether ops wait for batches sent on a fixed schedule (Cloak), so that a client's reply
    /// held behind one of its requests still in the scheme may wait a whole batch interval. The
    /// proxy then writes a connection's ready replies as soon as the next one is not ready,
    /// instead of gathering them until none is queued. Default: `false`.
    fn answers_on_a_schedule(&self) -> bool {
        false
    }

    /// Backpressure: while `false`, the driver stops submitting (it stops reading from clients)
    /// until some storage reply arrives.
    fn accepts(&self) -> bool;

    /// Why the scheme refuses new ops for the moment, without an access (storage known to be
    /// down, a stash over its limit). The engine fails a command that may write with it before
    /// changing anything, and the scheme refuses reads with it; but a write the engine took
    /// before (held in its client's lane meanwhile) the scheme keeps, and makes once it can. The
    /// engine changes its key directory when it takes a write, so a write refused after that
    /// would leave the directory saying what storage does not hold (a DEL refused in an outage
    /// read as done, and a restart brought the key back). Default: `None` (the scheme keeps
    /// every op and repeats its storage requests).
    fn refusal(&self) -> Option<SchemeError> {
        None
    }

    /// The scheme's counters.
    fn stats(&self) -> SchemeStats;

    /// Scheme parameters and state for `INFO`, as `(field, value)` pairs.
    fn describe(&self) -> Vec<(&'static str, String)>;
}
