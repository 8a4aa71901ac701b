//! The connection to a single Redis (not a cluster): requests go out as RESP bytes packed by the
//! caller, each in one write from the calling task, and a reader task hands the answers back in
//! order.
//!
//! Why not the `redis` crate's connection: a batch read or write-back leaves at a time on the
//! scheme's schedule, and the storage server sees when its first byte arrives. With the crate,
//! the command was packed only when it was sent (the crate's connection takes a command, not
//! bytes: for a write-back of 991 elements of 125 bytes, a copy of 124 KB) and then handed to
//! the connection's driver task, which copied it again into its own buffer before writing. That
//! work came after the release, and it ran faster on a busy, warm CPU than on an idle one, so
//! the read-to-write-back gap was shorter under load (a per-second median told GET-loaded
//! seconds from idle ones every time). Here the caller packs a timed request before its
//! release, and what follows the release is one write of ready bytes.
//!
//! A connection that fails (an error writing or reading, an answer that is not RESP or longer
//! than its request allows, a write or an answer that does not come within the response
//! timeout, or its reader stopping for any reason) fails every request waiting on it, and the
//! next request opens a new one; schemes retry with backoff, as they do for any storage error.
//! A late answer can therefore never be paired with a later request: the connection it would
//! arrive on is gone.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::answer_scan::{AnswerScan, BadAnswer};
use super::answer_size::SHORT_ANSWER;
use crate::reader_task::ReaderTask;
use crate::tls::{ClientTls, TlsError};
use crate::waiting;

/// Longest answer accepted whatever a request allows (Redis's own limit on one bulk string is
/// 512 MB by default).
const MAX_ANSWER: usize = 512 << 20;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    /// The node URL does not parse, or names something other than a TCP host.
    #[error("{0}")]
    Url(String),
    /// Connecting, writing or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The TLS handshake failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A new connection's `AUTH`, `SELECT` or `PING` was not answered as Redis answers.
    #[error("{step} failed: {answer}")]
    Refused {
        /// What the connection asked for.
        step: &'static str,
        /// What the server said.
        answer: String,
    },
    /// A new connection found the store's fence key naming another proxy's fence: a proxy
    /// started after this one uses the store now.
    #[error(
        "{} (its fence key names another fence); this proxy stops, or the two would overwrite \
         each other's elements",
        cloak_core::FENCED_OFF
    )]
    FencedOff,
    /// Redis did not connect or answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection broke before the answer came.
    #[error("connection lost: {0}")]
    Lost(String),
    /// Redis answered an error.
    #[error("{0}")]
    Answer(String),
    /// Redis sent bytes that are not RESP, or an answer longer than its request allows.
    #[error("Redis sent a bad answer: {0}")]
    BadAnswer(#[from] BadAnswer),
}

/// What Redis answered one command, or why no answer came.
pub type Answer = Result<Value, PipeError>;

/// A request written and not answered yet.
struct Expected {
    /// The longest answer the request allows, in bytes of RESP.
    max_answer: usize,
    answer: oneshot::Sender<Answer>,
}

type Waiting = waiting::Waiting<Expected>;

/// A connection: the writing half, the requests waiting on it, and its reader task (stopped,
/// failing what still waits on it, when the connection is dropped: see [`ReaderTask`]).
struct Open {
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    waiting: Waiting,
    _reader: ReaderTask,
}

impl Open {
    fn alive(&self) -> bool {
        self.waiting.alive()
    }

    /// Writes `packed` (whole RESP commands, one per bound in `max_answers`) within `limit`;
    /// their answers, each no longer than its bound in bytes, come on the receivers, in order.
    /// A write that fails or does not finish in time (Redis stopped reading) fails the
    /// connection.
    async fn send(
        &mut self,
        packed: &[u8],
        max_answers: &[usize],
        limit: Duration,
    ) -> Result<Vec<oneshot::Receiver<Answer>>, PipeError> {
        let mut receivers = Vec::with_capacity(max_answers.len());
        for &max_answer in max_answers {
            let (answer, answered) = oneshot::channel();
            let expected = Expected {
                max_answer: max_answer.min(MAX_ANSWER),
                answer,
            };
            // Queued before the first byte is written, so the answer always finds its request.
            if let Err((_, why)) = self.waiting.push(expected) {
                return Err(PipeError::Lost(why));
            }
            receivers.push(answered);
        }
        // The flush matters over TLS: a TLS stream may keep the last ciphertext of a write
        // until it is flushed (on a plain socket it does nothing).
        let written = tokio::time::timeout(limit, async {
            self.writer.write_all(packed).await?;
            self.writer.flush().await
        })
        .await;
        let error = match written {
            Ok(Ok(())) => return Ok(receivers),
            Ok(Err(error)) => PipeError::Io(error),
            Err(_) => PipeError::Timeout(limit),
        };
        fail_all(
            &self.waiting,
            PipeError::Lost(format!("writing failed: {error}")),
        );
        Err(error)
    }

