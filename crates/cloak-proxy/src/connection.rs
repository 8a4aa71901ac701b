//! One client connection: requests in, replies out, in order.
//!
//! The reading half decodes requests and starts each one at once, so a pipelining client keeps
//! many commands in flight; the writing half answers them strictly in the order they came, as
//! RESP requires, writing pipelined replies together. A protocol error gets its `Protocol error`
//! reply and closes only this connection.
//!
//! A connection on a TLS listener first completes its handshake, bounded by the listener's
//! handshake timeout; until then it has sent nothing the session sees, and it counts against
//! `--max-clients` like any other, so a flood of slow handshakes is bounded as slow clients are.
//! After the handshake the same pre-AUTH request limits apply as on the plain port.
//!
//! When a password is set, a connection that has not authenticated within `--auth-timeout` of
//! connecting (or of `RESET`) is told so and closed, and one crowded out by newer
//! unauthenticated connections (see `clients`) likewise: a socket that never authenticates holds
//! its place for a bounded time, and only within the share of places left to such sockets. That
//! holds wherever its connection waits (for a request, for the request budget, for room to queue
//! a reply); one whose replies are not being read is closed without the error, and its task
//! ends within a bounded time too (see `serve_halves`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Buf, Bytes, BytesMut};
use cloak_core::Outcome;
use cloak_storage::tls::ServerTls;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::FrontEnd;
use crate::budget::{self, Budget, CONNECTION_PENDING_BYTES};
use crate::clients::Registration;
use crate::resp::{Protocol, Reply, RequestDecoder, RequestLimits};
use crate::session::{Pending, Session};
use crate::unread::Unread;

/// Most requests of one client in flight at once; a client pipelining deeper waits.
const PIPELINE: usize = 1024;

/// Replies gathered before a write is tried even though more are ready. A client that keeps
/// sending never lets the queue run dry, so waiting for that would hold its replies back (and
/// in memory) until it paused.
pub const FLUSH_BYTES: usize = 64 * 1024;

/// A reply on its way out, with the protocol it is encoded in: the one in force when its
/// request was read (`HELLO 3`'s own reply is already RESP3).
type Queued = (Pending, Protocol);

/// Lists a connection the moment it is accepted (see `clients`): `None` if it is already gone.
pub fn register(stream: &TcpStream, front: &FrontEnd) -> Option<Registration> {
    let (Ok(addr), Ok(laddr)) = (stream.peer_addr(), stream.local_addr()) else {
        return None;
    };
    let id = front.next_client.fetch_add(1, Ordering::Relaxed) + 1;
    Some(
        front
            .clients
            .register(id, addr, laddr, front.password.is_none()),
    )
}

/// Serves one accepted connection, listed as `registration`; on a TLS listener (`tls`), after
/// its handshake.
pub async fn serve(
    stream: TcpStream,
    tls: Option<Arc<ServerTls>>,
    registration: Registration,
    front: Arc<FrontEnd>,
) {
    let _ = stream.set_nodelay(true);
    let client = &registration.client;
    match tls {
        None => {
            let (reader, writer) = stream.into_split();
            serve_halves(reader, writer, &front, client).await;
        }
        Some(tls) => {
            let handshake = tokio::select! {
                handshake = tls.accept(stream) => handshake,
                () = client.killed.notified() => return,
                () = client.crowded_out.notified() => return,
            };
            match handshake {
                Ok(stream) => {
                    let (reader, writer) = tokio::io::split(stream);
                    serve_halves(reader, writer, &front, client).await;
                }
                // Debug, not warn: anyone who can reach the port can fail a handshake, and
                // must not be able to fill the log.
                Err(error) => {
                    let addr = client.addr;
                    tracing::debug!(%addr, %error, "TLS client refused");
                }
            }
        }
    }
}

