//! A client for `cloak server`: a few pipelined connections, reconnected on demand.
//!
//! Each connection has a writer task (requests out, coalesced when several are ready) and a
//! reader task (answers in, matched to requests in order). A broken connection fails every
//! request waiting on it, and the next request opens a new one; schemes decide whether to retry.
//! A connection that leaves an answer out past the timeout is retired the same way (it may be
//! half-open or jammed), and a retired connection's reader is stopped, closing its socket.
//!
//! Every answer is bounded by what its request allows, from public sizes only
//! ([`wire::max_response_len`]: a read of `n` addresses, `n` elements of the largest size the
//! store writes, see [`TcpStorage::with_max_element`]; a write, DONE). An answer announcing a
//! longer frame is refused by name before it is buffered, and fails only its connection: a
//! hostile server can make the proxy hold no more than its requests call for.
//!
//! A [`Link`] adds TLS (checking the server's certificate, presenting ours if the server wants
//! one) and the storage secret's [`handshake`]; a connection is used only once both pass, and
//! each is bounded by a timeout, so a wrong certificate or secret is an error, never a hang.
//! TLS changes nothing the server sees of the store: it still receives every request, and the
//! TLS records' sizes and timing follow the requests', which the scheme already makes public.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::handshake::{self, StorageSecret};
use crate::reader_task::ReaderTask;
use crate::tls::ClientTls;
use crate::tls::client::host_of;
use crate::waiting;
use crate::wire::{self, FenceToken, Frame};
use crate::{Release, Storage, StorageError, StorageOp, StorageReply};

type Answer = Result<StorageReply, StorageError>;

/// A request written and not answered yet.
struct Expected {
    id: u64,
    /// The longest answer payload the request allows, in bytes.
    max_answer: usize,
    answer: oneshot::Sender<Answer>,
}

struct Job {
    frame: Frame,
    expected: Expected,
}

/// Requests written and not yet answered, oldest first.
type Waiting = waiting::Waiting<Expected>;

/// A connection: its writer task's queue, the requests waiting on it, and its reader task
/// (stopped when the connection is dropped, see [`ReaderTask`]). What still waits on a dropped
/// connection was failed when it failed, or is answered "lost" as its sender drops.
struct Connection {
    jobs: mpsc::UnboundedSender<Job>,
    waiting: Waiting,
    _reader: ReaderTask,
}

impl Connection {
    fn alive(&self) -> bool {
        self.waiting.alive() && !self.jobs.is_closed()
    }
}

/// How connections to `cloak server` are secured.
#[derive(Clone, Default)]
pub struct Link {
    /// TLS, checking the server's certificate (and presenting ours when configured).
    pub tls: Option<ClientTls>,
    /// The storage secret to prove, and to have the server prove.
    pub secret: Option<StorageSecret>,
}