    /// Whether this is the connection `waiting` belongs to.
    fn is(&self, waiting: &Waiting) -> bool {
        self.waiting.is(waiting)
    }
}

/// The answer on `answered`, if it comes by `deadline` (`limit` after the request was sent).
async fn wait(
    answered: oneshot::Receiver<Answer>,
    deadline: tokio::time::Instant,
    limit: Duration,
) -> Answer {
    match tokio::time::timeout_at(deadline, answered).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(PipeError::Lost("the reader stopped".into())),
        Err(_) => Err(PipeError::Timeout(limit)),
    }
}

/// A connection to one Redis, opened again when it fails.
pub struct Pipe {
    info: ConnectionInfo,
    tls: Option<ClientTls>,
    /// The name each connection gives itself (`CLIENT SETNAME`), if any.
    name: Option<String>,
    /// Once this proxy has fenced: the store's fence key and the token it must hold, checked
    /// by every connection opened after (see [`Pipe::join_fence`]).
    fence: std::sync::OnceLock<(Vec<u8>, Vec<u8>)>,
    connect_timeout: Duration,
    response_timeout: Duration,
    open: tokio::sync::Mutex<Option<Open>>,
}

impl Pipe {
    /// Connects to the Redis `url` names (`redis://` or, with `tls`, `rediss://`), logs in and
    /// selects its database as the URL says, names the connection `name` if given, and checks
    /// that it answers.
    pub async fn connect(
        url: &str,
        tls: Option<ClientTls>,
        name: Option<String>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Self, PipeError> {
        let info = url
            .into_connection_info()
            .map_err(|e| PipeError::Url(e.to_string()))?;
        let pipe = Self {
            info,
            tls,
            name,
            fence: std::sync::OnceLock::new(),
            connect_timeout,
            response_timeout,
            open: tokio::sync::Mutex::new(None),
        };
        *pipe.open.lock().await = Some(pipe.open().await?);
        Ok(pipe)
    }

    /// Sends `packed` (one whole RESP command) and waits for its answer, which may be no longer
    /// than `max_answer` bytes of RESP: a longer one fails the connection (see
    /// [`super::answer_scan`]). One write: the bytes leave as soon as this is called (after a
    /// request being written now, if any).
    pub async fn request(&self, packed: &[u8], max_answer: usize) -> Result<Value, PipeError> {
        self.request_all(packed, &[max_answer])
            .await?
            .pop()
            .expect("one answer a command")
    }

    /// Sends `packed`, as many whole RESP commands as `max_answers` has bounds, in one write,
    /// and waits for their answers: each in its own result (Redis answers each command of a
    /// pipeline on its own, errors included), all within the response timeout. `Err` when the
    /// connection failed before anything was sent; a connection that fails later fails every
    /// answer still to come.
    pub async fn request_all(
        &self,
        packed: &[u8],
        max_answers: &[usize],
    ) -> Result<Vec<Answer>, PipeError> {
        let (receivers, waiting) = {
            let mut slot = self.open.lock().await;
            let mut open = match slot.take() {
                Some(open) if open.alive() => open,
                _ => self.open().await?,
            };
            // Out of its slot while it writes: if this future is dropped part-way through the
            // write, the connection, its stream now holding half a command, goes with it (and
            // its reader fails what still waits on it) instead of being used again, where
            // Redis would read the next command as the rest of this one.
            let receivers = open
                .send(packed, max_answers, self.response_timeout)
                .await?;
            let waiting = open.waiting.clone();
            *slot = Some(open);
            (receivers, waiting)
        };
        let deadline = tokio::time::Instant::now() + self.response_timeout;
        let mut answers = Vec::with_capacity(receivers.len());
        for answered in receivers {
            let answer = wait(answered, deadline, self.response_timeout).await;
            if let Err(PipeError::Timeout(limit)) = &answer {
                // A connection that left an answer out may be half-open or jammed; and an
                // answer it still sends must not reach a later request. Retire it: its waiting
                // requests fail now (the rest of these among them), and the next request opens
                // a new one.
                fail_all(
                    &waiting,
                    PipeError::Lost(format!("an answer did not come within {limit:?}")),
                );
                let mut slot = self.open.lock().await;
                if slot.as_ref().is_some_and(|open| open.is(&waiting)) {
                    *slot = None;
                }
            }
            answers.push(answer);
        }
        Ok(answers)
    }

    /// The host this connects to.
    pub fn host(&self) -> &str {
        match self.info.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host,
            _ => "",
        }
    }

