//! Sending a workload's requests over a few connections and timing the replies.
//!
//! Each connection sends and receives at once: its sending half queues requests as they fall
//! due (open loop) or as the pipeline has room (closed loop), while its receiving half reads
//! every reply as it comes. A client that stopped reading while a write was blocked would
//! deadlock with any server that stops reading while its own replies are unread (both TCP
//! directions full, nobody moving). And a server that stops answering altogether ends the run
//! with [`ClientError::NoReply`] after the caller's patience, never a hang.
//!
//! Against a cluster, each client holds a connection to every node and sends each request to
//! the node that serves its key's hash slot, as a cluster-aware client does (see [`Route`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use tokio::sync::{Semaphore, mpsc};

use cloak_cluster::{SLOTS, key_slot};

use crate::client::{ClientError, Connection, Replies, Reply, Requests, Target};
use crate::workload::{Request, key_name};

/// Bytes of requests queued before they are written even though more are due: keeps the writes
/// large (cheap) without holding requests back for long.
const WRITE_CHUNK: usize = 64 * 1024;

/// How to send.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub clients: usize,
    /// Closed loop: requests each connection keeps in flight (open loop has no cap).
    pub pipeline: usize,
    /// Requests per second for open loop; `None` for closed loop.
    pub rate: Option<f64>,
}

/// Where a run's requests go: one server, or every node of a cluster, each request to the node
/// that serves its key's hash slot.
#[derive(Clone)]
pub struct Route {
    nodes: Vec<Target>,
    /// The node (an index into `nodes`) serving each hash slot; empty for a single server.
    slot_owner: Arc<Vec<usize>>,
}

/// A slot map that does not send every slot to one of its nodes.
#[derive(Debug, thiserror::Error)]
pub enum BadSlotMap {
    #[error("the slot map has {0} slots, not {SLOTS}")]
    Size(usize),
    #[error("the slot map gives slot {0} no node")]
    Unowned(usize),
}

impl Route {
    /// Every request to `target`.
    pub fn single(target: impl Into<Target>) -> Self {
        Self {
            nodes: vec![target.into()],
            slot_owner: Arc::new(Vec::new()),
        }
    }

    /// Each request to `nodes[slot_owner[slot]]`, `slot` being its key's hash slot.
    pub fn by_slot(nodes: Vec<Target>, slot_owner: Vec<usize>) -> Result<Self, BadSlotMap> {
        if slot_owner.len() != usize::from(SLOTS) {
            return Err(BadSlotMap::Size(slot_owner.len()));
        }
        if let Some(slot) = slot_owner.iter().position(|&node| node >= nodes.len()) {
            return Err(BadSlotMap::Unowned(slot));
        }
        Ok(Self {
            nodes,
            slot_owner: Arc::new(slot_owner),
        })
    }

    /// Where requests go, in the order [`Answered::per_node`] counts them.
    pub fn nodes(&self) -> &[Target] {
        &self.nodes
    }

    /// The node `key` goes to.
    pub(crate) fn node_of(&self, key: &[u8]) -> usize {
        match self.slot_owner.is_empty() {
            true => 0,
            false => self.slot_owner[usize::from(key_slot(key))],
        }
    }
}

impl From<Target> for Route {
    fn from(target: Target) -> Self {
        Route::single(target)
    }
}

impl From<SocketAddr> for Route {
    fn from(addr: SocketAddr) -> Self {
        Route::single(addr)
    }
}

/// What came back.
pub struct Answered {
    /// Latency of every reply, in µs.
    pub latency: Histogram<u64>,
    /// Replies that were errors.
    pub errors: u64,
    /// Replies from each node of the [`Route`], in its order.
    pub per_node: Vec<u64>,
    /// Errors that were `-MOVED` or `-ASK`: requests the route sent to a node that does not
    /// serve their slot (counted in `errors` too).
    pub redirected: u64,
}

impl Answered {
    fn none(nodes: usize) -> Self {
        Self {
            latency: histogram(),
            errors: 0,
            per_node: vec![0; nodes],
            redirected: 0,
        }
    }

    /// Adds what another connection (or set of connections) got.
    fn add(&mut self, other: Answered) {
        self.latency.add(other.latency).expect("same bounds");
        self.errors += other.errors;
        self.redirected += other.redirected;
        for (sum, n) in self.per_node.iter_mut().zip(other.per_node) {
            *sum += n;
        }
    }
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// Sends `requests` along `route` with `load`, writes of `value`, and collects the replies;
/// fails when a connection gets no reply for `patience` while it waits for one.
///
/// Connections take requests in trace order from a shared counter whenever their pipeline has
/// room, so the server sees the requests in (nearly) the order of the workload: a workload's
/// temporal locality reaches it intact, reordered only within the requests in flight.
pub async fn drive(
    route: impl Into<Route>,
    requests: Arc<Vec<Request>>,
    value: &[u8],
    load: Load,
    patience: Duration,
    bar: &ProgressBar,
) -> Result<Answered, ClientError> {
    let route = route.into();
    let start = Instant::now() + Duration::from_millis(10);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..load.clients.max(1) {
        let sender = Sender {
            requests: requests.clone(),
            next: next.clone(),
            value: value.to_vec(),
            load,
            start,
        };
        let bar = bar.clone();
        let route = route.clone();
        tasks.push(tokio::spawn(async move {
            let mut connections = Vec::with_capacity(route.nodes().len());
            for node in route.nodes() {
                connections.push(Connection::connect(node.clone()).await?.split());
            }
            sender.run(connections, &route, patience, &bar).await
        }));
    }
    let mut answered = Answered::none(route.nodes().len());
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(part)) => answered.add(part),
            Ok(Err(error)) => failure = failure.or(Some(error)),
            // A sender panicked: a bug here, not the server's doing.
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(answered),
    }
}

