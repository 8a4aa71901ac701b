//! The core task: the one place the engine lives, driven with real time and real storage.
//!
//! Connections send it commands over a bounded channel; it submits them to the [`Engine`],
//! sends the scheme's storage requests to the backend (each on its own task, so several can be in
//! flight), commits its journal requests (one commit at a time, off the event loop, everything
//! that queued meanwhile going into the next: group commit), feeds answers and timer expiries
//! back, and returns each command's outcome. While the scheme refuses new ops (backpressure) the
//! core stops reading commands, the channel fills, and connections stop reading from their
//! sockets.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloak_core::{
    ClientId, Command, Engine, EngineStats, JournalId, JournalOp, Outcome, RequestId, SchemeStats,
    StorageError, StorageReply,
};
use cloak_storage::Storage;
use hdrhistogram::Histogram;
use tokio::sync::{mpsc, oneshot};

use crate::budget::Charge;
use crate::journal::Journal;
use crate::ledger::Ledger;
use crate::storage_health::StorageHealth;
use crate::wake::{Alarm, Alarms};

/// Most commands taken from the channel per turn of the loop. Work that arrives together is
/// still sent to storage together (it waits for the next batch anyway). A deadline (a batch
/// start, a write-back's release: times the storage server sees) that comes due during a turn
/// ends it after the command in hand. 32 cost the unsafe baseline a sixth of its throughput in
/// the loop's per-turn overhead.
const INTAKE: usize = 256;
/// Commands the channel holds before connections wait.
const CHANNEL: usize = 1024;

struct Submission {
    client: ClientId,
    command: Command,
    reply: oneshot::Sender<Outcome>,
    at: Instant,
    /// The command's bytes against the request budgets, returned once its outcome is delivered
    /// (not when a connection stops waiting for it: the command is still here).
    charge: Charge,
}

enum Control {
    Snapshot(oneshot::Sender<Snapshot>),
    Outstanding(oneshot::Sender<Outstanding>),
}

/// What a stopping core still waits for storage (or its journal) to answer before it may exit
/// (see `Core::run`): what a stop that does not end can tell about why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outstanding {
    /// Commands taken and not yet answered.
    pub commands: usize,
    /// Writes acknowledged to clients that storage does not hold yet.
    pub unwritten: u64,
    /// Storage requests sent and not yet answered.
    pub in_flight: usize,
    /// Storage requests that failed and wait to be sent again.
    pub repeating: u64,
    /// Journal requests queued or being committed.
    pub journal: usize,
}

impl Outstanding {
    /// Nothing a shutdown would lose: every command answered, every acknowledged write in
    /// storage (the scheme's own requests may still be out).
    fn drained(&self) -> bool {
        self.commands == 0 && self.unwritten == 0
    }

    /// Requests still out that the core must see answered before it exits.
    fn requests(&self) -> usize {
        self.in_flight + self.repeating as usize + self.journal
    }
}

impl std::fmt::Display for Outstanding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} acknowledged writes not yet in storage, {} storage requests in flight, {} failed \
             and waiting to be sent again, {} journal requests, {} commands unanswered",
            self.unwritten, self.in_flight, self.repeating, self.journal, self.commands
        )
    }
}

/// The proxy's state for `INFO` and benchmarks.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub scheme: &'static str,
    pub engine: EngineStats,
    pub stats: SchemeStats,
    pub params: Vec<(&'static str, String)>,
    pub latency: Latency,
    pub storage: String,
    /// `wal`: writes are journaled before they are acknowledged; `none`: acknowledged from memory.
    pub durability: &'static str,
    pub io: StorageIo,
    pub uptime: Duration,
}

/// Command latency in microseconds, from arrival at the core to outcome.
#[derive(Clone, Debug, Default)]
pub struct Latency {
    pub count: u64,
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// Traffic between the proxy and storage.
#[derive(Clone, Debug, Default)]
pub struct StorageIo {
    pub requests: u64,
    pub failures: u64,
    /// Addresses and values sent.
    pub bytes_sent: u64,
    /// Values received.
    pub bytes_received: u64,
}

/// How connections reach the core.
#[derive(Clone)]
pub struct CoreHandle {
    commands: mpsc::Sender<Submission>,
    control: mpsc::UnboundedSender<Control>,
    storage_health: Arc<StorageHealth>,
}

#[derive(Debug, thiserror::Error)]
#[error("the proxy is shutting down")]
pub struct CoreStopped;

impl CoreHandle {
    /// Queues a command (waiting while the core applies backpressure); the receiver yields its
    /// outcome.
    pub async fn submit(
        &self,
        client: ClientId,
        command: Command,
        charge: Charge,
    ) -> Result<oneshot::Receiver<Outcome>, CoreStopped> {
        let (reply, outcome) = oneshot::channel();
        let submission = Submission {
            client,
            command,
            reply,
            at: Instant::now(),
            charge,
        };
        self.commands
            .send(submission)
            .await
            .map_err(|_| CoreStopped)?;
        Ok(outcome)
    }

