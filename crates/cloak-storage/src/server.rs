//! `cloak server`: any [`Storage`] backend served over TCP with the [`wire`] protocol.
//!
//! Each connection is served in order: requests are applied one after another and answered in
//! the order they came, with answers to pipelined requests written out together. Connections are
//! independent; a malformed frame closes only its own connection.
//!
//! A [`Guard`] decides who may connect: TLS (with client certificates, only proxies holding one
//! the server's CA signed), and a storage secret proved in the [`handshake`]. Both are checked
//! before the first frame is read, each bounded by a timeout, so a peer that is refused, or
//! that stalls, never reaches the store and holds its connection for at most that long. The
//! guard also caps how many admitted connections are open at once, and `admission` how many
//! are still handshaking: a flood of connections (refused or not) cannot make the server hold
//! more than that many buffers and tasks, nor keep a proxy that proves itself out.
//!
//! A proxy raises a fence (the `fence` module) before it recovers the store: every other connection is stopped
//! and what it started waited out, so nothing a killed proxy left on its way lands in the
//! middle of the new one's scan.

use std::future::Future;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use crate::admission::{Admission, Handshaking, RateLimited};
use crate::fence::{FENCE_WAIT, Fences, Lease};
use crate::handshake::{self, HandshakeError, StorageSecret};
use crate::tls::{ServerTls, TlsError};
use crate::wire::{self, Request, WireError};
use crate::{Storage, StorageError, StorageOp, StorageReply};

/// Who may use the server.
#[derive(Clone, Default)]
pub struct Guard {
    /// TLS on every connection; with a client CA, only proxies with a certificate it signed.
    pub tls: Option<Arc<ServerTls>>,
    /// A secret every proxy must prove it knows.
    pub secret: Option<StorageSecret>,
    /// Where the last fence's token is kept across restarts (`None`: in memory only; see the
    /// `fence` module).
    pub fence_token_file: Option<std::path::PathBuf>,
    /// At most this many admitted connections (past TLS and the handshake) at once (`None`:
    /// no limit). While they are all taken, a new connection is greeted as "full" and closed at
    /// once (on TLS, just closed: a plaintext greeting would be garbage to a TLS client).
    pub max_connections: Option<usize>,
}

impl Guard {
    /// Whether whoever connects must prove who they are (a client certificate or the secret).
    pub fn authenticates(&self) -> bool {
        self.secret.is_some()
            || self
                .tls
                .as_ref()
                .is_some_and(|tls| tls.requires_client_certificate())
    }
}