/// One connection's share of a run.
struct Sender {
    requests: Arc<Vec<Request>>,
    next: Arc<AtomicUsize>,
    value: Vec<u8>,
    load: Load,
    start: Instant,
}

impl Sender {
    /// When request `index` is due: open loop, at its place in the schedule (latency counts from
    /// then, so a slow server cannot hide its delays: no coordinated omission); closed loop, now.
    fn due(&self, index: usize) -> Instant {
        match self.load.rate {
            Some(rate) => self.start + Duration::from_secs_f64(index as f64 / rate),
            None => Instant::now(),
        }
    }

    /// The next request of the schedule, if any is left.
    fn take(&self) -> Option<usize> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        (index < self.requests.len()).then_some(index)
    }

    /// Sends this connection's share over `connections` (one to each node of `route`) and
    /// reads every node's replies meanwhile.
    async fn run(
        self,
        connections: Vec<(Requests, Replies)>,
        route: &Route,
        patience: Duration,
        bar: &ProgressBar,
    ) -> Result<Answered, ClientError> {
        // Closed loop: a place per request in flight (on any node), given back by its reply.
        // Open loop sends what is due however much is in flight: a cap would delay requests
        // behind a slow server and hide how slow it is.
        let room = match self.load.rate {
            Some(_) => None,
            None => Some(Semaphore::new(self.load.pipeline.max(1))),
        };
        let (mut outputs, inputs): (Vec<Requests>, Vec<Replies>) = connections.into_iter().unzip();
        // For each node, when each request sent there was due, in sending order (its replies
        // come in the same order).
        let (dues, answering): (Vec<_>, Vec<_>) = inputs
            .iter()
            .map(|_| mpsc::unbounded_channel::<Instant>())
            .unzip();
        let send = async {
            let dues = dues;
            loop {
                if let Some(room) = &room {
                    // Everything queued goes out before waiting for a reply to make room.
                    if room.available_permits() == 0 {
                        flush_all(&mut outputs).await?;
                    }
                    if let Ok(place) = room.acquire().await {
                        place.forget();
                    }
                }
                let Some(index) = self.take() else { break };
                let due = self.due(index);
                if due > Instant::now() {
                    flush_all(&mut outputs).await?;
                    tokio::time::sleep_until(due.into()).await;
                }
                let request = self.requests[index];
                let name = key_name(request.key);
                let node = route.node_of(name.as_bytes());
                let output = &mut outputs[node];
                if request.write {
                    output.queue(&[b"SET", name.as_bytes(), &self.value]);
                } else {
                    output.queue(&[b"GET", name.as_bytes()]);
                }
                // The receiving half only ends early on an error, which try_join reports.
                let _ = dues[node].send(due);
                if output.queued() >= WRITE_CHUNK {
                    output.flush().await?;
                }
            }
            flush_all(&mut outputs).await
        };
        let nodes = inputs.len();
        let receive =
            futures::future::try_join_all(inputs.into_iter().zip(answering).enumerate().map(
                |(node, (mut replies, mut answering))| {
                    let room = &room;
                    async move {
                        let mut answered = Answered::none(nodes);
                        while let Some(due) = answering.recv().await {
                            if let Reply::Error(error) = replies.next_within(patience).await? {
                                answered.errors += 1;
                                if error.starts_with("MOVED ") || error.starts_with("ASK ") {
                                    answered.redirected += 1;
                                }
                            }
                            answered
                                .latency
                                .saturating_record(due.elapsed().as_micros().max(1) as u64);
                            answered.per_node[node] += 1;
                            bar.inc(1);
                            if let Some(room) = room {
                                room.add_permits(1);
                            }
                        }
                        Ok::<_, ClientError>(answered)
                    }
                },
            ));
        let ((), parts) = tokio::try_join!(send, receive)?;
        let mut answered = Answered::none(nodes);
        for part in parts {
            answered.add(part);
        }
        Ok(answered)
    }
}

/// Writes out whatever each connection has queued.
async fn flush_all(outputs: &mut [Requests]) -> Result<(), ClientError> {
    for output in outputs {
        output.flush().await?;
    }
    Ok(())
}
