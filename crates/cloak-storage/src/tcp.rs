//! A client for `cloak server`: a few pipelined connections, reconnected on demand.
//!
//! Each connection has a writer task (requests out, coalesced when several are ready) and a
//! reader task (answers in, matched to requests in order). A broken connection fails every
//! request waiting on it, and the next request opens a new one; schemes decide whether to retry.
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
use crate::tls::ClientTls;
use crate::tls::client::host_of;
use crate::waiting;
use crate::wire::{self, Frame};
use crate::{Release, Storage, StorageError, StorageOp, StorageReply};

type Answer = Result<StorageReply, StorageError>;

struct Job {
    id: u64,
    frame: Frame,
    answer: oneshot::Sender<Answer>,
}

/// Requests written and not yet answered: their ids, and where their answers go.
type Waiting = waiting::Waiting<(u64, oneshot::Sender<Answer>)>;

struct Connection {
    jobs: mpsc::UnboundedSender<Job>,
    waiting: Waiting,
    reader: tokio::task::AbortHandle,
}

/// A connection replaced (it failed) or dropped with the storage stops its reader, which drops
/// the reading half and so closes the socket. Otherwise the reader would wait for the server to
/// close first, and a server that never did would keep the task and the socket: over TLS both
/// halves of `tokio::io::split` share one stream, so dropping the writing half tells the server
/// nothing (the Redis pipe does the same, see `redis_store::pipe`). What still waits on it was
/// failed when the connection failed, or is answered "lost" as its sender drops.
impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
    }
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
        };
        let first = storage.open().await?;
        *storage.connections[0].lock().await = Some(first);
        Ok(storage)
    }

    /// How long a request may wait for its answer before it fails.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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
        Ok(match &self.link.tls {
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
        })
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
        let reader =
            tokio::spawn(read_loop(reader, waiting.clone(), self.addr.clone())).abort_handle();
        Connection {
            jobs,
            waiting,
            reader,
        }
    }
}

#[async_trait]
impl Storage for TcpStorage {
    async fn call(&self, op: StorageOp) -> Result<StorageReply, StorageError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let frame = wire::encode_request(id, &op);
        self.send(id, frame).await
    }

    async fn call_at(&self, op: StorageOp, release: Release) -> Result<StorageReply, StorageError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let frame = wire::encode_request(id, &op);
        release.await;
        self.send(id, frame).await
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
    /// Sends an encoded request and waits for its answer.
    async fn send(&self, id: u64, frame: Frame) -> Result<StorageReply, StorageError> {
        let (answer, answered) = oneshot::channel();
        let job = Job { id, frame, answer };
        {
            let index = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
            let mut slot = self.connections[index].lock().await;
            if !slot.as_ref().is_some_and(Connection::alive) {
                *slot = Some(self.open().await?);
            }
            let connection = slot.as_ref().expect("opened above");
            connection
                .jobs
                .send(job)
                .map_err(|_| StorageError(format!("connection to {} closed", self.addr)))?;
        }
        match tokio::time::timeout(self.timeout, answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(StorageError(format!("connection to {} lost", self.addr))),
            Err(_) => Err(StorageError(format!(
                "storage server {} did not answer within {:?}",
                self.addr, self.timeout
            ))),
        }
    }
}

fn fail_all(waiting: &Waiting, reason: &str) {
    for (_, answer) in waiting.fail(reason) {
        let _ = answer.send(Err(StorageError(reason.to_string())));
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
            match waiting.push((job.id, job.answer)) {
                Ok(()) => frames.push(job.frame),
                Err(((_, answer), _)) => {
                    let _ =
                        answer.send(Err(StorageError(format!("connection to {addr} is broken"))));
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
        let frame = match wire::read_frame(&mut reader, &mut buf).await {
            Ok(frame) => frame,
            Err(error) => break format!("storage server {addr}: {error}"),
        };
        let (id, answer) = match wire::decode_response(frame) {
            Ok(response) => response,
            Err(error) => break format!("storage server {addr} sent a bad answer: {error}"),
        };
        // A dead queue has no request left to answer.
        match waiting.pop().unwrap_or(None) {
            Some((expected, sender)) if expected == id => {
                let _ = sender.send(answer);
            }
            Some((_, sender)) => {
                let _ = sender.send(Err(StorageError("answers out of order".into())));
                break format!("storage server {addr} answered out of order");
            }
            None => break format!("storage server {addr} answered a request never sent"),
        }
    };
    tracing::debug!(%reason, "storage connection closed");
    fail_all(&waiting, &reason);
}