/// Requests in from `reader`, replies out to `writer`, until either side ends.
async fn serve_halves(
    reader: impl AsyncRead + Unpin,
    writer: impl AsyncWrite + Send + Unpin + 'static,
    front: &Arc<FrontEnd>,
    client: &Arc<crate::clients::Client>,
) {
    let (replies, queue) = mpsc::channel(PIPELINE);
    let unread = Unread::new(front.clients.clone(), client.clone());
    let mut writing = tokio::spawn(write_replies(
        writer,
        queue,
        front.reply_limit,
        front.replies_early,
        unread,
    ));
    let mut session = Session::new(front, client.clone());
    tokio::select! {
        // The client stopped sending (or sent its last request, or was closed with an error):
        // its replies still go out, unless it is killed meanwhile (`CLIENT KILL`, or cut at the
        // proxy-wide reply limit). A socket that never reads would otherwise keep its task
        // (which the accept loop counts) for good: an unauthenticated one's replies get no
        // longer than the time it had to authenticate, and a crowded-out one's (authenticated
        // since or not: it holds no place) a short grace, time to write its error. An
        // authenticated one holds its place in `--max-clients` and is cut at its reply limits.
        () = read_requests(reader, &mut session, client, replies) => {
            let limit = if front.clients.is_crowded_out(client.id) {
                Some(Instant::now() + CROWDED_OUT_GRACE)
            } else {
                (!session.authenticated()).then(|| Instant::now() + front.auth_timeout)
            };
            tokio::select! {
                _ = &mut writing => {}
                () = client.killed.notified() => writing.abort(),
                () = sleep_until_some(limit) => writing.abort(),
            }
        }
        // The writer gave up (the client stopped reading, or the socket failed): stop reading
        // too, which drops the read half and so closes the connection.
        _ = &mut writing => {}
        // `CLIENT KILL` from another client: close at once.
        () = client.killed.notified() => writing.abort(),
    }
    session.close().await;
}

async fn read_requests(
    mut reader: impl AsyncRead + Unpin,
    session: &mut Session<'_>,
    client: &crate::clients::Client,
    replies: mpsc::Sender<Queued>,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let budget = Budget::new(CONNECTION_PENDING_BYTES);
    let mut decoder = RequestDecoder::new(limits(session));
    let auth_timeout = session.auth_timeout();
    let mut auth_deadline = Instant::now() + auth_timeout;
    // Until it authenticates, a client is closed at its deadline or when newer ones crowd it
    // out, wherever it waits: for its next request, or for room to queue a reply.
    let closer = |session: &Session, auth_deadline| Closer {
        deadline: (!session.authenticated()).then_some((auth_deadline, auth_timeout)),
        client,
    };
    loop {
        loop {
            let pending = match decoder.decode(&mut buf) {
                Ok(Some(args)) => {
                    let was_authenticated = session.authenticated();
                    let bytes = args.iter().map(Bytes::len).sum();
                    // Before `AUTH`, waiting for the proxy-wide budget (which others' requests
                    // may hold) does not keep a client past its deadline or crowding out.
                    let charge = budget::charge(&budget, session.pending(), bytes);
                    let charge = match closer(session, auth_deadline).unless_closed(charge).await {
                        Ok(charge) => charge,
                        Err(why) => return close_with(&replies, session, why),
                    };
                    let pending = session.respond(args, charge).await;
                    // AUTH and HELLO open the store's limits; RESET closes them again.
                    if session.authenticated() != was_authenticated {
                        decoder.set_limits(limits(session));
                        auth_deadline = Instant::now() + auth_timeout;
                        session.note_authentication();
                    }
                    pending
                }
                Ok(None) => break,
                Err(error) => Pending::Close(Some(Reply::err(error))),
            };
            let last = matches!(pending, Pending::Close(_));
            let queued = replies.send((pending, session.protocol()));
            // Closed here without a word: its replies are not being read.
            match closer(session, auth_deadline).unless_closed(queued).await {
                Ok(Ok(())) if !last => {}
                _ => return,
            }
        }
        // `read_buf` grows the buffer only by what arrives (doubling as it fills), never by
        // what a header announces. It is cancel-safe: bytes read are in `buf`.
        let read = reader.read_buf(&mut buf);
        match closer(session, auth_deadline).unless_closed(read).await {
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => {}
            Err(why) => return close_with(&replies, session, why),
        }
    }
}