    /// A new connection, logged in, on its database, and answering.
    async fn open(&self) -> Result<Open, PipeError> {
        let (host, port) = match self.info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host.as_str(), *port)
            }
            other => return Err(PipeError::Url(format!("not a TCP address: {other:?}"))),
        };
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| PipeError::Timeout(self.connect_timeout))??;
        // Requests are whole when written; waiting to coalesce them would only delay them.
        stream.set_nodelay(true)?;
        let mut open = match &self.tls {
            None => {
                let (reader, writer) = stream.into_split();
                start(reader, writer)
            }
            Some(tls) => {
                let (reader, writer) = tokio::io::split(tls.connect(host, stream).await?);
                start(reader, writer)
            }
        };
        for (step, command, expected) in self.greeting() {
            let answered = open
                .send(
                    &command.get_packed_command(),
                    &[SHORT_ANSWER],
                    self.connect_timeout,
                )
                .await?
                .pop()
                .expect("one answer a command");
            let deadline = tokio::time::Instant::now() + self.connect_timeout;
            let answer = match wait(answered, deadline, self.connect_timeout).await {
                Ok(answer) if answer == expected => continue,
                // No key: lost with Redis's data (a restart without persistence, a replica
                // behind): as a `cloak server` restarted knows no token, let the proxy in.
                Ok(Value::Nil) if step == FENCE_STEP => continue,
                Ok(_) if step == FENCE_STEP => return Err(PipeError::FencedOff),
                Ok(other) => format!("{other:?}"),
                Err(PipeError::Answer(error)) => error,
                Err(error) => return Err(error),
            };
            return Err(PipeError::Refused { step, answer });
        }
        Ok(open)
    }

    /// What a new connection sends first, and the answers it needs: `AUTH` and `SELECT` as the
    /// URL asks, its name if it has one, then a `PING`, so that a server that is not Redis is
    /// found out at once.
    fn greeting(&self) -> Vec<(&'static str, redis::Cmd, Value)> {
        let settings = self.info.redis_settings();
        let mut greeting = Vec::new();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            greeting.push(("authentication", auth, Value::Okay));
        }
        if settings.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(settings.db());
            greeting.push(("selecting the database", select, Value::Okay));
        }
        if let Some(name) = &self.name {
            let mut setname = redis::cmd("CLIENT");
            setname.arg("SETNAME").arg(name);
            greeting.push((
                "naming the connection (CLIENT SETNAME)",
                setname,
                Value::Okay,
            ));
        }
        if let Some((key, token)) = self.fence.get() {
            let mut get = redis::cmd("GET");
            get.arg(key);
            greeting.push((FENCE_STEP, get, Value::BulkString(token.clone())));
        }
        greeting.push((
            "PING",
            redis::cmd("PING"),
            Value::SimpleString("PONG".into()),
        ));
        greeting
    }

    /// From now on every connection this opens first checks that `key` holds `token`, the
    /// fence this proxy raised: a proxy fenced off by a later one (which wrote its own token
    /// there) has its connections refused, [`PipeError::FencedOff`], instead of writing on.
    pub fn join_fence(&self, key: Vec<u8>, token: Vec<u8>) {
        let _ = self.fence.set((key, token));
    }

    /// The token [`Pipe::join_fence`] was given, if it was.
    pub fn fence_token(&self) -> Option<Vec<u8>> {
        self.fence.get().map(|(_, token)| token.clone())
    }
}