    pub async fn snapshot(&self) -> Result<Snapshot, CoreStopped> {
        self.stats().snapshot().await
    }

    /// Whether the core's storage answers (see [`crate::storage_health`]).
    pub fn storage_health(&self) -> &Arc<StorageHealth> {
        &self.storage_health
    }

    /// A handle that can only read statistics (it does not keep the core from draining).
    pub fn stats(&self) -> StatsHandle {
        StatsHandle(self.control.clone())
    }
}

/// Reads the core's statistics; unlike [`CoreHandle`], holding it does not delay shutdown.
#[derive(Clone)]
pub struct StatsHandle(mpsc::UnboundedSender<Control>);

impl StatsHandle {
    /// A handle to no core, whose snapshots say the core stopped: the statistics of a cluster
    /// proxy that hosts no partition.
    pub fn detached() -> Self {
        Self(mpsc::unbounded_channel().0)
    }

    pub async fn snapshot(&self) -> Result<Snapshot, CoreStopped> {
        self.ask(Control::Snapshot).await
    }

    /// What the core still waits for storage to answer (see [`Outstanding`]).
    pub async fn outstanding(&self) -> Result<Outstanding, CoreStopped> {
        self.ask(Control::Outstanding).await
    }

    /// Sends the core the question `control` makes around a reply channel, and waits for the
    /// answer.
    async fn ask<T>(
        &self,
        control: impl FnOnce(oneshot::Sender<T>) -> Control,
    ) -> Result<T, CoreStopped> {
        let (tx, rx) = oneshot::channel();
        self.0.send(control(tx)).map_err(|_| CoreStopped)?;
        rx.await.map_err(|_| CoreStopped)
    }
}

/// Starts the core. It runs until every [`CoreHandle`] is dropped and then drains: it takes no
/// more commands but keeps batching until every acknowledged write has reached storage. Without
/// a journal, journal requests count as durable at once (`--durability none`). Fails only if the
/// alarm thread cannot be started.
pub fn spawn(
    engine: Engine,
    storage: Arc<dyn Storage>,
    journal: Option<Arc<dyn Journal>>,
    ledger: Option<Arc<Ledger>>,
    spool: Option<PathBuf>,
    storage_io: tokio::runtime::Handle,
    after_start: Option<fn()>,
) -> std::io::Result<(CoreHandle, tokio::task::JoinHandle<()>)> {
    let alarms = Alarms::start()?;
    let (commands_tx, commands) = mpsc::channel(CHANNEL);
    let (control_tx, control) = mpsc::unbounded_channel();
    let storage_health = Arc::new(StorageHealth::default());
    let core = Core {
        engine,
        storage,
        storage_io,
        alarms,
        journal,
        ledger,
        spool,
        after_start,
        journal_queue: Vec::new(),
        journal_busy: false,
        waiting: HashMap::new(),
        next_token: 0,
        latency: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
        io: StorageIo::default(),
        storage_health: storage_health.clone(),
        storage_failing: false,
        started: Instant::now(),
    };
    let task = tokio::spawn(core.run(commands, control));
    Ok((
        CoreHandle {
            commands: commands_tx,
            control: control_tx,
            storage_health,
        },
        task,
    ))
}

struct Core {
    engine: Engine,
    storage: Arc<dyn Storage>,
    /// Where storage requests run: see [`crate::own_thread`].
    storage_io: tokio::runtime::Handle,
    /// Wakes this loop at the scheme's deadlines and releases timed storage requests.
    alarms: Alarms,
    journal: Option<Arc<dyn Journal>>,
    ledger: Option<Arc<Ledger>>,
    /// The recovery spool in the state directory, until storage holds every record.
    spool: Option<PathBuf>,
    /// Run once when the start is over (see [`crate::ProxyOptions::after_start`]).
    after_start: Option<fn()>,
    /// Journal requests waiting for the commit in progress to finish.
    journal_queue: Vec<(JournalId, JournalOp)>,
    journal_busy: bool,
    waiting: HashMap<u64, (oneshot::Sender<Outcome>, Instant, Charge)>,
    next_token: u64,
    latency: Histogram<u64>,
    io: StorageIo,
    /// Written on each change of `storage_failing`, for the front end to read.
    storage_health: Arc<StorageHealth>,
    /// Whether storage's last answer was a failure (kept here so that a healthy store's answers
    /// never take the shared cell's lock).
    storage_failing: bool,
    started: Instant,
}

/// A storage request's answer, its bytes received, and when it arrived (on the storage thread).
type Done = (RequestId, Result<StorageReply, StorageError>, u64, Instant);
type Committed = (Vec<JournalId>, Result<(), String>);

impl Core {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Submission>,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) {
        let (done_tx, mut done) = mpsc::unbounded_channel::<Done>();
        let (committed_tx, mut committed) = mpsc::unbounded_channel::<Committed>();
        let mut open = true;
        // The alarm for the scheme's next deadline, and that deadline.
        let mut alarm: Option<(Instant, Alarm)> = None;
        // Set once a stop has nothing left that a shutdown would lose, and the scheme is told
        // that no op will come again (see `Scheme::settle`).
        let mut settled = false;
        // A start may have nothing to write to storage (a scheme that restores records in place
        // and could read none back): it is over before any answer comes.
        self.flush(&done_tx, &committed_tx);
        self.end_start();
        loop {
            self.flush(&done_tx, &committed_tx);
            // A stop waits for every acknowledged write, then for every request in flight,
            // failed and waiting to be sent again, or waiting for a journal commit. A write-back
            // moves elements between addresses: exiting while one is on its way could cut it off
            // midway (a Redis Cluster applies each node's share on its own), leaving some element
            // at no address at all, which the next start would find missing from storage. Once
            // settled, the schemes start nothing of their own, so this ends; storage answers or
            // fails every request (its clients time out), and the front end's drain timeout
            // bounds the wait.
            if !open && self.outstanding().drained() {
                if !settled {
                    tracing::info!(
                        "every acknowledged write is in storage: the scheme starts nothing more, \
                         and the stop waits for what it has in flight"
                    );
                    settled = true;
                    self.engine.settle();
                    self.flush(&done_tx, &committed_tx);
                }
                if self.outstanding().requests() == 0 {
                    tracing::info!(
                        "all acknowledged writes are in storage, and no request is outstanding"
                    );
                    self.save_ledger();
                    return;
                }
            }
            // A due timer goes before everything else. Checking the clock here, not only through
            // the runtime's timer, catches it even while the loop never sleeps (a flood of
            // commands keeps every branch below ready).
            let deadline = self.engine.poll_timeout();
            let now = Instant::now();
            if deadline.is_some_and(|at| at <= now) {
                self.fire_timeout(&done_tx, &committed_tx);
                continue;
            }
            if alarm.as_ref().map(|(at, _)| *at) != deadline {
                alarm = deadline.map(|at| (at, self.alarms.at(at)));
            }
            tokio::select! {
                biased;
                () = async { if let Some((_, ring)) = &mut alarm { ring.await } }, if alarm.is_some() => {
                    alarm = None;
                    self.fire_timeout(&done_tx, &committed_tx);
                }
                Some((id, result, received, arrived)) = done.recv() => {
                    if let Err(error) = &result
                        && error.is_fenced_off()
                    {
                        // Storage serves another proxy now: whatever this one acknowledged
                        // from here on would never reach the store. Stop, so every command
                        // gets an error instead; what was acknowledged and not written is
                        // lost to the proxy that fenced this one off, and the log says so.
                        tracing::error!(
                            %error,
                            unwritten = self.engine.scheme_stats().unwritten,
                            "fenced off by a proxy started since: stopping; every command is \
                             refused from now on"
                        );
                        return;
                    }
                    self.io.bytes_received += received;
                    self.record_health(&result);
                    // When the answer arrived, not only when this loop, perhaps busy with
                    // clients, got to it (see `Scheme::handle_storage`).
                    self.engine.handle_storage(Instant::now(), arrived, id, result);
                    self.end_start();
                }
                Some((ids, result)) = committed.recv() => {
                    self.journal_busy = false;
                    if let Err(error) = &result {
                        tracing::error!(
                            %error,
                            "journal commit failed; the writes it carried are answered with an error \
                             (they may or may not take effect: the scheme still holds them)"
                        );
                    }
                    let now = Instant::now();
                    for id in ids {
                        self.engine.handle_journaled(now, id, result.clone());
                    }
                }
                Some(control) = control.recv() => match control {
                    Control::Snapshot(reply) => {
                        let _ = reply.send(self.snapshot());
                    }
                    Control::Outstanding(reply) => {
                        let _ = reply.send(self.outstanding());
                    }
                },
                submission = commands.recv(), if open && self.engine.accepts() => match submission {
                    Some(first) => {
                        self.submit(first);
                        for _ in 1..INTAKE {
                            // A deadline that comes due mid-turn goes first: under a flood of
                            // commands it would otherwise wait for the rest of the turn, and
                            // go out later the more load there is.
                            if !self.engine.accepts()
                                || deadline.is_some_and(|at| Instant::now() >= at)
                            {
                                break;
                            }
                            let Ok(next) = commands.try_recv() else {
                                break;
                            };
                            self.submit(next);
                        }
                    }
                    None => {
                        let unwritten = self.engine.scheme_stats().unwritten;
                        tracing::info!(unwritten, "front end closed; draining acknowledged writes to storage");
                        open = false;
                        self.engine.drain(Instant::now());
                    }
                },
            }
        }
    }