/// Closes the connection with an error saying `why`, its last reply; if there is no room for
/// it, the client is not reading, and is closed without it.
fn close_with(replies: &mpsc::Sender<Queued>, session: &Session, why: String) {
    let last = Pending::Close(Some(Reply::err(why)));
    let _ = replies.try_send((last, session.protocol()));
}

/// What closes a connection whatever it is waiting for.
struct Closer<'a> {
    /// An unauthenticated client's deadline, and the timeout it was given.
    deadline: Option<(Instant, std::time::Duration)>,
    client: &'a crate::clients::Client,
}

impl Closer<'_> {
    /// `work`'s outcome, or why the connection closes first. Crowding out is watched after
    /// `AUTH` too: one that was on its way when newer clients crowded this one out does not
    /// give it back its place (see `clients`).
    async fn unless_closed<T>(&self, work: impl Future<Output = T>) -> Result<T, String> {
        tokio::select! {
            done = work => Ok(done),
            () = sleep_until_some(self.deadline.map(|(at, _)| at)) => {
                let timeout = self.deadline.map_or(0.0, |(_, timeout)| timeout.as_secs_f64());
                Err(format!("authentication timeout: no AUTH within {timeout}s of connecting"))
            }
            () = self.client.crowded_out.notified() => Err(CROWDED_OUT.to_string()),
        }
    }
}

