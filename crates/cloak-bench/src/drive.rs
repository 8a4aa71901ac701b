//! Sending a workload's requests over a few connections and timing the replies.
//!
//! Each connection sends and receives at once: its sending half queues requests as they fall
//! due (open loop) or as the pipeline has room (closed loop), while its receiving half reads
//! every reply as it comes. A client that stopped reading while a write was blocked would
//! deadlock with any server that stops reading while its own replies are unread (both TCP
//! directions full, nobody moving). And a server that stops answering altogether ends the run
//! with [`ClientError::NoReply`] after the caller's patience, never a hang.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use tokio::sync::{Semaphore, mpsc};

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

/// What came back.
pub struct Answered {
    /// Latency of every reply, in µs.
    pub latency: Histogram<u64>,
    /// Replies that were errors.
    pub errors: u64,
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// Sends `requests` to `addr` with `load`, writes of `value`, and collects the replies; fails
/// when a connection gets no reply for `patience` while it waits for one.
///
/// Connections take requests in trace order from a shared counter whenever their pipeline has
/// room, so the server sees the requests in (nearly) the order of the workload: a workload's
/// temporal locality reaches it intact, reordered only within the requests in flight.
pub async fn drive(
    target: impl Into<Target>,
    requests: Arc<Vec<Request>>,
    value: &[u8],
    load: Load,
    patience: Duration,
    bar: &ProgressBar,
) -> Result<Answered, ClientError> {
    let target = target.into();
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
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let (requests, replies) = Connection::connect(target).await?.split();
            sender.run(requests, replies, patience, &bar).await
        }));
    }
    let mut answered = Answered {
        latency: histogram(),
        errors: 0,
    };
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(part)) => {
                answered.latency.add(part.latency).expect("same bounds");
                answered.errors += part.errors;
            }
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

    async fn run(
        self,
        mut requests: Requests,
        mut replies: Replies,
        patience: Duration,
        bar: &ProgressBar,
    ) -> Result<Answered, ClientError> {
        // Closed loop: a place per request in flight, given back by its reply. Open loop sends
        // what is due however much is in flight: a cap would delay requests behind a slow
        // server and hide how slow it is.
        let room = match self.load.rate {
            Some(_) => None,
            None => Some(Semaphore::new(self.load.pipeline.max(1))),
        };
        // When each request sent was due, in sending order (replies come in the same order).
        let (dues, mut answering) = mpsc::unbounded_channel::<Instant>();
        let send = async {
            let dues = dues;
            loop {
                if let Some(room) = &room {
                    // Everything queued goes out before waiting for a reply to make room.
                    if room.available_permits() == 0 {
                        requests.flush().await?;
                    }
                    if let Ok(place) = room.acquire().await {
                        place.forget();
                    }
                }
                let Some(index) = self.take() else { break };
                let due = self.due(index);
                if due > Instant::now() {
                    requests.flush().await?;
                    tokio::time::sleep_until(due.into()).await;
                }
                let request = self.requests[index];
                let name = key_name(request.key);
                if request.write {
                    requests.queue(&[b"SET", name.as_bytes(), &self.value]);
                } else {
                    requests.queue(&[b"GET", name.as_bytes()]);
                }
                // The receiving half only ends early on an error, which try_join reports.
                let _ = dues.send(due);
                if requests.queued() >= WRITE_CHUNK {
                    requests.flush().await?;
                }
            }
            requests.flush().await
        };
        let receive = async {
            let mut answered = Answered {
                latency: histogram(),
                errors: 0,
            };
            while let Some(due) = answering.recv().await {
                if let Reply::Error(_) = replies.next_within(patience).await? {
                    answered.errors += 1;
                }
                answered
                    .latency
                    .saturating_record(due.elapsed().as_micros().max(1) as u64);
                bar.inc(1);
                if let Some(room) = &room {
                    room.add_permits(1);
                }
            }
            Ok(answered)
        };
        let ((), answered) = tokio::try_join!(send, receive)?;
        Ok(answered)
    }
}