/// The greeting's step that checks the fence (see [`Pipe::join_fence`]).
const FENCE_STEP: &str = "checking the store's fence";

/// `commands` packed one after another, and each one's bound on its answer: what
/// [`Pipe::request_all`] takes.
pub fn pack_all(commands: &[(redis::Cmd, usize)]) -> (Vec<u8>, Vec<usize>) {
    let mut packed = Vec::new();
    for (command, _) in commands {
        command.write_packed_command(&mut packed);
    }
    (packed, commands.iter().map(|(_, bound)| *bound).collect())
}

/// The reader task of a new connection.
fn start(
    reader: impl AsyncRead + Send + Unpin + 'static,
    writer: impl AsyncWrite + Send + Unpin + 'static,
) -> Open {
    let waiting = Waiting::new();
    let reader = ReaderTask::spawn(read_answers(reader, waiting.clone()));
    Open {
        writer: Box::new(writer),
        waiting,
        _reader: reader,
    }
}

/// Marks the connection dead (keeping the first reason given) and fails every request waiting
/// on it: the oldest, whose answer was coming, with `why`, the others as lost because of it.
fn fail_all(waiting: &Waiting, why: PipeError) {
    let reason = why.to_string();
    let mut queue = waiting.fail(&reason).into_iter();
    if let Some(first) = queue.next() {
        let _ = first.answer.send(Err(why));
    }
    for expected in queue {
        let _ = expected.answer.send(Err(PipeError::Lost(reason.clone())));
    }
}

/// Fails the connection when the reader stops for any reason, a panic included, so no request
/// waits on a connection that nobody reads any more.
struct FailOnExit(Waiting);

impl Drop for FailOnExit {
    fn drop(&mut self) {
        fail_all(
            &self.0,
            PipeError::Lost("the connection's reader stopped".into()),
        );
    }
}

/// Capacity the read buffer is brought back to once it is empty, so one huge answer does not
/// keep its memory for the connection's life.
const READ_BUFFER: usize = 64 * 1024;

async fn read_answers(mut reader: impl AsyncRead + Unpin, waiting: Waiting) {
    let _guard = FailOnExit(waiting.clone());
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    // The answer at the start of `buf`, checked as far as it has come.
    let mut scan = AnswerScan::default();
    let why = loop {
        // The answer coming is the oldest waiting request's, and may be as long as it allows.
        let Ok(allowed) = waiting.oldest(|expected| expected.map(|e| e.max_answer)) else {
            return;
        };
        let checked = match allowed {
            _ if buf.is_empty() => Ok(None),
            Some(allowed) => scan.resume(&buf, allowed),
            None => Err(BadAnswer::Unrequested),
        };
        let end = match checked {
            Ok(Some(end)) => end,
            // Reads add to an answer the scan has bounded: the buffer holds at most what the
            // request allows, and what one read brings.
            Ok(None) => match reader.read_buf(&mut buf).await {
                Ok(0) => break PipeError::Lost("Redis closed the connection".into()),
                Ok(_) => continue,
                Err(error) => break PipeError::Lost(format!("reading failed: {error}")),
            },
            Err(bad) => break bad.into(),
        };
        scan = AnswerScan::default();
        let answer = match redis::parse_redis_value(&buf[..end]) {
            // In Redis's own words (`MOVED 3999 127.0.0.1:7002`), which the cluster's routing
            // reads.
            Ok(Value::ServerError(error)) => Err(PipeError::Answer(match error.details() {
                Some(details) => format!("{} {details}", error.code()),
                None => error.code().to_string(),
            })),
            Ok(value) => Ok(value),
            Err(error) => {
                break PipeError::Answer(format!("Redis sent an answer that is not RESP: {error}"));
            }
        };
        buf.advance(end);
        if buf.is_empty() && buf.capacity() > 16 * READ_BUFFER {
            buf = BytesMut::with_capacity(READ_BUFFER);
        }
        let Ok(next) = waiting.pop() else {
            return;
        };
        // Some: the answer was checked against the front request's bound, and only this task
        // takes requests off the queue. The requester may have given up waiting (a timeout):
        // nothing to deliver then.
        if let Some(expected) = next {
            drop(expected.answer.send(answer));
        }
    };
    fail_all(&waiting, why);
}