    /// Counts a failed storage request and keeps [`StorageHealth`] up to date.
    fn record_health(&mut self, result: &Result<StorageReply, StorageError>) {
        match result {
            Err(error) => {
                self.io.failures += 1;
                self.storage_failing = true;
                self.storage_health.failed(error.to_string());
            }
            Ok(_) if self.storage_failing => {
                self.storage_failing = false;
                self.storage_health.answered();
            }
            Ok(_) => {}
        }
    }

    /// Handles a due deadline and sends what it produced at once, before more commands: a
    /// deadline's requests (a batch read, a held write-back) leave at a time the storage server
    /// sees.
    fn fire_timeout(
        &mut self,
        done: &mpsc::UnboundedSender<Done>,
        committed: &mpsc::UnboundedSender<Committed>,
    ) {
        self.engine.handle_timeout(Instant::now());
        self.flush(done, committed);
    }

    fn submit(&mut self, submission: Submission) {
        let token = self.next_token;
        self.next_token += 1;
        self.waiting
            .insert(token, (submission.reply, submission.at, submission.charge));
        self.engine
            .submit(Instant::now(), submission.client, token, submission.command);
    }

    /// Sends pending storage and journal requests and delivers finished outcomes, until the
    /// engine has nothing more to say.
    fn flush(
        &mut self,
        done: &mpsc::UnboundedSender<Done>,
        committed: &mpsc::UnboundedSender<Committed>,
    ) {
        loop {
            self.send_storage(done);
            let journaled = self.journal(committed);
            self.deliver();
            if !journaled {
                return;
            }
        }
    }