/// A client for `cloak server` over the [`crate::wire`] protocol, on a few connections.
pub struct TcpStorage {
    addr: String,
    link: Link,
    connections: Vec<tokio::sync::Mutex<Option<Connection>>>,
    next: AtomicUsize,
    next_id: AtomicUsize,
    timeout: Duration,
    max_element: usize,
    /// The token of the fence this client raised, which every connection it opens after
    /// names first (see [`Storage::fence`] and the server's `fence` module).
    fence_token: std::sync::OnceLock<FenceToken>,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl TcpStorage {
    /// Connects to a storage server at `addr` (`host:port`) in the clear, checking it is
    /// reachable now.
    pub async fn connect(addr: &str, connections: usize) -> Result<Self, StorageError> {
        Self::connect_with(addr, connections, Link::default()).await
    }

    /// Connects to a storage server at `addr` (`host:port`) over `link`, checking now that it
    /// is reachable and that both sides pass the link's checks.
    pub async fn connect_with(
        addr: &str,
        connections: usize,
        link: Link,
    ) -> Result<Self, StorageError> {
        let storage = Self {
            addr: addr.to_string(),
            link,
            connections: (0..connections.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
            next_id: AtomicUsize::new(0),
            timeout: Duration::from_secs(30),
            max_element: usize::MAX,
            fence_token: std::sync::OnceLock::new(),
        };
        let first = storage.open().await?;
        *storage.connections[0].lock().await = Some(first);
        Ok(storage)
    }

    /// How long a request may wait for its answer before it fails (and its connection is
    /// retired).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Bounds every answer by `max_element`, the largest element the store writes: a server
    /// that answers a read of `n` addresses with more than `n` such elements (or anything but
    /// a status to a write) fails its connection, so memory stays bounded by what the requests
    /// call for. Without it, only the frame limit ([`wire::MAX_FRAME`]) bounds an answer.
    pub fn with_max_element(mut self, max_element: usize) -> Self {
        self.max_element = max_element;
        self
    }

    async fn open(&self) -> Result<Connection, StorageError> {
        let unreachable = |e: &dyn std::fmt::Display| {
            StorageError(format!(
                "cannot connect to storage server {}: {e}",
                self.addr
            ))
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| unreachable(&"timed out"))?
            .map_err(|e| unreachable(&e))?;
        stream.set_nodelay(true).map_err(|e| unreachable(&e))?;
        let refused = |e: &dyn std::fmt::Display| {
            StorageError(format!("storage server {}: {e}", self.describe()))
        };
        let secret = self.link.secret.as_ref();
        let connection = match &self.link.tls {
            None => {
                let mut stream = stream;
                handshake::join(&mut stream, secret)
                    .await
                    .map_err(|e| refused(&e))?;
                let (reader, writer) = stream.into_split();
                self.start(reader, writer)
            }
            Some(tls) => {
                let mut stream = tls
                    .connect(host_of(&self.addr), stream)
                    .await
                    .map_err(|e| refused(&e))?;
                handshake::join(&mut stream, secret)
                    .await
                    .map_err(|e| refused(&e))?;
                let (reader, writer) = tokio::io::split(stream);
                self.start(reader, writer)
            }
        };
        if let Some(token) = self.fence_token.get() {
            self.join_fence(&connection, token).await?;
        }
        Ok(connection)
    }

    /// Names this client's fence on a new connection, before anything else is sent on it: a
    /// server whose last fence was another's (this proxy was fenced off) refuses it.
    async fn join_fence(
        &self,
        connection: &Connection,
        token: &FenceToken,
    ) -> Result<(), StorageError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let (answer, answered) = oneshot::channel();
        let job = Job {
            frame: wire::encode_join(id, token),
            expected: Expected {
                id,
                max_answer: wire::MAX_FENCE_RESPONSE,
                answer,
            },
        };
        let lost = || StorageError(format!("connection to {} lost", self.addr));
        connection.jobs.send(job).map_err(|_| lost())?;
        match tokio::time::timeout(self.timeout, answered).await {
            Ok(Ok(answer)) => self.done("join", answer),
            Ok(Err(_)) => Err(lost()),
            Err(_) => Err(StorageError(format!(
                "storage server {} did not answer a join within {:?}",
                self.addr, self.timeout
            ))),
        }
    }

    /// `answer` to a fence or a join (`what`), which calls for DONE.
    fn done(&self, what: &str, answer: Answer) -> Result<(), StorageError> {
        match answer? {
            StorageReply::Done => Ok(()),
            other => Err(StorageError(format!(
                "storage server {} answered a {what} with {}",
                self.addr,
                other.summary()
            ))),
        }
    }

    /// The reading and writing tasks of a connection that passed its checks.
    fn start(
        &self,
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
    ) -> Connection {
        let waiting = Waiting::new();
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(
            writer,
            queue,
            waiting.clone(),
            self.addr.clone(),
        ));
        let reader = ReaderTask::spawn(read_loop(reader, waiting.clone(), self.addr.clone()));
        Connection {
            jobs,
            waiting,
            _reader: reader,
        }
    }
}

#[async_trait]
impl Storage for TcpStorage {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        let (id, frame, max_answer) = self.encode(&op);
        self.send(id, frame, max_answer).await
    }

    async fn call_at(&self, op: StorageOp, release: Release) -> Result<StorageReply, StorageError> {
        let (id, frame, max_answer) = self.encode(&op);
        release.await;
        self.send(id, frame, max_answer).await
    }

    /// A FENCE request named by a fresh random token (see the server's `fence` module), sent
    /// first, on the one connection [`TcpStorage::connect_with`] opened: the server stops every
    /// other connection, so any of ours opened before would be stopped too. Every connection
    /// opened after names the token first. Being first, it has id 0, the id an older
    /// server's protocol error carries: so that error reaches it, and is told apart below.
    async fn fence(&self) -> Result<(), StorageError> {
        let token = match self.fence_token.get() {
            Some(token) => *token,
            None => crate::fence::fresh_token()?,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        // The token is kept once the fence is answered, not before: a connection opened for
        // the fence itself (the first one died) must not JOIN, with a token the server does
        // not know yet, ahead of it.
        let answer = self
            .send(id, wire::encode_fence(id, &token), wire::MAX_FENCE_RESPONSE)
            .await;
        match self.done("fence", answer) {
            Ok(()) => {
                let _ = self.fence_token.set(token);
                Ok(())
            }
            Err(StorageError(message)) if message.contains("unknown request tag") => {
                Err(StorageError(format!(
                    "storage server {} is older than this proxy and cannot fence off the proxy \
                     that used the store before (so a write it left on its way could land in \
                     the middle of recovery): upgrade `cloak server`",
                    self.addr
                )))
            }
            Err(error) => Err(error),
        }
    }

    fn describe(&self) -> String {
        let scheme = if self.link.tls.is_some() {
            "tls"
        } else {
            "tcp"
        };
        format!("{scheme}://{}", self.addr)
    }
}