/// Why a connection ended other than by its peer closing it.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("refused: {0}")]
    Tls(#[from] TlsError),
    #[error("refused: {0}")]
    Handshake(#[from] HandshakeError),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("closed while handshaking: newer connections needed its place")]
    CrowdedOut,
    #[error("refused: the server reached --max-connections while it was handshaking")]
    Full,
    #[error("closed by a fence: a proxy is starting on this store")]
    Fenced,
    #[error("refused: {}", fenced_off())]
    FencedOff,
}

impl From<std::io::Error> for Ended {
    fn from(error: std::io::Error) -> Self {
        Ended::Wire(error.into())
    }
}

/// What a proxy fenced off by a later one is told when it connects again.
fn fenced_off() -> String {
    format!(
        "{} (its fence named another token); this proxy stops, or the two would overwrite each \
         other's elements",
        cloak_core::FENCED_OFF
    )
}

/// Accepts connections from anyone until `shutdown` completes, then closes every connection.
pub async fn serve(
    listener: TcpListener,
    storage: Arc<dyn Storage>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_guarded(listener, storage, Guard::default(), shutdown).await
}

/// Accepts connections that pass `guard` until `shutdown` completes, then closes every
/// connection.
pub async fn serve_guarded(
    listener: TcpListener,
    storage: Arc<dyn Storage>,
    guard: Guard,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    // Dropping the set when we return aborts the connection tasks.
    let mut connections = tokio::task::JoinSet::new();
    let admission = Admission::new(guard.max_connections);
    let fences = Arc::new(Fences::open(guard.fence_token_file.clone())?);
    let mut turned_away = RateLimited::default();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(error) => {
                        // Out of file descriptors and the like: keep serving the others.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Finished connections are only reaped once joined.
                while connections.try_join_next().is_some() {}
                if admission.is_full() {
                    if guard.tls.is_none() {
                        handshake::turn_away(&stream);
                    }
                    if let Some(count) = turned_away.note() {
                        tracing::warn!(
                            %peer,
                            limit = guard.max_connections,
                            turned_away = count,
                            "at the connection limit (--max-connections): connections turned away"
                        );
                    }
                    continue;
                }
                let storage = storage.clone();
                let guard = guard.clone();
                let admission = admission.clone();
                let fences = fences.clone();
                connections.spawn(async move {
                    tracing::debug!(%peer, "storage client connected");
                    match serve_peer(stream, storage, &guard, &admission, &fences).await {
                        Ok(()) | Err(Ended::Wire(WireError::Closed)) => {}
                        // A proxy that stops drops its TLS connections without a close_notify.
                        Err(Ended::Wire(WireError::Io(error)))
                            if error.kind() == std::io::ErrorKind::UnexpectedEof =>
                        {
                            tracing::debug!(%peer, %error, "storage connection closed");
                        }
                        Err(error @ (Ended::Tls(_) | Ended::Handshake(_) | Ended::Full)) => {
                            admission.note_refused(peer, &error);
                        }
                        Err(error @ (Ended::CrowdedOut | Ended::Fenced)) => {
                            tracing::debug!(%peer, %error, "storage connection closed");
                        }
                        Err(error) => tracing::warn!(%peer, %error, "storage connection closed"),
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => return Ok(()),
        }
    }
}

/// TLS and the handshake first, as `guard` asks, while `admission` keeps a place among the
/// handshaking; then, admitted (and open to `fences`), requests until the peer leaves or a
/// fence stops it.
async fn serve_peer(
    stream: TcpStream,
    storage: Arc<dyn Storage>,
    guard: &Guard,
    admission: &Arc<Admission>,
    fences: &Arc<Fences>,
) -> Result<(), Ended> {
    stream.set_nodelay(true)?;
    let secret = guard.secret.as_ref();
    // Fenceable from its accept: a fence stops a connection still handshaking too, so none
    // slips past it between its handshake and its first request.
    let mut lease = fences.lease();
    let handshaking = admission.start();
    match &guard.tls {
        None => {
            let mut stream = stream;
            while_handshaking(&handshaking, &mut lease, async {
                Ok(handshake::admit(&mut stream, secret).await?)
            })
            .await?;
            let _admitted = admission.admit(handshaking).ok_or(Ended::Full)?;
            let (reader, writer) = stream.into_split();
            serve_connection(reader, writer, storage, lease).await
        }
        Some(tls) => {
            let stream = while_handshaking(&handshaking, &mut lease, async {
                let mut stream = tls.accept(stream).await?;
                handshake::admit(&mut stream, secret).await?;
                Ok(stream)
            })
            .await?;
            let _admitted = admission.admit(handshaking).ok_or(Ended::Full)?;
            let (reader, writer) = tokio::io::split(stream);
            serve_connection(reader, writer, storage, lease).await
        }
    }
}

/// Runs `handshake` unless newer connections crowd this one out, or a fence stops it, first.
async fn while_handshaking<T>(
    handshaking: &Handshaking,
    lease: &mut Lease,
    handshake: impl Future<Output = Result<T, Ended>>,
) -> Result<T, Ended> {
    tokio::select! {
        done = handshake => done,
        () = handshaking.crowded_out.notified() => Err(Ended::CrowdedOut),
        () = lease.fenced() => Err(Ended::Fenced),
    }
}

/// Serves one admitted connection's requests in order until its peer leaves or a fence stops
/// it. A fence is checked before each request starts, never during one: a request started is
/// applied whole, and the fence waits for it (see the `fence` module). Writing answers is no
/// request: a fence stops it, so a peer that does not read cannot hold a fence up.
async fn serve_connection(
    mut reader: impl AsyncRead + Unpin,
    mut writer: impl AsyncWrite + Unpin,
    storage: Arc<dyn Storage>,
    mut lease: Lease,
) -> Result<(), Ended> {
    let mut input = BytesMut::with_capacity(64 * 1024);
    let mut answers = Vec::new();
    // Whether a request took long enough for the proxy to have given up on the ones queued
    // behind it, and they are not all served yet (see `peer_left`).
    let mut after_slow = false;
    loop {
        // The fence first: a frame already buffered when it came is dropped unstarted.
        let frame = tokio::select! {
            biased;
            () = lease.fenced() => return Err(Ended::Fenced),
            frame = wire::read_frame(&mut reader, &mut input) => frame?,
        };
        let (id, request) = match wire::decode_server_request(frame) {
            Ok(request) => request,
            Err(error) => {
                let answer = Err(StorageError(format!("protocol error: {error}")));
                answers.push(wire::encode_response(0, &answer));
                wire::write_frames(&mut writer, &answers).await?;
                return Err(error.into());
            }
        };
        let result = match request {
            // Reads and scans change nothing, however late.
            Request::Op(StorageOp::Write(_) | StorageOp::Delete(_))
                if after_slow && peer_left(&mut reader, &mut input).await? =>
            {
                // What was applied is still answered, for a peer that only half closed.
                wire::write_frames(&mut writer, &answers).await?;
                return Ok(());
            }
            Request::Op(op) => {
                let started = std::time::Instant::now();
                let result = storage.call(op).await;
                // Until the backlog behind a slow request is served, whatever comes between.
                after_slow = (after_slow || started.elapsed() >= SLOW_REQUEST) && has_frame(&input);
                result
            }
            // A fence waits for any fence in progress, which stops this connection meanwhile.
            Request::Fence(token) => tokio::select! {
                fenced = lease.fence(token, FENCE_WAIT) => match fenced {
                    Ok(stopped) => {
                        tracing::info!(stopped, "fence: a proxy is starting; other connections stopped");
                        Ok(StorageReply::Done)
                    }
                    Err(error) => Err(StorageError(format!("the fence failed: {error}"))),
                },
                () = lease.fenced() => return Err(Ended::Fenced),
            },
            Request::Join(token) if lease.may_join(&token) => Ok(StorageReply::Done),
            Request::Join(_) => {
                let refused = Err(StorageError(fenced_off()));
                answers.push(wire::encode_response(id, &refused));
                wire::write_frames(&mut writer, &answers).await?;
                return Err(Ended::FencedOff);
            }
        };
        answers.push(wire::encode_response(id, &result));
        // Answer pipelined requests together: write once nothing complete is buffered.
        if !has_frame(&input) {
            tokio::select! {
                written = wire::write_frames(&mut writer, &answers) => {
                    written?;
                }
                () = lease.fenced() => return Err(Ended::Fenced),
            }
            answers.clear();
        }
    }
}

/// A request that takes this long may have outlasted its proxy's patience with the requests
/// queued behind it: the next write is checked with [`peer_left`] first. Checking every write
/// would cost a read call for each, and `unsafe` sends one per SET.
const SLOW_REQUEST: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether the peer has closed the connection with nothing more to send, seen without waiting:
/// a proxy closes a connection it gives up on (an answer that did not come in time), and it
/// sends a request again on another connection. A request still unstarted here, behind a slow
/// one, would then be applied after the one that replaced it, and after what the proxy wrote
/// next: dropped instead, as if it had never arrived. Bytes that are there are read into
/// `input`, as the next frame's read would have. Not seen: a close behind bytes still to
/// read (the end of a stream shows only once everything before it is read, and one read is
/// all this takes: a large write queued behind the stale one hides the close), and requests
/// queued while the whole server stood still (a paused machine), behind no slow request of
/// their own connection. A mitigation, then, not a guarantee: a guarantee would have the
/// connection that replaces one name it, for the server to stop the old one as a fence does.
async fn peer_left(
    reader: &mut (impl AsyncRead + Unpin),
    input: &mut BytesMut,
) -> Result<bool, WireError> {
    match futures::FutureExt::now_or_never(reader.read_buf(input)) {
        Some(Ok(0)) => Ok(true),
        Some(Ok(_)) | None => Ok(false),
        Some(Err(error)) => Err(error.into()),
    }
}

fn has_frame(input: &BytesMut) -> bool {
    input.len() >= 4
        && input.len() >= 4 + u32::from_le_bytes(input[..4].try_into().expect("4 bytes")) as usize
}