    /// Hands each storage request to a task on the storage thread; a request with a time on the
    /// schedule waits there for its alarm, so it leaves on time even while this loop is busy
    /// (see [`crate::wake`]).
    fn send_storage(&mut self, done: &mpsc::UnboundedSender<Done>) {
        while let Some(request) = self.engine.poll_storage() {
            self.io.requests += 1;
            self.io.bytes_sent += request.op.sent_bytes();
            let storage = self.storage.clone();
            let done = done.clone();
            let leaves = request
                .not_before
                .filter(|at| *at > Instant::now())
                .map(|at| self.alarms.warmed(at));
            self.storage_io.spawn(async move {
                let result = match leaves {
                    Some(alarm) => storage.call_at(request.op, Box::pin(alarm)).await,
                    None => storage.call(request.op).await,
                };
                let arrived = Instant::now();
                let received = result.as_ref().map_or(0, StorageReply::received_bytes);
                let _ = done.send((request.id, result, received, arrived));
            });
        }
    }

    /// Queues the engine's journal requests and starts a commit if none is running; `true` if
    /// requests were answered at once (no journal), which may have produced more work.
    fn journal(&mut self, committed: &mpsc::UnboundedSender<Committed>) -> bool {
        let mut answered = false;
        while let Some(request) = self.engine.poll_journal() {
            if self.journal.is_none() {
                self.engine
                    .handle_journaled(Instant::now(), request.id, Ok(()));
                answered = true;
            } else {
                self.journal_queue.push((request.id, request.op));
            }
        }
        if let Some(journal) = &self.journal
            && !self.journal_busy
            && !self.journal_queue.is_empty()
        {
            self.journal_busy = true;
            let (ids, ops): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.journal_queue).into_iter().unzip();
            let journal = journal.clone();
            let committed = committed.clone();
            tokio::task::spawn_blocking(move || {
                let result = journal.commit(&ops).map_err(|e| e.to_string());
                let _ = committed.send((ids, result));
            });
        }
        answered
    }

    fn deliver(&mut self) {
        while let Some((token, outcome)) = self.engine.poll_outcome() {
            if let Some((reply, at, _charge)) = self.waiting.remove(&token) {
                let micros = at.elapsed().as_micros().max(1) as u64;
                self.latency.saturating_record(micros);
                let _ = reply.send(outcome);
            }
        }
    }

    /// Records every slot's acknowledged version, now that storage holds them all: the next start
    /// refuses a store older than this. Without it, that start checks against the ledger saved
    /// at this one's start, which still holds (versions only grow) but covers less.
    fn save_ledger(&self) {
        let Some(ledger) = &self.ledger else { return };
        let Some(versions) = self.engine.acknowledged() else {
            // The store keeps versions whenever it has a ledger (`Store::start`).
            tracing::error!("no slot versions kept to save to the ledger");
            return;
        };
        match ledger.save(&versions) {
            Ok(()) => tracing::info!(
                slots = versions.len(),
                "saved the slot versions storage holds to the ledger"
            ),
            Err(error) => tracing::error!(
                %error,
                "could not save the ledger; the next start checks storage against the one saved \
                 at this start"
            ),
        }
    }

    /// Ends the start once it is over, when storage holds every recovered record again and the
    /// fill is done: the
    /// recovery spool is retired, and the start's hook runs (the scheme has dropped what
    /// recovery handed it). Checked when the core starts and after storage replies only (a
    /// start that writes anything ends with a reply), and only until both are done:
    /// `scheme_stats` walks the pending ops.
    fn end_start(&mut self) {
        if self.spool.is_none() && self.after_start.is_none() {
            return;
        }
        let stats = self.engine.scheme_stats();
        // The fill too: a scheme whose fill writes new places while storage keeps the old ones
        // (Waffle) has nothing unwritten, yet still reads the spool and may still lose records
        // it cannot read back, which the spool must then be kept for.
        if stats.unwritten > 0 || stats.filling.is_some() {
            return;
        }
        tracing::debug!("the start is over");
        self.retire_spool(stats.fill_losses);
        if let Some(hook) = self.after_start.take() {
            hook();
        }
    }

    /// Deletes the recovery spool: storage holds every record now (see [`crate::state`]). If
    /// the fill lost records it could not read back from it (`fill_losses`), the spool is the
    /// only copy of what they held: it is kept aside, renamed, for the operator (the next start
    /// does not read it again), never deleted.
    fn retire_spool(&mut self, fill_losses: u64) {
        let Some(path) = self.spool.take() else {
            return;
        };
        if fill_losses > 0 {
            let kept = path.with_extension("spool.lost-records");
            match std::fs::rename(&path, &kept) {
                Ok(()) => tracing::error!(
                    lost = fill_losses,
                    kept = %kept.display(),
                    "the fill could not read back some recovered records; kept the spool that \
                     holds them"
                ),
                Err(error) => tracing::error!(
                    lost = fill_losses,
                    path = %path.display(),
                    %error,
                    "the fill could not read back some recovered records, and the spool could \
                     not be set aside; the next start reads it again"
                ),
            }
            return;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(
                path = %path.display(),
                "storage holds every recovered record; deleted the recovery spool"
            ),
            // Left behind, it costs the next start a read of it, and loses nothing.
            Err(error) => tracing::warn!(
                path = %path.display(),
                %error,
                "could not delete the recovery spool; the next start reads it again"
            ),
        }
    }

    /// What a stop still waits for: [`Outstanding::drained`] says nothing is left that a
    /// shutdown would lose (a scheme's own traffic, like Cloak's dummy batches, may still be in
    /// flight: [`Core::run`] waits for it before exiting).
    fn outstanding(&self) -> Outstanding {
        let stats = self.engine.scheme_stats();
        Outstanding {
            commands: self.waiting.len(),
            unwritten: stats.unwritten,
            in_flight: self.engine.storage_in_flight(),
            repeating: stats.repeating,
            journal: self.journal_queue.len() + usize::from(self.journal_busy),
        }
    }

    fn snapshot(&self) -> Snapshot {
        let h = &self.latency;
        Snapshot {
            scheme: self.engine.scheme().name(),
            engine: self.engine.stats(),
            stats: self.engine.scheme_stats(),
            params: self.engine.scheme().describe(),
            latency: Latency {
                count: h.len(),
                p50: h.value_at_quantile(0.50),
                p95: h.value_at_quantile(0.95),
                p99: h.value_at_quantile(0.99),
                p999: h.value_at_quantile(0.999),
                max: h.max(),
            },
            storage: self.storage.describe(),
            durability: if self.journal.is_some() {
                "wal"
            } else {
                "none"
            },
            io: self.io.clone(),
            uptime: self.started.elapsed(),
        }
    }
}