impl TcpStorage {
    /// A fresh id, `op`'s frame under it, and the longest answer `op` allows (from public sizes
    /// only: how many addresses it names and the largest element the store writes).
    fn encode(&self, op: &StorageOp) -> (u64, Frame, usize) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let max_answer = wire::max_response_len(op, self.max_element);
        (id, wire::encode_request(id, op), max_answer)
    }

    /// Sends an encoded request and waits for its answer, which may be no longer than
    /// `max_answer` bytes. An answer that does not come within the timeout retires its
    /// connection: it may be half-open or jammed, and the next request should not wait on it.
    async fn send(
        &self,
        id: u64,
        frame: Frame,
        max_answer: usize,
    ) -> Result<StorageReply, StorageError> {
        let (answer, answered) = oneshot::channel();
        let expected = Expected {
            id,
            max_answer,
            answer,
        };
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        let waiting = {
            let mut slot = self.connections[index].lock().await;
            let connection = match slot.take() {
                Some(connection) if connection.alive() => connection,
                _ => self.open().await?,
            };
            let sent = connection.jobs.send(Job { frame, expected });
            let waiting = connection.waiting.clone();
            *slot = Some(connection);
            sent.map_err(|_| StorageError(format!("connection to {} closed", self.addr)))?;
            waiting
        };
        match tokio::time::timeout(self.timeout, answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(StorageError(format!("connection to {} lost", self.addr))),
            Err(_) => {
                let reason = format!(
                    "storage server {} did not answer within {:?}",
                    self.addr, self.timeout
                );
                fail_all(&waiting, &reason);
                let mut slot = self.connections[index].lock().await;
                if slot.as_ref().is_some_and(|c| c.waiting.is(&waiting)) {
                    *slot = None;
                }
                Err(StorageError(reason))
            }
        }
    }
}

fn fail_all(waiting: &Waiting, reason: &str) {
    for expected in waiting.fail(reason) {
        let _ = expected.answer.send(Err(StorageError(reason.to_string())));
    }
}

async fn write_loop(
    mut writer: impl AsyncWrite + Unpin,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    waiting: Waiting,
    addr: String,
) {
    let mut batch = Vec::new();
    while jobs.recv_many(&mut batch, 256).await > 0 {
        let mut frames = Vec::with_capacity(batch.len());
        for job in batch.drain(..) {
            // Queued before its first byte is written, so its answer always finds it.
            match waiting.push(job.expected) {
                Ok(()) => frames.push(job.frame),
                Err((expected, _)) => {
                    let _ = expected
                        .answer
                        .send(Err(StorageError(format!("connection to {addr} is broken"))));
                }
            }
        }
        // Requests that arrived together go out in one vectored write.
        if let Err(error) = wire::write_frames(&mut writer, &frames).await {
            fail_all(
                &waiting,
                &format!("writing to storage server {addr} failed: {error}"),
            );
            return;
        }
    }
}

async fn read_loop(mut reader: impl AsyncRead + Unpin, waiting: Waiting, addr: String) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let reason = loop {
        let len = match wire::read_frame_len(&mut reader, &mut buf).await {
            Ok(len) => len,
            Err(error) => break format!("storage server {addr}: {error}"),
        };
        // The answer coming is the oldest waiting request's (requests are queued before they
        // are written), and may be as long as that request allows: a longer one is refused
        // before it is buffered. A dead queue has no request left to answer.
        let allowed = match waiting.oldest(|expected| expected.map(|e| e.max_answer)) {
            Ok(Some(allowed)) => allowed,
            Ok(None) => break format!("storage server {addr} answered a request never sent"),
            Err(why) => break why,
        };
        if len > allowed {
            break format!(
                "storage server {addr} sent an answer of {len} bytes to a request whose answer \
                 is at most {allowed} bytes{}",
                crate::LONGER_ELEMENTS_HINT
            );
        }
        // The whole answer is reserved at once (its request bounds it, as checked above): a
        // batch's read, megabytes, lands in one buffer of its size instead of one grown by
        // doubling, copied at each step and up to twice as large. Once the answer's values
        // are gone (a batch's are, as soon as it is opened), the next answer of that size
        // reuses the buffer rather than allocating another.
        wire::make_room_for_frame(&mut buf, 4 + len);
        let frame = match wire::read_frame_payload(&mut reader, &mut buf, len).await {
            Ok(frame) => frame,
            Err(error) => break format!("storage server {addr}: {error}"),
        };
        let (id, answer) = match wire::decode_response(frame) {
            Ok(response) => response,
            Err(error) => break format!("storage server {addr} sent a bad answer: {error}"),
        };
        let expected = match waiting.pop() {
            Ok(Some(expected)) => expected,
            // Only this task takes requests off the queue, and it saw one above.
            Ok(None) => break format!("storage server {addr} answered a request never sent"),
            // Failed meanwhile (a request timed out).
            Err(why) => break why,
        };
        if expected.id != id {
            let _ = expected
                .answer
                .send(Err(StorageError("answers out of order".into())));
            break format!("storage server {addr} answered out of order");
        }
        let _ = expected.answer.send(answer);
    };
    tracing::debug!(%reason, "storage connection closed");
    fail_all(&waiting, &reason);
}