/// Waits until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// How long a crowded-out client's last replies (its error among them) may take to be written:
/// it holds no place, so its task must end soon whatever it does.
const CROWDED_OUT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What an unauthenticated client is told when newer ones crowd it out (the words of Redis's
/// `maxclients` refusal, which is what this is for unauthenticated clients).
const CROWDED_OUT: &str = "max number of unauthenticated clients reached; the oldest is closed";

/// What a session may send: a few KiB until it authenticates, then what the store takes.
fn limits(session: &Session) -> RequestLimits {
    if session.authenticated() {
        session.request_limits()
    } else {
        RequestLimits::UNAUTHENTICATED
    }
}

/// What the writer saw happen first.
enum Event {
    Wrote(std::io::Result<usize>),
    /// The next reply in order (`None` inside: close without one), its protocol, and whether it
    /// is the last; `None` once the reader is gone.
    Reply(Option<(Option<Reply>, Protocol, bool)>),
}

/// Writes replies in request order. Replies that are ready are gathered (up to [`FLUSH_BYTES`])
/// and written together, once none is queued, or with `early` once the next is not ready: a
/// scheme that answers on a schedule would otherwise hold ready replies behind a request that
/// waits for a later batch, and a pipelining client sends nothing new meanwhile (without
/// `early`, one write per reply as it lands would cost a pass-through scheme's throughput:
/// about 40% for `unsafe`). While the socket will not take more, replies keep being gathered, and
/// once `reply_limit` bytes wait unwritten the client is disconnected: it is not reading, and
/// would otherwise hold its replies (and the engine's outcomes behind them) forever. One reply
/// alone is always allowed, however large, so the limit never refuses a client that reads.
/// What waits unwritten is also counted in `unread`, toward the proxy-wide limit.
async fn write_replies(
    mut writer: impl AsyncWrite + Unpin,
    mut queue: mpsc::Receiver<Queued>,
    reply_limit: usize,
    early: bool,
    unread: Unread,
) {
    let mut out = BytesMut::with_capacity(16 * 1024);
    let mut head = None;
    let mut closing = false;
    loop {
        if closing && out.is_empty() {
            let _ = writer.shutdown().await;
            return;
        }
        // Both branches are cancel-safe: `write` writes nothing when cancelled, and the
        // reply being waited for stays in `head`.
        let event = if out.len() >= FLUSH_BYTES || closing {
            tokio::select! {
                biased;
                wrote = writer.write(&out) => Event::Wrote(wrote),
                next = next_reply(&mut queue, &mut head), if !closing => Event::Reply(next),
            }
        } else {
            // Below FLUSH_BYTES, replies are written once no more are queued (or, `early`, once
            // the next is not ready: `biased` takes a ready one first): a client that pipelines
            // gets them in few large writes, not one write per outcome as it lands.
            let may_write = early || (head.is_none() && queue.is_empty());
            tokio::select! {
                biased;
                next = next_reply(&mut queue, &mut head) => Event::Reply(next),
                wrote = writer.write(&out), if may_write && !out.is_empty() => {
                    Event::Wrote(wrote)
                }
            }
        };
        match event {
            Event::Wrote(Ok(0) | Err(_)) => return,
            Event::Wrote(Ok(n)) => {
                out.advance(n);
                unread.set(out.len());
                // Everything gathered is written: push it out. Over TLS the last ciphertext
                // may otherwise wait in the TLS stream for the next write (on a plain socket
                // this does nothing).
                if out.is_empty() && writer.flush().await.is_err() {
                    return;
                }
            }
            Event::Reply(None) => closing = true,
            Event::Reply(Some((reply, protocol, last))) => {
                if out.len() >= reply_limit {
                    tracing::warn!(
                        unread = out.len(),
                        reply_limit,
                        "disconnected a client that does not read its replies"
                    );
                    return;
                }
                if let Some(reply) = reply {
                    reply.encode(&mut out, protocol);
                    unread.set(out.len());
                }
                closing = last;
            }
        }
    }
}

/// The next reply in request order, waiting for the engine if needed. Cancel-safe: a request
/// taken from the queue waits in `head` until its outcome is there.
async fn next_reply(
    queue: &mut mpsc::Receiver<Queued>,
    head: &mut Option<Queued>,
) -> Option<(Option<Reply>, Protocol, bool)> {
    let (pending, protocol) = match head {
        Some((pending, protocol)) => (pending, *protocol),
        None => {
            let (pending, protocol) = head.insert(queue.recv().await?);
            (pending, *protocol)
        }
    };
    let stopped = || Reply::err("the proxy is shutting down");
    match pending {
        Pending::Later(outcome) => {
            *pending = Pending::Now(outcome.await.map_or_else(|_| stopped(), to_reply));
        }
        Pending::OnPartition(outcome, on) => {
            let reply = outcome.await.map_or_else(|_| stopped(), |o| on.reply(o));
            *pending = Pending::Now(reply);
        }
        Pending::Forwarded(forwarded, _charge) => {
            // The charge is let go with the reply, as the engine lets a command's go.
            *pending = Pending::Now(forwarded.await.unwrap_or_else(|_| stopped()));
        }
        Pending::Now(_) | Pending::Close(_) => {}
    }
    match head.take() {
        Some((Pending::Now(reply), _)) => Some((Some(reply), protocol, false)),
        Some((Pending::Close(reply), _)) => Some((reply, protocol, true)),
        Some((Pending::Later(_) | Pending::OnPartition(..) | Pending::Forwarded(..), _)) | None => {
            unreachable!("the head was taken or resolved above")
        }
    }
}

/// The reply a client gets for an outcome of the engine.
pub(crate) fn to_reply(outcome: Outcome) -> Reply {
    match outcome {
        Outcome::Value(value) => Reply::Bulk(value),
        Outcome::Values(values) => Reply::Array(values.into_iter().map(Reply::Bulk).collect()),
        Outcome::Ok => Reply::ok(),
        Outcome::Integer(n) => Reply::Integer(n),
        Outcome::Status(status) => Reply::status(status),
        // A map in RESP3, RESP2's flat array of fields and values (as Redis's HGETALL).
        Outcome::Pairs(pairs) => Reply::Map(
            pairs
                .into_iter()
                .map(|(field, value)| (Reply::Bulk(Some(field)), Reply::Bulk(Some(value))))
                .collect(),
        ),
        Outcome::Error(error) => Reply::Error(error.redis_line()),
        Outcome::Multi(outcomes) => Reply::Array(outcomes.into_iter().map(to_reply).collect()),
        Outcome::Aborted => Reply::NilArray,
        // Scripting takes this outcome itself (see `scripting`); it never reaches a client.
        Outcome::ScriptStarted(_) => Reply::err("internal error: a script's start was answered"),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll};

    use bytes::Bytes;

    use super::*;

    /// Takes every write whole and remembers its size.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<Vec<usize>>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.0.lock().unwrap().push(buf.len());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A writer of `queue`'s replies into `writes`, with no reply limit.
    fn spawn_writer(
        writes: &Writes,
        queue: mpsc::Receiver<Queued>,
        early: bool,
    ) -> tokio::task::JoinHandle<()> {
        let list = Arc::new(crate::clients::ClientList::new(1, usize::MAX));
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let client = list.register(1, addr, addr, true).client.clone();
        let unread = Unread::new(list.clone(), client);
        tokio::spawn(write_replies(
            writes.clone(),
            queue,
            usize::MAX,
            early,
            unread,
        ))
    }

    #[tokio::test]
    async fn replies_go_out_while_the_client_keeps_sending() {
        // A full queue stands for a client that never pauses: replies must not wait for it
        // to run dry.
        let (replies, queue) = mpsc::channel(PIPELINE);
        let value = Bytes::from(vec![b'v'; 2048]);
        for _ in 0..PIPELINE {
            replies
                .send((
                    Pending::Now(Reply::Bulk(Some(value.clone()))),
                    Protocol::Resp2,
                ))
                .await
                .unwrap();
        }
        let writes = Writes::default();
        let writer = spawn_writer(&writes, queue, false);
        drop(replies);
        writer.await.unwrap();
        let sizes = writes.0.lock().unwrap().clone();
        assert!(sizes.len() > 1, "{sizes:?}");
        assert!(
            sizes.iter().all(|&n| n < FLUSH_BYTES + 4096),
            "no write holds much more than {FLUSH_BYTES} bytes: {sizes:?}"
        );
        assert_eq!(sizes.iter().sum::<usize>(), PIPELINE * (2048 + 9));
    }

    /// Bytes written once a ready reply sits ahead of one still waiting for its outcome (which
    /// comes after a pause), and in all.
    async fn written_ahead_of_a_waiting_reply(early: bool) -> (usize, usize) {
        let (replies, queue) = mpsc::channel(PIPELINE);
        let (outcome, waiting) = tokio::sync::oneshot::channel();
        let ready = Pending::Now(Reply::Bulk(Some(Bytes::from_static(b"ready"))));
        replies.send((ready, Protocol::Resp2)).await.unwrap();
        replies
            .send((Pending::Later(waiting), Protocol::Resp2))
            .await
            .unwrap();
        let writes = Writes::default();
        let writer = spawn_writer(&writes, queue, early);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let ahead = writes.0.lock().unwrap().iter().sum();
        outcome
            .send(Outcome::Value(Some(Bytes::from_static(b"later"))))
            .unwrap();
        drop(replies);
        writer.await.unwrap();
        let all = writes.0.lock().unwrap().iter().sum();
        (ahead, all)
    }

    #[tokio::test]
    async fn a_ready_reply_waits_behind_one_not_ready_only_when_replies_are_gathered() {
        let reply = "$5\r\nready\r\n".len();
        assert_eq!(
            written_ahead_of_a_waiting_reply(true).await,
            (reply, 2 * reply)
        );
        assert_eq!(
            written_ahead_of_a_waiting_reply(false).await,
            (0, 2 * reply)
        );
    }
}
